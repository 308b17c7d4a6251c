"""Faults while serving (acknowledged writes stand, reads keep working): a full disk (ENOSPC), a
failing disk (EIO on fsync) and an unwritable root (EACCES on open), injected into the os calls of
kg/disk/; and graph files that do not parse at start.

For every fault: the write gets a StorageError (an isError tool result through MCP) that says
what happened and what to do; the in-memory graph does not move ahead of the disk; reads keep
working; once the fault is gone writes succeed, and a reopen reproduces exactly the
acknowledged writes. The expected state is a "shadow" Store on another root that receives
only the writes the faulty store acknowledged.
"""

import copy
import errno
import glob
import json
import logging
import os
import shutil
import threading
import time
import urllib.parse

import pytest

from kg.api import tools
from kg.core import model
from kg.core.errors import StorageError
from kg.disk import files
from kg.disk.journal import Journal
from kg.memory.store import Settings, Store
from kg.memory.write_path import WritePath
from kg.travel import team

T0 = 1_700_000_000.0
BIG = 10 ** 9


# ================================================================ helpers

class Clock:
    def __init__(self):
        self.t = T0

    def __call__(self):
        return self.t

    def advance(self, s=1.0):
        self.t += s


def _fd_path(fd):
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None


class Fault:
    """Injects one kind of failure into kg/disk/'s os calls, for files under `root` only."""

    def __init__(self, monkeypatch, root):
        self.root = os.path.realpath(root) + os.sep
        self.mode = None
        self.hits = 0
        self.after = 0          # let this many matching calls through first
        self.real = {n: getattr(os, n) for n in ("write", "fsync", "open")}
        monkeypatch.setattr(files.os, "write", self._write)
        monkeypatch.setattr(files.os, "fsync", self._fsync)
        if hasattr(os, "fdatasync"):  # the journal syncs appends with fdatasync
            self.real["fdatasync"] = os.fdatasync
            monkeypatch.setattr(files.os, "fdatasync", self._fdatasync)
        monkeypatch.setattr(files.os, "open", self._open)

    def set(self, mode, after=0):
        self.mode, self.hits, self.after = mode, 0, after

    def clear(self):
        self.mode = None

    def _mine(self, fd):
        path = _fd_path(fd)
        return path is None or (path + os.sep).startswith(self.root)

    def _go(self):
        if self.after > 0:
            self.after -= 1
            return False
        self.hits += 1
        return True

    def _write(self, fd, data):
        if self.mode in ("enospc", "short") and self._mine(fd) and self._go():
            if self.mode == "short" and self.hits == 1 and len(data) > 1:
                return self.real["write"](fd, bytes(data[:len(data) // 2]))   # a short write, then full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real["write"](fd, data)

    def _fdatasync(self, fd):
        if self.mode in ("eio", "fsync-enospc") and self._mine(fd) and self._go():
            e = errno.EIO if self.mode == "eio" else errno.ENOSPC
            raise OSError(e, os.strerror(e))
        return self.real["fdatasync"](fd)

    def _fsync(self, fd):
        if self.mode in ("eio", "fsync-enospc") and self._mine(fd) and self._go():
            e = errno.EIO if self.mode == "eio" else errno.ENOSPC
            raise OSError(e, os.strerror(e))
        return self.real["fsync"](fd)

    def _open(self, path, flags, *args, **kwargs):
        writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if (self.mode == "eacces" and writing and (os.path.realpath(str(path)) + os.sep).startswith(self.root)
                and self._go()):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return self.real["open"](path, flags, *args, **kwargs)


def full_state(g):
    """Everything a graph holds, underscore fields included."""
    meta = {k: v for k, v in g.meta.items() if k not in ("project_path", "level")}   # written by to_obj
    return json.loads(json.dumps({"nodes": g.nodes, "edges": g.edges, "meta": meta})), g.tokens, dict(g.state_counts)


def public_state(g):
    return ({nid: model.public_node(n) for nid, n in g.nodes.items()},
            {k: model.public_edge(e) for k, e in g.edges.items()},
            copy.deepcopy(g.meta.get("progress")))


class Env:
    def __init__(self, tmp_path, monkeypatch, **settings):
        self.tmp = tmp_path
        self.root = str(tmp_path / "root")
        self.clock = Clock()
        settings.setdefault("max_tokens", BIG)
        self.settings = settings
        self.stores = []
        self.project = self.make_project("proj")
        self.fault = Fault(monkeypatch, self.root)
        self.store = self.open()
        self.shadow = self.open(str(tmp_path / "shadow"))
        self.s = self.store.start_session(self.project)
        self.shadow_s = self.shadow.start_session(self.project)

    def make_project(self, name):
        p = self.tmp / "work" / name
        (p / ".git").mkdir(parents=True, exist_ok=True)
        return os.path.realpath(str(p))

    def open(self, root=None):
        s = team.install(Store(root or self.root, Settings(**self.settings), clock=self.clock)).open()
        self.stores.append(s)
        return s

    def do(self, op, *args, **kwargs):
        """Run op on the store; if acknowledged, on the shadow too. -> result or the StorageError."""
        self.clock.advance()
        try:
            r = getattr(self.store, op)(self._sess(self.store), *args, **kwargs)
        except StorageError as exc:
            return exc
        getattr(self.shadow, op)(self._sess(self.shadow), *args, **kwargs)
        return r

    def _sess(self, store):
        return self.s if store is self.store else self.shadow_s

    def graphs(self, store):
        return [store.user, store.project_graph(self.project)]

    def snapshot(self):
        return [full_state(g) for g in self.graphs(self.store)]

    def expected(self):
        return [public_state(g) for g in self.graphs(self.shadow)]

    def public(self, store):
        return [public_state(g) for g in self.graphs(store)]

    def fresh_load(self):
        """What a new Store loads from the disk as it is now (on a copy: the root is locked)."""
        copy_root = str(self.tmp / ("copy-%d" % len(self.stores)))
        shutil.copytree(self.root, copy_root)
        s = team.install(Store(copy_root, Settings(**self.settings), clock=self.clock)).open()
        try:
            return [full_state(g) for g in (s.user, s.project_graph(self.project))]
        finally:
            s.close()

    def die(self):
        for j in self.store.journals.values():
            j.close()
        self.store.root_lock.release()
        self.store.dead = True

    def close_all(self):
        for s in self.stores:
            if getattr(s, "dead", False):
                continue
            try:
                s.close()
            except Exception:
                pass


@pytest.fixture
def make_env(tmp_path, monkeypatch):
    made = []

    def make(**settings):
        e = Env(tmp_path, monkeypatch, **settings)
        made.append(e)
        return e
    yield make
    for e in made:
        e.fault.clear()
        e.close_all()


def seed_graph(env):
    env.do("put_node", "user", "u1", "user insight one", ["first note"], ["~/.bashrc"])
    env.do("put_node", "user", "u2", "user insight two")
    env.do("put_node", "project", "p1", "project fact one", ["why"], ["src/a.py"])
    env.do("put_node", "project", "p2", "project fact two")
    env.do("put_edge", "project", "p1", "p2", "uses", ["because"])
    env.do("put_edge", "user", "u1", "docs/x.md", "documented-in")
    env.do("progress", "t1", {"step": 1}, "user", has_state=True)


WRITES = [
    ("put_node", ("user", "new-u", "a new user node"), {}),
    ("put_node", ("project", "p1", "p1 rewritten"), {"notes": ["changed"]}),
    ("put_edge", ("project", "p2", "p1", "back"), {}),
    ("put_edge", ("user", "u1", "u2", "rel"), {"notes": ["n"]}),
    ("delete_node", ("p2", "project"), {}),
    ("delete_edge", ("p1", "p2", "uses", "project"), {}),
    ("progress", ("t1", {"step": 2}, "user"), {"has_state": True}),
]


def assert_reads_work(env):
    st = env.store
    s = env.s
    g = st.read_graphs(s)
    assert {n["id"] for n in g["user"]["nodes"]} >= {"u1", "u2"}
    assert st.search("insight", s)["results"]
    assert "session_id" in st.sync(s)
    assert st.progress(s, "t1")["state"] is not None
    for name, args in [("kg_read", {"session_id": s.id}), ("kg_search", {"query": "fact", "session_id": s.id}),
                       ("kg_sync", {"session_id": s.id}), ("kg_progress", {"session_id": s.id, "task_id": "t1"})]:
        r = tools.call(st, name, args)
        assert r["isError"] is False, (name, r)


def recover_and_check(env, final_writes=True):
    """Fault gone: writes succeed, and reopening reproduces exactly the acknowledged writes."""
    env.fault.clear()
    if final_writes:
        r = env.do("put_node", "user", "after-fault", "written once the disk was fine again")
        assert not isinstance(r, StorageError), r
        r = env.do("put_edge", "project", "p1", "src/after.py", "in")
        assert not isinstance(r, StorageError), r
    assert env.public(env.store) == env.expected()
    env.die()                                   # a crash: only what was acknowledged may count
    env.store = env.open()
    env.s = env.store.session(env.s.id)
    assert env.public(env.store) == env.expected()
    env.store.close()
    env.store.dead = True
    env.store = env.open()                       # and from the folded files
    env.s = env.store.session(env.s.id)
    assert env.public(env.store) == env.expected()


# ================================================================ a full disk while serving

@pytest.mark.parametrize("mode", ["enospc", "short"])
@pytest.mark.parametrize("op, args, kwargs", WRITES, ids=[w[0] + "-" + w[1][0] for w in WRITES])
def test_full_disk_refuses_the_write_and_changes_nothing(make_env, mode, op, args, kwargs):
    env = make_env()
    seed_graph(env)
    before = env.snapshot()
    env.fault.set(mode)
    r = env.do(op, *args, **kwargs)
    assert isinstance(r, StorageError), "%s on a full disk was acknowledged: %r" % (op, r)
    msg = r.message
    assert "No space left on device" in msg and "disk is full" in msg, msg
    assert "retry" in msg.lower(), msg
    assert env.snapshot() == before, "the in-memory graph moved ahead of the disk"
    assert env.fresh_load() == before, "the disk holds more than what was acknowledged"
    # The journal holds no trace of the refused record (a short write was cut back).
    for j in env.store.journals.values():
        if os.path.exists(j.path):
            with open(j.path, "rb") as f:
                data = f.read()
            assert not data or data.endswith(b"\n"), "a partial record was left in %s" % j.path
    assert_reads_work(env)
    # Still full: the next write fails the same way; nothing half-done accumulates.
    r = env.do("put_node", "user", "second-try", "still full")
    assert isinstance(r, StorageError)
    assert env.snapshot() == before
    recover_and_check(env)


def test_full_disk_through_mcp_is_a_helpful_tool_error(make_env):
    env = make_env()
    seed_graph(env)
    before = env.snapshot()
    env.fault.set("enospc")
    sid = env.s.id
    for name, args in [
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "x", "gist": "never stored"}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p1", "to": "src/z.py", "rel": "in"}),
        ("kg_delete_node", {"session_id": sid, "id": "u2"}),
        ("kg_delete_edge", {"session_id": sid, "from": "p1", "to": "p2", "rel": "uses"}),
        ("kg_progress", {"session_id": sid, "task_id": "t9", "state": {"a": 1}}),
    ]:
        r = tools.call(env.store, name, args)
        assert r["isError"] is True, (name, r)
        assert "structuredContent" not in r
        assert len(r["content"]) == 1 and r["content"][0]["type"] == "text"
        text = r["content"][0]["text"]
        assert name in text and "No space left on device" in text and "disk is full" in text, text
        assert "free space" in text and "retry" in text.lower(), text
        assert "Traceback" not in text
    assert env.snapshot() == before
    assert_reads_work(env)
    env.fault.clear()
    r = tools.call(env.store, "kg_put_node", {"session_id": sid, "level": "user", "id": "x", "gist": "stored now"})
    assert r["isError"] is False, r
    assert env.store.user.nodes["x"]["gist"] == "stored now"


def test_read_by_id_keeps_working_on_a_full_disk(make_env):
    """Reading a node by id refreshes its recency (a journal record). On a full disk the read must
    still answer with the node; the recency refresh may be skipped, but not half-applied."""
    env = make_env()
    seed_graph(env)
    before = env.snapshot()
    env.fault.set("enospc")
    r = tools.call(env.store, "kg_read", {"session_id": env.s.id, "id": "u1"}, structured=True)
    assert r["isError"] is False, "kg_read by id fails on a full disk: %r" % r["content"][0]["text"]
    assert r["structuredContent"]["nodes"][0]["gist"] == "user insight one"
    after = env.snapshot()
    assert after == before or after == env.fresh_load(), "the in-memory graph moved ahead of the disk"


def test_new_session_keeps_working_on_a_full_disk(make_env):
    """kg_read with cwd is how an agent starts: on a full disk it must still answer with the graph
    (sessions.json can be saved later, as activity already is)."""
    env = make_env()
    seed_graph(env)
    env.fault.set("enospc")
    r = tools.call(env.store, "kg_read", {"cwd": env.project}, structured=True)
    assert r["isError"] is False, "kg_read(cwd) fails on a full disk: %r" % r["content"][0]["text"]
    sc = r["structuredContent"]
    assert {n["id"] for n in sc["project"]["nodes"]} == {"p1", "p2"}
    sid = sc["session_id"]
    assert tools.call(env.store, "kg_sync", {"session_id": sid})["isError"] is False
    env.fault.clear()
    assert tools.call(env.store, "kg_put_node", {"session_id": sid, "level": "user", "id": "by-new",
                                                 "gist": "from the session started on a full disk"})["isError"] is False


def test_compaction_record_refused_leaves_the_graph_as_on_disk(make_env):
    """A put whose own record fits but whose compaction records do not (the disk fills up in
    between): the put stands (its record is on disk), the compaction is undone in memory and
    redone by a later pass; memory never shows what the disk does not hold."""
    env = make_env(max_tokens=200, grace_days=0)
    for i in range(6):
        env.clock.advance(60)
        r = env.do("put_node", "user", "n%d" % i, "g" * 40)
        assert not isinstance(r, StorageError)
    assert env.store.user.tokens <= 200 and not env.store.user.archived_count
    before = env.snapshot()
    env.fault.set("enospc", after=1)             # the put's own record is written, the next is refused
    env.clock.advance(60)
    r = env.do("put_node", "user", "n6", "g" * 40)
    assert env.fault.hits >= 1, "the put did not try to journal a compaction (test setup)"
    assert not isinstance(r, StorageError), "the put's own record was saved; only its compaction failed"
    now = env.snapshot()
    assert now == env.fresh_load(), "memory differs from what the disk loads after a refused compaction"
    assert "n6" in env.store.user.nodes and not env.store.user.archived_count, "compaction shows in memory"
    assert now != before
    env.fault.clear()
    env.die()
    env.store = env.open()
    assert "n6" in env.store.user.nodes, "an acknowledged put is missing after a restart"


# ================================================================ a failing fsync

@pytest.mark.parametrize("mode", ["eio", "fsync-enospc"])
@pytest.mark.parametrize("op, args, kwargs", WRITES[:5], ids=[w[0] + "-" + w[1][0] for w in WRITES[:5]])
def test_failed_fsync_is_refused_and_memory_matches_disk(make_env, mode, op, args, kwargs):
    env = make_env()
    seed_graph(env)
    before = env.snapshot()
    env.fault.set(mode)
    r = env.do(op, *args, **kwargs)
    assert isinstance(r, StorageError), "%s acknowledged although its fsync failed" % op
    assert ("Input/output error" if mode == "eio" else "No space left") in r.message, r.message
    assert "retry" in r.message.lower()
    assert env.snapshot() == env.fresh_load(), "after a failed fsync memory differs from what the disk loads"
    assert env.snapshot() == before
    assert_reads_work(env)
    for i in range(3):                           # the disk keeps failing: every write is refused
        assert isinstance(env.do("put_node", "user", "f%d" % i, "refused"), StorageError)
    assert env.snapshot() == before
    recover_and_check(env)


def test_write_racing_a_failed_fsync_is_not_acknowledged_then_lost(make_env, monkeypatch):
    """Writer A's fsync fails. Writer B appended its record while A's fsync ran (so that fsync did
    not cover it), and B's commit runs after A's rollback cut the journal back. B must then get
    an error, or else its write must really be kept: never "ok" for a write that is gone."""
    env = make_env()
    seed_graph(env)
    store = env.store
    a_in_fsync, b_appended, recovered = threading.Event(), threading.Event(), threading.Event()
    real_write, real_fsync = env.fault.real["write"], env.fault.real["fsync"]
    b_thread = []
    state = {"fail": True}

    def write(fd, data):
        n = real_write(fd, data)
        if b_thread and threading.current_thread() is b_thread[0] and b'"b-write"' in bytes(data):
            b_appended.set()
        return n

    def fsync(fd):
        if state["fail"] and (_fd_path(fd) or "").endswith("user.journal"):
            state["fail"] = False
            a_in_fsync.set()
            assert b_appended.wait(10), "writer B never appended"
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)

    real_commit = Journal.commit
    real_recover = WritePath.recover

    def commit(self, ticket):
        if b_thread and threading.current_thread() is b_thread[0]:
            recovered.wait(10)                    # B reaches commit only after A's rollback
        return real_commit(self, ticket)

    def recover(self, journal):
        try:
            return real_recover(self, journal)
        finally:
            recovered.set()

    monkeypatch.setattr(files.os, "write", write)
    monkeypatch.setattr(files.os, "fsync", fsync)
    if hasattr(os, "fdatasync"):
        monkeypatch.setattr(files.os, "fdatasync", fsync)
    monkeypatch.setattr(Journal, "commit", commit)
    monkeypatch.setattr(WritePath, "recover", recover)
    out = {}

    def a():
        try:
            out["a"] = store.put_node(env.s, "user", "a-write", "A")
        except StorageError as exc:
            out["a"] = exc

    def b():
        try:
            out["b"] = store.put_node(env.s, "user", "b-write", "B")
        except StorageError as exc:
            out["b"] = exc

    ta = threading.Thread(target=a)
    tb = threading.Thread(target=b)
    b_thread.append(tb)
    ta.start()
    assert a_in_fsync.wait(10), "writer A never reached its fsync"
    tb.start()                                   # B writes while A's fsync runs (A holds no store lock)
    ta.join(20)
    tb.join(20)
    assert isinstance(out["a"], StorageError), out
    if isinstance(out["b"], StorageError):
        return                                   # refused: fine
    # B was told its write is stored: it must be in memory and survive a crash.
    assert "b-write" in store.user.nodes, "B's put was acknowledged, but the rollback after A's failed fsync dropped it"
    monkeypatch.undo()
    env.die()
    env.store = env.open()
    assert "b-write" in env.store.user.nodes, "B's acknowledged put is not on disk"


# ================================================================ an unwritable root

def test_unwritable_root_refuses_writes_and_recovers(make_env):
    env = make_env()
    seed_graph(env)
    other = env.make_project("other")
    so = env.store.start_session(other)          # a project whose journal is not open yet
    env.shadow.start_session(other)
    env.store.fold_idle(force=True)
    env.die()
    env.store = env.open()                       # a fresh start: no journal file is open
    env.s = env.store.session(env.s.id)
    so = env.store.session(so.id)
    before = env.snapshot()
    env.fault.set("eacces")
    for op, args, kwargs in WRITES:
        r = env.do(op, *args, **kwargs)
        assert isinstance(r, StorageError), "%s acknowledged on an unwritable root" % op
        assert "Permission denied" in r.message and "permissions" in r.message, r.message
        assert env.snapshot() == before, "%s: memory moved ahead of the disk" % op
    with pytest.raises(StorageError):
        env.store.put_node(so, "project", "o1", "in the other project")
    assert "o1" not in env.store.project_graph(other).nodes
    assert env.snapshot() == before
    assert_reads_work(env)
    assert not [f for f in os.listdir(env.root) if f.startswith(".tmp-")]
    recover_and_check(env)


# ================================================================ folding and stopping on a bad disk

@pytest.mark.parametrize("mode", ["enospc", "eio", "eacces"])
def test_fold_on_a_bad_disk_keeps_the_journal(make_env, mode, caplog):
    env = make_env()
    seed_graph(env)
    env.store.fold_idle(force=True)
    env.do("put_node", "user", "u3", "journaled, not folded")
    env.do("delete_node", "p2", "project")
    graph_files = sorted(glob.glob(os.path.join(env.root, "**", "*.json"), recursive=True))
    on_disk = {p: open(p, "rb").read() for p in graph_files if not p.endswith("sessions.json")}
    journals = {j.path: open(j.path, "rb").read() for j in env.store.journals.values()}
    before = env.snapshot()
    env.fault.set(mode)
    with caplog.at_level(logging.ERROR):
        env.store.fold_idle(force=True)          # must not raise: it is a background job
    assert env.snapshot() == before
    for p, data in on_disk.items():
        assert open(p, "rb").read() == data, "%s changed although the fold failed" % p
    for p, data in journals.items():
        assert open(p, "rb").read() == data, "%s lost records although the fold failed" % p
    assert not [f for f in glob.glob(os.path.join(env.root, "**", ".tmp-*"), recursive=True)], "temp files left"
    assert caplog.records, "a failed fold must be logged"
    env.fault.clear()
    env.store.fold_idle(force=True)
    assert all(os.path.getsize(j.path) == 0 for j in env.store.journals.values() if os.path.exists(j.path))
    recover_and_check(env)


@pytest.mark.parametrize("mode", ["enospc", "eacces"])
def test_close_on_a_bad_disk_loses_nothing_and_releases_the_lock(make_env, mode):
    """Shutdown (SIGTERM) while the disk is full: the folds and sessions.json cannot be written,
    but close() must still finish (log, close the journals, release the lock) and every
    acknowledged write must be there at the next start (from the journals)."""
    env = make_env()
    seed_graph(env)
    env.store.fold_idle(force=True)
    env.do("put_node", "user", "u3", "journaled, not folded")
    env.store.session(env.s.id)                  # sessions.json is dirty too
    env.fault.set(mode)
    error = None
    try:
        env.store.close()
    except Exception as exc:                      # reported below, after the data check
        error = exc
    env.fault.clear()
    env.die()                                    # whatever close() left open, the process exit frees
    env.store = env.open()
    env.s = env.store.session(env.s.id)
    assert env.public(env.store) == env.expected()
    assert error is None, "Store.close() raised on a full disk (kgd would exit with a traceback): %r" % error


# ================================================================ files that do not parse at start

def _write(path, data):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _graph_obj(nodes, project_path=None, edges=()):
    obj = {"nodes": {n: {"id": n, "gist": "gist of " + n, "notes": ["note of " + n], "touches": [],
                         "_created_ts": T0, "_write_ts": T0, "_read_ts": None, "_archived": False,
                         "_orphaned_ts": None} for n in nodes},
           "edges": {"%s->%s:%s" % e: {"from": e[0], "to": e[1], "rel": e[2], "notes": []} for e in edges},
           "_meta": {}}
    if project_path:
        obj["_meta"]["project_path"] = project_path
    return json.dumps(obj).encode()


def _open(root):
    return team.install(Store(root, Settings(max_tokens=BIG), clock=Clock())).open()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_corrupt_project_graph_with_good_prev_and_a_journal(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    proj = tmp_path / "work" / "proj"
    (proj / ".git").mkdir(parents=True)
    pp = os.path.realpath(str(proj))
    root = str(tmp_path / "root")
    folder = os.path.join(root, "projects", "proj")
    gfile = os.path.join(folder, "graph.json")
    bad = b'{"nodes": {"half": {"id": "ha'
    _write(gfile + ".prev", _graph_obj(["kept-a", "kept-b"], pp, [("kept-a", "kept-b", "uses")]))
    _write(gfile, bad)
    rec = {"op": "node", "node": json.loads(_graph_obj(["from-journal"]))["nodes"]["from-journal"]}
    _write(os.path.join(folder, "graph.journal"), json.dumps(rec).encode() + b"\n")
    store = _open(root)
    try:
        g = store.project_graph(pp)
        assert sorted(g.nodes) == ["from-journal", "kept-a", "kept-b"]
        assert list(g.edges) == ["kept-a->kept-b:uses"]
        s = store.start_session(str(proj))
        assert tools.call(store, "kg_read", {"session_id": s.id, "id": "kept-a"})["isError"] is False
        store.put_node(s, "project", "after", "written after healing")
    finally:
        store.close()
    kept = glob.glob(gfile + ".corrupt-*")
    assert len(kept) == 1 and open(kept[0], "rb").read() == bad, "the corrupt file must be kept aside, unchanged"
    warns = _warnings(caplog)
    assert any(gfile in w and "corrupt" in w for w in warns), warns
    assert any(".prev" in w for w in warns), warns
    assert set(json.loads(open(gfile, "rb").read())["nodes"]) == {"from-journal", "kept-a", "kept-b", "after"}


def test_corrupt_user_graph_without_prev_starts_empty_and_keeps_the_file(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    root = str(tmp_path / "root")
    ufile = os.path.join(root, "user.json")
    bad = b"\x00\x00\x00 not json at all"
    _write(ufile, bad)
    store = _open(root)
    try:
        assert store.user.nodes == {}
        s = store.start_session(None)
        store.put_node(s, "user", "fresh", "a new start")
    finally:
        store.close()
    kept = glob.glob(ufile + ".corrupt-*")
    assert len(kept) == 1 and open(kept[0], "rb").read() == bad
    assert any(ufile in w for w in _warnings(caplog)), _warnings(caplog)
    assert list(json.loads(open(ufile, "rb").read())["nodes"]) == ["fresh"]


def test_corrupt_graph_and_corrupt_prev_both_kept_aside(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    root = str(tmp_path / "root")
    ufile = os.path.join(root, "user.json")
    _write(ufile, b"{")
    _write(ufile + ".prev", b"[1, 2")
    store = _open(root)
    try:
        assert store.user.nodes == {}
    finally:
        store.close()
    assert len(glob.glob(ufile + ".corrupt-*")) == 1
    assert len(glob.glob(ufile + ".prev.corrupt-*")) == 1
    assert len(_warnings(caplog)) >= 2


def test_corrupt_sessions_file_is_kept_aside_and_sessions_start_again(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    root = str(tmp_path / "root")
    sfile = os.path.join(root, "sessions.json")
    _write(os.path.join(root, "user.json"), _graph_obj(["u"]))
    _write(sfile, b'{"seq": 5, "sessions": {')
    store = _open(root)
    try:
        assert sorted(store.user.nodes) == ["u"]
        s = store.start_session(None)
        assert store.sync(s)["session_id"] == s.id
    finally:
        store.close()
    assert len(glob.glob(sfile + ".corrupt-*")) == 1
    assert json.loads(open(sfile, "rb").read())["sessions"]


@pytest.mark.e2e
def test_daemon_starts_on_a_corrupt_graph_and_logs_a_warning(make_daemon, project, tmp_path):
    root = str(tmp_path / "root")
    ufile = os.path.join(root, "user.json")
    _write(ufile + ".prev", _graph_obj(["from-prev"]))
    _write(ufile, b'{"nodes": {"torn')
    d = make_daemon()
    sc = d.call_tool("kg_read", {"cwd": str(project)})
    assert [n["id"] for n in sc["user"]["nodes"]] == ["from-prev"]
    assert d.stop() == 0
    log = "".join(d.stderr_lines)
    assert "WARNING" in log and "user.json" in log and "corrupt" in log, log
    assert len(glob.glob(ufile + ".corrupt-*")) == 1


# ================================================================ the daemon on a bad disk, end to end

SITECUSTOMIZE = r"""
# Test-only fault injection for kgd (tests/test_faults.py): the fault named in $KG_TEST_FAULT_FILE
# applies to files under $KG_TEST_FAULT_ROOT. Loaded as sitecustomize via PYTHONPATH.
import errno, os
_FLAG = os.environ.get("KG_TEST_FAULT_FILE")
_ROOT = os.path.realpath(os.environ.get("KG_TEST_FAULT_ROOT", "/nonexistent")) + os.sep
if _FLAG:
    _write, _fsync, _open = os.write, os.fsync, os.open

    def _mode():
        try:
            with open(_FLAG) as f:
                return f.read().strip()
        except OSError:
            return ""

    def _mine_fd(fd):
        try:
            return (os.readlink("/proc/self/fd/%d" % fd) + os.sep).startswith(_ROOT)
        except OSError:
            return False

    def write(fd, data):
        if _mode() == "enospc" and _mine_fd(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _write(fd, data)

    def fsync(fd):
        if _mode() == "eio" and _mine_fd(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return _fsync(fd)

    def open_(path, flags, *a, **k):
        if (_mode() == "eacces" and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
                and (os.path.realpath(str(path)) + os.sep).startswith(_ROOT)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return _open(path, flags, *a, **k)

    os.write, os.fsync, os.open = write, fsync, open_
    if hasattr(os, "fdatasync"):  # the journal syncs appends with fdatasync
        _fdatasync = os.fdatasync

        def fdatasync(fd):
            if _mode() == "eio" and _mine_fd(fd):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return _fdatasync(fd)
        os.fdatasync = fdatasync
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_daemon_on_a_full_then_failing_disk_keeps_serving_and_recovers(make_daemon, project, tmp_path):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    flag = tmp_path / "fault"
    flag.write_text("")
    root = str(tmp_path / "root")
    env = {"PYTHONPATH": str(inject), "KG_TEST_FAULT_FILE": str(flag), "KG_TEST_FAULT_ROOT": root}
    d = make_daemon(args=["--max-tokens", "1000000"], env=env)
    sc = d.call_tool("kg_read", {"cwd": str(project)})
    sid = sc["session_id"]
    pp = sc["project_path"]
    acked = {}

    def put(level, nid, gist):
        r = d.call("kg_put_node", {"session_id": sid, "level": level, "id": nid, "gist": gist})
        if not r.get("isError"):
            acked[(level, nid)] = gist
        return r

    def graph():
        status, body = d.json("GET", "/api/graph?project_path=" + urllib.parse.quote(pp))
        assert status == 200, body
        return {(lvl, n["id"]): n["gist"] for lvl in ("user", "project") for n in body[lvl]["nodes"]}

    for i in range(5):
        assert not put("user" if i % 2 else "project", "ok-%d" % i, "before the fault")["isError"]
    for mode in ("enospc", "eio", "eacces"):
        flag.write_text(mode)
        r = put("user", "refused-" + mode, "never stored")
        if mode == "eacces" and not r.get("isError"):
            # The user journal was already open: an unwritable root does not revoke an open file.
            pass
        else:
            assert r["isError"] is True, (mode, r)
            text = r["content"][0]["text"]
            assert "kg_put_node failed" in text and "retry" in text.lower(), text
            assert "structuredContent" not in r
        if mode != "eacces":
            status, body = d.json("PUT", "/api/nodes/project/rest-" + mode,
                                  {"gist": "never stored", "session_id": sid})
            assert status == 507 and "error" in body, (status, body)
        # Reads keep working, and the graph shows only acknowledged writes.
        assert d.json("GET", "/health")[0] == 200
        assert d.call("kg_read", {"session_id": sid})["isError"] is False
        assert d.call("kg_search", {"query": "fault", "session_id": sid})["isError"] is False
        assert d.call("kg_sync", {"session_id": sid})["isError"] is False
        assert graph() == acked, mode
        flag.write_text("")
        r = put("project", "back-" + mode, "after the %s fault" % mode)
        assert r["isError"] is False, (mode, r)
        assert graph() == acked
    # A pause long enough for a fold to fail on a full disk, then a stop while it is still full.
    flag.write_text("enospc")
    time.sleep(1.8)
    code = d.stop()
    stopped_on_full_disk = code
    time.sleep(0.2)
    stop_log = "".join(d.stderr_lines)[-1500:]
    flag.write_text("")
    d.start()
    assert graph() == acked, "acknowledged writes missing after a stop on a full disk"
    assert d.stop() == 0
    assert stopped_on_full_disk == 0, ("SIGTERM on a full disk: exit code %r (expected 0 after logging that the "
                                       "final flush failed; the journals keep the data). Its log ends:\n%s"
                                       % (stopped_on_full_disk, stop_log))
