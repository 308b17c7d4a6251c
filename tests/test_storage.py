"""kg/disk/: atomic writes, healing loads, the journal with group commit, slugs, the lock
(contract section 4). Real files under tmp_path; failures injected by monkeypatching os."""

import json
import os
import re
import stat
import threading

import pytest

from kg.core.errors import Conflict, StorageError
from kg.disk.files import RootLock, atomic_write, load_json
from kg.disk.journal import Journal
from kg.disk.layout import Layout, base_slug, hashed_slug


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write_raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- atomic_write

def test_atomic_write_content_and_mode(tmp_path):
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"a":1}')
    assert read(p) == b'{"a":1}'
    assert mode(p) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["g.json"]      # no .prev yet, no temp files


def test_atomic_write_keeps_prev(tmp_path):
    p = str(tmp_path / "g.json")
    for i in range(4):
        atomic_write(p, b'{"v":%d}' % i)
        assert read(p) == b'{"v":%d}' % i
        if i:
            assert read(p + ".prev") == b'{"v":%d}' % (i - 1)
            assert mode(p + ".prev") == 0o600
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.json.prev"]


def test_atomic_write_creates_folders_0700(tmp_path):
    p = str(tmp_path / "root" / "projects" / "slug" / "graph.json")
    atomic_write(p, b"{}")
    for d in (tmp_path / "root", tmp_path / "root" / "projects", tmp_path / "root" / "projects" / "slug"):
        assert mode(str(d)) == 0o700
    assert mode(p) == 0o600


def test_atomic_write_large(tmp_path):
    p = str(tmp_path / "big.json")
    data = b"x" * (5 * 1024 * 1024 + 7)
    atomic_write(p, data)
    assert read(p) == data


def test_atomic_write_accepts_bytearray_and_memoryview(tmp_path):
    p = str(tmp_path / "g.json")
    atomic_write(p, bytearray(b"abc"))
    assert read(p) == b"abc"


def _fail_on(monkeypatch, name, which=1):
    """Make the `which`-th call of os.<name> raise (the others pass through)."""
    real = getattr(os, name)
    calls = {"n": 0}

    def fake(*a, **kw):
        calls["n"] += 1
        if calls["n"] == which:
            raise OSError(28, "No space left on device")
        return real(*a, **kw)
    monkeypatch.setattr(os, name, fake)
    return calls


@pytest.mark.parametrize("name, which", [
    ("fsync", 1),        # the temp file's fsync
    ("write", 1),        # the disk refuses the data
    ("replace", 1),      # moving the old file to .prev
    ("replace", 2),      # the final rename
    ("link", 1),         # taking the .prev link
    ("fchmod", 1),
])
def test_atomic_write_failure_leaves_old_file(tmp_path, monkeypatch, name, which):
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"v":"old-old"}')
    atomic_write(p, b'{"v":"old"}')
    _fail_on(monkeypatch, name, which)
    with pytest.raises(OSError):
        atomic_write(p, b'{"v":"new"}')
    monkeypatch.undo()
    assert read(p) == b'{"v":"old"}'
    assert json.loads(read(p + ".prev"))["v"] in ("old-old", "old")   # a good earlier state either way
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.json.prev"]  # no temp file left behind
    atomic_write(p, b'{"v":"next"}')                                  # and the next write works
    assert read(p) == b'{"v":"next"}'
    assert read(p + ".prev") == b'{"v":"old"}'


def test_atomic_write_failure_on_first_write(tmp_path, monkeypatch):
    p = str(tmp_path / "g.json")
    _fail_on(monkeypatch, "fsync", 1)
    with pytest.raises(OSError):
        atomic_write(p, b"{}")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_atomic_write_fsyncs_file_and_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fake(fd):
        synced.append(os.path.realpath("/proc/self/fd/%d" % fd) if os.path.exists("/proc/self/fd") else fd)
        return real(fd)
    monkeypatch.setattr(os, "fsync", fake)
    atomic_write(str(tmp_path / "g.json"), b"{}")
    assert len(synced) >= 2
    if os.path.exists("/proc/self/fd"):
        assert str(tmp_path) in synced            # the folder, after the rename


# ---------------------------------------------------------------- load_json healing

def test_load_missing(tmp_path):
    assert load_json(str(tmp_path / "nope.json")) is None
    assert os.listdir(tmp_path) == []


def test_load_good(tmp_path):
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"a": 1}')
    assert load_json(p) == {"a": 1}


@pytest.mark.parametrize("corrupt", [b"{", b"", b"\xff\xfe", b"[1, 2]", b'"a string"', b"null", b"{}garbage",
                                     b'{"a": 1'])
def test_corrupt_main_uses_prev_and_quarantines(tmp_path, corrupt):
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"v": "good"}')
    atomic_write(p, b'{"v": "newer"}')
    write_raw(p, corrupt)                       # the main file is damaged (its .prev is {"v": "good"})
    obj = load_json(p, clock=lambda: 1234.0)
    assert obj == {"v": "good"}
    aside = p + ".corrupt-1234"
    assert read(aside) == corrupt               # quarantined, byte for byte, never deleted
    assert json.loads(read(p)) == {"v": "good"}  # main restored from .prev
    assert json.loads(read(p + ".prev")) == {"v": "good"}
    assert load_json(p) == {"v": "good"}


def test_missing_main_uses_prev(tmp_path):
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"v": 1}')
    atomic_write(p, b'{"v": 2}')
    os.unlink(p)
    assert load_json(p) == {"v": 1}
    assert json.loads(read(p)) == {"v": 1}


def test_both_corrupt(tmp_path):
    p = str(tmp_path / "g.json")
    write_raw(p, b"{broken main")
    write_raw(p + ".prev", b"{broken prev")
    assert load_json(p, clock=lambda: 77.0) is None
    assert read(p + ".corrupt-77") == b"{broken main"
    assert read(p + ".prev.corrupt-77") == b"{broken prev"
    assert not os.path.exists(p) and not os.path.exists(p + ".prev")


def test_repeated_corruption_in_the_same_second_keeps_every_copy(tmp_path):
    """Nothing is silently dropped: a second quarantine must not overwrite the first."""
    p = str(tmp_path / "g.json")
    atomic_write(p, b'{"v": "good"}')
    atomic_write(p, b'{"v": "good2"}')
    write_raw(p, b"{first damage")
    assert load_json(p, clock=lambda: 500.0) == {"v": "good"}
    write_raw(p, b"{second damage")
    assert load_json(p, clock=lambda: 500.0) == {"v": "good"}
    kept = sorted(read(str(tmp_path / n)) for n in os.listdir(tmp_path) if ".corrupt-" in n)
    assert kept == [b"{first damage", b"{second damage"]


# ---------------------------------------------------------------- journal

def test_journal_append_commit_replay(tmp_path):
    path = str(tmp_path / "sub" / "graph.journal")
    j = Journal(path)
    tickets = [j.append({"op": "node", "i": i}) for i in range(5)]
    assert tickets == sorted(tickets) and len(set(tickets)) == 5
    for t in tickets:
        j.commit(t)
    assert j.records == 5
    assert mode(path) == 0o600
    assert Journal.replay(path) == [{"op": "node", "i": i} for i in range(5)]
    j.close()


def test_journal_replay_missing(tmp_path):
    assert Journal.replay(str(tmp_path / "none.journal")) == []


def test_journal_records_are_lines(tmp_path):
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    j.commit(j.append({"op": "node", "text": "multi\nline ünïcode"}))
    j.close()
    data = read(path)
    assert data.count(b"\n") == 1 and data.endswith(b"\n")
    assert Journal.replay(path) == [{"op": "node", "text": "multi\nline ünïcode"}]


@pytest.mark.parametrize("tail", [b'{"op": "node", "i"', b"{", b"\x00\x00\x00", b'{"op":"node","i":9}'])
def test_journal_torn_last_record_dropped(tmp_path, tail):
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    for i in range(3):
        j.commit(j.append({"i": i}))
    j.close()
    with open(path, "ab") as f:
        f.write(tail)                        # a crash in the middle of the fourth append
    assert Journal.replay(path) == [{"i": 0}, {"i": 1}, {"i": 2}]


@pytest.mark.parametrize("garbage", [b"not json at all", b"[1, 2, 3]", b"\xff\xfe\xfd", b'"string"', b"   "])
def test_journal_garbage_middle_line_skipped(tmp_path, garbage):
    path = str(tmp_path / "g.journal")
    write_raw(path, b'{"i": 0}\n' + garbage + b'\n{"i": 2}\n')
    assert Journal.replay(path) == [{"i": 0}, {"i": 2}]


def test_journal_reset(tmp_path):
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    t = j.append({"i": 0})
    j.commit(t)
    j.append({"i": 1})
    j.reset()
    assert os.path.getsize(path) == 0
    assert j.records == 0
    assert Journal.replay(path) == []
    t = j.append({"i": 2})
    j.commit(t)
    assert Journal.replay(path) == [{"i": 2}]
    j.close()


def test_journal_reopen_appends(tmp_path):
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    j.commit(j.append({"i": 0}))
    j.close()
    j = Journal(path)
    j.commit(j.append({"i": 1}))
    j.close()
    assert Journal.replay(path) == [{"i": 0}, {"i": 1}]


def test_journal_append_failure_leaves_journal_as_it_was(tmp_path, monkeypatch):
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    j.commit(j.append({"i": 0}))
    real = os.write

    def half(fd, data):                      # writes a few bytes, then the disk is full
        if len(data) > 4:
            real(fd, bytes(data[:4]))
            raise OSError(28, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(os, "write", half)
    with pytest.raises(StorageError) as exc:
        j.append({"i": 1, "pad": "x" * 100})
    assert "full" in exc.value.message
    monkeypatch.undo()
    assert read(path) == b'{"i":0}\n'
    j.commit(j.append({"i": 2}))
    assert Journal.replay(path) == [{"i": 0}, {"i": 2}]
    j.close()


# The journal makes appends durable with storage.sync_appended: os.fdatasync where the platform
# has it, else os.fsync. JOURNAL_SYNC names the call to fake for journal commits.
JOURNAL_SYNC = "fdatasync" if hasattr(os, "fdatasync") else "fsync"


def test_journal_commit_failure_is_storage_error(tmp_path, monkeypatch):
    j = Journal(str(tmp_path / "g.journal"))
    t = j.append({"i": 0})
    _fail_on(monkeypatch, JOURNAL_SYNC, 1)
    with pytest.raises(StorageError):
        j.commit(t)
    j.close()


def test_group_commit_shares_fsyncs(tmp_path, monkeypatch):
    """Many threads appending (under one lock, as the store does) and committing (outside it):
    every record durable, far fewer fsyncs than commits."""
    path = str(tmp_path / "g.journal")
    j = Journal(path)
    real = getattr(os, JOURNAL_SYNC)
    count = {"n": 0}
    count_lock = threading.Lock()

    def slow_fsync(fd):
        with count_lock:
            count["n"] += 1
        real(fd)
        threading.Event().wait(0.002)        # a disk that takes a moment
    monkeypatch.setattr(os, JOURNAL_SYNC, slow_fsync)
    store_lock = threading.Lock()
    n_threads, per_thread = 8, 25
    barrier = threading.Barrier(n_threads)
    errors = []

    def worker(k):
        try:
            barrier.wait()
            for i in range(per_thread):
                with store_lock:
                    t = j.append({"k": k, "i": i})
                j.commit(t)
                assert j._synced >= t
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    commits = n_threads * per_thread
    recs = Journal.replay(path)
    assert len(recs) == commits
    assert sorted((r["k"], r["i"]) for r in recs) == sorted((k, i) for k in range(n_threads) for i in range(per_thread))
    for k in range(n_threads):                # each thread's records in its own order
        assert [r["i"] for r in recs if r["k"] == k] == list(range(per_thread))
    assert count["n"] < commits * 0.75, (count["n"], commits)
    j.close()


def test_commit_of_already_synced_ticket_does_not_fsync(tmp_path, monkeypatch):
    j = Journal(str(tmp_path / "g.journal"))
    t1 = j.append({"i": 1})
    t2 = j.append({"i": 2})
    calls = _fail_on(monkeypatch, JOURNAL_SYNC, 10 ** 9)
    j.commit(t2)
    j.commit(t1)
    j.commit(t2)
    assert calls["n"] == 1
    j.close()


# ---------------------------------------------------------------- slugs

SLUG_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@pytest.mark.parametrize("path, slug", [
    ("/home/me/myproj", "myproj"),
    ("/home/me/myproj/", "myproj"),
    ("/home/me/my proj!", "my-proj"),
    ("/home/me/My.Project_v2", "My.Project_v2"),
    ("/home/me/a/b", "b"),
    ("a/b", "b"),
    ("/", "root"),
    ("", "project"),
    ("..", "project"),
    ("/home/..", "root"),
    ("/x/...", "project"),
    ("/x/.hidden", "hidden"),
    ("/x/-dash-", "dash"),
    ("/x/проект", "project"),
    ("/x/日本語-app", "app"),
    ("/x/a\x00b", "a-b"),
    ("/x/" + "n" * 300, "n" * 80),
])
def test_base_slug(path, slug):
    assert base_slug(path) == slug


@pytest.mark.parametrize("path", ["..", ".", "/", "", "a/b", "/x/../..", "/x/..\\..", "/x/\u202e\u0000evil", "/x/ ",
                                  "/x/.", "/x/~", "/x/$HOME", "/x/con", "/x/a:b", "/x/" + "é" * 300,
                                  "/x/" + "-." * 100])
def test_base_slug_is_always_a_safe_folder_name(path):
    s = base_slug(path)
    assert SLUG_RE.match(s), s
    assert s not in (".", "..")
    assert not s.startswith((".", "-"))
    assert "/" not in s and "\\" not in s
    assert 0 < len(s) <= 80


@pytest.mark.parametrize("path", ["/home/me/proj", "/srv/x/proj", "/", "/x/проект"])
def test_hashed_slug(path):
    s = hashed_slug(path)
    m = re.match(r"^(.*)-([0-9a-f]{8})$", s)
    assert m and m.group(1) == base_slug(path)
    assert SLUG_RE.match(s)
    assert hashed_slug(path) == s                       # stable
    assert hashed_slug(path + "2") != s


def _graph_file(layout, slug, project_path):
    atomic_write(layout.graph_file(slug), json.dumps(
        {"nodes": {}, "edges": {}, "_meta": {"project_path": project_path} if project_path else {}}).encode())


def test_slug_for_collision(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    assert layout.slug_for("/a/proj") == "proj"          # nothing on disk yet
    _graph_file(layout, "proj", "/a/proj")
    assert layout.slug_for("/a/proj") == "proj"          # its own graph
    other = layout.slug_for("/b/proj")
    assert other == hashed_slug("/b/proj")
    assert re.match(r"^proj-[0-9a-f]{8}$", other)
    _graph_file(layout, other, "/b/proj")
    assert layout.slug_for("/b/proj") == other           # found again after a restart
    assert layout.slug_for("/a/proj") == "proj"
    assert layout.project_slugs() == sorted(["proj", other])


def test_slug_for_uses_known_map(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    assert layout.slug_for("/b/proj", known={"proj": "/a/proj"}) == hashed_slug("/b/proj")
    assert layout.slug_for("/a/proj", known={"proj": "/a/proj"}) == "proj"


def test_slug_for_claims_plugin_graph_without_path(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    _graph_file(layout, "proj", None)
    assert layout.slug_for("/c/proj") == "proj"


def test_slug_for_sees_prev_only_graph(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    _graph_file(layout, "proj", "/a/proj")
    _graph_file(layout, "proj", "/a/proj")
    os.unlink(layout.graph_file("proj"))                 # only .prev survives
    assert layout.slug_for("/b/proj") == hashed_slug("/b/proj")


def test_layout_paths(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    assert layout.user_file == str(tmp_path / "root" / "user.json")
    assert layout.sessions_file == str(tmp_path / "root" / "sessions.json")
    assert layout.graph_file("s") == str(tmp_path / "root" / "projects" / "s" / "graph.json")


# ---------------------------------------------------------------- root lock

def test_root_lock(tmp_path):
    layout = Layout(str(tmp_path / "root"))
    first = RootLock(layout)
    first.acquire("port 1234")
    second = RootLock(Layout(str(tmp_path / "root")))
    with pytest.raises(Conflict) as exc:
        second.acquire("port 5678")
    assert str(layout.root) in exc.value.message
    assert "port 1234" in exc.value.message               # says who holds it
    assert exc.value.status == 409
    first.release()
    second.acquire("port 5678")                            # free again
    with pytest.raises(Conflict):
        RootLock(layout).acquire()
    second.release()
    assert mode(layout.lock_file) == 0o600


def test_root_lock_different_roots(tmp_path):
    a = RootLock(Layout(str(tmp_path / "a")))
    b = RootLock(Layout(str(tmp_path / "b")))
    a.acquire()
    b.acquire()
    a.release()
    b.release()


def test_root_lock_release_twice_is_harmless(tmp_path):
    lock = RootLock(Layout(str(tmp_path / "r")))
    lock.acquire()
    lock.release()
    lock.release()


def test_a_shared_root_is_not_re_permissioned(tmp_path, caplog):
    """--root pointing at a folder that holds other things (a home directory) keeps its mode,
    with a warning; a folder holding only kgd's files is tightened to 0700."""
    import logging

    from kg.memory.store import Settings, Store
    from kg.travel import team
    shared = tmp_path / "home"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    (shared / "notes.txt").write_text("mine")
    with caplog.at_level(logging.WARNING):
        team.install(Store(str(shared), Settings())).open().close()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert "readable by other users" in caplog.text
    own = tmp_path / "kg"
    own.mkdir(mode=0o755)
    os.chmod(own, 0o755)
    (own / "user.json").write_text('{"nodes": {}, "edges": {}, "_meta": {}}')
    team.install(Store(str(own), Settings())).open().close()
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700


# ---------------------------------------------------------------- helpers the file-reading commands share

def test_journal_paths(tmp_path):
    from kg.disk.layout import journal_path
    layout = Layout(str(tmp_path))
    assert journal_path("/r/user.json") == "/r/user.journal"
    assert journal_path("/r/odd") == "/r/odd.journal"
    assert layout.journal_file("app") == os.path.join(str(tmp_path), "projects", "app", "graph.journal")


def test_project_slugs_with_journal_only_projects(tmp_path):
    layout = Layout(str(tmp_path))
    for slug, files in {"file": {"graph.json": "{}"}, "prev": {"graph.json.prev": "{}"},
                        "journal": {"graph.journal": "{}\n"}, "empty-journal": {"graph.journal": ""},
                        "nothing": {}}.items():
        d = tmp_path / "projects" / slug
        d.mkdir(parents=True)
        for name, text in files.items():
            (d / name).write_text(text)
    assert layout.project_slugs() == ["file", "prev"]
    assert layout.project_slugs(with_journals=True) == ["file", "journal", "prev"]


def test_lock_state_reads_what_root_lock_writes(tmp_path):
    from kg.disk.files import lock_state
    layout = Layout(str(tmp_path / "root"))
    assert lock_state(layout) == (False, None, None, "")
    lock = RootLock(layout)
    lock.acquire()
    try:
        lock.update("port 8123")
        assert lock_state(layout)[:3] == (True, os.getpid(), 8123)
    finally:
        lock.release()
    assert lock_state(layout) == (False, None, None, "")  # released and emptied
