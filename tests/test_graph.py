"""kg/core/graph.py: the incremental figures, deletion, loading the reference plugin's layout, and
journal replay. Pure: no disk.

The incremental token estimate and state counts are checked against a from-scratch recount
(model.estimate_tokens and a count of model.node_state) after every step of seeded random
sequences of mutations.
"""

import collections
import copy
import json
import random

import pytest

from kg.core import model
from kg.core.graph import Graph, apply_record, graph_from_obj
from kg.core.model import ACTIVE, ARCHIVED, ORPHANED, edge_key

from helpers import node


def mk_node(nid, gist="g", notes=(), state=ACTIVE, ts=100.0):
    n = node(nid, gist, notes, _created_ts=ts, _write_ts=ts, _read_ts=None)
    set_state(n, state, ts)
    return n


def mk_edge(frm, to, rel="rel", notes=()):
    return {"from": frm, "to": to, "rel": rel, "notes": list(notes)}


def set_state(n, state, ts=1.0):
    """State keys only when set, as kgd writes them (the reference plugin reads a node's state by key presence)."""
    n.pop("_archived", None)
    n.pop("_orphaned_ts", None)
    if state != ACTIVE:
        n["_archived"] = True
    if state == ORPHANED:
        n["_orphaned_ts"] = ts


def check_figures(g):
    """Every running figure of the graph equals a recount from scratch."""
    assert g.tokens == model.estimate_tokens(g.nodes, g.edges)
    counts = collections.Counter(model.node_state(n) for n in g.nodes.values())
    assert g.state_counts == {ACTIVE: counts[ACTIVE], ARCHIVED: counts[ARCHIVED], ORPHANED: counts[ORPHANED]}
    assert g.archived_count == counts[ARCHIVED]
    visible = sorted(edge_key(e["from"], e["to"], e["rel"]) for e in g.visible_edges())
    assert visible == sorted(k for k, e in g.edges.items() if model.edge_counts(e, g.nodes))
    # the adjacency index: every edge under both ends, nothing else
    for key, e in g.edges.items():
        assert key == edge_key(e["from"], e["to"], e["rel"])
        assert key in g.adj.get(e["from"], ())
        assert key in g.adj.get(e["to"], ())
    for end, keys in g.adj.items():
        for key in keys:
            assert key in g.edges, (end, key)
            assert end in (g.edges[key]["from"], g.edges[key]["to"])
    for nid in g.nodes:
        assert sorted(edge_key(e["from"], e["to"], e["rel"]) for e in g.edges_of(nid)) == sorted(
            k for k, e in g.edges.items() if nid in (e["from"], e["to"]))


IDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
FILES = ["src/app.py", "README.md"]


def random_step(g, rnd):
    """One random mutation through the Graph API (or an in-place change plus refresh)."""
    op = rnd.choice(["put", "put", "put", "delete", "edge", "edge", "edge", "del_edge", "state", "state",
                     "text", "recount"])
    if op == "put":
        nid = rnd.choice(IDS)
        g.put_node(mk_node(nid, gist="x" * rnd.randrange(0, 90), notes=["n" * rnd.randrange(0, 30)] * rnd.randrange(3),
                           state=rnd.choice([ACTIVE, ACTIVE, ARCHIVED, ORPHANED])))
    elif op == "delete":
        nid = rnd.choice(IDS)
        before = {k for k, e in g.edges.items() if nid in (e["from"], e["to"])}
        removed = g.delete_node(nid)
        assert {edge_key(e["from"], e["to"], e["rel"]) for e in removed} == before
        assert nid not in g.nodes
        assert not any(nid in (e["from"], e["to"]) for e in g.edges.values())
    elif op == "edge":
        ends = IDS + FILES + ["ghost"]
        g.put_edge(mk_edge(rnd.choice(ends), rnd.choice(ends), rnd.choice(["r1", "r2"]), ["note"] * rnd.randrange(2)))
    elif op == "del_edge":
        if g.edges and rnd.random() < 0.8:
            key = rnd.choice(sorted(g.edges))
            assert g.delete_edge(key) is not None
            assert key not in g.edges
        else:
            assert g.delete_edge("nope->nada:rel") is None
    elif op == "state":
        if g.nodes:
            nid = rnd.choice(sorted(g.nodes))
            set_state(g.nodes[nid], rnd.choice([ACTIVE, ARCHIVED, ORPHANED]))
            g.refresh(nid)
    elif op == "text":
        if g.nodes:
            nid = rnd.choice(sorted(g.nodes))
            n = g.nodes[nid]
            n["gist"] = "y" * rnd.randrange(0, 200)
            n["notes"] = ["z" * rnd.randrange(1, 50) for _ in range(rnd.randrange(3))]
            g.refresh(nid)
    elif op == "recount":
        g.recount()
    return op


@pytest.mark.parametrize("seed", range(25))
def test_incremental_figures_match_recount(seed):
    rnd = random.Random(seed)
    g = Graph("project", "/p", "p")
    for _ in range(150):
        random_step(g, rnd)
        check_figures(g)
    # a full recount lands on the same figures
    tokens, counts = g.tokens, dict(g.state_counts)
    g.recount()
    assert (g.tokens, g.state_counts) == (tokens, counts)


def test_figures_table():
    g = Graph("user")
    g.put_node(mk_node("a", gist="a" * 40))             # 30
    assert g.tokens == 30
    g.put_edge(mk_edge("a", "src/app.py"))               # +15
    assert g.tokens == 45
    g.put_edge(mk_edge("b", "a"))                         # b is not a node yet; a is active: +15
    assert g.tokens == 60
    g.put_edge(mk_edge("c", "src/c.py"))                  # no active node at either end: 0
    assert g.tokens == 60
    g.put_node(mk_node("b", state=ARCHIVED))             # archived: 0; edge b->a still counts (a active)
    assert g.tokens == 60
    set_state(g.nodes["a"], ARCHIVED)
    g.refresh("a")                                        # a asleep: -30, and neither edge of a counts
    assert g.tokens == 0                                  # (contract 5 revised: a file end alone does not)
    assert g.state_counts == {ACTIVE: 0, ARCHIVED: 2, ORPHANED: 0}
    assert g.visible_edges() == []
    set_state(g.nodes["a"], ACTIVE)
    g.refresh("a")                                        # awake again: 30 + both its edges
    assert g.tokens == 60
    assert sorted(e["to"] for e in g.visible_edges()) == ["a", "src/app.py"]
    set_state(g.nodes["a"], ARCHIVED)
    g.refresh("a")
    set_state(g.nodes["b"], ORPHANED)
    g.refresh("b")
    assert g.state_counts == {ACTIVE: 0, ARCHIVED: 1, ORPHANED: 1}
    assert g.tokens == 0
    g.put_edge(mk_edge("b", "a"))                         # re-put an existing edge: no double count
    assert g.tokens == 0 and len(g.edges) == 3
    check_figures(g)


def test_delete_node_removes_touching_edges():
    g = Graph("user")
    for nid in "abc":
        g.put_node(mk_node(nid))
    g.put_edge(mk_edge("a", "b", "x"))
    g.put_edge(mk_edge("b", "a", "y"))
    g.put_edge(mk_edge("b", "b", "self"))
    g.put_edge(mk_edge("b", "src/b.py", "in"))
    g.put_edge(mk_edge("a", "c", "z"))
    removed = g.delete_node("b")
    assert sorted(e["rel"] for e in removed) == ["in", "self", "x", "y"]
    assert list(g.edges) == ["a->c:z"]
    assert "b" not in g.adj and "src/b.py" not in g.adj
    assert g.tokens == 20 + 20 + 15
    check_figures(g)
    assert g.delete_node("b") == []       # again: nothing, no error
    check_figures(g)


def test_delete_node_keeps_edges_of_a_file_path_end():
    """Deleting a node only removes its own edges; a file path shared with others stays indexed."""
    g = Graph("user")
    g.put_node(mk_node("a"))
    g.put_node(mk_node("b"))
    g.put_edge(mk_edge("a", "src/x.py"))
    g.put_edge(mk_edge("b", "src/x.py"))
    g.delete_node("a")
    assert g.adj["src/x.py"] == {"b->src/x.py:rel"}
    check_figures(g)


def test_search_cache_is_dropped_on_refresh():
    g = Graph("user")
    g.put_node(mk_node("a"))
    g.search_cache["a"] = ("stale", "")
    g.nodes["a"]["gist"] = "new"
    g.refresh("a")
    assert "a" not in g.search_cache


# ---------------------------------------------------------------- the reference plugin's layout

PLUGIN_FILE = {
    "nodes": {
        "plain": {"gist": "a plugin node", "notes": ["one", "two"], "touches": ["src/a.py"]},
        "note-string": {"gist": "notes as one string", "notes": "just one note", "touches": "src/b.py"},
        "versioned-num": {"gist": "time as a number", "notes": []},
        "versioned-dict": {"gist": "times in a dict", "notes": [], "custom_field": {"keep": [1, 2]}},
        "archived": {"gist": "sleeping", "notes": [], "_archived": True},
        "orph-flag": {"gist": "old orphan flag", "notes": [], "_orphaned": True},
        "own-ts": {"gist": "own fields win", "notes": [], "_created_ts": 50, "_write_ts": 60, "_read_ts": 70},
    },
    "edges": {
        "plain->versioned-num:depends-on": {"from": "plain", "to": "versioned-num", "rel": "depends-on",
                                             "notes": ["why"]},
        "plain->src/a.py:implemented-in": {},                       # every field missing: from the key
        "note-string->plain:explains": {"notes": "as a string", "weight": 3},
        "archived->orph-flag:rel:with:colons": {"notes": []},       # rel is after the LAST colon
        "garbage-key-without-arrow": {"notes": []},                 # cannot be recovered: skipped
    },
    "_meta": {
        "versions": {"versioned-num": 1700000000, "versioned-dict": {"created": 1600000000, "updated": 1650000000}},
        "plugin_version": "1.2.3",
    },
    "extra_top_level": True,
}


@pytest.fixture
def plugin_graph():
    return graph_from_obj(copy.deepcopy(PLUGIN_FILE), "project", "/p/proj", "proj", fallback_ts=123.0)


def test_plugin_nodes_load(plugin_graph):
    g = plugin_graph
    assert sorted(g.nodes) == sorted(PLUGIN_FILE["nodes"])
    for nid, n in g.nodes.items():
        assert n["id"] == nid
        assert isinstance(n["gist"], str)
        assert isinstance(n["notes"], list) and all(isinstance(x, str) for x in n["notes"])
        assert isinstance(n["touches"], list)
        for f in ("_created_ts", "_write_ts", "_read_ts"):
            assert f in n
        # state keys only when set (the reference plugin reads state by key presence)
        assert ("_archived" in n) == (model.node_state(n) != ACTIVE)
        assert ("_orphaned_ts" in n) == (model.node_state(n) == ORPHANED)
    assert g.nodes["plain"]["notes"] == ["one", "two"]
    assert g.nodes["plain"]["touches"] == ["src/a.py"]
    assert g.nodes["note-string"]["notes"] == ["just one note"]
    assert g.nodes["note-string"]["touches"] == ["src/b.py"]


@pytest.mark.parametrize("nid, created, written, read", [
    ("plain", 123.0, 123.0, None),                       # nothing known: the fallback (file mtime)
    ("versioned-num", 1700000000, 1700000000, None),      # _meta.versions as a number
    ("versioned-dict", 1600000000, 1650000000, None),     # _meta.versions as a dict
    ("own-ts", 50, 60, 70),                               # the node's own fields
])
def test_plugin_times(plugin_graph, nid, created, written, read):
    n = plugin_graph.nodes[nid]
    assert n["_created_ts"] == created
    assert n["_write_ts"] == written
    assert n["_read_ts"] == read
    assert model.recency(n) == max(x for x in (created, written, read) if x is not None)


@pytest.mark.parametrize("nid, state", [
    ("plain", ACTIVE), ("note-string", ACTIVE), ("versioned-num", ACTIVE), ("archived", ARCHIVED),
    ("orph-flag", ORPHANED), ("own-ts", ACTIVE),
])
def test_plugin_states(plugin_graph, nid, state):
    assert model.node_state(plugin_graph.nodes[nid]) == state


def test_plugin_unknown_fields_kept(plugin_graph):
    g = plugin_graph
    assert g.nodes["versioned-dict"]["custom_field"] == {"keep": [1, 2]}
    assert g.edges["note-string->plain:explains"]["weight"] == 3
    assert g.meta["plugin_version"] == "1.2.3"
    assert g.meta["versions"] == PLUGIN_FILE["_meta"]["versions"]
    out = g.to_obj()
    assert out["_meta"]["plugin_version"] == "1.2.3"
    assert out["_meta"]["project_path"] == "/p/proj"


def test_plugin_edges_recovered_from_keys(plugin_graph):
    g = plugin_graph
    assert sorted(g.edges) == sorted([
        "plain->versioned-num:depends-on", "plain->src/a.py:implemented-in", "note-string->plain:explains",
        "archived->orph-flag:rel:with:colons"])
    e = g.edges["plain->src/a.py:implemented-in"]
    assert (e["from"], e["to"], e["rel"], e["notes"]) == ("plain", "src/a.py", "implemented-in", [])
    e = g.edges["note-string->plain:explains"]
    assert (e["from"], e["to"], e["rel"], e["notes"]) == ("note-string", "plain", "explains", ["as a string"])
    e = g.edges["plain->versioned-num:depends-on"]
    assert e["notes"] == ["why"]
    e = g.edges["archived->orph-flag:rel:with:colons"]
    assert (e["from"], e["to"]) == ("archived", "orph-flag:rel:with")   # rsplit: rel has no colon


def test_plugin_figures(plugin_graph):
    check_figures(plugin_graph)
    assert plugin_graph.state_counts == {ACTIVE: 5, ARCHIVED: 1, ORPHANED: 1}


def test_plugin_file_round_trips(plugin_graph):
    """Loading what kgd wrote gives the same graph (no field lost, none invented twice)."""
    text = json.dumps(plugin_graph.to_obj())
    again = graph_from_obj(json.loads(text), "project", "/p/proj", "proj", fallback_ts=999.0)
    assert again.nodes == plugin_graph.nodes
    assert again.edges == plugin_graph.edges
    assert again.tokens == plugin_graph.tokens


@pytest.mark.parametrize("obj", [None, {}, {"nodes": None}, {"nodes": [], "edges": []}, {"nodes": {}, "edges": {}},
                                 {"nodes": "x", "edges": 5, "_meta": "y"}])
def test_empty_or_odd_files_load_empty(obj):
    g = graph_from_obj(obj, "user")
    assert g.nodes == {} and g.edges == {} and g.tokens == 0


def test_nodes_and_edges_as_lists():
    g = graph_from_obj({"nodes": [{"id": "a", "gist": "A"}, {"id": "b", "gist": "B"}, {"gist": "no id"}, 5],
                        "edges": [{"from": "a", "to": "b", "rel": "r"}]}, "user", fallback_ts=1.0)
    assert sorted(g.nodes) == ["a", "b"]
    assert list(g.edges) == ["a->b:r"]
    check_figures(g)


def test_non_string_fields_coerced():
    g = graph_from_obj({"nodes": {"a": {"gist": 42, "notes": [1, "two", None]}, "b": "bare string"}}, "user",
                       fallback_ts=1.0)
    assert g.nodes["a"]["gist"] == "42"
    assert all(isinstance(x, str) for x in g.nodes["a"]["notes"])
    assert g.nodes["b"]["gist"] == "bare string"


# ---------------------------------------------------------------- journal records

def random_records(rnd, n=80):
    recs = []
    for _ in range(n):
        op = rnd.choice(["node", "node", "edge", "edge", "del_node", "del_edge", "progress", "compacted"])
        nid = rnd.choice(IDS)
        if op == "node":
            recs.append({"op": "node", "node": mk_node(nid, gist="x" * rnd.randrange(50),
                                                       state=rnd.choice([ACTIVE, ARCHIVED, ORPHANED]))})
        elif op == "edge":
            e = mk_edge(nid, rnd.choice(IDS + FILES), rnd.choice(["r1", "r2"]), ["n"] * rnd.randrange(2))
            recs.append({"op": "edge", "edge": e})
        elif op == "del_node":
            recs.append({"op": "del_node", "id": nid})
        elif op == "del_edge":
            recs.append({"op": "del_edge", "key": edge_key(nid, rnd.choice(IDS + FILES), rnd.choice(["r1", "r2"]))})
        elif op == "compacted":  # one pass: states of some nodes (maybe absent), deletes
            states = {i: rnd.choice([[False, None], [True, None], [True, float(rnd.randrange(1, 9))]])
                      for i in rnd.sample(IDS, 2)}
            recs.append({"op": "compacted", "states": states, "del_nodes": rnd.sample(IDS, rnd.randrange(2)),
                         "del_edges": [edge_key(nid, rnd.choice(IDS + FILES), "r1")] * rnd.randrange(2)})
        else:
            recs.append({"op": "progress", "task_id": rnd.choice(["t1", "t2"]),
                         "state": rnd.choice([None, {"step": rnd.randrange(5)}])})
    return recs


def snapshot(g):
    return (copy.deepcopy(g.nodes), copy.deepcopy(g.edges), copy.deepcopy(g.meta), g.tokens, dict(g.state_counts))


def replay(g, recs):
    for r in recs:
        apply_record(g, copy.deepcopy(r))   # a journal gives fresh objects on every replay
        check_figures(g)


@pytest.mark.parametrize("seed", range(25))
def test_apply_record_replay_is_idempotent(seed):
    """A crash between writing the folded graph file and emptying the journal replays records the
    file already holds: the result must be the same graph."""
    rnd = random.Random(seed)
    g = Graph("project", "/p", "p")
    replay(g, random_records(rnd, 30))          # some starting state, as in a graph file
    recs = random_records(rnd)
    replay(g, recs)
    once = snapshot(g)
    replay(g, recs)
    assert snapshot(g) == once
    # and a fresh graph loaded from the folded file then replayed again lands in the same place
    loaded = graph_from_obj(json.loads(json.dumps(g.to_obj())), "project", "/p", "p")
    replay(loaded, recs)
    assert loaded.nodes == g.nodes and loaded.edges == g.edges
    assert loaded.meta.get("progress") == g.meta.get("progress")


@pytest.mark.parametrize("recs, nodes, edges, progress", [
    ([{"op": "node", "node": mk_node("a")}, {"op": "node", "node": mk_node("b")},
      {"op": "edge", "edge": mk_edge("a", "b")}], ["a", "b"], ["a->b:rel"], None),
    ([{"op": "node", "node": mk_node("a")}, {"op": "edge", "edge": mk_edge("a", "src/x.py")},
      {"op": "del_node", "id": "a"}], [], [], None),
    ([{"op": "edge", "edge": mk_edge("a", "b")}, {"op": "del_edge", "key": "a->b:rel"},
      {"op": "del_edge", "key": "a->b:rel"}], [], [], None),
    ([{"op": "del_node", "id": "never-there"}], [], [], None),
    ([{"op": "progress", "task_id": "t", "state": {"x": 1}}], [], [], {"t": {"x": 1}}),
    ([{"op": "progress", "task_id": "t", "state": {"x": 1}}, {"op": "progress", "task_id": "t", "state": None}],
     [], [], {}),
    ([{"op": "unknown-future-op", "x": 1}], [], [], None),     # an unknown record is ignored
    ([{"op": "node", "node": mk_node("a")}, {"op": "node", "node": mk_node("b")}, {"op": "node", "node": mk_node("c")},
      {"op": "edge", "edge": mk_edge("a", "b")}, {"op": "edge", "edge": mk_edge("c", "src/x.py")},
      {"op": "compacted", "states": {"a": [True, None], "zz": [True, None]}, "del_nodes": ["b"],
       "del_edges": ["c->src/x.py:rel"]}], ["a", "c"], [], None),  # a pass: a state, a delete, an edge gone
])
def test_apply_record_table(recs, nodes, edges, progress):
    g = Graph("user")
    replay(g, recs)
    assert sorted(g.nodes) == nodes
    assert sorted(g.edges) == edges
    assert g.meta.get("progress") == progress


@pytest.mark.parametrize("state, expect", [
    ([False, None], ACTIVE), ([True, None], ARCHIVED), ([True, 7.0], ORPHANED), ([False, 7.0], ORPHANED),
])
def test_compacted_record_sets_the_state_keys_alone(state, expect):
    """A compaction pass is journalled as one record of state keys (kg/memory/write_path.py): on
    replay each node gets exactly the state the pass gave it, its content untouched."""
    g = Graph("project", "/p", "p")
    for start in (ACTIVE, ARCHIVED, ORPHANED):
        apply_record(g, {"op": "node", "node": mk_node("a", gist="kept", notes=["n"], state=start)})
        apply_record(g, {"op": "compacted", "states": {"a": list(state)}, "del_nodes": [], "del_edges": []})
        check_figures(g)
        n = g.nodes["a"]
        assert model.node_state(n) == expect and (n["gist"], n["notes"]) == ("kept", ["n"])
        assert n.get("_orphaned_ts") == state[1] and ("_archived" in n) == (expect != ACTIVE)
