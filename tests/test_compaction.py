"""Compaction rules (contract section 5, and the read/put promotions of section 3).

Three layers: a table of small graphs whose outcome was worked out by hand (the arithmetic is
in each case's comment), invariants over 300 seeded random graphs, and a cross-check of the
same random graphs against a slow reference written straight from the contract's text with
exact fractions.

Notation in the comments: rec = recency in days, conn2 = 2 x in-degree + out-degree over
counting edges (connectedness / 0.33), pr / pc = percentile of recency / connectedness,
score = 0.33 pr + 0.66 pc. Every node costs 20 tokens unless its `tok` says otherwise; every
counting edge costs 15.
"""

import copy
import random
from fractions import Fraction

import pytest

from kg.core.compaction import (
    DAY,
    Result,
    Settings,
    _double_ranks,
    _Graph,
    compact,
    needs_compaction,
    promote_on_read,
    revive_on_put,
)
from kg.core.model import ACTIVE, ARCHIVED, ORPHANED, edge_key, estimate_tokens, is_active, node_state, recency

GRACE = 7 * DAY
ORPHAN_GRACE = 365 * DAY


# ---- building graphs ----

def N(nid, created=0, write=None, read=None, tok=20, state=ACTIVE, orphaned=None):
    """A node; times in days. tok = its token cost when active (20 + gist length // 4)."""
    n = {
        "id": nid, "gist": "g" * (4 * (tok - 20)), "notes": [], "touches": [],
        "_created_ts": created * DAY,
        "_write_ts": (created if write is None else write) * DAY,
        "_read_ts": None if read is None else read * DAY,
    }
    if state != ACTIVE:  # state keys only when set, as kgd writes them (the reference plugin reads presence)
        n["_archived"] = True
    if orphaned is not None:
        n["_orphaned_ts"] = orphaned * DAY
    return n


def G(nodes, edges=()):
    ns = {n["id"]: n for n in nodes}
    es = {}
    for e in edges:
        f, t = e[0], e[1]
        rel = e[2] if len(e) > 2 else "rel"
        es[edge_key(f, t, rel)] = {"from": f, "to": t, "rel": rel, "notes": []}
    return ns, es


def fillers(prefix, count, write):
    return [N("%s%02d" % (prefix, i), write=write) for i in range(count)]


def states(nodes):
    return {nid: node_state(n) for nid, n in nodes.items()}


# ---- percentiles and scores, from the exact integer keys the passes compare ----

def percentiles(values):
    """Contract 5: (r - 1) / (n - 1) from compaction's doubled mean ranks; 0.5 for n == 1."""
    n = len(values)
    if n == 1:
        return [0.5]
    return [r2 / (2.0 * (n - 1)) for r2 in _double_ranks(values)]


def scores(nodes, edges, ids):
    """The contract's score of each of ids from compaction's keys: score = 0.33 K / (2 (n - 1))."""
    keys = _Graph(nodes, edges).score_keys(ids)
    return {v: 0.33 * keys[v] / (2.0 * (len(ids) - 1)) for v in ids}


@pytest.mark.parametrize("values, expected", [
    ([], []),
    ([7.0], [0.5]),                                   # n == 1
    ([1, 2, 3], [0.0, 0.5, 1.0]),                     # (r-1)/(n-1) = 0/2, 1/2, 2/2
    ([5, 5], [0.5, 0.5]),                             # ranks 1,2 -> mean 1.5 -> 0.5/1
    ([3, 1, 3, 2], [2.5 / 3, 0.0, 2.5 / 3, 1 / 3]),   # 1:r1, 2:r2, 3s: r3,r4 -> 3.5 -> 2.5/3
    ([0, 0, 0, 1, 2], [0.25, 0.25, 0.25, 0.75, 1.0]),  # zeros r1..3 -> 2 -> 1/4; 1: 3/4; 2: 4/4
    ([4, 4, 4], [0.5, 0.5, 0.5]),                     # all tied: mean rank 2 -> 1/2
])
def test_percentiles(values, expected):
    assert percentiles(values) == pytest.approx(expected)


def test_scores_match_the_formula():
    # u: rec 10, one out-edge to a file -> conn2 1;  v: rec 30, no edges -> conn2 0;
    # w: rec 20, one in-edge from a file -> conn2 2.   n = 3.
    # pr: u 0, w 1/2, v 1.  pc: v 0, u 1/2, w 1.
    # u = 0.33*0 + 0.66*0.5 = 0.33;  v = 0.33*1 + 0 = 0.33;  w = 0.165 + 0.66 = 0.825
    nodes, edges = G([N("u", write=10), N("v", write=30), N("w", write=20)],
                     [("u", "src/u.py"), ("docs/w.md", "w")])
    s = scores(nodes, edges, ["u", "v", "w"])
    assert s == pytest.approx({"u": 0.33, "v": 0.33, "w": 0.825})


# ---- the hand-worked table ----

CASES = [
    dict(
        id="pass1-recency-only",
        # six isolated nodes, rec 10..60. conn2 all 0 -> pc 0.5 for all; pr a=0 .. f=1.
        # estimate 6*20 = 120 > M=100; target <= 80. archive a: 100 > 80; archive b: 80 <= 80 stop.
        nodes=[N(x, write=w) for x, w in zip("abcdef", (10, 20, 30, 40, 50, 60))],
        edges=[], max_tokens=100,
        archived=["a", "b"], estimate_after=80,
    ),
    dict(
        id="pass1-grace-and-file-ends",
        # a: rec 50, edge a->src/a.py; b: rec 60, edge b->src/b.py; y: created day 93 (exactly
        # 7 days before now=100: past grace); x: created day 94 (6 days: in grace, never scored).
        # Eligible a, b, y (n=3). pr: a 0, b .5, y 1. conn2: y 0, a 1, b 1 -> pc y 0, a=b 0.75
        # (ranks 2,3 -> 2.5 -> 1.5/2). score y = .33; a = .495; b = .165 + .495 = .66.
        # estimate 4*20 + 2*15 = 110 > M=100, target 80. archive y: 90; archive a: 55 (its file
        # edge stops counting with it: contract 5 revised) <= 80 stop. (Were x eligible it would
        # score .44 and go before a.)
        nodes=[N("a", write=50), N("b", write=60), N("y", created=93), N("x", created=94)],
        edges=[("a", "src/a.py"), ("b", "src/b.py")], max_tokens=100,
        archived=["y", "a"], estimate_after=55,
    ),
    dict(
        id="pass1-score-tie-older-recency-first",
        # the graph of test_scores_match_the_formula with u renamed y and v renamed x, so that
        # id order and recency order disagree: y: rec 10, y->src/y.py (conn2 1); x: rec 30, no
        # edge (conn2 0); w: rec 20, docs/w.md->w (conn2 2). score y = x = .33, w .825.
        # tie y/x -> older recency first: y (id order would pick x). estimate 60 + 30 = 90 >
        # M=88; archive y with its file edge: 55 <= 70.4 stop.
        nodes=[N("y", write=10), N("x", write=30), N("w", write=20)],
        edges=[("y", "src/y.py"), ("docs/w.md", "w")], max_tokens=88,
        archived=["y"], estimate_after=55,
    ),
    dict(
        id="pass1-full-tie-id-ascending",
        # a, b: rec 10, no edges; c: rec 20 with c->src/c.py. pr a=b .25 (ranks 1,2 -> 1.5 ->
        # .5/2), c 1; pc a=b .25, c 1. a and b tie on score and recency -> id: a.
        # estimate 60 + 15 = 75 > M=70, target 56. archive a: 55 stop.
        nodes=[N("b", write=10), N("a", write=10), N("c", write=20)],
        edges=[("c", "src/c.py")], max_tokens=70,
        archived=["a"], estimate_after=55,
    ),
    dict(
        id="pass1-single-eligible-n1",
        # old is the only node past grace (n=1: pr = pc = .5). new1/new2 created day 99.
        # estimate 60 > M=50, target 40. archive old: 40 <= 40 stop.
        nodes=[N("old"), N("new1", created=99), N("new2", created=99)],
        edges=[], max_tokens=50,
        archived=["old"], estimate_after=40,
    ),
    dict(
        id="pass1-runs-out-of-eligible",
        # same graph, M=30, target 24: archive old -> 40, still > 24, but new1/new2 are in
        # grace: the pass ends with the estimate above the budget.
        nodes=[N("old"), N("new1", created=99), N("new2", created=99)],
        edges=[], max_tokens=30,
        archived=["old"], estimate_after=40,
    ),
    dict(
        id="pass1-archived-neighbour-does-not-connect",
        # z is archived with z->p. p: rec 10; q: rec 20; r: rec 30 with docs/r.md->r.
        # conn2 (other end active or file): p 0 (z archived), q 0, r 2. pc p=q .25, r 1;
        # pr p 0, q .5, r 1. score p = .165, q = .33, r = .99. (Counting z->p would tie p with
        # r and put q first.) estimate 3*20 + z->p 15 + docs->r 15 = 90 > M=88, target 70.4.
        # archive p: 90 - 20 - 15 (z->p now has no active end) = 55 stop.
        nodes=[N("p", write=10), N("q", write=20), N("r", write=30), N("z", state=ARCHIVED)],
        edges=[("z", "p"), ("docs/r.md", "r")], max_tokens=88,
        archived=["p"], estimate_after=55,
    ),
    dict(
        id="pass1-edge-stops-counting",
        # p: rec 10, p->q; q: rec 20; big: 120 tokens, created day 95 (in grace).
        # pr p 0, q 1; conn2 p 1, q 2 -> pc p 0, q 1. estimate 20+20+120+15 = 175 > M=150,
        # target 120. archive p: 155 (p->q still has q). archive q: 155 - 20 - 15 = 120 stop.
        nodes=[N("p", write=10), N("q", write=20), N("big", created=95, tok=120)],
        edges=[("p", "q")], max_tokens=150,
        archived=["p", "q"], estimate_after=120,
    ),
    dict(
        id="pass1-not-needed-at-exactly-budget",
        # estimate 3*20 = 60 = M: pass 1 only runs above the budget.
        nodes=[N("a"), N("b"), N("c")], edges=[], max_tokens=60,
        estimate_after=60,
    ),
    dict(
        id="pass1-then-pass2-same-node",
        # four isolated 100-token nodes, rec 1..4. estimate 400 > M=50, target 40: every node
        # must go (after three, 100 > 40) -> 0. pass 2: 4 archived cost 20 > 0.3*50 = 15;
        # orphan the fewest-edge (all 0), oldest: n1 -> 3 archived, 15 <= 15 stop.
        nodes=[N("n%d" % i, write=i, tok=100) for i in (1, 2, 3, 4)],
        edges=[], max_tokens=50,
        archived=["n1", "n2", "n3", "n4"], orphaned=["n1"], estimate_after=0,
    ),
    dict(
        id="resurrect-swap-then-budget-stop",
        # active h1, h2 (rec 90); l1, l2 (40 tokens, rec 5 and 6); archived before: big (rec 80,
        # big->h1, big->h2) and small (rec 70, small->h1).
        # estimate 2*20 + 2*40 + 3 edges*15 = 165 > M=120, target 96. Pass 1 (h1, h2, l1, l2):
        # conn2 all 0 (in-edges come from archived nodes), pr l1 < l2 < h1 = h2 -> archive l1:
        # 125, l2: 85 stop.
        # Pass 1b, pool big, small, l1, l2, h1, h2 (n=6); keys K = 2(r-1) for rec + 2 x 2(r-1)
        # for conn2 (score = .33 K / 10):
        #   rec order l1, l2, small, big, h1=h2 -> 2(r-1): 0, 2, 4, 6, 9, 9
        #   conn2 l1=l2=h1=h2 0 (ranks 1-4 -> 2(r-1) 3), small 1 (8), big 2 (10)
        #   K: l1 6, l2 8, small 20, big 26 (scores .198, .264, .66, .858)
        # pair big/l1: gap .66 >= .05; restoring big adds 20 (its edges already count) -> 105
        # <= 120: restored. pair small/l2: gap .396; small adds 20 -> 125 > 120: stop.
        nodes=[N("h1", write=90), N("h2", write=90), N("l1", write=5, tok=40),
               N("l2", write=6, tok=40), N("big", write=80, state=ARCHIVED),
               N("small", write=70, state=ARCHIVED)],
        edges=[("big", "h1"), ("big", "h2"), ("small", "h1")], max_tokens=120,
        archived=["l1", "l2"], restored=["big"], estimate_after=105,
    ),
    dict(
        id="resurrect-refused-stops-the-pass",
        # as above but big costs 70 tokens (archived, so the estimate is unchanged): pair
        # big/l1 passes the gap, but 85 + 70 = 155 > 120 -> stop. small (which would fit:
        # 85 + 20 = 105) is never tried.
        nodes=[N("h1", write=90), N("h2", write=90), N("l1", write=5, tok=40),
               N("l2", write=6, tok=40), N("big", write=80, tok=70, state=ARCHIVED),
               N("small", write=70, state=ARCHIVED)],
        edges=[("big", "h1"), ("big", "h2"), ("small", "h1")], max_tokens=120,
        archived=["l1", "l2"], estimate_after=85,
    ),
    dict(
        id="resurrect-gap-exactly-0.05-swaps",
        # w: rec 1, 170 tokens; f00-f03: rec 10; b (archived): rec 20; g00-g27: rec 30; no edges.
        # estimate 32*20 + 170 = 810 > M=800, target 640. Pass 1: w has the lowest score (conn
        # all tied) -> 640 stop.
        # Pass 1b pool n=34; conn all tied, so only recency separates: w rank 1, b rank 6.
        # gap = .33 x (5/33 - 0/33) = .05 exactly (float arithmetic gives .04999...) -> swap.
        # b adds 20 -> 660 <= 800.
        nodes=[N("w", write=1, tok=170), N("b", write=20, state=ARCHIVED)]
        + fillers("f", 4, 10) + fillers("g", 28, 30),
        edges=[], max_tokens=800,
        archived=["w"], restored=["b"], estimate_after=660,
    ),
    dict(
        id="resurrect-gap-0.045-no-swap",
        # as above but f03 and b both rec 20: b shares ranks 5,6 -> 5.5;
        # gap = .33 x 4.5/33 = .045 < .05 -> no swap.
        nodes=[N("w", write=1, tok=170), N("b", write=20, state=ARCHIVED)]
        + fillers("f", 3, 10) + [N("f03", write=20)] + fillers("g", 28, 30),
        edges=[], max_tokens=800,
        archived=["w"], estimate_after=640,
    ),
    dict(
        id="resurrect-only-after-pass1",
        # the first resurrection graph with M=165: the estimate is not over the budget, so
        # pass 1 archives nothing and big stays archived whatever its score.
        nodes=[N("h1", write=90), N("h2", write=90), N("l1", write=5, tok=40),
               N("l2", write=6, tok=40), N("big", write=80, state=ARCHIVED),
               N("small", write=70, state=ARCHIVED)],
        edges=[("big", "h1"), ("big", "h2"), ("small", "h1")], max_tokens=165,
        estimate_after=165,
    ),
    dict(
        id="pass2-tie-breaks",
        # one active node h. archived: a0 (rec 50, no edge), a1 (rec 40, a1->src/a1.py: file
        # end does not count), a2 (rec 40, a2->a3: archived end does not count), a3 (rec 10,
        # a3->h: 1), a4 (rec 30, h->a4: 1), a5 (rec 45, self-loop: 0), a6 (rec 5, a6->h and
        # h->a6: 2), a8 (rec 45, no edge).
        # estimate h 20 + a3->h, h->a4, a6->h, h->a6 = 4*15 -> 80 <= M: no pass 1 (a1->file
        # does not count: its node is archived).
        # pass 2: 8 archived cost 40 > .3*95 = 28.5; keep at most 5 -> orphan 3.
        # order (edges to active, rec, id): a1 (0,40), a2 (0,40), a5 (0,45), a8 (0,45), a0 ...
        # -> a1, a2, a5 (a5 before a8 by id; a3 and a6 are older but better connected).
        nodes=[N("h", write=99), N("a0", write=50, state=ARCHIVED),
               N("a1", write=40, state=ARCHIVED), N("a2", write=40, state=ARCHIVED),
               N("a3", write=10, state=ARCHIVED), N("a4", write=30, state=ARCHIVED),
               N("a5", write=45, state=ARCHIVED), N("a6", write=5, state=ARCHIVED),
               N("a8", write=45, state=ARCHIVED)],
        edges=[("a1", "src/a1.py"), ("a2", "a3"), ("a3", "h"), ("h", "a4"), ("a5", "a5"),
               ("a6", "h"), ("h", "a6")],
        max_tokens=95,
        orphaned=["a1", "a2", "a5"], estimate_after=80,
    ),
    dict(
        id="pass2-orphan-cap-boundary",
        # 300 archived isolated nodes cost 1500 = .3*5000: not over, nothing orphaned;
        # the 301st tips it over -> exactly one (the oldest, x000) goes.
        nodes=[N("x%03d" % i, write=i / 10.0, state=ARCHIVED) for i in range(301)],
        edges=[], max_tokens=5000,
        orphaned=["x000"], estimate_after=0,
    ),
    dict(
        id="deletion-boundary",
        # now = day 1000, orphan grace 365 days.
        # o1: orphaned day 635 (exactly 365 days) -> deleted. o2: orphaned 1 s later -> kept.
        # o3: orphaned day 500 but read day 900 -> last recall 900 -> kept.
        # o4: orphaned day 400 -> deleted with o4->h, h2->o4, o4->src/o4.py and o1->o4.
        # ar: archived with old timestamps -> never deleted (only orphaned nodes are).
        # estimate before: h, h2 40 + o4->h, h2->o4, o4->file 45 = 85; o1->o4 has no live end;
        # after: 40.
        nodes=[N("h", write=999), N("h2", write=999),
               N("o1", state=ORPHANED, orphaned=635), N("o2", state=ORPHANED, orphaned=635 + 1 / DAY),
               N("o3", state=ORPHANED, orphaned=500, read=900), N("o4", state=ORPHANED, orphaned=400),
               N("ar", state=ARCHIVED)],
        edges=[("o4", "h"), ("h2", "o4"), ("o4", "src/o4.py"), ("o1", "o4"), ("o3", "h")],
        now=1000, max_tokens=5000,
        deleted=["o1", "o4"],
        deleted_edges=["h2->o4:rel", "o1->o4:rel", "o4->h:rel", "o4->src/o4.py:rel"],
        estimate_after=40 + 15,  # o3->h still counts
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_table(case):
    nodes, edges = G(case["nodes"], case["edges"])
    settings = Settings(max_tokens=case["max_tokens"], grace_s=GRACE, orphan_grace_s=ORPHAN_GRACE)
    now = case.get("now", 100) * DAY
    before = copy.deepcopy(nodes)
    res = compact(nodes, edges, now, settings)
    assert res.archived == case.get("archived", [])
    assert res.restored == case.get("restored", [])
    assert res.orphaned == case.get("orphaned", [])
    assert res.deleted == case.get("deleted", [])
    if "deleted_edges" in case:
        assert res.deleted_edges == case["deleted_edges"]
    assert res.estimate_after == case["estimate_after"] == estimate_tokens(nodes, edges)
    # the states the lists describe are the states left in the graph
    final = states(nodes)
    for nid in before:
        if nid in res.deleted:
            assert nid not in nodes
        elif nid in res.orphaned:
            assert final[nid] == ORPHANED and nodes[nid]["_orphaned_ts"] == now
        elif nid in res.archived:
            assert final[nid] == ARCHIVED
        elif nid in res.restored:
            assert final[nid] == ACTIVE
        else:
            assert nodes[nid] == before[nid]
    # compaction never touches recency
    for nid, n in nodes.items():
        assert recency(n) == recency(before[nid])


# ---- reads and puts ----

def rescue_graph():
    # X archived; Y, Z orphaned neighbours of X (either direction); V orphaned neighbour of Y
    # only (two hops away); W orphaned, unconnected; U archived neighbour; a file edge.
    return G([N("X", state=ARCHIVED), N("Y", state=ORPHANED, orphaned=50, read=10),
              N("Z", state=ORPHANED, orphaned=50), N("V", state=ORPHANED, orphaned=50),
              N("W", state=ORPHANED, orphaned=50), N("U", state=ARCHIVED), N("A", write=60)],
             [("X", "Y"), ("Z", "X"), ("Y", "V"), ("U", "X"), ("X", "src/x.py"), ("A", "X")])


@pytest.mark.parametrize("use_index", [False, True])
def test_read_archived_rescues_orphaned_neighbours(use_index):
    nodes, edges = rescue_graph()
    now = 100 * DAY
    neighbours = ["Y", "Z", "U", "src/x.py", "A"] if use_index else None
    changed = promote_on_read(nodes, edges, "X", now, neighbours=neighbours)
    assert changed == ["X", "Y", "Z"]
    assert states(nodes) == {"X": ACTIVE, "Y": ARCHIVED, "Z": ARCHIVED, "V": ORPHANED,
                             "W": ORPHANED, "U": ARCHIVED, "A": ACTIVE}
    assert nodes["X"]["_read_ts"] == now and "_orphaned_ts" not in nodes["X"] and "_archived" not in nodes["X"]
    assert "_orphaned_ts" not in nodes["Y"] and nodes["Y"]["_archived"] is True
    assert nodes["Y"]["_read_ts"] == 10 * DAY          # rescued, not read: recency unchanged


def test_read_orphaned_promotes_without_chain():
    nodes, edges = rescue_graph()
    changed = promote_on_read(nodes, edges, "Y", 100 * DAY)
    assert changed == ["Y"]
    assert node_state(nodes["Y"]) == ACTIVE and nodes["Y"]["_read_ts"] == 100 * DAY
    assert "_archived" not in nodes["Y"] and "_orphaned_ts" not in nodes["Y"]
    assert node_state(nodes["V"]) == ORPHANED          # only an archived read rescues


def test_read_active_only_refreshes():
    nodes, edges = rescue_graph()
    before = copy.deepcopy(nodes)
    assert promote_on_read(nodes, edges, "A", 100 * DAY) == []
    assert nodes["A"]["_read_ts"] == 100 * DAY
    before["A"]["_read_ts"] = 100 * DAY
    assert nodes == before


def test_read_missing_node():
    nodes, edges = rescue_graph()
    assert promote_on_read(nodes, edges, "nope", 100 * DAY) == []


def test_read_promotion_then_compaction_keeps_a_fresh_read():
    # reading refreshes recency, so the node read becomes the last pass-1 choice
    nodes, edges = G([N(x, write=w) for x, w in zip("abc", (10, 20, 30))])
    nodes["a"]["_archived"] = True
    promote_on_read(nodes, edges, "a", 100 * DAY)
    res = compact(nodes, edges, 100 * DAY, Settings(max_tokens=50))   # 60 > 50, target 40
    assert res.archived == ["b"]


@pytest.mark.parametrize("state, orphaned, revived", [
    (ACTIVE, None, False), (ARCHIVED, None, True), (ORPHANED, 50, True)])
def test_revive_on_put(state, orphaned, revived):
    node = N("n", state=state, orphaned=orphaned)
    assert revive_on_put(node) is revived
    assert node_state(node) == ACTIVE
    assert "_archived" not in node and "_orphaned_ts" not in node


# ---- small API ----

@pytest.mark.parametrize("estimate, archived, expected", [
    (5000, 0, False), (5001, 0, True), (0, 300, False), (0, 301, True), (5000, 300, False)])
def test_needs_compaction(estimate, archived, expected):
    assert needs_compaction(estimate, archived, Settings()) is expected


def test_settings_defaults():
    assert Settings() == Settings(5000, 7 * DAY, 365 * DAY)


def test_result_changed():
    assert not Result().changed and Result().changed_ids == set()
    r = Result(archived=["a"], restored=["b"], orphaned=["a", "c"], deleted=["d"])
    assert r.changed and r.changed_ids == {"a", "b", "c", "d"}
    assert Result(deleted_edges=["x->y:r"]).changed


def test_nothing_to_do_leaves_graph_untouched():
    nodes, edges = G([N("a"), N("b", state=ARCHIVED), N("c", state=ORPHANED, orphaned=90)],
                     [("a", "b"), ("b", "c")])
    before = copy.deepcopy((nodes, edges))
    res = compact(nodes, edges, 100 * DAY, Settings())
    assert not res.changed and (nodes, edges) == before
    assert res.estimate_before == res.estimate_after == 20 + 15


# ---- random graphs ----

NOW = 1000 * DAY


def random_graph(seed):
    rnd = random.Random(seed)
    n = rnd.randint(1, 30)
    nodes = {}
    for i in range(n):
        nid = "n%02d" % rnd.randint(0, 99)
        if nid in nodes:
            continue
        age = rnd.choice([rnd.randint(0, 6), 7, rnd.randint(8, 700), rnd.uniform(0, 20)])
        created = 1000 - age
        write = created + rnd.randint(0, int(age))        # whole days: recency ties happen
        read = rnd.choice([None, None, created + rnd.randint(0, int(age))])
        r = rnd.random()
        if r < 0.65:
            state, orph = ACTIVE, None
        elif r < 0.85:
            state, orph = ARCHIVED, None
        else:
            state, orph = ORPHANED, 1000 - rnd.choice([rnd.randint(0, 800), 365])
            write = min(write, orph)
            read = None if read is None else min(read, orph)
        node = N(nid, created=created, write=write, read=read, tok=20 + rnd.randint(0, 40),
                 state=state, orphaned=orph)
        node["gist"] += "x" * rnd.randint(0, 3)
        node["notes"] = ["note" * rnd.randint(0, 5) for _ in range(rnd.randint(0, 2))]
        nodes[nid] = node
    ids = list(nodes)
    ends = ids + ["src/a.py", "src/b.py", "README.md"]
    edges = {}
    for _ in range(rnd.randint(0, 3 * len(ids))):
        f = rnd.choice(ids) if rnd.random() < 0.85 else rnd.choice(ends)
        t = rnd.choice(ends)
        rel = rnd.choice(["uses", "part_of", "contradicts"])
        edges[edge_key(f, t, rel)] = {"from": f, "to": t, "rel": rel, "notes": []}
    settings = Settings(max_tokens=rnd.randint(20, 40 * len(ids) + 20), grace_s=GRACE,
                        orphan_grace_s=rnd.choice([ORPHAN_GRACE, 0.0, 30 * DAY]))
    return nodes, edges, settings


def in_grace(node, settings):
    return NOW - node["_created_ts"] < settings.grace_s


SEEDS = range(300)


@pytest.mark.parametrize("seed", SEEDS)
def test_invariants(seed):
    nodes, edges, s = random_graph(seed)
    orig_nodes, orig_edges = copy.deepcopy(nodes), copy.deepcopy(edges)
    res = compact(nodes, edges, NOW, s)
    m = s.max_tokens

    assert res.estimate_before == estimate_tokens(orig_nodes, orig_edges)
    assert res.estimate_after == estimate_tokens(nodes, edges)

    # pass 1 archives only active nodes past grace, and only when over the budget
    for nid in res.archived:
        assert node_state(orig_nodes[nid]) == ACTIVE and not in_grace(orig_nodes[nid], s)
    assert len(set(res.archived)) == len(res.archived)
    if res.estimate_before <= m:
        assert res.archived == [] and res.restored == []

    # after pass 1 alone: at most 0.8 x budget, unless every active node left is in grace
    after1 = copy.deepcopy(orig_nodes)
    for nid in res.archived:
        after1[nid]["_archived"] = True
    if res.archived:
        est1 = estimate_tokens(after1, orig_edges)
        assert 5 * est1 <= 4 * m or all(in_grace(n, s) for n in after1.values() if is_active(n))
        # and it stopped as soon as it got there
        undo_last = copy.deepcopy(after1)
        del undo_last[res.archived[-1]]["_archived"]
        assert 5 * estimate_tokens(undo_last, orig_edges) > 4 * m

    # resurrection restores only nodes archived before, and never above the budget
    for nid in res.restored:
        assert node_state(orig_nodes[nid]) == ARCHIVED
    assert len(res.restored) <= len(res.archived)
    if res.restored:
        assert res.estimate_after <= m

    # pass 2 bound; orphans come from the archived nodes
    archived_now = sum(1 for n in nodes.values() if node_state(n) == ARCHIVED)
    assert 10 * 5 * archived_now <= 3 * m
    for nid in res.orphaned:
        assert node_state(orig_nodes[nid]) == ARCHIVED or nid in res.archived

    # nodes and edges disappear only through the deletion rule
    assert set(nodes) <= set(orig_nodes)
    assert set(orig_nodes) - set(nodes) == set(res.deleted)
    for nid in res.deleted:
        o = orig_nodes[nid]
        orphaned_ts = NOW if nid in res.orphaned else o.get("_orphaned_ts")
        assert orphaned_ts is not None
        last = max(orphaned_ts, o["_read_ts"] or 0, o["_write_ts"] or 0)
        assert NOW - last >= s.orphan_grace_s
    for nid, n in nodes.items():
        if node_state(n) == ORPHANED:
            last = max(n["_orphaned_ts"], n["_read_ts"] or 0, n["_write_ts"] or 0)
            assert NOW - last < s.orphan_grace_s
    gone = set(res.deleted)
    assert set(orig_edges) - set(edges) == set(res.deleted_edges)
    assert set(res.deleted_edges) == {k for k, e in orig_edges.items() if e["from"] in gone or e["to"] in gone}
    assert set(edges) <= set(orig_edges)

    # the state fields stay consistent, and are present only when set
    for n in nodes.values():
        if "_orphaned_ts" in n:
            assert n["_orphaned_ts"] is not None and n["_archived"] is True
        if "_archived" in n:
            assert n["_archived"] is True

    # a second pass at the same moment has nothing left to do
    again = compact(nodes, edges, NOW, s)
    if s.orphan_grace_s > 0:
        assert not again.changed, again


@pytest.mark.parametrize("seed", SEEDS)
def test_deterministic(seed):
    nodes, edges, s = random_graph(seed)
    a = copy.deepcopy((nodes, edges))
    b = copy.deepcopy((nodes, edges))
    # the second copy iterates its dicts in reverse: order of insertion must not matter
    b = ({k: b[0][k] for k in reversed(list(b[0]))}, {k: b[1][k] for k in reversed(list(b[1]))})
    ra = compact(a[0], a[1], NOW, s)
    rb = compact(b[0], b[1], NOW, s)
    assert ra == rb
    assert a[0] == b[0] and a[1] == b[1]


# ---- a slow reference, straight from the contract's words, in exact fractions ----

def ref_percentiles(values):
    n = len(values)
    if n == 1:
        return [Fraction(1, 2)]
    out = []
    for v in values:
        below = sum(1 for u in values if u < v)
        tied = sum(1 for u in values if u == v)
        mean_rank = below + Fraction(tied + 1, 2)          # ranks below+1 .. below+tied
        out.append((mean_rank - 1) / (n - 1))
    return out


def ref_live(nodes, end):
    return end not in nodes or is_active(nodes[end])


def ref_connectedness(nodes, edges, v):
    c = Fraction(0)
    for e in edges.values():
        if e["to"] == v and ref_live(nodes, e["from"]):
            c += Fraction(66, 100)
        if e["from"] == v and ref_live(nodes, e["to"]):
            c += Fraction(33, 100)
    return c


def ref_scores(nodes, edges, ids):
    pr = ref_percentiles([recency(nodes[v]) for v in ids])
    pc = ref_percentiles([ref_connectedness(nodes, edges, v) for v in ids])
    return {v: Fraction(33, 100) * pr[i] + Fraction(66, 100) * pc[i] for i, v in enumerate(ids)}


def ref_compact(nodes, edges, now, s):
    out = {"archived": [], "restored": [], "orphaned": [], "deleted": [], "deleted_edges": []}
    m = s.max_tokens
    before = {v for v, n in nodes.items() if node_state(n) == ARCHIVED}
    eligible_ok = lambda n: now - n["_created_ts"] >= s.grace_s   # noqa: E731
    if estimate_tokens(nodes, edges) > m:
        elig = [v for v, n in nodes.items() if is_active(n) and eligible_ok(n)]
        if elig:
            sc = ref_scores(nodes, edges, elig)
            for v in sorted(elig, key=lambda v: (sc[v], recency(nodes[v]), v)):
                if estimate_tokens(nodes, edges) <= Fraction(8, 10) * m:
                    break
                nodes[v]["_archived"] = True
                out["archived"].append(v)
    if out["archived"]:
        pool = [v for v, n in nodes.items()
                if node_state(n) == ARCHIVED or (is_active(n) and eligible_ok(n))]
        sc = ref_scores(nodes, edges, pool)
        best = sorted((v for v in pool if v in before), key=lambda v: (-sc[v], -recency(nodes[v]), v))
        worst = sorted(out["archived"], key=lambda v: (sc[v], recency(nodes[v]), v))
        for b, w in zip(best, worst):
            if sc[b] - sc[w] < Fraction(5, 100):
                break
            del nodes[b]["_archived"]
            if estimate_tokens(nodes, edges) > m:
                nodes[b]["_archived"] = True
                break
            out["restored"].append(b)
    while 5 * sum(1 for n in nodes.values() if node_state(n) == ARCHIVED) > Fraction(3, 10) * m:
        def active_edges(v):
            return sum(1 for e in edges.values()
                       if (e["from"] == v and e["to"] in nodes and is_active(nodes[e["to"]]))
                       or (e["to"] == v and e["from"] in nodes and is_active(nodes[e["from"]])))
        v = min((v for v, n in nodes.items() if node_state(n) == ARCHIVED),
                key=lambda v: (active_edges(v), recency(nodes[v]), v))
        nodes[v]["_orphaned_ts"] = now
        out["orphaned"].append(v)
    doomed = sorted(v for v, n in nodes.items() if node_state(n) == ORPHANED and now - max(
        n["_orphaned_ts"], n["_read_ts"] or 0, n["_write_ts"] or 0) >= s.orphan_grace_s)
    keys = sorted(k for k, e in edges.items() if e["from"] in doomed or e["to"] in doomed)
    for k in keys:
        del edges[k]
    for v in doomed:
        del nodes[v]
    out["deleted"], out["deleted_edges"] = doomed, keys
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_reference(seed):
    nodes, edges, s = random_graph(seed)
    ref_nodes, ref_edges = copy.deepcopy(nodes), copy.deepcopy(edges)
    res = compact(nodes, edges, NOW, s)
    ref = ref_compact(ref_nodes, ref_edges, NOW, s)
    assert {"archived": res.archived, "restored": res.restored, "orphaned": res.orphaned,
            "deleted": res.deleted, "deleted_edges": res.deleted_edges} == ref
    assert nodes == ref_nodes and edges == ref_edges


def test_random_graphs_exercise_every_pass():
    """The generator is only useful if the random graphs actually reach every rule."""
    seen = {"archived": 0, "restored": 0, "orphaned": 0, "deleted": 0}
    for seed in SEEDS:
        nodes, edges, s = random_graph(seed)
        res = compact(nodes, edges, NOW, s)
        for k in seen:
            seen[k] += bool(getattr(res, k))
    assert all(v >= 5 for v in seen.values()), seen


# ---- the store's fast path: compact() with an index gives the same result as without ----

def _index_of(nodes, edges):
    adjacency = {}
    for key, e in edges.items():
        adjacency.setdefault(e["from"], set()).add(key)
        adjacency.setdefault(e["to"], set()).add(key)
    candidates = sorted(v for v, n in nodes.items() if node_state(n) in (ACTIVE, ARCHIVED))
    return candidates, adjacency, estimate_tokens(nodes, edges)


@pytest.mark.parametrize("seed", range(200))
def test_indexed_pass_equals_full_pass_without_deletion(seed):
    nodes, edges, settings = random_graph(seed)
    now = NOW
    far_future = Settings(settings.max_tokens, settings.grace_s, 10 ** 12)  # no deletion in either run
    a_nodes, a_edges = copy.deepcopy(nodes), copy.deepcopy(edges)
    b_nodes, b_edges = copy.deepcopy(nodes), copy.deepcopy(edges)
    full = compact(a_nodes, a_edges, now, far_future)
    fast = compact(b_nodes, b_edges, now, far_future, _index_of(b_nodes, b_edges))
    assert (fast.archived, fast.restored, fast.orphaned) == (full.archived, full.restored, full.orphaned)
    assert fast.estimate_after == full.estimate_after == estimate_tokens(b_nodes, b_edges)
    assert a_nodes == b_nodes and a_edges == b_edges
