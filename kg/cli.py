"""Command line and configuration (contract section 1): flags beat environment, which beats defaults.

`kgd` (or `kgd serve`) runs the daemon. Bad configuration exits non-zero with one clear line
and no traceback. Other subcommands (status, stop, stdio, export, import, bundle, doctor) are
dispatched from here too.
"""

import argparse
import logging
import os
import signal
import sys
import threading
import time

from . import __version__
from .errors import KgError

log = logging.getLogger("kgd")

DEFAULTS = {
    "host": ("KG_HOST", "127.0.0.1", str),
    "port": ("KG_HTTP_PORT", 8765, int),
    "root": ("KG_STORAGE_ROOT", "~/.knowledge-graph", str),
    "max_tokens": ("KG_MAX_TOKENS", 5000, int),
    "grace_days": ("KG_GRACE_PERIOD_DAYS", 7.0, float),
    "orphan_grace_days": ("KG_ORPHAN_GRACE_DAYS", 365.0, float),
    "save_interval": ("KG_SAVE_INTERVAL", 30.0, float),
    "session_ttl": ("KG_SESSION_TTL", 86400.0, float),
    "log_level": ("KG_LOG_LEVEL", "INFO", str),
    "token": ("KG_TOKEN", None, str),
}
LIMITS = {"port": (0, 65535), "max_tokens": (100, 10 ** 8), "grace_days": (0, 36500), "orphan_grace_days": (0, 36500),
          "save_interval": (0.05, 86400), "session_ttl": (1, 10 ** 9)}


class ConfigError(Exception):
    pass


def resolve_config(args, environ=None):
    """Merge flags, environment and defaults; raise ConfigError with one clear line."""
    environ = os.environ if environ is None else environ
    cfg = {}
    for name, (env, default, kind) in DEFAULTS.items():
        value = getattr(args, name, None)
        source = "--" + name.replace("_", "-")
        if value is None and environ.get(env) not in (None, ""):
            value, source = environ[env], env
        if value is None:
            cfg[name] = default
            continue
        try:
            value = kind(value)
        except (TypeError, ValueError):
            raise ConfigError("%s=%r is not a valid %s." % (source, value, "number" if kind is not str else "value"))
        if name in LIMITS and not LIMITS[name][0] <= value <= LIMITS[name][1]:
            raise ConfigError("%s=%r is out of range (%s to %s)." % (source, value, LIMITS[name][0], LIMITS[name][1]))
        cfg[name] = value
    level = str(cfg["log_level"]).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError("log level %r is not one of DEBUG, INFO, WARNING, ERROR." % cfg["log_level"])
    cfg["log_level"] = level
    cfg["root"] = os.path.abspath(os.path.expanduser(cfg["root"]))
    return cfg


def add_common(p):
    p.add_argument("--host")
    p.add_argument("--port")
    p.add_argument("--root")
    p.add_argument("--max-tokens", dest="max_tokens")
    p.add_argument("--log-level", dest="log_level")
    p.add_argument("--token")


def build_parser():
    parser = argparse.ArgumentParser(prog="kgd", description="kgd: knowledge-graph memory daemon for AI coding agents")
    parser.add_argument("--version", action="version", version="kgd " + __version__)
    add_common(parser)
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("serve", help="run the daemon (the default)")
    add_common(p)
    for action in p._actions:  # flags given before `serve` must not be reset by its defaults
        if action.dest != "help":
            action.default = argparse.SUPPRESS
    return parser, sub


def die(message, code=2):
    sys.stderr.write("kgd: %s\n" % message)
    sys.exit(code)


def release_startup_memory():
    """Hand the heap left over from start-up (compiling and loading the modules) back to the
    system: glibc keeps freed memory otherwise, and this is a long-running background service.
    A no-op where there is no glibc (macOS)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols include glibc's
    except (OSError, AttributeError, ImportError):
        pass


def serve(cfg):
    from .http import Daemon
    from .maintenance import Loop
    from .store import Settings, Store

    logging.basicConfig(level=getattr(logging, cfg["log_level"]), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(max_tokens=cfg["max_tokens"], grace_days=cfg["grace_days"],
                        orphan_grace_days=cfg["orphan_grace_days"], save_interval=cfg["save_interval"],
                        session_ttl=cfg["session_ttl"])
    store = Store(cfg["root"], settings)
    try:
        store.open("starting")
    except KgError as exc:
        die(exc.message)
    except OSError as exc:
        die("storage root %s is not usable: %s." % (cfg["root"], exc.strerror or exc))
    try:
        daemon = Daemon((cfg["host"], cfg["port"]), store, cfg["host"], cfg["token"])
    except OSError as exc:
        store.close()
        if exc.errno in (98, 48):
            die("port %s on %s is already in use (is kgd already running? try `kgd status`)." % (cfg["port"], cfg["host"]))
        die("cannot listen on %s:%s: %s." % (cfg["host"], cfg["port"], exc.strerror or exc))
    host, port = daemon.server_address[:2]
    shown = "[%s]" % host if ":" in host else host
    store.root_lock.update("port %d" % port)
    if cfg["host"] not in ("127.0.0.1", "localhost", "::1") and not cfg["token"]:
        log.warning("listening on %s WITHOUT a token: anyone who can reach this address can read and change the "
                    "memory. Set --token or KG_TOKEN, or bind to 127.0.0.1.", cfg["host"])
    loop = Loop(store, settings.save_interval, housekeeping=[daemon.reap]).start()
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server_thread = threading.Thread(target=daemon.serve_forever, kwargs={"poll_interval": 0.2}, name="kgd-http")
    server_thread.start()
    sys.stderr.write("kgd %s listening on http://%s:%d/ (root: %s)\n" % (__version__, shown, port, cfg["root"]))
    sys.stderr.flush()
    release_startup_memory()
    while not stop.wait(1.0):
        if not server_thread.is_alive():
            break
    log.info("stopping: finishing in-flight requests and flushing")
    daemon.shutdown()
    daemon.begin_stop()
    deadline = time.monotonic() + 10
    while daemon.open_connections() and time.monotonic() < deadline:
        time.sleep(0.05)
    daemon.server_close()
    server_thread.join(timeout=5)
    loop.stop()
    store.close()
    log.info("stopped")
    return 0


# Operator subcommands live in kg/commands.py, which the daemon itself never needs: `serve`
# does not import it (about 2 MB less resident memory for the background service).
OPERATOR_COMMANDS = ("status", "start", "stop", "stdio", "export", "import", "bundle", "doctor", "desktop")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, sub = build_parser()
    commands = None
    if any(a in OPERATOR_COMMANDS or a in ("-h", "--help") for a in argv):
        from . import commands
        commands.register(sub, add_common)
    args = parser.parse_args(argv)
    try:
        cfg = resolve_config(args)
    except ConfigError as exc:
        die(str(exc))
    command = args.command or "serve"
    if command == "serve":
        return serve(cfg)
    return commands.run(command, args, cfg)
