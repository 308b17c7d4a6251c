"""The live feed's connection loop (contract section 7, `GET /ws` after the upgrade): the rules this file owns.

- One broadcaster thread serves every feed socket with `selectors`. The HTTP handler thread
  writes the 101, hands the socket over (`take_over`, `Broadcaster.attach`) and returns; the
  HTTP server's own shutdown and close of that socket then do nothing.
- Events go out at once after a quiet spell, then at most once per `batch_delay` seconds, several
  in one write per viewer: one send per viewer per batch, not per event, is what keeps a
  hundred viewers from slowing the writer.
- A viewer's frames leave its queue only when its socket has taken the previous ones, so a
  viewer that does not read fills its queue; when full it is dropped and closed with 1008
  "client too slow".
- Client frames go through `ws.Connection` (RFC 6455 rules and close codes there); the text
  `ping` (or `{"type":"ping"}`) answers `{"type":"pong"}`.
- Keepalive: a ping after `ping_interval` seconds of silence; a client silent for
  `idle_timeout` seconds is closed with 1011.
- `Hub.close()` (server shutdown) or the stop event: every feed is closed with 1001; a client
  gets `close_timeout` seconds to answer a close we started, then its socket is closed.
- At most `max_feeds` feeds: one more is closed at once with 1013 "try again later".
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time

from ..core.text import compact_json
from . import ws
from .hub import MAX_QUEUE, RECV_SIZE, Feed, Hub, is_ping_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, List, Optional, Set  # noqa: F401

log = logging.getLogger(__name__)

MAX_FEEDS = 256
BATCH_DELAY = 0.02  # at most one write per viewer per 20 ms: under one 60 Hz frame
PONG = '{"type":"pong"}'

_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE


class _Loop:
    """The broadcaster thread's state from one pass to the next."""

    __slots__ = ("sel", "feeds", "touched", "timer_at")

    def __init__(self, sel: selectors.BaseSelector) -> None:
        self.sel = sel
        self.feeds: Set[Feed] = set()
        self.touched: Set[Feed] = set()  # feeds with socket events since the last pass
        self.timer_at: Optional[float] = None  # the earliest feed timer when last waited


class Broadcaster:
    """Serves every live-feed socket from one thread; the thread runs while feeds exist."""

    def __init__(self, hub: Hub, *, max_feeds: int = MAX_FEEDS, max_queue: int = MAX_QUEUE,
                 idle_timeout: Optional[float] = 60.0, ping_interval: Optional[float] = 20.0,
                 close_timeout: float = 1.0, stop_event: Optional[threading.Event] = None,
                 poll_interval: float = 0.2, batch_delay: float = BATCH_DELAY):
        self.hub = hub
        self.max_feeds = max_feeds
        self.max_queue = max_queue
        self.idle_timeout = idle_timeout
        self.ping_interval = ping_interval
        self.close_timeout = close_timeout
        self.stop_event = stop_event
        self.poll_interval = poll_interval
        self.batch_delay = batch_delay
        # When queued events go out, and when they last did (broadcaster thread only).
        self._deliver_at: Optional[float] = None
        self._delivered_at = float("-inf")
        self._lock = threading.Lock()
        self._pending: List[Feed] = []
        self._open = 0
        self._thread: Optional[threading.Thread] = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._woken = False
        self._sel: Optional[selectors.BaseSelector] = None

    # -- any thread

    def wake(self) -> None:
        """Called by publishers: one byte on the socket pair, unless a wake-up or a delivery
        is already pending."""
        if self._woken:
            return
        self._woken = True
        try:
            self._wake_w.send(b"\0")
        except OSError:  # buffer full (a wake-up is pending anyway) or closed
            pass

    def open_count(self) -> int:
        """Feed sockets not yet closed (closing ones included): shutdown waits for them."""
        with self._lock:
            return self._open

    def attach(self, sock: socket.socket, filter_fn: Optional[Callable[[dict], bool]], hello: dict,
               initial_data: bytes = b"") -> Feed:
        """Take over `sock` (the 101 already sent): the hello goes first, then every
        matching event published from now on. The broadcaster owns and closes the socket."""
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        now = time.monotonic()
        with self._lock:
            full = self._open >= self.max_feeds
            self._open += 1
        feed = Feed(sock, None, now)
        feed.conn.send_text(compact_json(hello))
        feed.initial = bytes(initial_data)
        if full:
            self._begin_close(feed, ws.CLOSE_TRY_AGAIN_LATER, "too many live-feed clients; try again later", now)
        elif self.hub.closed or self._stopping():
            self._begin_close(feed, ws.CLOSE_GOING_AWAY, "server shutting down", now)
        else:
            feed.sub = self.hub.subscribe(filter_fn, max_queue=self.max_queue, wake=self.wake)
        self._take(feed.conn, feed)
        with self._lock:
            self._pending.append(feed)
            start = self._thread is None
            if start:
                self._thread = threading.Thread(target=self._run, name="kgd-feed", daemon=True)
                self._thread.start()
        if not start:
            self.wake()
        return feed

    # -- the broadcaster thread

    def _stopping(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    def _run(self) -> None:
        """Pass after pass: admit new feeds, service those with news (all of them on a delivery,
        a due timer or shutdown), then wait for sockets, a wake-up or the next timer. The thread
        ends once no feed is left."""
        loop = _Loop(selectors.DefaultSelector())
        self._sel = loop.sel
        loop.sel.register(self._wake_r, _READ, None)
        try:
            while True:
                new = self._take_pending(loop)
                if new is None:
                    return
                now = time.monotonic()
                self._admit(loop, new, now)
                self._service_touched(loop, now, self._delivery_due(now))
                if loop.feeds:
                    self._wait(loop)
        except Exception:
            log.exception("live-feed broadcaster failed; closing its clients")
            self._fail(loop)
        finally:
            self._sel = None
            loop.sel.close()

    def _take_pending(self, loop: _Loop) -> Optional[List[Feed]]:
        """The feeds attached since the last pass; None (the thread ends) once none is left."""
        with self._lock:
            new, self._pending = self._pending, []
            if not new and not loop.feeds:
                self._thread = None
                return None
        return new

    def _admit(self, loop: _Loop, new: List[Feed], now: float) -> None:
        for feed in new:
            loop.feeds.add(feed)
            loop.touched.add(feed)
            feed.mask = _READ
            loop.sel.register(feed.sock, _READ, feed)
            if feed.initial:
                self._received(feed, feed.initial, now)
                feed.initial = b""

    def _delivery_due(self, now: float) -> bool:
        """Whether the batched delivery is due; if so it starts now."""
        if self._deliver_at is None or now < self._deliver_at:
            return False
        self._deliver_at = None
        self._delivered_at = now
        self._woken = False  # queues are read in this pass: a publish from now on wakes us again
        return True

    def _service_touched(self, loop: _Loop, now: float, deliver: bool) -> None:
        """The feeds with news; all of them on a delivery, a due feed timer or shutdown."""
        if deliver or (loop.timer_at is not None and now >= loop.timer_at) or self.hub.closed or self._stopping():
            loop.touched = set(loop.feeds)
        for feed in loop.touched:
            if feed.sock is not None:
                self._service(feed, now, deliver)
            self._rearm(loop, feed)
        loop.touched = set()

    @staticmethod
    def _rearm(loop: _Loop, feed: Feed) -> None:
        """A finished feed leaves; a live one is watched for writing while it has output."""
        if feed.sock is None:
            loop.feeds.discard(feed)
        elif feed.mask != (_READ | (_WRITE if feed.out else 0)):
            feed.mask = _READ | (_WRITE if feed.out else 0)
            loop.sel.modify(feed.sock, feed.mask, feed)

    def _wait(self, loop: _Loop) -> None:
        """Until a socket event, a wake-up or the next timer; readable feeds are read."""
        loop.timer_at = self._timer_at(loop.feeds)
        for key, mask in loop.sel.select(self._timeout(loop.timer_at)):
            feed = key.data
            if feed is None:
                self._woken_up()
                continue
            if mask & _READ and feed.sock is not None:
                self._read(feed)
            loop.touched.add(feed)

    def _timeout(self, timer_at: Optional[float]) -> Optional[float]:
        """Seconds to the next timer or delivery (None: none), at most poll_interval with a stop event."""
        due = timer_at
        if self._deliver_at is not None and (due is None or self._deliver_at < due):
            due = self._deliver_at
        timeout = None if due is None else max(due - time.monotonic(), 0.0)
        if self.stop_event is not None:
            timeout = self.poll_interval if timeout is None else min(timeout, self.poll_interval)
        return timeout

    def _woken_up(self) -> None:
        """Drain the wake-up socket and schedule the batched delivery."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        # `_woken` stays set until the delivery: publishes meanwhile need no wake-up.
        if self._deliver_at is None:
            self._deliver_at = max(time.monotonic(), self._delivered_at + self.batch_delay)

    def _fail(self, loop: _Loop) -> None:
        """The thread failed: every feed, running or still pending, is finished."""
        with self._lock:
            loop.feeds.update(self._pending)
            self._pending = []
            self._thread = None
        for feed in loop.feeds:
            self._finish(feed)

    def _timer_at(self, feeds: Set[Feed]) -> Optional[float]:
        """The earliest keepalive ping, idle timeout or close deadline of any feed."""
        due = None
        for feed in feeds:
            if feed.closing:
                t = feed.deadline
            else:
                t = None
                if self.idle_timeout is not None:
                    t = feed.last_rcvd + self.idle_timeout
                if self.ping_interval is not None and not feed.ping_sent:
                    p = feed.last_rcvd + self.ping_interval
                    t = p if t is None else min(t, p)
            if t is not None and (due is None or t < due):
                due = t
        return due

    def _read(self, feed: Feed) -> None:
        try:
            data = feed.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("live-feed socket error: %s", exc)
            self._finish(feed)
            return
        if not data:
            feed.conn.receive_eof()
            self._finish(feed)
            return
        self._received(feed, data, time.monotonic())

    def _received(self, feed: Feed, data: bytes, now: float) -> None:
        conn = feed.conn
        if conn.closed:
            return  # lingering after a failure or flushing a close: discard
        feed.last_rcvd = now
        feed.ping_sent = False
        for ev in conn.receive_data(data):
            if ev[0] == "text" and conn.state == ws.OPEN and is_ping_text(ev[1]):
                conn.send_text(PONG)
        if conn.closed and not feed.closing:
            self._closing(feed, now)
        if conn.failure is not None:
            feed.linger = True
            log.info("live-feed client failed: %s", conn.failure)
        self._take(conn, feed)

    def _service(self, feed: Feed, now: float, deliver: bool) -> None:
        conn = feed.conn
        if not feed.closing:
            sub = feed.sub
            if sub.dropped:
                self._begin_close(feed, ws.CLOSE_POLICY_VIOLATION, "client too slow", now)
            elif self.hub.closed or self._stopping():
                self._begin_close(feed, ws.CLOSE_GOING_AWAY, "server shutting down", now)
            elif self.idle_timeout is not None and now - feed.last_rcvd >= self.idle_timeout:
                self._begin_close(feed, ws.CLOSE_INTERNAL_ERROR, "keepalive ping timeout", now)
            elif (self.ping_interval is not None and not feed.ping_sent
                  and now - feed.last_rcvd >= self.ping_interval):
                conn.send_ping(b"kgd")
                feed.ping_sent = True
                self._take(conn, feed)
        self._flush(feed, deliver)
        if feed.sock is None or not feed.closing:
            return
        if now >= feed.deadline or (conn.closed and not feed.out and not feed.linger):
            self._finish(feed)

    def _flush(self, feed: Feed, deliver: bool) -> None:
        """Send what the socket takes without blocking. Queued events join the output when a
        batch is due, or at once when the socket has just taken a backlog."""
        out = feed.out
        if not out:
            if not deliver or feed.closing or not feed.sub.queue:
                return
            for frame in feed.sub.drain():
                out += frame
        while True:
            try:
                n = feed.sock.send(out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # reset, broken pipe
                log.debug("live-feed socket error: %s", exc)
                self._finish(feed)
                return
            del out[:n]
            if out or feed.closing or not feed.sub.queue:
                return
            for frame in feed.sub.drain():
                out += frame

    @staticmethod
    def _take(conn: ws.Connection, feed: Feed) -> None:
        data = conn.data_to_send()
        if data:
            feed.out += data

    def _closing(self, feed: Feed, now: float) -> None:
        feed.closing = True
        feed.deadline = now + self.close_timeout
        if feed.sub is not None:
            self.hub.unsubscribe(feed.sub)
            feed.sub.queue.clear()

    def _begin_close(self, feed: Feed, code: int, reason: str, now: float) -> None:
        feed.conn.send_close(code, reason)
        self._take(feed.conn, feed)
        self._closing(feed, now)

    def _finish(self, feed: Feed) -> None:
        """Close the socket and record the close code; the run loop forgets the feed."""
        if feed.sock is None:
            return
        sock, feed.sock = feed.sock, None
        if feed.sub is not None:
            self.hub.unsubscribe(feed.sub)
        if self._sel is not None:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
        try:
            sock.close()
        except OSError:
            pass
        feed.code = feed.result()
        with self._lock:
            self._open -= 1
        feed.done.set()
