"""A shared project's `.kg/` read and parsed before the store's lock, at the project's first load
(contract section 9: `.kg/` is untrusted input; a large file must not hold the lock every request
waits for, /api/health included).

Rules owned here:
- The registry's warm step (before the lock) hands over the root of a project not loaded yet;
  if it holds `.kg/`, its files are read and parsed here, on that request's thread.
- TeamFolder.attach (kg/travel/team.py, under the lock) takes the entry: its sync only reconciles and applies.
  Files changed since (stat differs) are read again there, as before.
- An entry whose files changed since it was read is read again.
- One read per project at a time: a second request for it waits for the first's read.
- At most KEEP entries wait unclaimed (warmed by a look-up that loads nothing): the oldest go.
"""

import logging
import threading

from .team_folder import holds_kg
from .team_sync import Shared

log = logging.getLogger(__name__)


class Prepared:
    """The parsed `.kg/` of the projects about to load (see the module docstring)."""

    KEEP = 4  # entries warmed but never loaded (a viewer's look-up) are dropped past this
    WAIT_S = 60.0  # a second request for a project being read waits for that read

    def __init__(self):
        self.lock = threading.Lock()
        self.ready = {}  # root -> Shared holding .pending
        self.reading = {}  # root -> Event set once its read ends

    def warm(self, root):
        if not root or not holds_kg(root):
            return
        with self.lock:
            ready = self.ready.get(root)
            if ready is not None and ready.pending[0] == ready.states():
                return
            event = self.reading.get(root)
            mine = event is None
            if mine:
                event = self.reading[root] = threading.Event()
        if not mine:
            event.wait(self.WAIT_S)
            return
        s = Shared(None, root)
        try:
            s.refresh_git(True)  # which files git tracks, and who writes here: before the lock
            s.pending = s.read_parsed()
        except Exception:  # the load reads it again and reports it
            log.exception("could not read %s ahead of its load", s.dir)
        finally:
            with self.lock:
                del self.reading[root]
                if s.pending is not None:
                    self.ready[root] = s
                    while len(self.ready) > self.KEEP:
                        del self.ready[next(iter(self.ready))]
            event.set()

    def take(self, durable):
        with self.lock:
            s = self.ready.pop(durable.project_path, None)
        if s is not None:
            s.durable = durable
        return s
