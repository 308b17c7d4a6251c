"""Nobody in (contract section 2): Host and Origin guards against DNS rebinding (MCP, REST, /ws, /ui), the
optional bearer token, loopback binding by default and a loud warning when bound elsewhere
without a token, 0600 / 0700 permissions under the root, and nothing secret in the log at INFO."""

import base64
import http.client
import json
import os
import re
import socket
import stat

import pytest

from helpers import START_LINE, Daemon

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-T0KEN-7f1c2a9e"
WS_KEY = base64.b64encode(b"0123456789abcdef").decode()


def req(port, method, path, headers=None, body=None):
    """One request on a fresh connection; Host is whatever `headers` says (default 127.0.0.1:PORT)."""
    hdrs = {"Host": "127.0.0.1:%d" % port}
    if body is not None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    hdrs = {k: v for k, v in hdrs.items() if v is not None}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in hdrs.items():
            c.putheader(k, v)
        if body is not None:
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        data = r.read() if r.status != 101 else b""
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def ws_headers(extra=None):
    h = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": WS_KEY}
    h.update(extra or {})
    return h


PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

# (method, path, body, extra headers, success status)
SURFACES = [
    ("POST", "/mcp", PING, {}, 200),
    ("POST", "/", PING, {}, 200),
    ("GET", "/api/projects", None, {}, 200),
    ("PUT", "/api/nodes/user/sec-node", {"gist": "g"}, {}, 200),
    ("GET", "/ws", None, ws_headers(), 101),
    ("GET", "/ui", None, {}, 200),
]
SURFACE_IDS = ["mcp", "mcp-root", "rest-get", "rest-put", "ws", "ui"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One daemon for the guard tests (they only read, or refuse before writing)."""
    d = Daemon(tmp_path_factory.mktemp("security") / "root").start()
    yield d
    d.stop()


# ------------------------------------------------------------------------------ Host guard

BAD_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "127.0.0.1.evil.example:{port}",
             "localhost.evil", "localhost.evil:{port}", "evil.localhost.example", "0x7f000001.evil",
             "attacker.com:{port}"]
GOOD_HOSTS = ["localhost", "localhost:{port}", "127.0.0.1", "127.0.0.1:{port}", "[::1]:{port}", "[::1]",
              "LOCALHOST:{port}"]


def check_guard(shared, surface, header, bad, good):
    """Each bad value of `header` is refused with 403 and a JSON error; each good one gets the surface's status."""
    method, path, body, extra, ok = surface
    for value in bad:
        h = dict(extra, **{header: value.format(port=shared.port)})
        st, hdrs, data = req(shared.port, method, path, h, body)
        assert st == 403, (value, st, data[:200])
        assert "error" in json.loads(data), data
    for value in good:
        h = dict(extra, **{header: value.format(port=shared.port)})
        st, hdrs, data = req(shared.port, method, path, h, body)
        assert st == ok, (value, st, data[:200])


@pytest.mark.parametrize("surface", SURFACES, ids=SURFACE_IDS)
def test_host_guard(shared, surface):
    check_guard(shared, surface, "Host", BAD_HOSTS, GOOD_HOSTS)


@pytest.mark.parametrize("host", ["[::1].evil.example", "[::1]evil.example:80", "[::1]:80.evil.example"])
def test_host_guard_rejects_text_after_an_ipv6_literal(shared, host):
    """Browsers never send these, but the guard must not read '[::1]' out of a longer name."""
    st, _, data = req(shared.port, "POST", "/mcp", {"Host": host}, PING)
    assert st == 403, (host, st, data[:200])


def test_host_guard_on_health_and_errors(shared):
    st, _, data = req(shared.port, "GET", "/health", {"Host": "evil.example:%d" % shared.port})
    assert st == 403, data
    st, _, data = req(shared.port, "GET", "/.well-known/oauth-authorization-server", {"Host": "evil.example"})
    assert st == 403, data
    st, _, data = req(shared.port, "GET", "/health")
    assert st == 200


# ------------------------------------------------------------------------------ Origin guard

BAD_ORIGINS = ["http://evil.example", "null", "https://evil.example", "http://evil.example:{port}",
               "http://localhost.evil.example", "http://127.0.0.1.evil.example", "file://", "chrome-extension://abc",
               "http://127.0.0.1@evil.example", "http://evil.example/http://localhost", "ws://evil.example"]
GOOD_ORIGINS = ["http://localhost:5173", "http://127.0.0.1", "http://127.0.0.1:{port}", "http://localhost",
                "https://localhost:8443", "http://[::1]:{port}"]


@pytest.mark.parametrize("surface", SURFACES, ids=SURFACE_IDS)
def test_origin_guard(shared, surface):
    check_guard(shared, surface, "Origin", BAD_ORIGINS, GOOD_ORIGINS)
    method, path, body, extra, ok = surface
    # no Origin at all: a non-browser client, passes
    st, _, data = req(shared.port, method, path, extra, body)
    assert st == ok, data[:200]


def test_guards_refuse_before_acting(daemon):
    """A refused request changes nothing: the write behind a bad Host / Origin never happens."""
    for h in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
        st, _, _ = req(daemon.port, "PUT", "/api/nodes/user/should-not-exist", h, {"gist": "nope"})
        assert st == 403
    st, _, data = req(daemon.port, "GET", "/api/nodes/user/should-not-exist")
    assert st == 404, data


# ------------------------------------------------------------------------------ bearer token

@pytest.fixture
def guarded(make_daemon):
    return make_daemon(args=["--token", TOKEN])


def bearer(v):
    return {"Authorization": "Bearer " + v}


def assert_401(st, hdrs, data):
    assert st == 401, (st, data[:200])
    assert hdrs.get("www-authenticate", "").lower().startswith("bearer"), hdrs
    body = json.loads(data)
    assert "error" in body
    assert TOKEN not in data.decode("utf-8", "replace")


@pytest.mark.parametrize("surface", [s for s in SURFACES if s[1] != "/ui"],
                         ids=[i for s, i in zip(SURFACES, SURFACE_IDS) if s[1] != "/ui"])
def test_token_required(guarded, surface):
    method, path, body, extra, ok = surface
    port = guarded.port
    wrong = [None, "", "wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), " " + TOKEN + "x", "\u00ff" + TOKEN]
    for value in wrong:
        h = dict(extra)
        if value is not None:
            h.update({"Authorization": ("Bearer " + value).encode("utf-8").decode("latin-1")})
        assert_401(*req(port, method, path, h, body))
    for scheme in ("Basic " + base64.b64encode(("user:" + TOKEN).encode()).decode(), TOKEN, "Token " + TOKEN):
        assert_401(*req(port, method, path, dict(extra, Authorization=scheme), body))
    st, hdrs, data = req(port, method, path, dict(extra, **bearer(TOKEN)), body)
    assert st == ok, (st, data[:200])
    st, hdrs, data = req(port, method, path, dict(extra, Authorization="bearer " + TOKEN), body)
    assert st == ok, ("the auth scheme is case-insensitive (RFC 7235)", st, data[:200])


def test_token_exemptions_and_ws_query(guarded):
    port = guarded.port
    st, _, data = req(port, "GET", "/health")
    assert st == 200 and json.loads(data)["status"] == "ok"
    st, hdrs, data = req(port, "GET", "/ui")
    assert st == 200 and hdrs["content-type"].startswith("text/html")
    assert TOKEN.encode() not in data
    # everything else needs it, /api/health included (only GET /health and /ui are exempt)
    assert_401(*req(port, "GET", "/api/health"))
    assert_401(*req(port, "POST", "/health", None, {}))
    assert_401(*req(port, "GET", "/api/openapi.json"))
    assert_401(*req(port, "GET", "/no-such-path"))
    # the browser WebSocket passes it as ?token=
    st, hdrs, _ = req(port, "GET", "/ws?token=" + TOKEN, ws_headers())
    assert st == 101, st
    assert_401(*req(port, "GET", "/ws?token=wrong", ws_headers()))
    assert_401(*req(port, "GET", "/ws?token=", ws_headers()))
    assert_401(*req(port, "GET", "/ws", ws_headers()))
    # ...and only the WebSocket: a token in a REST or MCP URL is refused (it would leak into logs and history)
    assert_401(*req(port, "GET", "/api/projects?token=" + TOKEN))
    assert_401(*req(port, "POST", "/mcp?token=" + TOKEN, None, PING))


def test_token_from_environment_and_flag_precedence(make_daemon):
    d = make_daemon(env={"KG_TOKEN": "from-env-token"})
    assert_401(*req(d.port, "GET", "/api/projects"))
    assert req(d.port, "GET", "/api/projects", bearer("from-env-token"))[0] == 200
    d.stop()
    d2 = make_daemon(args=["--token", TOKEN], env={"KG_TOKEN": "from-env-token"})
    assert_401(*req(d2.port, "GET", "/api/projects", bearer("from-env-token")))
    assert req(d2.port, "GET", "/api/projects", bearer(TOKEN))[0] == 200


def test_guards_apply_with_a_token_too(guarded):
    port = guarded.port
    st, _, _ = req(guarded.port, "POST", "/mcp", dict(bearer(TOKEN), Host="evil.example"), PING)
    assert st == 403
    st, _, _ = req(guarded.port, "POST", "/mcp", dict(bearer(TOKEN), Origin="http://evil.example"), PING)
    assert st == 403
    st, _, _ = req(port, "POST", "/mcp", bearer(TOKEN), PING)
    assert st == 200


# ------------------------------------------------------------------------------ binding

def listening_addresses(pid, port):
    """Local addresses of the LISTEN sockets on `port` in the daemon's network namespace."""
    out = []
    for name, width in (("tcp", 8), ("tcp6", 32)):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            addr, hexport = cols[1].split(":")
            if int(hexport, 16) == port and cols[3] == "0A":
                if width == 8:
                    out.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]))
                else:
                    raw = b"".join(bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 32, 8))
                    out.append(socket.inet_ntop(socket.AF_INET6, raw))
    return out


def start_line(d):
    for line in d.stderr_lines:
        m = START_LINE.search(line)
        if m:
            return m
    raise AssertionError("no start line in %r" % d.stderr_lines)


def warnings_of(d):
    return [line for line in d.stderr_lines if not START_LINE.search(line) and
            re.search(r"warn|token|anyone", line, re.I)]


@pytest.mark.skipif(not os.path.exists("/proc/self/net/tcp"), reason="needs Linux /proc")
def test_binds_loopback_by_default(daemon):
    m = start_line(daemon)
    assert m.group(2) == "127.0.0.1", m.group(0)
    assert listening_addresses(daemon.proc.pid, daemon.port) == ["127.0.0.1"]
    assert not warnings_of(daemon), daemon.stderr_lines


def test_loud_warning_when_bound_elsewhere_without_token(make_daemon):
    d = make_daemon(args=["--host", "0.0.0.0"])
    m = start_line(d)
    assert m.group(2) == "0.0.0.0"
    warned = [line for line in d.stderr_lines if "token" in line.lower() and "0.0.0.0" in line]
    assert warned, "no warning about listening on 0.0.0.0 without a token: %r" % d.stderr_lines
    assert "WARNING" in warned[0] or "warning" in warned[0].lower()
    if os.path.exists("/proc/self/net/tcp"):
        assert listening_addresses(d.proc.pid, d.port) == ["0.0.0.0"]
    # it still answers on loopback, with the Host guard in place
    assert req(d.port, "GET", "/health")[0] == 200
    assert req(d.port, "GET", "/health", {"Host": "evil.example"})[0] == 403
    d.stop()
    quiet = make_daemon(args=["--host", "0.0.0.0", "--token", TOKEN])
    assert not [line for line in quiet.stderr_lines if "WITHOUT a token" in line or "without a token" in line.lower()]
    assert TOKEN not in "".join(quiet.stderr_lines)


def test_warning_for_env_host_too(make_daemon):
    d = make_daemon(env={"KG_HOST": "0.0.0.0"})
    assert start_line(d).group(2) == "0.0.0.0"
    assert [line for line in d.stderr_lines if "token" in line.lower() and "0.0.0.0" in line], d.stderr_lines


# ------------------------------------------------------------------------------ permissions

def write_a_bit(d, project, canary="perm"):
    sid = d.call_tool("kg_read", {"cwd": str(project / "src")})["session_id"]
    for level in ("user", "project"):
        d.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": "%s-a" % canary,
                                    "gist": "gist %s" % canary, "notes": ["note %s" % canary],
                                    "touches": ["src/%s.py" % canary]})
        d.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": "%s-b" % canary, "gist": "b"})
        d.call_tool("kg_put_edge", {"session_id": sid, "level": level, "from": "%s-a" % canary,
                                    "to": "%s-b" % canary, "rel": "explains"})
        d.call_tool("kg_progress", {"session_id": sid, "task_id": "task-%s" % canary, "level": level,
                                    "state": {"step": "state %s" % canary}})
    return sid


def modes_under(root):
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        m = stat.S_IMODE(os.stat(dirpath).st_mode)
        if m != 0o700:
            bad.append("%s %o (want 700)" % (dirpath, m))
        for f in filenames:
            p = os.path.join(dirpath, f)
            m = stat.S_IMODE(os.lstat(p).st_mode)
            if m != 0o600:
                bad.append("%s %o (want 600)" % (p, m))
    return bad


def test_file_and_folder_modes_whatever_the_umask(make_daemon, project, tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)  # a pre-existing, too-open root gets tightened
    old = os.umask(0)
    try:
        d = make_daemon(root=root)
    finally:
        os.umask(old)
    write_a_bit(d, project)
    st, _, _ = req(d.port, "POST", "/api/sessions", None, {"project_path": str(project)})
    assert st == 200
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs]
    assert any(f.endswith("graph.json") or f.endswith(".journal") for f in files), files
    bad = modes_under(str(root))
    assert not bad, "while running:\n" + "\n".join(bad)
    assert d.stop() == 0
    bad = modes_under(str(root))
    assert not bad, "after shutdown:\n" + "\n".join(bad)
    assert any(f.endswith("graph.json") for dp, _, fs in os.walk(root) for f in fs)


# ------------------------------------------------------------------------------ logs

def test_info_log_holds_no_graph_content_and_no_token(make_daemon, project):
    d = make_daemon(args=["--token", TOKEN, "--log-level", "INFO"])
    auth = bearer(TOKEN)

    # writes through MCP (with the token), a search, a read by id, REST writes, and a WebSocket watcher
    def rpc(method, params):
        st, _, data = req(d.port, "POST", "/mcp", auth, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        assert st == 200, data
        return json.loads(data)

    read = rpc("tools/call", {"name": "kg_read", "arguments": {"cwd": str(project)}})
    sid = read["result"]["structuredContent"]["session_id"]
    s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    s.sendall(("GET /ws?token=%s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n" % (TOKEN, WS_KEY)).encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 101")
    try:
        for level in ("user", "project"):
            r = rpc("tools/call", {"name": "kg_put_node", "arguments": {
                "session_id": sid, "level": level, "id": "canary-node-%s" % level, "gist": "GISTCANARY %s" % level,
                "notes": ["NOTECANARY one", "NOTECANARY two"], "touches": ["src/TOUCHCANARY.py"]}})
            assert not r["result"]["isError"], r
            rpc("tools/call", {"name": "kg_put_edge", "arguments": {
                "session_id": sid, "level": level, "from": "canary-node-%s" % level, "to": "src/TOUCHCANARY.py",
                "rel": "RELCANARY", "notes": ["EDGENOTECANARY"]}})
            rpc("tools/call", {"name": "kg_progress", "arguments": {
                "session_id": sid, "task_id": "task", "level": level, "state": {"s": "STATECANARY"}}})
        rpc("tools/call", {"name": "kg_search", "arguments": {"query": "QUERYCANARY GISTCANARY"}})
        rpc("tools/call", {"name": "kg_read", "arguments": {"session_id": sid, "id": "canary-node-user"}})
        # failures and refusals must not log content either
        rpc("tools/call", {"name": "kg_put_node", "arguments": {
            "session_id": sid, "level": "user", "id": "canary-x", "gist": "GISTCANARY" * 500}})
        rpc("tools/call", {"name": "kg_read", "arguments": {"session_id": "SIDCANARY-unknown"}})
        st, _, _ = req(d.port, "PUT", "/api/nodes/user/rest-canary", auth,
                       {"gist": "GISTCANARY rest", "notes": ["NOTECANARY rest"]})
        assert st == 200
        req(d.port, "PUT", "/api/nodes/user/rest-canary", auth, b'{"gist": "GISTCANARY broken json')
        req(d.port, "GET", "/api/search?q=QUERYCANARY", auth)
        req(d.port, "GET", "/api/projects", {"Authorization": "Bearer TOKENCANARY-wrong"})
    finally:
        s.close()
    assert d.stop() == 0
    log = "".join(d.stderr_lines)
    for canary in ("GISTCANARY", "NOTECANARY", "TOUCHCANARY", "EDGENOTECANARY", "RELCANARY", "STATECANARY",
                   "QUERYCANARY", "TOKENCANARY", TOKEN):
        assert canary not in log, "%r appears in the INFO log:\n%s" % (
            canary, "\n".join(line for line in d.stderr_lines if canary in line)[:2000])


@pytest.mark.parametrize("size_line", [b"-1", b"-5", b"0x10", b"1_0", b"+5", b"zz"])
def test_chunked_body_with_a_bad_size_is_400(daemon, size_line):
    """A chunk size must be hex digits: a negative one would read to the end of the stream."""
    import socket as _socket
    with _socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as s:
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n" + b"x" * 100 + b"\r\n0\r\n\r\n")
        data = s.recv(65536)
    assert data.startswith(b"HTTP/1.1 400"), data[:200]
    assert daemon.json("GET", "/health")[0] == 200


def test_chunked_body_with_endless_trailers_is_cut_off(daemon):
    """Trailer lines after the last chunk are bounded: a client sending them forever is answered
    400 and let go, not served for good."""
    import socket as _socket
    with _socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as s:
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n")
        data = b""
        for i in range(10000):
            try:
                s.sendall(b"X-Trailer-%d: more\r\n" % i)
            except OSError:
                break
            s.settimeout(0.001)
            try:
                data += s.recv(65536)
            except (_socket.timeout, BlockingIOError):
                pass
            s.settimeout(10)
            if data:
                break
        if not data:
            data = s.recv(65536)
    assert data.startswith(b"HTTP/1.1 400") and b"trailer" in data, data[:300]
    assert daemon.json("GET", "/health")[0] == 200


def test_ipv6_loopback_bind(make_daemon):
    """--host ::1 serves on the IPv6 loopback."""
    import socket as _socket
    if not _socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        with _socket.socket(_socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    d = make_daemon(args=["--host", "::1"])
    import http.client
    c = http.client.HTTPConnection("::1", d.port, timeout=10)
    c.request("GET", "/health", headers={"Host": "[::1]:%d" % d.port})
    r = c.getresponse()
    assert r.status == 200
    c.close()
