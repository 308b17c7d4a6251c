"""Requests first: the daemon's background work gives way while a request is being served
(contract section 9: a sync never slows a tool call).

Why: the daemon is one Python process. A background pass (the personal remote's export, its
git round) that holds the interpreter for even a millisecond at a time makes every request
served meanwhile wait for it at each hand-over of the interpreter lock, which is what moved the
slowest tool calls while a sync ran. Background work instead calls `give_way()` between its
steps: while any request is being served it sleeps (the interpreter is free) until none is, or
`max_wait` has passed, so it always makes progress, however busy the daemon. It sleeps on a
condition the last request to end wakes: no polling competes for the interpreter.

Rules owned here:
- `serving()` marks one request from its parsed request line to its answer (kg/serve/http.py); a
  request that waits on background work (POST /api/remote) steps `aside()` while it waits.
- `give_way(max_wait)` returns at once when no request is being served.
"""

import contextlib
import threading
import time

MAX_WAIT = 0.05  # the longest one step gives way before it runs anyway

_cond = threading.Condition(threading.Lock())
_serving = 0
_thread = threading.local()  # .on: this thread is serving a request


def begin():
    """This thread serves a request from now on (once: a second begin() changes nothing)."""
    global _serving
    if getattr(_thread, "on", False):
        return
    _thread.on = True
    with _cond:
        _serving += 1


def end():
    global _serving
    if not getattr(_thread, "on", False):
        return
    _thread.on = False
    with _cond:
        _serving -= 1
        if not _serving:
            _cond.notify_all()


def busy():
    return _serving > 0


@contextlib.contextmanager
def serving():
    begin()
    try:
        yield
    finally:
        end()


@contextlib.contextmanager
def aside():
    """A request that waits on background work does not hold that work back."""
    was = getattr(_thread, "on", False)
    end()
    try:
        yield
    finally:
        if was:
            begin()


def give_way(max_wait=MAX_WAIT, clock=time.monotonic):
    """Wait while a request is being served, at most `max_wait` seconds; the seconds waited."""
    if not _serving:
        return 0.0
    start = clock()
    with _cond:
        _cond.wait_for(lambda: not _serving, timeout=max_wait)
    return clock() - start
