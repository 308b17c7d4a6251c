"""One shared project's sync with its repository's `.kg/` (contract section 9): read, reconcile, apply, write.

Rules owned here:
- The storage root's graph stays the personal copy and the durability of every write: a put only
  journals, as for a private graph; `.kg/` is written when writes pause (the journal fold) and at
  shutdown.
- sync(): read the files outside the store's lock; under one lock hold reconcile them with the
  graph (kg/core/reconcile.py) and apply what the disk brought through the store's one write path
  (journalled, logged with no session so every kg_sync and the live feed see it, compaction
  runs); then, outside the lock, re-stat the files (changed since read: reconcile again) and
  write what memory brought, atomically; then record the new base. Reading changes no file.
- A background sync waits while git works in the checkout (its index.lock exists) or a file
  changed in the last SETTLE_S seconds: a file half-written by a checkout must not empty the view.
- Bad lines are logged once per file state, kept for `kgd doctor`, and skipped. A `.kg/` folder
  that is gone (a branch without it) is read as empty and never recreated by a pickup or an export.
- `.kg/` gone while HEAD did not move (rm -rf, `git clean` before the commit) is not a branch switch:
  nothing leaves the view, nothing is written, and the base is forgotten (kgd share writes it again).
- Only the shared half of a node or edge is written (kg_format.node_record / edge_record); a
  node or edge holding a credential (kg/secrets/kinds.py, when present) is never written.
- A file cut at kg_format.MAX_RECORDS lines loads its first lines and is never written by kgd (its
  keys are held back like a credential's) until it is back under the limit: kgd does not drop
  the lines it skipped from the repository.
"""

import logging
import os
import threading
import time

from ..core import kg_format, model, team_state
from ..core.reconcile import Result, memory_view, reconcile, written
from .team_folder import (
    FILES,
    ensure_layout,
    file_state,
    git_dir,
    head_signature,
    kg_dir,
    paths_of,
    read_file,
    real_dir,
    write_repo_file,
)

log = logging.getLogger(__name__)

RETRIES = 3  # reconciles in a row when the files keep changing under a sync
SETTLE_S = 0.1


def held_back(g):
    """Keys never written to `.kg/`: nodes and edges holding a credential (the graph's scan,
    kg/secrets/kinds.py, flags them) and the edges touching such a node (its id may be the secret)."""
    nodes = set(getattr(g, "flagged", ()))
    edges = set(getattr(g, "flagged_edges", ()))
    for nid in nodes:
        edges.update(g.adj.get(nid, ()))
    return {"node": nodes, "edge": edges}


class Shared:
    """The `.kg/` side of one loaded project graph (one per Durable)."""

    def __init__(self, durable, root=None):
        self.durable = durable  # None while Prepared reads it before the project loads
        self.root = durable.project_path if durable is not None else root
        self.dir = kg_dir(self.root)
        self.paths = paths_of(self.root)
        self.index_lock = os.path.join(git_dir(self.root), "index.lock")
        self.seen = {kind: None for kind in FILES}  # file states as kgd last read or wrote them
        self.problems = []  # what the last read could not load
        self._reported = {}  # kind -> file state whose problems were logged
        self.lock = threading.Lock()  # one sync at a time per project
        self.readers = {kind: kg_format.Reader(kind) for kind in FILES}  # re-read only changed lines
        self.held = {kind: {} for kind in FILES}  # key -> (object, _write_ts, record, stamp) from memory
        self._held_logged = {kind: set() for kind in FILES}  # keys held back for a credential, logged
        self.syncs = self.pickups = 0
        self.last_error = None
        self.head_with_kg = None  # head_signature() when .kg/ was last seen here
        self.pending = None  # read_parsed() done before the store's lock, for the first sync

    # ---- polling

    def states(self):
        return {kind: file_state(p) for kind, p in self.paths.items()}

    def changed_on_disk(self):
        return self.states() != self.seen

    def busy(self, now):
        """Seconds a background sync should wait: 0 when free, a moment while a file changed by
        someone else is under SETTLE_S old (maybe still being written), None while git is
        updating the checkout (its index.lock exists: try at the next beat)."""
        if os.path.exists(self.index_lock):
            return None
        ages = [now - st[0] / 1e9 for kind, st in self.states().items() if st is not None and st != self.seen[kind]]
        return max([0.0] + [SETTLE_S - age for age in ages if 0 <= age < SETTLE_S])  # a future mtime: settled

    # ---- one sync

    def sync(self, store, force=False, blocking=True):
        """Reconcile the graph with the files (see the module docstring). `force` writes the
        files clean even when nothing changed (`kgd share`). A background sync (blocking False)
        returns False at once when another sync of this project runs or the checkout is busy."""
        if not blocking:
            wait = self.busy(time.time())
            if wait:  # a moment: wait here (the beat's thread), then look again
                time.sleep(wait)
                wait = self.busy(time.time())
            if wait is None or wait:
                return False
        if not self.lock.acquire(blocking):
            return False
        try:
            for _ in range(RETRIES):
                if self._sync_once(store, force):
                    break
            else:
                log.warning("%s keeps changing while kgd syncs it; retrying at the next beat", self.dir)
            self.syncs += 1
            return True
        finally:
            self.lock.release()

    def _read(self):
        """(states, {kind: bytes or None}, problems, kinds that could not be read) read while the
        files held still."""
        for _ in range(RETRIES):
            before = self.states()
            datas, problems, unreadable = {}, [], set()
            for kind, path in self.paths.items():
                datas[kind], problem = read_file(path) if real_dir(self.dir) else (None, None)
                if problem:
                    problems.append(problem)
                    unreadable.add(kind)
            if self.states() == before:
                break
        return before, datas, problems, unreadable

    def read_parsed(self):
        """(states, datas, parsed, stamps, problems, unreadable, cut): the files read and parsed.
        Needs no lock but this Shared's own (a first load does it before the store's lock)."""
        states, datas, problems, unreadable = self._read()
        parsed, disk_stamps, cut = {}, {}, set()
        for kind, data in datas.items():
            parsed[kind], found, disk_stamps[kind] = self.readers[kind].parse(data)
            problems.extend(found)
            if self.readers[kind].cut:
                cut.add(kind)
        return states, datas, parsed, disk_stamps, problems, unreadable, cut

    def _sync_once(self, store, force):
        pre, self.pending = self.pending, None
        if pre is None or pre[0] != self.states():
            pre = self.read_parsed()
        states, datas, parsed, disk_stamps, problems, unreadable, cut = pre
        head, forget = head_signature(self.root), False
        if real_dir(self.dir):
            self.head_with_kg = head
        elif head is not None and head == self.head_with_kg:
            # .kg/ deleted in place (rm -rf, `git clean` before the commit), not by a checkout:
            # the branch did not change, so its knowledge does not leave the view. What the files
            # held is unknown; the base goes (`kgd share`, or .kg/ restored, writes it all again).
            unreadable, forget = set(FILES), True
        if states != self.seen:
            self.pickups += 1
        self._report(states, problems)
        now = store.clock()
        with store.writes.writing(None, lenient=(logging.ERROR, "changes from %s not saved" % self.dir)) as w:
            g = self.durable.graph
            results, snap = self._reconcile(g, parsed, disk_stamps, now, unreadable, cut)
            self._apply(store, w, results, snap, unreadable, forget)
        outs = {kind: written(parsed[kind], results[kind], datas[kind], now, force) if kind not in cut else None
                for kind in FILES}
        if not any(results[kind].disk for kind in FILES) and not any(o is not None for o in outs.values()):
            self.seen = states
            return True
        if not real_dir(self.dir) and not force:
            self.seen = states  # .kg/ is gone here (another branch): nothing is recreated
            return True
        if self.states() != states:
            return False  # changed since read: reconcile again rather than overwrite
        try:
            if force:
                ensure_layout(self.root)
            for kind, data in outs.items():
                if data is not None:
                    write_repo_file(self.paths[kind], data)
        except OSError as exc:
            self.last_error = "could not write %s: %s" % (self.dir, exc.strerror or exc)
            log.error("%s; the changes stay in kgd and are written at the next pause", self.last_error)
            return True
        self.last_error = None
        self.seen = self.states()
        self._written(store, results, snap)
        return True

    def _report(self, states, problems):
        self.problems = problems
        if problems and self._reported.get("files") != states:
            self._reported["files"] = states
            log.warning("%s: %d problem(s), skipped: %s", self.dir, len(problems), "; ".join(problems[:5]))

    def _records(self, kind, items, to_record):
        """The shared records of what memory holds, and their stamps; a node or edge object
        seen before (same object, same write time) costs a lookup."""
        held, fresh, live, stamps = self.held[kind], {}, {}, {}
        for key, obj in items:
            hit = held.get(key)
            if hit is None or hit[0] is not obj or hit[1] != obj.get("_write_ts"):
                rec = to_record(obj)
                hit = (obj, obj.get("_write_ts"), rec, kg_format.stamp(rec))
            fresh[key] = hit
            live[key], stamps[key] = hit[2], hit[3]
        self.held[kind] = fresh
        return live, stamps

    def _reconcile(self, g, parsed, disk_stamps, now, unreadable=(), cut=()):
        """Per kind the reconcile Result, and the snapshot of the sync state it started from. A
        kind whose file could not be read (a FIFO, a symlink, a folder, over the size limit) is
        neither reconciled nor written: it is unknown, not empty, so nothing leaves the view and
        nothing kgd could not read is overwritten; memory's changes wait until it is fixed. A
        kind whose file was `cut` is reconciled with every key held back: read, never written."""
        s = team_state.state(g.meta)
        results, snap = {}, {}
        frozen = held_back(g)
        for kind, items, to_record in (("node", g.nodes.items(), kg_format.node_record),
                                       ("edge", g.edges.items(), kg_format.edge_record)):
            base0, dropped0, deleted0 = (dict(s[sec][kind]) for sec in ("base", "dropped", "deleted"))
            snap[kind] = (base0, dropped0, deleted0, frozen[kind])
            if kind in unreadable:
                results[kind] = Result({}, {}, base0, dropped0)
                continue
            live, mem_stamps = self._records(kind, items, to_record)
            memory, base, dropped = memory_view(live, deleted0, base0, dropped0)
            held = frozen[kind]
            if kind in cut:
                held = set(held) | set(memory) | set(parsed[kind]) | set(base) | set(dropped)
            results[kind] = reconcile(memory, parsed[kind], base, now, dropped, held, mem_stamps,
                                      disk_stamps[kind])
            fresh = {k for k in frozen[kind] if k in live} - self._held_logged[kind]
            if fresh:  # counted, not named: an id may itself be the secret
                self._held_logged[kind] |= fresh
                log.warning("%s: %d %s(s) holding a credential are never written there (kgd doctor lists them)",
                            self.dir, len(fresh), kind)
        return results, snap

    def _apply(self, store, w, results, snap, unreadable=(), forget=False):
        """Phase 1 (lock held): what the disk brought, into memory, with the sync state of every
        key not waiting to be written; one journal record."""
        g = self.durable.graph
        rec = {"op": "shared", "nodes": [], "drop_nodes": [], "edges": [], "drop_edges": [], "meta": {}}
        events = []
        for nid, r in sorted(results["node"].memory.items()):
            old = g.nodes.get(nid)
            if r is None:
                if old is not None:
                    rec["drop_nodes"].append(nid)
                    events.append(("node_deleted", {"id": nid, "edges_removed": []}))
                continue
            node = dict(old) if old is not None else {"_read_ts": None}
            node.update(kg_format.node_fields(r))
            rec["nodes"].append(node)
            self.held["node"][nid] = (node, node["_write_ts"], r,
                                      _stamp_of(results["node"], nid, r, snap["node"][3]))
            events.append(("node_put", {"node": model.public_node(node)}))
        for key, r in sorted(results["edge"].memory.items()):
            old = g.edges.get(key)
            if r is None:
                if old is not None:
                    rec["drop_edges"].append(key)
                    events.append(("edge_deleted", {"edge": model.public_edge(old)}))
                continue
            edge = dict(old) if old is not None else {}
            edge.update(kg_format.edge_fields(r))
            rec["edges"].append(edge)
            self.held["edge"][key] = (edge, edge["_write_ts"], r,
                                      _stamp_of(results["edge"], key, r, snap["edge"][3]))
            events.append(("edge_put", {"edge": model.public_edge(edge)}))
        for kind in FILES:
            r, (base0, dropped0, deleted0, _) = results[kind], snap[kind]
            base = {k: r.base.get(k) for k in set(base0) | set(r.base) if k not in r.disk}
            _diff_into(rec["meta"], "base", kind, base0, base)
            _diff_into(rec["meta"], "dropped", kind, dropped0, r.dropped, full=True)
            if forget and base0:
                _diff_into(rec["meta"], "base", kind, base0, {k: None for k in base0})
            gone = {k: None for k in deleted0 if k not in r.disk and kind not in unreadable}
            if gone:
                rec["meta"].setdefault("deleted", {})[kind] = gone
        if forget and rec["meta"].get("base"):
            log.warning("%s was deleted in place (not by a checkout): kgd keeps its knowledge and does not "
                        "recreate it; `kgd share` writes it again", self.dir)
        content = any(rec[k] for k in ("nodes", "drop_nodes", "edges", "drop_edges"))
        if not content and not rec["meta"]:
            return
        for k in [k for k in ("nodes", "drop_nodes", "edges", "drop_edges", "meta") if not rec[k]]:
            del rec[k]
        store.writes.change(w, self.durable, [rec], lambda g: team_state.apply(g, rec), lambda _: events,
                            counted=False, compact=content)
        if content:
            log.info("%s: took %d node(s) and %d edge(s), %d node(s) and %d edge(s) left this view", self.dir,
                     len(rec.get("nodes", ())), len(rec.get("edges", ())), len(rec.get("drop_nodes", ())),
                     len(rec.get("drop_edges", ())))

    def _written(self, store, results, snap):
        """Phase 2, once the files hold what memory brought: the base of the written keys, and
        the explicit deletes now written as tombstones."""
        lenient = (logging.ERROR, "the sync state of %s not saved (it is rebuilt at the next sync)" % self.dir)
        with store.writes.writing(None, lenient=lenient) as w:
            g = self.durable.graph
            s = team_state.state(g.meta)
            meta = {}
            for kind in FILES:
                r, deleted0 = results[kind], snap[kind][2]
                if not r.disk:
                    continue
                meta.setdefault("base", {})[kind] = {k: r.base.get(k) for k in r.disk}
                done = {k: None for k in r.disk if k in deleted0 and s["deleted"][kind].get(k) == deleted0[k]}
                if done:
                    meta.setdefault("deleted", {})[kind] = done
            rec = {"op": "shared", "meta": meta}
            store.writes.change(w, self.durable, [rec], lambda g: team_state.apply(g, rec), counted=False,
                                compact=False)


def _stamp_of(result, key, rec, frozen):
    """The stamp of a record taken into memory: the new base's, unless the key is held back
    (its base stays the old one)."""
    stamp = result.base.get(key)
    return stamp if stamp is not None and key not in frozen else kg_format.stamp(rec)


def _diff_into(meta, section, kind, old, new, full=False):
    """Add to a meta patch the keys whose value differs between old and new (None: removed).
    Without `full`, only keys present in `new` are compared (new holds None for removals)."""
    keys = set(old) | set(new) if full else set(new)
    changes = {k: new.get(k) for k in keys if new.get(k) != old.get(k)}
    if changes:
        meta.setdefault(section, {})[kind] = changes
