"""git never runs under the store's lock (contract section 9): a project's identity (kg/memory/repo_id.py runs
git) is computed before the lock is taken, whichever way a request first names the project: a REST
`project_path` with no session, a session restored after a restart, an old graph indexed at open,
the read-only graph route, `kgd share`, another checkout of the same repository."""

import json
import os

import pytest

from kg.api import rest
from kg.core.errors import KgError
from kg.memory import git_runner as gitrun
from kg.memory.store import Settings, Store
from kg.travel import team


def git(cwd, *args):
    return gitrun.output(list(args), str(cwd))


def make_repo(path):
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("%s\n" % path.name)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


class GitWatch:
    """Wraps gitrun.run: records, for every git started, whether this thread held the store's lock."""

    def __init__(self, monkeypatch):
        self.store = None
        self.calls = []  # (git arguments, lock held)
        real = gitrun.run

        def run(args, cwd, *a, **kw):
            held = self.store is not None and self.store.lock._is_owned()
            self.calls.append((list(args), held))
            return real(args, cwd, *a, **kw)

        monkeypatch.setattr(gitrun, "run", run)

    def open(self, root):
        self.store = team.install(Store(str(root), Settings(max_tokens=10 ** 6)))
        return self.store.open()

    def reset(self):
        self.calls = []

    def check(self, ran=True):
        under = [args for args, held in self.calls if held]
        assert not under, "git ran under the store's lock: %s" % under
        if ran:
            assert self.calls, "git never ran: the test proves nothing"


@pytest.fixture
def watch(monkeypatch):
    w = GitWatch(monkeypatch)
    yield w
    if w.store is not None and not w.store.closed:
        w.store.close()


def _ops(repo):
    """Every store operation a REST route calls with a project_path and no session."""
    p = str(repo)
    return {
        "put_node": lambda s: s.put_node(None, "project", "n", "a gist", project_path=p),
        "put_edge": lambda s: s.put_edge(None, "project", "a.py", "b.py", "calls", project_path=p),
        "delete_node": lambda s: s.delete_node(None, "missing", "project", project_path=p),
        "delete_edge": lambda s: s.delete_edge(None, "a.py", "b.py", "calls", "project", project_path=p),
        "read_nodes": lambda s: s.read_nodes(None, ["n"], "project", project_path=p),
        "read_nodes_both_levels": lambda s: s.read_nodes(None, ["n"], None, project_path=p),
        "search": lambda s: s.search("gist", None, project_path=p),
        "progress": lambda s: s.progress(None, "task", {"step": 1}, "project", has_state=True, project_path=p),
        "graph": lambda s: s.graph("project", None, p),
        "graphs_for": lambda s: s.graphs_for(None, p),
        "project_graph": lambda s: s.project_graph(p),
        "start_session": lambda s: s.start_session(p),
        "bind_client": lambda s: s.bind_client("client-1", p),
    }


@pytest.mark.parametrize("op", sorted(_ops("/")))
def test_a_project_first_named_by_a_request_runs_git_outside_the_lock(tmp_path, watch, op):
    repo = make_repo(tmp_path / "repo")
    store = watch.open(tmp_path / "root")
    watch.reset()
    try:
        _ops(repo)[op](store)
    except KgError:
        pass  # a delete of nothing is NotFound: the project was addressed all the same
    watch.check()


@pytest.mark.parametrize("op", ["put_node", "read_nodes", "search", "graphs_for"])
def test_another_checkout_first_named_by_a_request_runs_git_outside_the_lock(tmp_path, watch, op):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    store = watch.open(tmp_path / "root")
    store.put_node(store.start_session(str(a)), "project", "n", "written in a")
    store.close()
    store = watch.open(tmp_path / "root")  # a fresh daemon: no identity known yet
    watch.reset()
    _ops(b)[op](store)
    watch.check()
    assert "n" in store.graph("project", None, str(b)).nodes  # b is the same graph as a


def test_a_restored_session_runs_git_outside_the_lock(tmp_path, watch):
    repo = make_repo(tmp_path / "repo")
    store = watch.open(tmp_path / "root")
    sid = store.start_session(str(repo)).id
    store.close()
    watch.reset()
    store = watch.open(tmp_path / "root")
    s = store.session(sid)
    with store.lock:  # as the hooks do: the session's graphs, taken under the lock
        graphs = store.graphs_for(s)
    assert [g.level for g in graphs] == ["user", "project"]
    watch.check()


def test_old_graphs_are_indexed_outside_the_lock(tmp_path, watch):
    repo = make_repo(tmp_path / "repo")
    d = tmp_path / "root" / "projects" / "repo"
    d.mkdir(parents=True)
    (d / "graph.json").write_text(json.dumps({"nodes": {}, "edges": {},
                                              "_meta": {"project_path": os.path.realpath(str(repo))}}))
    watch.open(tmp_path / "root")
    watch.check()


def test_the_graph_route_runs_git_outside_the_lock(tmp_path, watch):
    repo = make_repo(tmp_path / "repo")
    (repo / ".kg").mkdir()  # shared in its repository: the read-only route loads it
    store = watch.open(tmp_path / "root")
    watch.reset()
    out = rest.graph(store, None, {"project_path": [str(repo)]}, {})
    assert out["project"] is not None
    watch.check()


def test_share_runs_git_outside_the_lock(tmp_path, watch):
    repo = make_repo(tmp_path / "repo")
    store = watch.open(tmp_path / "root")
    watch.reset()
    store.team.share(str(repo))
    watch.check()


def test_an_old_graph_first_opened_through_another_checkout_runs_git_outside_the_lock(tmp_path, watch):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    d = tmp_path / "root" / "projects" / "a"
    d.mkdir(parents=True)
    (d / "graph.json").write_text(json.dumps({"nodes": {}, "edges": {},
                                              "_meta": {"project_path": os.path.realpath(str(a))}}))
    watch.open(tmp_path / "root").close()  # indexed by this daemon; its _meta has no identity yet
    store = watch.open(tmp_path / "root")
    watch.reset()
    store.put_node(None, "project", "n", "written from b", project_path=str(b))
    watch.check()
    g = store.graph("project", None, str(a))
    assert "n" in g.nodes and g.meta["repo_id"].startswith("git-")
