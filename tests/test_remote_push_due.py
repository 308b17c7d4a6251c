"""When `kgd status` says waiting changes go (contract section 9, personal remote): the schedule's
push_due / round_due against what the schedule then really does, and the words the status line
carries. `kgd status` once said "2 changes wait to be pushed (next round in 4m)" (the pull
interval) while they were pushed about 30 s later."""

import pytest

from kg.ops.sync import describe
from kg.travel.remote_schedule import Schedule

STEP = 0.25


def next_round_run(s, now, until=4000.0):
    """Run the schedule forward from `now` as the worker does (a commit due is made, and its
    local_commit asks for the push): the moment the next round begins."""
    t = now
    while t <= until:
        action, _ = s.next_action(t)
        if action == "round":
            return t
        if action == "commit":
            s.committed(t)
            s.local_commit(t)
            continue
        t += STEP
    return None


def after_round(at=0.0, **kw):
    s = Schedule(interval=300, debounce=5, max_delay=60, push_gap=30, now=at, **kw)
    s.round_started(at)
    s.round_done(True, at + 1)
    return s


def writes_soon_after_a_round():
    s = after_round()
    s.changed(1)
    return s, 1.0


def a_write_long_after_a_round():
    s = after_round()
    s.changed(100)
    return s, 101.0


def two_writes_past_the_gap():
    s = after_round()
    s.changed(27)
    s.changed(31)  # the debounce, not the gap, decides: 36
    return s, 32.0


def steady_writes_hit_max_delay():
    s = after_round()
    for t in range(200, 258, 2):
        s.changed(t)
    return s, 258.0  # committed at 200 + 60 at the latest


def committed_and_waiting_for_the_gap():
    s = after_round()
    s.changed(2)
    s.committed(7)
    s.local_commit(7)
    return s, 8.0


def rounds_failing():
    s = Schedule(interval=300, debounce=5, backoff_base=5, push_gap=30, now=0)
    for t in (0, 5, 15):
        s.round_started(t)
        s.round_done(False, t)
    s.changed(16)  # the backoff decides: 35
    return s, 17.0


def changes_left_by_the_last_daemon():
    return Schedule(interval=300, push_gap=30, now=50, waiting=2), 50.0


def a_change_while_a_round_runs():
    s = after_round()
    s.round_started(40)
    s.changed(41)  # carried by no round yet: debounce 46, gap 70
    s.committed(40)
    s.round_done(True, 42)
    return s, 43.0


SCENARIOS = [writes_soon_after_a_round, a_write_long_after_a_round, two_writes_past_the_gap,
             steady_writes_hit_max_delay, committed_and_waiting_for_the_gap, rounds_failing,
             changes_left_by_the_last_daemon, a_change_while_a_round_runs]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_round_due_is_when_the_round_that_pushes_really_begins(scenario):
    s, now = scenario()
    assert s.waiting
    said = s.round_due(now)
    assert said - now < 290 or scenario is rounds_failing  # never the interval while a push comes sooner
    ran = next_round_run(s, now)
    assert ran is not None and abs(ran - max(said, now)) <= STEP, (said, ran)


def test_the_figures_of_the_walk_through():
    """Written 1 s after a round with the defaults (debounce 5 s, gap 30 s, interval 300 s)."""
    s, now = writes_soon_after_a_round()
    assert s.round_due(now) == 30
    s, now = a_write_long_after_a_round()
    assert s.round_due(now) == 105


def test_nothing_waiting_is_the_intervals_round_and_asked_is_now():
    s = after_round()
    assert s.push_due() is None and s.round_due(10) == s.next_round == 301
    s.changed(20, count=0)  # a graph to look at, no knowledge: no push pulled in
    assert s.push_due() is None and s.round_due(21) == 301
    s.ask()
    assert s.round_due(22) == 22


def test_the_status_line_says_when_the_push_goes():
    now = 1000000.0
    ok = {"remote": "/r", "enabled": True, "last_ok": now - 14, "last_error": None, "failing": False}
    assert describe(dict(ok, waiting=2, next_round_in=29.6), now) == [
        "remote:   /r, last sync 14s ago; 2 changes wait to be pushed (in about 30s)"]
    assert describe(dict(ok, waiting=1, next_round_in=0.3), now)[0].endswith(
        "; 1 change waits to be pushed (pushing now)")
    failing = dict(ok, waiting=3, next_round_in=130, failing=True,
                   last_error={"at": now - 5, "kind": "offline", "message": "no route"})
    lines = describe(failing, now)
    assert lines[0].endswith("; 3 changes wait to be pushed (next try in about 2m)")
    assert "offline" in lines[1]
    assert describe(dict(ok, waiting=0, next_round_in=20), now) == ["remote:   /r, last sync 14s ago"]
