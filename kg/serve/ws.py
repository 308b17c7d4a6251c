"""RFC 6455 WebSocket for the live feed (`GET /ws`): the rules this file owns.

- Handshake: `GET` only; `Upgrade` must hold the token `websocket` and `Connection` the
  token `upgrade` (comma lists, any case), else 426 with `Upgrade: websocket`;
  `Sec-WebSocket-Version` must be `13`, else 426 with `Sec-WebSocket-Version: 13`;
  `Sec-WebSocket-Key` must be base64 of exactly 16 bytes, else 400.
  `Sec-WebSocket-Accept` = base64(sha1(key + GUID)). No subprotocols, no extensions.
- Framing (section 5.2): RSV bits set, an unknown opcode, a fragmented control frame, a
  control payload over 125 bytes or a 64-bit length with its top bit set fail with 1002;
  a frame longer than the size limit fails with 1009 as soon as its header arrives.
  Non-minimal length encodings are accepted. Server frames are never masked.
- Connection (server side): every client frame must be masked (1002). Fragments
  (section 5.4) reassemble into one message: a continuation with nothing to continue or a
  new text/binary frame inside a fragmented message is 1002; control frames may come in
  between. A whole message over the limit (1 MiB) is 1009; text that is not UTF-8 is 1007
  (checked incrementally, so a character split across fragments is fine).
  A ping is answered with a pong carrying the same payload. A close frame is answered with
  a close echoing its code (an empty close with an empty one) and ends the connection.
  Close payloads (section 7.4): 1 byte is 1002; codes below 1000, 1004-1006, 1015-2999 and
  above 4999 are 1002; a reason that is not UTF-8 is 1007.

Layout, after the `websockets` library's sans-I/O core: handshake and frames are pure
functions over bytes; `Connection` is a state machine fed bytes that hands back events
and bytes to send. Nothing here touches a socket or a thread: the live feed's fan-out and
its socket loop are kg/serve/hub.py and kg/serve/broadcaster.py.
"""

from __future__ import annotations

import base64
import codecs
import struct
from collections import namedtuple

# Annotations are strings, never evaluated (the __future__ import); typing is imported for type
# checkers only, not at run time, where it would cost start-up memory.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, List, Mapping, Optional, Tuple  # noqa: F401

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE_SIZE = 1 << 20

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
DATA_OPCODES = frozenset((OP_CONT, OP_TEXT, OP_BINARY))
CONTROL_OPCODES = frozenset((OP_CLOSE, OP_PING, OP_PONG))
OPCODES = DATA_OPCODES | CONTROL_OPCODES

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013

# 1000-1003, 1007-1011 from RFC 6455; 1012-1014 registered with IANA since.
_SENDABLE_CODES = frozenset(range(1000, 1004)) | frozenset(range(1007, 1015))

class HandshakeError(Exception):
    """The upgrade request is refused: answer `status` with `headers` and `message`."""

    def __init__(self, status: int, message: str, headers: Optional[Mapping[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


class ProtocolError(Exception):
    """The peer broke RFC 6455; the connection closes with `code`."""

    def __init__(self, code: int, reason: str):
        super().__init__("%d %s" % (code, reason))
        self.code = code
        self.reason = reason


class InvalidState(RuntimeError):
    """A message was sent after the closing handshake began."""


# ---------------------------------------------------------------------------
# Handshake and origin (pure)


def accept_key(sec_websocket_key: str) -> str:
    import hashlib  # only on a handshake: hashlib costs start-up memory

    digest = hashlib.sha1((sec_websocket_key + GUID).encode("ascii")).digest()
    return base64.b64encode(digest).decode("ascii")


def _header_values(headers: Any, name: str) -> List[str]:
    """Every value of header `name`, case-insensitively, from a dict or an email Message."""
    get_all = getattr(headers, "get_all", None)
    if get_all is not None:
        return [str(v) for v in (get_all(name) or [])]
    lname = name.lower()
    return [str(v) for k, v in headers.items() if k.lower() == lname]


def _tokens(values: Iterable[str]) -> List[str]:
    return [t.strip().lower() for v in values for t in v.split(",") if t.strip()]


def check_handshake(method: str, headers: Mapping[str, str]) -> str:
    """Validate a client's opening handshake; return the `Sec-WebSocket-Accept` value."""
    if method.upper() != "GET":
        raise HandshakeError(405, "a WebSocket upgrade must use GET", {"Allow": "GET"})
    if "websocket" not in _tokens(_header_values(headers, "Upgrade")):
        raise HandshakeError(426, "this endpoint speaks WebSocket: send 'Upgrade: websocket'",
                             {"Upgrade": "websocket"})
    if "upgrade" not in _tokens(_header_values(headers, "Connection")):
        raise HandshakeError(426, "this endpoint speaks WebSocket: send 'Connection: Upgrade'",
                             {"Upgrade": "websocket"})
    versions = [v.strip() for v in _header_values(headers, "Sec-WebSocket-Version")]
    if versions != ["13"]:
        raise HandshakeError(426, "only WebSocket version 13 is supported",
                             {"Sec-WebSocket-Version": "13"})
    keys = [v.strip() for v in _header_values(headers, "Sec-WebSocket-Key")]
    if len(keys) != 1:
        raise HandshakeError(400, "send exactly one Sec-WebSocket-Key header")
    try:
        raw = base64.b64decode(keys[0].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 16:
        raise HandshakeError(400, "Sec-WebSocket-Key must be base64 of 16 random bytes")
    return accept_key(keys[0])


def handshake_response(accept: str) -> bytes:
    """The complete `101 Switching Protocols` response, ready to write to the socket."""
    return ("HTTP/1.1 101 Switching Protocols\r\n"
            "Upgrade: websocket\r\n"
            "Connection: Upgrade\r\n"
            "Sec-WebSocket-Accept: %s\r\n"
            "\r\n" % accept).encode("ascii")


# ---------------------------------------------------------------------------
# Frames (pure)


# fin, opcode, payload, and mask: the 4-byte key a masked frame carried (None if unmasked).
# (A namedtuple, not typing.NamedTuple: typing costs start-up memory.)
Frame = namedtuple("Frame", "fin opcode payload mask", defaults=(None,))


def apply_mask(data: bytes, mask: bytes) -> bytes:
    """XOR `data` with the repeating 4-byte `mask` (its own inverse)."""
    n = len(data)
    if n == 0:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def encode_frame(opcode: int, payload: bytes, fin: bool = True,
                 mask: Optional[bytes] = None) -> bytes:
    """Serialise one frame with the shortest length encoding."""
    if opcode not in OPCODES:
        raise ValueError("unknown opcode %#x" % opcode)
    payload = bytes(payload)
    n = len(payload)
    if opcode in CONTROL_OPCODES and (n > 125 or not fin):
        raise ValueError("control frames must be final and carry at most 125 bytes")
    head = bytearray([(0x80 if fin else 0) | opcode])
    mask_bit = 0x80 if mask is not None else 0
    if n < 126:
        head.append(mask_bit | n)
    elif n < 1 << 16:
        head.append(mask_bit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(mask_bit | 127)
        head += struct.pack("!Q", n)
    if mask is not None:
        if len(mask) != 4:
            raise ValueError("a masking key is 4 bytes")
        head += mask
        payload = apply_mask(payload, mask)
    return bytes(head) + payload


def parse_frame(buf, max_size: Optional[int] = MAX_MESSAGE_SIZE) -> Optional[Tuple[Frame, int]]:
    """Parse one frame from the start of `buf`: `(frame, bytes consumed)`, or None if
    more bytes are needed. Errors are raised as soon as the header shows them."""
    n = len(buf)
    if n < 2:
        return None
    b0, b1 = buf[0], buf[1]
    if b0 & 0x70:
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits must be 0")
    opcode = b0 & 0x0F
    if opcode not in OPCODES:
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "unknown opcode %#x" % opcode)
    fin = bool(b0 & 0x80)
    length = b1 & 0x7F
    if opcode in CONTROL_OPCODES:
        if not fin:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "control frame must not be fragmented")
        if length > 125:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "control frame payload over 125 bytes")
    pos = 2
    if length == 126:
        if n < 4:
            return None
        (length,) = struct.unpack_from("!H", buf, 2)
        pos = 4
    elif length == 127:
        if n < 10:
            return None
        (length,) = struct.unpack_from("!Q", buf, 2)
        if length >> 63:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "64-bit length has its top bit set")
        pos = 10
    if max_size is not None and length > max_size:
        raise ProtocolError(CLOSE_TOO_BIG, "frame over %d bytes" % max_size)
    mask = None
    if b1 & 0x80:
        if n < pos + 4:
            return None
        mask = bytes(buf[pos:pos + 4])
        pos += 4
    end = pos + length
    if n < end:
        return None
    payload = bytes(buf[pos:end])
    if mask is not None:
        payload = apply_mask(payload, mask)
    return Frame(fin, opcode, payload, mask), end


def _close_code_valid(code: int) -> bool:
    return code in _SENDABLE_CODES or 3000 <= code <= 4999


def encode_close(code: int, reason: str = "") -> bytes:
    """The payload of a close frame."""
    if not _close_code_valid(code):
        raise ValueError("close code %d may not be sent" % code)
    data = struct.pack("!H", code) + reason.encode("utf-8")
    if len(data) > 125:
        raise ValueError("close reason over 123 bytes")
    return data


def parse_close(payload: bytes) -> Tuple[int, str]:
    """`(code, reason)` from a close frame's payload; an empty payload is (1005, '')."""
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) == 1:
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "close payload of 1 byte")
    (code,) = struct.unpack_from("!H", payload)
    if not _close_code_valid(code):
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "invalid close code %d" % code)
    try:
        reason = bytes(payload[2:]).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(CLOSE_INVALID_DATA, "close reason is not UTF-8") from None
    return code, reason


def _short_reason(reason: str) -> str:
    data = reason.encode("utf-8")[:123]
    return data.decode("utf-8", "ignore")


def prepare_text(text: str) -> bytes:
    """A complete unmasked text frame, built once and sent to many connections."""
    return encode_frame(OP_TEXT, text.encode("utf-8"))


# ---------------------------------------------------------------------------
# Connection: server-side state machine (sans I/O)

OPEN = "OPEN"
CLOSING = "CLOSING"  # we sent a close frame and wait for the client's
CLOSED = "CLOSED"


class Connection:
    """Feed it received bytes; it returns events and queues the bytes to send.

    Events: ("text", str), ("binary", bytes), ("ping", bytes), ("pong", bytes),
    ("close", code, reason). A protocol error queues a close frame with the RFC's code,
    sets `failure` (a ProtocolError) and `closed`; it is not reported as an event.
    """

    def __init__(self, max_size: int = MAX_MESSAGE_SIZE, require_mask: bool = True):
        self.max_size = max_size
        self.require_mask = require_mask
        self.state = OPEN
        self.failure: Optional[ProtocolError] = None
        self.close_sent: Optional[Tuple[int, str]] = None
        self.close_rcvd: Optional[Tuple[int, str]] = None
        self._buf = bytearray()
        self._out: List[bytes] = []
        self._msg_opcode: Optional[int] = None
        self._msg_parts: list = []
        self._msg_len = 0
        self._decoder = None

    @property
    def closed(self) -> bool:
        return self.state == CLOSED

    # -- input

    def receive_data(self, data: bytes) -> list:
        if self.state == CLOSED:
            return []
        self._buf += data
        events: list = []
        while self.state != CLOSED:
            try:
                parsed = parse_frame(self._buf, self.max_size)
                if parsed is None:
                    break
                frame, consumed = parsed
                del self._buf[:consumed]
                self._handle(frame, events)
            except ProtocolError as exc:
                self._fail(exc)
        return events

    def receive_eof(self) -> list:
        """The TCP stream ended; without a close frame first that is abnormal (1006)."""
        if self.state == CLOSED:
            return []
        self.state = CLOSED
        self.close_rcvd = (CLOSE_ABNORMAL, "")
        self._buf.clear()
        return [("close", CLOSE_ABNORMAL, "")]

    def _handle(self, frame: Frame, events: list) -> None:
        if self.require_mask and frame.mask is None:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "client frames must be masked")
        op = frame.opcode
        if op == OP_PING:
            if self.state == OPEN:
                self._out.append(encode_frame(OP_PONG, frame.payload))
            events.append(("ping", frame.payload))
        elif op == OP_PONG:
            events.append(("pong", frame.payload))
        elif op == OP_CLOSE:
            code, reason = parse_close(frame.payload)
            self.close_rcvd = (code, reason)
            if self.state == OPEN:
                reply = b"" if code == CLOSE_NO_STATUS else encode_close(code)
                self._out.append(encode_frame(OP_CLOSE, reply))
                self.close_sent = (code, "")
            self.state = CLOSED
            self._buf.clear()
            events.append(("close", code, reason))
        elif op == OP_CONT:
            if self._msg_opcode is None:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "continuation frame with no message to continue")
            self._add_fragment(frame, events)
        else:
            if self._msg_opcode is not None:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented message")
            self._msg_opcode = op
            if op == OP_TEXT:
                self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
            self._add_fragment(frame, events)

    def _add_fragment(self, frame: Frame, events: list) -> None:
        self._msg_len += len(frame.payload)
        if self._msg_len > self.max_size:
            raise ProtocolError(CLOSE_TOO_BIG, "message over %d bytes" % self.max_size)
        if self._decoder is not None:
            try:
                self._msg_parts.append(self._decoder.decode(frame.payload, frame.fin))
            except UnicodeDecodeError:
                raise ProtocolError(CLOSE_INVALID_DATA, "text message is not UTF-8") from None
        else:
            self._msg_parts.append(frame.payload)
        if frame.fin:
            if self._msg_opcode == OP_TEXT:
                events.append(("text", "".join(self._msg_parts)))
            else:
                events.append(("binary", b"".join(self._msg_parts)))
            self._msg_opcode = None
            self._msg_parts = []
            self._msg_len = 0
            self._decoder = None

    def _fail(self, exc: ProtocolError) -> None:
        self.failure = exc
        if self.state == OPEN:
            reason = _short_reason(exc.reason)
            self._out.append(encode_frame(OP_CLOSE, encode_close(exc.code, reason)))
            self.close_sent = (exc.code, reason)
        self.state = CLOSED
        self._buf.clear()
        self._msg_parts = []
        self._decoder = None

    # -- output

    def _check_open(self) -> None:
        if self.state != OPEN:
            raise InvalidState("connection is %s" % self.state.lower())

    def send_text(self, text: str) -> None:
        self._check_open()
        self._out.append(prepare_text(text))

    def send_ping(self, payload: bytes = b"") -> None:
        self._check_open()
        self._out.append(encode_frame(OP_PING, payload))

    def send_close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Start the closing handshake; a no-op once it has begun."""
        if self.state != OPEN:
            return
        reason = _short_reason(reason)
        self._out.append(encode_frame(OP_CLOSE, encode_close(code, reason)))
        self.close_sent = (code, reason)
        self.state = CLOSING

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out = []
        return out
