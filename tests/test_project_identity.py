"""A project is the same graph whatever its folder (contract section 9): the registry finds a
project by its repository's identity; graphs made before identities are carried over, two of one
repository merged by the merge rule with nothing lost."""

import json
import os

from kg.memory import git_runner, repo_id
from kg.memory.store import Settings, Store
from kg.travel import team


def git(cwd, *args):
    return git_runner.output(list(args), str(cwd))


def make_repo(path):
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("%s\n" % path.name)  # two repositories, two root commits
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def open_store(root):
    return team.install(Store(str(root), Settings(max_tokens=10 ** 6))).open()


def put(store, path, nid, gist, notes=None):
    s = store.start_session(str(path))
    store.put_node(s, "project", nid, gist, notes)
    return s


def ids(store, path):
    s = store.start_session(str(path))
    return set(store.graph("project", s).nodes)


def test_same_repository_cloned_at_two_paths_is_one_graph(tmp_path):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "src" / "app", tmp_path / "work" / "app2"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    store = open_store(tmp_path / "root")
    try:
        put(store, a, "from-a", "written in ~/src/app")
        put(store, b, "from-b", "written in ~/work/app2")
        assert ids(store, a) == ids(store, b) == {"from-a", "from-b"}
        g = store.graph("project", store.start_session(str(b)))
        root = git(origin, "rev-list", "--max-parents=0", "HEAD")
        assert g.meta["repo_id"] == repo_id.identity_for(root, str(origin), str(origin))
    finally:
        store.close()
    assert len([d for d in os.listdir(str(tmp_path / "root" / "projects"))]) == 1
    store = open_store(tmp_path / "root")  # and after a restart, from either path first
    try:
        assert ids(store, b) == {"from-a", "from-b"}
    finally:
        store.close()


def test_repository_without_commits_is_known_by_its_origin(tmp_path):
    paths = []
    for name in ("one", "two"):
        p = tmp_path / name
        p.mkdir()
        git(p, "init", "-q")
        git(p, "remote", "add", "origin", "git@example.com:me/app.git" if name == "one" else "https://example.com/me/app")
        paths.append(p)
    store = open_store(tmp_path / "root")
    try:
        put(store, paths[0], "n", "seen from both")
        assert ids(store, paths[1]) == {"n"}
    finally:
        store.close()


def test_not_a_repository_and_other_repositories_stay_apart(tmp_path):
    plain = tmp_path / "notes"
    plain.mkdir()
    other = make_repo(tmp_path / "other")
    mine = make_repo(tmp_path / "mine")
    store = open_store(tmp_path / "root")
    try:
        put(store, plain, "p", "plain folder")
        put(store, other, "o", "other repo")
        put(store, mine, "m", "my repo")
        assert ids(store, plain) == {"p"} and ids(store, other) == {"o"} and ids(store, mine) == {"m"}
    finally:
        store.close()


def test_linked_worktree_is_the_same_graph(tmp_path):
    repo = make_repo(tmp_path / "repo")
    git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt"))
    store = open_store(tmp_path / "root")
    try:
        put(store, repo, "n", "main checkout")
        assert "n" in ids(store, tmp_path / "wt")
    finally:
        store.close()


def test_a_checkout_holding_its_own_kg_folder_is_its_own_graph(tmp_path):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    (b / ".kg").mkdir()
    store = open_store(tmp_path / "root")
    try:
        put(store, a, "in-a", "a")
        assert ids(store, b) == set()
    finally:
        store.close()


def _old_graph(root, slug, project_path, nodes):
    d = root / "projects" / slug
    d.mkdir(parents=True)
    (d / "graph.json").write_text(json.dumps({"nodes": nodes, "edges": {}, "_meta": {"project_path": project_path}}))


def test_two_old_graphs_of_one_repository_are_merged_nothing_lost(tmp_path):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "src" / "app", tmp_path / "work" / "app"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    root = tmp_path / "root"
    t = 1700000000.0
    _old_graph(root, "app", os.path.realpath(str(a)), {
        "only-a": {"id": "only-a", "gist": "a", "notes": [], "touches": [], "_created_ts": t, "_write_ts": t},
        "both": {"id": "both", "gist": "older", "notes": ["from a"], "touches": [], "_created_ts": t, "_write_ts": t}})
    _old_graph(root, "app-12345678", os.path.realpath(str(b)), {
        "only-b": {"id": "only-b", "gist": "b", "notes": [], "touches": [], "_created_ts": t, "_write_ts": t},
        "both": {"id": "both", "gist": "newer", "notes": ["from b"], "touches": [], "_created_ts": t,
                 "_write_ts": t + 10}})
    store = open_store(root)
    try:
        for path in (a, b):
            g = store.graph("project", store.start_session(str(path)))
            assert set(g.nodes) == {"only-a", "only-b", "both"}
            assert g.nodes["both"]["gist"] == "newer"
            assert set(g.nodes["both"]["notes"]) == {"from a", "from b"}
    finally:
        store.close()
    kept = os.listdir(str(root / "projects" / "app-12345678"))
    assert any(n.startswith("graph.json.merged-") for n in kept) and "graph.json" not in kept


def test_old_graph_gets_its_identity_recorded(tmp_path):
    repo = make_repo(tmp_path / "repo")
    root = tmp_path / "root"
    _old_graph(root, "repo", os.path.realpath(str(repo)), {
        "n": {"id": "n", "gist": "old", "notes": [], "touches": []}})
    store = open_store(root)
    try:
        g = store.graph("project", store.start_session(str(repo)))
        assert "n" in g.nodes and g.meta["repo_id"].startswith("git-")
    finally:
        store.close()
    with open(str(root / "projects" / "repo" / "graph.json")) as f:
        assert json.load(f)["_meta"]["repo_id"].startswith("git-")


def test_merge_graph_into_follows_the_one_merge_rule():
    """Two old graphs of one repository: a node only in the other arrives; a node in both takes the
    later gist and the union of notes, and the later read; an edge in both, the union of notes."""
    from kg.core.graph import Graph
    from kg.memory.identities import merge_graph_into

    def node(nid, gist, notes, t, read=None):
        return {"id": nid, "gist": gist, "notes": notes, "touches": [], "_created_ts": 1.0,
                "_write_ts": t, "_read_ts": read}

    into, other = Graph("project"), Graph("project")
    into.put_node(node("both", "old gist", ["a"], 10.0, read=50.0))
    other.put_node(node("both", "new gist", ["b"], 20.0, read=30.0))
    other.put_node(node("only-other", "arrives", [], 5.0))
    into.put_edge({"from": "both", "to": "src/a.py", "rel": "in", "notes": ["x"], "_write_ts": 10.0})
    other.put_edge({"from": "both", "to": "src/a.py", "rel": "in", "notes": ["y"], "_write_ts": 20.0})
    assert merge_graph_into(into, other) == 3
    both = into.nodes["both"]
    assert both["gist"] == "new gist" and sorted(both["notes"]) == ["a", "b"] and both["_read_ts"] == 50.0
    assert into.nodes["only-other"]["gist"] == "arrives"
    assert sorted(into.edges["both->src/a.py:in"]["notes"]) == ["x", "y"]
    assert merge_graph_into(into, other) == 0  # merging again changes nothing
