"""Contract section 12, "a file-path edge's end is judged the same way", on a real git repository:
a put of an edge records the state of its file ends, a commit that changes such a file marks the
edge where it reaches the model (a full kg_read's edge lines, a read by id), and a re-put of the
edge makes it current. Also: a full read's view carries the marks joined as it is built."""

import subprocess

import jsonschema
import pytest

from kg.api import render, tools
from kg.core import graph
from kg.memory.store import Store

from helpers import clean_env


def git(cwd, *args):
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
                    GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git"] + list(args), cwd=str(cwd), env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / "src" / "auth.py").write_text("def refresh(t):\n    return t + 1\n\n\ndef login(u):\n    return u\n")
    (r / "src" / "db.py").write_text("x = 1\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "first")
    return r


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "root")).open()
    yield s
    s.close()


def full_text(store, session):
    graphs = store.read_graphs(session)
    return render.render_read({"session_id": session.id, "project_path": session.project_path,
                               "user": graphs["user"], "project": graphs["project"]}, store.settings.max_tokens)


def edge_marks(store, session):
    got = store.read_graphs(session)["project"]["edges"]
    return {(e["from"], e["rel"], e["to"]): e["stale"]["mark"] for e in got if "stale" in e}


def test_a_put_records_the_file_ends_only(repo, store):
    s = store.start_session(str(repo))
    store.put_node(s, "project", "auth", "how refresh works")
    store.put_node(s, "project", "db", "the db module")
    store.put_edge(s, "project", "auth", "src/auth.py#refresh", "explains")
    store.put_edge(s, "project", "auth", "db", "uses")
    store.put_edge(s, "project", "auth", "src/missing.py", "mentions")
    g = store.project_graph(s.project_path)
    rec = g.edges["auth->src/auth.py#refresh:explains"]["_files"]
    assert rec["commit"] == git(repo, "rev-parse", "HEAD")
    assert set(rec["files"]) == {"src/auth.py#refresh"} and rec["files"]["src/auth.py#refresh"]["lines"] == 2
    assert "_files" not in g.edges["auth->db:uses"]  # both ends are nodes
    assert "_files" not in g.edges["auth->src/missing.py:mentions"]  # no such file: nothing to judge
    # the recorded states are personal: never in a public EDGE
    assert all("_files" not in e for e in store.read_graphs(s)["project"]["edges"])


def test_a_commit_to_an_edge_file_marks_the_edge_and_a_re_put_clears_it(repo, store):
    s = store.start_session(str(repo))
    store.put_node(s, "project", "auth", "how refresh works")
    store.put_edge(s, "project", "auth", "src/auth.py#refresh", "explains")
    store.put_edge(s, "project", "auth", "src/auth.py#login", "explains")
    store.put_edge(s, "project", "src/db.py", "auth", "feeds")
    store.staleness.refresh()
    assert edge_marks(store, s) == {}
    assert "[stale" not in full_text(store, s)
    (repo / "src" / "auth.py").write_text("def refresh(t):\n    return t + 2\n\n\ndef login(u):\n    return u\n")
    (repo / "src" / "db.py").write_text("x = 2\ny = 3\n")
    git(repo, "commit", "-q", "-am", "second")
    store.staleness.refresh()
    assert edge_marks(store, s) == {
        ("auth", "explains", "src/auth.py#refresh"): "stale: refresh in src/auth.py changed, 1 commit ago",
        ("src/db.py", "feeds", "auth"): "stale: src/db.py changed, 2 of 2 lines, 1 commit ago"}
    assert store.staleness.last["stale_edges"] == 2
    text = full_text(store, s)
    assert "- auth -[explains]-> src/auth.py#refresh [stale: refresh in src/auth.py changed, 1 commit ago]" in text
    assert "- auth -[explains]-> src/auth.py#login\n" in text  # login did not change: not marked
    # a read by id: the node's edge lines carry the mark; the node itself touches nothing
    node = store.read_nodes(s, ["auth"])["nodes"][0]
    assert "stale" not in node
    lines = render.render_nodes({"session_id": s.id, "nodes": [node], "missing": []})
    assert "edge: src/db.py -[feeds]-> auth [stale: src/db.py changed, 2 of 2 lines, 1 commit ago]" in lines
    stale_edge = next(e for e in node["edges"] if e["from"] == "src/db.py")
    assert stale_edge["stale"]["files"] == [{"touch": "src/db.py", "change": "changed", "commits": 1,
                                             "lines_changed": 2, "lines": 2}]
    g = store.project_graph(s.project_path)
    assert set(store.staleness.marks.valid_edges(g)) == {"auth->src/auth.py#refresh:explains",
                                                         "src/db.py->auth:feeds"}
    # a re-put of the edge (same notes) makes it current at once, and the next pass agrees
    store.put_edge(s, "project", "src/db.py", "auth", "feeds")
    assert store.staleness.marks.of_edge(g, "src/db.py->auth:feeds") is None
    assert set(edge_marks(store, s)) == {("auth", "explains", "src/auth.py#refresh")}
    store.staleness.refresh()
    assert set(edge_marks(store, s)) == {("auth", "explains", "src/auth.py#refresh")}


def test_a_deleted_edge_file(repo, store):
    s = store.start_session(str(repo))
    store.put_node(s, "project", "db", "the db module")
    store.put_edge(s, "project", "db", "src/db.py", "lives-in")
    git(repo, "rm", "-q", "src/db.py")
    git(repo, "commit", "-q", "-m", "gone")
    store.staleness.refresh()
    assert edge_marks(store, s) == {("db", "lives-in", "src/db.py"): "stale: src/db.py deleted, 1 commit ago"}


def test_the_view_joins_marks_as_built_and_annotate_leaves_it(repo, store):
    s = store.start_session(str(repo))
    for i in range(30):
        store.put_node(s, "project", "n%02d" % i, "node %d" % i, touches=["src/db.py"] if i % 3 == 0 else [])
    (repo / "src" / "db.py").write_text("x = 9\n")
    store.staleness.refresh()
    g = store.project_graph(s.project_path)
    with store.lock:
        view = g.active_view()
    assert isinstance(view["nodes"], graph.Joined)
    assert {n["id"] for n in view["nodes"] if "stale" in n} == {"n%02d" % i for i in range(0, 30, 3)}
    # a put after the pass: the mark no longer holds, in the next view and in annotate alike
    store.put_node(s, "project", "n03", "node 3 again")
    with store.lock:
        view = g.active_view()
        again = store.staleness.marks.annotate(g, [dict(n) for n in view["nodes"]])
    assert {n["id"] for n in view["nodes"] if "stale" in n} == {"n%02d" % i for i in range(0, 30, 3)} - {"n03"}
    assert {n["id"] for n in again if "stale" in n} == {"n%02d" % i for i in range(0, 30, 3)} - {"n03"}
    # a graph the pass has not handed marks to (none stale) builds a plain list, nothing joined
    (repo / "src" / "db.py").write_text("x = 1\n")  # back as the others recorded it; n03 recorded "x = 9"
    store.put_node(s, "project", "n03", "node 3 once more")
    store.staleness.refresh()
    assert g.read_marks is None
    with store.lock:
        assert type(g.active_view()["nodes"]) is list


def test_structured_results_with_marks_fit_the_tools_output_schemas(repo, store):
    schemas = {t["name"]: t["outputSchema"] for t in tools.list_tools(structured=True)}
    s = store.start_session(str(repo))
    store.put_node(s, "project", "auth", "how refresh works", touches=["src/auth.py#refresh"])
    store.put_edge(s, "project", "auth", "src/db.py", "uses")
    (repo / "src" / "auth.py").write_text("def refresh(t):\n    return t + 3\n")
    (repo / "src" / "db.py").write_text("x = 5\n")
    store.staleness.refresh()
    args = {"session_id": s.id}
    for name, extra in (("kg_read", {}), ("kg_read", {"id": "auth"}), ("kg_search", {"query": "refresh"}),
                        ("kg_sync", {})):
        out = tools.call(store, name, dict(args, **extra), structured=True)
        assert not out.get("isError"), out
        jsonschema.validate(out["structuredContent"], schemas[name])
    full = tools.call(store, "kg_read", args, structured=True)["structuredContent"]["project"]
    assert full["nodes"][0]["stale"]["mark"] == "stale: refresh in src/auth.py changed, not committed"
    assert full["edges"][0]["stale"]["files"] == [{"touch": "src/db.py", "change": "changed", "commits": 0,
                                                   "lines_changed": 1, "lines": 1}]


def test_a_sync_list_of_edges_gets_the_marks_of_its_level(repo, store):
    s = store.start_session(str(repo))
    store.put_node(s, "project", "db", "the db module")
    store.put_edge(s, "project", "db", "src/db.py", "lives-in")
    store.put_edge(s, "project", "db", "src/auth.py", "near")
    (repo / "src" / "db.py").write_text("x = 7\n")
    store.staleness.refresh()
    g = store.project_graph(s.project_path)
    items = [{"from": "db", "to": "src/db.py", "rel": "lives-in", "notes": [], "level": "project"},
             {"from": "db", "to": "src/db.py", "rel": "lives-in", "notes": [], "level": "user"},
             {"from": "db", "to": "src/auth.py", "rel": "near", "notes": [], "level": "project"}]
    shared = items[0]
    with store.lock:
        got = store.staleness.marks.annotate_edges(g, list(items), level="project")
    assert [("stale" in e) for e in got] == [True, False, False]
    assert got[0]["stale"]["mark"] == "stale: src/db.py changed, 1 of 1 lines, not committed"
    assert "stale" not in shared  # a copy: the change log's own dict is left alone
    assert "[stale: src/db.py changed, 1 of 1 lines, not committed]" in render.render_sync(
        {"session_id": s.id, "nodes": [], "edges": got, "deleted_nodes": [], "deleted_edges": []})


def test_rest_and_kg_sync_carry_an_edges_mark(repo, store):
    """The wiring: REST's graph view (kg/api/rest.py) and a real kg_sync (Store.sync) give a stale
    edge its "stale", as they do a node."""
    from kg.api import rest

    s, other = store.start_session(str(repo)), store.start_session(str(repo))
    store.put_node(s, "project", "db", "the db module")
    store.sync(other)
    store.put_edge(s, "project", "db", "src/db.py", "lives-in")
    (repo / "src" / "db.py").write_text("x = 7\n")
    store.staleness.refresh()
    with store.lock:
        shown = rest._full_graph(store, store.project_graph(s.project_path))
    (edge,) = shown["edges"]
    assert edge["stale"]["mark"] == "stale: src/db.py changed, 1 of 1 lines, not committed"
    (synced,) = store.sync(other)["edges"]
    assert synced["stale"]["mark"] == edge["stale"]["mark"]
