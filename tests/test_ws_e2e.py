"""The live feed end to end (contract section 7): `GET /ws` on a real kgd, with the
`websockets` library as a real client, plus raw-socket tests for the RFC 6455 failure codes.

Pure framing rules live in test_ws_frames.py; here every byte crosses a real TCP socket.
"""

import base64
import inspect
import json
import os
import socket
import struct
import time
from urllib.parse import urlencode

import pytest

websockets = pytest.importorskip("websockets")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from kg.serve.ws import accept_key  # noqa: E402

pytestmark = pytest.mark.e2e

_CONNECT_PARAMS = inspect.signature(connect).parameters
TIMEOUT = 5.0
QUIET = 0.3  # how long "nothing arrives" is watched for


# ----------------------------------------------------------------------------- helpers

def ws_url(daemon, project_path=None, **extra):
    params = dict(extra)
    if project_path is not None:
        params["project_path"] = str(project_path)
    q = ("?" + urlencode(params)) if params else ""
    return "ws://127.0.0.1:%d/ws%s" % (daemon.port, q)


def open_ws(daemon, project_path=None, **kw):
    extra = {k: kw.pop(k) for k in list(kw) if k == "token"}
    kw.setdefault("open_timeout", TIMEOUT)
    kw.setdefault("close_timeout", TIMEOUT)
    if "proxy" in _CONNECT_PARAMS:  # websockets >= 15 follows $http_proxy by default
        kw.setdefault("proxy", None)
    kw.setdefault("compression", None)
    # Entering the connection marks it as used the modern way (websockets >= 16 warns otherwise);
    # older versions just return self.
    return connect(ws_url(daemon, project_path, **extra), **kw).__enter__()


def recv_json(ws, timeout=TIMEOUT):
    msg = ws.recv(timeout=timeout)
    assert isinstance(msg, str), msg
    return json.loads(msg)


def recv_event(ws, kind, timeout=TIMEOUT):
    """The next event of `kind`, skipping `compacted` notices."""
    deadline = time.monotonic() + timeout
    while True:
        ev = recv_json(ws, max(0.01, deadline - time.monotonic()))
        if ev.get("type") == "compacted" and kind != "compacted":
            continue
        assert ev.get("type") == kind, ev
        return ev


def assert_quiet(ws, seconds=QUIET):
    try:
        msg = ws.recv(timeout=seconds)
    except TimeoutError:
        return
    raise AssertionError("unexpected message: %r" % (msg,))


def connected(ws):
    hello = recv_json(ws)
    assert hello["type"] == "connected", hello
    assert "session_id" in hello
    return hello


@pytest.fixture
def sid(daemon, proj):
    return daemon.call_tool("kg_read", {"cwd": proj})["session_id"]


# ----------------------------------------------------------------------------- with `websockets`

def test_connected_message_first(daemon, proj):
    with open_ws(daemon, proj) as ws:
        hello = connected(ws)
        assert hello.get("project_path") == proj
    with open_ws(daemon) as ws:  # no project: user graph only
        hello = connected(ws)
        assert hello.get("project_path") is None


def test_connected_from_a_project_subfolder(daemon, proj, project):
    with open_ws(daemon, str(project / "src")) as ws:
        assert connected(ws).get("project_path") == proj


def test_mcp_put_arrives_as_event(daemon, proj, sid):
    with open_ws(daemon, proj) as ws:
        connected(ws)
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "u-node", "gist": "user gist",
                                         "notes": ["n"], "touches": ["src/a.py"]})
        ev = recv_event(ws, "node_put")
        assert ev["level"] == "user"
        assert "project_path" in ev
        assert ev["node"] == {"id": "u-node", "gist": "user gist", "notes": ["n"], "touches": ["src/a.py"],
                              "state": "active"}

        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "p-node", "gist": "proj gist"})
        ev = recv_event(ws, "node_put")
        assert ev["level"] == "project" and ev["project_path"] == proj
        assert ev["node"]["id"] == "p-node" and ev["node"]["gist"] == "proj gist"
        assert ev["node"]["state"] == "active"


def test_rest_put_arrives_as_event(daemon, proj):
    with open_ws(daemon, proj) as ws:
        connected(ws)
        st, _, _ = daemon.request("PUT", "/api/nodes/project/rest-node", {"gist": "g", "project_path": proj})
        assert st == 200
        ev = recv_event(ws, "node_put")
        assert ev["level"] == "project" and ev["node"]["id"] == "rest-node"


def test_other_projects_writes_do_not_arrive(daemon, proj, other_project, sid):
    other_sid = daemon.call_tool("kg_read", {"cwd": other_project})["session_id"]
    with open_ws(daemon, proj) as ws, open_ws(daemon) as ws_user_only:
        connected(ws)
        connected(ws_user_only)
        daemon.call_tool("kg_put_node", {"session_id": other_sid, "level": "project", "id": "elsewhere", "gist": "g"})
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "here", "gist": "g"})
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "marker", "gist": "g"})
        # events come in write order: the other project's write would have been first
        assert recv_event(ws, "node_put")["node"]["id"] == "here"
        assert recv_event(ws, "node_put")["node"]["id"] == "marker"
        assert_quiet(ws)
        # a client without project_path gets the user graph only
        assert recv_event(ws_user_only, "node_put")["node"]["id"] == "marker"
        assert_quiet(ws_user_only)


def test_delete_and_edge_events(daemon, proj, sid):
    with open_ws(daemon, proj) as ws:
        connected(ws)
        for nid in ("a", "b"):
            daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": nid, "gist": nid})
            recv_event(ws, "node_put")

        daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "a", "to": "b",
                                         "rel": "depends-on", "notes": ["why"]})
        ev = recv_event(ws, "edge_put")
        assert ev["level"] == "project" and ev["project_path"] == proj
        assert ev["edge"] == {"from": "a", "to": "b", "rel": "depends-on", "notes": ["why"]}

        daemon.call_tool("kg_delete_edge", {"session_id": sid, "level": "project", "from": "a", "to": "b",
                                            "rel": "depends-on"})
        ev = recv_event(ws, "edge_deleted")
        assert ev["level"] == "project"
        assert (ev["edge"]["from"], ev["edge"]["to"], ev["edge"]["rel"]) == ("a", "b", "depends-on")

        daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "a", "to": "src/x.py",
                                         "rel": "in"})
        recv_event(ws, "edge_put")
        daemon.call_tool("kg_delete_node", {"session_id": sid, "level": "project", "id": "a"})
        ev = recv_event(ws, "node_deleted")
        assert ev["level"] == "project" and ev["project_path"] == proj and ev["id"] == "a"

        # user level too
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "u", "gist": "u"})
        recv_event(ws, "node_put")
        daemon.call_tool("kg_delete_node", {"session_id": sid, "level": "user", "id": "u"})
        ev = recv_event(ws, "node_deleted")
        assert ev["level"] == "user" and ev["id"] == "u"
        assert_quiet(ws)


def test_many_clients_all_get_the_event(daemon, proj, sid):
    clients = [open_ws(daemon, proj) for _ in range(10)]
    try:
        for ws in clients:
            connected(ws)
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "fan", "gist": "out"})
        for ws in clients:
            assert recv_event(ws, "node_put")["node"]["id"] == "fan"
        st, hdrs, data = daemon.request("GET", "/health")
        assert json.loads(data).get("ws_clients", 10) >= 10
    finally:
        for ws in clients:
            ws.close()


def test_text_ping_gets_pong(daemon):
    with open_ws(daemon) as ws:
        connected(ws)
        ws.send("ping")
        assert recv_json(ws) == {"type": "pong"}
        ws.send(json.dumps({"type": "ping"}))
        assert recv_json(ws) == {"type": "pong"}
        ws.send("something else")  # ignored, the connection stays
        ws.send("ping")
        assert recv_json(ws) == {"type": "pong"}


def test_protocol_ping_gets_pong(daemon):
    with open_ws(daemon) as ws:
        connected(ws)
        for payload in (b"", b"abc", bytes(range(125))):
            pong = ws.ping(payload)
            assert pong.wait(TIMEOUT), "no pong for ping %r" % payload[:10]
        latency = ws.ping()
        assert latency.wait(TIMEOUT)


def test_client_close_is_echoed(daemon):
    ws = open_ws(daemon)
    connected(ws)
    ws.close(1000, "bye")
    assert ws.protocol.close_rcvd is not None, "the server sent no close frame"
    assert ws.protocol.close_rcvd.code == 1000
    assert ws.protocol.close_code == 1000
    # the daemon drops the subscriber
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if json.loads(daemon.request("GET", "/health")[2]).get("ws_clients", 0) == 0:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the closed client is still subscribed")


def test_client_close_with_other_code_is_echoed(daemon):
    ws = open_ws(daemon)
    connected(ws)
    ws.close(4001, "custom")
    assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 4001


def test_daemon_shutdown_closes_with_1001(make_daemon):
    d = make_daemon()
    ws = open_ws(d)
    connected(ws)
    assert d.stop() == 0
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=TIMEOUT)
    assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1001


@pytest.mark.parametrize("origin", ["https://evil.example", "http://localhost.evil.example", "null",
                                    "http://192.168.1.10:8765"])
def test_non_local_origin_refused_403(daemon, origin):
    with pytest.raises(InvalidStatus) as err:
        open_ws(daemon, origin=origin)
    assert err.value.response.status_code == 403


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1", "http://[::1]:8765"])
def test_local_origin_accepted(daemon, origin):
    with open_ws(daemon, origin=origin) as ws:
        connected(ws)


def test_token_required_on_ws(make_daemon):
    d = make_daemon(args=["--token", "T0k"])
    for kw in ({}, {"token": "wrong"}):
        with pytest.raises(InvalidStatus) as err:
            open_ws(d, **kw)
        assert err.value.response.status_code == 401
    with open_ws(d, token="T0k") as ws:
        connected(ws)
    with open_ws(d, additional_headers={"Authorization": "Bearer T0k"}) as ws:
        connected(ws)
    # and the feed works with the token
    auth = {"Authorization": "Bearer T0k"}
    with open_ws(d, token="T0k") as ws:
        connected(ws)
        st, _, data = d.request("PUT", "/api/nodes/user/t", {"gist": "g"}, auth)
        assert st == 200, data
        assert recv_event(ws, "node_put")["node"]["id"] == "t"


def test_bad_project_path_is_400(daemon):
    for pp in ("relative/path", "/no/such/dir/for/kgd"):
        with pytest.raises(InvalidStatus) as err:
            open_ws(daemon, pp)
        assert err.value.response.status_code == 400


# ----------------------------------------------------------------------------- raw sockets

class Raw:
    """A hand-made WebSocket client: handshake by hand, frames by hand."""

    def __init__(self, port, headers=None, path="/ws", rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:  # before connecting, so the TCP window is negotiated small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(("127.0.0.1", port))
        self.key = base64.b64encode(os.urandom(16)).decode()
        hdrs = {"Host": "127.0.0.1:%d" % port, "Upgrade": "websocket", "Connection": "Upgrade",
                "Sec-WebSocket-Key": self.key, "Sec-WebSocket-Version": "13"}
        hdrs.update(headers or {})
        req = "GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % (k, v) for k, v in hdrs.items() if v is not None)
        self.sock.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if self.status != 101:  # read the error body
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                chunk = self.sock.recv(4096)
                if not chunk:
                    break
                self.buf += chunk
            self.body = self.buf[:n]

    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, opcode, payload, fin=True, mask=b"\x11\x22\x33\x44"):
        self.send(frame(opcode, payload, fin, mask))

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk

    def read_frame(self):
        self._fill(2)
        b0, b1 = self.buf[0], self.buf[1]
        assert not b1 & 0x80, "server frames must not be masked"
        n, pos = b1 & 0x7F, 2
        if n == 126:
            self._fill(4)
            n, pos = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._fill(10)
            n, pos = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._fill(pos + n)
        payload = self.buf[pos:pos + n]
        self.buf = self.buf[pos + n:]
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def read_until_close(self):
        """-> the close code the server sent (None when the TCP stream ended without one)."""
        while True:
            try:
                fin, op, payload = self.read_frame()
            except (EOFError, ConnectionResetError):
                return None
            if op == 0x8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005

    def eof_after_close(self):
        """After the server's close, it closes the TCP connection (within a few seconds)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def frame(opcode, payload, fin=True, mask=b"\x11\x22\x33\x44", length=None):
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    mbit = 0x80 if mask is not None else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 1 << 16:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if mask is not None:
        head += mask
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + payload


@pytest.fixture
def raw(daemon):
    conns = []

    def make(**kw):
        r = Raw(daemon.port, **kw)
        conns.append(r)
        return r
    yield make
    for r in conns:
        r.close()


def open_raw(raw, **kw):
    r = raw(**kw)
    assert r.status == 101, (r.status, r.headers)
    assert r.headers["sec-websocket-accept"] == accept_key(r.key)
    assert r.headers["upgrade"].lower() == "websocket"
    fin, op, payload = r.read_frame()
    assert fin and op == 0x1 and json.loads(payload)["type"] == "connected"
    return r


def test_raw_handshake_accept_key_and_text_ping(raw):
    r = open_raw(raw)
    r.send_frame(0x1, b"ping")
    fin, op, payload = r.read_frame()
    assert (fin, op, json.loads(payload)) == (True, 0x1, {"type": "pong"})


def test_raw_fragmented_ping_with_control_frame_between(raw):
    r = open_raw(raw)
    r.send_frame(0x1, b"pi", fin=False)
    r.send_frame(0x9, b"hello")  # a ping in the middle of a fragmented message
    r.send_frame(0x0, b"ng", fin=True)
    fin, op, payload = r.read_frame()
    assert (op, payload) == (0xA, b"hello")
    fin, op, payload = r.read_frame()
    assert (op, json.loads(payload)) == (0x1, {"type": "pong"})


def test_raw_close_echo(raw):
    r = open_raw(raw)
    r.send_frame(0x8, struct.pack("!H", 1000) + b"done")
    assert r.read_until_close() == 1000
    assert r.eof_after_close()


def test_raw_unmasked_frame_closes_1002(raw):
    r = open_raw(raw)
    r.send(frame(0x1, b"ping", mask=None))
    assert r.read_until_close() == 1002
    assert r.eof_after_close()


def test_raw_oversized_frame_header_closes_1009(raw):
    r = open_raw(raw)
    # only the header of a 2 MiB frame: the server must not wait for the payload
    r.send(frame(0x1, b"", length=2 * 1024 * 1024)[:14])
    assert r.read_until_close() == 1009


def test_raw_oversized_fragmented_message_closes_1009(raw):
    r = open_raw(raw)
    part = b"x" * (600 * 1024)
    r.send_frame(0x1, part, fin=False)
    try:
        r.send_frame(0x0, part, fin=True)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert r.read_until_close() == 1009


def test_raw_invalid_utf8_closes_1007(raw):
    r = open_raw(raw)
    r.send_frame(0x1, b"\xff\xfe bad")
    assert r.read_until_close() == 1007


def test_raw_reserved_bits_and_unknown_opcode_close_1002(raw):
    r = open_raw(raw)
    r.send(bytes([0x80 | 0x40 | 0x1]) + frame(0x1, b"x")[1:])
    assert r.read_until_close() == 1002
    r = open_raw(raw)
    r.send(bytes([0x80 | 0x3]) + frame(0x1, b"x")[1:])
    assert r.read_until_close() == 1002


@pytest.mark.parametrize("version", ["8", "12", "14", None])
def test_raw_bad_version_426(raw, version):
    r = raw(headers={"Sec-WebSocket-Version": version})
    assert r.status == 426
    assert r.headers.get("sec-websocket-version") == "13"
    assert json.loads(r.body)["error"]


@pytest.mark.parametrize("headers,status", [
    ({"Upgrade": None}, 426),
    ({"Connection": "keep-alive"}, 426),
    ({"Sec-WebSocket-Key": None}, 400),
    ({"Sec-WebSocket-Key": "dG9vIHNob3J0"}, 400),  # base64 of 9 bytes
])
def test_raw_bad_handshake(raw, headers, status):
    r = raw(headers=headers)
    assert r.status == status, (r.status, r.headers)
    assert json.loads(r.body)["error"]


def test_raw_non_get_upgrade_is_405(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=TIMEOUT)
    try:
        s.sendall(("POST /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
                   % base64.b64encode(os.urandom(16)).decode()).encode())
        data = s.recv(4096)
    finally:
        s.close()
    assert data.startswith(b"HTTP/1.1 405"), data[:100]
    assert b"\r\nAllow: GET" in data


def test_slow_reader_is_dropped_without_blocking_writers(make_daemon):
    """A client that never reads: once the kernel buffers are full its bounded queue overflows
    and it is dropped; the writer is never held up, and a client that keeps reading gets every
    event, in order."""
    d = make_daemon(args=["--max-tokens", "100000000"])
    healthy = open_ws(d, max_queue=None)
    connected(healthy)
    slow = Raw(d.port, rcvbuf=4096)  # never read from
    try:
        assert slow.status == 101
        assert json.loads(slow.read_frame()[2])["type"] == "connected"  # subscribed by now

        def clients():
            return json.loads(d.request("GET", "/health")[2]).get("ws_clients")
        assert clients() == 2
        n, worst, dropped_at = 0, 0.0, None
        while n < 3000:
            t0 = time.monotonic()
            st, _, data = d.request("PUT", "/api/nodes/user/n%04d" % n, {"gist": "g", "notes": ["x" * 10000]})
            worst = max(worst, time.monotonic() - t0)
            assert st == 200, data[:200]
            n += 1
            if n % 20 == 0 and clients() == 1:
                dropped_at = n
                break
        assert dropped_at is not None, "the slow client was never dropped"
        assert worst < 2.0, "a write waited %.1fs: the slow reader held the writer up" % worst
        got = 0
        while got < n:
            ev = recv_json(healthy, timeout=30)
            if ev["type"] == "node_put":
                assert ev["node"]["id"] == "n%04d" % got
                got += 1
    finally:
        slow.close()
        healthy.close()


def daemon_threads(d):
    """Threads of the daemon process now (Linux /proc)."""
    try:
        with open("/proc/%d/status" % d.proc.pid) as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    pytest.skip("needs /proc to count the daemon's threads")


def test_many_viewers_share_one_thread_get_every_put_in_order_and_1001_on_stop(make_daemon):
    """One broadcaster serves every feed (no thread per viewer) (the HTTP handler thread returns after the
    upgrade), every viewer gets every event in order, and stopping closes them all with 1001."""
    d = make_daemon()
    d.request("GET", "/health")  # its keep-alive handler thread is part of the baseline
    base = daemon_threads(d)
    viewers = [Raw(d.port) for _ in range(40)]
    try:
        for r in viewers:
            assert r.status == 101
            assert json.loads(r.read_frame()[2])["type"] == "connected"
        deadline = time.monotonic() + TIMEOUT
        while daemon_threads(d) > base + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert daemon_threads(d) <= base + 1, "a thread per viewer: %d threads, %d before" % (daemon_threads(d), base)
        n = 50
        for i in range(n):
            st, _, data = d.request("PUT", "/api/nodes/user/v%02d" % i, {"gist": "g"})
            assert st == 200, data[:200]
        for r in viewers:
            got = []
            while len(got) < n:
                ev = json.loads(r.read_frame()[2])
                if ev["type"] == "node_put":
                    got.append(ev["node"]["id"])
            assert got == ["v%02d" % i for i in range(n)]
        t0 = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - t0 < 8
        for r in viewers:
            assert r.read_until_close() == 1001
            assert r.eof_after_close()
    finally:
        for r in viewers:
            r.close()
