"""The maintenance loop: a threading.Timer that re-arms itself, never overlapping runs.

Rules owned here:
- Every `interval` seconds (KG_SAVE_INTERVAL) one maintenance pass runs
  (Store.maintenance: compaction with deletion for every loaded graph, one graph per lock
  hold, session expiry, sessions.json, journal folding); tests call Store.maintenance with a
  fixed `now` instead of running the loop.
- A faster beat (`beat` seconds) folds journals once writes pause (Store.fold_idle) and runs
  the `housekeeping` callables (the HTTP layer's slow-client reaper).
- A failing pass is logged and retried at the next beat; stop() waits for a running pass.
The clock is injectable.
"""

import logging
import threading
import time

log = logging.getLogger(__name__)


class Loop:
    def __init__(self, store, interval, beat=0.5, housekeeping=(), clock=time.monotonic):
        self.store = store
        self.interval = max(0.05, float(interval))
        self.beat = min(beat, self.interval)
        self.housekeeping = list(housekeeping)
        self.clock = clock
        self._timer = None
        self._lock = threading.Lock()
        self._stopped = False
        self._next_tick = clock() + self.interval

    def start(self):
        self._arm()
        return self

    def _arm(self):
        with self._lock:
            if self._stopped:
                return
            self._timer = threading.Timer(self.beat, self._run)
            self._timer.daemon = True
            self._timer.name = "kgd-maintenance"
            self._timer.start()

    def _run(self):
        try:
            for fn in self.housekeeping:
                fn()
            if self.clock() >= self._next_tick:
                self._next_tick = self.clock() + self.interval
                self.store.maintenance()
            else:
                self.store.fold_idle()
        except Exception:
            log.exception("maintenance pass failed; retrying at the next beat")
        finally:
            self._arm()

    def stop(self):
        """Stop re-arming and wait for a running pass to end."""
        with self._lock:
            self._stopped = True
            timer = self._timer
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join(timeout=30)
