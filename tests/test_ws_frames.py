"""RFC 6455 rules of kg/serve/ws.py: handshake, framing, the connection state machine; and kg/serve/hub.py's
hub, with socket-level runs of one feed on the broadcaster over a socket pair (many feeds at
once: test_feed_broadcaster.py)."""

import contextlib
import json
import socket
import struct
import threading
import time

import pytest

from kg.serve import ws
from kg.serve.broadcaster import Broadcaster
from kg.serve.hub import Hub
from kg.serve.ws import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Connection,
    Frame,
    HandshakeError,
    ProtocolError,
    accept_key,
    check_handshake,
    encode_close,
    encode_frame,
    handshake_response,
    parse_close,
    parse_frame,
)

from helpers import FeedPeer

MASK = b"\x37\xfa\x21\x3d"  # the key of RFC 6455 section 5.7


def client(opcode, payload, fin=True, mask=b"\x01\x02\x03\x04"):
    return encode_frame(opcode, payload, fin=fin, mask=mask)


def close_code_of(data):
    frame, _ = parse_frame(data)
    assert frame.opcode == OP_CLOSE
    return parse_close(frame.payload)[0]


# --------------------------------------------------------------------------- RFC 5.7

DATA_256 = bytes(range(256))
DATA_64K = bytes(i % 251 for i in range(65536))

RFC_EXAMPLES = [
    ("unmasked text", Frame(True, OP_TEXT, b"Hello"), b"\x81\x05\x48\x65\x6c\x6c\x6f"),
    ("masked text", Frame(True, OP_TEXT, b"Hello", MASK),
     b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"),
    ("first fragment", Frame(False, OP_TEXT, b"Hel"), b"\x01\x03\x48\x65\x6c"),
    ("last fragment", Frame(True, OP_CONT, b"lo"), b"\x80\x02\x6c\x6f"),
    ("unmasked ping", Frame(True, OP_PING, b"Hello"), b"\x89\x05\x48\x65\x6c\x6c\x6f"),
    ("masked pong", Frame(True, OP_PONG, b"Hello", MASK),
     b"\x8a\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"),
    ("256 bytes binary", Frame(True, OP_BINARY, DATA_256), b"\x82\x7e\x01\x00" + DATA_256),
    ("64 KiB binary", Frame(True, OP_BINARY, DATA_64K),
     b"\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00" + DATA_64K),
]


@pytest.mark.parametrize("name,frame,wire", RFC_EXAMPLES, ids=[e[0] for e in RFC_EXAMPLES])
def test_rfc_examples_encode(name, frame, wire):
    assert encode_frame(frame.opcode, frame.payload, fin=frame.fin, mask=frame.mask) == wire


@pytest.mark.parametrize("name,frame,wire", RFC_EXAMPLES, ids=[e[0] for e in RFC_EXAMPLES])
def test_rfc_examples_parse(name, frame, wire):
    assert parse_frame(wire) == (frame, len(wire))
    # every proper prefix is "incomplete", never an error
    for cut in (0, 1, 2, 3, len(wire) - 1):
        if cut < len(wire):
            assert parse_frame(wire[:cut]) is None


def test_rfc_fragmented_hello_through_connection():
    conn = Connection(require_mask=False)
    assert conn.receive_data(b"\x01\x03\x48\x65\x6c") == []
    assert conn.receive_data(b"\x80\x02\x6c\x6f") == [("text", "Hello")]


# --------------------------------------------------------------------------- framing

@pytest.mark.parametrize("n,header_len,len_byte", [
    (0, 2, 0), (125, 2, 125), (126, 4, 126), (65535, 4, 126), (65536, 10, 127), (70000, 10, 127),
])
@pytest.mark.parametrize("mask", [None, b"\xaa\xbb\xcc\xdd"])
def test_length_boundaries_round_trip(n, header_len, len_byte, mask):
    payload = bytes(i % 256 for i in range(n))
    wire = encode_frame(OP_BINARY, payload, mask=mask)
    extra = 4 if mask else 0
    assert len(wire) == header_len + extra + n
    assert wire[1] & 0x7F == len_byte
    assert bool(wire[1] & 0x80) == (mask is not None)
    frame, used = parse_frame(wire)
    assert used == len(wire)
    assert frame == Frame(True, OP_BINARY, payload, mask)
    assert encode_frame(frame.opcode, frame.payload, frame.fin, frame.mask) == wire


def test_parse_leaves_following_bytes():
    wire = encode_frame(OP_TEXT, b"a") + encode_frame(OP_TEXT, b"bc")
    frame, used = parse_frame(wire)
    assert (frame.payload, used) == (b"a", 3)
    assert parse_frame(wire[used:])[0].payload == b"bc"
    assert parse_frame(bytearray(wire))[0].payload == b"a"


def test_masking_is_xor_and_self_inverse():
    assert ws.apply_mask(b"Hello", MASK) == b"\x7f\x9f\x4d\x51\x58"
    data = bytes(range(256)) * 5 + b"xyz"
    assert ws.apply_mask(ws.apply_mask(data, b"\x01\x80\xff\x00"), b"\x01\x80\xff\x00") == data
    assert ws.apply_mask(b"", MASK) == b""


def test_non_minimal_length_accepted():
    wire = b"\x81\x7e\x00\x05Hello"
    assert parse_frame(wire) == (Frame(True, OP_TEXT, b"Hello"), len(wire))
    wire = b"\x81\x7f" + struct.pack("!Q", 5) + b"Hello"
    assert parse_frame(wire)[0].payload == b"Hello"


@pytest.mark.parametrize("wire,code", [
    (b"\xc1\x00", 1002),                          # RSV1
    (b"\xa1\x00", 1002),                          # RSV2
    (b"\x91\x00", 1002),                          # RSV3
    (b"\x83\x00", 1002),                          # reserved data opcode
    (b"\x8b\x00", 1002),                          # reserved control opcode
    (b"\x09\x00", 1002),                          # fragmented ping
    (b"\x89\x7e\x00\x7e", 1002),                  # ping with 126 bytes
    (b"\x88\x7f" + b"\x00" * 8, 1002),            # close with 64-bit length
    (b"\x82\x7f\x80" + b"\x00" * 7, 1002),        # 64-bit length with top bit set
    (b"\x82\x7f" + struct.pack("!Q", (1 << 20) + 1), 1009),  # over the limit, header only
])
def test_parse_errors(wire, code):
    with pytest.raises(ProtocolError) as err:
        parse_frame(wire, 1 << 20)
    assert err.value.code == code


def test_max_size_is_inclusive_and_optional():
    wire = encode_frame(OP_BINARY, b"x" * 100)
    assert parse_frame(wire, 100)[0].payload == b"x" * 100
    with pytest.raises(ProtocolError) as err:
        parse_frame(wire, 99)
    assert err.value.code == 1009
    assert parse_frame(wire, None)[1] == len(wire)


def test_encode_rejects_bad_frames():
    with pytest.raises(ValueError):
        encode_frame(OP_PING, b"x" * 126)
    with pytest.raises(ValueError):
        encode_frame(OP_CLOSE, b"", fin=False)
    with pytest.raises(ValueError):
        encode_frame(3, b"")
    with pytest.raises(ValueError):
        encode_frame(OP_TEXT, b"", mask=b"abc")


# --------------------------------------------------------------------------- close payloads

def test_close_payload_round_trip():
    assert encode_close(1000) == b"\x03\xe8"
    assert parse_close(encode_close(1001, "bye")) == (1001, "bye")
    assert parse_close(encode_close(4999, "é")) == (4999, "é")
    assert parse_close(b"") == (1005, "")


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535])
def test_close_invalid_codes(code):
    with pytest.raises(ProtocolError) as err:
        parse_close(struct.pack("!H", code))
    assert err.value.code == 1002
    with pytest.raises(ValueError):
        encode_close(code)


@pytest.mark.parametrize("code", [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012,
                                  1013, 1014, 3000, 4000, 4999])
def test_close_valid_codes(code):
    assert parse_close(struct.pack("!H", code)) == (code, "")


def test_close_payload_errors():
    with pytest.raises(ProtocolError) as err:
        parse_close(b"\x03")
    assert err.value.code == 1002
    with pytest.raises(ProtocolError) as err:
        parse_close(b"\x03\xe8\xff\xfe")
    assert err.value.code == 1007
    with pytest.raises(ValueError):
        encode_close(1000, "x" * 124)
    assert len(encode_close(1000, "x" * 123)) == 125


# --------------------------------------------------------------------------- connection

def test_connection_text_binary_and_byte_by_byte():
    wire = client(OP_TEXT, "héllo".encode()) + client(OP_BINARY, b"\x00\x01")
    conn = Connection()
    assert conn.receive_data(wire) == [("text", "héllo"), ("binary", b"\x00\x01")]
    conn = Connection()
    events = []
    for i in range(len(wire)):
        events += conn.receive_data(wire[i:i + 1])
    assert events == [("text", "héllo"), ("binary", b"\x00\x01")]
    assert conn.data_to_send() == b""


def test_unmasked_client_frame_fails_1002():
    conn = Connection()
    assert conn.receive_data(encode_frame(OP_TEXT, b"hi")) == []
    assert conn.closed and conn.failure.code == 1002
    assert close_code_of(conn.data_to_send()) == 1002
    assert conn.receive_data(client(OP_TEXT, b"more")) == []  # closed: ignored
    assert conn.data_to_send() == b""


def test_ping_answered_with_pong():
    conn = Connection()
    assert conn.receive_data(client(OP_PING, b"abc")) == [("ping", b"abc")]
    assert conn.data_to_send() == b"\x8a\x03abc"
    assert conn.receive_data(client(OP_PONG, b"x")) == [("pong", b"x")]
    assert conn.data_to_send() == b""


def test_fragmentation_with_control_frame_in_the_middle():
    conn = Connection()
    wire = (client(OP_TEXT, b"Hel", fin=False) + client(OP_PING, b"p")
            + client(OP_CONT, b"l", fin=False) + client(OP_CONT, b"o"))
    assert conn.receive_data(wire) == [("ping", b"p"), ("text", "Hello")]
    assert conn.data_to_send() == b"\x8a\x01p"
    wire = client(OP_BINARY, b"\x00", fin=False) + client(OP_CONT, b"\x01")
    assert conn.receive_data(wire) == [("binary", b"\x00\x01")]
    assert not conn.closed


def test_utf8_split_across_fragments_is_valid():
    data = "€ and 😀".encode()
    conn = Connection()
    wire = b"".join(client(OP_TEXT if i == 0 else OP_CONT, data[i:i + 1], fin=i == len(data) - 1)
                    for i in range(len(data)))
    assert conn.receive_data(wire) == [("text", "€ and 😀")]


@pytest.mark.parametrize("frames", [
    [(OP_TEXT, b"\xff", True)],
    [(OP_TEXT, b"ok\xc3", True)],                             # truncated at the end
    [(OP_TEXT, b"\xe2\x82", False), (OP_CONT, b"x", True)],    # broken across fragments
    [(OP_TEXT, b"\xed\xa0\x80", True)],                       # surrogate
])
def test_bad_utf8_fails_1007(frames):
    conn = Connection()
    events = conn.receive_data(b"".join(client(op, p, fin=f) for op, p, f in frames))
    assert events == []
    assert conn.closed and conn.failure.code == 1007
    assert close_code_of(conn.data_to_send()) == 1007


def test_bad_utf8_detected_before_message_ends():
    conn = Connection()
    conn.receive_data(client(OP_TEXT, b"\xff", fin=False))
    assert conn.failure.code == 1007


@pytest.mark.parametrize("wire", [
    client(OP_CONT, b"x"),                                              # nothing to continue
    client(OP_TEXT, b"a", fin=False) + client(OP_TEXT, b"b"),           # new message inside one
    client(OP_TEXT, b"a", fin=False) + client(OP_BINARY, b"b"),
    client(OP_TEXT, b"a") + client(OP_CONT, b"b"),                      # after the message ended
])
def test_continuation_errors_1002(wire):
    conn = Connection()
    conn.receive_data(wire)
    assert conn.closed and conn.failure.code == 1002
    assert close_code_of(conn.data_to_send()) == 1002


def test_oversized_frame_and_message_1009():
    conn = Connection(max_size=10)
    conn.receive_data(client(OP_BINARY, b"x" * 11)[:8])  # header alone is enough
    assert conn.failure.code == 1009
    conn = Connection(max_size=10)
    events = conn.receive_data(client(OP_TEXT, b"x" * 6, fin=False) + client(OP_CONT, b"y" * 5))
    assert events == [] and conn.failure.code == 1009
    assert close_code_of(conn.data_to_send()) == 1009
    conn = Connection(max_size=10)
    assert conn.receive_data(client(OP_TEXT, b"x" * 5, fin=False) + client(OP_CONT, b"y" * 5)) \
        == [("text", "x" * 5 + "y" * 5)]


def test_default_limit_is_one_mib():
    conn = Connection()
    payload = b"a" * (1 << 20)
    assert conn.receive_data(client(OP_TEXT, payload)) == [("text", payload.decode())]
    conn.receive_data(client(OP_TEXT, b"a" * ((1 << 20) + 1)))
    assert conn.failure.code == 1009


def test_rsv_bits_fail_connection():
    conn = Connection()
    wire = bytearray(client(OP_TEXT, b"x"))
    wire[0] |= 0x40
    conn.receive_data(bytes(wire))
    assert conn.failure.code == 1002 and close_code_of(conn.data_to_send()) == 1002


def test_client_close_is_echoed():
    conn = Connection()
    events = conn.receive_data(client(OP_CLOSE, encode_close(4001, "bye")) + client(OP_TEXT, b"x"))
    assert events == [("close", 4001, "bye")]
    assert conn.closed and conn.failure is None
    assert conn.data_to_send() == encode_frame(OP_CLOSE, encode_close(4001))
    conn = Connection()
    assert conn.receive_data(client(OP_CLOSE, b"")) == [("close", 1005, "")]
    assert conn.data_to_send() == b"\x88\x00"


@pytest.mark.parametrize("payload,code", [(b"\x03", 1002), (b"\x03\xed", 1002),
                                          (b"\x03\xe8\xc0", 1007)])
def test_bad_close_payload_fails(payload, code):
    conn = Connection()
    assert conn.receive_data(client(OP_CLOSE, payload)) == []
    assert conn.failure.code == code and close_code_of(conn.data_to_send()) == code


def test_server_initiated_close():
    conn = Connection()
    conn.send_text("hi")
    conn.send_close(1001, "going")
    conn.send_close(1000)  # no-op once closing
    out = conn.data_to_send()
    assert out == encode_frame(OP_TEXT, b"hi") + encode_frame(OP_CLOSE, encode_close(1001, "going"))
    assert conn.state == ws.CLOSING and not conn.closed
    with pytest.raises(ws.InvalidState):
        conn.send_text("late")
    # a ping while closing is reported but not answered
    assert conn.receive_data(client(OP_PING, b"")) == [("ping", b"")]
    assert conn.receive_data(client(OP_CLOSE, encode_close(1001))) == [("close", 1001, "")]
    assert conn.closed and conn.data_to_send() == b""


def test_eof_is_abnormal():
    conn = Connection()
    assert conn.receive_eof() == [("close", 1006, "")]
    assert conn.closed and conn.receive_eof() == []


def test_send_text_is_unmasked():
    conn = Connection()
    conn.send_text("é" * 200)
    frame, used = parse_frame(conn.data_to_send())
    assert frame == Frame(True, OP_TEXT, ("é" * 200).encode())


# --------------------------------------------------------------------------- handshake

def good_headers(**over):
    h = {"Host": "localhost:8765", "Upgrade": "websocket", "Connection": "Upgrade",
         "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
    h.update(over)
    return {k: v for k, v in h.items() if v is not None}


def test_accept_key_rfc_example():
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_check_handshake_accepts():
    assert check_handshake("GET", good_headers()) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    lower = {k.lower(): v for k, v in good_headers(Upgrade="WebSocket",
                                                   Connection="keep-alive, upgrade").items()}
    assert check_handshake("GET", lower) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_check_handshake_with_email_message_headers():
    import email.message
    msg = email.message.Message()
    for k, v in good_headers(Connection="keep-alive, Upgrade").items():
        msg[k] = v
    assert check_handshake("GET", msg) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("method,over,status,hint", [
    ("POST", {}, 405, ("Allow", "GET")),
    ("GET", {"Upgrade": None}, 426, ("Upgrade", "websocket")),
    ("GET", {"Upgrade": "h2c"}, 426, ("Upgrade", "websocket")),
    ("GET", {"Connection": None}, 426, ("Upgrade", "websocket")),
    ("GET", {"Connection": "keep-alive"}, 426, ("Upgrade", "websocket")),
    ("GET", {"Sec-WebSocket-Version": "8"}, 426, ("Sec-WebSocket-Version", "13")),
    ("GET", {"Sec-WebSocket-Version": None}, 426, ("Sec-WebSocket-Version", "13")),
    ("GET", {"Sec-WebSocket-Key": None}, 400, None),
    ("GET", {"Sec-WebSocket-Key": "not base64!"}, 400, None),
    ("GET", {"Sec-WebSocket-Key": "c2hvcnQ="}, 400, None),                  # 5 bytes
    ("GET", {"Sec-WebSocket-Key": "AAAAAAAAAAAAAAAAAAAAAAAA"}, 400, None),  # 18 bytes
])
def test_check_handshake_errors(method, over, status, hint):
    with pytest.raises(HandshakeError) as err:
        check_handshake(method, good_headers(**over))
    assert err.value.status == status and err.value.message
    if hint:
        assert err.value.headers[hint[0]] == hint[1]


def test_handshake_response_bytes():
    assert handshake_response("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") == (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")




# --------------------------------------------------------------------------- hub

def test_hub_publish_filters_and_encodes_once():
    hub = Hub()
    woke = []
    a = hub.subscribe(lambda e: e["level"] == "user", wake=lambda: woke.append("a"))
    b = hub.subscribe(None)
    c = hub.subscribe(lambda e: False)
    assert hub.count() == 3
    assert hub.publish({"type": "node_put", "level": "user", "id": "é"}) == 2
    fa, fb = a.drain(), b.drain()
    assert fa == fb and fa[0] is fb[0]  # the same prepared frame object
    frame, _ = parse_frame(fa[0])
    assert frame.opcode == OP_TEXT
    assert json.loads(frame.payload) == {"type": "node_put", "level": "user", "id": "é"}
    assert c.drain() == [] and woke == ["a"]
    hub.unsubscribe(c)
    hub.unsubscribe(c)  # harmless twice
    assert hub.count() == 2


def test_hub_drops_full_subscriber_without_blocking():
    hub = Hub()
    woke = []
    slow = hub.subscribe(None, max_queue=2, wake=lambda: woke.append(1))
    fast = hub.subscribe(None, max_queue=10)
    t0 = time.monotonic()
    for i in range(5):
        hub.publish({"i": i})
    assert time.monotonic() - t0 < 1
    assert slow.dropped and not fast.dropped
    assert hub.count() == 1
    assert len(slow.drain()) == 2 and len(fast.drain()) == 5
    assert len(woke) == 3  # two deliveries and the drop


def test_hub_survives_bad_filter_and_bad_event():
    hub = Hub()
    bad = hub.subscribe(lambda e: 1 / 0)
    good = hub.subscribe(None)
    assert hub.publish({"x": 1}) == 1
    assert hub.publish({"x": object()}) == 0
    assert len(good.drain()) == 1 and bad.drain() == []


def test_hub_thread_safe_publish():
    hub = Hub()
    subs = [hub.subscribe(None, max_queue=10000) for _ in range(4)]

    def pub():
        for i in range(500):
            hub.publish({"i": i})
    threads = [threading.Thread(target=pub) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(s.drain()) == 2000 for s in subs)


# --------------------------------------------------------------------------- one feed over a socket pair

class Served:
    """One feed on its own broadcaster; `join` and `is_alive` as for the thread that
    `ws.serve` used to be, `result["code"]` its close code once closed."""

    def __init__(self, broadcaster, sock, filter_fn):
        self.broadcaster = broadcaster
        self.feed = broadcaster.attach(sock, filter_fn, {"type": "connected", "session_id": "s1"})
        self.result = self

    def join(self, timeout=None):
        self.feed.wait(timeout)

    def is_alive(self):
        return self.feed.sock is not None

    def __getitem__(self, key):
        assert key == "code"
        return self.feed.code


@contextlib.contextmanager
def start_serve(hub, filter_fn=None, **kw):
    """One feed over a socket pair -> (served, client end, result, both sockets); the sockets close at the end."""
    server_sock, client_sock = socket.socketpair()
    kw.setdefault("idle_timeout", None)
    kw.setdefault("ping_interval", None)
    kw.setdefault("close_timeout", 2.0)
    try:
        t = Served(Broadcaster(hub, **kw), server_sock, filter_fn)
        yield t, FeedPeer(client_sock), t.result, (server_sock, client_sock)
    finally:
        server_sock.close()
        client_sock.close()


def test_serve_feed_pings_and_close_handshake():
    hub = Hub()
    with start_serve(hub, lambda e: e.get("level") == "user", poll_interval=5.0) as (t, c, result, socks):
        assert c.json() == {"type": "connected", "session_id": "s1"}
        assert hub.count() == 1
        hub.publish({"type": "node_put", "level": "project", "id": "skip"})
        t0 = time.monotonic()
        hub.publish({"type": "node_put", "level": "user", "id": "n1"})
        # poll_interval is 5 s: only the publisher's wake-up can deliver this fast
        assert c.json() == {"type": "node_put", "level": "user", "id": "n1"}
        assert time.monotonic() - t0 < 0.5
        c.send(OP_TEXT, b"ping")
        assert c.json() == {"type": "pong"}
        c.send(OP_TEXT, b"pi", fin=False)
        c.send(OP_CONT, b"ng")
        assert c.json() == {"type": "pong"}
        c.send(OP_PING, b"hb")
        assert c.frame() == Frame(True, OP_PONG, b"hb")
        c.send(OP_CLOSE, encode_close(4000, "done"))
        frame = c.frame()
        assert frame.opcode == OP_CLOSE and parse_close(frame.payload) == (4000, "")
        t.join(5)
        assert not t.is_alive() and result["code"] == 4000
        assert hub.count() == 0


@pytest.mark.slow
def test_serve_unmasked_frame_closes_1002():
    hub = Hub()
    with start_serve(hub) as (t, c, result, socks):
        c.json()
        c.send(OP_TEXT, b"ping", mask=None)
        frame = c.frame()
        assert frame.opcode == OP_CLOSE and parse_close(frame.payload)[0] == 1002
        c.send(OP_CLOSE, encode_close(1002))
        t.join(5)
        assert not t.is_alive() and result["code"] == 1002 and hub.count() == 0


def test_serve_stop_event_sends_1001():
    hub = Hub()
    stop = threading.Event()
    with start_serve(hub, stop_event=stop, poll_interval=0.05) as (t, c, result, socks):
        c.json()
        stop.set()
        frame = c.frame()
        assert parse_close(frame.payload)[0] == 1001
        c.send(OP_CLOSE, encode_close(1001))
        t.join(5)
        assert not t.is_alive() and result["code"] == 1001


def test_serve_hub_close_wakes_and_sends_1001_then_gives_up_after_close_timeout():
    hub = Hub()
    with start_serve(hub, poll_interval=5.0, close_timeout=0.2) as (t, c, result, socks):
        c.json()
        hub.close()
        assert parse_close(c.frame().payload)[0] == 1001
        t.join(3)  # the client never answers: close_timeout ends the wait
        assert not t.is_alive() and result["code"] == 1001


def test_serve_slow_client_dropped_with_1008():
    hub = Hub()
    with start_serve(hub, max_queue=1) as (t, c, result, socks):
        c.json()
        big = "x" * 65536
        # the client does not read: the socket buffer fills, serve blocks in sendall,
        # its queue overflows and the hub drops it, while publish itself never blocks
        for i in range(1000):
            t0 = time.monotonic()
            hub.publish({"i": i, "pad": big})
            assert time.monotonic() - t0 < 0.5
            if hub.count() == 0:
                break
        assert hub.count() == 0
        while True:
            frame = c.frame()
            if frame.opcode == OP_CLOSE:
                break
        assert parse_close(frame.payload) == (1008, "client too slow")
        c.send(OP_CLOSE, encode_close(1008))
        t.join(5)
        assert not t.is_alive() and result["code"] == 1008


def test_serve_keepalive_ping_then_idle_timeout():
    hub = Hub()
    with start_serve(hub, ping_interval=0.1, idle_timeout=0.4, close_timeout=0.2) as (t, c, result, socks):
        c.json()
        frame = c.frame()
        assert frame.opcode == OP_PING
        frame = c.frame()  # no pong sent: closed as a dead peer
        assert parse_close(frame.payload)[0] == 1011
        t.join(3)
        assert not t.is_alive() and result["code"] == 1011


def test_serve_client_eof_is_1006():
    hub = Hub()
    with start_serve(hub) as (t, c, result, socks):
        c.json()
        socks[1].shutdown(socket.SHUT_WR)
        t.join(5)
        assert not t.is_alive() and result["code"] == 1006 and hub.count() == 0
