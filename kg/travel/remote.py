"""The daemon's personal remote: ROOT/sync.json says where, one worker thread does it (contract
section 9).

Rules owned here:
- `kgd sync --remote URL` / `--off` write ROOT/sync.json; the daemon reads it at start and when
  asked (`POST /api/remote`), so only someone who can write the storage root chooses where its
  knowledge goes (the HTTP API can run a round, never name a remote).
- A store change tells the worker (cheap, from the change listener); the worker exports,
  commits and runs the rounds (kg/travel/remote_schedule.py decides when, kg/travel/remote_repo.py does the git).
  What moves between the store and ROOT/sync/ is the bridge's job (export, pickup).
- A tool call never waits for a round: git runs in the worker thread, never under the store's
  lock, and while the worker runs the interpreter hands the GIL over every 0.5 ms (not 5 ms).
- The last round's outcome is kept in ROOT/sync-status.json, so `kgd status` and `kgd doctor`
  can say when the last sync was even while the daemon is down, and how many changes wait to be
  pushed (`waiting`).
- A clean stop pushes what waits (kg/travel/remote_repo.py flush: commit, push, and when another
  machine pushed since, fetch, merge and push again, a few seconds at most); when it cannot
  (offline, out of time), the status keeps what waits and the next start's first round pushes it.
  A stop with nothing waiting runs no git.
- `next_round_in` in the status is when the next round begins, and while changes wait, the round
  that pushes them (the schedule's push_due): never the interval when a push comes sooner.
"""

import logging
import sys
import threading
import time

from ..core.errors import Conflict
from ..memory import git_runner
from .remote_repo import (
    FLUSH_BUDGET,
    SyncRepo,
    check_remote,
    read_config,
    read_status,
    redact_url,
    scrub,
    sync_folder,
    write_status,
)
from .remote_schedule import DEBOUNCE, MAX_DELAY, PUSH_GAP, Schedule, Status, Worker

log = logging.getLogger(__name__)

MAX_WAIT = 300.0
SWITCH_INTERVAL = 0.0005


class RemoteSync:
    def __init__(self, root, interval=300.0, bridge=None, clock=time.time, debounce=DEBOUNCE,
                 max_delay=MAX_DELAY, git_timeout=git_runner.DEFAULT_TIMEOUT, push_gap=PUSH_GAP,
                 flush_budget=FLUSH_BUDGET):
        self.root = root
        self.folder = sync_folder(root)
        self.interval = float(interval)
        self.bridge = bridge  # kg/travel/remote_bridge.py's Bridge: .export(full), .pickup(changed_paths)
        self.clock = clock
        self.debounce = debounce
        self.max_delay = max_delay
        self.git_timeout = git_timeout
        self.push_gap = push_gap
        self.flush_budget = flush_budget
        self.lock = threading.Lock()  # apply / stop, never held during a round
        self.worker = None
        self.repo = None
        self.remote = None
        self.config_error = None
        saved = read_status(root)
        self.status_ = Status(remote=saved.get("remote"), last_ok=saved.get("last_ok"),
                              last_error=saved.get("last_error"))
        self.last_round = saved.get("last_round")
        self.waiting = int(saved.get("waiting") or 0)  # while no worker runs: what the last one left

    # ------------------------------------------------------------ life cycle

    def start(self):
        self.apply()
        return self

    def apply(self):
        """Make the running worker match ROOT/sync.json (start, stop, or point at a new remote)."""
        with self.lock:
            cfg = read_config(self.root)
            want = cfg.get("remote") if cfg.get("enabled", True) else None
            self.config_error = None
            if want is not None:
                try:
                    check_remote(want)
                except ValueError as exc:
                    self.config_error = "%s (in %s/sync.json)" % (exc, self.root)
                    log.error("remote sync off: %s", self.config_error)
                    want = None
            if want == self.remote and (self.worker is not None) == (want is not None):
                return
            self._stop_worker()
            self.remote = want
            if want is None:
                return
            if redact_url(self.status_.remote) != redact_url(want):  # the status file keeps it redacted
                self.status_ = Status(remote=want)
                self.last_round = None
                self.waiting = 0
            self.repo = SyncRepo(self.folder, want, timeout=self.git_timeout)
            self.repo.clear_stale_lock()  # no git of ours runs here now: the worker is stopped
            schedule = Schedule(interval=self.interval, debounce=self.debounce, max_delay=self.max_delay,
                                now=self.clock(), push_gap=self.push_gap, waiting=self.waiting)
            # The round's CPU work (JSON, hashing) must not hold up a request thread for the
            # interpreter's default 5 ms per switch: a request waits at most this long per hand-off.
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
            self.worker = Worker(self._commit, self._round, schedule, self.status_, clock=self.clock,
                                 after=self._save_status).start()
            log.info("remote sync on: %s every %gs (working tree %s)", redact_url(want), self.interval, self.folder)

    def stop(self):
        """The daemon stops: the round under way is cancelled, then what waits is pushed (bounded)."""
        with self.lock:
            self._stop_worker(flush=True)

    def _stop_worker(self, flush=False):
        if self.worker is not None:
            worker = self.worker
            worker.stopping()
            self.repo.cancel()
            worker.stop(timeout=30)
            self.worker = None
            sched = worker.schedule
            self.waiting = sched.waiting
            if flush and (sched.waiting or sched.first_change is not None):
                self._flush()
            if self.bridge is not None:
                self.bridge.close()  # no tracker collects changes while no worker syncs them

    def _flush(self):
        """Push what waits at a clean stop; say what happened in the log and the status file."""
        bridge = self.bridge
        try:
            pushed = self.repo.flush(export=(lambda: bridge.export(full=False)) if bridge else None,
                                     budget=self.flush_budget)
        except Exception as exc:
            message = scrub(getattr(exc, "message", None) or str(exc) or type(exc).__name__, self.remote)
            log.warning("remote sync: %s left unpushed at stop (%s: %s); the next start pushes %s",
                        _changes(self.waiting), getattr(exc, "kind", "failed"), message,
                        "it" if self.waiting == 1 else "them")
        else:
            if pushed:
                log.info("remote sync: pushed %s at stop", _changes(self.waiting))
            self.waiting = 0
        self._save_status()

    # ------------------------------------------------------------ what the worker runs

    def _commit(self):
        self.repo.ensure()
        if self.bridge is not None:
            self.bridge.export(full=False)
        self.repo.commit()

    def _round(self):
        bridge = self.bridge
        started, cpu = time.monotonic(), time.thread_time()
        result = self.repo.round(export=(lambda: bridge.export(full=True)) if bridge else None,
                                 pickup=bridge.pickup if bridge else None)
        self.last_round = {"at": self.clock(), "changed": len(result["changed"]),
                           "conflicted": result["conflicted"], "seconds": round(time.monotonic() - started, 3),
                           "cpu_seconds": round(time.thread_time() - cpu, 3)}  # the daemon's own, git's apart
        return result

    def _save_status(self):
        worker = self.worker
        waiting = worker.schedule.waiting if worker is not None else self.waiting
        try:
            write_status(self.root, dict(self.status_.to_dict(), last_round=self.last_round, waiting=waiting))
        except OSError as exc:
            log.debug("could not save the remote sync status: %s", exc)

    # ------------------------------------------------------------ what callers use

    def changed(self, event=None):
        """A store change listener: knowledge changed, an export and a commit are due."""
        worker = self.worker
        if worker is not None:
            worker.changed(1)  # which keys changed, each graph's tracker knows (kg/core/graph.py)

    def tick(self):
        """The maintenance beat: a graph loaded since the last pass (a project opened here for
        the first time) is reconciled with its folder soon, not at the next round."""
        worker, bridge = self.worker, self.bridge
        if worker is not None and bridge is not None and bridge.unseen():
            worker.changed(0)  # a graph to look at, not a change of knowledge

    def sync_now(self, wait=60.0):
        """Re-read ROOT/sync.json, run a round now, wait for it (at most `wait` seconds)."""
        self.apply()
        worker = self.worker
        if worker is None:
            if self.config_error:
                raise Conflict("remote sync is off: %s. Run `kgd sync --remote URL`." % self.config_error)
            return dict(self.status(), completed=False)
        wait = max(0.0, min(float(wait), MAX_WAIT))
        done = worker.request_round(wait=wait > 0, timeout=wait)
        return dict(self.status(), completed=bool(done and wait > 0))

    def status(self):
        worker = self.worker
        st = self.status_.to_dict()
        out = {"enabled": worker is not None, "remote": redact_url(self.remote) or st["remote"], "folder": self.folder,
               "interval_s": self.interval, "syncing": bool(worker and worker.busy == "round"),
               "last_ok": st["last_ok"], "last_error": st["last_error"], "failing": st["failing"],
               "last_attempt": st["last_attempt"], "last_round": self.last_round,
               "waiting": worker.schedule.waiting if worker is not None else self.waiting}
        if self.config_error:
            out["config_error"] = self.config_error
        if worker is not None:
            now = self.clock()
            with worker.cond:  # never held during a round: only while the worker reads its schedule
                at = worker.schedule.round_due(now)
            out["next_round_in"] = round(max(0.0, at - now), 1)  # the push's round when changes wait
        return out


def _changes(n):
    return "1 change" if n == 1 else "%d changes" % n
