"""End to end against a real kgd process: the HTTP surface, JSON-RPC / MCP and the eight tools
(contract sections 2 and 3). Every test talks to the daemon over a socket, nothing is imported
from kg/.

By default kgd's tool results are one text item and nothing else (no structuredContent, no
outputSchema): the protocol tests run on such a daemon. The tool tests check the structured
fields too, so their `daemon` runs with --structured-output; the "default mode" tests check
what a default daemon sends."""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from helpers import Daemon, clean_env, real, start

pytestmark = pytest.mark.e2e

HANDSHAKE_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
STATELESS = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
TOOL_NAMES = {"kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
              "kg_search", "kg_sync", "kg_progress"}


# ---------------------------------------------------------------- fixtures and helpers

@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("shared-root"), env={"KG_STRUCTURED_OUTPUT": "0"}).start()
    yield d
    d.stop()


@pytest.fixture
def daemon(make_daemon):
    """The tool tests read structuredContent: a daemon with --structured-output."""
    return make_daemon(args=["--structured-output"])


@pytest.fixture
def plain(make_daemon):
    """A daemon in the default mode (text only), whatever the environment says."""
    return make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})


@pytest.fixture
def srv(shared_daemon):
    """One daemon shared by the protocol tests of this module (they leave no state that matters),
    on a fresh client connection per test; the tool tests use the per-test `daemon` fixture."""
    shared_daemon.close_conn()
    yield shared_daemon
    shared_daemon.close_conn()


def stateless_meta(version=STATELESS):
    return {META_VERSION: version, META_CAPS: {}}


def stateless_headers(method, name=None, version=STATELESS):
    """The headers the 2026-07-28 revision requires beside the body (Server Validation)."""
    h = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def post(daemon, body, headers=None, path="/mcp"):
    """POST raw bytes (or a JSON value) -> (status, headers, parsed JSON or None)."""
    if not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode("utf-8")
    status, hdrs, data = daemon.request("POST", path, body, headers)
    return status, hdrs, (json.loads(data) if data else None)


def fresh_conn(daemon):
    return http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)


def one_shot(daemon, method, path, body=None, headers=None):
    """One request on its own connection -> (status, headers lower-case, body bytes)."""
    conn = fresh_conn(daemon)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def raw_response(sock, timeout=10):
    """Read one HTTP response from a raw socket -> (status, headers lower-case, body)."""
    sock.settimeout(timeout)
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    body = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def batch_call(daemon, calls):
    """Many tools/call in one JSON-RPC batch -> the CallToolResults, in order."""
    msgs = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)]
    status, _, out = post(daemon, msgs)
    assert status == 200, out
    assert isinstance(out, list) and len(out) == len(calls), out
    by_id = {r["id"]: r for r in out}
    results = []
    for i in range(len(calls)):
        assert "result" in by_id[i], by_id[i]
        results.append(by_id[i]["result"])
    return results


def tool_error(result):
    """A tool failure per contract 3: isError, one text item, no structuredContent -> its text."""
    assert result.get("isError") is True, result
    assert "structuredContent" not in result, result
    content = result.get("content")
    assert isinstance(content, list) and len(content) == 1, result
    assert content[0].get("type") == "text", result
    text = content[0].get("text")
    assert isinstance(text, str) and len(text.strip()) > 10, result
    return text


def text_of(result):
    content = result["content"]
    assert isinstance(content, list) and len(content) == 1 and content[0]["type"] == "text", result
    return content[0]["text"]


# ================================================================ HTTP surface

@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("path", ["/", "/mcp"])
def test_get_and_delete_on_mcp_endpoint_are_405_allow_post(srv, method, path):
    status, hdrs, body = srv.request(method, path)
    assert status == 405
    assert hdrs.get("allow", "").replace(" ", "").upper() == "POST"
    assert "mcp-session-id" not in hdrs
    assert "content-length" in hdrs


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", ["/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
                                  "/foo", "/mcp/extra"])
def test_unknown_path_is_json_404(srv, method, path):
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"} if method == "POST" else None
    status, hdrs, data = one_shot(srv, method, path, body)
    assert status == 404
    assert hdrs.get("content-type", "").startswith("application/json")
    obj = json.loads(data)
    assert isinstance(obj, dict) and isinstance(obj.get("error"), str) and obj["error"]


def test_health_fields(srv, project):
    status, h = srv.json("GET", "/health")
    assert status == 200
    assert h["status"] == "ok"
    assert isinstance(h["version"], str) and h["version"]
    assert isinstance(h["uptime_s"], (int, float)) and h["uptime_s"] >= 0
    assert isinstance(h["sessions"], int) and isinstance(h["graphs_loaded"], int)
    before_sessions, before_graphs = h["sessions"], h["graphs_loaded"]
    start(srv, project)
    _, h2 = srv.json("GET", "/health")
    assert h2["sessions"] == before_sessions + 1
    assert h2["graphs_loaded"] == before_graphs + 1  # the project graph is now loaded
    time.sleep(0.05)
    assert h2["uptime_s"] >= h["uptime_s"]


def test_every_response_has_content_length(srv, project):
    port = srv.port
    cases = [
        ("GET", "/health", None, {}),
        ("GET", "/mcp", None, {}),
        ("DELETE", "/", None, {}),
        ("GET", "/nope", None, {}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, {}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),  # 202
        ("POST", "/mcp", b"\xff\xfe not json", {}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "kg_read", "arguments": {"cwd": str(project)}}}, {}),
        ("GET", "/health", None, {"Host": "evil.example"}),
        ("GET", "/health", None, {"Origin": "http://evil.example"}),
    ]
    seen = set()
    for method, path, body, headers in cases:
        status, hdrs, data = one_shot(srv, method, path, body, headers)
        seen.add(status)
        assert "content-length" in hdrs, (method, path, status, hdrs)
        assert int(hdrs["content-length"]) == len(data), (method, path, status)
        assert "transfer-encoding" not in hdrs
    assert {200, 202, 403, 404, 405} <= seen
    # And the 413, which is answered without reading the body.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (port, 5 * 1024 * 1024))
        status, hdrs, data = raw_response(s)
    assert status == 413 and int(hdrs["content-length"]) == len(data)


def test_keep_alive_serves_several_requests_on_one_connection(srv):
    conn = fresh_conn(srv)
    try:
        requests = [
            ("GET", "/health", None),
            ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            ("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}),
            ("GET", "/not-here", None),
            ("GET", "/mcp", None),
            ("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            ("GET", "/health", None),
        ]
        sock = None
        statuses = []
        for method, path, body in requests:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            r = conn.getresponse()
            r.read()
            statuses.append(r.status)
            assert (r.getheader("Connection") or "").lower() != "close", (method, path)
            assert conn.sock is not None, "the server closed the connection after %s %s" % (method, path)
            if sock is None:
                sock = conn.sock
            assert conn.sock is sock, "a new connection was needed after %s %s" % (method, path)
        assert statuses == [200, 200, 202, 404, 405, 200, 200]
    finally:
        conn.close()


@pytest.mark.parametrize("method,path,headers,expect", [
    ("POST", "/foo", {}, 404),
    ("POST", "/.well-known/oauth-authorization-server", {}, 404),
    ("PUT", "/mcp", {}, 405),
    ("POST", "/health", {}, 405),
    ("POST", "/mcp", {"Origin": "http://evil.example"}, 403),
])
def test_keep_alive_survives_a_refused_request_with_a_body(srv, method, path, headers, expect):
    """A request refused before its body is read (404, 405, 403) must not leave that body in the
    stream to be parsed as the next request: the server drains it or closes the connection."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 300}}).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (
            method, path, len(body))
        for k, v in headers.items():
            head += "%s: %s\r\n" % (k, v)
        s.sendall(head.encode() + b"\r\n" + body)
        status, hdrs, _ = raw_response(s)
        assert status == expect
        if (hdrs.get("connection") or "").lower() == "close":
            return  # closing is a correct answer too
        ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode()
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(ping), ping))
        status, hdrs, data = raw_response(s)
        assert status == 200, (status, data[:200])
        assert json.loads(data) == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_keep_alive_on_a_raw_socket(srv):
    """The same, byte level: three requests written one after the other on one socket."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        for i in range(3):
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode()
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            status, hdrs, data = raw_response(s)
            assert status == 200
            assert json.loads(data) == {"jsonrpc": "2.0", "id": i, "result": {}}


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "attacker.com", "127.0.0.1.evil.example",
                                  "localhost.evil.example:80"])
def test_host_guard_refuses_foreign_host(srv, host):
    for method, path, body in (("GET", "/health", None),
                               ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})):
        status, hdrs, data = one_shot(srv, method, path, body, {"Host": host})
        assert status == 403, (host, path)
        assert isinstance(json.loads(data).get("error"), str)


def test_host_guard_accepts_local_names(srv):
    port = srv.port
    for host in ("localhost:%d" % port, "localhost", "127.0.0.1:%d" % port, "127.0.0.1", "[::1]:%d" % port, "[::1]",
                 "LOCALHOST:%d" % port):
        status, _, data = one_shot(srv, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                   {"Host": host})
        assert status == 200, host
        assert json.loads(data)["result"] == {}


@pytest.mark.parametrize("origin,ok", [
    ("http://evil.example", False),
    ("https://evil.example", False),
    ("http://localhost.evil.example", False),
    ("http://localhost:3000", True),
    ("http://127.0.0.1:8080", True),
    ("http://[::1]:5173", True),
    (None, True),
])
def test_origin_guard(srv, origin, ok):
    headers = {"Origin": origin} if origin else {}
    status, _, data = one_shot(srv, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers)
    if ok:
        assert status == 200 and json.loads(data)["result"] == {}
    else:
        assert status == 403
        assert isinstance(json.loads(data).get("error"), str)
    status, _, _ = one_shot(srv, "GET", "/health", None, headers)
    assert status == (200 if ok else 403)


@pytest.mark.parametrize("path", ["/mcp", "/"])
def test_body_over_4_mib_is_413_without_reading_it(srv, path):
    port = srv.port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (path, port, 4 * 1024 * 1024 + 1)).encode())
        t0 = time.monotonic()
        # Not one byte of the body is sent: the answer must come anyway, and quickly.
        status, hdrs, data = raw_response(s, timeout=5)
        elapsed = time.monotonic() - t0
    assert status == 413
    assert elapsed < 3, "the server waited for the body (%.1fs)" % elapsed
    assert isinstance(json.loads(data).get("error"), str)
    # The srv is still fine.
    assert srv.json("GET", "/health")[0] == 200


def test_body_of_4_mib_or_less_is_read(srv):
    """The limit is 4 MiB: a body just under it is parsed (here: valid JSON-RPC with padding)."""
    pad = "x" * (4 * 1024 * 1024 - 200)
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_pad": pad}}).encode()
    assert len(body) <= 4 * 1024 * 1024
    status, _, obj = post(srv, body)
    assert status == 200 and obj == {"jsonrpc": "2.0", "id": 7, "result": {}}


@pytest.mark.parametrize("body", [b"\xff\xfe\x00{", b'{"jsonrpc": "2.0", "id": 1, "method": ', b"not json at all",
                                  '{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xe9"}'.encode("latin-1"), b""])
def test_unparseable_body_is_jsonrpc_parse_error(srv, body):
    status, hdrs, data = srv.request("POST", "/mcp", body)
    assert status in (200, 400)
    obj = json.loads(data)
    assert obj["jsonrpc"] == "2.0" and obj["id"] is None
    assert obj["error"]["code"] == -32700
    assert isinstance(obj["error"]["message"], str) and obj["error"]["message"]


# ================================================================ JSON-RPC / MCP

@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
def test_initialize_echoes_known_versions(srv, version):
    status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    r = obj["result"]
    assert r["protocolVersion"] == version
    assert r["serverInfo"]["name"] == "kgd" and isinstance(r["serverInfo"]["version"], str)
    assert r["capabilities"]["tools"]["listChanged"] is False
    assert isinstance(r["instructions"], str) and len(r["instructions"]) > 50
    assert "kg_read" in r["instructions"]
    assert "mcp-session-id" not in hdrs


@pytest.mark.parametrize("version", ["2099-01-01", "2024-11-05", "garbage", None])
def test_initialize_answers_latest_handshake_for_unknown_versions(srv, version):
    params = {"capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    if version is not None:
        params["protocolVersion"] = version
    status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    assert status == 200
    assert obj["result"]["protocolVersion"] == "2025-11-25"
    assert obj["result"]["serverInfo"]["name"] == "kgd"


def test_no_mcp_session_id_header_ever(srv, project):
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                                                                        "capabilities": {}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kg_read",
                                                                        "arguments": {"cwd": str(project)}}},
        {"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": {"_meta": stateless_meta()}},
        {"jsonrpc": "2.0", "id": 5, "method": "nope"},
    ]
    for m in msgs:
        extra = stateless_headers(m["method"]) if m["method"] == "server/discover" else {}
        status, hdrs, _ = one_shot(srv, "POST", "/mcp", m, dict(extra, Accept="application/json, text/event-stream"))
        assert "mcp-session-id" not in hdrs, m
    # A client that sends a session id anyway is served as usual.
    status, hdrs, data = one_shot(srv, "POST", "/mcp", {"jsonrpc": "2.0", "id": 9, "method": "ping"},
                                  {"Mcp-Session-Id": "whatever-123"})
    assert status == 200 and json.loads(data)["result"] == {}
    assert "mcp-session-id" not in hdrs


@pytest.mark.parametrize("msg", [
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    {"jsonrpc": "2.0", "method": "notifications/whatever"},
    {"jsonrpc": "2.0", "id": 5, "result": {}},
    {"jsonrpc": "2.0", "id": "x", "error": {"code": -1, "message": "client says no"}},
])
def test_notifications_and_client_responses_are_202_empty(srv, msg):
    status, hdrs, data = srv.request("POST", "/mcp", msg)
    assert status == 202
    assert data == b""
    assert hdrs.get("content-length") == "0"


def test_batch_answers_array_of_responses(srv):
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "prompts/list"},
    ]
    status, hdrs, out = post(srv, batch)
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    assert isinstance(out, list) and len(out) == 3
    by_id = {r["id"]: r for r in out}
    assert by_id[1]["result"] == {}
    assert {t["name"] for t in by_id["two"]["result"]["tools"]} == TOOL_NAMES
    assert by_id[3]["error"]["code"] == -32601


def test_batch_of_only_notifications_is_202(srv):
    batch = [{"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
             {"jsonrpc": "2.0", "id": 4, "result": {}}]
    status, hdrs, data = srv.request("POST", "/mcp", batch)
    assert status == 202 and data == b""


def test_empty_batch_is_an_error(srv):
    status, hdrs, data = srv.request("POST", "/mcp", b"[]")
    obj = json.loads(data)
    assert isinstance(obj, dict), obj
    assert obj["error"]["code"] == -32600
    assert obj["id"] is None


def test_ping(srv):
    assert srv.rpc("ping", id=42) == {"jsonrpc": "2.0", "id": 42, "result": {}}
    assert srv.rpc("ping", {}, id="s")["result"] == {}


@pytest.mark.parametrize("method", ["prompts/list", "resources/list", "resources/templates/list", "completion/complete",
                                    "logging/setLevel", "sampling/createMessage", "no/such/method", "tools/unknown"])
def test_unknown_methods_are_32601(srv, method):
    resp = srv.rpc(method, {}, id=3)
    assert resp["id"] == 3 and "result" not in resp
    assert resp["error"]["code"] == -32601


@pytest.mark.parametrize("name", ["kg_nope", "KG_READ", "", "read"])
def test_tools_call_unknown_tool_is_32602(srv, name):
    resp = srv.rpc("tools/call", {"name": name, "arguments": {}})
    assert resp["error"]["code"] == -32602, resp


@pytest.mark.parametrize("method,params", [
    ("tools/call", 5),
    ("tools/call", "kg_read"),
    ("tools/call", [1, 2]),
    ("tools/list", [1]),
    ("initialize", "2025-06-18"),
    ("tools/call", {"arguments": {}}),  # no name
    ("tools/call", {"name": "kg_read", "arguments": "cwd=/tmp"}),
    ("tools/call", {"name": "kg_read", "arguments": [1]}),
])
def test_malformed_params_are_32602(srv, method, params):
    resp = srv.rpc(method, params, id=8)
    assert resp["id"] == 8 and "error" in resp, resp
    assert resp["error"]["code"] == -32602


@pytest.mark.parametrize("header", ["2099-01-01", "2025-06-18", "2025-03-26", "2025-11-25", "1.0"])
def test_protocol_version_header_is_tolerated_without_meta(srv, header):
    status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                             {"MCP-Protocol-Version": header})
    assert status == 200
    assert {t["name"] for t in obj["result"]["tools"]} == TOOL_NAMES
    status, _, obj = post(srv, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                   "params": {"name": "kg_search", "arguments": {"query": "anything"}}},
                          {"MCP-Protocol-Version": header})
    assert status == 200 and obj["result"]["isError"] is False


def test_tools_list_without_initialize_on_a_fresh_connection(srv):
    status, hdrs, data = one_shot(srv, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 200
    tools = json.loads(data)["result"]["tools"]
    assert {t["name"] for t in tools} == TOOL_NAMES


def test_tools_call_without_initialize_on_a_fresh_connection(srv, project):
    status, hdrs, data = one_shot(srv, "POST", "/mcp", {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "kg_read", "arguments": {"cwd": str(project)}}})
    assert status == 200
    r = json.loads(data)["result"]
    assert r == {"content": [{"type": "text", "text": r["content"][0]["text"]}], "isError": False}
    assert re.match(r"Session: \S+\n", r["content"][0]["text"])


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured-output"])
def test_tool_definitions(srv, make_daemon, structured):
    d = make_daemon(args=["--structured-output"]) if structured else srv
    tools = d.rpc("tools/list")["result"]["tools"]
    assert len(tools) == 8 and {t["name"] for t in tools} == TOOL_NAMES
    for t in tools:
        assert isinstance(t["description"], str) and len(t["description"]) > 30, t["name"]
        assert ("outputSchema" in t) is structured, t["name"]
        for key in ("inputSchema", "outputSchema") if structured else ("inputSchema",):
            schema = t[key]
            assert schema["type"] == "object", (t["name"], key)
            assert isinstance(schema.get("properties"), dict), (t["name"], key)
        assert isinstance(t["annotations"], dict), t["name"]
    by = {t["name"]: t for t in tools}
    assert by["kg_search"]["annotations"]["readOnlyHint"] is True
    assert by["kg_sync"]["annotations"]["readOnlyHint"] is True
    assert by["kg_delete_node"]["annotations"]["destructiveHint"] is True
    assert by["kg_delete_edge"]["annotations"]["destructiveHint"] is True
    for name in ("kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_progress"):
        assert by[name]["annotations"].get("readOnlyHint") is not True, name
    for name in ("kg_read", "kg_put_node", "kg_put_edge", "kg_search", "kg_sync", "kg_progress"):
        assert by[name]["annotations"].get("destructiveHint") is not True, name
    # The inputSchemas name the contract's arguments.
    expected = {
        "kg_read": {"cwd", "session_id", "id", "ids", "level"},
        "kg_put_node": {"session_id", "level", "id", "gist", "notes", "touches", "private"},
        "kg_put_edge": {"session_id", "level", "from", "to", "rel", "notes"},
        "kg_delete_node": {"session_id", "id", "level"},
        "kg_delete_edge": {"session_id", "from", "to", "rel", "level"},
        "kg_search": {"query", "session_id", "limit"},
        "kg_sync": {"session_id"},
        "kg_progress": {"session_id", "task_id", "state", "level"},
    }
    for name, props in expected.items():
        assert set(by[name]["inputSchema"]["properties"]) == props, name
    assert set(by["kg_put_node"]["inputSchema"].get("required", [])) == {"session_id", "level", "id", "gist"}
    assert set(by["kg_search"]["inputSchema"].get("required", [])) == {"query"}


# ================================================================ stateless revision 2026-07-28

def test_server_discover(srv):
    status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                                      "params": {"_meta": stateless_meta()}}, stateless_headers("server/discover"))
    assert status == 200, obj
    r = obj["result"]
    assert STATELESS in r["supportedVersions"] and "2025-11-25" in r["supportedVersions"]
    assert r["capabilities"]["tools"]["listChanged"] is False
    assert isinstance(r["instructions"], str) and "kg_read" in r["instructions"]
    assert isinstance(r["ttlMs"], int) and r["ttlMs"] >= 0
    assert isinstance(r["cacheScope"], str) and r["cacheScope"]
    assert r["resultType"] == "complete"
    info = r.get("serverInfo") or r.get("_meta", {}).get("io.modelcontextprotocol/serverInfo")
    assert info and info["name"] == "kgd"
    assert "mcp-session-id" not in hdrs


def test_server_discover_without_the_required_headers_is_400_32020(srv):
    """2026-07-28 Server Validation: MCP-Protocol-Version and Mcp-Method must mirror the body."""
    for headers in ({}, {"MCP-Protocol-Version": STATELESS}, {"Mcp-Method": "server/discover"}):
        status, _, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                                       "params": {"_meta": stateless_meta()}}, headers)
        assert status == 400 and obj["error"]["code"] == -32020, (headers, obj)


def test_stateless_tools_list_and_call_carry_result_type(srv, project):
    status, _, obj = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                   "params": {"_meta": stateless_meta()}}, stateless_headers("tools/list"))
    assert status == 200
    assert obj["result"]["resultType"] == "complete"
    assert {t["name"] for t in obj["result"]["tools"]} == TOOL_NAMES
    status, _, obj = post(srv, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "kg_read", "arguments": {"cwd": str(project)}, "_meta": stateless_meta()}},
        stateless_headers("tools/call", "kg_read"))
    assert status == 200
    r = obj["result"]
    assert r["resultType"] == "complete"
    assert r["isError"] is False and "structuredContent" not in r
    assert re.match(r"Session: \S+\n", r["content"][0]["text"])
    # A tool failure is still a complete result.
    status, _, obj = post(srv, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "kg_sync", "arguments": {}, "_meta": stateless_meta()}}, stateless_headers("tools/call", "kg_sync"))
    assert status == 200
    assert obj["result"]["isError"] is True and obj["result"]["resultType"] == "complete"


def test_handshake_results_do_not_carry_result_type(srv):
    r = srv.rpc("tools/list")["result"]
    assert "resultType" not in r


@pytest.mark.parametrize("method", ["server/discover", "tools/list", "ping"])
def test_stateless_unsupported_version_is_400_32022(srv, method):
    status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 5, "method": method,
                                      "params": {"_meta": stateless_meta("2099-01-01")}},
                             stateless_headers(method, version="2099-01-01"))
    assert status == 400, obj
    assert obj["id"] == 5
    err = obj["error"]
    assert err["code"] == -32022
    assert STATELESS in err["data"]["supported"] and "2025-11-25" in err["data"]["supported"]
    assert err["data"]["requested"] == "2099-01-01"


def test_stateless_header_mismatch_is_400_32020(srv):
    for header in ("2025-11-25", "2099-01-01"):
        status, hdrs, obj = post(srv, {"jsonrpc": "2.0", "id": 6, "method": "tools/list",
                                          "params": {"_meta": stateless_meta()}},
                                 stateless_headers("tools/list", version=header))
        assert status == 400, (header, obj)
        assert obj["id"] == 6
        assert obj["error"]["code"] == -32020


# ================================================================ kg_read and sessions

def test_kg_read_starts_a_session_from_a_subfolder(daemon, project):
    result = daemon.call("kg_read", {"cwd": str(project / "src")})
    assert result["isError"] is False
    sc = result["structuredContent"]
    sid = sc["session_id"]
    assert isinstance(sid, str) and sid
    assert sc["project_path"] == real(project)
    for level in ("user", "project"):
        g = sc[level]
        assert g["nodes"] == [] and g["archived"] == [] and g["edges"] == []
    b = sc["budget"]
    assert b["max_tokens"] == 5000 and b["user_tokens"] == 0 and b["project_tokens"] == 0
    text = text_of(result)
    assert "Session: %s" % sid in text
    assert not text.lstrip().startswith("{"), "the text must not be a JSON dump"


def test_kg_read_full_graph_content(daemon, project):
    sid = start(daemon, project)["session_id"]
    daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "prefer-small-commits",
                                     "gist": "Small commits review faster", "notes": ["n1"], "touches": ["git"]})
    daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "db-layer",
                                     "gist": "All SQL lives in db.py", "touches": ["src/db.py"]})
    daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "db-layer",
                                     "to": "src/db.py", "rel": "implemented-in"})
    result = daemon.call("kg_read", {"session_id": sid})
    sc = result["structuredContent"]
    assert sc["session_id"] == sid
    u = {n["id"]: n for n in sc["user"]["nodes"]}
    p = {n["id"]: n for n in sc["project"]["nodes"]}
    assert u["prefer-small-commits"] == {"id": "prefer-small-commits", "gist": "Small commits review faster",
                                         "notes": ["n1"], "touches": ["git"], "state": "active"}
    assert p["db-layer"]["state"] == "active" and p["db-layer"]["touches"] == ["src/db.py"]
    assert sc["project"]["edges"] == [{"from": "db-layer", "to": "src/db.py", "rel": "implemented-in", "notes": []}]
    assert sc["budget"]["user_tokens"] > 0 and sc["budget"]["project_tokens"] > 0
    text = text_of(result)
    for s in ("prefer-small-commits", "Small commits review faster", "db-layer", "All SQL lives in db.py",
              "implemented-in", "Session: %s" % sid):
        assert s in text


def test_project_root_of_a_linked_worktree_is_the_main_worktree(daemon, tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    env = clean_env(tmp_path, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    main = tmp_path / "repos" / "mainrepo"
    wt = tmp_path / "elsewhere" / "feature-wt"
    main.mkdir(parents=True)
    wt.parent.mkdir(parents=True)

    def run(*args, cwd=main):
        subprocess.run([git, "-c", "init.defaultBranch=main"] + list(args), cwd=str(cwd), env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run("init", "-q")
    run("commit", "-q", "--allow-empty", "-m", "init")
    run("worktree", "add", "-q", "-b", "feature", str(wt))
    assert (wt / ".git").is_file()
    (wt / "pkg" / "sub").mkdir(parents=True)
    a = start(daemon, wt / "pkg" / "sub")
    assert a["project_path"] == real(main)
    b = start(daemon, main)
    assert b["project_path"] == real(main)
    # One shared project graph.
    daemon.call_tool("kg_put_node", {"session_id": a["session_id"], "level": "project", "id": "from-worktree",
                                     "gist": "written in the linked worktree"})
    ids = [n["id"] for n in daemon.call_tool("kg_read", {"session_id": b["session_id"]})["project"]["nodes"]]
    assert ids == ["from-worktree"]


def test_project_root_of_a_fabricated_worktree_git_file(daemon, tmp_path):
    """The same without git: the files `git worktree add` leaves behind, written by hand."""
    main = tmp_path / "r" / "mainproj"
    gitdir = main / ".git" / "worktrees" / "wt1"
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    wt = tmp_path / "r" / "wt1"
    (wt / "deep").mkdir(parents=True)
    (gitdir / "gitdir").write_text(str(wt / ".git") + "\n")
    (wt / ".git").write_text("gitdir: %s\n" % gitdir)
    assert start(daemon, wt / "deep")["project_path"] == real(main)
    # A relative gitdir line works too.
    wt2 = tmp_path / "r" / "wt2"
    gitdir2 = main / ".git" / "worktrees" / "wt2"
    gitdir2.mkdir(parents=True)
    (gitdir2 / "commondir").write_text("../..\n")
    wt2.mkdir()
    (wt2 / ".git").write_text("gitdir: ../mainproj/.git/worktrees/wt2\n")
    assert start(daemon, wt2)["project_path"] == real(main)


def test_project_root_follows_symlinks(daemon, project, tmp_path):
    link = tmp_path / "link-to-src"
    link.symlink_to(project / "src", target_is_directory=True)
    assert start(daemon, link)["project_path"] == real(project)
    link2 = tmp_path / "link-to-project"
    link2.symlink_to(project, target_is_directory=True)
    a = start(daemon, link2)
    assert a["project_path"] == real(project)


def test_project_root_without_git_is_cwd(daemon, tmp_path):
    d = tmp_path / "plain" / "folder"
    d.mkdir(parents=True)
    p = os.path.realpath(str(d))
    while True:
        if os.path.exists(os.path.join(p, ".git")):
            pytest.skip("a parent of the temporary folder holds .git")
        if os.path.dirname(p) == p:
            break
        p = os.path.dirname(p)
    assert start(daemon, d)["project_path"] == real(d)


def test_kg_read_with_session_id_reuses_the_session(daemon, project):
    first = start(daemon, project / "src")
    sid = first["session_id"]
    _, h = daemon.json("GET", "/health")
    n = h["sessions"]
    again = daemon.call("kg_read", {"session_id": sid})
    assert again["isError"] is False
    assert again["structuredContent"]["session_id"] == sid
    assert again["structuredContent"]["project_path"] == real(project)
    assert "Session: %s" % sid in text_of(again)
    # session_id plus cwd: the valid session wins.
    again2 = daemon.call_tool("kg_read", {"session_id": sid, "cwd": str(project)})
    assert again2["session_id"] == sid
    assert daemon.json("GET", "/health")[1]["sessions"] == n


def test_kg_read_unknown_session_with_cwd_starts_a_new_one(daemon, project):
    sc = daemon.call_tool("kg_read", {"session_id": "no-such-session", "cwd": str(project)})
    assert sc["session_id"] and sc["session_id"] != "no-such-session"
    assert sc["project_path"] == real(project)
    # The new session works.
    daemon.call_tool("kg_sync", {"session_id": sc["session_id"]})


def test_kg_read_unknown_session_without_cwd_is_a_tool_error(daemon):
    text = tool_error(daemon.call("kg_read", {"session_id": "no-such-session"}))
    assert "session" in text.lower()
    text = tool_error(daemon.call("kg_read", {}))
    assert "cwd" in text


def test_kg_read_ids(daemon, project):
    sid = start(daemon, project)["session_id"]
    calls = [
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "u-one", "gist": "user gist",
                         "notes": ["user note"], "touches": ["~/.bashrc"]}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "p-one", "gist": "project gist one",
                         "notes": ["note a", "note b"], "touches": ["src/a.py"]}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "p-two", "gist": "project gist two"}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p-one", "to": "p-two", "rel": "depends-on",
                         "notes": ["because"]}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p-one", "to": "src/a.py",
                         "rel": "implemented-in"}),
    ]
    for r in batch_call(daemon, calls):
        assert r["isError"] is False, r
    result = daemon.call("kg_read", {"session_id": sid, "ids": ["p-one", "u-one", "nope"]})
    sc = result["structuredContent"]
    assert sc["missing"] == ["nope"]
    by = {n["id"]: n for n in sc["nodes"]}
    assert set(by) == {"p-one", "u-one"}
    p1 = by["p-one"]
    assert p1["level"] == "project" and p1["state"] == "active"
    assert p1["gist"] == "project gist one" and p1["notes"] == ["note a", "note b"] and p1["touches"] == ["src/a.py"]
    edges = sorted((e["from"], e["to"], e["rel"], tuple(e["notes"])) for e in p1["edges"])
    assert edges == [("p-one", "p-two", "depends-on", ("because",)), ("p-one", "src/a.py", "implemented-in", ())]
    assert by["u-one"]["level"] == "user" and by["u-one"]["edges"] == []
    text = text_of(result)
    for s in ("p-one", "note a", "note b", "u-one", "user note", "nope"):
        assert s in text
    # id alone, and the other end of an edge sees it too.
    sc = daemon.call_tool("kg_read", {"session_id": sid, "id": "p-two"})
    assert [n["id"] for n in sc["nodes"]] == ["p-two"] and sc["missing"] == []
    assert [(e["from"], e["rel"]) for e in sc["nodes"][0]["edges"]] == [("p-one", "depends-on")]
    # level restricts the search for ids.
    sc = daemon.call_tool("kg_read", {"session_id": sid, "ids": ["u-one", "p-one"], "level": "user"})
    assert [n["id"] for n in sc["nodes"]] == ["u-one"] and sc["missing"] == ["p-one"]


# ================================================================ writes

def test_put_node_create_then_merge(daemon, project):
    sid = start(daemon, project)["session_id"]
    r = daemon.call("kg_put_node", {"session_id": sid, "level": "project", "id": "cfg", "gist": "config is TOML",
                                    "notes": ["old note"], "touches": ["config.toml"]})
    sc = r["structuredContent"]
    assert sc == {"level": "project", "created": True, "node": {"id": "cfg", "gist": "config is TOML",
                                                                  "notes": ["old note"], "touches": ["config.toml"],
                                                                  "state": "active"}}
    assert "cfg" in text_of(r)
    # Only a gist: notes and touches stay.
    sc = daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "cfg",
                                          "gist": "config is TOML, loaded once"})
    assert sc["created"] is False
    assert sc["node"]["gist"] == "config is TOML, loaded once"
    assert sc["node"]["notes"] == ["old note"] and sc["node"]["touches"] == ["config.toml"]
    # Given notes replace the old list; touches stay.
    sc = daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "cfg",
                                          "gist": "config is TOML, loaded once", "notes": ["new 1", "new 2"]})
    assert sc["created"] is False and sc["node"]["notes"] == ["new 1", "new 2"]
    assert sc["node"]["touches"] == ["config.toml"]
    sc = daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "cfg",
                                          "gist": "config is TOML, loaded once", "touches": []})
    assert sc["node"]["touches"] == [] and sc["node"]["notes"] == ["new 1", "new 2"]
    node = daemon.call_tool("kg_read", {"session_id": sid, "id": "cfg"})["nodes"][0]
    assert (node["gist"], node["notes"], node["touches"]) == ("config is TOML, loaded once", ["new 1", "new 2"], [])
    # Same id at the other level is another node.
    sc = daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "cfg", "gist": "user cfg"})
    assert sc["created"] is True and sc["level"] == "user"


def test_put_edge_create_then_update_notes(daemon, project):
    sid = start(daemon, project)["session_id"]
    for nid in ("a", "b"):
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": nid, "gist": "node " + nid})
    r = daemon.call("kg_put_edge", {"session_id": sid, "level": "project", "from": "a", "to": "b", "rel": "explains",
                                    "notes": ["first"]})
    assert r["structuredContent"] == {"level": "project", "created": True,
                                      "edge": {"from": "a", "to": "b", "rel": "explains", "notes": ["first"]}}
    assert "explains" in text_of(r)
    sc = daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "a", "to": "b",
                                          "rel": "explains", "notes": ["second", "third"]})
    assert sc["created"] is False and sc["edge"]["notes"] == ["second", "third"]
    # A different rel is a different edge.
    sc = daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "a", "to": "b",
                                          "rel": "depends-on"})
    assert sc["created"] is True
    edges = daemon.call_tool("kg_read", {"session_id": sid})["project"]["edges"]
    assert sorted((e["rel"], tuple(e["notes"])) for e in edges) == [
        ("depends-on", ()),
        ("explains", ("second", "third")),
    ]
    # File-path ends.
    sc = daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "src/main.py",
                                          "to": "a", "rel": "uses"})
    assert sc["created"] is True and sc["edge"]["from"] == "src/main.py"


def test_delete_node_removes_its_edges(daemon, project):
    sid = start(daemon, project)["session_id"]
    calls = [("kg_put_node", {"session_id": sid, "level": "project", "id": n, "gist": "gist of " + n})
             for n in ("hub", "x", "y")]
    calls += [("kg_put_edge", {"session_id": sid, "level": "project", "from": f, "to": t, "rel": "r"})
              for f, t in (("hub", "x"), ("y", "hub"), ("hub", "src/hub.py"), ("x", "y"))]
    assert all(not r["isError"] for r in batch_call(daemon, calls))
    r = daemon.call("kg_delete_node", {"session_id": sid, "id": "hub"})
    assert r["structuredContent"] == {"level": "project", "id": "hub", "edges_removed": 3}
    assert "hub" in text_of(r)
    sc = daemon.call_tool("kg_read", {"session_id": sid})
    assert sorted(n["id"] for n in sc["project"]["nodes"]) == ["x", "y"]
    assert [(e["from"], e["to"]) for e in sc["project"]["edges"]] == [("x", "y")]
    sc = daemon.call_tool("kg_read", {"session_id": sid, "ids": ["hub", "x"]})
    assert sc["missing"] == ["hub"]
    assert [(e["from"], e["to"]) for e in sc["nodes"][0]["edges"]] == [("x", "y")]
    # Deleting it again is a tool error.
    tool_error(daemon.call("kg_delete_node", {"session_id": sid, "id": "hub"}))


def test_delete_edge(daemon, project):
    sid = start(daemon, project)["session_id"]
    daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "u", "gist": "user node"})
    daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "user", "from": "u", "to": "docs/x.md",
                                     "rel": "documented-in", "notes": ["n"]})
    daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "user", "from": "u", "to": "docs/x.md",
                                     "rel": "other"})
    r = daemon.call("kg_delete_edge", {"session_id": sid, "from": "u", "to": "docs/x.md", "rel": "documented-in"})
    assert r["structuredContent"]["level"] == "user"
    e = r["structuredContent"]["edge"]
    assert (e["from"], e["to"], e["rel"]) == ("u", "docs/x.md", "documented-in")
    edges = daemon.call_tool("kg_read", {"session_id": sid})["user"]["edges"]
    assert [x["rel"] for x in edges] == ["other"]
    tool_error(daemon.call("kg_delete_edge", {"session_id": sid, "from": "u", "to": "docs/x.md",
                                              "rel": "documented-in"}))
    # The node stays.
    assert daemon.call_tool("kg_read", {"session_id": sid, "id": "u"})["missing"] == []


# ================================================================ search

def test_search(daemon, project, tmp_path):
    sid = start(daemon, project)["session_id"]
    calls = [
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "cache-invalidation",
                         "gist": "Cache entries are invalidated by the cache bus on every cache write"}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "cache", "gist": "Short"}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "only-notes", "gist": "unrelated gist",
                         "notes": ["the CACHE warms up slowly"]}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "only-touches", "gist": "unrelated too",
                         "touches": ["src/Cache.py"]}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "user-caching-rule",
                         "gist": "Never cache secrets"}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "nothing", "gist": "does not match"}),
    ]
    assert all(not r["isError"] for r in batch_call(daemon, calls))
    for query in ("cache", "CACHE", "Cache"):
        r = daemon.call("kg_search", {"query": query, "session_id": sid})
        results = r["structuredContent"]["results"]
        ids = [x["id"] for x in results]
        assert ids[0] == "cache", (query, ids)
        assert set(ids) == {"cache", "cache-invalidation", "only-notes", "only-touches", "user-caching-rule"}
        for x in results:
            assert x["level"] in ("user", "project") and x["state"] == "active"
            assert isinstance(x["score"], (int, float))
            assert {"id", "gist", "notes", "touches"} <= set(x)
        assert {x["level"] for x in results} == {"user", "project"}
        # Best first: scores never increase.
        scores = [x["score"] for x in results]
        assert scores == sorted(scores, reverse=True)
        # id / gist matches rank above notes / touches matches.
        assert ids.index("cache-invalidation") < ids.index("only-notes")
        assert ids.index("cache-invalidation") < ids.index("only-touches")
        text = text_of(r)
        assert "cache-invalidation" in text and len(text) <= 10000
    ids = [x["id"] for x in daemon.call_tool("kg_search", {"query": "cache", "session_id": sid, "limit": 2})["results"]]
    assert len(ids) == 2 and ids[0] == "cache"
    # More of the query words rank higher.
    ids = [x["id"] for x in daemon.call_tool("kg_search", {"query": "warms slowly cache",
                                                           "session_id": sid})["results"]]
    assert ids[0] == "only-notes"
    # No session: user graph and every project graph on disk.
    ids = {x["id"] for x in daemon.call_tool("kg_search", {"query": "cache"})["results"]}
    assert {"cache", "user-caching-rule"} <= ids
    # Nothing matches.
    r = daemon.call("kg_search", {"query": "zzzqqq", "session_id": sid})
    assert r["structuredContent"]["results"] == [] and r["isError"] is False
    # Another project's nodes are not in this session's search.
    other = tmp_path / "other-proj"
    (other / ".git").mkdir(parents=True)
    sid2 = start(daemon, other)["session_id"]
    ids = {x["id"] for x in daemon.call_tool("kg_search", {"query": "cache", "session_id": sid2})["results"]}
    assert ids == {"user-caching-rule"}


def test_search_default_limit_is_20(daemon, project):
    sid = start(daemon, project)["session_id"]
    calls = [("kg_put_node", {"session_id": sid, "level": "project", "id": "widget-%02d" % i,
                              "gist": "widget number %d" % i}) for i in range(30)]
    assert all(not r["isError"] for r in batch_call(daemon, calls))
    assert len(daemon.call_tool("kg_search", {"query": "widget", "session_id": sid})["results"]) == 20
    assert len(daemon.call_tool("kg_search", {"query": "widget", "session_id": sid, "limit": 25})["results"]) == 25


# ================================================================ progress

def test_progress(daemon, project):
    sid = start(daemon, project)["session_id"]
    r = daemon.call("kg_progress", {"session_id": sid, "task_id": "migrate-db"})
    assert r["structuredContent"] == {"task_id": "migrate-db", "level": "user", "state": None}
    assert "migrate-db" in text_of(r)
    sc = daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db",
                                          "state": {"step": 3, "done": ["a", "b"]}})
    assert sc == {"task_id": "migrate-db", "level": "user", "state": {"step": 3, "done": ["a", "b"]}}
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db"})["state"] == \
        {"step": 3, "done": ["a", "b"]}
    # Replacing, not merging.
    daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db", "state": {"step": 4}})
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db"})["state"] == {"step": 4}
    # Levels are separate.
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db",
                                            "level": "project"})["state"] is None
    sc = daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db", "level": "project",
                                          "state": {"p": True}})
    assert sc["level"] == "project"
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db"})["state"] == {"step": 4}
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "migrate-db",
                                            "level": "project"})["state"] == {"p": True}
    # Another session sees the user-level state.
    sid2 = start(daemon, project)["session_id"]
    assert daemon.call_tool("kg_progress", {"session_id": sid2, "task_id": "migrate-db"})["state"] == {"step": 4}


# ================================================================ tool errors

def _error_cases(sid):
    long_id = "x" * 5000
    return [
        ("kg_put_node", {"level": "user", "id": "a", "gist": "g"}),                       # missing session_id
        ("kg_put_node", {"session_id": "no-such-session", "level": "user", "id": "a", "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "team", "id": "a", "gist": "g"}),     # bad level
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a"}),                  # new node without gist
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": 5}),       # wrong type
        ("kg_put_node", {"session_id": sid, "level": "user", "id": 7, "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": "g", "notes": "x", "colour": "red"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": "g", "colour": "red"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": "g", "notes": [1, 2]}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a\x00b", "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "a\x1b[31mb", "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "line\nbreak", "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "", "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": long_id, "gist": "g"}),
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "ok", "gist": "g\x00"}),
        ("kg_put_edge", {"session_id": sid, "level": "user", "from": "a", "to": "b"}),     # missing rel
        ("kg_put_edge", {"session_id": sid, "level": "nope", "from": "a", "to": "b", "rel": "r"}),
        ("kg_put_edge", {"session_id": sid, "level": "user", "from": "a\x00", "to": "b.py", "rel": "r"}),
        ("kg_delete_node", {"session_id": sid, "id": "does-not-exist"}),                  # unknown node
        ("kg_delete_node", {"session_id": sid, "id": "does-not-exist", "level": "project"}),
        ("kg_delete_node", {"id": "x"}),
        ("kg_delete_edge", {"session_id": sid, "from": "a", "to": "b", "rel": "none"}),
        ("kg_read", {"cwd": "relative/path"}),
        ("kg_read", {"cwd": "/definitely/not/a/real/dir/xyz"}),
        ("kg_read", {"cwd": 5}),
        ("kg_read", {"session_id": sid, "id": "a\x00"}),
        ("kg_read", {"session_id": sid, "ids": "not-a-list"}),
        ("kg_read", {"session_id": sid, "level": "galaxy", "id": "a"}),
        ("kg_search", {}),
        ("kg_search", {"query": 5}),
        ("kg_search", {"query": "x", "limit": "5"}),
        ("kg_search", {"query": "x", "limit": 0}),
        ("kg_search", {"query": "   "}),
        ("kg_sync", {}),
        ("kg_sync", {"session_id": "no-such-session"}),
        ("kg_sync", {"session_id": sid, "extra": 1}),
        ("kg_progress", {"session_id": sid}),
        ("kg_progress", {"session_id": sid, "task_id": "t", "state": "not an object"}),
        ("kg_progress", {"session_id": sid, "task_id": "t", "state": [1, 2]}),
        ("kg_progress", {"session_id": sid, "task_id": "t", "level": "global"}),
    ]


def test_tool_failures_are_error_results(daemon, project):
    sid = start(daemon, project)["session_id"]
    cases = _error_cases(sid)
    results = batch_call(daemon, cases)
    for (name, args), result in zip(cases, results):
        try:
            tool_error(result)
        except AssertionError:
            raise AssertionError("%s %r should be a tool error, got %r" % (name, args, result))
    # Nothing was written by any of them.
    sc = daemon.call_tool("kg_read", {"session_id": sid})
    assert sc["user"]["nodes"] == [] and sc["project"]["nodes"] == []
    assert sc["user"]["edges"] == [] and sc["project"]["edges"] == []


def test_tool_error_texts_say_what_to_do(daemon, project):
    sid = start(daemon, project)["session_id"]
    text = tool_error(daemon.call("kg_put_node", {"level": "user", "id": "a", "gist": "g"}))
    assert "session_id" in text
    text = tool_error(daemon.call("kg_put_node", {"session_id": sid, "level": "team", "id": "a", "gist": "g"}))
    assert "level" in text and "user" in text and "project" in text
    text = tool_error(daemon.call("kg_delete_node", {"session_id": sid, "id": "does-not-exist"}))
    assert "does-not-exist" in text
    text = tool_error(daemon.call("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": "g",
                                                  "colour": "red"}))
    assert "colour" in text
    text = tool_error(daemon.call("kg_put_node", {"session_id": sid, "level": "user", "id": "a", "gist": 5}))
    assert "gist" in text


# ================================================================ two sessions and kg_sync

def _ids(nodes):
    return sorted((n["level"], n["id"]) for n in nodes)


def test_sync_between_two_sessions(daemon, project):
    a = start(daemon, project)["session_id"]
    b = start(daemon, project / "src")["session_id"]
    assert a != b
    # Nothing yet.
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert sc["session_id"] == a
    assert (sc["nodes"], sc["edges"], sc["deleted_nodes"], sc["deleted_edges"]) == ([], [], [], [])
    # B writes, then A writes.
    for args in ({"level": "project", "id": "b-proj", "gist": "from B", "notes": ["bn"]},
                 {"level": "user", "id": "b-user", "gist": "user from B"},
                 {"level": "project", "id": "b-other", "gist": "another from B"}):
        daemon.call_tool("kg_put_node", dict(args, session_id=b))
    daemon.call_tool("kg_put_edge", {"session_id": b, "level": "project", "from": "b-proj", "to": "b-other",
                                     "rel": "explains", "notes": ["en"]})
    daemon.call_tool("kg_put_node", {"session_id": a, "level": "project", "id": "a-proj", "gist": "from A"})
    daemon.call_tool("kg_put_node", {"session_id": a, "level": "user", "id": "a-user", "gist": "user from A"})
    daemon.call_tool("kg_put_edge", {"session_id": a, "level": "project", "from": "a-proj", "to": "b-proj",
                                     "rel": "uses"})
    r = daemon.call("kg_sync", {"session_id": a})
    sc = r["structuredContent"]
    assert _ids(sc["nodes"]) == [("project", "b-other"), ("project", "b-proj"), ("user", "b-user")]
    node = [n for n in sc["nodes"] if n["id"] == "b-proj"][0]
    assert node["gist"] == "from B" and node["notes"] == ["bn"] and node["state"] == "active"
    assert [(e["level"], e["from"], e["to"], e["rel"], e["notes"]) for e in sc["edges"]] == \
        [("project", "b-proj", "b-other", "explains", ["en"])]
    assert sc["deleted_nodes"] == [] and sc["deleted_edges"] == []
    text = text_of(r)
    assert "b-proj" in text and "a-proj" not in text
    # B sees A's writes, never its own.
    sc = daemon.call_tool("kg_sync", {"session_id": b})
    assert _ids(sc["nodes"]) == [("project", "a-proj"), ("user", "a-user")]
    assert [(e["from"], e["to"], e["rel"]) for e in sc["edges"]] == [("a-proj", "b-proj", "uses")]
    # B deletes a node (with its edges) and an edge.
    daemon.call_tool("kg_delete_edge", {"session_id": b, "from": "b-proj", "to": "b-other", "rel": "explains"})
    daemon.call_tool("kg_delete_node", {"session_id": b, "id": "b-user"})
    daemon.call_tool("kg_delete_node", {"session_id": b, "id": "b-proj", "level": "project"})
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert sorted((d["level"], d["id"]) for d in sc["deleted_nodes"]) == [("project", "b-proj"), ("user", "b-user")]
    deleted_edges = sorted((d["level"], d["from"], d["to"], d["rel"]) for d in sc["deleted_edges"])
    assert ("project", "b-proj", "b-other", "explains") in deleted_edges
    # A's own edge went with b-proj: deleted by B, so A hears of it.
    assert ("project", "a-proj", "b-proj", "uses") in deleted_edges
    assert sc["nodes"] == []
    # Nothing new: empty.
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert (sc["nodes"], sc["edges"], sc["deleted_nodes"], sc["deleted_edges"]) == ([], [], [], [])
    # Interleaving: B writes, A syncs, B writes again, A syncs -> only the second write.
    daemon.call_tool("kg_put_node", {"session_id": b, "level": "project", "id": "first", "gist": "one"})
    assert _ids(daemon.call_tool("kg_sync", {"session_id": a})["nodes"]) == [("project", "first")]
    daemon.call_tool("kg_put_node", {"session_id": b, "level": "project", "id": "second", "gist": "two"})
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert _ids(sc["nodes"]) == [("project", "second")]
    assert sc["edges"] == [] and sc["deleted_nodes"] == [] and sc["deleted_edges"] == []
    # A's own write between syncs is left out, B's update of an old node comes back.
    daemon.call_tool("kg_put_node", {"session_id": a, "level": "project", "id": "first", "gist": "one by A"})
    daemon.call_tool("kg_put_node", {"session_id": b, "level": "project", "id": "second", "gist": "two again"})
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert [(n["id"], n["gist"]) for n in sc["nodes"]] == [("second", "two again")]


def test_sync_ignores_other_projects(daemon, project, tmp_path):
    other = tmp_path / "elsewhere"
    (other / ".git").mkdir(parents=True)
    a = start(daemon, project)["session_id"]
    c = start(daemon, other)["session_id"]
    daemon.call_tool("kg_put_node", {"session_id": c, "level": "project", "id": "other-proj", "gist": "x"})
    daemon.call_tool("kg_put_node", {"session_id": c, "level": "user", "id": "shared-user", "gist": "y"})
    sc = daemon.call_tool("kg_sync", {"session_id": a})
    assert _ids(sc["nodes"]) == [("user", "shared-user")]


def test_sync_under_concurrent_writes_misses_nothing(daemon, project):
    """Batches of writes by B interleaved with A's syncs: the union of A's syncs is every write of B."""
    a = start(daemon, project)["session_id"]
    b = start(daemon, project)["session_id"]
    import threading
    written, failures = [], []
    port = daemon.port

    def write_loop():
        # A second HTTP client for B's writes (the fixture's connection is not thread-safe).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for i in range(0, 60, 5):
                msgs = [{"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {
                    "name": "kg_put_node", "arguments": {"session_id": b, "level": "project",
                                                         "id": "w-%03d" % (i + k), "gist": "write %d" % (i + k)}}}
                    for k in range(5)]
                conn.request("POST", "/mcp", json.dumps(msgs), {"Content-Type": "application/json"})
                out = json.loads(conn.getresponse().read())
                if any(r["result"]["isError"] for r in out):
                    failures.append(out)
                written.extend("w-%03d" % (i + k) for k in range(5))
        except Exception as exc:  # reported below
            failures.append(exc)
        finally:
            conn.close()

    t = threading.Thread(target=write_loop)
    t.start()
    seen = set()
    while t.is_alive():
        seen.update(n["id"] for n in daemon.call_tool("kg_sync", {"session_id": a})["nodes"])
    t.join()
    seen.update(n["id"] for n in daemon.call_tool("kg_sync", {"session_id": a})["nodes"])
    assert not failures, failures
    assert len(written) == 60
    assert seen == set(written)


# ================================================================ output size

def _fill(daemon, sid, n, level="project", prefix="bulk", per_post=100):
    for startn in range(0, n, per_post):
        calls = []
        for i in range(startn, min(n, startn + per_post)):
            gist = ("Insight %04d about the subsystem: retries back off exponentially, logs go to journald, "
                    "ok" % i)
            calls.append(("kg_put_node", {"session_id": sid, "level": level, "id": "%s-%04d" % (prefix, i),
                                          "gist": gist}))
        for r in batch_call(daemon, calls):
            assert r["isError"] is False, r


def stringify(obj):
    """JSON.stringify as a JavaScript client (Claude Code) computes it: compact, non-ASCII kept."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def session_of(daemon, cwd):
    """Start a session in either mode: the id is on the text's first line."""
    r = daemon.call("kg_read", {"cwd": str(cwd)})
    assert r["isError"] is False, r
    return re.match(r"Session: (\S+)\n", text_of(r)).group(1)


def _schemas(daemon):
    return {t["name"]: t.get("outputSchema") for t in daemon.rpc("tools/list")["result"]["tools"]}


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured-output"])
def test_output_size_with_2600_nodes_in_grace(make_daemon, project, structured):
    """What a client hands the model (structuredContent when present, else the text) stays
    bounded: by default the full read is under 45 KB on the wire."""
    daemon = make_daemon(args=["--structured-output"] if structured else [], env={"KG_STRUCTURED_OUTPUT": "0"})
    sid = session_of(daemon, project)
    t0 = time.monotonic()
    _fill(daemon, sid, 2600)
    fill_s = time.monotonic() - t0
    ids = ["bulk-%04d" % i for i in range(2600)]
    status, _, raw = daemon.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                                 "params": {"name": "kg_read",
                                                                            "arguments": {"session_id": sid}}}))
    assert status == 200
    result = json.loads(raw)["result"]
    text = text_of(result)
    assert len(text) <= 40000, len(text)
    assert "Session: %s" % sid in text
    # All new nodes are in grace: nothing can be archived, every one is active.
    assert "## Project graph: 2600 active, 0 archived" in text, "nodes in grace were archived"
    words = set(re.findall(r"[A-Za-z0-9_.-]+", text))
    missing = [i for i in ids if i not in words]
    if missing:
        counts = [int(m.group(1)) for m in re.finditer(
            r"(\d+)[^\n\d]{0,60}?(not listed|left out|omitted|not shown|more|older)", text)]
        assert any(c >= len(missing) for c in counts), \
            "%d node ids are neither listed nor counted in the text" % len(missing)
    schemas = _schemas(daemon)
    if structured:
        sc = result["structuredContent"]
        assert len(stringify(sc)) <= 40000
        assert len(sc["project"]["nodes"]) + sc["truncated"]["project"]["nodes"] == 2600
        assert sc["project"]["archived"] == []
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(sc, schemas["kg_read"])
    else:
        assert set(result) == {"content", "isError"}
        assert len(raw) < 45000, "full kg_read is %d bytes on the wire" % len(raw)
        assert all(v is None for v in schemas.values())
    # kg_search: at most 10,000 characters whatever the limit.
    for limit in (20, 200):
        r = daemon.call("kg_search", {"query": "subsystem retries journald", "session_id": sid, "limit": limit})
        assert len(text_of(r)) <= 10000
        if structured:
            sc = r["structuredContent"]
            assert len(stringify(sc)) <= 10000
            assert len(sc["results"]) + sc.get("truncated", {}).get("results", 0) == limit
        else:
            assert "structuredContent" not in r
            shown = len(re.findall(r"^- bulk-\d{4} \(project\): ", text_of(r), re.M))
            more = re.search(r"… (\d+) more not shown", text_of(r))
            assert shown + (int(more.group(1)) if more else 0) == limit
    r = daemon.call("kg_search", {"query": "subsystem", "limit": 200})
    assert len(text_of(r)) <= 10000
    assert len(stringify(r.get("structuredContent"))) <= 10000
    assert fill_s < 60, "writing 2,600 nodes took %.1fs" % fill_s


def test_default_mode_results_are_text_only(plain, project):
    """Claude Code hands the model JSON.stringify(structuredContent) instead of the text whenever it
    is there: by default no tool lists an outputSchema and every result is one text item, in both
    protocol generations, on / and on /mcp."""
    sid = session_of(plain, project)
    for path in ("/mcp", "/"):
        for stateless in (False, True):
            tag = "%s-%s" % ("s" if stateless else "h", "m" if path == "/mcp" else "r")
            calls = [
                ("kg_put_node", {"session_id": sid, "level": "project", "id": tag + "-a", "gist": "first"}),
                ("kg_put_node", {"session_id": sid, "level": "user", "id": tag + "-b", "gist": "second"}),
                ("kg_put_edge", {"session_id": sid, "level": "project", "from": tag + "-a", "to": "src/a.py",
                                 "rel": "in"}),
                ("kg_read", {"session_id": sid, "ids": [tag + "-a", tag + "-b"]}),
                ("kg_read", {"session_id": sid}), ("kg_read", {"cwd": str(project)}),
                ("kg_search", {"query": tag, "session_id": sid}), ("kg_sync", {"session_id": sid}),
                ("kg_progress", {"session_id": sid, "task_id": tag, "state": {"n": 1}}),
                ("kg_progress", {"session_id": sid, "task_id": tag}),
                ("kg_delete_edge", {"session_id": sid, "from": tag + "-a", "to": "src/a.py", "rel": "in"}),
                ("kg_delete_node", {"session_id": sid, "id": tag + "-b"})]
            if stateless:
                _, _, listed = post(plain, {"jsonrpc": "2.0", "id": 0, "method": "tools/list",
                                            "params": {"_meta": stateless_meta()}}, stateless_headers("tools/list"),
                                    path=path)
            else:
                _, _, listed = post(plain, {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}, path=path)
            assert all("outputSchema" not in t for t in listed["result"]["tools"]), (path, stateless)
            for i, (name, args) in enumerate(calls):
                params = {"name": name, "arguments": args}
                if stateless:
                    params["_meta"] = stateless_meta()
                status, _, obj = post(plain, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": params},
                                      stateless_headers("tools/call", name) if stateless else None, path=path)
                assert status == 200, obj
                r = obj["result"]
                extra = {"resultType", "_meta"} if stateless else set()
                assert set(r) == {"content", "isError"} | extra, (name, path, stateless, r)
                assert r["isError"] is False and len(r["content"]) == 1 and r["content"][0]["type"] == "text"
                assert r["content"][0]["text"], name
                if name == "kg_read":
                    assert r["content"][0]["text"].startswith("Session: "), r


def test_structured_output_from_the_environment(make_daemon, project):
    d = make_daemon(env={"KG_STRUCTURED_OUTPUT": "1"})
    assert all(t.get("outputSchema") for t in d.rpc("tools/list")["result"]["tools"])
    assert d.call_tool("kg_read", {"cwd": str(project)})["session_id"]


def test_output_size_with_long_gists_and_notes(daemon, project):
    """Fewer nodes, but long gists and many edges: the text still fits and names every active id."""
    sid = start(daemon, project)["session_id"]
    calls = [("kg_put_node", {"session_id": sid, "level": "user", "id": "long-%03d" % i,
                              "gist": ("word%d " % i) * 250, "notes": ["n" * 5000]}) for i in range(100)]
    assert all(not r["isError"] for r in batch_call(daemon, calls))
    calls = [("kg_put_edge", {"session_id": sid, "level": "user", "from": "long-%03d" % i,
                              "to": "src/some/quite/long/path/to/a/file_%03d.py" % j, "rel": "implemented-in"})
             for i in range(100) for j in range(5)]
    for k in range(0, len(calls), 100):
        assert all(not r["isError"] for r in batch_call(daemon, calls[k:k + 100]))
    result = daemon.call("kg_read", {"session_id": sid})
    text = text_of(result)
    assert len(text) <= 40000
    assert "## User graph: 100 active" in text
    active = ["long-%03d" % i for i in range(100)]
    assert len(stringify(result["structuredContent"])) <= 40000
    words = set(re.findall(r"[A-Za-z0-9_.-]+", text))
    missing = [i for i in active if i not in words]
    if missing:
        counts = [int(m.group(1)) for m in re.finditer(
            r"(\d+)[^\n\d]{0,60}?(not listed|left out|omitted|not shown|more|older)", text)]
        assert any(c >= len(missing) for c in counts)
    r = daemon.call("kg_search", {"query": "word1 word2 word3", "session_id": sid, "limit": 200})
    assert len(text_of(r)) <= 10000
