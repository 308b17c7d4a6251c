"""The MCP stdio bridge (`kgd stdio`), for clients that only spawn a command (Claude Desktop).

Rules owned here:
- stdin and stdout carry newline-delimited JSON-RPC and nothing else; logs go to stderr only.
- Each line read is POSTed as it is to the daemon's /mcp over one keep-alive connection, in the
  order read. A JSON-RPC answer (200, or 4xx/5xx carrying one) is written back as one line; 202
  writes nothing. A failure without a JSON-RPC body (401, 413, the daemon unreachable) becomes a
  JSON-RPC error for that request's id, and nothing for a notification.
- The daemon serving the storage root is used, or started in the background when none runs
  (commands.ensure_daemon: detached, log in ROOT/kgd.log, ~5 s to answer /health); when the
  connection breaks, the bridge finds or starts it once more before giving up on that message.
- End of stdin ends the bridge; the daemon keeps running for its other clients.
"""

import http.client
import json
import logging
import sys

from . import commands

log = logging.getLogger("kgd.stdio")

INTERNAL_ERROR = -32603


def _request_ids(line):
    """(ids of the requests in a line, parsed ok). Notifications and responses have no id to answer."""
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return [None], False
    msgs = msg if isinstance(msg, list) else [msg]
    return [m.get("id") for m in msgs if isinstance(m, dict) and "id" in m and "method" in m], True


def _error_line(ids, code, message, batch=False):
    errors = [{"jsonrpc": "2.0", "id": i, "error": {"code": code, "message": message}} for i in ids]
    if not errors:
        return None
    obj = errors if batch else errors[0]
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _one_line(body):
    """A JSON-RPC body as exactly one line (the daemon's compact JSON has no raw newline anyway)."""
    body = body.strip()
    if b"\n" in body or b"\r" in body:
        body = json.dumps(json.loads(body.decode("utf-8")), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return body


def _is_jsonrpc(data):
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    items = obj if isinstance(obj, list) else [obj]
    return bool(items) and all(isinstance(o, dict) and o.get("jsonrpc") == "2.0" for o in items)


class Bridge:
    def __init__(self, cfg, out):
        self.cfg = cfg
        self.out = out
        self.api = None

    def connect(self):
        port, proc = commands.ensure_daemon(self.cfg, timeout=5.0)
        if proc is not None:
            log.info("started kgd (pid %d) on port %d; its log is %s/%s", proc.pid, port, self.cfg["root"],
                     commands.LOG_NAME)
        if self.api is not None:
            self.api.close()
        self.api = commands.Api(commands.connect_host(self.cfg), port, self.cfg.get("token"), timeout=120)
        return port

    def forward(self, line):
        """-> the bytes to write back (one line, no newline) or None."""
        headers = {"Accept": "application/json, text/event-stream"}
        for attempt in (0, 1):
            try:
                if self.api is None:
                    self.connect()
                status, hdrs, data = self.api.request("POST", "/mcp", line, headers)
                break
            except (OSError, http.client.HTTPException, commands.CommandError) as exc:
                if self.api is not None:
                    self.api.close()
                self.api = None
                if attempt:
                    log.error("kgd is not reachable: %s", exc)
                    ids, _ = _request_ids(line)
                    return _error_line(ids, INTERNAL_ERROR, "kgd is not reachable: %s" % exc, line.lstrip()[:1] == b"[")
                log.warning("lost the daemon (%s); finding or starting it again", exc)
        if status == 202 or (status == 200 and not data.strip()):
            return None
        if data.strip() and _is_jsonrpc(data):
            return _one_line(data)
        try:
            detail = json.loads(data.decode("utf-8")).get("error")
        except (UnicodeDecodeError, ValueError, AttributeError):
            detail = data[:200].decode("utf-8", "replace")
        if status == 401:
            detail = "%s Give the bridge the daemon's token: KG_TOKEN or --token." % (detail or "unauthorized.")
        log.error("kgd answered %d: %s", status, detail)
        ids, _ = _request_ids(line)
        return _error_line(ids, INTERNAL_ERROR, "kgd answered HTTP %d: %s" % (status, detail),
                           line.lstrip()[:1] == b"[")

    def serve(self, stdin):
        try:
            self.connect()
        except (commands.CommandError, OSError) as exc:
            log.error("%s (will retry when a message arrives)", exc)
        for raw in iter(stdin.readline, b""):
            line = raw.strip()
            if not line:
                continue
            reply = self.forward(line)
            if reply is not None:
                self.out.write(reply + b"\n")
                self.out.flush()
        if self.api is not None:
            self.api.close()


def main(cfg):
    logging.basicConfig(level=getattr(logging, cfg["log_level"]), stream=sys.stderr,
                        format="kgd stdio: %(levelname)s %(message)s")
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol stream
    try:
        Bridge(cfg, out).serve(sys.stdin.buffer)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 0
    return 0
