"""kg/api/structured.py: with --structured-output, the serialized structuredContent of kg_read and
kg_sync is at most 40,000 characters and of kg_search at most 10,000, measured as a client
serializes it; over the bound it says what it left out (`truncated`) and stays valid against the
tool's outputSchema (the official SDK clients validate it)."""

import json

import jsonschema
import pytest

from kg.api import structured, tools

SCHEMAS = {t["name"]: t["outputSchema"] for t in tools.list_tools(structured=True)}


def stringify(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def node(i, prefix="n", gist_len=80, notes=3, note_len=200, touches=2, id_len=None):
    nid = "%s-%05d" % (prefix, i)
    if id_len:
        nid = (nid + "-" * id_len)[:id_len]
    return {"id": nid, "gist": ("gist é %d " % i + "g" * gist_len)[:gist_len],
            "notes": ["note \"%d\" ✓ " % k + "n" * note_len for k in range(notes)],
            "touches": ["src/f%d.py" % k for k in range(touches)], "state": "active"}


def graph(n, prefix, n_edges=0, n_archived=0, **kw):
    nodes = [node(i, prefix, **kw) for i in range(n)]
    return {"nodes": nodes, "archived": ["%s-arch-%05d" % (prefix, i) for i in range(n_archived)],
            "edges": [{"from": nodes[i % n]["id"] if n else "a", "to": "src/x%d.py" % i, "rel": "in",
                       "notes": ["why %d" % i]} for i in range(n_edges)]}


def read(user, project):
    recency = {lv: {x["id"]: float(i) for i, x in enumerate(g["nodes"])} for lv, g in (("user", user),
                                                                                      ("project", project))}
    result = {"session_id": "s-1", "project_path": "/home/me/p", "user": user, "project": project,
              "budget": {"max_tokens": 5000, "user_tokens": 1, "project_tokens": 2}}
    return result, recency


@pytest.mark.parametrize("n_user, n_project, kw", [
    (600, 2400, {}),                                            # the graph: 3,000 nodes in grace with notes
    (0, 3000, {"gist_len": 2000, "id_len": 200}),               # longest ids and gists
    (5, 5, {"notes": 100, "note_len": 10000}),                  # few nodes, huge notes
    (0, 0, {}),
])
def test_full_read_is_bounded_valid_and_counts_what_it_left_out(n_user, n_project, kw):
    user = graph(n_user, "u", n_edges=n_user // 2, n_archived=n_user, **kw)
    project = graph(n_project, "p", n_edges=n_project // 2, n_archived=n_project, **kw)
    result, recency = read(user, project)
    out = structured.bound_read(result, recency)
    assert len(stringify(out)) <= 40000
    jsonschema.validate(out, SCHEMAS["kg_read"])
    if len(stringify(result)) <= 40000:
        assert out == result
        return
    for level, g in (("user", user), ("project", project)):
        cut = out["truncated"][level]
        assert len(out[level]["nodes"]) + cut.get("nodes", 0) == len(g["nodes"])
        assert len(out[level]["edges"]) + cut.get("edges", 0) == len(g["edges"])
        assert len(out[level]["archived"]) + cut.get("archived", 0) == len(g["archived"])
        if g["nodes"]:
            assert out[level]["nodes"], "each level keeps its newest nodes"
            kept = {x["id"] for x in out[level]["nodes"]}
            assert g["nodes"][-1]["id"] in kept           # the newest
    assert result["project"]["nodes"] == project["nodes"], "the input is not changed"


def test_full_read_drops_notes_before_edges_and_edges_before_archived():
    user = graph(0, "u")
    project = graph(150, "p", n_edges=300, n_archived=400, notes=3, note_len=100)
    result, recency = read(user, project)
    out = structured.bound_read(result, recency)
    cut = out["truncated"]["project"]
    assert cut["notes_of_nodes"] > 0
    assert "archived" not in cut and out["project"]["archived"] == project["archived"]
    assert len(stringify(out)) <= 40000


def test_read_of_ids_bounded():
    nodes = [dict(node(i, notes=2, note_len=7900), level="project",
                  edges=[{"from": "n-%05d" % i, "to": "t%d" % k, "rel": "r", "notes": ["x" * 50]} for k in range(30)])
             for i in range(200)]
    result = {"session_id": "s", "nodes": nodes, "missing": ["ghost"]}
    out = structured.bound_nodes(result)
    assert len(stringify(out)) <= 40000
    jsonschema.validate(out, SCHEMAS["kg_read"])
    cut = out["truncated"]
    kept = [x["id"] for x in out["nodes"]]
    assert kept == [x["id"] for x in nodes[:len(kept)]] and len(kept) + cut["nodes"] == 200
    assert out["nodes"][0] == nodes[0], "the first nodes read are whole"
    assert cut.get("notes_of", [kept[-1]]) == [kept[-1]]
    assert out["missing"] == ["ghost"]
    small = {"session_id": "s", "nodes": nodes[:1], "missing": []}
    assert structured.bound_nodes(small) == small


def test_read_of_ids_one_node_too_big_keeps_its_head():
    n = dict(node(0, notes=100, note_len=9000, touches=5), level="user", edges=[])
    out = structured.bound_nodes({"session_id": "s", "nodes": [n], "missing": ["x" * 200] * 200})
    assert len(stringify(out)) <= 40000
    jsonschema.validate(out, SCHEMAS["kg_read"])
    assert out["nodes"][0]["id"] == n["id"] and 0 < len(out["nodes"][0]["notes"]) < 100
    assert out["truncated"]["notes_of"] == [n["id"]]
    assert len(out["missing"]) + out["truncated"].get("missing", 0) == 200


@pytest.mark.parametrize("n, kw", [(200, {"gist_len": 2000, "id_len": 200}), (200, {}), (3, {})])
def test_search_bounded(n, kw):
    rows = [dict(node(i, **kw), level="project", score=10.0 - i / 100, project_path="/home/me/p") for i in range(n)]
    out = structured.bound_search({"results": rows})
    assert len(stringify(out)) <= 10000
    jsonschema.validate(out, SCHEMAS["kg_search"])
    kept = [x["id"] for x in out["results"]]
    assert kept == [x["id"] for x in rows[:len(kept)]], "best first, the worst go"
    assert len(kept) + out.get("truncated", {}).get("results", 0) == n
    assert kept


def test_sync_bounded():
    r = {"session_id": "s", "full_resync": False,
         "nodes": [dict(node(i), level="user") for i in range(3000)],
         "edges": [{"from": "a", "to": "b%d" % i, "rel": "r", "notes": ["n"], "level": "project"} for i in range(1000)],
         "deleted_nodes": [{"level": "user", "id": "d%d" % i} for i in range(2000)],
         "deleted_edges": [{"level": "user", "from": "a", "to": "b", "rel": "r%d" % i} for i in range(2000)]}
    out = structured.bound_sync(r)
    assert len(stringify(out)) <= 40000
    jsonschema.validate(out, SCHEMAS["kg_sync"])
    cut = out["truncated"]
    for key in ("nodes", "edges", "deleted_nodes", "deleted_edges"):
        assert len(out[key]) + cut.get(key, 0) == len(r[key])
    assert out["nodes"], "nodes are the last to go"


def test_schemas_declare_truncated():
    for name in ("kg_read", "kg_search", "kg_sync"):
        assert "truncated" in SCHEMAS[name]["properties"]
        assert "truncated" not in SCHEMAS[name]["required"]
