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
  can say when the last sync was even while the daemon is down.
"""

import logging
import sys
import threading
import time

from ..core.errors import Conflict
from ..memory import git_runner
from .remote_repo import SyncRepo, check_remote, read_config, read_status, redact_url, sync_folder, write_status
from .remote_schedule import DEBOUNCE, MAX_DELAY, Schedule, Status, Worker

log = logging.getLogger(__name__)

MAX_WAIT = 300.0
SWITCH_INTERVAL = 0.0005


class RemoteSync:
    def __init__(self, root, interval=300.0, bridge=None, clock=time.time, debounce=DEBOUNCE,
                 max_delay=MAX_DELAY, git_timeout=git_runner.DEFAULT_TIMEOUT):
        self.root = root
        self.folder = sync_folder(root)
        self.interval = float(interval)
        self.bridge = bridge  # kg/travel/remote_bridge.py's Bridge: .export(full), .pickup(changed_paths)
        self.clock = clock
        self.debounce = debounce
        self.max_delay = max_delay
        self.git_timeout = git_timeout
        self.lock = threading.Lock()  # apply / stop, never held during a round
        self.worker = None
        self.repo = None
        self.remote = None
        self.config_error = None
        saved = read_status(root)
        self.status_ = Status(remote=saved.get("remote"), last_ok=saved.get("last_ok"),
                              last_error=saved.get("last_error"))
        self.last_round = saved.get("last_round")

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
            self.repo = SyncRepo(self.folder, want, timeout=self.git_timeout)
            self.repo.clear_stale_lock()  # no git of ours runs here now: the worker is stopped
            schedule = Schedule(interval=self.interval, debounce=self.debounce, max_delay=self.max_delay,
                                now=self.clock())
            # The round's CPU work (JSON, hashing) must not hold up a request thread for the
            # interpreter's default 5 ms per switch: a request waits at most this long per hand-off.
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
            self.worker = Worker(self._commit, self._round, schedule, self.status_, clock=self.clock,
                                 after=self._save_status).start()
            log.info("remote sync on: %s every %gs (working tree %s)", redact_url(want), self.interval, self.folder)

    def stop(self):
        with self.lock:
            self._stop_worker()

    def _stop_worker(self):
        if self.worker is not None:
            self.worker.stopping()
            self.repo.cancel()
            self.worker.stop(timeout=30)
            self.worker = None
            if self.bridge is not None:
                self.bridge.close()  # no tracker collects changes while no worker syncs them

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
        try:
            write_status(self.root, dict(self.status_.to_dict(), last_round=self.last_round))
        except OSError as exc:
            log.debug("could not save the remote sync status: %s", exc)

    # ------------------------------------------------------------ what callers use

    def changed(self, event=None):
        """A store change listener: knowledge changed, an export and a commit are due."""
        worker = self.worker
        if worker is not None:
            worker.changed()  # which keys changed, each graph's tracker knows (kg/core/graph.py)

    def tick(self):
        """The maintenance beat: a graph loaded since the last pass (a project opened here for
        the first time) is reconciled with its folder soon, not at the next round."""
        worker, bridge = self.worker, self.bridge
        if worker is not None and bridge is not None and bridge.unseen():
            worker.changed()

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
               "last_attempt": st["last_attempt"], "last_round": self.last_round}
        if self.config_error:
            out["config_error"] = self.config_error
        if worker is not None:
            out["next_round_in"] = round(max(0.0, worker.schedule.next_round - self.clock()), 1)
        return out
