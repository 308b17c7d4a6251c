"""kg/api/jsonrpc.py: bytes in -> (response or None, HTTP status). No HTTP, no MCP."""

import json
import logging

import pytest

from kg.api import jsonrpc
from kg.api.jsonrpc import RpcError, handle

SECRET = "s3cr3t-internal-detail /home/me/.knowledge-graph"


def dispatch(method, params, is_notification, ctx):
    """A stand-in method table: echo, failures of each kind."""
    if ctx is not None:
        ctx.append((method, params, is_notification))
    if method == "echo":
        return {"params": params}
    if method == "boom":
        raise ValueError(SECRET)
    if method == "keyerror":
        raise KeyError(SECRET)
    if method == "rpc-400":
        raise RpcError(-32022, "Unsupported protocol version", {"supported": ["x"], "requested": "y"}, http_status=400)
    if method == "rpc-404":
        raise RpcError(-32601, "Method not found", http_status=404)
    if method == "rpc-plain":
        raise RpcError(-32602, "Invalid params: nope")
    raise RpcError(jsonrpc.METHOD_NOT_FOUND, "Method not found: %s" % method)


def req(method, id=1, params=None, **extra):
    m = {"jsonrpc": "2.0", "method": method}
    if id is not Ellipsis:
        m["id"] = id
    if params is not None:
        m["params"] = params
    m.update(extra)
    return m


def note(method, params=None):
    return req(method, Ellipsis, params)


# ---------------------------------------------------------------- parse errors

@pytest.mark.parametrize("body", [
    b"",
    b"   ",
    b"{",
    b"{'single': 'quotes'}",
    b"[1, 2",
    b'{"jsonrpc": "2.0", "method": "echo", "id": 1,}',
    b"\xff\xfe{}",                                   # not UTF-8
    b'{"jsonrpc": "2.0", "method": "\xc3\x28", "id": 1}',   # invalid UTF-8 inside a string
    b"\x80abc",
    b"nul\x00",
])
def test_parse_error(body):
    resp, status = handle(body, dispatch)
    assert status == 400
    assert resp["jsonrpc"] == "2.0"
    assert resp["id"] is None
    assert resp["error"]["code"] == -32700


def test_parse_error_message_is_short():
    resp, _ = handle(b"{" * 100000, dispatch)
    assert resp["error"]["code"] == -32700
    assert len(resp["error"]["message"]) < 400


# ---------------------------------------------------------------- invalid requests

@pytest.mark.parametrize("msg, expected_id", [
    (1, None),
    ("just a string", None),
    (None, None),
    (True, None),
    ({}, None),
    ({"jsonrpc": "2.0"}, None),
    ({"jsonrpc": "1.0", "method": "echo", "id": 7}, 7),
    ({"jsonrpc": 2.0, "method": "echo", "id": 7}, 7),
    ({"method": "echo", "id": 7}, 7),                        # jsonrpc missing
    ({"jsonrpc": "2.0", "id": 7}, 7),                        # method missing
    ({"jsonrpc": "2.0", "method": "", "id": 7}, 7),
    ({"jsonrpc": "2.0", "method": 5, "id": 7}, 7),
    ({"jsonrpc": "2.0", "method": None, "id": "abc"}, "abc"),
    ({"jsonrpc": "2.0", "method": "echo", "id": {"a": 1}}, None),   # bad id types: answered with null
    ({"jsonrpc": "2.0", "method": "echo", "id": [1]}, None),
    ({"jsonrpc": "2.0", "method": "echo", "id": True}, None),
    ({"jsonrpc": "2.0", "method": "echo", "id": False}, None),
])
def test_invalid_request(msg, expected_id):
    resp, status = handle(json.dumps(msg).encode(), dispatch)
    assert status == 400
    assert resp["error"]["code"] == -32600
    assert resp["id"] == expected_id
    assert resp["jsonrpc"] == "2.0"


def test_invalid_request_never_dispatches():
    seen = []
    handle(json.dumps({"jsonrpc": "2.0", "method": "echo", "id": [1]}).encode(), dispatch, seen)
    handle(json.dumps({"jsonrpc": "1.0", "method": "echo", "id": 1}).encode(), dispatch, seen)
    assert seen == []


@pytest.mark.parametrize("params", ["a string", 5, True])
def test_params_not_structured(params):
    resp, status = handle(json.dumps(req("echo", 3, params)).encode(), dispatch)
    assert resp["error"]["code"] == -32602
    assert resp["id"] == 3


# ---------------------------------------------------------------- requests

@pytest.mark.parametrize("req_id", [1, 0, -5, "abc", "", None, 1.5, 2 ** 53])
def test_request_ids_echoed(req_id):
    resp, status = handle(json.dumps(req("echo", req_id, {"x": 1})).encode(), dispatch)
    assert status == 200
    assert resp == {"jsonrpc": "2.0", "id": req_id, "result": {"params": {"x": 1}}}


def test_params_passed_through():
    seen = []
    handle(json.dumps(req("echo", 1, [1, 2])).encode(), dispatch, seen)
    handle(json.dumps(req("echo", 2)).encode(), dispatch, seen)
    assert seen == [("echo", [1, 2], False), ("echo", None, False)]


def test_str_body_accepted():
    resp, status = handle(json.dumps(req("echo", 1)), dispatch)
    assert status == 200 and resp["result"] == {"params": None}


def test_utf8_body():
    resp, status = handle(json.dumps(req("echo", 1, {"t": "ünïcødé 🎉"}), ensure_ascii=False).encode("utf-8"),
                          dispatch)
    assert resp["result"]["params"]["t"] == "ünïcødé 🎉"


# ---------------------------------------------------------------- notifications and client responses

@pytest.mark.parametrize("msg", [
    note("notifications/initialized"),
    note("notifications/cancelled", {"requestId": 1}),
    note("echo"),
    note("boom"),                 # a failing notification: still nothing to answer
    note("rpc-400"),
    note("unknown/method"),
    note("echo", "not-structured"),
    {"jsonrpc": "2.0", "id": 5, "result": {"ok": True}},          # a response from the client
    {"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "client says no"}},
    {"jsonrpc": "2.0", "id": None, "result": None},
])
def test_nothing_to_answer_is_202(msg):
    assert handle(json.dumps(msg).encode(), dispatch) == (None, 202)


def test_notification_is_dispatched_as_notification():
    seen = []
    handle(json.dumps(note("notifications/initialized", {"a": 1})).encode(), dispatch, seen)
    assert seen == [("notifications/initialized", {"a": 1}, True)]


def test_client_response_is_not_dispatched():
    seen = []
    handle(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode(), dispatch, seen)
    assert seen == []


# ---------------------------------------------------------------- errors from the method table

def test_rpc_error_with_data_and_status():
    resp, status = handle(json.dumps(req("rpc-400", 9)).encode(), dispatch)
    assert status == 400
    assert resp == {"jsonrpc": "2.0", "id": 9, "error": {
        "code": -32022, "message": "Unsupported protocol version", "data": {"supported": ["x"], "requested": "y"}}}


def test_rpc_error_404():
    resp, status = handle(json.dumps(req("rpc-404", 9)).encode(), dispatch)
    assert (status, resp["error"]["code"]) == (404, -32601)


def test_rpc_error_default_status_and_no_data():
    resp, status = handle(json.dumps(req("rpc-plain", "x")).encode(), dispatch)
    assert status == 200
    assert resp["error"] == {"code": -32602, "message": "Invalid params: nope"}
    resp, status = handle(json.dumps(req("no/such", 1)).encode(), dispatch)
    assert (status, resp["error"]["code"]) == (200, -32601)


@pytest.mark.parametrize("method", ["boom", "keyerror"])
def test_unexpected_exception_is_internal_error_without_leak(method, caplog):
    with caplog.at_level(logging.ERROR, logger="kg.api.jsonrpc"):
        resp, status = handle(json.dumps(req(method, 4)).encode(), dispatch)
    assert status in (200, 500)
    assert resp["id"] == 4
    assert resp["error"]["code"] == -32603
    wire = json.dumps(resp)
    assert SECRET not in wire and "s3cr3t" not in wire
    assert "Traceback" not in wire and "ValueError" not in wire and "KeyError" not in wire
    assert "data" not in resp["error"]
    # ... but the log has it, with the traceback
    assert any(r.exc_info for r in caplog.records)


# ---------------------------------------------------------------- batches

def test_batch_mixing_requests_and_notifications():
    batch = [req("echo", 1, {"n": 1}), note("notifications/initialized"), req("echo", "two", {"n": 2}),
             {"jsonrpc": "2.0", "id": 99, "result": {}}, req("rpc-plain", 3), note("boom"), req("boom", 4)]
    resp, status = handle(json.dumps(batch).encode(), dispatch)
    assert status == 200
    assert isinstance(resp, list)
    assert [r["id"] for r in resp] == [1, "two", 3, 4]        # in order, notifications and responses left out
    assert resp[0]["result"] == {"params": {"n": 1}}
    assert resp[1]["result"] == {"params": {"n": 2}}
    assert resp[2]["error"]["code"] == -32602
    assert resp[3]["error"]["code"] == -32603
    assert SECRET not in json.dumps(resp)


def test_batch_of_only_notifications_is_202():
    batch = [note("notifications/initialized"), note("echo"), {"jsonrpc": "2.0", "id": 1, "result": {}}]
    assert handle(json.dumps(batch).encode(), dispatch) == (None, 202)


def test_batch_with_invalid_members():
    batch = [1, req("echo", 1), {"jsonrpc": "1.0", "method": "echo", "id": 2}, "x"]
    resp, status = handle(json.dumps(batch).encode(), dispatch)
    assert status == 200
    assert [(r["id"], r.get("error", {}).get("code")) for r in resp] == [(None, -32600), (1, None), (2, -32600),
                                                                          (None, -32600)]


def test_batch_rpc_error_status_does_not_leak_into_batch_status():
    resp, status = handle(json.dumps([req("rpc-400", 1), req("echo", 2)]).encode(), dispatch)
    assert status == 200
    assert resp[0]["error"]["code"] == -32022 and resp[0]["error"]["data"]
    assert "result" in resp[1]


def test_empty_batch():
    resp, status = handle(b"[]", dispatch)
    assert status == 400
    assert isinstance(resp, dict)
    assert resp["error"]["code"] == -32600
    assert resp["id"] is None


def test_nested_batch_is_invalid_member():
    resp, status = handle(json.dumps([[req("echo", 1)]]).encode(), dispatch)
    assert status == 200
    assert resp == [{"jsonrpc": "2.0", "id": None, "error": resp[0]["error"]}]
    assert resp[0]["error"]["code"] == -32600


def test_huge_batch_rejected_without_dispatch():
    seen = []
    resp, status = handle(json.dumps([req("echo", i) for i in range(1000)]).encode(), dispatch, seen)
    assert resp["error"]["code"] == -32600
    assert seen == []


def test_error_response_helper():
    assert jsonrpc.error_response(1, -32600, "m") == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32600, "message": "m"},
    }
    assert jsonrpc.error_response(None, -1, "m", {"d": 1})["error"]["data"] == {"d": 1}
