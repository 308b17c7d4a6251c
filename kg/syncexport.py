"""Knowledge between the store and the sync working tree ROOT/sync/ (contract section 9, personal
remote). Each graph's folder there is treated exactly like a `.kg/`: the same files, the same merge
rule and the same three-way reconcile (kg/kgdir.py, kg/reconcile.py), with its own base.

Rules owned here:
- Folders: `user/` for the user graph, `projects/<identity>/` for a project (kg/repoid.py; the
  identity is recorded in the graph's `_meta.repo_id`). A project shared in its repository (it has
  `.kg/`) keeps its content there: only its personal state lands here.
- Content: `nodes.jsonl`, `edges.jsonl` (kg/kgdir.py). Personal state: `personal.jsonl` (personal.py's
  lines and rule: the later read wins, the later state change wins).
- The base (what memory and the folder last agreed on) is `_meta.sync_base` of each graph, saved
  with the graph file; a base lost in a crash only makes the next reconcile merge versions that
  are already equal. Unlike a `.kg/` (where a branch switch takes lines away), only a tombstone
  removes knowledge here: a line missing from the file is written again from memory.
- The store's lock is held only to take a graph's dicts (not their nodes) and to apply what the
  folder brought; nodes are copied, files read, merged and written outside it. A key that changed
  in memory meanwhile is left for the next pass. What the folder brings goes through the store's
  one write path (kg_sync, the live feed and compaction see it as another session's change).
- Nothing holding a credential is written here: a node or edge the secrets gate flagged
  (Graph.flagged, kg/secrets.py) is skipped and logged once, its base left as it was, and its
  personal line left out.
- Files are written atomically, 0600, only when their bytes change.
"""

import logging
import os
import threading
import time

from . import kgdir, model, personal, repoid
from .reconcile import reconcile
from .storage import atomic_write, ensure_dir

log = logging.getLogger(__name__)

META = "sync_base"
USER_DIR = "user"
PROJECTS_DIR = "projects"
KINDS = (("node", kgdir.NODES_FILE), ("edge", kgdir.EDGES_FILE))


def is_shared(graph):
    """The project keeps its content in its repository's `.kg/` (kg/shared.py)."""
    return bool(getattr(graph, "shared", False))


def folder_of(graph):
    """The graph's folder under ROOT/sync/ (relative), or None when it has no identity yet."""
    if graph.level == "user":
        return USER_DIR
    ident = graph.meta.get("repo_id")
    return PROJECTS_DIR + "/" + ident if repoid.is_identity(ident) else None


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(kgdir.MAX_FILE + 1)
    except FileNotFoundError:
        return None


class Bridge:
    """Reconciles the store's graphs with their folders under `sync_root` (ROOT/sync/)."""

    def __init__(self, store, sync_root, clock=time.time):
        self.store = store
        self.sync_root = sync_root
        self.clock = clock
        self.dirty = set()  # (level, project_path) changed since their last pass
        self.seen = {}  # id(durable) -> fingerprint after its last pass
        self.problems_logged = set()
        self.lock = threading.Lock()  # one pass at a time (the worker's thread, a test)
        self.recs = {}  # (id(durable), kind) -> {key: (signature, record, stamp)}
        self.files = {}  # path -> (stat, parsed records, their stamps) as kgd last wrote or read it
        self.lines = {}  # path -> {key: (record, its canonical line)} of the last rendering
        self.mine = {}  # id(durable) -> {node id: (personal signature, base entry, personal line)}

    # ------------------------------------------------------------ what the worker calls

    def note(self, event):
        if isinstance(event, dict):
            self.dirty.add((event.get("level"), event.get("project_path")))

    def export(self, full=False):
        """Reconcile the graphs that changed (full: every graph whose memory or files moved)."""
        with self.lock:
            for durable in self._durables(load_all=full):
                self.sync_graph(durable, force=False)

    def pickup(self, changed_paths):
        """The remote brought these files (paths relative to ROOT/sync/): reconcile their graphs."""
        folders = {"/".join(p.split("/")[:2]) if p.startswith(PROJECTS_DIR + "/") else p.split("/")[0]
                   for p in changed_paths}
        with self.lock:
            for durable in self._durables(load_all=True):
                if folder_of(durable.graph) in folders:
                    self.sync_graph(durable, force=True)

    def unseen(self):
        """True when a loaded graph has not been reconciled yet (cheap: counts)."""
        return len(self.store.registry.projects) + 1 > len(self.seen)

    def _durables(self, load_all):
        if load_all:
            self.store.all_project_graphs()  # a graph never opened since start may hold news
        with self.store.lock:
            return list(self.store.registry.durables())

    # ------------------------------------------------------------ one graph

    @staticmethod
    def _fingerprint(g, nodes, n_edges, archived, orphaned):
        """What a graph looks like, cheaply: equal fingerprints, nothing to export (a write is also
        noted by its change event; a read, which has none, moves the latest read time)."""
        reads = max((n.get("_read_ts") or 0 for n in nodes.values()), default=0)
        return (id(g), len(nodes), n_edges, reads, archived, orphaned)

    def _files_stat(self, folder):
        out = []
        for name in (kgdir.NODES_FILE, kgdir.EDGES_FILE, personal.FILE):
            try:
                st = os.stat(os.path.join(folder, name))
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def sync_graph(self, durable, force=True):
        """One graph with its folder, both ways. Returns the number of changes taken into memory."""
        self._ensure_identity(durable)
        with self.store.lock:  # only dicts are taken here: nothing grows with the graph
            g = durable.graph
            rel = folder_of(g)
            if rel is None:
                self.seen[id(durable)] = None
                return 0
            key = (g.level, g.project_path)
            node_refs, edge_refs = dict(g.nodes), dict(g.edges)
            counts = (len(edge_refs), g.state_counts[model.ARCHIVED], g.state_counts[model.ORPHANED])
            base = _base(g.meta)
            shared = is_shared(g)
            flagged = {"node": set(g.flagged), "edge": set(g.flagged_edges)}  # the secrets gate's findings
            dirty = key in self.dirty
            self.dirty.discard(key)
        folder = os.path.join(self.sync_root, *rel.split("/"))
        mark = (self._fingerprint(g, node_refs, *counts), self._files_stat(folder))
        if not force and not dirty and self.seen.get(id(durable)) == mark:
            return 0
        # Each node is copied whole (one C call, atomic under the GIL) outside the lock; a key
        # written meanwhile is found changed when the result is applied, and left for later.
        nodes = {k: dict(n) for k, n in node_refs.items()}
        edges = {k: dict(e) for k, e in edge_refs.items()}
        now = self.clock()
        taken, new_base = self._files(folder, rel, nodes, edges, base, shared, now, id(durable), flagged)
        if any(taken.values()):  # _apply may put a key's old base back: never into the graph's own dicts
            new_base = {k: dict(v) for k, v in new_base.items()}
        applied = self._apply(durable, g, nodes, edges, taken, new_base)
        with self.store.lock:
            if durable.graph is not g:
                return applied
            node_refs = dict(g.nodes)
            counts = (len(g.edges), g.state_counts[model.ARCHIVED], g.state_counts[model.ORPHANED])
        self.seen[id(durable)] = (self._fingerprint(g, node_refs, *counts), self._files_stat(folder))
        return applied

    def _files(self, folder, rel, nodes, edges, base, shared, now, ckey, flagged):
        """Reconcile the snapshot with the folder's files and write them; what memory must take
        ({"node": {key: rec or None}, "edge": ..., "personal": {id: rec}}) and the new base."""
        taken = {"node": {}, "edge": {}, "personal": {}}
        new_base = {"node": base["node"], "edge": base["edge"], "personal": base["personal"]}
        writes = []
        tombstoned = set()
        secret_ids = set()
        if not shared:
            for kind, name, items in (("node", kgdir.NODES_FILE, nodes), ("edge", kgdir.EDGES_FILE, edges)):
                path = os.path.join(folder, name)
                taken[kind], new_base[kind], out, disk, frozen, stamps = self._content(
                    path, rel, kind, items, base[kind], now, (ckey, kind), flagged[kind])
                if out is not None:
                    writes.append((path, out, kind, disk, stamps))
                if kind == "node":
                    secret_ids.update(flagged["node"])
                    tombstoned = {k for k, r in disk.items() if kgdir.is_tombstone(r)}
        mine = self._personal(ckey, nodes, base["personal"], now, secret_ids)
        path = os.path.join(folder, personal.FILE)
        disk, unclean = self._disk(path, rel, "personal")
        moved = {k: m for k, m in mine.items() if disk.get(k) != m}
        gone = [k for k in tombstoned if k in disk and k not in mine]
        arriving = [k for k, r in taken["node"].items() if r is not None and k not in mine and k in disk]
        _, to_memory, _ = personal.reconcile(moved, {k: disk[k] for k in list(moved) + arriving if k in disk})
        if moved or gone or unclean or len(base["personal"]) != len(disk):
            merged, _, p_base = personal.reconcile(mine, disk, drop=tombstoned)
            if unclean or merged != disk:
                writes.append((path, personal.render(merged, line=self._line_cache(path)), "personal", merged, None))
        else:
            p_base = base["personal"]
        taken["personal"] = to_memory
        new_base["personal"] = p_base
        if writes:
            ensure_dir(folder)
            for path, out, kind, parsed, stamps in writes:
                atomic_write(path, out, keep_prev=False)
                self.files[path] = (_stat(path), parsed, stamps)
        return taken, new_base

    def _content(self, path, rel, kind, items, base, now, ckey, flagged):
        """One content file: only the keys that moved on either side since the base are
        reconciled (memory's records and the file's parse are cached, so an unchanged graph
        costs a comparison per key). -> (to memory, new base, bytes to write or None, the
        file's records after the write, frozen keys, their stamps)."""
        mem, mem_stamps = self._records(ckey, kind, items)
        disk, unclean = self._disk(path, rel, kind)
        disk_stamps = self.files[path][2] if path in self.files else _stamps(disk)
        keys = {k for k, st in mem_stamps.items() if base.get(k) != st}
        keys.update(k for k, st in disk_stamps.items() if base.get(k) != st)
        keys.update(k for k in base if k not in mem_stamps or k not in disk_stamps)
        sub_mem = {k: mem[k] for k in keys if k in mem}
        # Only a tombstone removes knowledge here: a line missing from the file (a folder made
        # afresh, a project whose identity changed, a file cut short) is written again.
        sub_base = {k: base[k] for k in keys if k in base and k in disk}
        frozen = sorted(k for k in sub_mem if k in flagged)  # a credential is never written here
        self._log_frozen(rel, kind, frozen)
        result = reconcile(sub_mem, {k: disk[k] for k in keys if k in disk}, sub_base, now, None, frozen)
        new_base = {k: v for k, v in base.items() if k not in keys}
        new_base.update(result.base)
        if not result.disk and not unclean:
            return result.memory, new_base, None, disk, frozen, disk_stamps
        merged = dict(disk)
        merged.update(result.disk)
        out = kgdir.render(merged, now, line=self._line_cache(path))
        stamps = dict(disk_stamps)
        for k, r in result.disk.items():
            if kgdir.is_tombstone(r):
                stamps.pop(k, None)
            else:
                stamps[k] = kgdir.stamp(r)
        return result.memory, new_base, out, merged, frozen, stamps

    def _personal(self, ckey, nodes, base, now, skip):
        """Memory's personal lines, made again only for nodes whose read time or state moved."""
        cache = self.mine.get(ckey, {})
        fresh, out = {}, {}
        for k, n in nodes.items():
            if k in skip:
                continue
            sig = (n.get("_read_ts"), n.get("_archived"), n.get("_orphaned_ts"), n.get("_created_ts"))
            b = base.get(k)
            hit = cache.get(k)
            if hit is None or hit[0] != sig or hit[1] != b:
                hit = (sig, b, personal.record(n, b, now))
            fresh[k] = hit
            out[k] = hit[2]
        self.mine[ckey] = fresh
        return out

    def _line_cache(self, path):
        """line(key, rec) for kgdir.render: a record rendered before (the same object) is not
        serialised again."""
        old, new = self.lines.get(path, {}), {}
        self.lines[path] = new

        def line(key, rec):
            hit = old.get(key)
            text = hit[1] if hit is not None and hit[0] is rec else kgdir.canonical(rec)
            new[key] = (rec, text)
            return text
        return line

    def _records(self, ckey, kind, items):
        """Memory's records and their stamps, recomputed only for what changed since the last pass."""
        cache = self.recs.get(ckey, {})
        fresh, recs, stamps = {}, {}, {}
        for k, x in items.items():
            sig = _signature(kind, x)
            hit = cache.get(k)
            if hit is None or hit[0] != sig:
                rec = kgdir.node_record(x) if kind == "node" else kgdir.edge_record(x)
                hit = (sig, rec, kgdir.stamp(rec))
            fresh[k] = hit
            recs[k], stamps[k] = hit[1], hit[2]
        self.recs[ckey] = fresh
        return recs, stamps

    def _disk(self, path, rel, kind):
        """A file's records (parsed again only when it changed since kgd last wrote or read it)
        and whether its bytes are not the clean rendering (a merge left duplicates or markers)."""
        st = _stat(path)
        hit = self.files.get(path)
        if hit is not None and st is not None and hit[0] == st:
            return hit[1], False
        data = _read(path)
        if kind == "personal":
            parsed, problems = personal.parse(data)
            clean = personal.render(parsed)
        else:
            parsed, problems = kgdir.parse(data, kind)
            clean = kgdir.render(parsed)
        self._report(rel, problems)
        self.files[path] = (st, parsed, _stamps(parsed) if kind != "personal" else None)
        return parsed, data is not None and data != clean

    def _log_frozen(self, rel, kind, frozen):
        fresh = [k for k in frozen if (rel, kind, k) not in self.problems_logged]
        if fresh:
            self.problems_logged.update((rel, kind, k) for k in fresh)
            log.warning("remote sync: %d %s(s) of %s hold a credential and are not synced (first: %r); "
                        "delete or fix them", len(fresh), kind, rel, fresh[0][:100])

    def _apply(self, durable, g, nodes, edges, taken, new_base):
        """What the folder brought, through the store's write path; keys that changed in memory
        since the snapshot are left (with their old base) for the next pass."""
        store = self.store
        with store.writes.writing(None) as w:
            if durable.graph is not g:
                return 0  # reloaded meanwhile: the next pass starts over
            old = _base(g.meta)
            records, pending = [], {}
            for kind, current, snap in (("node", g.nodes, nodes), ("edge", g.edges, edges)):
                for key, rec in taken[kind].items():
                    if current.get(key) != snap.get(key):
                        _keep_old(new_base[kind], old[kind], key)
                        continue
                    r = _content_record(kind, key, rec, current.get(key))
                    if r is not None:
                        records.append(r)
                        if r["op"] == "node":
                            pending[key] = r["node"]
                        elif r["op"] == "del_node":
                            pending[key] = None
            for nid, rec in taken["personal"].items():
                if nid in pending:
                    if pending[nid] is not None:
                        personal.apply(pending[nid], rec)
                    continue
                node = g.nodes.get(nid)
                if node is None or node != nodes.get(nid):
                    _keep_old(new_base["personal"], old["personal"], nid)
                    continue
                updated = personal.apply(dict(node), rec)
                if updated != node:
                    records.append({"op": "node", "node": updated})
            if not records and new_base == old:
                return 0
            before = {r["key"]: g.edges.get(r["key"]) for r in records if r["op"] == "del_edge"}

            def apply(graph):
                from .graph import apply_record

                for r in records:
                    apply_record(graph, r)
                graph.meta[META] = new_base
            store.writes.change(w, durable, records, apply, lambda _: _events(records, before), counted=False)
            durable.dirty = True  # the base is saved with the graph file at the next fold
        return len(records)

    # ------------------------------------------------------------ identity, problems

    def _ensure_identity(self, durable):
        """A project graph's identity, recorded in its _meta the first time (git runs here,
        outside the store's lock)."""
        g = durable.graph
        if g.level != "project" or repoid.is_identity(g.meta.get("repo_id")) or not g.path_known:
            return
        path = g.project_path
        ident = repoid.project_identity(path) if path and os.path.isdir(path) else repoid.identity_of_path(path)
        with self.store.lock:
            if durable.graph is g and not repoid.is_identity(g.meta.get("repo_id")):
                g.meta["repo_id"] = ident
                durable.dirty = True

    def _report(self, rel, problems):
        for p in problems:
            if (rel, p) not in self.problems_logged:
                self.problems_logged.add((rel, p))
                log.warning("remote sync: %s/%s skipped", rel, p)


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _stamps(records):
    return {k: kgdir.stamp(r) for k, r in records.items() if not kgdir.is_tombstone(r)}


def _signature(kind, x):
    """What a record is made of: equal signatures, equal records (no JSON needed to compare)."""
    if kind == "node":
        return (x.get("gist"), tuple(x.get("notes") or ()), tuple(x.get("touches") or ()), x.get("_created_ts"),
                x.get("_write_ts"))
    return (tuple(x.get("notes") or ()), x.get("_write_ts"))


def _base(meta):
    """The graph's sync base as {"node", "edge", "personal"} -> {key: ...}. The dicts are the
    graph's own (a pass replaces _meta.sync_base whole, never changes it in place)."""
    b = meta.get(META)
    b = b if isinstance(b, dict) else {}
    return {k: b.get(k) if isinstance(b.get(k), dict) else {} for k in ("node", "edge", "personal")}


def _keep_old(new, old, key):
    if key in old:
        new[key] = old[key]
    else:
        new.pop(key, None)


def _content_record(kind, key, rec, current):
    """The journal record taking one node or edge from the folder (rec None: it leaves memory)."""
    if rec is None:
        if current is None:
            return None
        return {"op": "del_node", "id": key} if kind == "node" else {"op": "del_edge", "key": key}
    if kind == "node":
        node = dict(current) if current is not None else {"_read_ts": None}
        node.update(kgdir.node_fields(rec))
        return {"op": "node", "node": node}
    edge = dict(current or {})
    edge.update(kgdir.edge_fields(rec))
    return {"op": "edge", "edge": edge}


def _events(records, removed_edges):
    """The change events of what a pass took into memory (for kg_sync and the live feed)."""
    out = []
    for r in records:
        if r["op"] == "node":
            out.append(("node_put", {"node": model.public_node(r["node"])}))
        elif r["op"] == "del_node":
            out.append(("node_deleted", {"id": r["id"], "edges_removed": []}))
        elif r["op"] == "edge":
            out.append(("edge_put", {"edge": model.public_edge(r["edge"])}))
        elif removed_edges.get(r["key"]) is not None:
            out.append(("edge_deleted", {"edge": model.public_edge(removed_edges[r["key"]])}))
    return out
