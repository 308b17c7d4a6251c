"""One graph in memory: nodes, edges, an adjacency index and running figures. Pure (no I/O).

Why it exists: the store must not rescan a graph per write. The token estimate of contract
section 5 and the count of nodes per state are kept incrementally: every change to a node
goes through `refresh(id)`, which re-counts that node and the edges that touch it.
The same holds for the nodes and edges that look like they hold a credential (contract
section 10, kg/secrets/kinds.py): `flagged` is kept by refresh / put_edge / recount, rescanning a
node only when its text changed, so reads filter them in O(1) per node.
And for whoever must mirror the graph elsewhere (the personal remote, kg/travel/remote_bridge.py): a
Changes from `track()` collects the keys refresh / put_edge / delete_edge saw, so a pass
reconciles the few keys that moved instead of comparing every node; recount marks it `all`.
"""

from ..secrets import fields
from . import model, team_state


def version(item):
    """Which put of a node or an edge a mark was judged at: every put raises `_v` and sets `_write_ts`."""
    return item.get("_v"), item.get("_write_ts")


class Joined(list):
    """A full read's nodes or edges with the graph's read marks already joined in (see
    Graph.read_marks): whoever would join them again can tell."""

    __slots__ = ()


def _join(items, pos, source, marks):
    """Add each mark's fields to the item at its key's position, when the node or edge is still
    at the version the mark was judged at: a look-up per mark, no pass over the items."""
    for key, (ver, extra) in marks.items():
        i = pos.get(key)
        if i is not None and version(source[key]) == ver:
            items[i].update(extra)


class Changes:
    """The node ids and edge keys changed since the tracker's owner last took them (under the
    store's lock, like every change); `all` when the graph was recounted from scratch."""

    __slots__ = ("nodes", "edges", "all")

    def __init__(self):
        self.nodes, self.edges, self.all = set(), set(), False

    def take(self):
        """(node ids, edge keys, all) seen so far, and start afresh."""
        out = (self.nodes, self.edges, self.all)
        self.nodes, self.edges, self.all = set(), set(), False
        return out


class Graph:
    def __init__(self, level, project_path=None, slug=None):
        self.level = level
        self.project_path = project_path
        self.slug = slug
        self.nodes = {}
        self.edges = {}
        self.meta = {}
        self.adj = {}  # node id or file path -> set of edge keys touching it
        self._node_cost = {}  # id -> tokens it adds now (0 unless active)
        self._node_state = {}  # id -> state last counted
        self.counted_edges = set()  # keys of edges counted in the estimate (shown by kg_read)
        self.tokens = 0
        self.by_state = {model.ACTIVE: set(), model.ARCHIVED: set(), model.ORPHANED: set()}
        self.search_cache = {}  # id -> lower-cased text, owned by kg/core/search.py
        self.corpus = None  # a search.Corpus of every node, rebuilt after any change
        self.recall_index = None  # the hooks' recall index; dropped whenever corpus is
        self.recall_prev = None  # the last recall index built: kg/agents/loop.py redoes only changed nodes from it
        self.recall_warming = False  # a thread is building a big graph's first recall index (kg/agents/loop.py)
        self.compact_idle_until = 0.0  # see Store._compact_after
        self.path_known = True  # False for an old project file that does not record its path
        self.shared = False  # the project's knowledge is shared through its repository's .kg/ (kg/travel/team.py)
        self.flagged = {}  # node id -> (field, Hit): holds a credential; never shown, kept until deleted
        self.flagged_edges = {}  # edge key -> (field, Hit), likewise
        self._scanned = {}  # node id -> the texts last scanned for credentials
        self.trackers = ()  # Changes to tell of every change (see track())
        # {"nodes": {id: (version, fields)}, "edges": {key: (version, fields)}} joined into reads (the
        # stale marks of contract 12, set by kg/memory/file_states.py Marks.swap under the store's lock)
        self.read_marks = None
        self._view = None  # [sorted visible active ids, sorted shown edge keys, their positions]: see _order

    def track(self):
        """A Changes told of every change from now on (it starts `all`: nothing seen yet)."""
        t = Changes()
        t.all = True
        self.trackers = self.trackers + (t,)
        return t

    def untrack(self, tracker):
        self.trackers = tuple(t for t in self.trackers if t is not tracker)

    # ---- figures

    @property
    def state_counts(self):
        return {state: len(ids) for state, ids in self.by_state.items()}

    def _count_edge(self, key):
        on = model.edge_counts(self.edges[key], self.nodes)
        if on != (key in self.counted_edges):
            if on:
                self.counted_edges.add(key)
                self.tokens += model.EDGE_TOKENS
            else:
                self.counted_edges.discard(key)
                self.tokens -= model.EDGE_TOKENS

    def _scan(self, node_id, node):
        """Keep `flagged` current for one node; scan only texts not scanned before."""
        if node is None:
            self._scanned.pop(node_id, None)
            self.flagged.pop(node_id, None)
            return
        texts = (node.get("gist"), tuple(node.get("notes") or ()), tuple(node.get("touches") or ()))
        if self._scanned.get(node_id) == texts:
            return
        self._scanned[node_id] = texts
        found = fields.scan_node(node)
        if found is None:
            self.flagged.pop(node_id, None)
        else:
            self.flagged[node_id] = found

    def _scan_edge(self, key, edge):
        found = fields.scan_edge(edge) if edge is not None else None
        if found is None:
            self.flagged_edges.pop(key, None)
        else:
            self.flagged_edges[key] = found

    def shown(self, node_id):
        """May this node be shown to an agent (it holds no credential)?"""
        return node_id not in self.flagged

    def visible(self, state):
        """Ids of a state that may be shown (a set; the state's own set when nothing is flagged)."""
        ids = self.by_state[state]
        return ids - self.flagged.keys() if self.flagged else ids

    def visible_nodes(self):
        """id -> node of every node that may be shown."""
        if not self.flagged:
            return self.nodes
        return {k: n for k, n in self.nodes.items() if k not in self.flagged}

    def edge_shown(self, key, edge):
        return key not in self.flagged_edges and edge["from"] not in self.flagged and edge["to"] not in self.flagged

    def withheld(self):
        """(ids of the flagged nodes that can be named, how many are flagged in all): a node whose
        id itself looks like a credential is counted, not named."""
        named = sorted(i for i, (field, _) in self.flagged.items() if field != "id")
        return named, len(self.flagged)

    def refresh(self, node_id):
        """Re-count one node (after any change to it, in place or not) and its edges."""
        node = self.nodes.get(node_id)
        for t in self.trackers:
            t.nodes.add(node_id)
        self._scan(node_id, node)
        self.search_cache.pop(node_id, None)
        self.corpus = self.recall_index = self._view = None
        old_state = self._node_state.pop(node_id, None)
        if old_state is not None:
            self.by_state[old_state].discard(node_id)
        self.tokens -= self._node_cost.pop(node_id, 0)
        if node is not None:
            self._count_node(node_id, node)
        for key in self.adj.get(node_id, ()):
            self._count_edge(key)

    def _count_node(self, node_id, node):
        state = model.node_state(node)
        self._node_state[node_id] = state
        self.by_state[state].add(node_id)
        cost = model.node_tokens(node) if state == model.ACTIVE else 0
        self._node_cost[node_id] = cost
        self.tokens += cost

    def recount(self):
        """Everything from scratch (after a compaction pass or a load)."""
        for t in self.trackers:
            t.all = True
        self._node_cost.clear()
        self._node_state.clear()
        self.counted_edges = set()
        self.search_cache.clear()
        self.corpus = self.recall_index = self._view = None
        self.tokens = 0
        self.by_state = {model.ACTIVE: set(), model.ARCHIVED: set(), model.ORPHANED: set()}
        self.adj = {}
        for key, edge in self.edges.items():
            self.adj.setdefault(edge["from"], set()).add(key)
            self.adj.setdefault(edge["to"], set()).add(key)
        for gone in [i for i in self._scanned if i not in self.nodes]:
            self._scan(gone, None)
        self.flagged_edges = {}
        for key, edge in self.edges.items():
            self._scan_edge(key, edge)
        for node_id, node in self.nodes.items():
            self._scan(node_id, node)
            self._count_node(node_id, node)
        for key in self.edges:
            self._count_edge(key)

    @property
    def archived_count(self):
        return len(self.by_state[model.ARCHIVED])

    # ---- mutations (callers validate first)

    def put_node(self, node):
        self.nodes[node["id"]] = node
        self.refresh(node["id"])

    def delete_node(self, node_id):
        """Remove the node and every edge touching it; returns the removed edges."""
        removed = [self.edges[k] for k in sorted(self.adj.get(node_id, ())) if k in self.edges]
        for edge in removed:
            self.delete_edge(model.edge_key(edge["from"], edge["to"], edge["rel"]))
        self.nodes.pop(node_id, None)
        self.refresh(node_id)
        self.adj.pop(node_id, None)
        return removed

    def put_edge(self, edge):
        key = model.edge_key(edge["from"], edge["to"], edge["rel"])
        self.edges[key] = edge
        for t in self.trackers:
            t.edges.add(key)
        self.recall_index = self._view = None  # recall also matches edge ends
        self._scan_edge(key, edge)
        self.adj.setdefault(edge["from"], set()).add(key)
        self.adj.setdefault(edge["to"], set()).add(key)
        self._count_edge(key)
        return key

    def delete_edge(self, key):
        edge = self.edges.pop(key, None)
        if edge is None:
            return None
        for t in self.trackers:
            t.edges.add(key)
        self.flagged_edges.pop(key, None)
        self.recall_index = self._view = None
        if key in self.counted_edges:
            self.counted_edges.discard(key)
            self.tokens -= model.EDGE_TOKENS
        for end in (edge["from"], edge["to"]):
            keys = self.adj.get(end)
            if keys is not None:
                keys.discard(key)
                if not keys and end not in self.nodes:
                    del self.adj[end]
        return edge

    def edges_of(self, node_id):
        return [self.edges[k] for k in sorted(self.adj.get(node_id, ())) if k in self.edges]

    def node_in_full(self, node_id):
        """A read by id's view of one node: NODE + its level + every edge touching it (edges with
        their read marks)."""
        item = model.public_node(self.nodes[node_id])
        item["level"] = self.level
        marks = (self.read_marks or {}).get("edges") or {}
        edges = []
        for e in self.edges_of(node_id):
            key = model.edge_key(e["from"], e["to"], e["rel"])
            if self.edge_shown(key, e):
                pub = model.public_edge(e)
                m = marks.get(key)
                if m is not None and version(e) == m[0]:
                    pub.update(m[1])
                edges.append(pub)
        item["edges"] = edges
        return item

    def _order(self):
        """The sorted ids and edge keys a full read lists, kept until the next change (refresh,
        recount, an edge put or deleted): most reads find the graph as the last one left it."""
        v = self._view
        if v is None:
            ids = sorted(self.visible(model.ACTIVE))
            keys = [k for k in sorted(self.counted_edges) if self.edge_shown(k, self.edges[k])]
            v = self._view = [ids, keys, None]
        return v

    def active_view(self):
        """A full kg_read's view of the graph: its active nodes, their recency, the archived
        ids, the edges counted in the estimate and the estimate; nodes and edges holding a
        credential left out, and `withheld` (named ids, count) saying so. The read marks are
        joined in (a look-up per mark in the positions kept with the order: a read pays for the
        few marks only)."""
        nodes, edges = self.nodes, self.edges
        order = self._order()
        ids, keys = order[0], order[1]
        items = [model.public_node(nodes[i]) for i in ids]
        shown = [model.public_edge(edges[k]) for k in keys]
        marks = self.read_marks
        if marks is not None:
            if order[2] is None:
                order[2] = (dict(zip(ids, range(len(ids)))), dict(zip(keys, range(len(keys)))))
            items, shown = Joined(items), Joined(shown)
            _join(items, order[2][0], nodes, marks.get("nodes") or {})
            _join(shown, order[2][1], edges, marks.get("edges") or {})
        return {"nodes": items, "recency": {i: model.recency(nodes[i]) for i in ids},
                "archived": sorted(self.visible(model.ARCHIVED)), "edges": shown,
                "tokens": self.tokens, "withheld": self.withheld()}

    def visible_edges(self):
        """Edges shown by kg_read: at least one end an active node (contract 5, revised)."""
        return [self.edges[k] for k in self.counted_edges]

    # ---- persistence shape (contract section 4)

    def to_obj(self):
        meta = dict(self.meta)
        if self.project_path is not None and self.path_known:
            meta["project_path"] = self.project_path
        meta["level"] = self.level
        return {"nodes": self.nodes, "edges": self.edges, "_meta": meta}


# ---- loading files, including the reference plugin's layout

def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v if isinstance(v, str) else str(v) for v in value]
    return [value if isinstance(value, str) else str(value)]


def _version_ts(versions, node_id):
    """Times the reference plugin keeps in _meta.versions, keyed "node:<id>" (or the bare id),
    as a number or a dict such as {"v", "ts", "session"}."""
    if not isinstance(versions, dict):
        return None, None
    v = versions.get("node:" + node_id, versions.get(node_id))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v), float(v)
    if isinstance(v, dict):
        def pick(*names):
            for n in names:
                x = v.get(n)
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    return float(x)
            return None
        created = pick("created_ts", "created", "created_at", "ts", "timestamp", "updated", "updated_ts")
        written = pick("updated_ts", "updated", "write_ts", "modified", "ts", "timestamp", "created")
        return created, written
    return None, None


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def normalize_node(node_id, raw, versions, fallback_ts):
    raw = raw if isinstance(raw, dict) else {"gist": str(raw)}
    v_created, v_written = _version_ts(versions, node_id)
    created = _num(raw.get("_created_ts")) or v_created or fallback_ts
    written = _num(raw.get("_write_ts")) or v_written or created
    node = dict(raw)  # keep unknown fields: files written by other tools load without loss
    node.update({
        "id": node_id,
        "gist": raw.get("gist") if isinstance(raw.get("gist"), str) else str(raw.get("gist", "")),
        "notes": _as_list(raw.get("notes")),
        "touches": _as_list(raw.get("touches")),
        "_created_ts": created,
        "_write_ts": written,
        "_read_ts": _num(raw.get("_read_ts")),
    })
    orphaned = _num(raw.get("_orphaned_ts"))
    if orphaned is None and raw.get("_orphaned") is True:
        orphaned = written
    if orphaned is not None:
        model.set_orphaned(node, orphaned)
    elif raw.get("_archived"):
        model.set_archived(node)
    else:
        model.set_active(node)
    return node


def normalize_edge(key, raw):
    raw = raw if isinstance(raw, dict) else {}
    frm, to, rel = raw.get("from"), raw.get("to"), raw.get("rel")
    if not (isinstance(frm, str) and isinstance(to, str) and isinstance(rel, str)):
        # Recover the ends from the key "FROM->TO:REL".
        if "->" not in key:
            return None
        frm, rest = key.split("->", 1)
        if ":" not in rest:
            return None
        to, rel = rest.rsplit(":", 1)
    edge = dict(raw)
    edge.update({"from": frm, "to": to, "rel": rel, "notes": _as_list(raw.get("notes"))})
    return edge


def graph_from_obj(obj, level, project_path=None, slug=None, fallback_ts=0.0):
    g = Graph(level, project_path, slug)
    obj = obj or {}
    meta = obj.get("_meta") if isinstance(obj.get("_meta"), dict) else {}
    g.meta = dict(meta)
    versions = meta.get("versions")
    nodes = obj.get("nodes") if isinstance(obj.get("nodes"), dict) else {}
    if isinstance(obj.get("nodes"), list):  # tolerate a list of node objects
        nodes = {n.get("id"): n for n in obj["nodes"] if isinstance(n, dict) and isinstance(n.get("id"), str)}
    for node_id, raw in nodes.items():
        g.nodes[node_id] = normalize_node(node_id, raw, versions, fallback_ts)
    edges = obj.get("edges") if isinstance(obj.get("edges"), dict) else {}
    if isinstance(obj.get("edges"), list):
        edges = {model.edge_key(e.get("from"), e.get("to"), e.get("rel")): e
                 for e in obj["edges"] if isinstance(e, dict)}
    for key, raw in edges.items():
        edge = normalize_edge(key, raw)
        if edge is not None:
            g.edges[model.edge_key(edge["from"], edge["to"], edge["rel"])] = edge
    g.recount()
    return g


# ---- journal records: absolute states, so replaying one twice is harmless

def apply_record(g, rec):
    """Apply one journal record; a delete returns what it removed."""
    op = rec.get("op")
    if op == "node":
        node = rec["node"]
        if not node.get("_archived"):  # an older journal's explicit false / null state keys
            node.pop("_archived", None)
        if node.get("_orphaned_ts") is None:
            node.pop("_orphaned_ts", None)
        g.nodes[node["id"]] = node
        g.refresh(node["id"])
    elif op == "del_node":
        removed = g.delete_node(rec["id"])
        if rec.get("tomb") is not None:  # an explicit delete in a shared graph
            team_state.note_deleted(g, rec["id"], removed, rec["tomb"], rec.get("tomb_v", 0))
        return removed
    elif op == "edge":
        g.put_edge(rec["edge"])
    elif op == "del_edge":
        edge = g.delete_edge(rec["key"])
        if rec.get("tomb") is not None and edge is not None:
            team_state.note_deleted(g, None, [edge], rec["tomb"])
        return edge
    elif op == "compacted":  # one compaction pass: only the state keys changed, so only they are logged
        for nid, (archived, orphaned_ts) in rec.get("states", {}).items():
            node = g.nodes.get(nid)
            if node is None:
                continue
            if orphaned_ts is not None:
                model.set_orphaned(node, orphaned_ts)
            elif archived:
                model.set_archived(node)
            else:
                model.set_active(node)
            g.refresh(nid)
        for nid in rec.get("del_nodes", ()):
            g.delete_node(nid)
        for key in rec.get("del_edges", ()):
            g.delete_edge(key)
    elif op == "shared":
        team_state.apply(g, rec)
    elif op == "progress":
        progress = g.meta.setdefault("progress", {})
        if rec.get("state") is None:
            progress.pop(rec["task_id"], None)
        else:
            progress[rec["task_id"]] = rec["state"]
        if rec.get("changed") is not None:  # when: a cleared task's date is its tombstone's (personal remote)
            g.meta.setdefault("progress_changed", {})[rec["task_id"]] = rec["changed"]
