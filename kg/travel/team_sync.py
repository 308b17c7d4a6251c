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
- The base is recorded only for what the files hold: a kind left unwritten (git not asked) keeps its old base.
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
import secrets
import threading
import time

from ..core import kg_format, model, team_state
from ..core.reconcile import Result, memory_view, past_seen, reconcile, seen_tomb
from . import team_folder
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

RETRIES, SETTLE_S = 3, 0.1  # reconciles in a row when the files keep changing under a sync; a pause


def held_back(g):
    """Keys never written to `.kg/`: nodes and edges holding a credential (the graph's scan,
    kg/secrets/kinds.py, flags them), private nodes (`"private": true`) and the knowledge this person
    had before `.kg/` arrived, not published yet (contract 9), and the edges touching such a node
    (its id may be the secret)."""
    nodes = set(getattr(g, "flagged", ())) | {nid for nid, n in g.nodes.items()
                                              if n.get("_private") or n.get("_unpublished")}
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
        self.paths = paths_of(self.root)  # the two base files
        self.files = team_folder.layout_files(self.root)  # every file read, by kind
        team_folder.sweep_temp(self.root)  # what a write killed mid-way left, once old
        self.index_lock = os.path.join(git_dir(self.root), "index.lock")
        self.seen = {kind: None for kind in FILES}  # file states as kgd last read or wrote them
        self.tracked, self.tracked_index = None, False  # paths git tracks, and the index state they are of
        self.author = None  # git's user.name here: who this clone's knowledge is by
        self.unwritten = False  # a sync had memory's changes to write but could not ask git yet
        self.new_clone = False  # clone() named this clone: the name goes into the next journal record
        self.problems = []  # what the last read could not load
        self._reported = {}  # kind -> file state whose problems were logged
        self.lock = threading.Lock()  # one sync at a time per project
        self.readers = {}  # path -> Reader: each file re-read only where its lines changed
        self.held = {kind: {} for kind in FILES}  # key -> (object, _write_ts, record, stamp) from memory
        self._held_logged = {kind: set() for kind in FILES}  # keys held back for a credential, logged
        self.syncs = self.pickups = 0
        self.last_error = None
        self.head_with_kg = None  # head_signature() when .kg/ was last seen here
        self.pending = None  # read_parsed() done before the store's lock, for the first sync

    # ---- polling

    def states(self):
        """Per kind, the state of every file of that kind (a new file under changes/ is a change)."""
        self.files = team_folder.layout_files(self.root)
        return {kind: tuple((p, file_state(p)) for p in paths) for kind, paths in self.files.items()}

    def refresh_git(self, may_run):
        """Ask git which files it tracks (and who writes here) when its index changed since the
        last answer; False when the answer is stale and git may not run now (the store's lock)."""
        state = team_folder.index_state(self.root)
        if state == self.tracked_index:
            return True
        if not may_run:
            return False
        self.tracked = team_folder.tracked(self.root)
        if self.author is None:
            self.author = team_folder.author(self.root)
        self.tracked_index = state
        return True

    def is_tracked(self, path):
        return self.tracked is not None and path in self.tracked

    def changed_on_disk(self):
        return self.states() != self.seen

    def busy(self, now):
        """Seconds a background sync should wait: 0 when free, a moment while a file changed by
        someone else is under SETTLE_S old (maybe still being written), None while git is
        updating the checkout (its index.lock exists: try at the next beat)."""
        if os.path.exists(self.index_lock):
            return None
        seen = {p: st for kind in FILES for p, st in (self.seen[kind] or ())}
        ages = [now - st[0] / 1e9 for files in self.states().values() for p, st in files
                if st is not None and st != seen.get(p)]
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
        """(states, {kind: {path: bytes or None}}, problems, kinds that could not be read) read
        while the files held still."""
        for _ in range(RETRIES):
            before = self.states()
            datas, problems, unreadable = {}, [], set()
            for kind, files in before.items():
                datas[kind] = {}
                for path, _ in files:
                    datas[kind][path], problem = read_file(path) if real_dir(self.dir) else (None, None)
                    if problem:
                        problems.append(problem)
                        unreadable.add(kind)
            if self.states() == before:
                break
        return before, datas, problems, unreadable

    def read_parsed(self, now=None):
        """(states, datas, parsed, stamps, problems, unreadable, cut, by_file): the files read and
        parsed, every file of a kind merged into one view (`parsed`; `datas` and `by_file` keep
        each file's bytes and records); `now` clamps future times (kg_format.merge_versions).
        Needs no lock but this Shared's own (a first load does it before the store's lock)."""
        now = time.time() if now is None else now
        states, datas, problems, unreadable = self._read()
        parsed, disk_stamps, cut, by_file = {}, {}, set(), {}
        readers = {}
        for kind, files in datas.items():
            view, stamps, versions = {}, {}, {}
            for path, data in files.items():
                reader = self.readers.get(path) or kg_format.Reader(kind)
                readers[path] = reader
                recs, found, st = reader.parse(data, now)
                by_file[path] = recs
                problems.extend(found if path == self.paths[kind] else
                                [os.path.join(team_folder.CHANGES_DIR, os.path.basename(path)) + ": " + f
                                 for f in found])
                if reader.cut:
                    cut.add(kind)
                for key, rec in recs.items():
                    if key in view:
                        versions.setdefault(key, [view[key]]).append(rec)
                    else:
                        view[key], stamps[key] = rec, st.get(key)
            for key, recs in versions.items():
                view[key] = kg_format.merge_versions(recs, now)
                stamps.pop(key, None)
            parsed[kind], disk_stamps[kind] = view, {k: v for k, v in stamps.items() if v}
        self.readers = readers
        return states, datas, parsed, disk_stamps, problems, unreadable, cut, by_file

    def _sync_once(self, store, force):
        pre, self.pending = self.pending, None
        if pre is None or pre[0] != self.states():
            pre = self.read_parsed(store.clock())
        states, datas, parsed, disk_stamps, problems, unreadable, cut, by_file = pre
        may_run = not store.lock._is_owned()  # git never runs under the store's lock
        git_fresh = self.refresh_git(may_run)
        lost, forget_own, known = self._lost(self.durable.graph, states, may_run)
        git_fresh = git_fresh and known
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
            results, snap = self._reconcile(g, parsed, disk_stamps, now, unreadable, cut, lost)
            self._apply(store, w, results, snap, unreadable, forget, forget_own)
        outs, synced = {}, set()  # synced: the kinds whose files hold memory's changes once written
        for kind in FILES:
            r = results[kind]
            if kind in cut or not (r.disk or force):
                continue
            if not git_fresh:  # which files git tracks is unknown: written at the next beat
                self.unwritten = True
                continue
            target, n = self._target(g, kind)
            recs = dict(by_file.get(target) or {})
            recs.update(r.disk)
            data = kg_format.render(recs, now)
            if not data and not os.path.lexists(target) and os.path.dirname(target) != self.dir:
                continue  # nothing to say in a new file of changes/ (`kgd share` on a committed .kg/)
            if force or data != (datas[kind].get(target) or b""):
                outs[kind] = (target, data, n)
            synced.add(kind)
        if git_fresh:
            self.unwritten = False
        if not any(results[kind].disk for kind in FILES) and not outs:
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
            for kind, (target, data, _) in outs.items():
                if os.path.dirname(target) != self.dir:
                    team_folder.ensure_changes_dir(self.root)
                write_repo_file(target, data)
        except OSError as exc:
            self.last_error = "could not write %s: %s" % (self.dir, exc.strerror or exc)
            log.error("%s; the changes stay in kgd and are written at the next pause", self.last_error)
            return True
        self.last_error = None
        self.seen = self.states()
        self._written(store, results, snap, {kind: (t, n) for kind, (t, _, n) in outs.items()}, synced)
        return True

    def _target(self, g, kind):
        """(path, n): where memory's changes of `kind` go (team_folder.target)."""
        if not self.is_tracked(self.paths[kind]):
            return self.paths[kind], None
        return team_folder.target(self.root, self.clone(g), team_state.number(g.meta, kind), kind, self.is_tracked)

    def clone(self, g):
        """This clone's random name for its files under changes/ (kept in the graph's sync state)."""
        s = team_state.state(g.meta)
        if not s.get("clone"):
            s["clone"] = secrets.token_hex(8)  # journalled with the next sync state written
            self.new_clone = True
        return s["clone"]

    def _lost(self, g, states, may_run):
        """team_folder.lost for what this clone wrote to files git did not track (`own`)."""
        if not real_dir(self.dir):
            return {k: {} for k in FILES}, {k: {} for k in FILES}, True  # a branch without .kg/, or rm -rf
        present = {p for files in states.values() for p, st in files if st is not None}
        return team_folder.lost(self.root, team_state.state(g.meta)["own"], present, may_run, self.is_tracked)

    def _report(self, states, problems):
        self.problems = problems
        if problems and self._reported.get("files") != states:
            self._reported["files"] = states
            log.warning("%s: %d problem(s), skipped: %s", self.dir, len(problems), "; ".join(problems[:5]))

    def _records(self, g, kind, items, to_record, base, disk, disk_stamps, patches):
        """The shared records of what memory holds, and their stamps; a node or edge object
        seen before (same object, same write time) costs a lookup. One this person changed
        (its record differs from its base and from the files') is written as this clone's: its
        vector gains this clone's entry (kg_format.merge_versions), a node its author (git's
        user.name). One that equals its base or the files' (taken from there) stays as it is."""
        held, fresh, live, stamps = self.held[kind], {}, {}, {}
        for key, obj in items:
            hit = held.get(key)
            if hit is None or hit[0] is not obj or hit[1] != obj.get("_write_ts"):
                rec = to_record(obj)
                st = kg_format.stamp(rec)
                known = {base.get(key)}
                if key in disk:
                    known.add(disk_stamps.get(key) or kg_format.stamp(disk[key]))
                if st not in known:  # not as taken from the files
                    rec = self._own_record(g, kind, obj)
                    st = kg_format.stamp(rec)
                    if st not in known:  # not as this clone wrote it either: a change made here
                        obj = self._after_seen(obj, disk.get(key), g, kind, key, patches)
                        rec = self._own_record(g, kind, obj)
                        st = kg_format.stamp(rec)
                hit = (obj, obj.get("_write_ts"), rec, st)
            fresh[key] = hit
            live[key], stamps[key] = hit[2], hit[3]
        self.held[kind] = fresh
        return live, stamps

    def _own_record(self, g, kind, obj):
        clone = self.clone(g)
        if kind == "node":
            return kg_format.node_record(obj, self.author, clone)
        return kg_format.edge_record(obj, clone)

    def _after_seen(self, obj, d, g, kind, key, patches):
        """reconcile.past_seen for a change made here; a moved version is kept in memory too
        (`patches`, journalled by _apply) so its record stays the same at every later sync."""
        moved = past_seen(obj, d, kg_format.vector(self._own_record(g, kind, obj)))
        if moved is not obj:
            patches[kind][key] = moved
        return moved

    def _reconcile(self, g, parsed, disk_stamps, now, unreadable=(), cut=(), lost=None):
        """Per kind the reconcile Result, and the snapshot of the sync state it started from. A
        kind whose file could not be read (a FIFO, a symlink, a folder, over the size limit) is
        neither reconciled nor written: it is unknown, not empty, so nothing leaves the view and
        nothing kgd could not read is overwritten; memory's changes wait until it is fixed. A
        kind whose file was `cut` is reconciled with every key held back: read, never written."""
        s = team_state.state(g.meta)
        results, snap, patches = {}, {}, {"node": {}, "edge": {}}
        frozen = held_back(g)
        for kind, items, to_record in (("node", g.nodes.items(), kg_format.node_record),
                                       ("edge", g.edges.items(), kg_format.edge_record)):
            base0, dropped0, deleted0 = (dict(s[sec][kind]) for sec in ("base", "dropped", "deleted"))
            snap[kind] = (base0, dropped0, deleted0, frozen[kind])
            snap["parsed"] = parsed
            if kind in unreadable:
                results[kind] = Result({}, {}, base0, dropped0)
                continue
            live, mem_stamps = self._records(g, kind, items, to_record, base0, parsed[kind], disk_stamps[kind],
                                             patches)
            gone = (lost or {}).get(kind, {})
            deleted = dict({k: t for k, t in gone.items() if t is not None and k not in live}, **deleted0)
            memory, base, dropped = memory_view(live, deleted, base0, dropped0)
            for key in [k for k, r in memory.items() if k not in live]:  # the explicit deletes
                memory[key] = seen_tomb(memory[key], parsed[kind].get(key), base0.get(key), self.clone(g))
            for key in gone:
                base.pop(key, None)  # never based: memory's version is written again
            held = frozen[kind]
            if kind in cut:
                held = set(held) | set(memory) | set(parsed[kind]) | set(base) | set(dropped)
            results[kind] = reconcile(memory, parsed[kind], base, now, dropped, held, mem_stamps,
                                      disk_stamps[kind])
            secret = getattr(g, "flagged" if kind == "node" else "flagged_edges", ())  # not private ones
            fresh = {k for k in frozen[kind] if k in live and k in secret} - self._held_logged[kind]
            if fresh:  # counted, not named: an id may itself be the secret
                self._held_logged[kind] |= fresh
                log.warning("%s: %d %s(s) holding a credential are never written there (kgd doctor lists them)",
                            self.dir, len(fresh), kind)
        snap["patches"] = patches
        return results, snap

    def _apply(self, store, w, results, snap, unreadable=(), forget=False, forget_own=None):
        """Phase 1 (lock held): what the disk brought, into memory, with the sync state of every
        key not waiting to be written; one journal record."""
        g = self.durable.graph
        rec = {"op": "shared", "nodes": [], "drop_nodes": [], "edges": [], "drop_edges": [], "meta": {}}
        events = []
        for kind, objs in snap.get("patches", {}).items():  # versions moved past what was seen
            for key, obj in sorted(objs.items()):
                if key in (results[kind].memory):
                    continue
                rec["nodes" if kind == "node" else "edges"].append(obj)
        for nid, r in sorted(results["node"].memory.items()):
            old = g.nodes.get(nid)
            if r is None:
                if old is not None:
                    rec["drop_nodes"].append(nid)
                    # a teammate's delete (a tombstone) or knowledge that left with the checkout
                    d = snap["parsed"]["node"].get(nid)
                    left = d is None or not kg_format.is_tombstone(d)
                    events.append(("node_deleted", {"id": nid, "edges_removed": [], "via": "repository",
                                                    "left": left}))
                continue
            node = dict(old) if old is not None else {"_read_ts": None}
            node.update(kg_format.node_fields(r))
            rec["nodes"].append(node)
            self.held["node"][nid] = (node, node["_write_ts"], r,
                                      _stamp_of(results["node"], nid, r, snap["node"][3]))
            events.append(("node_put", {"node": model.public_node(node), "via": "repository"}))
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
            if (forget_own or {}).get(kind):
                rec["meta"].setdefault("own", {})[kind] = dict(forget_own[kind])
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

    def _written(self, store, results, snap, targets, synced):
        """Phase 2, once the files hold what memory brought: the base of the written keys, the
        explicit deletes now written as tombstones, and which keys live in files git does not
        track yet (`own`; keys a tracked file now holds leave it). Only the kinds in `synced`
        (written, or the file already held them): a kind held back (git could not be asked, a
        cut file) was not written, and a base claiming it was would drop those changes from
        memory at the next sync as if they had left with a branch."""
        lenient = (logging.ERROR, "the sync state of %s not saved (it is rebuilt at the next sync)" % self.dir)
        with store.writes.writing(None, lenient=lenient) as w:
            g = self.durable.graph
            s = team_state.state(g.meta)
            meta = {}
            for kind in FILES:
                r, deleted0 = results[kind], snap[kind][2]
                if not r.disk or kind not in synced:
                    continue
                meta.setdefault("base", {})[kind] = {k: r.base.get(k) for k in r.disk}
                done = {k: None for k in r.disk if k in deleted0 and s["deleted"][kind].get(k) == deleted0[k]}
                if done:
                    meta.setdefault("deleted", {})[kind] = done
                if kind in targets:  # a file git did not track (kgd writes no other)
                    name, n = os.path.basename(targets[kind][0]), targets[kind][1]
                    meta.setdefault("own", {})[kind] = {k: team_state.own_entry(name, rec)
                                                        for k, rec in r.disk.items()}
                    if n is not None:
                        meta.setdefault("n", {})[kind] = n
            if self.new_clone:
                meta["clone"], self.new_clone = s["clone"], False
            if not meta:
                return
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
