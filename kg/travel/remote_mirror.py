"""What the personal remote's bridge (kg/travel/remote_bridge.py) knows of each graph between
passes, and the pure helpers around its records (contract section 9): where a graph's folder is
under ROOT/sync/, what a record is made of (signatures: records compared without JSON), the sync
base, and the journal records and change events that take what the folder brought into memory.

Rules owned here:
- Folders: `user/` for the user graph, `projects/<identity>/` for a project (kg/memory/repo_id.py; the
  identity is recorded in the graph's `_meta.repo_id`). A project shared in its repository (it has
  `.kg/`) keeps its content there: only its personal state lands here.
- The base (what memory and the folder last agreed on) is `_meta.sync_base` of each graph, saved
  with the graph file by the pass that changes it (kg/travel/remote_bridge.py folds the graph):
  a base older than the folder is harmless only while memory has not changed since, since a key
  deleted in memory and missing from the base is taken back from the folder as another machine's.
"""

from ..core import kg_format, model
from ..memory import repo_id

META = "sync_base"
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
