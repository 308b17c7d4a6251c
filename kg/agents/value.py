"""Evidence of value for what the hooks choose to preload: knowledge used on many separate
occasions (a coding rule, a build quirk) is worth a place even when it was not used last.

Rules owned here:
- A use is what kgd observes: a write, a read by id, a recall by prompt or file (each refreshes a
  node's recency). At each SessionStart the graph is scanned (`observe`): a node whose recency is
  later than the previous scan was used since, and counts once however many reads it had.
- Uses closer than SPACING to the last counted one are one occasion: a topic worked on every day
  for a week counts a few occasions, a convention needed once a week in different work counts
  every time. The count decays with HALF_LIFE (knowledge no longer needed fades).
- The tally is personal attention, kept in the graph's `_meta["use"]` ({id: [score, last counted
  time]}) with `_meta["use_scan"]`, beside other personal state in the storage root (never shared);
  it is saved with the graph file's next whole write: a crash loses at most the latest uses.
- Breadth: the parts of the project (a file's folder name) that a node's neighbours are about,
  other than its own; a rule linked from knowledge of many parts of the code reaches several.
- `reserve` keeps SHARE of a level's room for the active nodes of best `worth` (occasions and
  breadth) that the order it is given (recency first) would leave out. `to_lift` names the archived or
  orphaned nodes that would have a reserved place if active (at most LIFT_MAX): the hook reads
  them back (a read by id promotes) before it preloads. Such a read is the hook's own, not a use:
  `own` records it and the next scan does not count it.
"""

import math

from ..core import model
from . import recall

SPACING = 2 * 86400.0     # uses closer than this to the last counted one are the same occasion
HALF_LIFE = 60 * 86400.0  # an occasion counts half after this long
MIN_SCORE = 2.0           # occasions (decayed) before a node earns a reserved place
SHARE = (1, 2)            # of a level's gist room reserved for the nodes of best worth
LIFT_MAX = 12            # archived nodes read back per level and session start
BREADTH_CAP = 8           # other parts of the project counted at most
WITH_MAX = BREADTH_CAP + 2  # parts of the project kept per node as used with it
FLOOR = 0.5               # occasions (decayed) below which a node is not weighed at all
CANDIDATES = 400          # nodes weighed at most, those used most lately
TOGETHER_MAX = 200        # nodes used since the last scan beyond which none is "used with" another
BROAD = 2                 # ... and enough to earn a reserved place without uses


def _tally(g):
    use = g.meta.get("use")
    if not isinstance(use, dict):
        use = g.meta["use"] = {}
    return use


def observe(g, now):
    """Count the uses since the last scan (lock held). Returns the tally {id: [score, last]}."""
    use = _tally(g)
    last_scan = g.meta.get("use_scan")
    # the first scan of a graph counts what was used in the last HALF_LIFE once (not together)
    first = not isinstance(last_scan, (int, float))
    last_scan = now - HALF_LIFE if first else float(last_scan)
    for gone in [nid for nid in use if nid not in g.nodes]:
        del use[gone]
    own = g.meta.get("use_own") if isinstance(g.meta.get("use_own"), dict) else {}
    used = []
    for nid, node in g.nodes.items():
        r = model.recency(node)
        if r <= last_scan or own.get(nid) == r:
            continue
        used.append(nid)
        rec = use.get(nid)
        if not _valid(rec):
            use[nid] = [1.0, r]
        elif r - rec[1] >= SPACING:
            use[nid] = [decayed(rec, r) + 1.0, r]
    if not first:
        _used_with(g, used)
    g.meta["use_scan"] = now
    g.meta["use_own"] = {}
    return use


def _used_with(g, used):
    """Record, for each node used since the last scan, the other parts of the project the nodes
    used with it are about (at most WITH_MAX kept)."""
    with_ = g.meta.get("use_with")
    if not isinstance(with_, dict):
        with_ = g.meta["use_with"] = {}
    for gone in [nid for nid in with_ if nid not in g.nodes]:
        del with_[gone]
    if len(used) > TOGETHER_MAX:  # an import or a bulk edit, not one session's work
        return
    areas = {nid: _areas(g, nid) for nid in used}
    together = set().union(*areas.values()) if areas else set()
    for nid in used:
        old = with_.get(nid)
        old = [a for a in old if isinstance(a, str)] if isinstance(old, list) else []
        new = sorted(set(old) | (together - areas[nid]))
        with_[nid] = new[:WITH_MAX]


def own(g, nids):
    """The hook itself read these (to lift them): their new recency is not a use."""
    mine = g.meta.get("use_own") if isinstance(g.meta.get("use_own"), dict) else {}
    for nid in nids:
        if nid in g.nodes:
            mine[nid] = model.recency(g.nodes[nid])
    g.meta["use_own"] = mine


_NUM = (int, float)


def _valid(rec):
    return type(rec) is list and len(rec) == 2 and type(rec[0]) in _NUM and type(rec[1]) in _NUM


def decayed(rec, now):
    score, last = rec
    return score * math.pow(0.5, max(0.0, now - last) / HALF_LIFE)


def score(g, nid, now):
    rec = _tally(g).get(nid)
    return decayed(rec, now) if _valid(rec) else 0.0


def _area(path, root):
    """The part of the project a file is in: the name of its folder (src/db/pool.py and
    tests/db/test_pool.py are both about db; a file at the root is about the whole project)."""
    parts = recall.path_parts(recall.relative_path(path, root))
    return parts[-2] if len(parts) > 1 else "."


def _areas(g, nid, memo=None):
    """Areas of the files a node is about: its touches and the file-path ends of its edges."""
    if memo is not None and nid in memo:
        return memo[nid]
    node = g.nodes.get(nid) or {}
    paths = [t for t in node.get("touches", ()) if isinstance(t, str)]
    for key in g.adj.get(nid, ()):
        e = g.edges.get(key)
        if e is not None:
            other = e["to"] if e["from"] == nid else e["from"]
            if other not in g.nodes:
                paths.append(other)
    out = set()
    for p in paths:
        a = memo.get(("path", p)) if memo is not None else None
        if a is None:
            a = _area(p, g.project_path)
            if memo is not None:
                memo[("path", p)] = a
        out.add(a)
    if memo is not None:
        memo[nid] = out
    return out


def breadth(g, nid, memo=None):
    """How many other parts of the project the node's neighbours are about (at most BREADTH_CAP):
    knowledge linked from many topics (a coding rule, a build quirk) reaches several."""
    mine = _areas(g, nid, memo)
    seen = set(a for a in (g.meta.get("use_with") or {}).get(nid, ()) if isinstance(a, str))
    for key in g.adj.get(nid, ()):
        e = g.edges.get(key)
        if e is None:
            continue
        other = e["to"] if e["from"] == nid else e["from"]
        if other in g.nodes and other != nid:
            seen |= _areas(g, other, memo)
    return min(BREADTH_CAP, len(seen - mine))


def worth(g, nid, now, memo=None):
    """(occasions of use + 1) x (1 + breadth)^2, for a node used on MIN_SCORE occasions or
    reaching BROAD other parts of the project; 0 otherwise (it earns no reserved place). Breadth
    weighs most: what the day's topic needs again, recency and recall already bring."""
    s = score(g, nid, now)
    b = breadth(g, nid, memo)
    return (s + 1) * (1 + b) ** 2 if s >= MIN_SCORE or b >= BROAD else 0.0


def _best(g, ids, cost, budget, now, stale=()):
    """The ids of best worth that fit in budget. Only the CANDIDATES nodes used most lately
    (score at least FLOOR) are weighed: breadth looks at every neighbour, and a session start
    on a graph of 10,000 nodes just imported must stay in milliseconds."""
    memo = {}  # areas per node, computed once per call
    use = _tally(g)
    lately = []
    for nid in ids:
        rec = use.get(nid)
        if _valid(rec):
            s = decayed(rec, now)
            if s >= FLOOR:
                lately.append((-s, nid))
    lately.sort()
    scored = [(worth(g, nid, now, memo), nid) for _, nid in lately[:CANDIDATES]]
    best = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1] in stale, x[1]))  # current first
    first, used = [], 0
    for _, nid in best:
        c = cost(nid)
        if used + c > budget:
            continue
        first.append(nid)
        used += c
    return first


def _split(g, ordered, cost, room):
    """The head of `ordered` that fits in the room SHARE leaves, and the reserve's budget."""
    num, den = SHARE
    budget = room * num // den
    head, used = [], 0
    for nid in ordered:
        c = cost(nid)
        if used + c > room - budget:
            break
        head.append(nid)
        used += c
    return head, budget


def reserve(g, ordered, cost, room, now, stale=()):
    """`ordered` (active ids, by recency) as the preload takes them from a level's `room`
    (cost(nid) each): the head that fits in all but SHARE of it, then the nodes of best worth
    that the head left out, within SHARE (at equal worth, those not in `stale` first), then the rest."""
    head, budget = _split(g, ordered, cost, room)
    taken = set(head)
    extra = _best(g, [nid for nid in ordered if nid not in taken], cost, budget, now, stale)
    taken.update(extra)
    return head + extra + [nid for nid in ordered if nid not in taken]


def to_lift(g, ordered, cost, room, now):
    """Archived or orphaned ids that the reserve would hold if they were active."""
    head, budget = _split(g, ordered, cost, room)
    taken = set(head)
    extra = _best(g, [nid for nid in g.nodes if nid not in taken], cost, budget, now)
    return [nid for nid in extra if not model.is_active(g.nodes[nid])][:LIFT_MAX]


def lift(store, session, order_of, cost_of, room, now):
    """At session start: count the uses since the last one, then read back (a read promotes) the
    archived nodes the reserve would hold, outside the lock (a read waits for its fsync).
    Returns (change mark, {level: order_of(g)}) for the preload to reuse when nothing was read
    back and nothing changed meanwhile (on a big graph the order costs tens of milliseconds)."""
    lifted, orders = [], {}
    with store.lock:
        mark = store.log.seq
        for g in store.graphs_for(session):
            observe(g, now)
            orders[g.level] = order_of(g)
            ids = to_lift(g, orders[g.level], lambda nid, g=g: cost_of(g, nid), room, now)
            if ids:
                lifted.append((g, ids))
    for g, ids in lifted:
        store.read_nodes(session, ids, level=g.level)
        with store.lock:
            own(g, ids)
    return None if lifted else (mark, orders)
