"""The personal remote's content and personal state between stores (contract section 9): two or
three storage roots in one process, a real bare git remote, the sync round run by hand."""

import os

import pytest

from kg.core import kg_format, personal
from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import team
from kg.travel.remote_bridge import Bridge
from kg.travel.remote_mirror import folder_of
from kg.travel.remote_repo import SyncRepo


class Machine:
    def __init__(self, root, remote):
        self.store = team.install(Store(str(root), Settings(max_tokens=10 ** 6))).open()
        self.folder = os.path.join(str(root), "sync")
        self.bridge = Bridge(self.store, self.folder)
        self.repo = SyncRepo(self.folder, remote)

    def sync(self):
        return self.repo.round(export=lambda: self.bridge.export(full=True), pickup=self.bridge.pickup)

    def put(self, nid, gist, notes=None, level="user", project_path=None):
        return self.store.put_node(None, level, nid, gist, notes, project_path=project_path)

    def nodes(self, level="user", project_path=None):
        g = self.store.graph(level, project_path=project_path)
        return g.nodes

    def close(self):
        self.store.close()


@pytest.fixture
def remote(tmp_path):
    r = tmp_path / "remote.git"
    git_runner.run(["init", "-q", "--bare", str(r)], str(tmp_path))
    return str(r)


@pytest.fixture
def machines(tmp_path, remote):
    made = []

    def make(name):
        m = Machine(tmp_path / name, remote)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def test_user_graph_written_apart_converges(machines):
    a, b = machines("a"), machines("b")
    a.put("a-1", "from a")
    b.put("b-1", "from b")
    a.sync()
    b.sync()
    a.sync()
    assert set(a.nodes()) == set(b.nodes()) == {"a-1", "b-1"}
    assert b.nodes()["a-1"]["gist"] == "from a"
    with open(os.path.join(a.folder, "user", kg_format.NODES_FILE), "rb") as f:
        data = f.read()
    assert data == kg_format.render(kg_format.parse(data, "node")[0])  # canonical, clean


def test_same_node_changed_on_both_merges_by_the_rule(machines):
    a, b = machines("a"), machines("b")
    a.put("n", "first", ["note a0"])
    a.sync()
    b.sync()
    a.put("n", "older change", ["note a1"])
    b.store.clock = lambda: 4102444800.0  # b's change is later
    b.put("n", "later change", ["note b1"])
    a.sync()
    b.sync()
    a.sync()
    for m in (a, b):
        n = m.nodes()["n"]
        assert n["gist"] == "later change"
        assert set(n["notes"]) == {"note a1", "note b1"}


def test_delete_travels_and_wins_only_over_older(machines):
    a, b = machines("a"), machines("b")
    a.put("gone", "to delete")
    a.put("kept", "stays")
    a.sync()
    b.sync()
    a.store.delete_node(None, "gone", "user")
    a.sync()
    b.sync()
    assert "gone" not in b.nodes() and "kept" in b.nodes()


def test_pickup_reaches_kg_sync_of_open_sessions(machines, tmp_path):
    a, b = machines("a"), machines("b")
    session = b.store.start_session(None)
    b.store.sync(session)
    a.put("news", "arrives through the remote")
    a.sync()
    b.sync()
    diff = b.store.sync(session)
    assert [n["id"] for n in diff["nodes"]] == ["news"]


def test_personal_state_travels_later_state_change_wins(machines):
    a, b = machines("a"), machines("b")
    a.put("n", "node")
    a.sync()
    b.sync()
    with a.store.lock:
        node = dict(a.nodes()["n"])
    node["_archived"] = True
    with a.store.writes.writing(None) as w:
        d = a.store.registry.user
        a.store.writes.change(w, d, [{"op": "node", "node": node}], lambda g: g.put_node(node), compact=False)
    a.sync()
    b.sync()
    assert b.nodes()["n"].get("_archived") is True
    lines, _ = personal.parse(open(os.path.join(b.folder, "user", personal.FILE), "rb").read())
    assert lines["n"]["state"] == "archived"


def test_read_time_later_wins(machines):
    a, b = machines("a"), machines("b")
    a.put("n", "node")
    a.sync()
    b.sync()
    b.store.clock = lambda: 4102444800.0
    b.store.read_nodes(None, ["n"], "user")
    b.sync()
    a.sync()
    assert a.nodes()["n"]["_read_ts"] == pytest.approx(4102444800.0)


def test_three_machines_any_order_converge_nothing_lost(machines):
    ms = [machines(n) for n in ("a", "b", "c")]
    for i, m in enumerate(ms):
        for j in range(5):
            m.put("m%d-%d" % (i, j), "node %d of machine %d" % (j, i))
        m.put("common", "machine %d's view" % i, ["from %d" % i])
    for order in ([2, 0, 1], [1, 2, 0], [0, 1, 2]):
        for k in order:
            ms[k].sync()
    want = {"m%d-%d" % (i, j) for i in range(3) for j in range(5)} | {"common"}
    for m in ms:
        assert set(m.nodes()) == want
        assert set(m.nodes()["common"]["notes"]) == {"from 0", "from 1", "from 2"}
    gists = {m.nodes()["common"]["gist"] for m in ms}
    assert len(gists) == 1


def test_conflict_markers_in_a_pulled_file_load_and_are_written_back_clean(machines):
    a, b = machines("a"), machines("b")
    a.put("n", "v")
    a.sync()
    b.sync()
    path = os.path.join(b.folder, "user", kg_format.NODES_FILE)
    with open(path, "rb") as f:
        good = f.read()
    line = good.strip()
    other = kg_format.canonical(dict(kg_format.parse(good, "node")[0]["n"], notes=["from the other side"], changed=9e9))
    with open(path, "wb") as f:
        f.write(b"<<<<<<< HEAD\n" + line + b"\n=======\n" + other.encode() + b"\n>>>>>>> theirs\n")
    b.bridge.pickup(["user/" + kg_format.NODES_FILE])
    assert "from the other side" in b.nodes()["n"]["notes"]
    with open(path, "rb") as f:
        assert b"<<<<<<<" not in f.read()


def test_project_keyed_by_identity_and_shared_projects_sync_only_personal(machines, tmp_path):
    repo = tmp_path / "src" / "app"
    repo.mkdir(parents=True)
    git_runner.run(["init", "-q"], str(repo))
    (repo / "f").write_text("x\n")
    git_runner.run(["add", "-A"], str(repo))
    git_runner.run(["commit", "-q", "-m", "m"], str(repo))
    root = git_runner.output(["rev-list", "--max-parents=0", "HEAD"], str(repo))
    a = machines("a")
    a.put("p1", "project knowledge", level="project", project_path=str(repo))
    a.sync()
    folder = os.path.join(a.folder, "projects", "git-" + root)
    assert os.path.exists(os.path.join(folder, kg_format.NODES_FILE))
    g = a.store.graph("project", project_path=str(repo))
    assert folder_of(g) == "projects/git-" + root
    with a.store.lock:
        g.shared = True  # as kg/travel/team.py marks a project whose repository holds .kg/
    a.put("p2", "shared knowledge", level="project", project_path=str(repo))
    a.sync()
    nodes, _ = kg_format.parse(open(os.path.join(folder, kg_format.NODES_FILE), "rb").read(), "node")
    assert "p2" not in nodes
    lines, _ = personal.parse(open(os.path.join(folder, personal.FILE), "rb").read())
    assert "p2" in lines


def test_nothing_when_nothing_changed(machines):
    a = machines("a")
    a.put("n", "v")
    a.sync()
    head = a.repo.head()
    a.sync()
    a.sync()
    assert a.repo.head() == head


def test_project_cloned_at_another_path_on_another_machine_gets_its_knowledge(machines, tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    git_runner.run(["init", "-q"], str(origin))
    (origin / "f").write_text("x\n")
    git_runner.run(["add", "-A"], str(origin))
    git_runner.run(["commit", "-q", "-m", "m"], str(origin))
    on_a, on_b = tmp_path / "a-home" / "src" / "app", tmp_path / "b-home" / "work" / "renamed"
    for p in (on_a, on_b):
        git_runner.run(["clone", "-q", str(origin), str(p)], str(tmp_path))
    a, b = machines("a"), machines("b")
    a.put("arch", "the app's architecture", level="project", project_path=str(on_a))
    a.sync()
    b.sync()
    b.store.start_session(str(on_b))  # first opened here after the pull
    assert b.bridge.unseen()
    b.bridge.export()
    assert set(b.nodes("project", str(on_b))) == {"arch"}


def test_a_node_holding_a_credential_never_reaches_the_sync_folder(machines, caplog):
    import random
    import string

    a = machines("a")
    token = "ghp_" + "".join(random.choice(string.ascii_letters + string.digits) for _ in range(36))
    a.put("clean", "nothing secret")
    node = {"id": "leaky", "gist": "the deploy token is " + token, "notes": [], "touches": [],
            "_created_ts": 1.0, "_write_ts": 1.0, "_read_ts": None}
    with a.store.writes.writing(None) as w:  # as a graph loaded from an old file would hold it
        a.store.writes.change(w, a.store.registry.user, [{"op": "node", "node": node}],
                              lambda g: g.put_node(node), compact=False)
    a.sync()
    a.sync()
    folder = os.path.join(a.folder, "user")
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = f.read()
        assert token not in text and "leaky" not in text, name
    assert "clean" in open(os.path.join(folder, kg_format.NODES_FILE)).read()
    assert token not in git_runner.output(["log", "-p", "--all"], a.folder)
    assert sum("hold a credential" in r.getMessage() for r in caplog.records) == 1


def test_a_sync_folder_made_afresh_loses_nothing(machines):
    import shutil

    a = machines("a")
    a.put("n1", "one")
    a.put("n2", "two")
    a.sync()
    shutil.rmtree(os.path.join(a.folder, "user"))  # the files gone, the base in _meta still says synced
    a.bridge.export(full=True)
    assert set(a.nodes()) == {"n1", "n2"}
    nodes, _ = kg_format.parse(open(os.path.join(a.folder, "user", kg_format.NODES_FILE), "rb").read(), "node")
    assert set(nodes) == {"n1", "n2"}


def test_a_line_cut_from_the_file_is_written_again_not_dropped_from_memory(machines):
    a = machines("a")
    a.put("n1", "one")
    a.put("n2", "two")
    a.sync()
    path = os.path.join(a.folder, "user", kg_format.NODES_FILE)
    lines = open(path, "rb").read().splitlines(True)
    open(path, "wb").write(b"".join(lines[:1]))
    a.bridge.pickup(["user/" + kg_format.NODES_FILE])
    assert set(a.nodes()) == {"n1", "n2"}
    assert len(open(path, "rb").read().splitlines()) == 2


def crash(m):
    """The process dies: nothing is folded or flushed; only the OS lock goes away."""
    for j in m.store.journals.values():
        j.close()
    m.store.root_lock.release()


def test_writes_acknowledged_after_a_pass_survive_a_crash_before_the_fold(tmp_path, remote):
    """Contract section 4: a pass's new base reaches the disk with it, so an acknowledged put,
    delete or edge delete journalled after it (and not folded: a SIGKILL) is not reconciled
    against an older base at the restart (the folder's copy taken in as another machine's)."""
    a = Machine(tmp_path / "a", remote)
    a.put("x", "first", ["a"])
    a.put("y", "to be deleted")
    a.store.put_edge(None, "user", "x", "y", "uses")
    a.store.put_edge(None, "user", "y", "x", "uses")
    assert a.sync()["pushed"]
    a.put("x", "second", ["b"])
    a.store.delete_edge(None, "x", "y", "uses", level="user")
    a.store.delete_node(None, "y", "user")
    crash(a)
    b = Machine(tmp_path / "a", remote)  # the restart: graph file + journal
    try:
        b.bridge.export(full=True)
        g = b.store.graph("user")
        assert {k: (n["gist"], n["notes"]) for k, n in g.nodes.items()} == {"x": ("second", ["b"])}
        assert g.edges == {}
        nodes, _ = kg_format.parse(open(os.path.join(b.folder, "user", kg_format.NODES_FILE), "rb").read(), "node")
        assert kg_format.is_tombstone(nodes["y"]) and nodes["x"]["gist"] == "second"
        b.sync()
        assert set(b.store.graph("user").nodes) == {"x"}
    finally:
        b.close()


def test_a_pass_that_changes_nothing_writes_no_graph_file(machines):
    """The fold that makes a pass's base durable comes only with a change: an idle round costs no
    write of the graph (its cost stays with what changed)."""
    a = machines("a")
    a.put("n", "v")
    a.sync()
    path = a.store.registry.user.path
    before = os.stat(path)
    a.sync()
    a.bridge.export(full=True)
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not a.store.registry.user.dirty


class _Died(BaseException):
    """The process dies here (no except Exception in kgd catches it)."""


def test_a_crash_after_a_pass_folds_and_before_it_writes_the_folder_loses_nothing(tmp_path, remote, monkeypatch):
    """The fold comes before the folder's files, so the keys about to be written keep their old
    base (the new one pending, held only if the folder has it): a base ahead of the folder would
    take the folder's older version back over an acknowledged put."""
    from kg.travel import remote_files

    a = Machine(tmp_path / "a", remote)
    a.put("x", "first", ["a"])
    a.put("y", "second node")
    a.sync()
    a.put("x", "second", ["b"])
    a.store.delete_node(None, "y", "user")

    def die(self, path, data, records, stamps):
        raise _Died()
    monkeypatch.setattr(remote_files.SyncFiles, "write", die)
    with pytest.raises(_Died):
        a.bridge.export(full=True)
    monkeypatch.undo()
    crash(a)
    b = Machine(tmp_path / "a", remote)
    try:
        b.bridge.export(full=True)
        got = {k: (n["gist"], n["notes"]) for k, n in b.store.graph("user").nodes.items()}
        assert got == {"x": ("second", ["b"])}
        nodes, _ = kg_format.parse(open(os.path.join(b.folder, "user", kg_format.NODES_FILE), "rb").read(), "node")
        assert nodes["x"]["gist"] == "second" and kg_format.is_tombstone(nodes["y"])
    finally:
        b.close()


def test_a_delete_acknowledged_while_a_pass_writes_the_folder_is_kept_after_a_crash(tmp_path, remote, monkeypatch):
    """A request served while the pass writes the folder (outside the store's lock) is journalled
    on top of a graph file that already holds the pass's base (pending, confirmed by the folder)."""
    from kg.travel import remote_files

    a = Machine(tmp_path / "a", remote)
    a.put("x", "kept")
    a.sync()
    a.put("y", "written, then deleted")
    a.store.put_edge(None, "user", "x", "y", "uses")
    real = remote_files.SyncFiles.write

    def write_then_die(self, path, data, records, stamps):
        real(self, path, data, records, stamps)
        if path.endswith(kg_format.EDGES_FILE):
            assert not a.store.lock._is_owned()
            a.store.delete_node(None, "y", "user")  # its edge goes with it
            raise _Died()
    monkeypatch.setattr(remote_files.SyncFiles, "write", write_then_die)
    with pytest.raises(_Died):
        a.bridge.export(full=True)
    monkeypatch.undo()
    crash(a)
    b = Machine(tmp_path / "a", remote)
    try:
        b.sync()
        g = b.store.graph("user")
        assert set(g.nodes) == {"x"} and g.edges == {}
    finally:
        b.close()
