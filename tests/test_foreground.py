"""Requests first (kg/memory/foreground.py): background work gives way while a request is served.

- Pure: begin/end per thread (idempotent), give_way returns at once when nothing is served,
  waits while a request is, never longer than max_wait; aside() lets a request wait on
  background work without holding it back.
- The HTTP server marks a request from its request line to its answer, and not a connection
  idle between requests; POST /api/remote waits for its round aside.
"""

import json
import socket
import threading
import time

import pytest

from kg.memory import foreground, store
from kg.serve import http

from helpers import http_request


@pytest.fixture(autouse=True)
def nothing_served():
    assert not foreground.busy()
    yield
    assert not foreground.busy()


def in_thread(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_give_way_returns_at_once_when_nothing_is_served():
    assert foreground.give_way(max_wait=5.0) == 0.0


def test_begin_and_end_count_once_per_thread():
    foreground.begin()
    foreground.begin()
    assert foreground.busy()
    foreground.end()
    assert not foreground.busy()
    foreground.end()  # a second end, or an end with no begin, changes nothing
    assert not foreground.busy()


def test_give_way_waits_for_the_request_then_goes_on():
    served, done = threading.Event(), threading.Event()

    def request():
        with foreground.serving():
            served.set()
            time.sleep(0.1)
        done.set()
    in_thread(request)
    served.wait(5)
    waited = foreground.give_way(max_wait=5.0)
    assert done.is_set() and 0.05 <= waited < 5.0


def test_give_way_never_waits_longer_than_max_wait():
    release = threading.Event()
    started = threading.Event()

    def request():
        with foreground.serving():
            started.set()
            release.wait(10)
    t = in_thread(request)
    started.wait(5)
    try:
        t0 = time.monotonic()
        foreground.give_way(max_wait=0.05)
        assert time.monotonic() - t0 < 2.0
        assert foreground.busy()
    finally:
        release.set()
        t.join(5)


def test_aside_frees_the_background_while_a_request_waits():
    foreground.begin()
    try:
        with foreground.aside():
            assert not foreground.busy()
            assert foreground.give_way(max_wait=5.0) == 0.0
        assert foreground.busy()
    finally:
        foreground.end()
    with foreground.aside():  # outside a request: nothing to step aside from
        assert not foreground.busy()
    assert not foreground.busy()


# ------------------------------------------------------------------ wired in the HTTP server


@pytest.fixture
def server(tmp_path):
    s = store.Store(str(tmp_path / "root")).open()
    d = http.Daemon(("127.0.0.1", 0), s)
    t = in_thread(d.serve_forever)
    yield d
    d.shutdown()
    d.server_close()
    t.join(5)
    s.close()


def test_a_request_is_served_from_its_line_to_its_answer_not_while_idle(server):
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def hooks(payload):
        seen["busy"] = foreground.busy()
        inside.set()
        release.wait(10)
        return None
    server.hooks = hooks
    idle = socket.create_connection(("127.0.0.1", server.server_port), timeout=5)  # connected, says nothing
    try:
        time.sleep(0.1)
        assert not foreground.busy()
        answer = {}
        t = in_thread(lambda: answer.update(r=http_request(server.server_port, "POST", "/api/hooks", json.dumps(
            {"hook_event_name": "SessionStart"}), {"Content-Type": "application/json"})))
        assert inside.wait(5) and seen["busy"]
        assert foreground.busy()
        release.set()
        t.join(5)
        assert answer["r"][0] in (200, 204)
        deadline = time.monotonic() + 5
        while foreground.busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not foreground.busy()
    finally:
        release.set()
        idle.close()


def test_post_api_remote_waits_for_its_round_aside(server):
    class Remote:
        def sync_now(self, wait):
            return {"busy_while_waiting": foreground.busy(), "completed": True}
    server.remote = Remote()
    st, _, data = http_request(server.server_port, "POST", "/api/remote", json.dumps({"wait": 1}),
                               {"Content-Type": "application/json"})
    assert st == 200 and json.loads(data)["busy_while_waiting"] is False
