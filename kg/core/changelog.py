"""The change sequence, the change log and the diff kg_sync computes (contract 3). No I/O.

Rules owned here:
- Every change gets the next number of one global sequence.
- The log keeps, per change, which node or edge it touched (never contents: sync reads the
  current state), bounded to `max_len` entries, dropped in halves (amortised O(1)).
- Changes at or below `floor` are no longer kept (restart or trim): a session whose mark is
  below the floor gets a full resync, never a silent gap.
- kg_sync returns what other sessions (and compaction, sid None) changed after the caller's
  mark, as read now; the caller then moves the mark to `seq` under the same lock.
- A change's source is the durable unit of its graph (anything with `.graph`, `.level` and
  `.project_path`), so a graph reloaded from disk keeps its history.
- What came through git (a pickup of `.kg/`: `"via": "repository"`) is said as such, with who
  wrote it; knowledge that left the view because the checkout changed (a `node_deleted` marked
  `left`) is reported as having left with the branch, never as deleted (contract 9).
"""

from . import model


def _slim(kind, payload):
    """What kg_sync needs of a change: which node or edge it touched."""
    if kind == "node_put":
        out = {"node": {"id": payload["node"]["id"]}}
        if payload.get("via"):
            out["via"], out["by"] = payload["via"], payload["node"].get("by")
        return out
    if kind == "node_deleted":
        out = {"id": payload["id"], "edges_removed": [
            {"from": e["from"], "to": e["to"], "rel": e["rel"]} for e in payload["edges_removed"]]}
        for flag in ("via", "left"):
            if payload.get(flag):
                out[flag] = payload[flag]
        return out
    if kind in ("edge_put", "edge_deleted"):
        e = payload["edge"]
        return {"edge": {"from": e["from"], "to": e["to"], "rel": e["rel"]}}
    return payload  # compacted: lists of ids


class ChangeLog:
    def __init__(self, max_len, seq=0):
        self.max_len = max_len
        self.seq = seq
        self.floor = seq
        # (seq, session_id, source, kind, payload); seqs are consecutive, so the change after
        # a mark is found by index, not by a scan from the oldest.
        self.changes = []

    def restart(self, seq):
        """After a restart: nothing before seq is known."""
        self.seq = self.floor = seq
        self.changes = []

    def record(self, sid, source, kind, payload):
        """Log one change; returns the event listeners get."""
        self.seq += 1
        self.changes.append((self.seq, sid, source, kind, _slim(kind, payload)))
        if len(self.changes) > self.max_len:
            drop = len(self.changes) // 2
            self.floor = self.changes[drop - 1][0]
            del self.changes[:drop]
        ev = {"type": kind, "level": source.level, "project_path": source.project_path}
        ev.update(payload)
        return ev

    def after(self, mark):
        """Index in self.changes of the first change with seq > mark."""
        if not self.changes:
            return 0
        return min(len(self.changes), max(0, mark + 1 - self.changes[0][0]))

    def pending(self, mark, sid):
        return sum(1 for c in self.changes[self.after(mark):] if c[1] != sid)

    def trim(self, marks):
        """Drop what every session has seen."""
        floor = min(marks) if marks else self.seq
        drop = self.after(floor)
        if drop:
            self.floor = self.changes[drop - 1][0]
            del self.changes[:drop]
        if not self.changes:
            self.floor = max(self.floor, floor)

    def diff(self, sources, sid, mark):
        """What changed in `sources` after `mark` by anyone but `sid`, read from the current
        graphs: the body of a kg_sync answer (without session_id)."""
        resync = mark < self.floor
        node_keys, edge_keys, how = self._touched(sources, sid, mark, resync)
        out = _current(node_keys, edge_keys, how)
        out["full_resync"] = resync
        return out

    def _touched(self, sources, sid, mark, resync):
        """(level, node id) -> source and (level, edge key) -> (source, edge ends) of every
        node and edge to report; everything in `sources` on a resync."""
        wanted = set(sources)
        node_keys, edge_keys, how = {}, {}, {}  # how: (level, id) -> ("repository", by) / ("left", None)
        if resync:
            for src in sources:
                g = src.graph
                for nid in g.nodes:
                    node_keys[(src.level, nid)] = src
                for key, e in g.edges.items():
                    edge_keys[(src.level, key)] = (src, e)
        for i in range(self.after(mark), len(self.changes)):
            _seq, by, src, kind, payload = self.changes[i]
            if src not in wanted or (by is not None and by == sid):
                continue
            level = src.level
            if kind == "node_put":
                key = (level, payload["node"]["id"])
                node_keys[key] = src
                how[key] = ("repository", payload.get("by")) if payload.get("via") else None
            elif kind == "node_deleted":
                node_keys[(level, payload["id"])] = src
                how[(level, payload["id"])] = ("left", None) if payload.get("left") else None
                for e in payload["edges_removed"]:
                    edge_keys[(level, model.edge_key(e["from"], e["to"], e["rel"]))] = (src, e)
            elif kind in ("edge_put", "edge_deleted"):
                e = payload["edge"]
                edge_keys[(level, model.edge_key(e["from"], e["to"], e["rel"]))] = (src, e)
            elif kind == "compacted":
                for nid in payload["archived"] + payload["restored"] + payload["orphaned"] + payload["deleted"]:
                    node_keys[(level, nid)] = src
        return node_keys, edge_keys, how


def _current(node_keys, edge_keys, how=None):
    """The current state of each touched node and edge, in key order; orphaned nodes, and nodes
    and edges holding a credential, are left out (kg_read does not show them either). A node gone
    because the checkout changed is in `left_nodes`, not `deleted_nodes`; `from_repository` counts
    the nodes a pickup of `.kg/` brought, and who wrote them."""
    how = how or {}
    nodes, deleted_nodes, left_nodes, edges, deleted_edges = [], [], [], [], []
    pulled, authors = 0, {}
    for (level, nid), src in sorted(node_keys.items(), key=lambda kv: kv[0]):
        node = src.graph.nodes.get(nid)
        way = how.get((level, nid))
        if node is None:
            (left_nodes if way and way[0] == "left" else deleted_nodes).append({"level": level, "id": nid})
        elif model.node_state(node) != model.ORPHANED and src.graph.shown(nid):
            item = model.public_node(node)
            item["level"] = level
            nodes.append(item)
            if way and way[0] == "repository":
                pulled += 1
                name = way[1] or node.get("_by")
                if name:
                    authors[name] = authors.get(name, 0) + 1
    for (level, key), (src, e) in sorted(edge_keys.items(), key=lambda kv: kv[0]):
        cur = src.graph.edges.get(key)
        if cur is None:
            deleted_edges.append({"level": level, "from": e["from"], "to": e["to"], "rel": e["rel"]})
        elif src.graph.edge_shown(key, cur):
            item = model.public_edge(cur)
            item["level"] = level
            edges.append(item)
    out = {"nodes": nodes, "edges": edges, "deleted_nodes": deleted_nodes, "deleted_edges": deleted_edges}
    if left_nodes:
        out["left_nodes"] = left_nodes
    if pulled:
        out["from_repository"] = {"nodes": pulled, "by": dict(sorted(authors.items()))}
    return out
