"""A personal-remote pass costs what changed, not the graph's size (contract section 9: a sync
never slows a tool call), and gives what a pass over every key gives.

- FileLines renders the bytes kgdir.render gives, whatever changed (a table and random cases).
- Graph.track() is told of every change: puts, deletes, journal records, reads, compaction.
- After any sequence of writes, reads, compaction and rounds with another machine, an
  incremental pass leaves the folder where a full pass finds nothing to do, and the files
  mirror memory.
- An incremental pass on a 2,000-node graph serialises only the changed records.
- A change made around the tracker is found by the hourly audit, logged and synced; a pass
  that fails midway leaves its keys to be looked at again.
"""

import os
import random
import time

import pytest

from kg.core import graph, model, personal
from kg.core import kg_format as kgdir
from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import remote_files, remote_mirror, team
from kg.travel.remote_bridge import Bridge
from kg.travel.remote_files import FileLines
from kg.travel.remote_repo import SyncRepo

T0 = 1_800_000_000.0


def node(nid, gist="g"):
    return {"id": nid, "gist": gist, "notes": [], "touches": [], "_created_ts": T0, "_write_ts": T0, "_read_ts": None}


def nrec(nid, gist="g"):
    return kgdir.node_record(node(nid, gist))


# ------------------------------------------------------------------ FileLines


def tomb(nid, when):
    return {"id": nid, "deleted": when}


@pytest.mark.parametrize("before, after, changed, now", [
    ({}, {}, set(), None),
    ({}, {"a": nrec("a")}, {"a"}, None),
    ({"a": nrec("a")}, {}, {"a"}, None),
    ({"a": nrec("a"), "c": nrec("c")}, {"a": nrec("a"), "b": nrec("b"), "c": nrec("c")}, {"b"}, None),
    ({"a": nrec("a")}, {"a": nrec("a", "changed")}, {"a"}, None),
    ({"a": nrec("a")}, {"a": tomb("a", T0)}, {"a"}, T0 + 10),
    ({"a": tomb("a", T0)}, {"a": tomb("a", T0), "b": nrec("b")}, {"b"}, T0 + kgdir.TOMBSTONE_KEEP_S + 1),
    ({"a": tomb("a", T0)}, {"a": nrec("a")}, {"a"}, T0 + kgdir.TOMBSTONE_KEEP_S + 1),
    ({"B": nrec("B"), "a": nrec("a")}, {"B": nrec("B"), "a": nrec("a"), "b": nrec("b")}, {"b"}, None),
])
def test_filelines_renders_what_kgdir_renders(before, after, changed, now):
    lines = FileLines()
    lines.render(before, None, now)
    assert lines.render(after, changed, now, previous=before) == kgdir.render(after, now)


def test_filelines_does_not_trust_changed_keys_about_another_dict():
    lines = FileLines()
    first = {"a": nrec("a")}
    lines.render(first)
    other = {"a": nrec("a", "edited elsewhere"), "b": nrec("b")}
    assert lines.render(other, {"b"}, previous={"a": nrec("a")}) == kgdir.render(other)


@pytest.mark.parametrize("seed", range(20))
def test_filelines_random_sequences(seed):
    rnd = random.Random(seed)
    lines, records = FileLines(), {}
    lines.render(records)
    for _ in range(40):
        new = dict(records)
        changed = set()
        for _ in range(rnd.randint(0, 5)):
            k = "n%d" % rnd.randint(0, 30)
            changed.add(k)
            r = rnd.random()
            if r < 0.2:
                new.pop(k, None)
            elif r < 0.35:
                new[k] = tomb(k, T0 - rnd.choice([0, kgdir.TOMBSTONE_KEEP_S * 2]))
            else:
                new[k] = nrec(k, "v%d" % rnd.randint(0, 3))
        now = rnd.choice([None, T0])
        assert lines.render(new, changed, now, previous=records) == kgdir.render(new, now)
        records = new


# ------------------------------------------------------------------ the graph's tracker


def test_tracker_sees_every_kind_of_change():
    g = graph.Graph("user")
    t = g.track()
    assert t.take() == (set(), set(), True)  # a new tracker has seen nothing: everything
    g.put_node(node("a"))
    g.put_node(node("b"))
    key = g.put_edge({"from": "a", "to": "b", "rel": "uses", "notes": [], "_write_ts": T0})
    assert t.take() == ({"a", "b"}, {key}, False)
    g.delete_node("b")  # its edge goes with it
    assert t.take() == ({"b"}, {key}, False)
    graph.apply_record(g, {"op": "node", "node": node("c")})
    g.refresh("a")
    assert t.take() == ({"c", "a"}, set(), False)
    g.recount()
    assert t.take()[2] is True
    g.untrack(t)
    g.put_node(node("d"))
    assert t.take() == (set(), set(), False)


# ------------------------------------------------------------------ incremental == full


class Machine:
    def __init__(self, root, remote, clock):
        settings = Settings(max_tokens=400, grace_days=0, orphan_grace_days=0.0001)
        self.store = team.install(Store(str(root), settings, clock=clock)).open()
        self.folder = os.path.join(str(root), "sync")
        self.bridge = Bridge(self.store, self.folder, clock=clock)
        self.repo = SyncRepo(self.folder, remote)

    def round(self):
        self.repo.round(export=lambda: self.bridge.export(full=True), pickup=self.bridge.pickup)

    def durable(self):
        return next(d for d in self.store.registry.durables() if d.level == "user")

    def files(self):
        out = {}
        for name in (kgdir.NODES_FILE, kgdir.EDGES_FILE, personal.FILE):
            try:
                with open(os.path.join(self.folder, "user", name), "rb") as f:
                    out[name] = f.read()
            except FileNotFoundError:
                out[name] = None
        return out


@pytest.fixture
def remote(tmp_path):
    r = tmp_path / "remote.git"
    git_runner.run(["init", "-q", "--bare", str(r)], str(tmp_path))
    return str(r)


def step(m, rnd, ids):
    """One random thing an agent or the daemon does to the user graph."""
    s, r = m.store, rnd.random()
    nid = rnd.choice(ids)
    if r < 0.45:
        s.put_node(None, "user", nid, "gist %d of %s" % (rnd.randint(0, 9), nid), ["why %d" % rnd.randint(0, 3)])
    elif r < 0.6:
        other = rnd.choice(ids)
        if nid != other and {nid, other} <= set(s.graph("user").nodes):
            s.put_edge(None, "user", nid, other, rnd.choice(["uses", "explains"]), ["edge %d" % rnd.randint(0, 3)])
    elif r < 0.7:
        if nid in s.graph("user").nodes:
            s.delete_node(None, nid, level="user")
    elif r < 0.78:
        edges = sorted(s.graph("user").edges.values(), key=lambda e: (e["from"], e["to"], e["rel"]))
        if edges:
            e = rnd.choice(edges)
            s.delete_edge(None, e["from"], e["to"], e["rel"], level="user")
    else:
        s.read_nodes(None, [nid], level="user")  # a read: recency, and a promotion when archived


def assert_fixpoint(m):
    """What a full pass would do after this incremental one: nothing."""
    d = m.durable()
    files, base = m.files(), {k: dict(v) for k, v in d.graph.meta.get(remote_mirror.META, {}).items()}
    assert m.bridge.sync_graph(d, force=True) == 0
    assert m.files() == files
    assert d.graph.meta.get(remote_mirror.META, {}) == base
    g = d.graph
    want = {k: kgdir.node_record(n) for k, n in g.nodes.items()}
    on_disk = {k: r for k, r in kgdir.parse(files[kgdir.NODES_FILE] or b"", "node")[0].items()
               if not kgdir.is_tombstone(r)}
    assert on_disk == want
    lines = personal.parse(files[personal.FILE] or b"")[0]
    assert {k: (r["state"], r["read"]) for k, r in lines.items() if k in g.nodes} == {
        k: (model.node_state(n), kgdir.ts(n["_read_ts"]) if n.get("_read_ts") else None) for k, n in g.nodes.items()}


def fuzz(tmp_path, remote, rnd, steps, ids, jumps, maintenance, check_b):
    """Two machines on one remote doing random things; after each export the pass must have
    reached the full pass's fixpoint (assert_fixpoint), and no audit may have found anything."""
    now = [T0]

    def clock():
        return now[0]
    a = Machine(tmp_path / "a", remote, clock)
    b = Machine(tmp_path / "b", remote, clock)
    try:
        for i in range(steps):
            now[0] += rnd.choice(jumps)
            m = rnd.choice([a, a, b])
            if rnd.random() < maintenance:
                m.store.maintenance(now[0])
            else:
                step(m, rnd, ids)
            for mach, p in ((a, 0.5 if not check_b else 0.6), (b, 0.3 if check_b else 0.0)):
                if rnd.random() < p:
                    mach.bridge.export()
                    assert_fixpoint(mach)
            if i % (7 if check_b else 10) == (6 if check_b else 9):
                rnd.choice([a, b]).round()
                rnd.choice([a, b]).round()
        assert a.bridge.untracked == 0 and b.bridge.untracked == 0
    finally:
        a.store.close()
        b.store.close()


@pytest.mark.parametrize("seed", range(6))
def test_incremental_passes_reach_the_full_pass_fixpoint(tmp_path, remote, seed):
    fuzz(tmp_path, remote, random.Random(seed), 50, ["n%02d" % i for i in range(25)], [1, 60, 3600], 0.0, False)


@pytest.mark.parametrize("seed", range(6))
def test_the_fixpoint_holds_through_maintenance_and_long_absences(tmp_path, remote, seed):
    """Maintenance passes (deletion of long-orphaned nodes, a recount), clock jumps of a month or
    more than a year (tombstones expire), both machines checked after their passes."""
    fuzz(tmp_path, remote, random.Random(1000 + seed), 60, ["n%02d" % i for i in range(15)],
         [1, 60, 3600, 86400 * 30, 86400 * 400], 0.08, True)


# ------------------------------------------------------------------ cost, the hourly check, failures


def big_machine(tmp_path, n=2000):
    now = [T0]
    s = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 7), clock=lambda: now[0])).open()
    for i in range(n):
        s.put_node(None, "user", "node-%05d" % i, "insight %d" % i, ["why %d" % i])
    bridge = Bridge(s, str(tmp_path / "root" / "sync"), clock=lambda: now[0])
    bridge.export()
    return s, bridge, now


def test_an_incremental_pass_serialises_only_what_changed(tmp_path, monkeypatch):
    s, bridge, now = big_machine(tmp_path)
    try:
        calls = {"canonical": 0, "node_record": 0, "record": 0}
        for mod, name in ((kgdir, "canonical"), (kgdir, "node_record"), (personal, "record")):
            real = getattr(mod, name)

            def counting(*a, _real=real, _name=name, **kw):
                calls[_name] += 1
                return _real(*a, **kw)
            monkeypatch.setattr(mod, name, counting)
        for i in (3, 500, 1999):
            s.put_node(None, "user", "node-%05d" % i, "changed %d" % i)
        s.read_nodes(None, ["node-00042"], level="user")
        bridge.export()
        for k in calls:  # and so on, pass after pass (no edges.jsonl here: a missing file is no news)
            calls[k] = 0
        for i in (4, 501, 1998):
            s.put_node(None, "user", "node-%05d" % i, "changed %d" % i)
        s.read_nodes(None, ["node-00043"], level="user")
        bridge.export()
        # the three put: their records; all four: their personal lines (a read moves only that)
        assert calls["node_record"] == 3 and calls["record"] == 4
        # a few canonical lines per changed node (stamp, file line, personal merge), none for the
        # 1,996 others
        assert calls["canonical"] <= 8 * 4, calls
        with open(tmp_path / "root" / "sync" / "user" / kgdir.NODES_FILE, "rb") as f:
            assert b'"changed 500"' in f.read()
    finally:
        s.close()


def test_a_change_made_around_the_tracker_is_found_by_the_hourly_audit(tmp_path, caplog):
    s, bridge, now = big_machine(tmp_path, n=20)
    try:
        g = s.graph("user")
        with s.lock:
            g.nodes["node-00007"] = dict(g.nodes["node-00007"], gist="changed in place", _write_ts=T0 + 5)
        bridge.export()
        path = tmp_path / "root" / "sync" / "user" / kgdir.NODES_FILE
        assert b"changed in place" not in path.read_bytes()  # no refresh(): the tracker cannot know
        now[0] += Bridge.AUDIT_EVERY
        bridge.export()
        assert b"changed in place" in path.read_bytes()
        assert bridge.untracked == 1
        assert "around Graph.refresh" in caplog.text
    finally:
        s.close()


def test_a_pass_that_fails_midway_leaves_its_changes_for_the_next(tmp_path, monkeypatch):
    s, bridge, now = big_machine(tmp_path, n=20)
    try:
        s.put_node(None, "user", "node-00003", "changed before a failed write")
        real = remote_files.atomic_write

        def failing(*a, **kw):
            raise OSError("disk full")
        monkeypatch.setattr(remote_files, "atomic_write", failing)
        with pytest.raises(OSError):
            bridge.export()
        monkeypatch.setattr(remote_files, "atomic_write", real)
        bridge.export()
        path = tmp_path / "root" / "sync" / "user" / kgdir.NODES_FILE
        assert b"changed before a failed write" in path.read_bytes()
    finally:
        s.close()



def test_a_shared_projects_pass_is_incremental_too(tmp_path, monkeypatch):
    """Its content lives in the repository's .kg/: only personal.jsonl is here, and the content
    files it never reads must not count as moved."""
    repo = tmp_path / "src" / "app"
    repo.mkdir(parents=True)
    git_runner.run(["init", "-q"], str(repo))
    (repo / "f").write_text("x\n")
    git_runner.run(["add", "-A"], str(repo))
    git_runner.run(["commit", "-q", "-m", "m"], str(repo))
    s = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 7))).open()
    try:
        for i in range(200):
            s.put_node(None, "project", "p-%03d" % i, "knowledge %d" % i, project_path=str(repo))
        g = s.graph("project", project_path=str(repo))
        with s.lock:
            g.shared = True  # as kg/travel/team.py marks a project whose repository holds .kg/
        bridge = Bridge(s, str(tmp_path / "root" / "sync"))
        bridge.export()
        calls = []
        real = personal.record
        monkeypatch.setattr(personal, "record", lambda *a, **kw: calls.append(a[0]["id"]) or real(*a, **kw))
        s.read_nodes(None, ["p-007"], level="project", project_path=str(repo))
        bridge.export()
        assert calls == ["p-007"]
        bridge.clock = lambda: time.time() + Bridge.AUDIT_EVERY  # the hourly audit finds nothing missed
        bridge.export()
        assert bridge.untracked == 0
        folder = os.path.join(str(tmp_path / "root" / "sync"), remote_mirror.folder_of(g))
        lines = personal.parse(open(os.path.join(folder, personal.FILE), "rb").read())[0]
        assert lines["p-007"]["read"] is not None
        assert not os.path.exists(os.path.join(folder, kgdir.NODES_FILE))
    finally:
        s.close()


@pytest.mark.parametrize("seed", range(10))
def test_personal_reader_reads_what_parse_reads(seed):
    rnd = random.Random(seed)
    reader = personal.Reader()
    pool = [b'{"id":"n%d","read":%s,"state":"%s","since":%d}' % (
        i % 7, b"null" if i % 3 else b"1800000000.5", [b"active", b"archived", b"orphaned"][i % 3], 1800000000 + i)
        for i in range(30)] + [b"<<<<<<< ours", b"=======", b"not json", b'{"id":"x","state":"gone","since":1}', b""]
    for _ in range(30):
        data = b"\n".join(rnd.choice(pool) for _ in range(rnd.randint(0, 12))) + rnd.choice([b"", b"\n", b"\r\n"])
        assert reader.parse(data) == personal.parse(data)


def test_a_pickup_parses_only_the_lines_that_changed(tmp_path, monkeypatch):
    s, bridge, now = big_machine(tmp_path)
    try:
        folder = tmp_path / "root" / "sync" / "user"
        bridge.pickup(["user/nodes.jsonl"])  # the files read once, as after a start
        nodes_file, personal_file = folder / kgdir.NODES_FILE, folder / personal.FILE
        data = nodes_file.read_bytes().replace(b'"insight 1234"', b'"insight 1234, pulled"')
        nodes_file.write_bytes(data.replace(b'"_write_ts":%d' % T0, b'"_write_ts":%d' % (T0 + 10), 0))
        lines = personal_file.read_bytes().split(b"\n")
        lines[7] = lines[7].replace(b'"read":null', b'"read":%d' % (T0 + 5))
        personal_file.write_bytes(b"\n".join(lines))
        parsed = {"content": 0, "personal": 0}
        for mod, name, what in ((kgdir, "check_record", "content"), (personal, "check", "personal")):
            real = getattr(mod, name)
            monkeypatch.setattr(mod, name, lambda *a, _r=real, _w=what, **kw: parsed.__setitem__(
                _w, parsed[_w] + 1) or _r(*a, **kw))
        bridge.pickup(["user/nodes.jsonl", "user/personal.jsonl"])
        assert parsed == {"content": 1, "personal": 1}
        g = s.graph("user")
        assert g.nodes["node-01234"]["gist"] == "insight 1234, pulled"
        assert g.nodes["node-00007"]["_read_ts"] == T0 + 5
    finally:
        s.close()


def shared_worktrees(tmp_path, clock):
    """Two checkouts of one repository that holds .kg/: two shared graphs, one identity, so one
    folder projects/<id>/ and one personal.jsonl."""
    s = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 7), clock=clock)).open()
    graphs = []
    for name in ("wt-a", "wt-b"):
        p = tmp_path / name
        p.mkdir()
        s.put_node(None, "project", "x", "same knowledge", project_path=str(p))
        s.put_node(None, "project", "y", "other", project_path=str(p))
        graphs.append((str(p), s.graph("project", project_path=str(p))))
    with s.lock:
        for _, g in graphs:
            g.meta["repo_id"] = "git-" + "a" * 40  # one repository: every checkout agrees (kg/memory/repo_id.py)
            g.shared = True
    return s, graphs


def test_two_graphs_with_one_folder_take_each_others_personal_lines(tmp_path):
    now = [T0]
    s, ((a, ga), (b, gb)) = shared_worktrees(tmp_path, lambda: now[0])
    try:
        bridge = Bridge(s, str(tmp_path / "root" / "sync"), clock=lambda: now[0])
        bridge.export()
        bridge.export()
        now[0] += 100
        s.read_nodes(None, ["x"], level="project", project_path=a)
        bridge.export()  # a's pass writes x's read to the one personal.jsonl
        now[0] += 100
        s.read_nodes(None, ["y"], level="project", project_path=b)
        bridge.export()  # b's pass must see the file moved since its own last pass
        assert gb.nodes["x"]["_read_ts"] == ga.nodes["x"]["_read_ts"] == T0 + 100
    finally:
        s.close()


def test_a_file_edited_while_a_pass_runs_is_taken_by_the_next(tmp_path, monkeypatch):
    s, bridge, now = big_machine(tmp_path, n=5)
    try:
        path = tmp_path / "root" / "sync" / "user" / kgdir.NODES_FILE
        real = Bridge._files_moved

        def then_edit(self, m, folder, shared):
            out = real(self, m, folder, shared)
            data = path.read_bytes().replace(b'"insight 3"', b'"insight 3, edited by hand"')
            path.write_bytes(data.replace(b'"changed":%d' % T0, b'"changed":%d' % (T0 + 50)))
            return out
        now[0] += 100
        s.put_node(None, "user", "node-00000", "touched")  # something for an incremental pass to do
        monkeypatch.setattr(Bridge, "_files_moved", then_edit)
        bridge.export()
        monkeypatch.setattr(Bridge, "_files_moved", real)
        bridge.export()
        assert s.graph("user").nodes["node-00003"]["gist"] == "insight 3, edited by hand"
    finally:
        s.close()


def test_a_shared_projects_personal_line_never_names_a_flagged_node(tmp_path):
    import string

    now = [T0]
    s, ((a, ga), _) = shared_worktrees(tmp_path, lambda: now[0])
    try:
        rnd = random.Random(7)
        token = "ghp_" + "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(36))
        leaky = node("leaky-" + token, "the deploy token is " + token)
        durable = next(d for d in s.registry.durables() if d.graph is ga)
        with s.writes.writing(None) as w:  # as a graph loaded from an old file would hold it
            s.writes.change(w, durable, [{"op": "node", "node": leaky}], lambda g: g.put_node(leaky), compact=False)
        assert leaky["id"] in ga.flagged
        bridge = Bridge(s, str(tmp_path / "root" / "sync"), clock=lambda: now[0])
        bridge.export()
        folder = tmp_path / "root" / "sync" / remote_mirror.folder_of(ga)
        text = (folder / personal.FILE).read_text()
        assert '"x"' in text and token not in text
    finally:
        s.close()


def test_close_detaches_every_tracker_and_a_later_pass_starts_whole(tmp_path):
    s, bridge, now = big_machine(tmp_path, n=20)
    try:
        g = s.graph("user")
        assert len(g.trackers) == 1 and bridge.disk.files
        bridge.close()  # the remote switched off: nothing may collect changes meanwhile
        assert g.trackers == () and not bridge.disk.files and not bridge.disk.lines and not bridge.disk.readers
        s.put_node(None, "user", "node-00002", "changed while off")
        bridge.export()
        assert len(g.trackers) == 1
        path = tmp_path / "root" / "sync" / "user" / kgdir.NODES_FILE
        assert b"changed while off" in path.read_bytes()
    finally:
        s.close()
