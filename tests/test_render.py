"""kg/api/render.py: the text an agent reads (contract section 3: kg_read <= 40,000 characters,
kg_search <= 10,000, whatever the graph holds; trimmed parts are named, never dropped silently)."""

import re

import pytest

from kg.api import render


def view(n_nodes=0, gist_len=20, n_edges=0, n_archived=0, prefix="", id_len=None, tokens=0):
    """A graph as the store hands it to render_read (Store._graph_view)."""
    def nid(i):
        base = "%snode-%05d" % (prefix, i)
        return base if id_len is None else (base + "-" * id_len)[:id_len]
    nodes = [{"id": nid(i), "gist": ("gist of %s " % nid(i) + "x" * gist_len)[:gist_len] if gist_len else "",
              "notes": [], "touches": [], "state": "active"} for i in range(n_nodes)]
    recency = {n["id"]: 1000.0 + i for i, n in enumerate(nodes)}     # higher index = newer
    archived = ["%sarch-%05d" % (prefix, i) for i in range(n_archived)]
    edges = [{"from": nid(i % max(1, n_nodes)), "to": "src/file_%d.py" % i, "rel": "rel-%d" % (i % 7), "notes": ["n"]}
             for i in range(n_edges)]
    return {"nodes": nodes, "recency": recency, "archived": archived, "edges": edges, "tokens": tokens}


def read_result(user, project, sid="sess-1234", project_path="/home/me/proj"):
    return {"session_id": sid, "project_path": project_path, "user": user, "project": project,
            "budget": {"max_tokens": 5000, "user_tokens": user["tokens"], "project_tokens": project["tokens"]}}


# ---------------------------------------------------------------- small graphs: everything shown

def test_small_read_shows_everything():
    user = view(5, gist_len=60, n_edges=3, n_archived=4, prefix="u-", tokens=123)
    proj = view(7, gist_len=60, n_edges=4, n_archived=2, prefix="p-", tokens=456)
    text = render.render_read(read_result(user, proj, sid="abc-123"), 5000)
    assert "Session: abc-123" in text.splitlines()
    assert "/home/me/proj" in text
    for g in (user, proj):
        for n in g["nodes"]:
            assert n["id"] in text
            assert n["gist"] in text
        for a in g["archived"]:
            assert a in text
        for e in g["edges"]:
            assert e["from"] in text and e["to"] in text and e["rel"] in text
            assert re.search(re.escape(e["from"]) + r".*" + re.escape(e["rel"]) + r".*" + re.escape(e["to"]), text)
    assert "123" in text and "456" in text and "5000" in text
    assert "output cut" not in text and "not listed" not in text


def test_empty_graphs():
    text = render.render_read(read_result(view(), view(), project_path=None), 5000)
    assert "Session: sess-1234" in text
    assert "(empty)" in text
    assert len(text) < 2000


def test_gist_whitespace_is_flattened():
    user = view(1)
    user["nodes"][0]["gist"] = "line one\nline two\ttabbed"
    text = render.render_read(read_result(user, view()), 5000)
    assert "line one line two tabbed" in text


def test_newest_nodes_first():
    user = view(10, prefix="u-")
    text = render.render_read(read_result(user, view()), 5000)
    assert text.index("u-node-00009") < text.index("u-node-00000")


# ---------------------------------------------------------------- huge graphs: bounded, and says so

def _huge():
    user = view(5000, gist_len=500, n_edges=20000, n_archived=10000, prefix="u-", tokens=999999)
    proj = view(5000, gist_len=500, n_edges=20000, n_archived=10000, prefix="p-", tokens=999999)
    return read_result(user, proj, sid="sess-huge"), user, proj


@pytest.fixture(scope="module")
def huge():
    result, user, proj = _huge()
    return render.render_read(result, 5000), user, proj


def test_huge_read_is_bounded(huge):
    text, _, _ = huge
    assert len(text) <= render.READ_LIMIT == 40000


def test_huge_read_keeps_session_and_both_levels(huge):
    text, _, _ = huge
    assert "Session: sess-huge" in text.splitlines()
    assert "## User graph" in text and "## Project graph" in text


def test_huge_read_says_what_was_left_out(huge):
    text, user, proj = huge
    # archived ids and edges that are not listed are counted
    assert "10000 archived" in text
    assert "20000 edges" in text
    # active nodes: each is listed with its gist, or counted in a line that says it was left out
    for g, prefix in ((user, "u-"), (proj, "p-")):
        with_gist = sum(1 for line in text.splitlines() if line.startswith("- %snode-" % prefix))
        assert with_gist > 0
        left_out = re.search(r"(\d+) older active nodes not listed[^\n]*%snode-" % prefix, text)
        assert left_out, "the text does not say how many %s nodes were left out" % prefix
        assert with_gist + int(left_out.group(1)) == len(g["nodes"])


def test_archived_ids_outlive_edge_lines():
    """Crumbs: the archived ids lead back to archived knowledge; when the read is too long,
    edge lines go first (counted) and the archived ids stay listed."""
    user = view(20, gist_len=60, n_edges=3000, n_archived=300, prefix="u-")
    proj = view(20, gist_len=60, n_edges=3000, n_archived=300, prefix="p-")
    text = render.render_read(read_result(user, proj), 5000)
    assert len(text) <= render.READ_LIMIT
    assert "3000 edges not listed" in text
    for g in (user, proj):
        for a in g["archived"]:
            assert a in text
        for n in g["nodes"]:
            assert n["gist"] in text
    assert "archived nodes not listed" not in text


def test_archived_ids_are_counted_only_when_they_alone_do_not_fit():
    user = view(20, gist_len=60, n_edges=10, n_archived=5000, prefix="u-")
    text = render.render_read(read_result(user, view()), 5000)
    assert len(text) <= render.READ_LIMIT
    assert "5000 archived nodes not listed" in text
    assert "10 edges not listed" in text


def test_huge_read_keeps_the_newest_gists(huge):
    """The least valuable parts go first: the most recent active nodes keep their gists."""
    text, user, proj = huge
    for g in (user, proj):
        newest = g["nodes"][-1]
        assert newest["id"] in text
        assert newest["gist"][:40] in text


@pytest.mark.parametrize("n_nodes, gist_len, n_edges, n_archived, id_len", [
    (0, 0, 0, 20000, None),            # only archived ids
    (0, 0, 20000, 0, None),            # only edges (to file paths)
    (150, 2000, 0, 0, None),           # few nodes, longest gists
    (2000, 2000, 0, 0, 200),           # many nodes with the longest ids and gists
    (400, 10, 0, 0, 200),
    (15000, 0, 0, 0, None),
])
def test_read_bounded_table(n_nodes, gist_len, n_edges, n_archived, id_len):
    user = view(n_nodes, gist_len, n_edges, n_archived, prefix="u-", id_len=id_len)
    proj = view(n_nodes, gist_len, n_edges, n_archived, prefix="p-", id_len=id_len)
    text = render.render_read(read_result(user, proj, sid="s-bounded"), 5000)
    assert len(text) <= 40000
    assert "Session: s-bounded" in text


@pytest.mark.parametrize("id_len", [120, 200])
def test_read_with_long_ids_keeps_the_project_level(id_len):
    """Trimming must not lose a whole level: the project graph's header and its newest node stay
    even when the user graph alone is bigger than the limit."""
    user = view(3000, 300, 0, 0, prefix="u-", id_len=id_len)
    proj = view(3000, 300, 0, 0, prefix="p-", id_len=id_len)
    text = render.render_read(read_result(user, proj, sid="s-long"), 5000)
    assert len(text) <= 40000
    assert "## Project graph" in text
    assert proj["nodes"][-1]["id"] in text


# ---------------------------------------------------------------- search

def search_result(n, gist_len=300, id_len=30, state="active"):
    return {"results": [{"id": ("r%04d-" % i + "i" * id_len)[:id_len], "gist": "g" * gist_len, "notes": [],
                         "touches": [], "state": state if i % 3 else "orphaned", "level": "user",
                         "score": 1.0} for i in range(n)]}


@pytest.mark.parametrize("n, gist_len, id_len, query", [
    (200, 2000, 200, "q"),
    (200, 2000, 200, "q " * 450),
    (1000, 300, 30, "word"),
    (5, 10, 10, "x"),
])
def test_search_bounded(n, gist_len, id_len, query):
    text = render.render_search(search_result(n, gist_len, id_len), query)
    assert len(text) <= render.SEARCH_LIMIT == 10000


def test_search_says_how_many_were_left_out():
    r = search_result(200, 2000, 200)
    text = render.render_search(r, "q")
    shown = sum(1 for x in r["results"] if x["id"] in text)
    assert 0 < shown < 200
    assert "%d more" % (200 - shown) in text


def test_search_small_shows_all_and_flags_states():
    r = {"results": [
        {"id": "a", "gist": "active one", "state": "active", "level": "user", "notes": [], "touches": [], "score": 3.0},
        {"id": "b", "gist": "sleeping one", "state": "archived", "level": "project", "notes": [], "touches": [],
         "score": 2.0},
        {"id": "c", "gist": "orphan one", "state": "orphaned", "level": "user", "notes": [], "touches": [],
         "score": 1.0}]}
    text = render.render_search(r, "one")
    for x in r["results"]:
        assert x["id"] in text and x["gist"] in text
    lines = text.splitlines()
    line_of = {i: next(line for line in lines if line.startswith("- %s " % i)) for i in "abc"}
    assert "archived" in line_of["b"]
    assert "orphaned" in line_of["c"]
    assert "orphaned" not in line_of["a"] and "archived" not in line_of["a"]
    assert text.index("- a ") < text.index("- b ") < text.index("- c ")


def test_search_names_other_projects_and_the_limit():
    base = {"notes": [], "touches": [], "state": "active", "score": 1.0}
    r = {"results": [dict(base, id="here", gist="g1", level="project", project_path="/p/mine"),
                     dict(base, id="there", gist="g2", level="project", project_path="/p/other"),
                     dict(base, id="mine", gist="g3", level="user")]}
    text = render.render_search(r, "g", project_path="/p/mine", asked=3)
    lines = text.splitlines()
    assert "- here (project): g1" in lines
    assert "- there (project /p/other): g2" in lines
    assert "- mine (user): g3" in lines
    assert "limit 3 reached" in lines[0]
    assert "limit" not in render.render_search(r, "g", project_path="/p/mine", asked=20)


def test_search_no_results():
    text = render.render_search({"results": []}, "zebra")
    assert "zebra" in text and len(text) < 200


# ---------------------------------------------------------------- sync

def sync_result(**kw):
    r = {"session_id": "s", "nodes": [], "edges": [], "deleted_nodes": [], "deleted_edges": [], "full_resync": False}
    r.update(kw)
    return r


def test_sync_nothing():
    text = render.render_sync(sync_result())
    assert "No changes" in text


def test_sync_lists_everything():
    r = sync_result(
        nodes=[{"id": "n1", "gist": "new insight", "state": "active", "level": "user", "notes": [], "touches": []}],
        edges=[{"from": "n1", "to": "src/a.py", "rel": "in", "notes": [], "level": "project"}],
        deleted_nodes=[{"level": "project", "id": "gone-node"}],
        deleted_edges=[{"level": "user", "from": "x", "to": "y", "rel": "was"}])
    text = render.render_sync(r)
    for s in ("n1", "new insight", "src/a.py", "gone-node", "was", "deleted"):
        assert s in text
    assert "daemon restarted" not in text


def test_sync_full_resync_is_flagged():
    r = sync_result(full_resync=True, nodes=[{"id": "n", "gist": "g", "state": "active", "level": "user"}])
    assert "whole current graph" in render.render_sync(r)


def test_sync_bounded():
    r = sync_result(nodes=[{"id": "n%05d" % i, "gist": "g" * 2000, "state": "active", "level": "user"}
                           for i in range(2000)],
                    deleted_nodes=[{"level": "user", "id": "d%05d" % i} for i in range(5000)])
    text = render.render_sync(r)
    assert len(text) <= render.READ_LIMIT
    assert "cut" in text
    shown = sum(1 for line in text.splitlines() if line.startswith("node n"))
    assert 0 < shown < 2000
    assert "%d nodes, 5000 deleted nodes" % (2000 - shown) in text


# ---------------------------------------------------------------- nodes (kg_read id=...)

def test_render_nodes_full_content():
    r = {"session_id": "s", "missing": ["ghost"], "nodes": [
        {"id": "a", "level": "project", "state": "active", "gist": "the gist", "notes": ["note one", "note\ntwo"],
         "touches": ["src/a.py"], "edges": [{"from": "a", "to": "b", "rel": "uses", "notes": ["because"]}]}]}
    text = render.render_nodes(r)
    for s in ("a", "project", "active", "the gist", "note one", "note\ntwo", "src/a.py", "uses", "because", "ghost"):
        assert s in text


def test_render_nodes_nothing():
    assert render.render_nodes({"session_id": "s", "nodes": [], "missing": []})
    assert "x" in render.render_nodes({"session_id": "s", "nodes": [], "missing": ["x"]})


def test_render_nodes_bounded():
    nodes = [{"id": "n%d" % i, "level": "user", "state": "active", "gist": "g" * 2000, "notes": ["n" * 10000] * 5,
              "touches": [], "edges": []} for i in range(50)]
    text = render.render_nodes({"session_id": "s", "nodes": nodes, "missing": []})
    assert len(text) <= render.NODE_TEXT_LIMIT
    assert "left out to fit the context" in text          # notes of the node that did not fit
    assert "read but not shown to fit the context" in text
    for n in nodes:                                        # every node read is shown or named
        assert re.search(r"\b%s\b" % n["id"], text)
    assert "structured" not in text                        # by default there is no structured content


def test_render_nodes_starts_with_the_session():
    r = {"session_id": "sess-9", "missing": [], "nodes": [
        {"id": "a", "level": "user", "state": "archived", "gist": "g", "notes": [], "touches": [], "edges": []}]}
    text = render.render_nodes(r)
    assert text.splitlines()[0] == "Session: sess-9"
    assert "## a [user, archived]" in text


def test_render_nodes_one_long_node_keeps_its_edges_and_counts_its_notes():
    n = {"id": "big", "level": "project", "state": "active", "gist": "gist", "touches": ["src/x.py"],
         "notes": ["n%d " % i + "x" * 9000 for i in range(10)],
         "edges": [{"from": "big", "to": "t%d" % i, "rel": "uses", "notes": []} for i in range(5)]}
    text = render.render_nodes({"session_id": "s", "nodes": [n], "missing": []})
    assert len(text) <= render.NODE_TEXT_LIMIT
    for i in range(5):
        assert "big -[uses]-> t%d" % i in text
    shown = text.count("- note: ")
    assert 0 < shown < 10
    assert "%d notes and 0 edges of this node left out" % (10 - shown) in text


# ---------------------------------------------------------------- the one-line results

def test_one_liners():
    node = {"id": "a", "gist": "g" * 5000, "state": "active", "notes": [], "touches": []}
    assert len(render.render_put_node({"level": "user", "created": True, "node": node})) < 400
    put = render.render_put_node({"level": "project", "created": True, "node": dict(node, notes=["a", "b"],
                                                                                    touches=["x"])})
    assert put.startswith("Created project node a (active; 2 notes, 1 touch)")
    assert render.render_put_node({"level": "user", "created": False, "node": node}).startswith("Updated")
    e = {"from": "a", "to": "b", "rel": "r", "notes": []}
    assert "a -[r]-> b" in render.render_put_edge({"level": "user", "created": True, "edge": e})
    assert "2 edge" in render.render_delete_node({"level": "user", "id": "a", "edges_removed": 2})
    assert "a -[r]-> b" in render.render_delete_edge({"level": "user", "edge": e})
    assert "No progress" in render.render_progress({"task_id": "t", "level": "user", "state": None})
    assert '"step": 3' in render.render_progress({"task_id": "t", "level": "user", "state": {"step": 3}})


def test_full_read_names_preloaded_nodes_without_repeating_their_gists():
    g = {"nodes": [{"id": "a", "gist": "gist of a"}, {"id": "b", "gist": "gist of b"}], "archived": ["z"],
         "edges": [], "tokens": 50}
    u = {"nodes": [{"id": "a", "gist": "user a"}], "archived": [], "edges": [], "tokens": 20}
    result = {"session_id": "s1", "project_path": "/p", "user": u, "project": g}
    text = render.render_read(result, 5000, preloaded=["project:a", "user:zz"])
    assert "gist of a" not in text and "gist of b" in text and "user a" in text
    assert "gists not repeated: a" in text
    assert "## Project graph: 2 active" in text  # still counted
    assert render.render_read(result, 5000).count("gist of a") == 1


def test_sync_says_who_a_pull_came_from_and_lists_what_left_with_the_branch_on_one_line():
    one = sync_result(from_repository={"nodes": 8, "by": {"alice": 8}})
    assert "From the repository (a pull or checkout): 8 nodes by alice." in render.render_sync(
        dict(one, nodes=[{"id": "n", "gist": "g", "state": "active", "level": "project"}]))
    two = sync_result(from_repository={"nodes": 2, "by": {"bob": 1, "carol": 1}},
                      nodes=[{"id": "n", "gist": "g", "state": "active", "level": "project"}])
    assert "From the repository (a pull or checkout): 2 nodes (bob 1, carol 1)." in render.render_sync(two)
    left = sync_result(left_nodes=[{"id": "f%d" % i, "level": "project"} for i in range(25)])
    text = render.render_sync(left)
    lines = [ln for ln in text.splitlines() if ln.startswith("left with the branch")]
    assert len(lines) == 2 and lines[0].endswith("project): " + ", ".join("f%d" % i for i in range(20)))
    cut = render.render_sync(sync_result(left_nodes=[{"id": "x" * 150 + str(i), "level": "project"}
                                                     for i in range(3000)]))
    assert len(cut) <= render.READ_LIMIT and "nodes that left with the branch" in cut.splitlines()[-1]
    shown = sum(ln.count(", ") + 1 for ln in cut.splitlines() if ln.startswith("left with"))
    assert "%d nodes that left with the branch" % (3000 - shown) in cut
