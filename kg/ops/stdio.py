"""The MCP stdio bridge (`kgd stdio`), for clients that only spawn a command (Claude Desktop).

Rules owned here:
- stdin and stdout carry newline-delimited JSON-RPC and nothing else; logs go to stderr only.
- Each line read is POSTed as it is to the daemon's /mcp over one keep-alive connection, in the
  order read. A JSON-RPC answer (200, or 4xx/5xx carrying one) is written back as one line; 202
  writes nothing. A failure without a JSON-RPC body (401, 413, the daemon unreachable) becomes a
  JSON-RPC error for that request's id, and nothing for a notification.
- The daemon serving the storage root is used, or started in the background when none runs
  (client.ensure_daemon: detached, log in ROOT/kgd.log, ~5 s to answer /health); when the
  connection breaks, the bridge finds or starts it once more before giving up on that message.
- End of stdin ends the bridge; the daemon keeps running for its other clients.
"""

import base64
import http.client
import json
import logging
import sys

from ..core.text import compact_json
from . import client
from .console import CommandError

log = logging.getLogger("kgd.stdio")

INTERNAL_ERROR = -32603


META_VERSION = "io.modelcontextprotocol/protocolVersion"
_NOT_PARSED = object()


def _parse(line):
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _NOT_PARSED


def _request_ids(msg):
    """The ids to answer with an error: requests' ids (notifications and responses have none)."""
    if msg is _NOT_PARSED:
        return [None]
    msgs = msg if isinstance(msg, list) else [msg]
    return [m.get("id") for m in msgs if isinstance(m, dict) and "id" in m and "method" in m]


def _header_safe(value):
    return isinstance(value, str) and value.isascii() and value.isprintable() and len(value) < 200


def _http_headers(msg, negotiated):
    """The headers an HTTP client would send with this message, which stdio does not carry.

    The stateless revision (a version in params._meta) requires MCP-Protocol-Version, Mcp-Method
    and, on tools/call, Mcp-Name mirroring the body; the handshake revisions want the version
    that initialize negotiated."""
    if not isinstance(msg, dict):
        return {}
    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    version = meta.get(META_VERSION)
    if version is None:
        return {"MCP-Protocol-Version": negotiated} if negotiated and msg.get("method") != "initialize" else {}
    headers = {}
    if _header_safe(version):
        headers["MCP-Protocol-Version"] = version
    if _header_safe(msg.get("method")):
        headers["Mcp-Method"] = msg["method"]
    name = params.get("name")
    if msg.get("method") == "tools/call" and isinstance(name, str):
        headers["Mcp-Name"] = name if _header_safe(name) else "=?base64?%s?=" % base64.b64encode(
            name.encode("utf-8")).decode("ascii")
    return headers


def _error_line(ids, code, message, batch=False):
    errors = [{"jsonrpc": "2.0", "id": i, "error": {"code": code, "message": message}} for i in ids]
    if not errors:
        return None
    obj = errors if batch else errors[0]
    return compact_json(obj).encode("utf-8")


def _one_line(body):
    """A JSON-RPC body as exactly one line (the daemon's compact JSON has no raw newline anyway)."""
    body = body.strip()
    if b"\n" in body or b"\r" in body:
        body = compact_json(json.loads(body.decode("utf-8"))).encode("utf-8")
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
        self.negotiated = None  # protocolVersion from the last initialize (handshake revisions)
        self.client_name = None  # clientInfo.name from initialize: sent as the User-Agent (result bounds)

    def connect(self):
        port, proc = client.ensure_daemon(self.cfg, timeout=5.0)
        if proc is not None:
            log.info("started kgd (pid %d) on port %d; its log is %s/%s", proc.pid, port, self.cfg["root"],
                     client.LOG_NAME)
        if self.api is not None:
            self.api.close()
        self.api = client.Api(client.connect_host(self.cfg), port, self.cfg.get("token"), timeout=120)
        return port

    def forward(self, line):
        """-> the bytes to write back (one line, no newline) or None."""
        msg = _parse(line)
        batch = isinstance(msg, list)
        headers = {"Accept": "application/json, text/event-stream"}
        headers.update(_http_headers(msg, self.negotiated))
        self._remember_client(msg)
        if self.client_name:
            headers["User-Agent"] = "%s (kgd stdio)" % self.client_name
        for attempt in (0, 1):
            try:
                if self.api is None:
                    self.connect()
                status, hdrs, data = self.api.request("POST", "/mcp", line, headers)
                break
            except (OSError, http.client.HTTPException, CommandError) as exc:
                if self.api is not None:
                    self.api.close()
                self.api = None
                if attempt:
                    log.error("kgd is not reachable: %s", exc)
                    return _error_line(_request_ids(msg), INTERNAL_ERROR, "kgd is not reachable: %s" % exc, batch)
                log.warning("lost the daemon (%s); finding or starting it again", exc)
        if status == 202 or (status == 200 and not data.strip()):
            return None
        if data.strip() and _is_jsonrpc(data):
            if status == 200 and isinstance(msg, dict) and msg.get("method") == "initialize":
                self._remember_version(data)
            return _one_line(data)
        try:
            detail = json.loads(data.decode("utf-8")).get("error")
        except (UnicodeDecodeError, ValueError, AttributeError):
            detail = data[:200].decode("utf-8", "replace")
        if status == 401:
            detail = "%s Give the bridge the daemon's token: KG_TOKEN or --token." % (detail or "unauthorized.")
        log.error("kgd answered %d: %s", status, detail)
        return _error_line(_request_ids(msg), INTERNAL_ERROR, "kgd answered HTTP %d: %s" % (status, detail), batch)

    def _remember_client(self, msg):
        if isinstance(msg, dict) and msg.get("method") == "initialize" and isinstance(msg.get("params"), dict):
            info = msg["params"].get("clientInfo")
            name = info.get("name") if isinstance(info, dict) else None
            self.client_name = name if isinstance(name, str) and len(name) <= 100 and _header_safe(name) else None

    def _remember_version(self, data):
        try:
            version = json.loads(data.decode("utf-8"))["result"]["protocolVersion"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            return
        self.negotiated = version if _header_safe(version) else None

    def serve(self, stdin):
        try:
            self.connect()
        except (CommandError, OSError) as exc:
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


def command(args, cfg):
    """`kgd stdio`."""
    return main(cfg)
