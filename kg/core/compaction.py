"""Compaction: the archive, resurrection, orphan and deletion passes (contract section 5). Pure.

Rules this file owns (M = max_tokens; the estimate is model.estimate_tokens):

- Percentile of a value among n values: (r - 1) / (n - 1), r its rank from lowest (1) to
  highest, ties taking the mean of their ranks; 0.5 when n == 1.
- Grace: a node is past its grace period when now - _created_ts >= grace_s (creation only;
  a node without _created_ts counts as created at 0, i.e. long past grace — the store
  fills the field when it loads an older file).
- Score of a node within a set S: 0.33 x pct(recency) + 0.66 x pct(connectedness), both
  percentiles over S. recency = model.recency (max of last write and last read).
  connectedness = 0.66 x in-degree + 0.33 x out-degree over the edges whose other end is an
  active node or not a node of this graph at all (a file path), read from the current
  states. A self-loop on an active node counts once in and once out.
- Pass 1, archive: only when the estimate exceeds M. Score every active node past grace
  (S = those nodes); archive lowest score first, ties older recency first then id
  ascending, until the estimate is at most 0.8 x M or no such node is left. Scores are
  computed once at the start of the pass; the estimate is kept up to date after every
  archive (the node's own tokens, and each of its edges that no longer has an active node
  at either end: an edge counts only while one end is an active node of this graph, contract
  5 revised 2026-12-01). Edges stay.
- Pass 1b, resurrection: only when pass 1 archived something. Re-score with S = every
  archived (not orphaned) node plus every active node past grace, connectedness from the
  states pass 1 left. Pair the best-scoring node archived before this compaction (ties:
  newer recency first, then id ascending) with the worst-scoring node pass 1 archived
  (ties: older recency first, then id ascending). If the first outscores the second by at
  least 0.05 (compared exactly, in rational arithmetic, so a gap of exactly 0.05 swaps),
  they swap places: the first is restored to active and the second stays archived, as
  pass 1 left it — relative to the graph before compaction, the two traded states. The
  swap is refused, and the pass stops, when restoring the first would take the estimate
  above M. The pass also stops at the first pair that misses the 0.05 gap (later pairs
  can only be closer). Each node swaps at most once: both leave their pools. Scores are
  NOT recomputed between swaps; a restore changes other nodes' connectedness, but the
  pass judges every pair by the scores taken at its start.
- Pass 2, orphan: each archived (not orphaned) node costs 5 tokens; while that exceeds
  0.30 x M, orphan (_orphaned_ts = now, _archived stays true) the archived node with the
  fewest edges to active nodes (either direction; file-path ends and edges to archived or
  orphaned nodes do not count), ties older recency first, then id ascending. Orphaning
  does not change the estimate.
- Deletion: an orphaned node with now - max(_orphaned_ts, _read_ts, _write_ts) >=
  orphan_grace_s is deleted together with every edge that has it as an end.
- Reads and puts (contract 3): reading an archived or orphaned node by id makes it active
  and refreshes its recency (_read_ts = now); reading an ARCHIVED node also brings its
  orphaned neighbours (joined by an edge in either direction) back to archived (chain
  rescue; their recency is not refreshed, they were not read). Reading an active node only
  refreshes _read_ts. A put revives an archived or orphaned node to active.

Everything here is deterministic for a given graph, clock and settings: every ordering is
total (score, recency, id) and dict order never decides anything. compact() builds one
adjacency index per call and keeps the estimate incrementally, so a pass costs
O((n + e) log n). Thresholds are compared in integers (5 x estimate <= 4 x M, 50 x count >
3 x M) so float rounding cannot move a boundary.
"""

from collections import namedtuple

from . import model
from .model import (
    ACTIVE,
    ARCHIVED,
    EDGE_TOKENS,
    ORPHANED,
    is_active,
    node_state,
    node_tokens,
    recency,
    set_active,
    set_archived,
    set_orphaned,
)

DAY = 86400.0
ORPHAN_COST = 5              # tokens an archived node costs in kg_read (its id line)
ARCHIVE_TARGET = (4, 5)      # pass 1 stops at estimate <= 4/5 of max_tokens
ORPHAN_SHARE = (3, 10)       # archived nodes may cost at most 3/10 of max_tokens
RESURRECT_GAP = (5, 100)     # pass 1b swaps when the score gap is >= 5/100
W_RECENCY = (33, 100)        # score weight of recency; connectedness weighs 2 x 0.33 = 0.66,
                             # which the exact integer keys rely on


class Settings(namedtuple("Settings", "max_tokens grace_s orphan_grace_s")):
    """Immutable pass settings (a namedtuple: dataclasses would cost start-up memory)."""

    __slots__ = ()

    def __new__(cls, max_tokens=model.DEFAULT_MAX_TOKENS, grace_s=model.DEFAULT_GRACE_DAYS * DAY,
                orphan_grace_s=model.DEFAULT_ORPHAN_GRACE_DAYS * DAY):
        return super().__new__(cls, max_tokens, grace_s, orphan_grace_s)


class Result:
    """What one compact() call did, pass by pass, in the order it did it.

    A node archived by pass 1 and orphaned by pass 2 of the same call is listed in both.
    `estimate_before` / `estimate_after` are the graph's token estimate around the call,
    so a store that caches the estimate can take the new value without recounting.
    """

    def __init__(self, archived=None, restored=None, orphaned=None, deleted=None, deleted_edges=None,
                 estimate_before=0, estimate_after=0):
        self.archived = list(archived or [])
        self.restored = list(restored or [])
        self.orphaned = list(orphaned or [])
        self.deleted = list(deleted or [])
        self.deleted_edges = list(deleted_edges or [])
        self.estimate_before = estimate_before
        self.estimate_after = estimate_after

    def __eq__(self, other):
        return isinstance(other, Result) and self.__dict__ == other.__dict__

    def __repr__(self):
        return "Result(archived=%r, restored=%r, orphaned=%r, deleted=%r)" % (
            self.archived, self.restored, self.orphaned, self.deleted)

    @property
    def changed(self):
        return bool(self.archived or self.restored or self.orphaned or self.deleted
                    or self.deleted_edges)

    @property
    def changed_ids(self):
        """Ids of the nodes whose state or existence changed."""
        return set(self.archived) | set(self.restored) | set(self.orphaned) | set(self.deleted)


# ---- percentiles and scores ----

def _double_ranks(values):
    """2 x (mean rank - 1) for each value, an integer: positions i..j (0-based) tied give i + j."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    out = [0] * n
    i = 0
    while i < n:
        j = i
        v = values[order[i]]
        while j + 1 < n and values[order[j + 1]] == v:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = i + j
        i = j + 1
    return out


def past_grace(node, now, settings):
    return now - (node.get("_created_ts") or 0) >= settings.grace_s


class _Graph:
    """One compact() call's working view: adjacency index, cached states, running estimate."""

    def __init__(self, nodes, edges, index=None):
        self.nodes = nodes
        self.edges = edges
        if index is not None:
            self._from_index(*index)
            return
        self.state = {nid: node_state(n) for nid, n in nodes.items()}
        self.recency = {nid: recency(n) for nid, n in nodes.items()}
        # node id -> [(edge key, other end, counts as out, counts as in)]
        adj = {nid: [] for nid in nodes}
        state = self.state
        live_edges = 0
        for key, e in edges.items():
            f, t = e["from"], e["to"]
            lf, lt = adj.get(f), adj.get(t)
            if (lf is not None and state[f] == ACTIVE) or (lt is not None and state[t] == ACTIVE):
                live_edges += 1                  # one end is an active node of this graph
            if f == t:
                if lf is not None:
                    lf.append((key, f, True, True))
                continue
            if lf is not None:
                lf.append((key, t, True, False))
            if lt is not None:
                lt.append((key, f, False, True))
        self.adj = adj
        # model.estimate_tokens, from the cached states (tests hold the two equal)
        self.estimate = (sum(node_tokens(nodes[v]) for v, st in state.items() if st == ACTIVE)
                         + EDGE_TOKENS * live_edges)

    def _from_index(self, candidates, adjacency, estimate):
        """The working view from a store's own index: only the active and archived nodes
        (`candidates`), their neighbours and their edges, so the cost of a pass after a write
        does not grow with the orphaned part of the graph. `adjacency` maps a node id to the
        keys of its edges; `estimate` is the store's running model.estimate_tokens."""
        nodes, edges = self.nodes, self.edges
        adj = {}
        state, rec = {}, {}
        for v in candidates:
            n = nodes[v]
            state[v] = node_state(n)
            rec[v] = recency(n)
            lst = adj[v] = []
            for key in adjacency.get(v, ()):
                e = edges[key]
                f, t = e["from"], e["to"]
                if f == t:
                    lst.append((key, v, True, True))
                    continue
                other = t if f == v else f
                lst.append((key, other, f == v, t == v))
                if other not in state:
                    on = nodes.get(other)
                    if on is not None:
                        state[other] = node_state(on)
                        rec[other] = recency(on)
        self.state, self.recency, self.adj = state, rec, adj
        self.estimate = estimate

    def connectedness2(self, nid):
        """2 x connectedness / 0.33 = 2 x in-degree + out-degree, an integer."""
        state = self.state
        c = 0
        for _key, other, out, inn in self.adj[nid]:
            st = state.get(other)
            if st is None or st == ACTIVE:
                c += (2 if inn else 0) + (1 if out else 0)
        return c

    def active_degree(self, nid):
        state = self.state
        return sum(1 for _k, other, _o, _i in self.adj[nid]
                   if state.get(other) == ACTIVE)

    def _dead_edges(self, nid):
        """Edges of nid that stop counting once nid itself is not active: those whose other end
        is not an active node (a file path, a node of another level, a non-active node, nid itself)."""
        state = self.state
        return sum(1 for _key, other, _o, _i in self.adj[nid] if other == nid or state.get(other) != ACTIVE)

    def score_keys(self, ids):
        """Integer keys K with score = 0.33 x K / (2 (n - 1)) (0.495 when n == 1)."""
        rr = _double_ranks([self.recency[v] for v in ids])
        rc = _double_ranks([self.connectedness2(v) for v in ids])
        return {v: rr[i] + 2 * rc[i] for i, v in enumerate(ids)}

    def archive(self, nid):
        """Active -> archived, keeping the estimate: its tokens, and each edge left with no live end."""
        node = self.nodes[nid]
        delta = -node_tokens(node) - EDGE_TOKENS * self._dead_edges(nid)
        set_archived(node)
        self.state[nid] = ARCHIVED
        self.estimate += delta

    def restore_delta(self, nid):
        return node_tokens(self.nodes[nid]) + EDGE_TOKENS * self._dead_edges(nid)

    def restore(self, nid, delta):
        set_active(self.nodes[nid])
        self.state[nid] = ACTIVE
        self.estimate += delta

    def orphan(self, nid, now):
        set_orphaned(self.nodes[nid], now)
        self.state[nid] = ORPHANED


# ---- the passes ----

def _archive_pass(g, now, settings, result):
    m = settings.max_tokens
    if g.estimate <= m:
        return
    eligible = [v for v, st in g.state.items() if st == ACTIVE and past_grace(g.nodes[v], now, settings)]
    if not eligible:
        return
    keys = g.score_keys(eligible)
    rec = g.recency
    eligible.sort(key=lambda v: (keys[v], rec[v], v))
    num, den = ARCHIVE_TARGET
    for v in eligible:
        if den * g.estimate <= num * m:
            break
        g.archive(v)
        result.archived.append(v)


def _resurrect_pass(g, now, settings, result, archived_before):
    if not result.archived or not archived_before:
        return
    pool = [v for v, st in g.state.items()
            if st == ARCHIVED or (st == ACTIVE and past_grace(g.nodes[v], now, settings))]
    before = [v for v in pool if v in archived_before]
    if not before:
        return
    n = len(pool)
    keys = g.score_keys(pool)
    rec = g.recency
    before.sort(key=lambda v: (-keys[v], -rec[v], v))
    this_pass = sorted(result.archived, key=lambda v: (keys[v], rec[v], v))
    # score gap = 0.33 (Kb - Kw) / (2 (n - 1)) >= 5/100  <=>  33 x 100 (Kb - Kw) >= 5 x 100 x 2 (n - 1)
    gap_num, gap_den = RESURRECT_GAP
    w_num, w_den = W_RECENCY
    for b, w in zip(before, this_pass):
        if w_num * gap_den * (keys[b] - keys[w]) < gap_num * w_den * 2 * (n - 1):
            break
        delta = g.restore_delta(b)
        if g.estimate + delta > settings.max_tokens:
            break
        g.restore(b, delta)
        result.restored.append(b)
        # w stays archived: pass 1 already archived it, so the two have now traded places.


def _orphan_pass(g, now, settings, result):
    archived = [v for v, st in g.state.items() if st == ARCHIVED]
    num, den = ORPHAN_SHARE
    m = settings.max_tokens
    count = len(archived)
    if den * ORPHAN_COST * count <= num * m:
        return
    deg = {v: g.active_degree(v) for v in archived}
    rec = g.recency
    archived.sort(key=lambda v: (deg[v], rec[v], v))
    for v in archived:
        if den * ORPHAN_COST * count <= num * m:
            break
        g.orphan(v, now)
        result.orphaned.append(v)
        count -= 1


def _unrecalled_since(node):
    return max(node.get("_orphaned_ts") or 0, node.get("_read_ts") or 0, node.get("_write_ts") or 0)


def _delete_pass(g, now, settings, result):
    doomed = sorted(v for v, st in g.state.items()
                    if st == ORPHANED and now - _unrecalled_since(g.nodes[v]) >= settings.orphan_grace_s)
    if not doomed:
        return
    keys = set()
    for v in doomed:
        for key, _other, _o, _i in g.adj[v]:
            keys.add(key)
    for key in sorted(keys):
        e = g.edges[key]
        if g.state.get(e["from"]) == ACTIVE or g.state.get(e["to"]) == ACTIVE:
            g.estimate -= EDGE_TOKENS
        del g.edges[key]
        result.deleted_edges.append(key)
    for v in doomed:
        del g.nodes[v]
        del g.state[v]
    result.deleted.extend(doomed)


def compact(nodes, edges, now, settings=Settings(), index=None):
    """Run pass 1, 1b, 2 and deletion on one graph, mutating `nodes` and `edges` in place.

    `index` = (ids of every active and archived node, node id -> its edge keys, the current
    estimate) lets a store that keeps these run the passes without visiting orphaned nodes;
    the deletion pass then does not run (maintenance passes call without an index)."""
    g = _Graph(nodes, edges, index)
    result = Result(estimate_before=g.estimate)
    archived_before = {v for v, st in g.state.items() if st == ARCHIVED}
    _archive_pass(g, now, settings, result)
    _resurrect_pass(g, now, settings, result, archived_before)
    _orphan_pass(g, now, settings, result)
    if index is None:
        _delete_pass(g, now, settings, result)
    result.estimate_after = g.estimate
    return result


def needs_compaction(estimate, archived_count, settings=Settings()):
    """The cheap check after a write: would pass 1 or pass 2 do anything? (Deletion depends on
    the clock alone and is left to the maintenance passes, which always run compact().)"""
    m = settings.max_tokens
    num, den = ORPHAN_SHARE
    return estimate > m or den * ORPHAN_COST * archived_count > num * m


# ---- state changes caused by reads and puts (contract 3) ----

def _neighbour_ids(edges, node_id):
    out = set()
    for e in edges.values():
        if e["from"] == node_id:
            out.add(e["to"])
        elif e["to"] == node_id:
            out.add(e["from"])
    return out


def promote_on_read(nodes, edges, node_id, now, neighbours=None):
    """A read of `node_id` by id: returns the ids whose state changed (the node first, then any
    rescued neighbours in id order). `neighbours` lets a store that indexes its edges pass the
    node's neighbour ids instead of having every edge scanned; it is only needed when the node
    is archived."""
    node = nodes.get(node_id)
    if node is None:
        return []
    state = node_state(node)
    node["_read_ts"] = now
    if state == ACTIVE:
        return []
    set_active(node)
    changed = [node_id]
    if state == ARCHIVED:
        if neighbours is None:
            neighbours = _neighbour_ids(edges, node_id)
        for other in sorted(set(neighbours)):
            n = nodes.get(other)
            if other != node_id and n is not None and node_state(n) == ORPHANED:
                set_archived(n)
                changed.append(other)
    return changed


def revive_on_put(node):
    """A put makes an archived or orphaned node active again; True when it was not active.
    The caller stamps _write_ts, which refreshes recency."""
    if is_active(node):
        return False
    set_active(node)
    return True
