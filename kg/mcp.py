"""MCP on top of JSON-RPC: protocol versions, the method table, server info. No sockets.

Rules owned here (contract section 3):
- Handshake revisions 2025-03-26, 2025-06-18, 2025-11-25: `initialize` echoes the client's
  protocolVersion when it is one of these, otherwise answers 2025-11-25. The
  MCP-Protocol-Version header is tolerated whatever its value.
- Stateless revision 2026-07-28: a request whose params._meta carries
  "io.modelcontextprotocol/protocolVersion" is handled per that revision: the version must be
  supported (else -32022 UnsupportedProtocolVersionError, HTTP 400, data {supported,
  requested}) and match the MCP-Protocol-Version header when one is sent (else -32020,
  HTTP 400); results carry resultType "complete" and serverInfo in _meta; `server/discover`
  answers supportedVersions, capabilities, instructions and the cache fields ttlMs / cacheScope.
- No Mcp-Session-Id: every POST stands alone; tools/list and tools/call need no initialize.
- Methods: initialize, ping, tools/list, tools/call, server/discover; notifications are ignored;
  anything else is -32601. Malformed params or an unknown tool: -32602.
"""

from . import __version__, tools
from .jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
STATELESS_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = [STATELESS_VERSION] + list(HANDSHAKE_VERSIONS)
LATEST_HANDSHAKE = "2025-11-25"

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
UNSUPPORTED_PROTOCOL_VERSION = -32022
HEADER_MISMATCH = -32020

SERVER_INFO = {"name": "kgd", "title": "kgd knowledge-graph memory", "version": __version__}
CAPABILITIES = {"tools": {"listChanged": False}}
TTL_MS = 3600 * 1000

INSTRUCTIONS = """\
kgd is your long-term memory: a knowledge graph of distilled insights that persists across sessions \
and is shared with the user's other agent sessions.
1. At the start of every session call kg_read with cwd = your working directory (absolute path). It \
returns the active memory of two levels, user (cross-project wisdom) and project (this codebase), and a \
session_id: pass it to every other kg_* call.
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
    """What the HTTP layer tells us about the POST (headers only; the body is JSON-RPC's)."""

    def __init__(self, header_version=None):
        self.header_version = header_version


def _meta_version(params):
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        v = params["_meta"].get(META_VERSION)
        if v is not None:
            return v
    return None


class Server:
    def __init__(self, store):
        self.store = store

    def dispatch(self, method, params, is_notification, req):
        if is_notification:
            return None
        if params is not None and not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: params must be an object.")
        params = params or {}
        version = _meta_version(params)
        stateless = version is not None
        if stateless:
            if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
                raise RpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version %r." % (str(version)[:50],),
                               {"supported": SUPPORTED_VERSIONS, "requested": str(version)[:100]}, http_status=400)
            hv = req.header_version if req is not None else None
            if hv is not None and hv != version:
                raise RpcError(HEADER_MISMATCH, "MCP-Protocol-Version header %r does not match params._meta %r." % (
                    hv[:50], version), http_status=400)
        handler = self.METHODS.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found: %s. kgd serves tools only (tools/list, tools/call)." % method[:100])
        result = handler(self, params)
        if stateless and version == STATELESS_VERSION:
            result["resultType"] = "complete"
            meta = result.setdefault("_meta", {})
            meta[META_SERVER_INFO] = SERVER_INFO
        return result

    def initialize(self, params):
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
        return {"protocolVersion": version, "capabilities": CAPABILITIES, "serverInfo": SERVER_INFO,
                "instructions": INSTRUCTIONS}

    def discover(self, params):
        return {"supportedVersions": SUPPORTED_VERSIONS, "capabilities": CAPABILITIES, "serverInfo": SERVER_INFO,
                "instructions": INSTRUCTIONS, "ttlMs": TTL_MS, "cacheScope": "public"}

    def ping(self, params):
        return {}

    def tools_list(self, params):
        return {"tools": tools.list_tools(), "ttlMs": TTL_MS, "cacheScope": "public"}

    def tools_call(self, params):
        name = params.get("name")
        args = params.get("arguments")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: tools/call needs a tool name.")
        if args is not None and not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: arguments must be an object.")
        try:
            return tools.call(self.store, name, args)
        except tools.UnknownTool as exc:
            raise RpcError(INVALID_PARAMS, "Invalid params: %s" % exc)

    METHODS = {"initialize": initialize, "server/discover": discover, "ping": ping,
               "tools/list": tools_list, "tools/call": tools_call}
