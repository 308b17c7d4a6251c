"""kg/memory/store.py with a temporary root and an injectable clock: sessions, project roots, the
write operations, kg_sync under many interleavings, durability across close / crash and
reopen, and journal folding. No daemon, no sockets."""

import json
import os
import random
import stat
import threading

import pytest

from kg.api import tools
from kg.core import model
from kg.core.errors import BadInput, Conflict, NotFound, StorageError
from kg.core.model import ACTIVE, ARCHIVED, ORPHANED
from kg.memory.projects import resolve_project_root
from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import StoreEnv

T0 = StoreEnv.T0
BIG = 10 ** 9          # max_tokens that never triggers compaction


def crash(store):
    """The process dies: nothing is folded or flushed; only the OS lock goes away."""
    for j in store.journals.values():
        j.close()
    store.root_lock.release()
    store.crashed = True


@pytest.fixture
def env(tmp_path):
    e = StoreEnv(tmp_path, max_tokens=BIG)
    yield e
    e.close_all()


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def fast_disk(monkeypatch):
    """For the long seeded workloads: a simulated crash is a process crash, which fsync does not
    change, so skip the real fsyncs (tens of milliseconds each on a busy disk)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None, raising=False)


# ---------------------------------------------------------------- resolve_project_root

def test_root_is_nearest_git_ancestor(tmp_path):
    proj = tmp_path / "a" / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "src" / "deep" / "er").mkdir(parents=True)
    expected = os.path.realpath(str(proj))
    assert resolve_project_root(str(proj)) == expected
    assert resolve_project_root(str(proj / "src" / "deep" / "er")) == expected
    assert resolve_project_root(str(proj / "src") + "/") == expected
    # a nested repository is its own project
    (proj / "vendor" / "lib" / ".git").mkdir(parents=True)
    assert resolve_project_root(str(proj / "vendor" / "lib")) == os.path.realpath(str(proj / "vendor" / "lib"))


def test_root_without_git_is_cwd(tmp_path):
    d = tmp_path / "plain" / "folder"
    d.mkdir(parents=True)
    assert resolve_project_root(str(d)) == os.path.realpath(str(d))


def test_root_follows_symlinks(tmp_path):
    proj = tmp_path / "real" / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "src").mkdir()
    os.symlink(str(proj), str(tmp_path / "link"))
    os.symlink(str(proj / "src"), str(tmp_path / "srclink"))
    expected = os.path.realpath(str(proj))
    assert resolve_project_root(str(tmp_path / "link")) == expected
    assert resolve_project_root(str(tmp_path / "srclink")) == expected
    assert resolve_project_root(str(tmp_path / "link" / "src" / ".." / "src")) == expected


def _worktree(tmp_path, relative):
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    wt = tmp_path / "elsewhere" / "wt"
    (wt / "src").mkdir(parents=True)
    gitdir = "../../main/.git/worktrees/wt" if relative else str(main / ".git" / "worktrees" / "wt")
    (wt / ".git").write_text("gitdir: %s\n" % gitdir)
    (main / ".git" / "worktrees" / "wt" / "gitdir").write_text(str(wt / ".git") + "\n")
    return main, wt


@pytest.mark.parametrize("relative", [False, True])
def test_linked_worktree_resolves_to_main_root(tmp_path, relative):
    main, wt = _worktree(tmp_path, relative)
    assert resolve_project_root(str(wt)) == os.path.realpath(str(main))
    assert resolve_project_root(str(wt / "src")) == os.path.realpath(str(main))
    assert resolve_project_root(str(main)) == os.path.realpath(str(main))


def test_submodule_is_its_own_project(tmp_path):
    main = tmp_path / "main"
    (main / ".git" / "modules" / "sub").mkdir(parents=True)
    (main / "sub").mkdir()
    (main / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert resolve_project_root(str(main / "sub")) == os.path.realpath(str(main / "sub"))


def test_git_file_that_is_not_a_gitdir_pointer(tmp_path):
    d = tmp_path / "odd"
    d.mkdir()
    (d / ".git").write_text("something else\n")
    assert resolve_project_root(str(d)) == os.path.realpath(str(d))


@pytest.mark.parametrize("cwd", [None, "", "   ", 5, ["/tmp"], "relative/path", "./x", "~/proj",
                                 "/no/such/dir/anywhere", "/tmp/a\x00b", "/" + "x" * 5000])
def test_bad_cwd(cwd):
    with pytest.raises(BadInput):
        resolve_project_root(cwd)


def test_cwd_that_is_a_file(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(BadInput):
        resolve_project_root(str(f))


# ---------------------------------------------------------------- sessions

def test_session_start_and_reuse(env):
    store = env.open()
    proj = env.project("proj")
    s = store.start_session(proj + "/src")
    assert s.project_path == os.path.realpath(proj)
    assert store.session(s.id) is s
    assert s.id in store.sessions
    other = store.start_session(proj)
    assert other.id != s.id
    assert store.start_session(None).project_path is None


def test_session_required_and_unknown(env):
    store = env.open()
    with pytest.raises(BadInput):
        store.session(None)
    assert store.session(None, required=False) is None
    with pytest.raises(NotFound):
        store.session("no-such-session")
    with pytest.raises(BadInput):
        store.session(123)


def test_session_expiry(env):
    store = env.open(session_ttl=100)
    s = store.start_session(env.project("p"))
    env.advance(99)
    assert store.session(s.id) is s          # activity refreshes it
    env.advance(99)
    assert store.session(s.id) is s
    env.advance(100)
    with pytest.raises(NotFound) as exc:
        store.session(s.id)
    assert "kg_read" in exc.value.message
    assert s.id not in store.sessions


def test_expire_sessions(env):
    store = env.open(session_ttl=100)
    a = store.start_session(None)
    env.advance(60)
    b = store.start_session(None)
    env.advance(50)
    assert store.expire_sessions() == 1
    assert set(store.sessions) == {b.id}
    assert a.id not in store.sessions


def test_sessions_persisted_and_reloaded(env):
    store = env.open(session_ttl=1000)
    proj = env.project("p")
    s = store.start_session(proj)
    with open(os.path.join(env.root, "sessions.json")) as f:
        saved = json.load(f)
    assert s.id in json.dumps(saved)
    assert mode(os.path.join(env.root, "sessions.json")) == 0o600
    store.close()
    store2 = env.open(session_ttl=1000)
    s2 = store2.session(s.id)
    assert s2.project_path == os.path.realpath(proj)
    store2.close()
    env.advance(2000)
    store3 = env.open(session_ttl=1000)
    with pytest.raises(NotFound):
        store3.session(s.id)


def test_session_persisted_even_after_crash(env):
    store = env.open()
    s = store.start_session(env.project("p"))
    crash(store)
    assert env.open().session(s.id).id == s.id


def test_kg_read_reuses_session(env):
    store = env.open()
    proj = env.project("p")
    r = tools.call(store, "kg_read", {"cwd": proj}, structured=True)
    sid = r["structuredContent"]["session_id"]
    r2 = tools.call(store, "kg_read", {"session_id": sid}, structured=True)
    assert r2["structuredContent"]["session_id"] == sid
    assert len(store.sessions) == 1
    r3 = tools.call(store, "kg_read", {"session_id": "expired-or-unknown", "cwd": proj}, structured=True)
    assert r3["isError"] is False and r3["structuredContent"]["session_id"] != sid
    r4 = tools.call(store, "kg_read", {"session_id": "expired-or-unknown"}, structured=True)
    assert r4["isError"] is True and "structuredContent" not in r4


# ---------------------------------------------------------------- put / merge / revive

@pytest.fixture
def one(env):
    store = env.open()
    s = store.start_session(env.project("proj"))
    return store, s


def test_put_new_node(one, env):
    store, s = one
    r = store.put_node(s, "project", "n1", "a gist", ["note"], ["src/a.py"])
    assert r == {"level": "project", "created": True,
                 "node": {"id": "n1", "gist": "a gist", "notes": ["note"], "touches": ["src/a.py"], "state": ACTIVE}}
    n = store.project_graph(s.project_path).nodes["n1"]
    assert n["_created_ts"] == n["_write_ts"] == env.clock()
    assert "n1" not in store.user.nodes


def test_put_new_node_needs_gist(one):
    store, s = one
    with pytest.raises(BadInput):
        store.put_node(s, "user", "n1", None, ["note"])
    assert "n1" not in store.user.nodes


@pytest.mark.parametrize("gist, notes, touches, expected", [
    (None, None, None, ("old gist", ["old note"], ["src/old.py"])),
    ("new gist", None, None, ("new gist", ["old note"], ["src/old.py"])),
    (None, ["n1", "n2"], None, ("old gist", ["n1", "n2"], ["src/old.py"])),
    (None, None, ["src/new.py"], ("old gist", ["old note"], ["src/new.py"])),
    (None, [], [], ("old gist", [], [])),
    ("g", ["one note"], ["one/touch.py"], ("g", ["one note"], ["one/touch.py"])),
])
def test_put_merges(one, env, gist, notes, touches, expected):
    store, s = one
    store.put_node(s, "user", "n", "old gist", ["old note"], ["src/old.py"])
    created = store.user.nodes["n"]["_created_ts"]
    env.advance(10)
    r = store.put_node(s, "user", "n", gist, notes, touches)
    assert r["created"] is False
    n = store.user.nodes["n"]
    assert (n["gist"], n["notes"], n["touches"]) == expected
    assert n["_created_ts"] == created
    assert n["_write_ts"] == env.clock()


@pytest.mark.parametrize("state", [ARCHIVED, ORPHANED])
def test_put_revives(one, state):
    store, s = one
    store.put_node(s, "user", "n", "gist")
    g = store.user
    g.nodes["n"]["_archived"] = True
    if state == ORPHANED:
        g.nodes["n"]["_orphaned_ts"] = 5.0
    g.refresh("n")
    assert g.state_counts[state] == 1
    r = store.put_node(s, "user", "n", None, ["fresh"])
    assert r["node"]["state"] == ACTIVE
    assert model.node_state(g.nodes["n"]) == ACTIVE
    assert g.state_counts == {ACTIVE: 1, ARCHIVED: 0, ORPHANED: 0}
    assert g.tokens == model.estimate_tokens(g.nodes, g.edges)


@pytest.mark.parametrize("args", [
    dict(level="nope", node_id="n", gist="g"),
    dict(level=None, node_id="n", gist="g"),
    dict(level="user", node_id="", gist="g"),
    dict(level="user", node_id="a\x00b", gist="g"),
    dict(level="user", node_id="n", gist=""),
    dict(level="user", node_id="n", gist="two\nlines"),
    dict(level="user", node_id="n", gist="g", notes=[1]),
    dict(level="user", node_id="n", gist="g", touches=["a\nb"]),
    dict(level="user", node_id="x" * 201, gist="g"),
])
def test_put_rejects(one, args):
    store, s = one
    with pytest.raises(BadInput):
        store.put_node(s, **args)
    assert store.user.nodes == {}


def test_project_level_needs_a_project(env):
    store = env.open()
    s = store.start_session(None)
    with pytest.raises(BadInput):
        store.put_node(s, "project", "n", "g")
    with pytest.raises(BadInput):
        store.put_node(None, "project", "n", "g")
    proj = env.project("p")
    r = store.put_node(None, "project", "n", "g", project_path=proj)
    assert r["created"] is True


# ---------------------------------------------------------------- delete

def test_delete_node_removes_edges(one):
    store, s = one
    for nid in ("a", "b", "c"):
        store.put_node(s, "project", nid, "gist " + nid)
    store.put_edge(s, "project", "a", "b", "uses")
    store.put_edge(s, "project", "c", "a", "explains")
    store.put_edge(s, "project", "a", "src/a.py", "in")
    store.put_edge(s, "project", "b", "c", "other")
    r = store.delete_node(s, "a")
    assert r == {"level": "project", "id": "a", "edges_removed": 3}
    g = store.project_graph(s.project_path)
    assert list(g.edges) == ["b->c:other"]
    assert g.tokens == model.estimate_tokens(g.nodes, g.edges)
    with pytest.raises(NotFound):
        store.delete_node(s, "a")


def test_delete_node_level_ambiguity(one):
    store, s = one
    store.put_node(s, "user", "same", "user version")
    store.put_node(s, "project", "same", "project version")
    with pytest.raises(Conflict):
        store.delete_node(s, "same")
    assert store.delete_node(s, "same", "user")["level"] == "user"
    assert store.delete_node(s, "same")["level"] == "project"


def test_delete_node_wrong_level(one):
    store, s = one
    store.put_node(s, "user", "u", "g")
    with pytest.raises(NotFound):
        store.delete_node(s, "u", "project")


def test_delete_edge(one):
    store, s = one
    store.put_node(s, "user", "a", "g")
    store.put_edge(s, "user", "a", "src/x.py", "in", ["why"])
    r = store.delete_edge(s, "a", "src/x.py", "in")
    assert r == {"level": "user", "edge": {"from": "a", "to": "src/x.py", "rel": "in", "notes": ["why"]}}
    assert store.user.edges == {}
    with pytest.raises(NotFound):
        store.delete_edge(s, "a", "src/x.py", "in")
    assert store.user.tokens == 20 + 0


# ---------------------------------------------------------------- edges

def test_edges_to_file_paths(one):
    store, s = one
    store.put_node(s, "project", "n", "g")
    for end in ("src/app.py", "README.md", "C:\\win\\path", "./rel", "/abs/path"):
        r = store.put_edge(s, "project", "n", end, "touches")
        assert r["created"] is True
    g = store.project_graph(s.project_path)
    assert g.tokens == 20 + 5 * 15
    r = store.put_edge(s, "project", "src/app.py", "n", "implements")     # a path as the from end
    assert r["edge"]["from"] == "src/app.py"


def test_edge_to_unknown_id_is_not_found(one):
    store, s = one
    store.put_node(s, "project", "n", "g")
    with pytest.raises(NotFound) as exc:
        store.put_edge(s, "project", "n", "no-such-node", "uses")
    assert "kg_put_node" in exc.value.message
    with pytest.raises(NotFound):
        store.put_edge(s, "project", "ghost", "n", "uses")
    assert store.project_graph(s.project_path).edges == {}


def test_edge_across_levels(one):
    store, s = one
    store.put_node(s, "user", "wisdom", "g")
    store.put_node(s, "project", "local", "g")
    assert store.put_edge(s, "project", "local", "wisdom", "applies")["created"] is True
    assert store.put_edge(s, "user", "wisdom", "local", "seen-in")["created"] is True


def test_edge_update_keeps_or_replaces_notes(one):
    store, s = one
    store.put_node(s, "user", "a", "g")
    store.put_node(s, "user", "b", "g")
    store.put_edge(s, "user", "a", "b", "r", ["first"])
    r = store.put_edge(s, "user", "a", "b", "r")
    assert r["created"] is False and r["edge"]["notes"] == ["first"]
    r = store.put_edge(s, "user", "a", "b", "r", ["second"])
    assert r["edge"]["notes"] == ["second"]
    assert len(store.user.edges) == 1
    assert store.user.tokens == 40 + 15


@pytest.mark.parametrize("frm, to, rel", [
    ("", "b", "r"), ("a", "", "r"), ("a", "b", ""), ("a\x00", "b", "r"), ("a", "b\nc", "r"), ("a", "b", "r\x1b"),
    ("a", "x" * 5000, "r"), ("a", "b", "r" * 101), (None, "b", "r"), ("a", 5, "r"), ("a", "b", None),
])
def test_edge_end_validation(one, frm, to, rel):
    store, s = one
    store.put_node(s, "user", "a", "g")
    store.put_node(s, "user", "b", "g")
    with pytest.raises(BadInput):
        store.put_edge(s, "user", frm, to, rel)
    assert store.user.edges == {}


# ---------------------------------------------------------------- read by id, search, progress

def test_read_nodes_promotes(one, env):
    store, s = one
    store.put_node(s, "user", "a", "g")
    g = store.user
    g.nodes["a"]["_archived"] = True
    g.refresh("a")
    env.advance(5)
    r = store.read_nodes(s, ["a", "missing"])
    assert [n["id"] for n in r["nodes"]] == ["a"] and r["missing"] == ["missing"]
    assert r["nodes"][0]["state"] == ACTIVE
    assert g.nodes["a"]["_read_ts"] == env.clock()
    assert g.tokens == model.estimate_tokens(g.nodes, g.edges)


def test_search_scope(env):
    store = env.open()
    p, q = env.project("p"), env.project("q")
    sp, sq = store.start_session(p), store.start_session(q)
    store.put_node(sp, "user", "shared-wisdom", "about the cache layer")
    store.put_node(sp, "project", "cache", "the p cache")
    store.put_node(sq, "project", "q-cache", "the q cache")
    g = store.project_graph(sp.project_path)
    g.nodes["cache"]["_archived"] = True
    g.nodes["cache"]["_orphaned_ts"] = env.clock()
    g.refresh("cache")
    r = store.search("cache", sp)["results"]
    assert [x["id"] for x in r][0] == "cache"                        # exact id first, orphaned or not
    assert r[0]["state"] == ORPHANED and r[0]["level"] == "project"
    assert {x["id"] for x in r} == {"cache", "shared-wisdom"}         # q's graph is not this session's
    everywhere = {x["id"] for x in store.search("cache")["results"]}  # no session: every project graph
    assert everywhere == {"cache", "shared-wisdom", "q-cache"}
    for bad in ("", "   ", None, "x" * 1001):
        with pytest.raises(BadInput):
            store.search(bad, sp)
    for limit in (0, 201, "5", True, 1.5):
        with pytest.raises(BadInput):
            store.search("cache", sp, limit)


def test_progress(one):
    store, s = one
    assert store.progress(s, "task", has_state=False)["state"] is None
    store.progress(s, "task", {"step": 2}, has_state=True)
    assert store.progress(s, "task")["state"] == {"step": 2}
    assert store.progress(s, "task", level="project")["state"] is None
    with pytest.raises(BadInput):
        store.progress(s, "task", [1, 2], has_state=True)


# ---------------------------------------------------------------- kg_sync under interleavings

def _graph_of(store, level, session):
    return store.user if level == "user" else store.project_graph(session.project_path)


def _sees(session, level, g, store):
    return level == "user" or (session.project_path is not None and store.project_graph(session.project_path) is g)


def _check_sync(store, session, result, pend_nodes, pend_edges):
    got_nodes = {(n["level"], n["id"]) for n in result["nodes"]} | {(d["level"], d["id"]) for d in
                                                                     result["deleted_nodes"]}
    got_edges = {(e["level"], model.edge_key(e["from"], e["to"], e["rel"])) for e in result["edges"]} | {
        (d["level"], model.edge_key(d["from"], d["to"], d["rel"])) for d in result["deleted_edges"]}
    assert got_nodes == pend_nodes, "sync of %s: nodes differ" % session.id[:8]
    assert got_edges == pend_edges, "sync of %s: edges differ" % session.id[:8]
    # what it says is the current truth
    for n in result["nodes"]:
        g = _graph_of(store, n["level"], session)
        cur = model.public_node(g.nodes[n["id"]])
        cur["level"] = n["level"]
        assert n == cur
    for d in result["deleted_nodes"]:
        assert d["id"] not in _graph_of(store, d["level"], session).nodes
    for e in result["edges"]:
        assert model.edge_key(e["from"], e["to"], e["rel"]) in _graph_of(store, e["level"], session).edges
    for d in result["deleted_edges"]:
        assert model.edge_key(d["from"], d["to"], d["rel"]) not in _graph_of(store, d["level"], session).edges


@pytest.mark.parametrize("seed", range(12))
def test_sync_random_schedules(env, fast_disk, seed):
    rnd = random.Random(seed)
    store = env.open()
    p, q = env.project("p"), env.project("q")
    sessions = [store.start_session(p), store.start_session(p), store.start_session(p), store.start_session(q)]
    pend_n = {s.id: set() for s in sessions}
    pend_e = {s.id: set() for s in sessions}
    ids = {"user": ["u%d" % i for i in range(6)], "project": ["p%d" % i for i in range(6)]}

    def record(writer, level, g, nodes=(), edges=()):
        for s in sessions:
            if (writer is None or s.id != writer.id) and _sees(s, level, g, store):
                pend_n[s.id].update((level, n) for n in nodes)
                pend_e[s.id].update((level, k) for k in edges)

    for step in range(250):
        env.advance(rnd.random())
        if step == 120:                                 # a session that starts late sees only later changes
            late = store.start_session(p)
            sessions.append(late)
            pend_n[late.id], pend_e[late.id] = set(), set()
        s = rnd.choice(sessions + [None])               # None: a write without a session (REST)
        if s is not None:
            s = store.session(s.id)
        level = rnd.choice(["user", "project"])
        if s is None:
            project = rnd.choice([p, q])
            g = store.user if level == "user" else store.project_graph(resolve_project_root(project))
        else:
            project = None
            g = _graph_of(store, level, s)
        op = rnd.choice(["put", "put", "edge", "edge", "del", "del_edge", "sync", "sync", "sync"])
        if op == "sync" and s is not None:
            r = store.sync(s)
            _check_sync(store, s, r, pend_n[s.id], pend_e[s.id])
            pend_n[s.id].clear()
            pend_e[s.id].clear()
        elif op == "put":
            nid = rnd.choice(ids[level])
            store.put_node(s, level, nid, "gist %d" % step, ["note %d" % step] if rnd.random() < 0.5 else None,
                           project_path=project)
            record(s, level, g, nodes=[nid])
        elif op == "edge" and g.nodes:
            frm = rnd.choice(sorted(g.nodes))
            to = rnd.choice(sorted(g.nodes) + ["src/f%d.py" % rnd.randrange(3)])
            rel = rnd.choice(["uses", "explains"])
            store.put_edge(s, level, frm, to, rel, ["n%d" % step], project_path=project)
            record(s, level, g, edges=[model.edge_key(frm, to, rel)])
        elif op == "del" and g.nodes:
            nid = rnd.choice(sorted(g.nodes))
            removed = [model.edge_key(e["from"], e["to"], e["rel"]) for e in g.edges_of(nid)]
            store.delete_node(s, nid, level, project_path=project)
            record(s, level, g, nodes=[nid], edges=removed)
        elif op == "del_edge" and g.edges:
            key = rnd.choice(sorted(g.edges))
            e = g.edges[key]
            store.delete_edge(s, e["from"], e["to"], e["rel"], level, project_path=project)
            record(s, level, g, edges=[key])
    for s in sessions:
        _check_sync(store, s, store.sync(s), pend_n[s.id], pend_e[s.id])
        r = store.sync(s)                       # nothing new: empty
        assert not (r["nodes"] or r["edges"] or r["deleted_nodes"] or r["deleted_edges"])


def test_sync_basic_table(env):
    store = env.open()
    p = env.project("p")
    a, b = store.start_session(p), store.start_session(p)
    store.put_node(a, "user", "x", "by a")
    store.put_node(b, "project", "y", "by b")
    ra = store.sync(a)
    assert [(n["level"], n["id"]) for n in ra["nodes"]] == [("project", "y")]
    rb = store.sync(b)
    assert [(n["level"], n["id"]) for n in rb["nodes"]] == [("user", "x")]
    store.delete_node(b, "x")
    ra = store.sync(a)
    assert ra["deleted_nodes"] == [{"level": "user", "id": "x"}]
    assert store.sync(b)["deleted_nodes"] == []           # own deletion left out
    assert ra["session_id"] == a.id


def test_sync_concurrent_writers_never_missed(env, fast_disk):
    """Writers and a syncing session on threads: every write by another session reaches the
    syncing session in one of its syncs, and none of its own writes do."""
    store = env.open()
    p = env.project("p")
    w1, w2, me = store.start_session(p), store.start_session(p), store.start_session(p)
    seen = set()
    own = set()
    stop = threading.Event()
    errors = []

    def writer(sess, prefix):
        try:
            for i in range(150):
                level = "user" if i % 2 else "project"
                store.put_node(sess, level, "%s-%d" % (prefix, i), "g")
                if i % 10 == 9:
                    store.delete_node(sess, "%s-%d" % (prefix, i - 2))
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    def syncer():
        try:
            i = 0
            while not stop.is_set():
                r = store.sync(me)
                seen.update(n["id"] for n in r["nodes"])
                seen.update(d["id"] for d in r["deleted_nodes"])
                if i % 3 == 0:
                    nid = "me-%d" % i
                    store.put_node(me, "user", nid, "mine")
                    own.add(nid)
                i += 1
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w1, "w1")), threading.Thread(target=writer, args=(w2, "w2"))]
    sync_thread = threading.Thread(target=syncer)
    sync_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    sync_thread.join()
    assert not errors
    r = store.sync(me)
    seen.update(n["id"] for n in r["nodes"])
    seen.update(d["id"] for d in r["deleted_nodes"])
    written = {"%s-%d" % (w, i) for w in ("w1", "w2") for i in range(150)}
    assert written <= seen
    assert not (own & seen)


def test_sync_compaction_changes_reported(env):
    store = env.open(max_tokens=200, grace_days=0)
    p = env.project("p")
    a, b = store.start_session(p), store.start_session(p)
    for i in range(12):
        env.advance(60)
        store.put_node(a, "user", "n%02d" % i, "g" * 40)
    r = store.sync(b)
    archived = {nid for nid, n in store.user.nodes.items() if model.node_state(n) == ARCHIVED}
    assert archived, "the test needs compaction to have archived something"
    states = {n["id"]: n["state"] for n in r["nodes"]}
    for nid in archived:
        assert states.get(nid) == ARCHIVED
    # a's own writes are left out, but what compaction did to them is a change by nobody: reported
    ra = store.sync(a)
    assert {n["id"] for n in ra["nodes"]} >= archived


def test_sync_across_clean_restart(env):
    store = env.open()
    p = env.project("p")
    a, b = store.start_session(p), store.start_session(p)
    store.sync(a)
    store.put_node(b, "project", "before-restart", "g")
    store.close()
    store = env.open()
    a = store.session(a.id)
    r = store.sync(a)
    assert "before-restart" in {n["id"] for n in r["nodes"]}


def test_sync_across_crash_never_misses(env):
    """A write acknowledged after a session's last sync must reach its next sync even when the
    daemon died in between (marks and the sequence are flushed lazily)."""
    store = env.open()
    p = env.project("p")
    a, b = store.start_session(p), store.start_session(p)
    store.put_node(b, "project", "first", "g")
    assert [n["id"] for n in store.sync(a)["nodes"]] == ["first"]
    store.put_node(b, "project", "second", "g")
    crash(store)
    store = env.open()
    a = store.session(a.id)
    r = store.sync(a)
    assert "second" in {n["id"] for n in r["nodes"]}


# ---------------------------------------------------------------- durability: close / crash / reopen

def snapshot(store, projects):
    out = {}
    for label, g in [("user", store.user)] + [(p, store.project_graph(p)) for p in projects]:
        out[label] = (json.loads(json.dumps(g.nodes)), json.loads(json.dumps(g.edges)),
                      json.loads(json.dumps(g.meta.get("progress"))), g.tokens, dict(g.state_counts))
    return out


def random_workload(store, env, rnd, projects, steps=200):
    sessions = [store.start_session(p) for p in projects]
    for step in range(steps):
        env.advance(rnd.choice([1, 60, 3600, 86400]))
        s = store.session(rnd.choice(sessions).id)
        level = rnd.choice(["user", "project"])
        g = _graph_of(store, level, s)
        op = rnd.random()
        if op < 0.4:
            nid = "%s%d" % (level[0], rnd.randrange(25))
            store.put_node(s, level, nid, "gist %d " % step + "x" * rnd.randrange(200),
                           ["note %d" % step] * rnd.randrange(3) or None, ["src/t%d.py" % step] if op < 0.1 else None)
        elif op < 0.65 and g.nodes:
            frm = rnd.choice(sorted(g.nodes))
            to = rnd.choice(sorted(g.nodes) + ["src/f.py"])
            store.put_edge(s, level, frm, to, rnd.choice(["a", "b"]), ["why"] if rnd.random() < 0.5 else None)
        elif op < 0.72 and g.nodes:
            store.delete_node(s, rnd.choice(sorted(g.nodes)), level)
        elif op < 0.78 and g.edges:
            e = g.edges[rnd.choice(sorted(g.edges))]
            store.delete_edge(s, e["from"], e["to"], e["rel"], level)
        elif op < 0.88 and g.nodes:
            store.read_nodes(s, rnd.sample(sorted(g.nodes), min(3, len(g.nodes))), level)
        elif op < 0.93:
            store.progress(s, "task%d" % rnd.randrange(3), rnd.choice([None, {"step": step}]), level, has_state=True)
        elif op < 0.96:
            store.fold_idle(force=rnd.random() < 0.5)
        else:
            store.maintenance()
    return sessions


RS = dict(max_tokens=600, grace_days=0.5, orphan_grace_days=3, session_ttl=BIG)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["close", "crash"])
def test_reopen_reproduces_every_graph(env, fast_disk, seed, how):
    rnd = random.Random(seed)
    store = env.open(**RS)
    projects = [os.path.realpath(env.project("p")), os.path.realpath(env.project("q"))]
    random_workload(store, env, rnd, projects)
    for g in [store.user] + [store.project_graph(p) for p in projects]:
        assert g.tokens == model.estimate_tokens(g.nodes, g.edges)
    before = snapshot(store, projects)
    assert any(st[4][ARCHIVED] or st[4][ORPHANED] for st in before.values()), "workload should exercise compaction"
    if how == "close":
        store.close()
        assert not [n for n in _all_files(env.root) if n.endswith(".journal") and os.path.getsize(n)]
    else:
        crash(store)
    store2 = env.open(**RS)
    assert snapshot(store2, projects) == before
    store2.close()
    store3 = env.open(**RS)   # and once more, from folded files
    assert snapshot(store3, projects) == before


def _all_files(root):
    for d, _, files in os.walk(root):
        for f in files:
            yield os.path.join(d, f)


def test_acknowledged_write_survives_crash(env):
    store = env.open()
    p = env.project("p")
    s = store.start_session(p)
    store.put_node(s, "project", "kept", "g")
    store.put_edge(s, "project", "kept", "src/a.py", "in")
    crash(store)
    store2 = env.open()
    g = store2.project_graph(os.path.realpath(p))
    assert "kept" in g.nodes and "kept->src/a.py:in" in g.edges


def test_write_after_torn_journal_tail_survives_crash(env):
    """A torn last record is dropped at start; the journal must not then glue the next
    (acknowledged) record onto the torn bytes, which would make it unreadable."""
    store = env.open()
    s = store.start_session(None)
    store.put_node(s, "user", "a", "g")
    store.close()                                          # folded: the journal is empty
    journal = os.path.join(env.root, "user.journal")
    assert os.path.getsize(journal) == 0
    with open(journal, "ab") as f:
        f.write(b'{"op":"node","node":{"id":"torn"')     # a crash in the middle of an append
    store2 = env.open()
    assert "torn" not in store2.user.nodes
    s2 = store2.session(s.id)
    store2.put_node(s2, "user", "b", "acknowledged")       # acknowledged: on disk
    crash(store2)
    store3 = env.open()
    assert sorted(store3.user.nodes) == ["a", "b"]


@pytest.mark.parametrize("errno_", [5, 28])
def test_failed_fsync_is_not_acknowledged_and_rolls_back(env, monkeypatch, errno_):
    store = env.open()
    p = env.project("p")
    s = store.start_session(p)
    store.put_node(s, "user", "kept", "g")
    store.put_node(s, "project", "also-kept", "g")

    def failing(fd):
        raise OSError(errno_, os.strerror(errno_))
    monkeypatch.setattr(os, "fsync", failing)
    monkeypatch.setattr(os, "fdatasync", failing, raising=False)
    with pytest.raises(StorageError) as exc:
        store.put_node(s, "user", "lost", "g")
    assert "retry" in exc.value.message.lower()
    monkeypatch.undo()
    g = store.user
    assert sorted(g.nodes) == ["kept"]                    # memory holds what the disk holds
    assert g.tokens == model.estimate_tokens(g.nodes, g.edges)
    store.put_node(s, "user", "after", "g")               # and writing works again
    assert sorted(store.project_graph(s.project_path).nodes) == ["also-kept"]
    crash(store)
    store2 = env.open()
    assert sorted(store2.user.nodes) == ["after", "kept"]


def test_group_commit_through_the_store(env, monkeypatch):
    store = env.open()
    s = store.start_session(None)
    real = os.fsync
    count = [0]

    def slow(fd):
        count[0] += 1
        real(fd)
        threading.Event().wait(0.002)
    monkeypatch.setattr(os, "fsync", slow)
    monkeypatch.setattr(os, "fdatasync", slow, raising=False)
    barrier = threading.Barrier(8)

    def worker(k):
        barrier.wait()
        for i in range(15):
            store.put_node(s, "user", "t%d-%d" % (k, i), "g")
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    assert len(store.user.nodes) == 120
    assert count[0] < 120 * 0.75, count[0]
    crash(store)
    assert len(env.open().user.nodes) == 120


def test_files_and_folders_modes(env):
    store = env.open()
    s = store.start_session(env.project("p"))
    store.put_node(s, "project", "n", "g")
    store.put_node(s, "user", "u", "g")
    store.close()
    for path in _all_files(env.root):
        assert mode(path) == 0o600, path
    for d, dirs, _ in os.walk(env.root):
        assert mode(d) == 0o700, d
    graph = os.path.join(env.root, "projects", "p", "graph.json")
    with open(graph) as f:
        obj = json.load(f)
    assert obj["_meta"]["project_path"] == os.path.realpath(env.project("p"))
    assert set(obj["nodes"]["n"]) >= {"id", "gist", "notes", "touches", "_created_ts", "_write_ts", "_read_ts"}
    # an active node carries neither state key (the reference plugin reads a node's state by key presence)
    assert not {"_archived", "_orphaned_ts"} & set(obj["nodes"]["n"])
    assert "n->" not in json.dumps(obj["edges"])


def test_same_basename_projects_get_separate_graphs(env):
    store = env.open()
    a = os.path.realpath(env.project("one/proj"))
    b = os.path.realpath(env.project("two/proj"))
    sa, sb = store.start_session(a), store.start_session(b)
    store.put_node(sa, "project", "in-a", "g")
    store.put_node(sb, "project", "in-b", "g")
    store.close()
    store = env.open()
    assert sorted(store.project_graph(a).nodes) == ["in-a"]
    assert sorted(store.project_graph(b).nodes) == ["in-b"]
    assert store.project_graph(a).slug != store.project_graph(b).slug


def test_second_store_on_same_root_refused(env):
    env.open()
    with pytest.raises(Conflict):
        team.install(Store(env.root, Settings(), clock=env.clock)).open()


# ---------------------------------------------------------------- fold_idle

def test_fold_idle_waits_for_a_pause(env):
    store = env.open(fold_delay=5)
    s = store.start_session(None)
    store.put_node(s, "user", "a", "g")
    user_json = os.path.join(env.root, "user.json")
    journal = os.path.join(env.root, "user.journal")
    assert os.path.getsize(journal) > 0
    assert not os.path.exists(user_json)
    env.advance(1)
    store.fold_idle()
    assert os.path.getsize(journal) > 0 and not os.path.exists(user_json)
    env.advance(5)
    store.fold_idle()
    assert os.path.getsize(journal) == 0
    with open(user_json) as f:
        assert "a" in json.load(f)["nodes"]
    assert store.dirty == {}


def test_fold_idle_when_journal_grows_long(env):
    store = env.open(fold_delay=1000, fold_records=3)
    s = store.start_session(None)
    for nid in "ab":
        store.put_node(s, "user", nid, "g")
    store.fold_idle()
    assert os.path.getsize(os.path.join(env.root, "user.journal")) > 0
    store.put_node(s, "user", "c", "g")
    store.fold_idle()
    assert os.path.getsize(os.path.join(env.root, "user.journal")) == 0
    with open(os.path.join(env.root, "user.json")) as f:
        assert sorted(json.load(f)["nodes"]) == ["a", "b", "c"]


def test_fold_idle_force(env):
    store = env.open(fold_delay=1000)
    s = store.start_session(env.project("p"))
    store.put_node(s, "project", "a", "g")
    store.fold_idle(force=True)
    assert os.path.exists(os.path.join(env.root, "projects", "p", "graph.json"))
    assert os.path.getsize(os.path.join(env.root, "projects", "p", "graph.journal")) == 0


def test_maintenance_folds_and_saves_sessions(env):
    store = env.open(fold_delay=1, session_ttl=100)
    s = store.start_session(None)
    store.put_node(s, "user", "a", "g")
    env.advance(150)
    store.maintenance()
    assert s.id not in store.sessions
    with open(os.path.join(env.root, "sessions.json")) as f:
        assert s.id not in f.read()
    assert os.path.getsize(os.path.join(env.root, "user.journal")) == 0


def test_old_project_file_without_path_is_adopted_not_duplicated(tmp_path):
    """A project file that does not record its project_path (older format) is loaded by a
    search without a session; when its project later starts a session, that same graph is
    used and the path recorded, not a second graph beside it."""
    root = tmp_path / "root"
    (root / "projects" / "app").mkdir(parents=True)
    (root / "projects" / "app" / "graph.json").write_text(json.dumps(
        {"nodes": {"old-insight": {"id": "old-insight", "gist": "kept from the plugin", "notes": [], "touches": []}},
         "edges": {}, "_meta": {}}))
    proj = tmp_path / "src" / "app"
    (proj / ".git").mkdir(parents=True)
    store = team.install(Store(str(root), Settings())).open()
    try:
        hits = store.search("plugin")["results"]
        assert [h["id"] for h in hits] == ["old-insight"]
        s = store.start_session(str(proj))
        g = store.graph("project", s)
        assert "old-insight" in g.nodes
        assert sorted(os.listdir(root / "projects")) == ["app"]
        assert len([p for p in store.projects.values() if p.slug == "app"]) == 1
    finally:
        store.close()
    meta = json.loads((root / "projects" / "app" / "graph.json").read_text())["_meta"]
    assert meta["project_path"] == str(proj)


def test_change_log_overflow_and_trim_never_hide_a_change(tmp_path, monkeypatch):
    """The change log is bounded: when it drops entries a session has not synced, that session
    gets a full resync (never a silent gap); one that kept up gets exactly the new changes."""
    import kg.memory.store as store_mod
    monkeypatch.setattr(store_mod, "CHANGE_LOG_MAX", 20)
    store = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 6))).open()
    try:
        writer, keeper, laggard = (store.start_session() for _ in range(3))
        everything = set()
        for batch in "abc":  # 24 changes: past 20 the log drops its older half
            ids = {"%s%d" % (batch, i) for i in range(8)}
            for i in sorted(ids):
                store.put_node(writer, "user", i, "g")
            everything |= ids
            kept = store.sync(keeper)
            assert not kept["full_resync"]
            assert {n["id"] for n in kept["nodes"]} == ids
        assert store.log.floor > 0
        lag = store.sync(laggard)
        assert lag["full_resync"]
        assert {n["id"] for n in lag["nodes"]} == everything
        store.sync(writer)
        store.put_node(writer, "user", "c", "g")
        store.maintenance()  # trims what every session has seen (each session's mark holds the log)
        assert [c[0] for c in store.log.changes] == [store.log.seq]
        assert [n["id"] for n in store.sync(keeper)["nodes"]] == ["c"]
        assert [n["id"] for n in store.sync(laggard)["nodes"]] == ["c"]
        assert store.sync(writer)["nodes"] == []
    finally:
        store.close()


def test_a_change_that_fails_after_its_record_was_written_is_cut_off(tmp_path, monkeypatch):
    """If applying a change in memory fails once its journal record is written (a bug, a stale
    index), the record is cut off and the graph reloaded: nothing the caller was told failed
    survives, in memory or on disk."""
    from kg.core.graph import Graph
    root = str(tmp_path / "root")
    store = team.install(Store(root, Settings())).open()
    s = store.start_session()
    store.put_node(s, "user", "kept", "g")

    def broken(self, node):
        raise RuntimeError("apply failed")
    monkeypatch.setattr(Graph, "put_node", broken)
    with pytest.raises(RuntimeError):
        store.put_node(s, "user", "lost", "g")
    monkeypatch.undo()
    assert set(store.user.nodes) == {"kept"}
    store.put_node(s, "user", "after", "g")
    store.close()
    again = team.install(Store(root, Settings())).open()
    try:
        assert set(again.user.nodes) == {"kept", "after"}
    finally:
        again.close()


def test_a_maintenance_pass_with_nothing_to_do_does_not_hold_back_compaction(tmp_path):
    """Contract 5: compaction after every write. A maintenance pass over a graph within budget
    must not leave a mark that skips the compaction the next write needs."""
    t = [1_000_000.0]
    store = Store(str(tmp_path / "root"), Settings(max_tokens=100, grace_days=1), clock=lambda: t[0])
    store = team.install(store).open()
    try:
        s = store.start_session()
        store.put_node(s, "user", "old-a", "g" * 40)   # 30 tokens each
        store.put_node(s, "user", "old-b", "g" * 40)
        t[0] += 2 * 86400                               # both past grace
        store.maintenance()                             # within budget: nothing to do
        store.put_node(s, "user", "new-c", "g" * 40)
        store.put_node(s, "user", "new-d", "g" * 40)    # 120 tokens > 100: must compact now
        assert store.user.tokens <= 80
        assert store.user.archived_count >= 1
    finally:
        store.close()
