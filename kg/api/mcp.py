"""MCP on top of JSON-RPC: protocol generations, the method table, server info. No sockets.

Rules owned here (contract section 3; the 2026-07-28 rules from that revision's spec):
- Which generation a POST speaks is decided per request, by its body: a request whose
  params._meta carries "io.modelcontextprotocol/protocolVersion", or whose MCP-Protocol-Version
  header is exactly 2026-07-28, is the stateless revision; everything else is the handshake
  generation. `initialize` is the handshake unless its _meta carries the 2026-07-28 envelope
  (version 2026-07-28): that revision has no initialize, so it gets 404 / -32601 (contract
  section 13); the header alone does not make it stateless (clients send newer versions there).
- Handshake revisions 2025-03-26, 2025-06-18, 2025-11-25: `initialize` echoes the client's
  protocolVersion when it is one of these, otherwise answers 2025-11-25. The
  MCP-Protocol-Version header is tolerated whatever its value (real clients send newer ones);
  JSON-RPC errors of a well-formed request travel with HTTP 200 (the TypeScript SDK treats any
  other status as a transport failure); a body that is not JSON-RPC at all is 400 (kg/api/jsonrpc.py).
  Methods: initialize, ping, tools/list, tools/call, server/discover.
- Stateless revision 2026-07-28: params._meta must carry the protocol version and the client
  capabilities (else -32602, HTTP 400); over HTTP the headers MCP-Protocol-Version (equal to
  the _meta version), Mcp-Method (equal to the method) and, on tools/call, Mcp-Name (equal to
  the tool name, =?base64?...?= decoded) must be present and agree with the body (else -32020
  HEADER_MISMATCH, HTTP 400); a version other than 2026-07-28 gets -32022 UnsupportedProtocolVersionError (HTTP
  400, data {supported, requested}). Methods: server/discover, tools/list, tools/call; any
  other is -32601 with HTTP 404; bad params or an unknown tool are -32602 with HTTP 400.
  Every result carries resultType "complete" and _meta["io.modelcontextprotocol/serverInfo"];
  server/discover and tools/list carry the cache fields ttlMs and cacheScope.
- No Mcp-Session-Id: every POST stands alone; tools/list and tools/call need no initialize.
- Notifications are ignored (202) in both generations.
- tools/call tells kg/api/tools.py which agent asks (kg/agents/dialects.py: clientInfo in params._meta, else
  the User-Agent header), for the result bounds of that agent.
- Tool results are one text item only unless the Server is built with structured=True; then
  tools/list carries each outputSchema and results their structuredContent (kg/api/tools.py).
"""

import base64

from .. import __version__
from ..agents import dialects
from . import tools
from .jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
STATELESS_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = [STATELESS_VERSION] + list(HANDSHAKE_VERSIONS)
LATEST_HANDSHAKE = "2025-11-25"

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
UNSUPPORTED_PROTOCOL_VERSION = -32022
HEADER_MISMATCH = -32020

SERVER_INFO = {"name": "kgd", "title": "kgd knowledge-graph memory", "version": __version__}
def capabilities():
    """A fresh dict per answer: callers may add to a result without changing the next one."""
    return {"tools": {"listChanged": False}}


TTL_MS = 3600 * 1000

INSTRUCTIONS = """\
kgd is your long-term memory: a knowledge graph of distilled insights that persists across sessions \
and is shared with the user's other agent sessions.
1. If your context already holds kg memory (a line `Session: <id>` from kgd's session-start hook), it \
is loaded: pass that id as session_id to every kg_* call and do not call kg_read with cwd. Otherwise, \
at the start of the session call kg_read with cwd = your working directory (absolute path). It returns \
the active memory of two levels, user (cross-project wisdom) and project (this codebase), and a \
session_id on its first line (Session: <id>): pass it to every other kg_* call.
2. Whenever you learn something a future session would need (a decision and its reason, a pitfall, a \
convention, how parts of the code fit together, a user preference) save it with kg_put_node: a short \
stable kebab-case id, a one-line gist, notes for detail, touches for the files it concerns. Prefer \
updating an existing node (same id) to creating a near-duplicate; kg_search first when unsure.
3. Connect related nodes with kg_put_edge (rel such as depends-on, explains, contradicts, \
implemented-in); well-connected knowledge stays in the active memory longer.
4. kg_read with id/ids gives a node's notes and edges and recalls archived ids shown in the read. \
kg_search finds older, archived and orphaned knowledge.
5. In long sessions call kg_sync now and then to see what other sessions changed. Use kg_progress to \
keep the state of a long task across sessions.
Keep nodes small and true; delete or fix nodes that turn out wrong."""


class Request:
    """What the HTTP layer tells us about the POST (headers only; the body is JSON-RPC's). Values
    are kept as RFC 9110 section 5.5 parses a field: without the whitespace around it."""

    def __init__(self, header_version=None, header_method=None, header_name=None, user_agent=None):
        self.header_version = field_value(header_version)
        self.header_method = field_value(header_method)
        self.header_name = field_value(header_name)
        self.user_agent = user_agent


def field_value(value):
    """A header's value without its optional whitespace (OWS: spaces and tabs) around it."""
    return value.strip(" \t") if isinstance(value, str) else value


def decode_header_value(value):
    """Mcp-Name may be sent as =?base64?...?= when the name is not plain ASCII."""
    if value and value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return value
    return value


def _meta(params):
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        return params["_meta"]
    return {}


def is_stateless(method, params, req):
    meta = _meta(params)
    if method == "initialize":
        return meta.get(META_VERSION) == STATELESS_VERSION
    if META_VERSION in meta:
        return True
    return req is not None and req.header_version == STATELESS_VERSION


class Server:
    """structured: also send outputSchema and structuredContent (--structured-output); off by
    default because Claude Code shows the model that JSON instead of the bounded text."""

    def __init__(self, store, structured=False):
        self.store = store
        self.structured = bool(structured)

    def dispatch(self, method, params, is_notification, req):
        if is_notification:
            return None
        if params is not None and not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: params must be an object.")
        params = params or {}
        if not is_stateless(method, params, req):
            handler = self.HANDSHAKE_METHODS.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, "Method not found: %s. kgd serves tools only (tools/list, tools/call)."
                               % method[:100])
            return handler(self, params, req)
        self._check_stateless(method, params, req)
        handler = self.STATELESS_METHODS.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found: %s. Protocol 2026-07-28 here serves server/discover, "
                           "tools/list and tools/call." % method[:100], http_status=404)
        try:
            result = handler(self, params, req)
        except RpcError as exc:
            if exc.code == INVALID_PARAMS:
                exc.http_status = 400
            raise
        result["resultType"] = "complete"
        result.setdefault("_meta", {})[META_SERVER_INFO] = dict(SERVER_INFO)
        return result

    @staticmethod
    def _check_stateless(method, params, req):
        meta = _meta(params)
        version = meta.get(META_VERSION)
        if version is None or not isinstance(meta.get(META_CAPABILITIES), dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: protocol 2026-07-28 needs params._meta with %s and %s."
                           % (META_VERSION, META_CAPABILITIES), http_status=400)
        if req is not None:  # over HTTP: the spec's required headers must mirror the body
            checks = [("MCP-Protocol-Version", req.header_version, version), ("Mcp-Method", req.header_method, method)]
            if method == "tools/call":
                checks.append(("Mcp-Name", decode_header_value(req.header_name), params.get("name")))
            for header, got, want in checks:
                if got is None or got != str(want):
                    raise RpcError(HEADER_MISMATCH, "Header mismatch: %s header %s but the body says %r." % (
                        header, "missing" if got is None else "%r" % got[:100], str(want)[:100]), http_status=400)
        if version != STATELESS_VERSION:
            raise RpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                           {"supported": SUPPORTED_VERSIONS, "requested": str(version)[:100]}, http_status=400)

    def initialize(self, params, req=None):
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
        return {"protocolVersion": version, "capabilities": capabilities(), "serverInfo": dict(SERVER_INFO),
                "instructions": INSTRUCTIONS}

    def discover(self, params, req=None):
        return {"supportedVersions": list(SUPPORTED_VERSIONS), "capabilities": capabilities(),
                "serverInfo": dict(SERVER_INFO), "instructions": INSTRUCTIONS, "ttlMs": TTL_MS, "cacheScope": "public"}

    def ping(self, params, req=None):
        return {}

    def tools_list(self, params, req=None):
        return {"tools": tools.list_tools(self.structured), "ttlMs": TTL_MS, "cacheScope": "public"}

    def tools_call(self, params, req=None):
        name = params.get("name")
        args = params.get("arguments")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: tools/call needs a tool name.")
        if args is not None and not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: arguments must be an object.")
        try:
            agent = dialects.agent_of_request(req.user_agent if req is not None else None, params)
            return tools.call(self.store, name, args, self.structured, agent=agent)
        except tools.UnknownTool as exc:
            raise RpcError(INVALID_PARAMS, "Invalid params: %s" % exc)

    HANDSHAKE_METHODS = {"initialize": initialize, "server/discover": discover, "ping": ping,
                         "tools/list": tools_list, "tools/call": tools_call}
    STATELESS_METHODS = {"server/discover": discover, "tools/list": tools_list, "tools/call": tools_call}
