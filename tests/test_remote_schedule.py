"""The personal remote's schedule, status and worker thread (contract section 9): debounce, interval,
backoff, once-per-state logging, and a round asked for while one runs. No git here."""

import logging
import threading
import time

import pytest

from kg.travel.remote_schedule import Schedule, Status, Worker


class Fail(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind, self.message = kind, message


# ---------------------------------------------------------------- Schedule (pure)

def test_first_round_at_start_then_every_interval():
    s = Schedule(interval=300, now=1000)
    assert s.next_action(1000) == ("round", 0.0)
    s.round_started()
    s.round_done(True, 1001)
    assert s.next_action(1001) == (None, 300)
    assert s.next_action(1301) == ("round", 0.0)


def test_commit_waits_for_writes_to_pause():
    s = Schedule(interval=300, debounce=5, max_delay=60, now=0)
    s.round_done(True, 0)
    s.changed(10)
    assert s.next_action(12) == (None, 3)
    s.changed(14)  # a write pushes the commit back
    assert s.next_action(18)[0] is None
    assert s.next_action(19) == ("commit", 0.0)
    s.committed(19)
    assert s.next_action(20) == (None, 280)


def test_commit_never_later_than_max_delay_under_steady_writes():
    s = Schedule(interval=300, debounce=5, max_delay=60, now=0)
    s.round_done(True, 0)
    for t in range(10, 80, 2):
        s.changed(t)
        action, _ = s.next_action(t)
        if t >= 70:
            assert action == "commit"
            break
        assert action is None


def test_a_change_after_the_commit_started_stays_pending():
    s = Schedule(interval=300, debounce=5, now=0)
    s.round_done(True, 0)
    s.changed(10)
    started = 15
    s.changed(16)  # arrives while the commit of the earlier change runs
    s.committed(started)
    assert s.commit_due() == 21


def test_backoff_doubles_and_is_capped_and_success_resets():
    s = Schedule(interval=300, backoff_base=5, backoff_cap=900, now=0)
    delays = []
    now = 0
    for _ in range(10):
        s.round_done(False, now)
        delays.append(s.next_round - now)
        now = s.next_round
    assert delays == [5, 10, 20, 40, 80, 160, 320, 640, 900, 900]
    s.round_done(True, now)
    assert s.next_round - now == 300 and s.failures == 0


def test_asked_round_ignores_backoff():
    s = Schedule(interval=300, now=0)
    s.round_done(False, 0)
    assert s.next_action(1)[0] is None
    s.ask()
    assert s.next_action(1) == ("round", 0.0)


def test_short_interval_bounds_the_backoff_base():
    s = Schedule(interval=1, backoff_base=5, backoff_cap=900, now=0)
    s.round_done(False, 0)
    assert s.next_round == 1


# ---------------------------------------------------------------- Status: once per state change

def test_status_logs_each_state_change_once(caplog):
    st = Status(remote="/r")
    with caplog.at_level(logging.INFO, logger="kg.travel.remote_schedule"):
        assert st.error("offline", "could not resolve host", 1) is True
        for t in range(2, 12):
            assert st.error("offline", "could not resolve host", t) is False
        assert st.error("auth", "authentication failed", 13) is True
        st.ok(14)
        st.ok(15)
        st.error("auth", "authentication failed", 16)
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("could not resolve host" in m for m in msgs) == 1
    assert sum("authentication failed" in m for m in msgs) == 2  # before and after a success
    assert sum("works again" in m for m in msgs) == 1
    d = st.to_dict()
    assert d["last_ok"] == 15 and d["last_error"]["kind"] == "auth" and d["failing"] is True


# ---------------------------------------------------------------- Worker thread

def _worker(do_commit=lambda: None, do_round=lambda: None, **kw):
    kw.setdefault("interval", 3600)
    sched = Schedule(now=time.time(), **kw)
    return Worker(do_commit, do_round, sched, Status(remote="/r"))


def test_worker_runs_first_round_then_asked_rounds_and_waits():
    rounds = []
    w = _worker(do_round=lambda: rounds.append(time.time())).start()
    try:
        assert w.request_round(wait=True, timeout=10)
        n = len(rounds)
        assert n >= 1
        assert w.request_round(wait=True, timeout=10)
        assert len(rounds) == n + 1
        assert w.status.last_ok is not None
    finally:
        w.stop()


def test_round_asked_while_one_runs_gets_its_own_round():
    gate = threading.Event()
    entered = threading.Event()
    rounds = []

    def slow_round():
        rounds.append(1)
        entered.set()
        gate.wait(10)
    w = _worker(do_round=slow_round).start()
    try:
        assert entered.wait(10)  # the start-up round runs and blocks
        got = []
        t = threading.Thread(target=lambda: got.append(w.request_round(wait=True, timeout=10)))
        t.start()
        time.sleep(0.1)
        gate.set()
        t.join(15)
        assert got == [True] and len(rounds) == 2
    finally:
        gate.set()
        w.stop()


def test_worker_survives_failures_and_records_them(caplog):
    calls = []

    def failing():
        calls.append(1)
        raise Fail("no_remote", "'/gone' does not appear to be a git repository")
    w = _worker(do_round=failing).start()
    try:
        with caplog.at_level(logging.WARNING, logger="kg.travel.remote_schedule"):
            for _ in range(4):
                w.request_round(wait=True, timeout=10)
        assert len(calls) >= 4 and w.thread.is_alive()
        assert w.status.last_error["kind"] == "no_remote"
        assert sum("does not appear" in r.getMessage() for r in caplog.records) == 1
    finally:
        w.stop()


def test_worker_commits_after_the_debounce():
    commits = []
    w = _worker(do_commit=lambda: commits.append(time.time()), debounce=0.2, max_delay=5).start()
    try:
        w.request_round(wait=True, timeout=10)
        t0 = time.time()
        w.changed()
        deadline = time.time() + 5
        while not commits and time.time() < deadline:
            time.sleep(0.02)
        assert commits and commits[0] - t0 >= 0.18
    finally:
        w.stop()


def test_stop_ends_the_thread_and_releases_waiters():
    w = _worker(do_round=lambda: time.sleep(0.05)).start()
    w.stop(timeout=5)
    assert not w.thread.is_alive()
    assert w.request_round(wait=True, timeout=1) is False


@pytest.mark.parametrize("failures", [1, 3])
def test_worker_backs_off_between_unasked_retries(failures):
    calls = []

    def failing():
        calls.append(time.time())
        raise Fail("offline", "could not resolve host")
    w = _worker(do_round=failing, interval=0.2, backoff_base=0.2, backoff_cap=0.8).start()
    try:
        time.sleep(0.2 * (2 ** failures))
    finally:
        w.stop()
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert all(g2 >= g1 * 1.5 for g1, g2 in zip(gaps, gaps[1:]) if g1 < 0.4)


# ---------------------------------------------------------------- a local commit is pushed soon

def test_a_local_commit_is_pushed_soon_not_at_the_next_interval():
    """With the 300 s interval a write waited for the next round (up to 300 s) before another machine's
    round (up to 300 s more) could see it: about ten minutes."""
    s = Schedule(interval=300, debounce=5, max_delay=60, push_gap=30, now=0)
    s.round_started(0)
    s.round_done(True, 1)
    s.changed(10)
    assert s.next_action(15) == ("commit", 0.0)
    s.committed(15)
    s.local_commit(15)
    assert s.next_action(16) == (None, 14)  # the gap since the last round began: 30 s
    assert s.next_action(30) == ("round", 0.0)
    s.round_started(30)
    s.round_done(True, 31)
    s.changed(100)  # long after: pushed as soon as it is committed
    s.committed(105)
    s.local_commit(105)
    assert s.next_action(105) == ("round", 0.0)


def test_a_commit_while_rounds_fail_leaves_the_backoff_alone():
    s = Schedule(interval=300, debounce=5, backoff_base=5, push_gap=30, now=0)
    for t in (0, 5, 15):
        s.round_started(t)
        s.round_done(False, t)
    assert s.next_round == 15 + 20
    s.changed(16)
    s.committed(21)
    s.local_commit(21)
    assert s.next_round == 35


def test_a_commit_of_no_knowledge_pulls_no_round_in():
    s = Schedule(interval=300, push_gap=30, now=0)
    s.round_started(0)
    s.round_done(True, 0)
    s.changed(100, count=0)  # a graph to look at (the maintenance beat), nothing new
    s.committed(105)
    s.local_commit(105)
    assert s.next_round == 300 and s.waiting == 0


def test_waiting_counts_the_changes_no_successful_round_carried():
    s = Schedule(interval=300, now=0, waiting=2)  # left by the daemon before this one
    assert s.waiting == 2
    s.changed(1)
    s.changed(2)
    assert s.waiting == 4
    s.round_started(3)
    s.changed(4)  # made while the round runs: it waits for the next
    s.round_done(False, 5)
    assert s.waiting == 5  # a failed round pushed nothing
    s.round_started(6)
    s.changed(7)
    s.round_done(True, 8)
    assert s.waiting == 1


def test_the_worker_pushes_a_commit_soon():
    rounds, commits = [], []
    sched = Schedule(interval=3600, debounce=0.1, max_delay=5, push_gap=0.3, now=time.time())
    w = Worker(lambda: commits.append(time.time()), lambda: rounds.append(time.time()), sched,
               Status(remote="/r")).start()
    try:
        assert w.request_round(wait=True, timeout=10)
        n = len(rounds)
        w.changed()
        deadline = time.time() + 5
        while len(rounds) == n and time.time() < deadline:
            time.sleep(0.02)
        assert commits and len(rounds) == n + 1 and rounds[-1] >= commits[0]
        assert sched.waiting == 0
    finally:
        w.stop()
