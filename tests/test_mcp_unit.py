"""kg/api/mcp.py: Server.dispatch with dicts, no sockets (contract section 3; the stateless revision
2026-07-28 as its specification pages define it)."""

import json

import pytest

from kg import __version__
from kg.api import jsonrpc, mcp
from kg.api.jsonrpc import RpcError
from kg.api.mcp import Request, Server
from kg.memory.store import Settings, Store
from kg.travel import team

STATELESS = "2026-07-28"
HANDSHAKE = ["2025-03-26", "2025-06-18", "2025-11-25"]
V = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
SINFO = "io.modelcontextprotocol/serverInfo"


class UntouchableStore:
    """Protocol-level calls must not need the store."""

    def __getattr__(self, name):
        raise AssertionError("the store was used: %s" % name)


@pytest.fixture
def server():
    return Server(UntouchableStore())


@pytest.fixture
def real(tmp_path):
    t = [1_000_000.0]
    store = team.install(Store(str(tmp_path / "root"), Settings(), clock=lambda: t[0])).open()
    yield Server(store), tmp_path
    store.close()


def meta(version=STATELESS, **params):
    p = dict(params)
    p["_meta"] = {V: version, CAPS: {}, "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}}
    return p


def rpc_error(server, method, params, req=None):
    with pytest.raises(RpcError) as exc:
        server.dispatch(method, params, False, req)
    return exc.value


# ---------------------------------------------------------------- handshake revisions

@pytest.mark.parametrize("asked, answered", [
    ("2025-03-26", "2025-03-26"),
    ("2025-06-18", "2025-06-18"),
    ("2025-11-25", "2025-11-25"),
    ("2024-11-05", "2025-11-25"),     # older than we know: our latest handshake revision
    ("2099-01-01", "2025-11-25"),     # newer than we know
    (STATELESS, "2025-11-25"),        # the stateless revision has no handshake
    ("", "2025-11-25"),
    (None, "2025-11-25"),
    (20250618, "2025-11-25"),
    (["2025-06-18"], "2025-11-25"),
    ({"v": 1}, "2025-11-25"),
])
def test_initialize_version_table(server, asked, answered):
    params = {"capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}
    if asked is not None:
        params["protocolVersion"] = asked
    r = server.dispatch("initialize", params, False, Request())
    assert r["protocolVersion"] == answered


def test_initialize_without_params(server):
    assert server.dispatch("initialize", None, False, None)["protocolVersion"] == "2025-11-25"


def test_initialize_fields(server):
    r = server.dispatch("initialize", {"protocolVersion": "2025-06-18"}, False, Request())
    assert r["serverInfo"]["name"] == "kgd"
    assert r["serverInfo"]["version"] == __version__
    assert r["capabilities"] == {"tools": {"listChanged": False}}
    text = r["instructions"]
    for word in ("kg_read", "cwd", "kg_put_node", "kg_put_edge", "kg_sync"):
        assert word in text
    assert "resultType" not in r           # a handshake-era result stays in its revision's shape


@pytest.mark.parametrize("header", [None, "2025-06-18", "2025-11-25", "2099-12-31", "2026-07-27", "garbage", ""])
def test_header_tolerated_for_handshake_revisions(server, header):
    r = server.dispatch("tools/list", {}, False, Request(header))
    assert r["tools"]
    r = server.dispatch("initialize", {"protocolVersion": "2025-06-18"}, False, Request(header))
    assert r["protocolVersion"] == "2025-06-18"


def test_ping(server):
    assert server.dispatch("ping", None, False, Request()) == {}
    assert server.dispatch("ping", {}, False, None) == {}


@pytest.mark.parametrize("method", ["prompts/list", "resources/list", "resources/templates/list", "logging/setLevel",
                                    "completion/complete", "tools/get", "Initialize", "", "x" * 10000])
def test_unknown_method(server, method):
    err = rpc_error(server, method, {}, Request())
    assert err.code == -32601
    assert len(err.message) < 400


@pytest.mark.parametrize("method", ["notifications/initialized", "notifications/cancelled", "anything/else",
                                    "tools/call", "initialize"])
def test_notifications_ignored(server, method):
    assert server.dispatch(method, {"x": 1}, True, Request()) is None
    # even with a stateless _meta naming an unsupported version: a notification gets no answer
    assert server.dispatch(method, meta("1999-01-01"), True, Request("1999-01-01")) is None


@pytest.mark.parametrize("params", [[1, 2], "x", 5])
def test_params_must_be_an_object(server, params):
    assert rpc_error(server, "tools/list", params).code == -32602


@pytest.mark.parametrize("structured", [False, True])
def test_tools_list(structured):
    server = Server(UntouchableStore(), structured=structured)
    r = server.dispatch("tools/list", {}, False, Request())
    names = [t["name"] for t in r["tools"]]
    assert sorted(names) == sorted(["kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
                                    "kg_search", "kg_sync", "kg_progress"])
    by = {t["name"]: t for t in r["tools"]}
    for t in r["tools"]:
        assert t["inputSchema"]["type"] == "object"
        if structured:
            assert t["outputSchema"]["type"] == "object"
        else:
            assert "outputSchema" not in t
        assert len(t["description"]) > 40
        assert "annotations" in t
    assert by["kg_search"]["annotations"]["readOnlyHint"] is True
    assert by["kg_sync"]["annotations"]["readOnlyHint"] is True
    assert by["kg_delete_node"]["annotations"]["destructiveHint"] is True
    assert by["kg_delete_edge"]["annotations"]["destructiveHint"] is True
    # Contract section 13: the three tools a first turn needs are loaded by Claude Code even with
    # tool search on; the other five stay deferred behind ToolSearch (no _meta at all).
    loaded = {n for n, t in by.items() if t.get("_meta", {}).get("anthropic/alwaysLoad") is True}
    assert loaded == {"kg_read", "kg_put_node", "kg_search"}
    assert all("_meta" not in by[n] for n in set(by) - loaded)
    json.dumps(r)


def test_tools_list_meta_is_not_shared_between_answers(server):
    first = server.dispatch("tools/list", {}, False, Request())
    first["tools"][0]["_meta"]["anthropic/alwaysLoad"] = False
    assert server.dispatch("tools/list", {}, False, Request())["tools"][0]["_meta"] == {"anthropic/alwaysLoad": True}


# ---------------------------------------------------------------- tools/call protocol faults

@pytest.mark.parametrize("params", [
    {"name": "kg_nope", "arguments": {}},
    {"name": "KG_READ", "arguments": {}},
    {"name": "", "arguments": {}},
    {"name": 5, "arguments": {}},
    {"name": None},
    {"arguments": {}},
    {},
    {"name": "kg_read", "arguments": [1]},
    {"name": "kg_read", "arguments": "cwd=/"},
])
def test_tools_call_protocol_faults(server, params):
    err = rpc_error(server, "tools/call", params, Request())
    assert err.code == -32602


def test_unknown_tool_under_stateless(server):
    err = rpc_error(
        server, "tools/call", meta(name="kg_nope", arguments={}), Request(STATELESS, "tools/call", "kg_nope")
    )
    assert err.code == -32602


def test_tool_failure_is_a_result_not_an_rpc_error(real):
    server, _ = real
    r = server.dispatch("tools/call", {"name": "kg_sync", "arguments": {"session_id": "no-such-session"}}, False,
                        Request())
    assert r["isError"] is True
    assert "structuredContent" not in r
    assert len(r["content"]) == 1 and r["content"][0]["type"] == "text"
    r = server.dispatch("tools/call", {"name": "kg_read", "arguments": {"bogus": 1}}, False, Request())
    assert r["isError"] is True and "bogus" in r["content"][0]["text"]


def test_tools_call_without_initialize(real, tmp_path):
    server, _ = real
    server.structured = True
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    r = server.dispatch("tools/call", {"name": "kg_read", "arguments": {"cwd": str(proj)}}, False, Request())
    assert r["isError"] is False
    sid = r["structuredContent"]["session_id"]
    assert "Session: %s" % sid in r["content"][0]["text"]
    r = server.dispatch("tools/call", {"name": "kg_put_node", "arguments": {
        "session_id": sid, "level": "project", "id": "n1", "gist": "an insight"}}, False, Request())
    assert r["structuredContent"]["created"] is True


def test_default_results_are_one_text_item_and_nothing_else(real, tmp_path):
    """Claude Code shows the model JSON.stringify(structuredContent) instead of the text when it is
    there: by default results carry the text only, in both protocol generations."""
    server, _ = real
    assert server.structured is False
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    r = server.dispatch("tools/call", {"name": "kg_read", "arguments": {"cwd": str(proj)}}, False, Request())
    assert set(r) == {"content", "isError"} and r["isError"] is False
    sid = r["content"][0]["text"].splitlines()[0].split("Session: ")[1]
    for stateless in (False, True):
        a, b = ("s1", "s2") if stateless else ("h1", "h2")
        calls = [("kg_put_node", {"session_id": sid, "level": "project", "id": a, "gist": "an insight"}),
                 ("kg_put_node", {"session_id": sid, "level": "project", "id": b, "gist": "another"}),
                 ("kg_put_edge", {"session_id": sid, "level": "project", "from": a, "to": b, "rel": "uses"}),
                 ("kg_read", {"session_id": sid, "id": a}), ("kg_search", {"query": "insight", "session_id": sid}),
                 ("kg_sync", {"session_id": sid}),
                 ("kg_progress", {"session_id": sid, "task_id": "t", "state": {"a": 1}}),
                 ("kg_delete_edge", {"session_id": sid, "from": a, "to": b, "rel": "uses"}),
                 ("kg_delete_node", {"session_id": sid, "id": b}), ("kg_read", {"session_id": sid})]
        for name, args in calls:
            if stateless:
                r = server.dispatch("tools/call", meta(name=name, arguments=args), False,
                                    Request(STATELESS, "tools/call", name))
                assert r.pop("resultType") == "complete" and r.pop("_meta")
            else:
                r = server.dispatch("tools/call", {"name": name, "arguments": args}, False, Request())
            assert set(r) == {"content", "isError"}, (name, r)
            assert r["isError"] is False, r
            assert len(r["content"]) == 1 and r["content"][0]["type"] == "text" and r["content"][0]["text"]


# ---------------------------------------------------------------- the stateless revision

@pytest.mark.parametrize("method, params", [
    ("server/discover", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "kg_sync", "arguments": {"session_id": "nope"}}),
])
def test_stateless_results_carry_result_type_and_server_info(real, method, params):
    server, _ = real
    r = server.dispatch(method, meta(**params), False, Request(STATELESS, method, params.get("name")))
    assert r["resultType"] == "complete"
    assert r["_meta"][SINFO]["name"] == "kgd"
    assert r["_meta"][SINFO]["version"] == __version__


def test_discover(server):
    r = server.dispatch("server/discover", meta(), False, Request(STATELESS, "server/discover", None))
    assert STATELESS in r["supportedVersions"]
    for v in HANDSHAKE:
        assert v in r["supportedVersions"]
    assert all(isinstance(v, str) for v in r["supportedVersions"])
    assert r["capabilities"]["tools"] == {"listChanged": False}
    assert "kg_read" in r["instructions"]
    assert isinstance(r["ttlMs"], int) and not isinstance(r["ttlMs"], bool) and r["ttlMs"] >= 0
    assert r["cacheScope"] in ("public", "private")
    assert r["resultType"] == "complete"
    assert r["_meta"][SINFO]["name"] == "kgd"
    json.dumps(r)


def test_discover_result_is_not_shared_between_calls(server):
    """Results are built per request: adding _meta to one must not leak into constants."""
    a = server.dispatch("server/discover", meta(), False, Request(STATELESS, "server/discover", None))
    a["capabilities"]["tools"]["listChanged"] = True
    a["_meta"]["x"] = 1
    b = server.dispatch("server/discover", meta(), False, Request(STATELESS, "server/discover", None))
    assert b["capabilities"]["tools"] == {"listChanged": False}
    assert "x" not in b["_meta"]
    c = server.dispatch("initialize", {"protocolVersion": "2025-06-18"}, False, Request())
    assert c["capabilities"]["tools"] == {"listChanged": False}


def test_stateless_tools_list_is_cacheable(server):
    r = server.dispatch("tools/list", meta(), False, Request(STATELESS, "tools/list", None))
    assert isinstance(r["ttlMs"], int) and r["ttlMs"] >= 0
    assert r["cacheScope"] in ("public", "private")
    assert len(r["tools"]) == 8


@pytest.mark.parametrize("requested", ["1999-01-01", "2026-13-45", "", "2026-07-29", 20260728, "null"])
def test_unsupported_version(server, requested):
    header = str(requested)
    err = rpc_error(server, "tools/list", meta(requested), Request(header, "tools/list", None))
    assert err.code == -32022
    assert err.http_status == 400
    assert err.data["supported"] == mcp.SUPPORTED_VERSIONS
    assert STATELESS in err.data["supported"]
    assert err.data["requested"] == str(requested)


def test_unsupported_version_on_discover_too(server):
    err = rpc_error(server, "server/discover", meta("1900-01-01"), Request("1900-01-01", "server/discover", None))
    assert err.code == -32022 and err.http_status == 400


@pytest.mark.parametrize("header", ["2025-06-18", "2026-07-27", "garbage", ""])
def test_header_mismatch(server, header):
    err = rpc_error(server, "tools/list", meta(STATELESS), Request(header, "tools/list", None))
    assert err.code == -32020
    assert err.http_status == 400


def test_header_missing_on_stateless_request(server):
    """streamable-http 2026-07-28, Server Validation: a missing MCP-Protocol-Version header is a
    HeaderMismatch (-32020, 400) on a request whose _meta declares the stateless revision."""
    err = rpc_error(server, "tools/list", meta(STATELESS), Request(None))
    assert err.code == -32020
    assert err.http_status == 400


def test_no_transport_context_means_no_header_check(server):
    """dispatch without a Request (no HTTP: e.g. stdio) cannot check headers and must not fail."""
    r = server.dispatch("tools/list", meta(STATELESS), False, None)
    assert r["resultType"] == "complete"


def test_header_and_body_disagreeing_on_an_unsupported_version_is_a_400(server):
    err = rpc_error(server, "tools/list", meta("1999-01-01"), Request(STATELESS, "tools/list", None))
    assert err.code in (-32020, -32022) and err.http_status == 400


def test_stateless_header_without_meta_is_invalid_params(server):
    """A POST whose MCP-Protocol-Version is 2026-07-28 speaks the stateless revision, whose
    requests must carry _meta with the version and the client capabilities."""
    err = rpc_error(server, "tools/list", {}, Request(STATELESS, "tools/list", None))
    assert err.code == -32602 and err.http_status == 400


def test_stateless_meta_without_capabilities_is_invalid_params(server):
    params = meta()
    del params["_meta"][CAPS]
    err = rpc_error(server, "tools/list", params, Request(STATELESS, "tools/list", None))
    assert err.code == -32602 and err.http_status == 400


@pytest.mark.parametrize("params, header", [
    ({"protocolVersion": "2025-06-18"}, STATELESS),     # the header alone: clients send newer ones there
    ({"protocolVersion": "2025-06-18"}, None),
    (meta("2025-06-18", protocolVersion="2025-06-18"), STATELESS),   # an envelope of another version
    ({"protocolVersion": "2025-06-18", "_meta": {"progressToken": 1}}, "2025-06-18"),
])
def test_initialize_without_the_stateless_envelope_is_the_handshake(server, params, header):
    r = server.dispatch("initialize", params, False, Request(header))
    assert r["protocolVersion"] == "2025-06-18"
    assert "resultType" not in r


def test_initialize_with_the_stateless_envelope_is_a_method_it_does_not_have(server):
    """Contract section 13 (2026-07-28 has no initialize): 404 with -32601, as for any method
    that revision's server does not implement."""
    err = rpc_error(server, "initialize", meta(protocolVersion="2025-06-18"),
                    Request(STATELESS, "initialize", None))
    assert err.code == -32601 and err.http_status == 404
    resp, status = _post(server, {"jsonrpc": "2.0", "id": 7, "method": "initialize",
                                  "params": meta(protocolVersion=STATELESS)}, STATELESS)
    assert status == 404 and resp["error"]["code"] == -32601 and resp["id"] == 7


@pytest.mark.parametrize("raw, value", [
    ("  kg_read  ", "kg_read"), ("\tkg_read", "kg_read"), ("kg_read \t", "kg_read"), ("kg_read", "kg_read"),
    ("kg read", "kg read"),      # whitespace inside a value is the value's
    ("", ""), (None, None),
])
def test_header_values_lose_their_surrounding_whitespace(raw, value):
    """RFC 9110 section 5.5: a field value excludes the optional whitespace around it."""
    req = Request(raw, raw, raw)
    assert (req.header_version, req.header_method, req.header_name) == (value, value, value)


@pytest.mark.parametrize("version, method, name", [
    ("  2026-07-28", "tools/call ", "  kg_sync  "), ("2026-07-28\t", "\ttools/call", "kg_sync\t"),
    (STATELESS, "tools/call", " =?base64?a2dfc3luYw==?= "),
])
def test_stateless_headers_match_without_surrounding_whitespace(real, version, method, name):
    srv, _ = real
    r = srv.dispatch("tools/call", meta(name="kg_sync", arguments={"session_id": "nope"}), False,
                     Request(version, method, name))
    assert r["resultType"] == "complete" and r["isError"] is True   # past the header checks: the tool's answer


@pytest.mark.parametrize("header_method, header_name, method, params, ok", [
    ("tools/list", None, "tools/list", {}, True),
    ("tools/call", None, "tools/list", {}, False),                 # Mcp-Method disagrees with the body
    ("TOOLS/LIST", None, "tools/list", {}, False),                 # header values are case-sensitive
    (None, "kg_nope", "tools/call", {"name": "kg_nope", "arguments": {}}, False),   # Mcp-Method missing
    ("tools/call", "kg_nope", "tools/call", {"name": "kg_nope", "arguments": {}}, "unknown-tool"),
    ("tools/call", None, "tools/call", {"name": "kg_nope", "arguments": {}}, False),   # Mcp-Name missing
    ("tools/call", "kg_sync", "tools/call", {"name": "kg_nope", "arguments": {}}, False),   # Mcp-Name disagrees
    ("tools/call", "=?base64?a2dfbm9wZQ==?=", "tools/call", {"name": "kg_nope", "arguments": {}}, "unknown-tool"),
    ("tools/call", "=?base64?a2dfc3luYw==?=", "tools/call", {"name": "kg_nope", "arguments": {}}, False),
])
def test_stateless_standard_headers(server, header_method, header_name, method, params, ok):
    req = Request(STATELESS, header_method, header_name)
    if ok is True:
        assert server.dispatch(method, meta(**params), False, req)["resultType"] == "complete"
        return
    err = rpc_error(server, method, meta(**params), req)
    if ok == "unknown-tool":
        assert err.code == -32602
    else:
        assert err.code == -32020 and err.http_status == 400


@pytest.mark.parametrize("method", ["prompts/list", "resources/list", "no/such", "ping", "logging/setLevel"])
def test_stateless_unknown_method_is_404(server, method):
    """streamable-http 2026-07-28, Protocol Version Header: an RPC method the server does not
    implement gets 404 Not Found with JSON-RPC -32601."""
    err = rpc_error(server, method, meta(), Request(STATELESS, method, None))
    assert err.code == -32601
    assert err.http_status == 404


@pytest.mark.parametrize("method", ["prompts/list", "resources/list"])
def test_handshake_unknown_method_stays_200(server, method):
    err = rpc_error(server, method, {}, Request("2025-06-18"))
    assert err.code == -32601
    assert err.http_status == 200


# ---------------------------------------------------------------- through the JSON-RPC layer

def _post(server, msg, header=None):
    name = (msg.get("params") or {}).get("name") if msg.get("method") == "tools/call" else None
    return jsonrpc.handle(json.dumps(msg).encode(), server.dispatch, Request(header, msg.get("method"), name))


def test_wire_unsupported_version(server):
    resp, status = _post(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": meta("1999-01-01")},
                         "1999-01-01")
    assert status == 400
    assert resp["error"]["code"] == -32022
    assert resp["error"]["data"]["requested"] == "1999-01-01"


def test_wire_discover(server):
    resp, status = _post(server, {"jsonrpc": "2.0", "id": "d-1", "method": "server/discover", "params": meta()},
                         STATELESS)
    assert status == 200
    assert resp["id"] == "d-1" and resp["result"]["resultType"] == "complete"


def test_wire_initialized_notification_is_202(server):
    assert _post(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}) == (None, 202)
