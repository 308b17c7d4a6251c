"""When the personal remote is synced, and what a person is told about it (contract section 9).

Rules owned here:
- Schedule (pure, clock passed in): a change is committed locally once writes pause for
  `debounce` seconds, and at most `max_delay` seconds after the first unsaved change; a round
  (commit, fetch, merge, push) runs every `interval` seconds and at once when asked for
  (`kgd sync`). A local commit is pushed soon, not at the next interval: a round follows it once
  `push_gap` seconds have passed since the last round began (so a write reaches the remote within
  about debounce + push_gap seconds, and another machine at its next round: at most `interval`
  later), unless rounds are failing, when the backoff decides. After a failed round the next try
  waits base * 2^(failures-1) seconds, capped at `backoff_cap`; a success resets it. An
  asked-for round never waits for the backoff.
- What waits: the number of changes made since the last successful round began (`waiting`);
  `kgd status` says it, and when the round that pushes them begins (push_due: the debounce, then
  push_gap, not the interval), so that "last sync 14s ago" never hides a commit not yet pushed.
- Status: the remote, the last successful round, the last error. A failure is logged once per
  state change (a new kind or message, or a first failure after success); the same failure
  again is only counted; the first success after failures is logged once.
- Worker: ONE background thread runs the commits and rounds, never on a request's path and never
  under the store's lock; `request_round(wait)` lets a caller wait (bounded) for a round that
  started after its request.
"""

import logging
import threading
import time

from .remote_repo import redact_url, scrub

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 300.0
DEBOUNCE = 5.0
MAX_DELAY = 60.0
BACKOFF_BASE = 5.0
BACKOFF_CAP = 900.0
PUSH_GAP = 30.0


class Schedule:
    """What the worker does next, as a pure function of the events it was told and `now`."""

    def __init__(self, interval=DEFAULT_INTERVAL, debounce=DEBOUNCE, max_delay=MAX_DELAY,
                 backoff_base=BACKOFF_BASE, backoff_cap=BACKOFF_CAP, now=0.0, push_gap=PUSH_GAP, waiting=0):
        self.interval = float(interval)
        self.debounce = float(debounce)
        self.max_delay = float(max_delay)
        self.push_gap = min(float(push_gap), self.interval)
        self.waiting = int(waiting or 0)  # changes not yet in a successful round
        self._in_round = 0  # of those, the ones the round under way carries
        self.last_round = None  # when the last round began
        self.backoff_base = min(float(backoff_base), self.interval)
        self.backoff_cap = max(float(backoff_cap), self.interval)
        self.first_change = None  # unsaved changes since then
        self.last_change = None
        self.asked = False
        self.failures = 0
        self.next_round = now  # the first round runs at start

    def changed(self, now, count=1):
        """`count` changes were made (0: something to look at, no new knowledge)."""
        if self.first_change is None:
            self.first_change = now
        self.last_change = now
        self.waiting += count

    def ask(self):
        self.asked = True

    def committed(self, since):
        """The changes seen up to `since` are committed (later ones stay pending)."""
        if self.last_change is not None and self.last_change <= since:
            self.first_change = self.last_change = None

    def local_commit(self, now):
        """A commit landed locally: push it soon (at once if the last round began push_gap ago)."""
        if self.failures == 0 and self.waiting:
            soon = now if self.last_round is None else max(now, self.last_round + self.push_gap)
            self.next_round = min(self.next_round, soon)

    def round_started(self, now=None):
        self.asked = False  # a request made while this round runs asks for another
        self._in_round = self.waiting  # what a success will have pushed
        self.last_round = now

    def round_done(self, ok, now):
        if ok:
            self.waiting = max(0, self.waiting - self._in_round)
        self._in_round = 0
        if ok:
            self.failures = 0
            self.next_round = now + self.interval
        else:
            self.failures += 1
            self.next_round = now + self.retry_delay()

    def retry_delay(self):
        if not self.failures:
            return self.interval
        return min(self.backoff_cap, self.backoff_base * (2 ** min(self.failures - 1, 30)))

    def push_due(self):
        """When the round that pushes what waits begins if no further change comes (None when
        nothing waits): what local_commit will ask for once the commit due has landed, or the
        round already set (a commit made, a restart with changes left, rounds failing)."""
        if not self.waiting:
            return None
        due = self.commit_due()
        if due is None or self.failures:
            return self.next_round
        soon = due if self.last_round is None else max(due, self.last_round + self.push_gap)
        return min(self.next_round, soon)

    def round_due(self, now):
        """When the next round begins, as `kgd status` says it: now when one was asked for, else
        the earlier of the interval's round and the one that pushes what waits."""
        if self.asked:
            return now
        push = self.push_due()
        return self.next_round if push is None else min(self.next_round, push)

    def commit_due(self):
        if self.first_change is None:
            return None
        return min(self.last_change + self.debounce, self.first_change + self.max_delay)

    def next_action(self, now):
        """("round" | "commit", 0) when one is due now, else (None, seconds until the next)."""
        if self.asked or now >= self.next_round:
            return "round", 0.0
        due = self.commit_due()
        if due is not None and now >= due:
            return "commit", 0.0
        wait = self.next_round - now
        if due is not None:
            wait = min(wait, due - now)
        return None, max(0.0, wait)


class Status:
    """What `kgd status` / `kgd doctor` show; logs each change of state once."""

    def __init__(self, remote=None, last_ok=None, last_error=None, logger=log):
        self.remote = remote
        self.last_ok = last_ok
        self.last_error = last_error  # {"at", "kind", "message"} or None
        self.failing = False
        self.repeats = 0
        self.rounds = 0
        self.last_attempt = None
        self.log = logger

    def ok(self, now):
        self.rounds += 1
        self.last_attempt = self.last_ok = now
        if self.failing:
            self.log.info("remote sync works again (%s)", redact_url(self.remote))
        self.failing = False
        self.repeats = 0

    def error(self, kind, message, now):
        message = scrub(message, self.remote)
        self.last_attempt = now
        same = self.failing and self.last_error and (self.last_error["kind"], self.last_error["message"]) == (
            kind, message)
        self.last_error = {"at": now, "kind": kind, "message": message}
        if same:
            self.repeats += 1
            return False
        self.failing = True
        self.repeats = 0
        self.log.warning("remote sync failed (%s): %s; local commits are kept, retrying with backoff",
                         kind, message)
        return True

    def to_dict(self):
        return {"remote": redact_url(self.remote), "last_ok": self.last_ok, "last_error": self.last_error,
                "failing": self.failing, "last_attempt": self.last_attempt}


class Worker:
    """The one thread that runs `commit()` and `round()`; both return None or raise an exception
    carrying `kind` and `message` (gitrun.GitError)."""

    def __init__(self, do_commit, do_round, schedule, status, clock=time.time, name="kgd-remote-sync",
                 after=None):
        self.do_commit = do_commit
        self.do_round = do_round
        self.after = after  # called in the thread after each round, outside the condition
        self.schedule = schedule
        self.status = status
        self.clock = clock
        self.cond = threading.Condition()
        self.stopped = False
        self.busy = None
        self.last_result = None
        self.asked = 0  # rounds asked for
        self.served = 0  # rounds asked for that a finished round covered
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def changed(self, count=1):
        """The store has changes to export (cheap: called on fold); `count` of them are new knowledge."""
        with self.cond:
            self.schedule.changed(self.clock(), count)
            self.cond.notify_all()

    def request_round(self, wait=False, timeout=120.0):
        """Ask for a round now; with wait, block until one that started after this call ends (or
        timeout). True when it ended in time."""
        with self.cond:
            self.asked += 1
            ticket = self.asked
            self.schedule.ask()
            self.cond.notify_all()
            if not wait:
                return True
            deadline = time.monotonic() + timeout
            while self.served < ticket and not self.stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return self.served >= ticket

    def stopping(self):
        """Start no new action and release the waiters (the action under way still ends)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def stop(self, timeout=30.0):
        self.stopping()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _loop(self):
        while True:
            with self.cond:
                if self.stopped:
                    return
                action, wait = self.schedule.next_action(self.clock())
                if action is None:
                    self.cond.wait(min(wait, 60.0) if wait else 60.0)
                    continue
                self.busy = action
                started = self.clock()
                if action == "round":
                    self.schedule.round_started(started)
                covering = self.asked
            self._run(action, started)
            if action == "round" and self.after is not None:
                try:
                    self.after()
                except Exception:
                    log.exception("remote sync: recording a round's outcome failed")
            with self.cond:
                self.busy = None
                if action == "round":
                    self.served = max(self.served, covering)
                self.cond.notify_all()

    def _run(self, action, started):
        try:
            if action == "commit":
                self.do_commit()
                with self.cond:
                    self.schedule.committed(started)
                    self.schedule.local_commit(self.clock())
                return
            self.last_result = self.do_round()
        except Exception as exc:  # a failure of one round never ends the thread
            kind = getattr(exc, "kind", None)
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            if kind == "cancelled":
                return
            if kind is None and isinstance(exc, OSError):  # a full disk, a folder turned read-only
                kind = "failed"
                message = "could not write %s: %s" % (exc.filename or "ROOT/sync", exc.strerror or exc)
                log.error("remote sync %s: %s; the changes stay in kgd and are synced at the next round",
                          action, message)
            elif kind is None:
                kind = "failed"
                log.exception("remote sync %s raised", action)
            with self.cond:
                if action == "round":
                    self.schedule.round_done(False, self.clock())
                else:  # a failed local commit is retried by the next round
                    self.schedule.committed(started)
                self.status.error(kind, message, self.clock())
            return
        with self.cond:
            self.schedule.committed(started)
            self.schedule.round_done(True, self.clock())
            self.status.ok(self.clock())
