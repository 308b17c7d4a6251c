"""kg/serve/broadcaster.py: one thread serves many live-feed sockets; publishing never waits on
a viewer; a slow reader is dropped; shutdown closes every feed with 1001. Over socket pairs,
with the frames read back through kg/serve/ws.py's parser."""

import json
import selectors
import socket
import threading
import time

import pytest

from kg.serve import hub as feed
from kg.serve import ws
from kg.serve.broadcaster import Broadcaster
from kg.serve.hub import Hub
from kg.serve.ws import OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, encode_close, encode_frame, parse_frame

from helpers import FeedPeer

HELLO = {"type": "connected", "session_id": "s"}
MASK = b"\x0a\x0b\x0c\x0d"


def quiet(**kw):
    kw.setdefault("idle_timeout", None)
    kw.setdefault("ping_interval", None)
    kw.setdefault("close_timeout", 1.0)
    return kw


class Viewer(FeedPeer):
    """The client end of one feed."""

    def __init__(self, sock):
        super().__init__(sock, timeout=10, mask=MASK)

    def eof(self, timeout=5):
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


@pytest.fixture
def pairs():
    made = []

    def make(n=1, rcvbuf=None):
        out = []
        for _ in range(n):
            a, b = socket.socketpair()
            if rcvbuf:
                b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            made.append(b)
            out.append((a, Viewer(b)))
        return out
    yield make
    for s in made:
        s.close()


def feed_threads():
    return [t for t in threading.enumerate() if t.name == "kgd-feed"]


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def read_all(viewers, n_events, timeout=30):
    """Read every viewer concurrently (one selector): -> list of received `i` values per viewer."""
    got = [[] for _ in viewers]
    bufs = [bytearray() for _ in viewers]
    sel = selectors.DefaultSelector()
    for k, v in enumerate(viewers):
        v.sock.setblocking(False)
        sel.register(v.sock, selectors.EVENT_READ, k)
    deadline = time.monotonic() + timeout
    left = len(viewers)
    try:
        while left and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                k = key.data
                try:
                    data = key.fileobj.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    left -= 1
                    continue
                bufs[k] += data
                while True:
                    parsed = parse_frame(bufs[k], None)
                    if not parsed:
                        break
                    frame, used = parsed
                    del bufs[k][:used]
                    assert frame.opcode == OP_TEXT, frame
                    got[k].append(json.loads(frame.payload))
                if len(got[k]) == n_events + 1:
                    sel.unregister(key.fileobj)
                    left -= 1
    finally:
        sel.close()
        for v in viewers:
            v.sock.setblocking(True)
    return got


def test_many_viewers_one_thread_every_event_in_order(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet())
    before = threading.active_count()
    ends = pairs(60)
    feeds = [b.attach(s, None, HELLO) for s, _ in ends]
    assert hub.count() == 60 and b.open_count() == 60
    assert len(feed_threads()) == 1 and threading.active_count() == before + 1

    n = 400
    result = {}

    def writer():
        t0 = time.monotonic()
        worst = 0.0
        for i in range(n):
            s = time.monotonic()
            hub.publish({"type": "node_put", "level": "user", "i": i})
            worst = max(worst, time.monotonic() - s)
            time.sleep(0.0005)  # a store write takes longer than this (journal append and fsync)
        result["worst"] = worst
        result["elapsed"] = time.monotonic() - t0
    w = threading.Thread(target=writer)
    w.start()
    got = read_all([v for _, v in ends], n)
    w.join(30)
    assert result["worst"] < 0.1
    for events in got:
        assert events[0] == HELLO
        assert [e["i"] for e in events[1:]] == list(range(n))
    hub.close()
    for f in feeds:
        assert f.wait(5) == ws.CLOSE_GOING_AWAY


def test_filter_per_viewer(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet())
    (s1, v1), (s2, v2) = pairs(2)
    b.attach(s1, lambda e: e["level"] == "user", HELLO)
    b.attach(s2, None, HELLO)
    for lvl in ("project", "user", "project"):
        hub.publish({"level": lvl})
    assert v1.json() == HELLO and v1.json() == {"level": "user"}
    assert v2.json() == HELLO and [v2.json()["level"] for _ in range(3)] == ["project", "user", "project"]
    v1.sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        v1.frame()
    hub.close()


def test_slow_reader_dropped_while_writer_and_others_go_on(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet(max_queue=32))
    (slow_s, slow), = pairs(1, rcvbuf=4096)
    fast_ends = pairs(5)
    slow_feed = b.attach(slow_s, None, HELLO)
    fast_feeds = [b.attach(s, None, HELLO) for s, _ in fast_ends]
    assert slow.json() == HELLO  # then it never reads again

    pad = "x" * 4000
    n = 300
    result = {}

    def writer():
        worst = 0.0
        for i in range(n):
            t0 = time.monotonic()
            hub.publish({"i": i, "pad": pad})
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.001)
        result["worst"] = worst
    w = threading.Thread(target=writer)
    w.start()
    got = read_all([v for _, v in fast_ends], n)
    w.join(30)
    assert result["worst"] < 0.1, "publish waited %.3fs on a viewer" % result["worst"]
    for events in got:
        assert [e["i"] for e in events[1:]] == list(range(n))
    assert wait_for(lambda: hub.count() == 5)
    # the slow reader, once it reads, finds whole frames then the close
    assert slow.close_code() == (ws.CLOSE_POLICY_VIOLATION, "client too slow")
    assert slow_feed.wait(5) == ws.CLOSE_POLICY_VIOLATION
    assert not any(f.sock is None for f in fast_feeds)
    hub.close()


def test_close_sends_1001_to_all_and_ends_the_thread(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet(close_timeout=0.3))
    ends = pairs(20)
    feeds = [b.attach(s, None, HELLO) for s, _ in ends]
    for _, v in ends:
        assert v.json() == HELLO
    ends[0][1].send(OP_TEXT, b"ping")
    assert ends[0][1].json() == {"type": "pong"}
    t0 = time.monotonic()
    hub.close()
    for k, (_, v) in enumerate(ends):
        assert v.close_code() == (ws.CLOSE_GOING_AWAY, "server shutting down")
        if k % 2 == 0:  # half answer the close, half never do
            v.send(OP_CLOSE, encode_close(ws.CLOSE_GOING_AWAY))
    for f in feeds:
        assert f.wait(3) == ws.CLOSE_GOING_AWAY
    assert time.monotonic() - t0 < 2.0
    assert all(v.eof() for _, v in ends)
    assert wait_for(lambda: b.open_count() == 0 and not feed_threads())
    assert hub.count() == 0


def test_attach_after_close_is_1001(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet())
    hub.close()
    (s, v), = pairs(1)
    f = b.attach(s, None, HELLO)
    assert v.json() == HELLO
    assert v.close_code()[0] == ws.CLOSE_GOING_AWAY
    v.send(OP_CLOSE, encode_close(1001))
    assert f.wait(5) == 1001 and hub.count() == 0


def test_stop_event_closes_with_1001(pairs):
    hub = Hub()
    stop = threading.Event()
    b = Broadcaster(hub, **quiet(stop_event=stop, poll_interval=0.05))
    (s, v), = pairs(1)
    f = b.attach(s, None, HELLO)
    assert v.json() == HELLO
    stop.set()
    assert v.close_code()[0] == 1001
    assert f.wait(3) == 1001


def test_thread_exits_when_idle_and_restarts(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet())
    (s, v), = pairs(1)
    f = b.attach(s, None, HELLO)
    assert v.json() == HELLO
    v.send(OP_CLOSE, encode_close(1000))
    assert v.close_code() == (1000, "")
    assert f.wait(5) == 1000
    assert wait_for(lambda: not feed_threads())
    (s, v), = pairs(1)
    b.attach(s, None, HELLO)
    assert v.json() == HELLO
    hub.publish({"again": 1})
    assert v.json() == {"again": 1}
    hub.close()


def test_over_max_feeds_closed_with_1013(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet(max_feeds=2))
    ends = pairs(3)
    feeds = [b.attach(s, None, HELLO) for s, _ in ends]
    third = ends[2][1]
    assert third.json() == HELLO
    assert third.close_code()[0] == 1013
    third.send(OP_CLOSE, encode_close(1013))
    assert feeds[2].wait(5) == 1013
    assert hub.count() == 2 and b.open_count() == 2
    hub.close()


def test_protocol_errors_and_control_frames(pairs):
    hub = Hub()
    b = Broadcaster(hub, **quiet(close_timeout=0.3))
    (s1, v1), (s2, v2), (s3, v3) = pairs(3)
    f1, f2, f3 = (b.attach(s, None, HELLO) for s in (s1, s2, s3))
    for v in (v1, v2, v3):
        assert v.json() == HELLO
    v1.send(OP_PING, b"hb")
    frame = v1.frame()
    assert (frame.opcode, frame.payload) == (OP_PONG, b"hb")
    v1.sock.sendall(encode_frame(OP_TEXT, b"ping"))  # unmasked
    assert v1.close_code()[0] == ws.CLOSE_PROTOCOL_ERROR
    v2.send(OP_TEXT, b"\xff\xfe")
    assert v2.close_code()[0] == ws.CLOSE_INVALID_DATA
    v3.sock.sendall(encode_frame(OP_TEXT, b"", mask=MASK)[:1] + bytes([0x80 | 127]) + (2 << 20).to_bytes(8, "big"))
    assert v3.close_code()[0] == ws.CLOSE_TOO_BIG
    # they never answer: each is closed after close_timeout, others unaffected
    assert (f1.wait(3), f2.wait(3), f3.wait(3)) == (1002, 1007, 1009)
    assert all(v.eof() for v in (v1, v2, v3))
    assert hub.count() == 0


def test_take_over_keeps_buffered_bytes_and_survives_the_servers_close(pairs):
    """As in the HTTP handler: the request was read through a buffered reader that also
    holds the client's first frame; after the hand-over the server shuts the socket down."""
    server, client = socket.socketpair()
    v = Viewer(client)
    try:
        rfile = server.makefile("rb")
        client.sendall(b"GET /ws HTTP/1.1\r\n\r\n" + encode_frame(OP_TEXT, b"ping", mask=MASK))
        assert rfile.readline() == b"GET /ws HTTP/1.1\r\n"
        assert rfile.readline() == b"\r\n"
        hub = Hub()
        b = Broadcaster(hub, **quiet())
        sock, early = feed.take_over(server, rfile)
        f = b.attach(sock, None, HELLO, early)
        # what socketserver does once the handler returns
        try:
            server.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        server.close()
        rfile.close()
        assert v.json() == HELLO
        assert v.json() == {"type": "pong"}
        hub.publish({"after": "handover"})
        assert v.json() == {"after": "handover"}
        v.send(OP_CLOSE, encode_close(1000))
        assert v.close_code() == (1000, "")
        assert f.wait(5) == 1000
    finally:
        client.close()


def test_keepalive_ping_and_idle_timeout(pairs):
    hub = Hub()
    b = Broadcaster(hub, idle_timeout=0.5, ping_interval=0.15, close_timeout=0.2)
    (s, v), = pairs(1)
    f = b.attach(s, None, HELLO)
    assert v.json() == HELLO
    assert v.frame().opcode == OP_PING
    v.send(OP_PONG, b"kgd")  # answered: the clock restarts, another ping follows
    assert v.frame().opcode == OP_PING
    assert v.close_code()[0] == ws.CLOSE_INTERNAL_ERROR  # then silent: dead peer
    assert f.wait(3) == 1011


def test_project_filter_rule_and_one_decision_per_project():
    mine = feed.project_filter("/p")
    assert feed.project_filter("/p") is mine  # shared by every viewer of /p
    assert mine({"level": "user", "project_path": "/other"})
    assert mine({"level": "project", "project_path": "/p"})
    assert not mine({"level": "project", "project_path": "/other"})
    none = feed.project_filter(None)
    assert none({"level": "user", "project_path": None})
    assert not none({"level": "project", "project_path": "/p"})

    hub = Hub()
    calls = []

    def counted(event):
        calls.append(event)
        return True
    subs = [hub.subscribe(counted) for _ in range(50)]
    assert hub.publish({"level": "user"}) == 50
    assert len(calls) == 1 and all(len(s.drain()) == 1 for s in subs)


def test_the_feed_carries_the_contracts_graph_changes_only():
    """Contract section 7's frame types; a task's progress (an event the personal remote listens
    for) is not a graph change and never reaches a viewer."""
    from kg.serve.hub import FEED_TYPES, Hub

    hub = Hub()
    sent = []
    hub.publish = sent.append
    for kind in sorted(FEED_TYPES) + ["progress", "anything_else"]:
        hub.feed({"type": kind, "level": "user"})
    assert [e["type"] for e in sent] == sorted(FEED_TYPES)
