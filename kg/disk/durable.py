"""One graph and its files: the graph file, its journal, and whether the two need a fold.

Rules owned here:
- A Durable owns one Graph. Loading reads the graph file (healed by storage.load_json) and
  replays the journal on top, skipping malformed records; a journal left with records (or a
  torn tail) is folded as soon as the store has registered the unit.
- A mutation's record is appended to the journal before the change is applied in memory;
  the graph file is rewritten whole by fold(), which then empties the journal.
- undo(mark) cuts the records of a failed operation off the journal and reload() puts the
  graph back to what the files hold: a fresh Graph replaces the old one (the Durable, which
  sessions and the change log refer to, stays the same), so memory never runs ahead of disk.
- A failing fold is logged once per failure streak; the changes stay in the journal.
"""

import logging
import os

from ..core.graph import apply_record, graph_from_obj
from .files import atomic_write, dumps, load_json, storage_error
from .journal import Journal
from .layout import journal_path

log = logging.getLogger(__name__)


def read_graph(path, level, project_path=None, slug=None, clock=None):
    """The graph a file and its journal hold, and whether the journal held anything."""
    obj = load_json(path, clock) if clock is not None else load_json(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = clock() if clock is not None else 0.0
    g = graph_from_obj(obj, level, project_path, slug, fallback_ts=mtime)
    if project_path is not None:
        g.project_path = project_path
    jpath = journal_path(path)
    records = Journal.replay(jpath)
    for rec in records:
        try:
            apply_record(g, rec)
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("%s: skipping a malformed journal record", jpath)
    pending = bool(records) or (os.path.exists(jpath) and os.path.getsize(jpath) > 0)
    return g, pending


class Durable:
    def __init__(self, path, graph, clock=None):
        self.path = path
        self.graph = graph
        self.clock = clock
        self.journal = Journal(journal_path(path))
        self.dirty = False  # journal records not yet folded into the file
        self.shared = None  # kg/shared.Shared when the project is shared through its repository
        self.opened = False  # a session or call has addressed this project (not only a search)
        self.fold_failing = False

    @classmethod
    def load(cls, path, level, project_path=None, slug=None, clock=None):
        """The unit of a graph file; dirty when its journal holds records (the caller folds
        them once the unit is registered, so a crash mid-fold leaves nothing unaccounted)."""
        g, pending = read_graph(path, level, project_path, slug, clock)
        unit = cls(path, g, clock)
        unit.dirty = pending
        return unit

    @property
    def level(self):
        return self.graph.level

    @property
    def project_path(self):
        return self.graph.project_path

    def append(self, record):
        """Journal one record (lock held); returns (journal, ticket) for commit outside it."""
        ticket = self.journal.append(record)
        self.dirty = True
        return self.journal, ticket

    def mark(self):
        return self.journal.mark()

    def written_since(self, mark):
        return self.journal.mark()[1] != mark[1]

    def undo(self, mark):
        """Cut the records after mark off the journal and reload (lock held)."""
        try:
            self.journal.undo(mark)
        except OSError:
            log.exception("could not cut back %s", self.journal.path)
        self.reload()

    def reload(self):
        """A fresh Graph from what the files hold; the journal object stays (pending commit
        tickets remain valid) and is reopened on next use."""
        old = self.graph
        self.journal.close()
        g, pending = read_graph(self.path, old.level, old.project_path, old.slug, self.clock)
        g.path_known = old.path_known
        g.shared = old.shared
        self.graph = g
        self.dirty = pending

    def write_file(self, what="the graph"):
        """Write the graph file whole now (claims a new project's slug on disk)."""
        try:
            atomic_write(self.path, dumps(self.graph.to_obj()))
        except OSError as exc:
            raise storage_error(exc, what) from exc

    def fold(self):
        """Write the graph file whole from memory, then empty the journal (lock held)."""
        try:
            atomic_write(self.path, dumps(self.graph.to_obj()))
            self.journal.reset()
        except OSError as exc:
            if not self.fold_failing:
                log.error("could not fold the journal into %s (%s); the changes stay in the journal",
                          self.path, exc.strerror or exc)
            self.fold_failing = True
            return False
        if self.fold_failing:
            log.info("folding %s works again", self.path)
            self.fold_failing = False
        self.dirty = False
        return True
