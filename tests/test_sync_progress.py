"""kg_progress task state across one person's machines (contract sections 3 and 9, personal
remote): progress.jsonl's lines and merge rule (pure, tables of cases), then two and three storage
roots in one process syncing through a real bare git remote, the round run by hand."""

import json
import logging
import os

import pytest

from kg.core import kg_format
from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import remote_progress as rp
from kg.travel import team
from kg.travel.remote_bridge import Bridge
from kg.travel.remote_repo import SyncRepo

T = 2000000000.0
GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"  # a GitHub token's shape (made up)


# ------------------------------------------------------------ lines and rule

def R(task, state, changed):
    return {"task": task, "state": state, "changed": changed}


@pytest.mark.parametrize("a, b, want", [
    (R("t", {"s": 1}, T), R("t", {"s": 2}, T + 1), R("t", {"s": 2}, T + 1)),  # the later change wins
    (R("t", {"s": 2}, T + 1), R("t", {"s": 1}, T), R("t", {"s": 2}, T + 1)),  # in either order
    (R("t", None, T + 1), R("t", {"s": 1}, T), R("t", None, T + 1)),  # a later clear wins
    (R("t", None, T), R("t", {"s": 1}, T + 1), R("t", {"s": 1}, T + 1)),  # a later store beats a clear
    (R("t", {"s": 1}, T), R("t", {"s": 2}, T), R("t", {"s": 2}, T)),  # a tie: the larger line, everywhere
    (R("t", {"s": 2}, T), R("t", {"s": 1}, T), R("t", {"s": 2}, T)),
])
def test_merge_later_change_wins(a, b, want):
    assert rp.merge(a, b) == want == rp.merge(b, a)


@pytest.mark.parametrize("line, problem", [
    (b'{"task":"t","state":{"a":1},"changed":5}', None),
    (b'{"task":"t","state":null,"changed":5}', None),
    (b'not json', "not JSON"),
    (b'[1]', "not a JSON object"),
    (b'{"task":"t","state":[1],"changed":5}', "state must be a JSON object"),
    (b'{"task":"t","state":{},"changed":"5"}', "changed must be"),
    (b'{"task":"t","state":{},"changed":1e300}', "changed must be"),
    (b'{"task":"t","state":{},"changed":true}', "changed must be"),
    (b'{"task":"","state":{},"changed":5}', "task"),
    (b'{"task":"t","state":{"a":"' + b"x" * 70000 + b'"},"changed":5}', "64 KiB"),
    (b'{"task":"t"', "not JSON"),
])
def test_parse_reports_bad_lines_and_keeps_the_rest(line, problem):
    data = line + b"\n" + b'{"task":"ok","state":{"x":1},"changed":1}\n'
    recs, problems = rp.parse(data)
    assert recs["ok"] == R("ok", {"x": 1}, 1.0)
    if problem is None:
        assert not problems and "t" in recs
    else:
        assert len(problems) == 1 and problem in problems[0] and "line 1" in problems[0] and "t" not in recs


def test_parse_joins_repeats_and_skips_conflict_markers():
    a, b = R("t", {"s": 1}, T), R("t", {"s": 2}, T + 1)
    data = b"\n".join([b"<<<<<<< ours", kg_format.canonical(b).encode(), b"=======",
                       kg_format.canonical(a).encode(), b">>>>>>> theirs", b""])
    recs, problems = rp.parse(data)
    assert recs == {"t": b} and problems == []


def test_parse_refuses_a_file_over_the_bound():
    recs, problems = rp.parse(b" " * (kg_format.MAX_FILE + 1))
    assert recs == {} and "not loaded" in problems[0]


def test_render_is_canonical_sorted_and_drops_expired_tombstones():
    recs = {"b": R("b", {"z": 1, "a": [2]}, T), "a": R("a", None, T), "old": R("old", None, 1.0)}
    out = rp.render(recs, T)
    assert out == b'{"changed":2000000000.0,"state":null,"task":"a"}\n' \
                  b'{"changed":2000000000.0,"state":{"a":[2],"z":1},"task":"b"}\n'
    assert rp.parse(out)[0] == {k: v for k, v in recs.items() if k != "old"}
    assert rp.render({}) == b""
    cache = {}
    assert rp.render(recs, T, cache) == out == rp.render(recs, T, cache)  # lines kept for the same records
    recs["b"] = R("b", {"z": 2}, T + 1)  # a new record object: its line is made again
    assert rp.render(recs, T, cache) == rp.render(recs, T) != out


def test_memory_records_cache_follows_changes():
    cache, state = {}, {"x": 1}
    first = rp.memory_records({"a": state}, {"a": T}, cache)
    assert rp.memory_records({"a": state}, {"a": T}, cache)["a"] is first["a"]
    assert rp.memory_records({"a": state}, {"a": T + 1}, cache)["a"] == R("a", {"x": 1}, T + 1)
    assert rp.memory_records({"a": {"x": 2}}, {"a": T + 1}, cache)["a"] == R("a", {"x": 2}, T + 1)
    assert rp.memory_records({}, {"a": T + 2}, cache) == {"a": R("a", None, T + 2)} and list(cache) == ["a"]


@pytest.mark.parametrize("mine, disk, mine_refused, disk_refused, merged, to_memory", [
    ({"t": R("t", {"s": 1}, T)}, {}, (), (), {"t": R("t", {"s": 1}, T)}, {}),
    ({}, {"t": R("t", {"s": 1}, T)}, (), (), {"t": R("t", {"s": 1}, T)}, {"t": R("t", {"s": 1}, T)}),
    ({"t": R("t", {"s": 1}, T)}, {"t": R("t", None, T + 1)}, (), (),
     {"t": R("t", None, T + 1)}, {"t": R("t", None, T + 1)}),
    ({"t": R("t", None, T + 1)}, {"t": R("t", {"s": 1}, T)}, (), (), {"t": R("t", None, T + 1)}, {}),
    # memory's version holds a credential: the file keeps its line, memory takes nothing
    ({"t": R("t", {"s": 9}, T + 1)}, {"t": R("t", {"s": 1}, T)}, {"t"}, (), {"t": R("t", {"s": 1}, T)}, {}),
    ({"t": R("t", {"s": 9}, T + 1)}, {}, {"t"}, (), {}, {}),
    # the file's line holds one: memory's version is written over it, nothing is taken
    ({"t": R("t", {"s": 1}, T)}, {"t": R("t", {"s": 9}, T + 1)}, (), {"t"}, {"t": R("t", {"s": 1}, T)}, {}),
    ({}, {"t": R("t", {"s": 9}, T + 1)}, (), {"t"}, {}, {}),
])
def test_join(mine, disk, mine_refused, disk_refused, merged, to_memory):
    assert rp.join(mine, disk, mine_refused, disk_refused) == (merged, to_memory)


def test_memory_records_date_tasks_and_keep_tombstones():
    assert rp.memory_records({"a": {"x": 1}, "legacy": {"y": 2}}, {"a": T, "gone": T + 1}) == {
        "a": R("a", {"x": 1}, T), "legacy": R("legacy", {"y": 2}, 0.0), "gone": R("gone", None, T + 1)}


# ------------------------------------------------------------ machines

class Machine:
    def __init__(self, root, remote, scan=True):
        self.root = root
        self.store = team.install(Store(str(root), Settings(max_tokens=10 ** 6, secret_scan=scan))).open()
        self.folder = os.path.join(str(root), "sync")
        self.bridge = Bridge(self.store, self.folder)
        self.repo = SyncRepo(self.folder, remote)
        self.events = []
        self.store.add_listener(self.events.append)

    def sync(self):
        return self.repo.round(export=lambda: self.bridge.export(full=True), pickup=self.bridge.pickup)

    def set(self, task, state, level="user", project_path=None):
        return self.store.progress(None, task, state, level, has_state=True, project_path=project_path)

    def get(self, task, level="user", project_path=None):
        return self.store.progress(None, task, level=level, project_path=project_path)["state"]

    def lines(self, rel="user"):
        path = os.path.join(self.folder, *rel.split("/"), rp.FILE)
        with open(path, "rb") as f:
            return f.read()


@pytest.fixture
def remote(tmp_path):
    r = str(tmp_path / "remote.git")
    git_runner.run(["init", "-q", "--bare", r], str(tmp_path))
    return r


@pytest.fixture
def machines(tmp_path, remote):
    made = []

    def make(name, **kw):
        m = Machine(tmp_path / name, remote, **kw)
        made.append(m)
        return m
    yield make
    for m in made:
        m.store.close()


def test_a_task_set_on_one_machine_reaches_the_other(machines):
    a, b = machines("a"), machines("b")
    a.set("deploy", {"step": 3, "todo": ["migrate", "announce"]})
    a.sync()
    b.sync()
    assert b.get("deploy") == {"step": 3, "todo": ["migrate", "announce"]}
    assert rp.parse(a.lines())[0]["deploy"]["state"] == {"step": 3, "todo": ["migrate", "announce"]}
    assert a.lines() == b.lines() == rp.render(rp.parse(a.lines())[0])  # canonical, the same bytes


def test_a_projects_task_travels_with_the_project_whatever_its_folder(machines, tmp_path):
    a, b = machines("a"), machines("b")
    pa, pb = tmp_path / "work-a" / "app", tmp_path / "work-b" / "app-clone"
    for p in (pa, pb):
        p.mkdir(parents=True)
        git_runner.run(["init", "-q"], str(p))
        git_runner.run(["remote", "add", "origin", "https://example.com/app.git"], str(p))
    a.set("refactor", {"phase": "tests"}, "project", str(pa))
    b.store.project_graph(str(pb))  # b knows the project (a session opened it once)
    a.sync()
    b.sync()
    assert b.get("refactor", "project", str(pb)) == {"phase": "tests"}
    assert b.get("refactor") is None  # not in the user graph


def test_changes_while_apart_the_later_wins_on_both(machines):
    a, b = machines("a"), machines("b")
    a.set("t", {"s": 0})
    a.sync()
    b.sync()
    a.store.clock = lambda: T
    a.set("t", {"s": "a"})
    b.store.clock = lambda: T + 60  # b changed it later
    b.set("t", {"s": "b"})
    a.set("only-a", {"x": 1})
    a.sync()
    b.sync()
    a.sync()
    assert a.get("t") == b.get("t") == {"s": "b"}
    assert a.get("only-a") == b.get("only-a") == {"x": 1}
    assert a.lines() == b.lines()


def test_a_change_made_after_seeing_a_version_wins_whatever_the_clocks(machines):
    a, b = machines("a"), machines("b")
    a.store.clock = lambda: T + 86400  # a's clock a day ahead
    a.set("t", {"s": "from a"})
    a.sync()
    b.sync()
    b.store.clock = lambda: T  # b saw a's version and changes it, by a clock a day behind
    b.set("t", {"s": "from b, after a"})
    b.sync()
    a.sync()
    assert a.get("t") == b.get("t") == {"s": "from b, after a"}


def test_a_clear_travels_and_an_older_state_does_not_come_back(machines):
    a, b, c = machines("a"), machines("b"), machines("c")
    a.set("t", {"s": 1})
    for m in (a, b, c):
        m.sync()
    b.set("t", None)
    b.sync()
    a.sync()
    c.sync()
    assert a.get("t") is b.get("t") is c.get("t") is None
    assert rp.parse(a.lines())[0]["t"]["state"] is None  # a tombstone line
    a.store.close()
    a2 = machines("a")  # a restarts: the clear's date survived (journal and graph file)
    a2.sync()
    assert a2.get("t") is None


def test_the_pickup_is_heard_by_listeners_and_not_by_kg_sync(machines):
    a, b = machines("a"), machines("b")
    a.store.put_node(None, "user", "n", "a node")
    a.sync()
    b.sync()
    s = b.store.start_session(None)
    b.store.sync(s)
    del a.events[:]
    a.set("t", {"s": 1})
    assert [(e["type"], e["task_id"], e["level"]) for e in a.events] == [("progress", "t", "user")]
    a.sync()
    del b.events[:]
    b.sync()
    assert [(e["type"], e["task_id"]) for e in b.events] == [("progress", "t")]
    diff = b.store.sync(s)
    assert diff["nodes"] == diff["edges"] == diff["deleted_nodes"] == diff["deleted_edges"] == []
    assert b.store.log.pending(s.sync_mark, s.id) == 0


def test_a_credential_never_reaches_the_file_and_none_is_taken_from_it(machines, caplog):
    a = machines("a", scan=False)  # KG_SECRET_SCAN=0: the store keeps it, the remote still does not
    b = machines("b")
    a.set("deploy", {"step": 1, "token": GITHUB})
    a.set("tidy", {"step": 3})
    with caplog.at_level(logging.WARNING):
        a.sync()
    assert GITHUB.encode() not in a.lines() and b"tidy" in a.lines()
    assert GITHUB not in caplog.text and "not synced" in caplog.text
    b.sync()
    assert b.get("tidy") == {"step": 3} and b.get("deploy") is None
    # a line holding one, written into the folder by hand (or an old kgd), is not taken
    path = os.path.join(b.folder, "user", rp.FILE)
    with open(path, "ab") as f:
        f.write((json.dumps(R("leak", {"key": GITHUB}, T)) + "\n").encode())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        b.bridge.pickup(["user/" + rp.FILE])
    assert b.get("leak") is None and GITHUB.encode() not in b.lines()
    assert GITHUB not in caplog.text and "secrets gate refuses" in caplog.text


def test_a_pass_with_nothing_changed_reads_no_file_and_writes_nothing(machines, monkeypatch):
    a = machines("a")
    a.set("t", {"s": 1})
    a.sync()
    reads, writes = [], []
    real_read, real_write = rp._read, rp.atomic_write
    monkeypatch.setattr(rp, "_read", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(rp, "atomic_write", lambda *x, **k: writes.append(x[0]) or real_write(*x, **k))
    a.bridge.export(full=False)
    assert reads == [] and writes == []
    a.set("t", {"s": 2})
    a.bridge.export(full=False)
    assert len(writes) == 1 and rp.parse(a.lines())[0]["t"]["state"] == {"s": 2}


def test_a_task_changed_while_the_pass_runs_is_not_lost(machines, monkeypatch):
    """A put between the pass's snapshot and its apply is kept, and the next pass writes it."""
    a, b = machines("a"), machines("b")
    a.set("t", {"s": "old"})
    a.sync()
    b.set("t", {"s": "b"})
    b.sync()
    real = a.bridge.progress._apply

    def racing(*args):
        a.set("t", {"s": "written meanwhile"})
        return real(*args)
    monkeypatch.setattr(a.bridge.progress, "_apply", racing)
    a.sync()
    monkeypatch.setattr(a.bridge.progress, "_apply", real)
    assert a.get("t") == {"s": "written meanwhile"}
    a.sync()
    b.sync()
    assert b.get("t") == {"s": "written meanwhile"}
