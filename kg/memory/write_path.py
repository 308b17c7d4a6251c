"""The one write path: every change to a graph, by a tool, a read's promotion or compaction.

Rules owned here:
- A write runs under the store's one RLock with a Write collecting what it did. Each record is
  journalled (kg/disk/durable.py) before it is applied in memory and logged as a change
  (kg/core/changelog.py); compaction runs after each write when the figures call for it.
- A failure after a record was written cuts the records off and reloads the graph, so neither
  the journal nor memory keeps a change the caller is told failed.
- After the lock is released the records' fsync is awaited (group commit), then the change
  events reach listeners, before the caller gets its answer. A failed fsync puts the graph
  back to what is on disk and the caller gets the StorageError.
- A change that is no news for a session's context (personal state from another machine, task
  progress) reaches the listeners without entering the change log (`told`): kg_sync skips it.
- A tool's put of an edge (a counted write of an "edge" record) records the states of its ends
  that are files before it is journalled, as a node's put does for its touches (contract 12,
  kg/memory/file_states.py): the put makes the edge current. Edges taken from elsewhere (a
  teammate's, another machine's) are not counted writes and keep what they came with.
- Once the store is closing no record is written.
"""

import contextlib
import logging

from ..core import compaction, model
from ..core.errors import KgError, StorageError
from . import file_states

log = logging.getLogger(__name__)


class Write:
    """What one write collects under the lock: commit tickets and change events."""

    __slots__ = ("session", "sid", "tickets", "events")

    def __init__(self, session):
        self.session = session
        self.sid = session.id if session is not None else None
        self.tickets = []
        self.events = []


class WritePath:
    def __init__(self, lock, changes, clock, compaction_settings, durables):
        self.lock = lock  # the store's one RLock
        self.changes = changes  # the store's ChangeLog
        self.clock = clock
        self.compaction_settings = compaction_settings
        self.durables = durables  # () -> every loaded Durable
        self.listeners = []
        self.last_write = 0.0
        self.closed = False

    @contextlib.contextmanager
    def writing(self, session=None, lenient=None):
        """The body runs under the lock with a Write to collect into; then, outside the lock,
        the records are awaited and the events published. With `lenient` = (log level,
        message) a failed commit is logged instead of raised."""
        w = Write(session)
        with self.lock:
            yield w
        try:
            self._commit(w.tickets)
        except KgError as exc:
            if lenient is None:
                raise
            log.log(lenient[0], "%s (%s)", lenient[1], exc.message)
        self._publish(w.events)

    def change(self, w, durable, records, apply, events=None, counted=True, compact=True):
        """One operation's change to one graph (lock held), the steps in their one order:
        journal the records, apply them in memory (`apply(graph)`; its result is returned),
        count the session's write, log the (kind, payload) pairs `events(result)` gives."""
        with self.changing(w, durable, compact) as g:
            for rec in records:
                if counted and rec.get("op") == "edge":
                    file_states.stamp_edge(g, rec["edge"])  # a put verifies its file ends (contract 12)
                self.record(w, durable, rec)
            result = apply(g)
            if counted and w.session:
                w.session.writes += 1
            for kind, payload in events(result) if events is not None else ():
                self.logged(w, durable, kind, payload)
        return result

    @contextlib.contextmanager
    def changing(self, w, durable, compact=True):
        """One graph's part of a write (lock held): if the body (or the compaction after it)
        fails once a record was written, the records are cut off and the graph reloaded."""
        mark = durable.mark()
        n_tickets, n_events = len(w.tickets), len(w.events)
        try:
            yield durable.graph
            if compact:
                self.compact_after(durable, self.clock(), w)
        except Exception:
            del w.tickets[n_tickets:]
            del w.events[n_events:]
            if durable.written_since(mark):
                durable.undo(mark)
            raise

    def record(self, w, durable, rec):
        if self.closed:
            raise StorageError("kgd is shutting down and no longer saves changes; retry once it is back.")
        w.tickets.append(durable.append(rec))
        self.last_write = self.clock()

    def logged(self, w, durable, kind, payload, sid=False):
        """Log a change by the writing session (or by `sid`, None for compaction)."""
        w.events.append(self.changes.record(w.sid if sid is False else sid, durable, kind, payload))

    def told(self, w, durable, kind, payload):
        """An event for the listeners only (the live feed, the personal remote), kept out of the
        change log, so kg_sync never lists it: a change of personal state another machine made,
        a task's progress."""
        ev = {"type": kind, "level": durable.level, "project_path": durable.project_path}
        ev.update(payload)
        w.events.append(ev)

    def _publish(self, events):
        for ev in events:
            for fn in self.listeners:
                try:
                    fn(ev)
                except Exception:  # a listener must never break a write
                    log.exception("change listener failed")

    def _commit(self, tickets):
        """Wait for the records to be durable (outside the lock)."""
        failure = None
        for journal, ticket in tickets:
            try:
                journal.commit(ticket)
            except KgError as exc:
                failure = failure or exc
                self.recover(journal)
        if failure is not None:
            raise failure

    def recover(self, journal):
        """After a failed fsync: cut the journal back and reload its graph from disk."""
        with self.lock:
            if not journal.failed:
                return
            durable = next((d for d in self.durables() if d.journal is journal), None)
            try:
                journal.rollback()
            except OSError:
                log.exception("could not cut back %s after a failed fsync", journal.path)
            if durable is None:
                return
            log.error("a write to %s failed to reach the disk; reloading that graph from disk", journal.path)
            durable.reload()

    # ---- compaction after a write

    def compact_after(self, durable, now, w, full=False):
        """Run the passes when the figures say so (after a write) or always (maintenance).

        A pass that could change nothing (every active node still in grace) is not retried
        after each write until the first of those nodes leaves grace, or a node past grace
        becomes active again: otherwise a graph flooded with new nodes would pay a whole
        pass per write."""
        g = durable.graph
        needed = compaction.needs_compaction(g.tokens, g.archived_count, self.compaction_settings)
        if not full and (not needed or now < g.compact_idle_until):
            return
        index = None
        if not full:
            candidates = g.by_state[model.ACTIVE] | g.by_state[model.ARCHIVED]
            index = (sorted(candidates), g.adj, g.tokens)
        mark = durable.mark()
        result = compaction.compact(g.nodes, g.edges, now, self.compaction_settings, index)
        if not result.changed:
            if needed:
                g.compact_idle_until = self._idle_until(g, now)
            return
        g.compact_idle_until = 0.0
        if result.deleted:
            g.recount()
        else:
            for nid in result.changed_ids:
                g.refresh(nid)
        self._record_compaction(w, durable, result, mark)

    def _record_compaction(self, w, durable, result, mark):
        """Journal and log what a pass changed (already applied in memory). On a bad disk the
        pass is undone: compaction is redone by a later pass, the write that triggered it stands."""
        g = durable.graph
        n_tickets = len(w.tickets)
        states, gone = {}, []
        for nid in sorted(result.changed_ids):
            node = g.nodes.get(nid)
            if node is None:
                gone.append(nid)
            else:
                states[nid] = [bool(node.get("_archived")), node.get("_orphaned_ts")]
        rec = {"op": "compacted", "states": states, "del_nodes": gone, "del_edges": list(result.deleted_edges)}
        try:  # one record, the state keys alone: a pass over a large graph stays cheap under the lock
            self.record(w, durable, rec)
        except StorageError as exc:
            log.warning("compaction of the %s graph not saved (%s); it will be retried", g.level, exc.message)
            del w.tickets[n_tickets:]
            durable.undo(mark)
            return
        self.logged(w, durable, "compacted", {"archived": list(result.archived), "restored": list(result.restored),
                                              "orphaned": list(result.orphaned), "deleted": list(result.deleted)}, None)

    def _idle_until(self, g, now):
        """When the first active node still in grace leaves it (a node created later leaves
        grace later than now + grace)."""
        grace = self.compaction_settings.grace_s
        waits = [(n.get("_created_ts") or 0) + grace for n in g.nodes.values()
                 if model.is_active(n) and now - (n.get("_created_ts") or 0) < grace]
        return min(waits) if waits else now + grace
