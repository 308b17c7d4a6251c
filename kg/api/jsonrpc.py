"""JSON-RPC 2.0 over one request body: bytes in -> (response or None, HTTP status). No HTTP, no MCP.

Rules owned here: -32700 for a body that is not UTF-8 JSON, -32600 for anything that is not a
request / notification / response object (and for an empty batch), batches answered with an
array of the responses in order, notifications and client responses answered by nothing (the
caller sends 202), every unexpected exception turned into -32603 with a plain message (the
traceback goes to the log, never to the wire).
"""

import logging

from ..core.text import strict_loads

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class RpcError(Exception):
    """A protocol fault; `http_status` lets a transport pick a non-200 status where a spec says so."""

    def __init__(self, code, message, data=None, http_status=200):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


def error_response(req_id, code, message, data=None):
    err = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


def _valid_id(value):
    return value is None or isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _one(msg, dispatch, ctx):
    """-> (response dict or None, http status)."""
    if not isinstance(msg, dict):
        return error_response(None, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC object."), 400
    has_id = "id" in msg
    req_id = msg.get("id") if has_id and _valid_id(msg.get("id")) else None
    method = msg.get("method")
    if method is None and ("result" in msg or "error" in msg):
        return None, 202  # a response from the client: nothing to answer
    if msg.get("jsonrpc") != "2.0":
        return error_response(req_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0".'), 400
    if not isinstance(method, str) or not method:
        return error_response(req_id, INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string.'), 400
    if has_id and not _valid_id(msg["id"]):
        return error_response(None, INVALID_REQUEST, 'Invalid Request: "id" must be a string or a number.'), 400
    params = msg.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        if not has_id:
            return None, 202
        return error_response(req_id, INVALID_PARAMS, "Invalid params: params must be an object."), 200
    try:
        result = dispatch(method, params, not has_id, ctx)
    except RpcError as exc:
        if not has_id:
            return None, 202
        return error_response(req_id, exc.code, exc.message, exc.data), exc.http_status
    except Exception:
        log.exception("internal error in %s", method[:100])
        if not has_id:
            return None, 202
        return error_response(req_id, INTERNAL_ERROR, "Internal error: the daemon logged the details."), 200
    if not has_id:
        return None, 202
    return {"jsonrpc": "2.0", "id": req_id, "result": result}, 200


def handle(body, dispatch, ctx=None):
    """Parse a POST body and run it. Returns (payload or None, status): None means 202, no body."""
    try:
        msg = strict_loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return error_response(
            None, PARSE_ERROR, "Parse error: the body is not valid UTF-8 JSON (%s)." % str(exc)[:200]
        ), 400
    if isinstance(msg, list):
        if not msg:
            return error_response(None, INVALID_REQUEST, "Invalid Request: empty batch."), 400
        if len(msg) > 100:
            return error_response(None, INVALID_REQUEST, "Invalid Request: at most 100 messages per batch."), 400
        out = []
        for item in msg:
            resp, _ = _one(item, dispatch, ctx)
            if resp is not None:
                out.append(resp)
        return (out, 200) if out else (None, 202)
    return _one(msg, dispatch, ctx)
