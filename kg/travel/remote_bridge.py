"""Knowledge between the store and the sync working tree ROOT/sync/ (contract section 9, personal
remote). Each graph's folder there is treated exactly like a `.kg/`: the same files, the same merge
rule and the same three-way reconcile (kg/core/kg_format.py, kg/core/reconcile.py), with its own base
(kg/travel/remote_mirror.py: each graph's folder, base and records).

Rules owned here:
- Content: `nodes.jsonl`, `edges.jsonl` (kg/core/kg_format.py). Personal state: `personal.jsonl` (personal.py's
  lines and rule: the later read wins, the later state change wins) and `progress.jsonl` (kg_progress's
  tasks, kg/travel/remote_progress.py: the later change wins), that one after the graph's pass.
- Unlike a `.kg/` (where a branch switch takes lines away), only a tombstone removes knowledge
  here: a line missing from the file is written again from memory.
- A pass costs what changed, not the graph's size: it reconciles only the keys the graph's
  tracker saw change (kg/core/graph.py Changes) while the folder's files are as kgd last wrote them;
  every key is compared when a graph is met first or recounted, when the files moved (a merge,
  an edit) and on a pickup. Once an hour an audit compares memory with what the passes saw and
  logs (and syncs) any change made around the tracker.
- The base a pass leaves is on disk before the lock is released: the graph is folded with it
  (the journal holds no record for a base), so a write acknowledged after the pass is never
  reconciled, after a crash, against an older base. A pass that changes nothing folds nothing.
- The store's lock is held only to take a graph's dicts (not their nodes), to apply what the
  folder brought and to fold; nodes are copied, files read, merged and written outside it. A key that changed
  in memory meanwhile is left for the next pass. What the folder brings goes through the store's
  one write path (kg_sync, the live feed and compaction see it as another session's change); a
  change of personal state only (another machine's read, archive, orphaning) reaches the live feed
  and not kg_sync: it is no news for a session's context.
- Nothing holding a credential is written here: a node or edge the secrets gate flagged
  (Graph.flagged, kg/secrets/kinds.py) is skipped and logged once, its base left as it was, and its
  personal line left out.
- Files are written (kg/travel/remote_files.py: atomically, 0600) only when their bytes change; a file
  read again (a pull changed it) is parsed only where its lines differ from what kgd last wrote.
"""

import logging
import os
import threading
import time

from ..core import kg_format, personal
from ..core.reconcile import reconcile
from ..memory import foreground, identities, repo_id
from .remote_files import SyncFiles, stat
from .remote_mirror import (
    META,
    PENDING,
    PROJECTS_DIR,
    Mirror,
    confirmed,
    content_record,
    events,
    folder_of,
    hold_back,
    is_shared,
    keep_old,
    personal_signature,
    signature,
    sync_base,
    sync_pending,
)
from .remote_progress import ProgressSync

log = logging.getLogger(__name__)


class Bridge:
    """Reconciles the store's graphs with their folders under `sync_root` (ROOT/sync/)."""

    AUDIT_EVERY = 3600.0  # memory checked against what the passes saw (_audit) at least this often

    def __init__(self, store, sync_root, clock=time.time):
        self.store = store
        self.sync_root = sync_root
        self.clock = clock
        self.mirrors = {}  # id(durable) -> Mirror (None: a graph with no identity yet)
        self.problems_logged = set()
        self.lock = threading.Lock()  # one pass at a time (the worker's thread, a test)
        self.disk = SyncFiles(self._report)  # the folder's files as kgd last wrote or read them
        self.untracked = 0  # changes only an audit found (should stay 0)
        self.progress = ProgressSync(store, sync_root, clock)  # kg_progress's tasks: progress.jsonl

    # ------------------------------------------------------------ what the worker calls

    def export(self, full=False):
        """Reconcile the graphs that changed (full: every graph, loading those not opened yet)."""
        with self.lock:
            for durable in self._durables(load_all=full):
                self.sync_graph(durable, force=False)
                self.progress.sync(durable, self._rel(durable), force=False)

    def pickup(self, changed_paths):
        """The remote brought these files (paths relative to ROOT/sync/): reconcile their graphs."""
        folders = {"/".join(p.split("/")[:2]) if p.startswith(PROJECTS_DIR + "/") else p.split("/")[0]
                   for p in changed_paths}
        with self.lock:
            for durable in self._durables(load_all=True):
                if folder_of(durable.graph) in folders:
                    self.sync_graph(durable, force=True)
                    self.progress.sync(durable, self._rel(durable), force=True)

    def unseen(self):
        """True when a loaded graph has not been reconciled yet (cheap: counts)."""
        return len(self.store.registry.projects) + 1 > len(self.mirrors)

    def _durables(self, load_all):
        if load_all:
            self.store.all_project_graphs()  # a graph never opened since start may hold news
        with self.store.lock:
            durables = list(self.store.registry.durables())
        live = {id(d) for d in durables}
        self.progress.keep(durables)
        for gone in [k for k in self.mirrors if k not in live]:  # a graph the store let go
            m = self.mirrors.pop(gone)
            if m is not None:
                m.drop()
                if not any(o is not None and o.rel == m.rel for o in self.mirrors.values()):
                    self.disk.forget(os.path.join(self.sync_root, *m.rel.split("/")))
        return durables

    def close(self):
        """Forget every graph (the remote is off or changes): trackers detached, caches dropped,
        so nothing is collected meanwhile; the next pass compares every key."""
        with self.lock:
            for m in self.mirrors.values():
                if m is not None:
                    m.drop()
            self.mirrors.clear()
            self.disk.forget()
            self.progress.close()

    def _rel(self, durable):
        with self.store.lock:
            return folder_of(durable.graph)

    # ------------------------------------------------------------ one graph

    @staticmethod
    def _paths(folder, shared):
        """The files of the folder a pass reads (a shared project's: personal.jsonl only)."""
        names = (personal.FILE,) if shared else (kg_format.NODES_FILE, kg_format.EDGES_FILE, personal.FILE)
        return [os.path.join(folder, name) for name in names]

    def _files_moved(self, m, folder, shared):
        """True when a file of the folder is not as this graph's last pass left it (git, a
        person, or another graph with the same folder: worktrees of one shared repository)."""
        return m is None or any(m.stats.get(path, False) != stat(path) for path in self._paths(folder, shared))

    def sync_graph(self, durable, force=True):
        """One graph with its folder, both ways. Returns the number of changes taken into memory.

        Only the keys the graph's tracker saw change are reconciled; every key is, for a graph
        met for the first time or recounted, when the folder's files moved since its last pass
        (a merge, an edit, another graph with the same folder) and when `force`d. Every
        AUDIT_EVERY seconds memory is checked against what the passes saw (_audit)."""
        self._ensure_identity(durable)
        identities.carry_over(os.path.join(self.sync_root, PROJECTS_DIR), durable.graph.meta.get("repo_id"),
                              self.store.registry.identities.holds)  # an earlier identity's folder folded in
        now = self.clock()
        with self.store.lock:
            rel, shared = folder_of(durable.graph), is_shared(durable.graph)
            m = self.mirrors.get(id(durable))
        folder = os.path.join(self.sync_root, *rel.split("/")) if rel is not None else None
        moved = folder is not None and self._files_moved(m, folder, shared)
        with self.store.lock:
            g = durable.graph
            rel = folder_of(g)
            if rel is None:
                self.mirrors[id(durable)] = None
                return 0
            m = self.mirrors.get(id(durable))
            if m is None or not m.current(g, rel):
                if m is not None:
                    m.drop()
                m = self.mirrors[id(durable)] = Mirror(g, rel, is_shared(g), now)
                moved = True
        if now - m.audited_at >= self.AUDIT_EVERY:
            self._audit(m, now)
        with self.store.lock:  # only dicts are taken here: nothing grows with the graph
            if durable.graph is not g:
                return 0  # reloaded meanwhile: the next pass starts over
            touched_nodes, touched_edges, everything = m.tracker.take()
            full = force or moved or everything or m.redo
            if not full and not touched_nodes and not touched_edges:
                return 0
            m.redo = False
            if full:
                node_refs, edge_refs = dict(g.nodes), dict(g.edges)
            else:
                node_refs = {k: g.nodes[k] for k in touched_nodes if k in g.nodes}
                edge_refs = {k: g.edges[k] for k in touched_edges if k in g.edges}
            base, pending = sync_base(g.meta), sync_pending(g.meta)
            flagged = {"node": set(g.flagged), "edge": set(g.flagged_edges)}  # the secrets gate's findings
        folder = os.path.join(self.sync_root, *rel.split("/"))
        examine = None if full else {"node": touched_nodes, "edge": touched_edges}
        foreground.give_way()  # each step of a pass waits while a request is being served
        try:
            # Each node is copied whole (one C call, atomic under the GIL) outside the lock; a key
            # written meanwhile is found changed when the result is applied, and left for later.
            nodes = {k: dict(n) for k, n in node_refs.items()}
            edges = {k: dict(e) for k, e in edge_refs.items()}
            taken, new_base, writes, written = self._files(folder, rel, nodes, edges, base, pending, m, now,
                                                           flagged, examine)
            foreground.give_way()
            # _apply may put a key's old base back: never into the graph's own dicts
            new_base = {k: dict(v) for k, v in new_base.items()}
            applied = self._apply(durable, g, nodes, edges, taken, new_base, written)
            if applied is None:  # reloaded meanwhile, or the base could not reach the disk
                with self.store.lock:
                    m.tracker.all = True  # nothing written: the next pass starts over, whole
                return 0
            for path, out, parsed, stamps in writes:
                foreground.give_way()
                self.disk.write(path, out, parsed, stamps)
            with self.store.lock:  # the folder holds them now: memory's base says so (saved at the next fold)
                if durable.graph is g and g.meta.get(PENDING) is not None:
                    g.meta[META] = new_base
                    del g.meta[PENDING]
            for path in self._paths(folder, m.shared):
                hit = self.disk.known(path)
                m.stats[path] = hit[0] if hit is not None else None
            return applied
        except BaseException:
            with self.store.lock:
                m.tracker.all = True  # what this pass took is looked at again, whole
            raise

    def _audit(self, m, now):
        """Memory against what the passes saw, key by key (O(graph), outside the store's lock, once
        per AUDIT_EVERY): a change made around Graph.refresh, which the tracker cannot see, is
        logged and handed to the tracker, so it still travels."""
        m.audited_at = now
        g = m.graph
        with self.store.lock:
            node_refs, edge_refs = dict(g.nodes), dict(g.edges)
            flagged = set(g.flagged)
        recs, mine = m.recs, m.mine
        missed_nodes = {k for k, n in node_refs.items()
                        if k not in flagged and (k not in mine or mine[k][0] != personal_signature(n))}
        missed_nodes.update(k for k in mine if k not in node_refs)
        missed_edges = set()
        if not m.shared:  # a shared project's content is not mirrored here (kg/travel/team.py)
            missed_nodes.update(k for k, n in node_refs.items()
                                if k not in recs["node"] or recs["node"][k][0] != signature("node", n))
            missed_nodes.update(k for k in recs["node"] if k not in node_refs)
            missed_edges = {k for k, e in edge_refs.items()
                            if k not in recs["edge"] or recs["edge"][k][0] != signature("edge", e)}
            missed_edges.update(k for k in recs["edge"] if k not in edge_refs)
        with self.store.lock:
            missed_nodes -= m.tracker.nodes  # changed since the last pass, and told
            missed_edges -= m.tracker.edges
            if m.tracker.all or not (missed_nodes or missed_edges):
                return
            m.tracker.nodes |= missed_nodes
            m.tracker.edges |= missed_edges
        self.untracked += len(missed_nodes) + len(missed_edges)
        log.warning("remote sync: %d change(s) of %s reached memory around Graph.refresh (first: %r); "
                    "synced now", len(missed_nodes) + len(missed_edges), m.rel,
                    sorted(missed_nodes or missed_edges)[0][:100])

    def _files(self, folder, rel, nodes, edges, base, pending, m, now, flagged, examine):
        """Reconcile the snapshot with the folder's files: what memory must take ({"node": {key:
        rec or None}, "edge": ..., "personal": {id: rec}}), the new base, the files to write
        [(path, bytes, records, stamps)] and the content keys written ({"node": set, "edge": set}).
        `examine` None: every key; else the only keys that can have changed."""
        taken = {"node": {}, "edge": {}, "personal": {}}
        new_base = {"node": base["node"], "edge": base["edge"], "personal": base["personal"]}
        writes = []
        written = {"node": set(), "edge": set()}
        node_disk = {}
        secret_ids = set()
        if not m.shared:
            for kind, name, items in (("node", kg_format.NODES_FILE, nodes), ("edge", kg_format.EDGES_FILE, edges)):
                path = os.path.join(folder, name)
                keys = None if examine is None else examine[kind]
                foreground.give_way()
                taken[kind], new_base[kind], out, disk, written[kind], stamps = self._content(
                    path, rel, kind, items, base[kind], pending[kind], now, m, flagged[kind], keys)
                if out is not None:
                    writes.append((path, out, disk, stamps))
                if kind == "node":
                    node_disk = disk
        secret_ids.update(flagged["node"])  # not even a shared project's personal line names them
        foreground.give_way()
        mine = self._personal(m, nodes, base["personal"], now, secret_ids, None if examine is None else examine["node"])
        path = os.path.join(folder, personal.FILE)
        disk, unclean, reread = self.disk.read(path, rel, "personal")
        if reread and examine is not None:
            m.redo = True  # changed after this pass looked: the next pass compares every key
        p_base = base["personal"]
        whole = examine is None or unclean or len(p_base) != len(disk)
        if whole and examine is not None:
            m.redo = True  # lines for nodes outside this pass's snapshot may wait: the next pass sees all
        ids = mine if whole else examine["node"]
        moved = {k: mine[k] for k in ids if k in mine and disk.get(k) != mine[k]}
        tombstoned = {k for k in (node_disk if whole else ids) if kg_format.is_tombstone(node_disk.get(k) or {})}
        gone = [k for k in tombstoned if k in disk and k not in mine]
        arriving = [k for k, r in taken["node"].items() if r is not None and k not in mine and k in disk]
        _, to_memory, _ = personal.reconcile(moved, {k: disk[k] for k in list(moved) + arriving if k in disk})
        merged = disk
        changed = None
        if whole and (moved or gone or unclean or len(p_base) != len(disk)):
            merged, _, p_base = personal.reconcile(mine, disk, drop=tombstoned)
        elif moved or gone:
            merged, p_base = personal.update(disk, p_base, moved, gone)
            changed = set(moved).union(gone)
        if unclean or merged is not disk and merged != disk:
            writes.append((path, self.disk.render(path, merged, changed, None, disk), merged, None))
        taken["personal"] = to_memory
        new_base["personal"] = p_base
        return taken, new_base, writes, written

    def _content(self, path, rel, kind, items, base, pending, now, m, flagged, examine):
        """One content file: only the keys that moved on either side since the base are
        reconciled (memory's records and the file's parse are cached; `examine`, when given,
        names the only keys that can have moved). -> (to memory, new base, bytes to write or
        None, the file's records after the write, the keys written, their stamps)."""
        mem, mem_stamps = self._records(m, kind, items, examine)
        disk, unclean, reread = self.disk.read(path, rel, kind)
        if reread and examine is not None:
            m.redo = True  # changed after this pass looked: the next pass compares every key
        disk_stamps = self.disk.stamps(path, disk)
        if pending:  # a pass stopped (a crash) between its fold and its files: what the folder holds counts
            base = confirmed(base, pending, disk_stamps)
        if examine is None:
            keys = {k for k, st in mem_stamps.items() if base.get(k) != st}
            keys.update(k for k, st in disk_stamps.items() if base.get(k) != st)
            keys.update(k for k in base if k not in mem_stamps or k not in disk_stamps)
        else:
            keys = examine
        sub_mem = {k: mem[k] for k in keys if k in mem}
        # Only a tombstone removes knowledge here: a line missing from the file (a folder made
        # afresh, a project whose identity changed, a file cut short) is written again.
        sub_base = {k: base[k] for k in keys if k in base and k in disk}
        frozen = sorted(k for k in sub_mem if k in flagged)  # a credential is never written here
        self._log_frozen(rel, kind, frozen)
        result = reconcile(sub_mem, {k: disk[k] for k in keys if k in disk}, sub_base, now, None, frozen)
        new_base = dict(base)
        for k in keys:
            new_base.pop(k, None)
        new_base.update(result.base)
        if not result.disk and not unclean:
            return result.memory, new_base, None, disk, set(), disk_stamps
        merged = dict(disk)
        merged.update(result.disk)
        foreground.give_way()
        out = self.disk.render(path, merged, result.disk.keys(), now, disk)
        stamps = dict(disk_stamps)
        for k, r in result.disk.items():
            if kg_format.is_tombstone(r):
                stamps.pop(k, None)
            else:
                stamps[k] = kg_format.stamp(r)
        return result.memory, new_base, out, merged, set(result.disk), stamps

    def _personal(self, m, nodes, base, now, skip, examine=None):
        """Memory's personal lines ({node id: line}), made again only for nodes whose read time or
        state moved (`examine`, when given: the only nodes that can have moved)."""
        if examine is None:
            old, m.mine, m.lines = m.mine, {}, {}
            ids = nodes
        else:
            old, ids = m.mine, examine
        for k in ids:
            n = nodes.get(k)
            if n is None or k in skip:
                m.mine.pop(k, None)
                m.lines.pop(k, None)
                continue
            sig = personal_signature(n)
            b = base.get(k)
            hit = old.get(k)
            if hit is None or hit[0] != sig or hit[1] != b:
                hit = (sig, b, personal.record(n, b, now))
            m.mine[k] = hit
            m.lines[k] = hit[2]
        return m.lines

    def _records(self, m, kind, items, examine=None):
        """Memory's records and their stamps, recomputed only for what changed since the last pass
        (`examine`, when given: the only keys that can have changed)."""
        cache = m.recs[kind]
        if examine is None:
            fresh, recs, stamps = {}, {}, {}
            m.recs[kind], m.mem[kind] = fresh, (recs, stamps)
            keys = items
        else:
            fresh = cache
            recs, stamps = m.mem[kind]
            keys = examine
        for k in keys:
            x = items.get(k)
            if x is None:
                for d in (fresh, recs, stamps):
                    d.pop(k, None)
                continue
            sig = signature(kind, x)
            hit = cache.get(k)
            if hit is None or hit[0] != sig:
                rec = kg_format.node_record(x) if kind == "node" else kg_format.edge_record(x)
                hit = (sig, rec, kg_format.stamp(rec))
            fresh[k] = hit
            recs[k], stamps[k] = hit[1], hit[2]
        return recs, stamps

    def _log_frozen(self, rel, kind, frozen):
        fresh = [k for k in frozen if (rel, kind, k) not in self.problems_logged]
        if fresh:
            self.problems_logged.update((rel, kind, k) for k in fresh)
            log.warning("remote sync: %d %s(s) of %s hold a credential and are not synced (first: %r); "
                        "delete or fix them", len(fresh), kind, rel, fresh[0][:100])

    def _apply(self, durable, g, nodes, edges, taken, new_base, written):
        """What the folder brought, through the store's write path; keys that changed in memory
        since the snapshot are left (with their old base) for the next pass. The base is folded
        into the graph file before the folder's files are written, the keys about to be written
        keeping their old base and their new one as pending (held only if the folder has it
        after a crash). -> the number of records, or None when nothing may be written (the graph
        was reloaded meanwhile, or the fold failed)."""
        store = self.store
        with store.writes.writing(None) as w:
            if durable.graph is not g:
                return None  # reloaded meanwhile: the next pass starts over
            old = sync_base(g.meta)
            records, pending = [], {}
            for kind, current, snap in (("node", g.nodes, nodes), ("edge", g.edges, edges)):
                for key, rec in taken[kind].items():
                    if current.get(key) != snap.get(key):
                        keep_old(new_base[kind], old[kind], key)
                        continue
                    r = content_record(kind, key, rec, current.get(key))
                    if r is not None:
                        records.append(r)
                        if r["op"] == "node":
                            pending[key] = r["node"]
                        elif r["op"] == "del_node":
                            pending[key] = None
            news = len(records)  # the records past this one change personal state only
            for nid, rec in taken["personal"].items():
                if nid in pending:
                    if pending[nid] is not None:
                        personal.apply(pending[nid], rec)
                    continue
                node = g.nodes.get(nid)
                if node is None or node != nodes.get(nid):
                    keep_old(new_base["personal"], old["personal"], nid)
                    continue
                updated = personal.apply(dict(node), rec)
                if updated != node:
                    records.append({"op": "node", "node": updated})
            if not records and new_base == old and PENDING not in g.meta:
                return 0
            held, to_confirm = hold_back(new_base, old, written)
            before = {r["key"]: g.edges.get(r["key"]) for r in records if r["op"] == "del_edge"}

            def apply(graph):
                from ..core.graph import apply_record

                for r in records:
                    apply_record(graph, r)
                graph.meta[META] = held
                graph.meta[PENDING] = to_confirm
            store.writes.change(w, durable, records, apply, lambda _: events(records[:news], before), counted=False)
            for kind, payload in events(records[news:], {}):  # what another machine read: no news for kg_sync
                store.writes.told(w, durable, kind, payload)
            durable.dirty = True
            # The base is on disk before the folder's files are written and before any later write
            # is journalled (contract section 4): the journal has no record for it, and a write
            # journalled on top of a graph file without it would, after a crash, be reconciled
            # against an older base (an acknowledged delete undone by the folder's copy). A failed
            # fold is logged and retried by the store; the files then wait for the next pass.
            if not durable.fold():
                return None
        return len(records)

    # ------------------------------------------------------------ identity, problems

    def _ensure_identity(self, durable):
        """A project graph's identity, recorded in its _meta the first time (git runs here,
        outside the store's lock)."""
        g = durable.graph
        if g.level != "project" or repo_id.is_identity(g.meta.get("repo_id")) or not g.path_known:
            return
        path = g.project_path
        ident = repo_id.project_identity(path) if path and os.path.isdir(path) else repo_id.identity_of_path(path)
        with self.store.lock:
            if durable.graph is g and not repo_id.is_identity(g.meta.get("repo_id")):
                g.meta["repo_id"] = ident
                durable.dirty = True

    def _report(self, rel, problems):
        for p in problems:
            if (rel, p) not in self.problems_logged:
                self.problems_logged.add((rel, p))
                log.warning("remote sync: %s/%s skipped", rel, p)
