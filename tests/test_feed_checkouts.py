"""The live feed follows the graph a path resolves to (contract sections 7 and 9): a viewer of another
checkout of a repository (the same graph, reached through an alias) gets that graph's events, and only
its. Unit level: Registry.graph_path; end to end: `GET /ws?project_path=<second clone>` on a real kgd."""

import json
import os
import time
from urllib.parse import urlencode

import pytest

from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import real

TIMEOUT = 5.0


def git(cwd, *args):
    return git_runner.output(list(args), str(cwd))


def make_repo(path):
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("%s\n" % path.name)  # each repository its own root commit
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


@pytest.fixture
def clones(tmp_path):
    origin = make_repo(tmp_path / "origin")
    a, b = tmp_path / "src" / "app", tmp_path / "work" / "app2"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    return real(a), real(b)


@pytest.fixture
def store(tmp_path):
    s = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 6))).open()
    yield s
    s.close()


def test_another_checkout_resolves_to_the_graph_of_its_repository(store, clones):
    a, b = clones
    assert store.registry.graph_path(b) == b  # no graph for that repository yet: its own path
    store.start_session(a)
    assert store.registry.graph_path(b) == a
    assert store.registry.graph_path(a) == a
    assert b not in store.projects and b not in store.registry.aliases  # looking loads nothing


def test_a_graph_on_disk_not_loaded_yet_resolves_to_its_recorded_path(tmp_path, clones):
    a, b = clones
    s = team.install(Store(str(tmp_path / "root"), Settings())).open()
    s.start_session(a)
    s.close()
    s = team.install(Store(str(tmp_path / "root"), Settings())).open()
    try:
        assert s.registry.graph_path(b) == a
        assert not s.projects  # still not loaded
    finally:
        s.close()


def test_a_checkout_holding_its_own_kg_and_other_repositories_stay_apart(tmp_path, store, clones):
    a, b = clones
    store.start_session(a)
    os.mkdir(os.path.join(b, ".kg"))  # its branch's knowledge: its own graph
    assert store.registry.graph_path(b) == b
    other = real(make_repo(tmp_path / "other"))
    assert store.registry.graph_path(other) == other


# ----------------------------------------------------------------------------- end to end

def _ws(daemon, project_path):
    websockets = pytest.importorskip("websockets.sync.client")
    kw = {"open_timeout": TIMEOUT, "close_timeout": TIMEOUT, "compression": None}
    url = "ws://127.0.0.1:%d/ws?%s" % (daemon.port, urlencode({"project_path": project_path}))
    try:
        return websockets.connect(url, proxy=None, **kw).__enter__()
    except TypeError:  # websockets < 15 has no proxy option
        return websockets.connect(url, **kw).__enter__()


def _next(ws, kind):
    deadline = time.monotonic() + TIMEOUT
    while True:
        ev = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if ev.get("type") == kind:
            return ev
        assert ev.get("type") == "compacted", ev


@pytest.mark.e2e
def test_a_viewer_of_another_checkout_gets_the_graph_events(make_daemon, clones, tmp_path):
    a, b = clones
    other = real(make_repo(tmp_path / "other"))
    daemon = make_daemon()
    sid = daemon.call_tool("kg_read", {"cwd": a})["session_id"]
    other_sid = daemon.call_tool("kg_read", {"cwd": other})["session_id"]
    ws = _ws(daemon, b)
    try:
        hello = _next(ws, "connected")
        assert hello["project_path"] == a  # the path this feed's events name
        daemon.call_tool("kg_put_node", {"session_id": other_sid, "level": "project", "id": "elsewhere", "gist": "g"})
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "from-a", "gist": "written in a"})
        ev = _next(ws, "node_put")  # the other repository's write never arrives: this is the first
        assert ev["project_path"] == a and ev["node"]["id"] == "from-a"
        st, _, _ = daemon.request("PUT", "/api/nodes/project/from-b", {"gist": "written in b", "project_path": b})
        assert st == 200
        ev = _next(ws, "node_put")
        assert ev["project_path"] == a and ev["node"]["id"] == "from-b"
    finally:
        ws.close()
    st, _, body = daemon.request("GET", "/api/graph?" + urlencode({"project_path": b}))
    graph = json.loads(body)
    assert st == 200 and graph["project_path"] == a  # so the viewer takes the events it is sent
    assert {n["id"] for n in graph["project"]["nodes"]} == {"from-a", "from-b"}
