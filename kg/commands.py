"""Operator subcommands beside `serve` (status, stop, stdio, export, import, bundle, doctor).

Each talks to the running daemon over HTTP or to the storage root directly; registered on
the argument parser by `register`, run by `run`.
"""

import json
import sys
import urllib.error
import urllib.request

from . import __version__


def register(sub, add_common):
    p = sub.add_parser("status", help="is the daemon up: version, port, root, graphs, sessions")
    add_common(p)


def _get(cfg, path, timeout=2.0):
    host = cfg["host"] if cfg["host"] not in ("0.0.0.0", "::", "") else "127.0.0.1"
    if ":" in host:
        host = "[%s]" % host
    req = urllib.request.Request("http://%s:%d%s" % (host, cfg["port"], path))
    if cfg.get("token"):
        req.add_header("Authorization", "Bearer " + cfg["token"])
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def status(args, cfg):
    try:
        h = _get(cfg, "/health")
    except (OSError, urllib.error.URLError, ValueError) as exc:
        sys.stdout.write("kgd is not running on %s:%d (%s)\n" % (cfg["host"], cfg["port"], getattr(exc, "reason", exc)))
        return 1
    sys.stdout.write("kgd %s up on %s:%d for %.0fs: %d session(s), %d graph(s) loaded, root %s\n" % (
        h.get("version"), cfg["host"], cfg["port"], h.get("uptime_s", 0), h.get("sessions", 0),
        h.get("graphs_loaded", 0), cfg["root"]))
    return 0


COMMANDS = {"status": status}


def run(command, args, cfg):
    return COMMANDS[command](args, cfg)
