"""`kgd hook [--agent NAME] [--event EVENT]`: an agent's command hook (Claude Code runs
SessionStart hooks only as commands; Codex and Gemini CLI run only command hooks).

Rules owned here:
- Reads the hook input from stdin (at most 1 MiB; anything that is not a JSON object is dropped),
  POSTs it unchanged to /api/hooks (?agent=NAME&event=EVENT unless Claude Code's with no event
  named) of the daemon serving the root (the port in the root's lock
  file, else the configured one once /health says it is kgd), starting that daemon in the
  background when none runs, and prints the answer when it is a 200 with a non-empty JSON object.
- Exits 0 in every case and returns within BUDGET seconds, spawning and waiting included: a hook
  must never block or fail the session it serves. Problems go to stderr as one line.
- Keeps its import path small (no store, no HTTP server, no http.client): it runs once per event
  in a fresh Python.
- An unknown agent or a malformed event name is said on stderr and nothing is sent; `--help`
  prints the usage instead of waiting on stdin.
"""

import json
import os
import select
import socket
import sys
import time

from ..agents import dialects
from ..disk.files import lock_state
from ..disk.layout import Layout
from .config import DEFAULTS, ConfigError, connect_host, resolve_config

BUDGET = 1.9
MAX_INPUT = 1024 * 1024
PATH = "/api/hooks"


def read_input(stream, deadline):
    """stdin's bytes, or None when over MAX_INPUT or not closed in time."""
    fd = stream.fileno()
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_INPUT:
            return None
        chunks.append(chunk)


def _recv_all(sock, deadline):
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no answer in time")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = _content_length(head)
            if length is not None and len(body) >= length:
                return data


def _content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def post(host, port, path, body, token, deadline):
    """-> (status, body bytes). One HTTP/1.1 request over a fresh connection, within deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("out of time")
    headers = ["POST %s HTTP/1.1" % path, "Host: %s:%d" % ("[%s]" % host if ":" in host else host, port),
               "Content-Type: application/json", "Accept: application/json", "Content-Length: %d" % len(body),
               "Connection: close"]
    if token:
        headers.append("Authorization: Bearer %s" % token)
    return _exchange(host, port, ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + body, deadline)


def get(host, port, path, deadline):
    request = "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (path, host, port)
    return _exchange(host, port, request.encode("latin-1"), deadline)


def _exchange(host, port, request, deadline):
    sock = socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic()))
    try:
        sock.sendall(request)
        data = _recv_all(sock, deadline)
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ValueError("not an HTTP answer")
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return int(parts[1]), body


def _unchunk(body):
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out


def _is_kgd(host, port, deadline):
    try:
        status, body = get(host, port, "/health", deadline)
        obj = json.loads(body.decode("utf-8"))
    except (OSError, ValueError):
        return False
    return status == 200 and isinstance(obj, dict) and obj.get("status") == "ok" and "version" in obj


def forward(cfg, body, deadline, path=PATH):
    """POST body to the daemon serving cfg's root, starting it when none runs. -> (status, body)."""
    host = connect_host(cfg)
    layout = Layout(cfg["root"])
    spawned = False
    last_error = None
    while time.monotonic() < deadline:
        held, _, port, _ = lock_state(layout)
        if held and port:
            try:
                return post(host, port, path, body, cfg.get("token"), deadline)
            except OSError as exc:  # refused while it starts or stops: retry until the deadline
                last_error = exc
        elif not held and not spawned:
            if cfg["port"] and _is_kgd(host, cfg["port"], min(deadline, time.monotonic() + 0.3)):
                return post(host, cfg["port"], path, body, cfg.get("token"), deadline)
            from .client import spawn_daemon  # only now: subprocess and http.client cost start-up time

            spawn_daemon(cfg)
            spawned = True
        time.sleep(0.02)
    raise OSError("no kgd answered within %.1f s%s" % (BUDGET, ": %s" % last_error if last_error else ""))


HELP = """usage: kgd hook [--agent NAME] [--event EVENT] [--root DIR] [--port N] ...

An agent's command hook: reads the agent's hook input (JSON) on stdin, forwards it to the kgd
daemon (starting it when none runs) and prints the answer for the agent. Always exits 0, within
about 2 seconds.

  --agent NAME   the agent that runs this hook: %s (default claude)
  --event EVENT  the agent's event name, when its input does not carry one (Copilot CLI's
                 command hooks: sessionStart, userPromptSubmitted, postToolUse, agentStop)
""" % ", ".join(dialects.NAMES)


def hook_path(agent, event):
    """The /api/hooks path for an agent and event, or raise ValueError saying what is wrong."""
    agent = agent or dialects.CLAUDE
    if not dialects.known(agent):
        raise ValueError(dialects.unknown_message(agent))
    if event is not None and not (0 < len(event) <= 64 and event.isalnum() and event.isascii()):
        raise ValueError("--event takes an event name such as postToolUse")
    if agent == dialects.CLAUDE and event is None:
        return PATH
    return PATH + "?agent=" + agent + ("&event=" + event if event else "")


def hook(args, cfg):
    deadline = time.monotonic() + BUDGET
    try:
        path = hook_path(getattr(args, "agent", None), getattr(args, "event", None))
        body = read_input(sys.stdin, deadline)
        if body is None:
            raise ValueError("the hook input was over 1 MiB or never ended")
        obj = json.loads(body.decode("utf-8"))
        if not isinstance(obj, dict):
            raise ValueError("the hook input is not a JSON object")
        status, answer = forward(cfg, body, deadline, path)
        if status == 200 and answer.strip():
            reply = json.loads(answer.decode("utf-8"))
            if isinstance(reply, dict) and reply:
                out = sys.stdout.buffer
                out.write(answer.strip() + b"\n")
                out.flush()
        elif status != 200:
            sys.stderr.write("kgd hook: the daemon answered %d; no context added\n" % status)
    except Exception as exc:  # never fail the session this hook serves
        sys.stderr.write("kgd hook: %s; no context added\n" % (str(exc) or type(exc).__name__))
    except KeyboardInterrupt:
        pass
    return 0


class _Args:
    """What `kgd hook` takes from its command line: the settings' flags, --agent, --event and
    --help (unknown words are ignored: a hook must not fail over its command line)."""

    def __init__(self, argv):
        flags = {"--" + name.replace("_", "-"): name for name in DEFAULTS}
        flags.update({"--agent": "agent", "--event": "event"})
        self.agent = self.event = None
        self.help = False
        it = iter(argv)
        for word in it:
            name, eq, value = word.partition("=")
            if name == "--structured-output":
                continue
            if name in ("-h", "--help"):
                self.help = True
            elif name in flags:
                setattr(self, flags[name], value if eq else next(it, None))


def main(argv):
    """`kgd hook` started straight from kgd.py: no argparse, nothing of the rest of the CLI."""
    args = _Args(argv)
    if args.help:
        sys.stdout.write(HELP)
        return 0
    try:
        cfg = resolve_config(args)
    except ConfigError as exc:
        sys.stderr.write("kgd hook: %s\n" % exc)
        return 0
    return hook(args, cfg)

