"""What the personal remote's bridge (kg/travel/remote_bridge.py) knows of each graph between
passes, and the pure helpers around its records (contract section 9): where a graph's folder is
under ROOT/sync/, what a record is made of (signatures: records compared without JSON), the sync
base, and the journal records and change events that take what the folder brought into memory.

Rules owned here:
- Folders: `user/` for the user graph, `projects/<identity>/` for a project (kg/memory/repo_id.py; the
  identity is recorded in the graph's `_meta.repo_id`). A project shared in its repository (it has
  `.kg/`) keeps its content there: only its personal state lands here.
- The base (what memory and the folder last agreed on) is `_meta.sync_base` of each graph. The
  journal holds no record for it, so a pass that changes it folds the graph (kg/travel/remote_bridge.py)
  before it writes the folder's files: a write acknowledged later is journalled on top of a
  graph file that holds it. A base older than the folder is harmless only while memory has not
  changed since: a key deleted in memory and missing from the base would be taken back from the
  folder as another machine's.
- The keys a pass is about to write keep their old base in that fold, their new one in
  `_meta.sync_pending`: after a crash mid-pass, a pending entry counts only if the folder holds
  that very version (the file was written), else the old base stands (a base ahead of the folder
  would take the folder's older version back into memory).
"""

from ..core import kg_format, model
from ..memory import repo_id

META = "sync_base"
PENDING = "sync_pending"
USER_DIR = "user"
PROJECTS_DIR = "projects"
KINDS = (("node", kg_format.NODES_FILE), ("edge", kg_format.EDGES_FILE))


def is_shared(graph):
    """The project keeps its content in its repository's `.kg/` (kg/travel/team.py)."""
    return bool(getattr(graph, "shared", False))


def folder_of(graph):
    """The graph's folder under ROOT/sync/ (relative), or None when it has no identity yet."""
    if graph.level == "user":
        return USER_DIR
    ident = graph.meta.get("repo_id")
    return PROJECTS_DIR + "/" + ident if repo_id.is_identity(ident) else None


class Mirror:
    """What the bridge knows of one graph between passes: the graph object it follows, the
    tracker that graph tells of every change (kg/core/graph.py), memory's records and personal lines
    as last computed, and when memory was last audited."""

    def __init__(self, graph, rel, shared, now):
        self.graph = graph
        self.tracker = graph.track()
        self.rel = rel
        self.shared = shared
        self.audited_at = now
        self.recs = {"node": {}, "edge": {}}  # kind -> {key: (signature, record, stamp)}
        self.mem = {"node": ({}, {}), "edge": ({}, {})}  # kind -> ({key: record}, {key: stamp})
        self.mine = {}  # node id -> (personal signature, base entry, personal line)
        self.lines = {}  # node id -> personal line
        self.stats = {}  # path -> the file's stat when this graph's last pass read or wrote it
        self.redo = False  # this incremental pass met a file it did not expect: the next is full

    def current(self, g, rel):
        return self.graph is g and self.rel == rel and self.shared == is_shared(g)

    def drop(self):
        self.graph.untrack(self.tracker)


def signature(kind, x):
    """What a record is made of: equal signatures, equal records (no JSON needed to compare)."""
    if kind == "node":
        return (x.get("gist"), tuple(x.get("notes") or ()), tuple(x.get("touches") or ()), x.get("_created_ts"),
                x.get("_write_ts"))
    return (tuple(x.get("notes") or ()), x.get("_write_ts"))


def personal_signature(n):
    return (n.get("_read_ts"), n.get("_archived"), n.get("_orphaned_ts"), n.get("_created_ts"))


def sync_base(meta):
    """The graph's sync base as {"node", "edge", "personal"} -> {key: ...}. The dicts are the
    graph's own (a pass replaces _meta.sync_base whole, never changes it in place)."""
    b = meta.get(META)
    b = b if isinstance(b, dict) else {}
    return {k: b.get(k) if isinstance(b.get(k), dict) else {} for k in ("node", "edge", "personal")}


def sync_pending(meta):
    """The base entries a pass was about to write ({"node", "edge"} -> {key: stamp})."""
    p = meta.get(PENDING)
    p = p if isinstance(p, dict) else {}
    return {k: p.get(k) if isinstance(p.get(k), dict) else {} for k in ("node", "edge")}


def confirmed(base, pending, disk_stamps):
    """One kind's base with the pending entries the folder's file holds (a new dict)."""
    out = dict(base)
    for key, st in pending.items():
        if disk_stamps.get(key) == st:
            out[key] = st
    return out


def hold_back(new_base, old, written):
    """(the base to fold before the files are written, the pending entries): the keys about to
    be written keep their old base, their new live one waits in pending."""
    held = {kind: dict(v) for kind, v in new_base.items()}
    pending = {"node": {}, "edge": {}}
    for kind in ("node", "edge"):
        for key in written.get(kind, ()):
            new = new_base[kind].get(key)
            if new is not None and new != old[kind].get(key):
                pending[kind][key] = new
            keep_old(held[kind], old[kind], key)
    return held, pending


def keep_old(new, old, key):
    if key in old:
        new[key] = old[key]
    else:
        new.pop(key, None)


def content_record(kind, key, rec, current):
    """The journal record taking one node or edge from the folder (rec None: it leaves memory)."""
    if rec is None:
        if current is None:
            return None
        return {"op": "del_node", "id": key} if kind == "node" else {"op": "del_edge", "key": key}
    if kind == "node":
        node = dict(current) if current is not None else {"_read_ts": None}
        node.update(kg_format.node_fields(rec))
        return {"op": "node", "node": node}
    edge = dict(current or {})
    edge.update(kg_format.edge_fields(rec))
    return {"op": "edge", "edge": edge}


def events(records, removed_edges):
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
