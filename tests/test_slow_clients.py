"""Slow and idle clients (contract section 2): a slowloris client and dozens of silent connections never
stop other clients being served; connections and threads are bounded; the daemon cuts idle
and trickling connections off after kg/serve/http.py's IDLE_TIMEOUT / HEADER_DEADLINE.

The constants are read from kg.http, so the tests follow them if they change. The test that
waits for the timeouts takes about max(IDLE_TIMEOUT, HEADER_DEADLINE) + a few seconds; set
KGD_QUICK=1 to skip it.
"""

import http.client
import json
import os
import select
import socket
import threading
import time

import pytest

from kg.serve import http as kghttp

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAX_CONNECTIONS = kghttp.MAX_CONNECTIONS
IDLE_TIMEOUT = kghttp.IDLE_TIMEOUT
HEADER_DEADLINE = kghttp.HEADER_DEADLINE
PROMPT = 1.0  # seconds a normal request may take while others misbehave
SLOWLORIS_REQUEST = (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\n"
                     + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 20) for i in range(200)) + b"\r\n")


def threads_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line for pid %d" % pid)


def wait_threads(pid, predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    n = threads_of(pid)
    while not predicate(n) and time.monotonic() < deadline:
        time.sleep(0.05)
        n = threads_of(pid)
    return n


def connect(port, timeout=5.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def closed_by_server(sock):
    """True when the server has closed (EOF or reset) or sent something (a 503 / 408 answer)."""
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        sock.recv(65536, socket.MSG_PEEK)
    except OSError:
        return True
    return True


class Slowloris(threading.Thread):
    """Sends a long request one byte every `interval` seconds until the server hangs up."""

    def __init__(self, port, interval=0.5, prefix=b"", request=SLOWLORIS_REQUEST):
        super().__init__(daemon=True)
        self.sock = connect(port)
        if prefix:
            self.sock.sendall(prefix)
        self.request = request
        self.interval = interval
        self.sent = 0
        self.cut_off_at = None
        self.answer = b""
        self.stop = threading.Event()
        self.started_at = time.monotonic()

    def run(self):
        try:
            for i in range(len(self.request)):
                if self.stop.wait(self.interval):
                    return
                if closed_by_server(self.sock):
                    try:
                        self.answer = self.sock.recv(65536)
                    except OSError:
                        pass
                    break
                try:
                    self.sock.send(self.request[i:i + 1])
                    self.sent += 1
                except OSError:
                    break
            self.cut_off_at = time.monotonic()
        finally:
            self.sock.close()


def timed(fn, *args):
    t = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t


def normal_round(d, project):
    """A few ordinary requests, each on a fresh connection and on the keep-alive one."""
    latencies = []
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    try:
        (_, dt) = timed(lambda: (c.request("GET", "/health"), c.getresponse().read()))
        latencies.append(("GET /health (new connection)", dt))
    finally:
        c.close()
    (st, _), dt = timed(d.json, "GET", "/health")
    assert st == 200
    latencies.append(("GET /health (keep-alive)", dt))
    (res, dt) = timed(d.call_tool, "kg_read", {"cwd": str(project)})
    assert res["session_id"]
    latencies.append(("kg_read", dt))
    (resp, dt) = timed(d.rpc, "tools/list")
    assert len(resp["result"]["tools"]) == 8
    latencies.append(("tools/list", dt))
    (st, obj), dt = timed(d.json, "GET", "/api/graph")
    assert st == 200, obj
    latencies.append(("GET /api/graph", dt))
    return latencies


def test_slowloris_and_idle_connections_do_not_block_others(make_daemon, project):
    d = make_daemon()
    pid = d.proc.pid
    base_threads = wait_threads(pid, lambda n: True)
    slow = [Slowloris(d.port) for _ in range(3)]
    for s in slow:
        s.start()
    idle = [connect(d.port) for _ in range(50)]
    half = []  # connections that sent half a request line, then nothing
    for _ in range(5):
        s = connect(d.port)
        s.sendall(b"POST /mcp HT")
        half.append(s)
    try:
        time.sleep(0.5)
        worst = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            worst.extend(normal_round(d, project))
        slowest = max(worst, key=lambda x: x[1])
        assert slowest[1] < PROMPT, "a normal request took %.2f s while slow clients were connected: %s" % (
            slowest[1], slowest[0])
        n = threads_of(pid)
        # one thread per open connection plus the daemon's own few; nothing per request
        assert n <= base_threads + len(slow) + len(idle) + len(half) + 8, (base_threads, n)
        if HEADER_DEADLINE > 7:
            assert all(s.cut_off_at is None for s in slow), "slowloris cut off before HEADER_DEADLINE"
        if IDLE_TIMEOUT > 7:
            assert not any(closed_by_server(s) for s in idle), "idle connections closed before IDLE_TIMEOUT"
    finally:
        for s in slow:
            s.stop.set()
        for s in idle + half:
            s.close()
    for s in slow:
        s.join(2)
    after = wait_threads(pid, lambda n: n <= base_threads + 2)
    assert after <= base_threads + 2, "threads not released after the clients left: %d -> %d" % (base_threads, after)
    st, body = d.json("GET", "/health")
    assert st == 200 and body["status"] == "ok"


@pytest.mark.skipif(os.environ.get("KGD_QUICK") == "1", reason="KGD_QUICK=1: skips the wait for the timeouts")
def test_idle_and_slow_connections_are_closed_eventually(make_daemon):
    d = make_daemon()
    pid = d.proc.pid
    base_threads = wait_threads(pid, lambda n: True)
    opened = time.monotonic()
    slow = Slowloris(d.port, interval=0.5)
    slow.start()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 4000}}).encode()
    slow_body = Slowloris(d.port, interval=0.5, request=body,  # R.U.D.Y.: whole headers, then a trickling body
                          prefix=b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body))
    slow_body.start()
    idle = [connect(d.port) for _ in range(20)]
    keepalive = connect(d.port)  # one request, then silence on a keep-alive connection
    keepalive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = keepalive.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:100]
    try:
        limit = max(IDLE_TIMEOUT, HEADER_DEADLINE) + 6
        deadline = opened + limit
        while time.monotonic() < deadline:
            cut = slow.cut_off_at is not None and slow_body.cut_off_at is not None
            if cut and all(closed_by_server(s) for s in idle + [keepalive]):
                break
            time.sleep(0.25)
        problems = []
        still_open = sum(1 for s in idle if not closed_by_server(s))
        if still_open:
            problems.append("%d of %d idle connections still open after %.0f s (IDLE_TIMEOUT %.0f)" % (
                still_open, len(idle), limit, IDLE_TIMEOUT))
        if not closed_by_server(keepalive):
            problems.append("an idle keep-alive connection was not closed after IDLE_TIMEOUT")
        slow.join(2)
        slow_body.join(2)
        if slow.cut_off_at is None:
            problems.append("a slowloris client (headers at 1 byte / 0.5 s, %d bytes sent) was not cut off within "
                            "%.0f s (HEADER_DEADLINE %.0f)" % (slow.sent, limit, HEADER_DEADLINE))
        elif slow.cut_off_at - slow.started_at < min(HEADER_DEADLINE, IDLE_TIMEOUT) - 1:
            problems.append("slowloris cut off after %.1f s, before the deadline" % (slow.cut_off_at - slow.started_at))
        if slow.answer and (b"Traceback" in slow.answer or slow.answer.startswith(b"HTTP/1.1 5")):
            problems.append("slowloris got %r" % slow.answer[:100])
        if slow_body.cut_off_at is None:
            problems.append("a client trickling its request body (1 byte / 0.5 s, %d bytes sent) was not cut off "
                            "within %.0f s" % (slow_body.sent, limit))
        assert not problems, "\n".join(problems)
    finally:
        slow.stop.set()
        slow_body.stop.set()
        for s in idle + [keepalive]:
            s.close()
    after = wait_threads(pid, lambda n: n <= base_threads + 2)
    assert after <= base_threads + 2, (base_threads, after)
    assert d.json("GET", "/health")[0] == 200


def read_answer(sock, timeout=3.0):
    """-> bytes the server sent before closing (b'' if it closed or reset without a word), or None on timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                return data
            data += b
    except socket.timeout:
        return data if data else None
    except OSError:
        return data


def test_connection_limit_answers_503_and_recovers(make_daemon):
    d = make_daemon()
    pid = d.proc.pid
    st, _ = d.json("GET", "/health")
    assert st == 200
    d.close_conn()
    base_threads = wait_threads(pid, lambda n: True)
    held = []
    extra = []
    try:
        for _ in range(MAX_CONNECTIONS):
            held.append(connect(d.port))
        n = wait_threads(pid, lambda n: n >= base_threads + MAX_CONNECTIONS, timeout=10)
        assert n >= base_threads + MAX_CONNECTIONS - 2, "the daemon did not take %d connections (threads %d -> %d)" % (
            MAX_CONNECTIONS, base_threads, n)
        time.sleep(0.2)
        for _ in range(10):
            try:
                extra.append(connect(d.port))
            except OSError:
                extra.append(None)  # refused: also a bound
        answers = []
        for s in extra:
            if s is None:
                answers.append(b"")
                continue
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") if not closed_by_server(s) else None
            answers.append(read_answer(s))
        hung = sum(1 for a in answers if a is None)
        assert hung == 0, "%d connections past MAX_CONNECTIONS got neither an answer nor a close" % hung
        for a in answers:
            if a:
                assert a.startswith(b"HTTP/1.1 503"), a[:200]
                head, _, body = a.partition(b"\r\n\r\n")
                assert b"Retry-After" in head
                assert "error" in json.loads(body)
        # Threads stay bounded by the connection limit: no thread per refused connection.
        n = threads_of(pid)
        assert n <= base_threads + MAX_CONNECTIONS + 4, (base_threads, n)
    finally:
        for s in held + [s for s in extra if s is not None]:
            s.close()
    # Once the crowd leaves the daemon serves again, promptly, and its threads go back down.
    deadline = time.monotonic() + 5
    status = None
    while time.monotonic() < deadline:
        try:
            status, _ = d.json("GET", "/health")
        except OSError:
            status = None
        if status == 200:
            break
        d.close_conn()
        time.sleep(0.1)
    assert status == 200, "the daemon did not recover after the connections closed"
    after = wait_threads(pid, lambda n: n <= base_threads + 2, timeout=5)
    assert after <= base_threads + 2, (base_threads, after)
