"""The live feed's hub (contract section 7, `GET /ws` after the upgrade): each viewer's bounded queue,
which events it gets, and the socket handed from the HTTP handler to kg/serve/broadcaster.py. Rules owned here:

- `Hub.publish(event)` never waits on viewers: the JSON and the frame are built once, appended
  to each matching subscriber's bounded queue, and the broadcaster is woken through a socket
  pair (one wake-up however many viewers). Events reach every viewer in publish order, after
  its `connected` hello.
- The feed carries the graph changes contract section 7 names (FEED_TYPES); the store's other
  events (a task's progress: for the personal remote, which pushes it) are not the feed's.
- A viewer of project P gets the user graph's events and P's (`project_filter`; P is the path of
  the graph the viewer's path resolves to, kg/memory/registry.py `graph_path`, so another checkout of a
  repository gets that repository's graph); without P, the user graph's only.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import threading
from collections import deque

from ..core.text import compact_json
from . import ws

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Deque, List, Optional, Tuple  # noqa: F401

log = logging.getLogger(__name__)

MAX_QUEUE = 256
FEED_TYPES = frozenset(("node_put", "node_deleted", "edge_put", "edge_deleted", "compacted"))
RECV_SIZE = 65536


def is_ping_text(text: str) -> bool:
    """The feed's application-level ping: `ping` or `{"type":"ping"}`."""
    text = text.strip()
    if text == "ping":
        return True
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            return False
        return isinstance(obj, dict) and obj.get("type") == "ping"
    return False


@functools.lru_cache(maxsize=1024)
def project_filter(project_path: Optional[str]) -> Callable[[dict], bool]:
    """Which events a viewer of `project_path` (None: no project) gets. One function object per
    project, so the hub decides once per event for all the viewers of that project."""
    def wanted(event: dict) -> bool:
        return event.get("level") == "user" or (project_path is not None
                                                and event.get("project_path") == project_path)
    return wanted


# ---------------------------------------------------------------------------
# Hub: fan-out to bounded per-subscriber queues (no sockets)


class Subscriber:
    """One viewer's bounded queue of prepared text frames."""

    def __init__(self, filter_fn: Optional[Callable[[dict], bool]], max_queue: int,
                 wake: Optional[Callable[[], None]]):
        self.filter_fn = filter_fn
        self.max_queue = max_queue
        self.queue: Deque[bytes] = deque()
        self.dropped = False
        self._wake = wake

    def notify(self) -> None:
        if self._wake is not None:
            try:
                self._wake()
            except Exception:
                log.debug("wake-up of a live-feed subscriber failed", exc_info=True)

    def drain(self) -> List[bytes]:
        """Every queued frame, oldest first (safe against a concurrent publish)."""
        items = []
        pop = self.queue.popleft
        try:
            while True:
                items.append(pop())
        except IndexError:
            return items


class Hub:
    """Publishes change events to every matching subscriber; never blocks the publisher."""

    def __init__(self):
        # One lock for subscribing and publishing, held only for in-memory appends: every
        # subscriber sees concurrent publishes in the same order.
        self._lock = threading.Lock()
        self._subs: List[Subscriber] = []
        self.closed = False

    def subscribe(self, filter_fn: Optional[Callable[[dict], bool]] = None, max_queue: int = MAX_QUEUE,
                  wake: Optional[Callable[[], None]] = None) -> Subscriber:
        """`filter_fn(event) -> bool` (None takes all); `wake()` is called, from the
        publisher's thread, after an item is queued or the subscriber is dropped."""
        sub = Subscriber(filter_fn, max_queue, wake)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            try:
                self._subs.remove(sub)
            except ValueError:
                pass

    def count(self) -> int:
        with self._lock:
            return len(self._subs)

    def feed(self, event: dict) -> int:
        """The store's listener: a graph change the contract's feed carries is published."""
        return self.publish(event) if event.get("type") in FEED_TYPES else 0

    def publish(self, event: dict) -> int:
        """Queue `event` for each matching subscriber; return how many got it.

        The JSON and the frame are built once, and only if someone wants the event.
        A subscriber whose queue is full is dropped (the broadcaster closes it with 1008)."""
        frame = None
        delivered = 0
        notify = []
        verdicts = {}  # filter function -> its answer for this event (viewers share filters)
        with self._lock:
            for sub in self._subs:
                fn = sub.filter_fn
                if fn is not None:
                    wanted = verdicts.get(fn)
                    if wanted is None:
                        try:
                            wanted = verdicts[fn] = bool(fn(event))
                        except Exception:
                            log.exception("live-feed filter failed; event not sent to that client")
                            wanted = verdicts[fn] = False
                    if not wanted:
                        continue
                if frame is None:
                    try:
                        frame = ws.prepare_text(compact_json(event))
                    except (TypeError, ValueError):
                        log.exception("live-feed event is not JSON-serialisable; not published")
                        return 0
                if len(sub.queue) >= sub.max_queue:
                    sub.dropped = True
                else:
                    sub.queue.append(frame)
                    delivered += 1
                notify.append(sub)
            dropped = [s for s in notify if s.dropped]
            if dropped:
                self._subs = [s for s in self._subs if not s.dropped]
        if dropped:
            log.info("dropped %d live-feed client(s) that read too slowly", len(dropped))
        woken = set()
        for sub in notify:
            if sub._wake not in woken:  # the broadcaster's feeds share one wake-up
                woken.add(sub._wake)
                sub.notify()
        return delivered

    def close(self) -> None:
        """Server shutdown: the broadcaster closes every feed with 1001."""
        with self._lock:
            self.closed = True
            subs = list(self._subs)
        for sub in subs:
            sub.notify()


# ---------------------------------------------------------------------------
# The socket handed over, and one feed as the broadcaster sees it


def take_over(sock: socket.socket, rfile: Any = None) -> Tuple[socket.socket, bytes]:
    """Detach an upgraded socket from the HTTP handler: `(socket, bytes already read)`.

    The handler's socket object is left detached, so the server's `shutdown()` and `close()`
    of it when the handler returns fail quietly instead of ending the feed. `rfile` is the
    handler's buffered reader: bytes the client sent right after its handshake may sit there."""
    early = b""
    sock.setblocking(False)
    if rfile is not None:
        try:
            early = rfile.read1(RECV_SIZE) or b""
        except OSError:
            pass
    own = socket.socket(fileno=sock.detach())
    own.setblocking(False)
    return own, early


class Feed:
    """One viewer's connection as the broadcaster sees it; `wait()` for its close code."""

    def __init__(self, sock: socket.socket, sub: Optional[Subscriber], now: float):
        self.sock = sock
        self.sub = sub
        self.conn = ws.Connection()
        self.out = bytearray()
        self.last_rcvd = now
        self.ping_sent = False
        self.closing = False
        self.linger = False  # after a protocol error: read until EOF so our close frame is not lost
        self.deadline: Optional[float] = None
        self.mask = 0
        self.code: Optional[int] = None
        self.initial = b""
        self.done = threading.Event()  # set by the broadcaster once the socket is closed

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """The close code once the socket is closed (1006 when the stream just ended)."""
        self.done.wait(timeout)
        return self.code

    def result(self) -> int:
        conn = self.conn
        if conn.failure is not None:
            return conn.failure.code
        if conn.close_sent is not None:
            return conn.close_sent[0]
        if conn.close_rcvd is not None:
            return conn.close_rcvd[0]
        return ws.CLOSE_ABNORMAL
