"""The crash bench (bench/crash.py) in the test suite: its checks can fail (a torn file, a
lost committed line, a broken repository are each caught), a short run goes through every step,
and what it found is kept here as a deterministic case (contract sections 4 and 9)."""

import os
import subprocess
import sys
import time

import pytest

from helpers import REPO, Daemon, clean_env, git_env, run_kgd

sys.path.insert(0, os.path.join(REPO, "bench"))
import crash  # noqa: E402

GIT = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True, env=clean_env()).returncode != 0,
                         reason="git is not installed")
NODE = b'{"changed":1.0,"created":1.0,"gist":"g","id":"a","notes":[],"touches":[]}\n'
EDGE = b'{"changed":1.0,"from":"a","notes":[],"rel":"uses","to":"src/x.py"}\n'


# ---------------------------------------------------------------- the bench's own checks

@pytest.mark.parametrize("data, bad", [
    (NODE + EDGE, 0),
    (b"", 0),
    (b"<<<<<<< HEAD\n" + NODE + b"=======\n" + EDGE + b">>>>>>> theirs\n", 0),  # markers are git's, read past
    (NODE + EDGE[:-20], 2),  # torn: no final newline, and its last line is no record
    (NODE + b'{"id":"b","gist":\n', 1),
    (NODE + b"\xff\xfe\n", 1),
    (b'{"id":"b","read":null,"since":1.0,"state":"active"}\n', 0),  # a personal.jsonl line
])
def test_split_lines_reads_every_line_with_kgds_parsers(data, bad):
    problems = []
    nodes, edges = crash.split_lines(data, "f.jsonl", problems)
    assert len(problems) == bad, problems
    if not bad and data.count(b"\n") > 2:
        assert (len(nodes), len(edges)) == (1, 1)


def _repo(tmp_path):
    env = git_env(tmp_path)
    g = crash.Git(str(tmp_path / "app"), env)
    os.makedirs(g.path)
    g("init", "-q", "-b", "main")
    os.makedirs(os.path.join(g.path, ".kg", "changes"))
    with open(os.path.join(g.path, ".kg", "nodes.jsonl"), "wb") as f:
        f.write(NODE)
    g("add", ".kg")
    g("commit", "-q", "-m", "kg")
    return g


@GIT
def test_check_kg_catches_a_lost_committed_line_and_a_half_written_file_in_any_layout(tmp_path):
    g = _repo(tmp_path)
    problems = []
    assert set(crash.check_kg(g, problems)) == {"a"} and problems == []
    # A per-clone file under a folder of kgd's choosing is read too, and so is its torn tail.
    with open(os.path.join(g.path, ".kg", "changes", "c1-1.nodes.jsonl"), "wb") as f:
        f.write(NODE.replace(b'"a"', b'"b"')[:-9])
    with open(os.path.join(g.path, ".kg", "nodes.jsonl"), "wb") as f:
        f.write(b"")
    crash.check_kg(g, problems)
    assert any("missing from the work tree" in p for p in problems), problems
    assert any("no final newline" in p for p in problems), problems


@GIT
def test_fsck_catches_a_broken_repository(tmp_path):
    g = _repo(tmp_path)
    assert crash.fsck(g.path) == []
    objects = os.path.join(g.path, ".git", "objects")
    loose = [os.path.join(d, n) for d, _, names in os.walk(objects) for n in names if len(n) == 38]
    os.chmod(loose[0], 0o600)
    with open(loose[0], "wb") as f:
        f.write(b"not zlib")
    assert crash.fsck(g.path), "git fsck found nothing wrong with a broken object"


def test_same_allows_merged_notes_in_a_shared_project_only():
    want = ("shared", "g", ("a",), ("src/x.py",))
    assert crash.same(want, ("shared", "g", ("a", "b"), ("src/x.py",)))
    assert not crash.same(want, ("shared", "g", ("b",), ("src/x.py",)))
    assert not crash.same(("user", "g", ("a",), ()), ("user", "g", ("a", "b"), ()))
    assert not crash.same(want, None) and crash.same(None, None)
    edge = ("a", "b", "uses", ("n",))
    assert crash.same(edge, ("a", "b", "uses", ("n", "m")), edge=True, shared=True)
    assert not crash.same(edge, ("a", "b", "uses", ("n", "m")), edge=True, shared=False)


# ---------------------------------------------------------------- a short run

@GIT
@pytest.mark.e2e
@pytest.mark.slow
def test_a_short_run_goes_through_every_step_and_reports():
    """Two rounds end to end: set-up, writers, the clone and the teammate, kills, checks, report.
    Whether they lose nothing is the bench's exit code (`python3 bench/crash.py`); the losses it
    finds today are kept below as a deterministic case."""
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "crash.py"), "--rounds", "2", "--seed", "34"],
                       capture_output=True, text=True, timeout=600, env=clean_env(), cwd=REPO)
    out = p.stdout + p.stderr
    assert p.returncode in (0, 1), out[-3000:]
    assert "the bench itself stopped" not in out and "Traceback" not in out, out[-3000:]
    assert "rounds: 2 in" in out and "kinds of moment the kills hit" in out, out[-3000:]
    acked = int(out.split("acknowledged writes: ", 1)[1].split()[0])
    assert acked > 100, out[-2000:]
    if p.returncode:
        assert "replay with: python3 bench/crash.py --rounds 2 --seed 34" in out


# ---------------------------------------------------------------- found by the bench

@GIT
@pytest.mark.e2e
@pytest.mark.slow
def test_personal_remote_keeps_writes_acknowledged_just_before_a_sigkill(tmp_path):
    remote = str(tmp_path / "personal.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True, env=clean_env())
    env = {"KG_SYNC_INTERVAL": "3600"}
    d = Daemon(tmp_path / "root", env=env).start()
    try:
        code, out, err, _ = run_kgd("sync", "--remote", remote, "--root", d.root, "--port", d.port, env=env,
                                    timeout=120)
        assert code == 0, out + err
        for nid, gist, notes in (("x", "first", ["a"]), ("y", "to be deleted", [])):
            assert d.json("PUT", "/api/nodes/user/" + nid, {"gist": gist, "notes": notes})[0] == 200
        st, body = d.json("POST", "/api/remote", {"wait": 60})
        assert st == 200 and body["completed"], body
        assert d.json("PUT", "/api/nodes/user/x", {"gist": "second", "notes": ["b"]})[0] == 200
        assert d.json("DELETE", "/api/nodes/user/y")[0] == 200
        d.kill()  # at once: the journal holds both writes, the graph file and ROOT/sync do not yet
        d.start()
        st, body = d.json("POST", "/api/remote", {"wait": 60})
        assert st == 200 and body["completed"], body
        st, g = d.json("GET", "/api/graph")
        got = {n["id"]: (n["gist"], n["notes"]) for n in g["user"]["nodes"]}
        assert got == {"x": ("second", ["b"])}, got
    finally:
        d.stop()


@GIT
@pytest.mark.e2e
@pytest.mark.slow
def test_a_clean_stop_keeps_them(tmp_path):
    """The same steps with a clean stop instead of the kill: the control of the case above."""
    remote = str(tmp_path / "personal.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True, env=clean_env())
    env = {"KG_SYNC_INTERVAL": "3600"}
    d = Daemon(tmp_path / "root", env=env).start()
    try:
        code, out, err, _ = run_kgd("sync", "--remote", remote, "--root", d.root, "--port", d.port, env=env,
                                    timeout=120)
        assert code == 0, out + err
        for nid, gist, notes in (("x", "first", ["a"]), ("y", "to be deleted", [])):
            assert d.json("PUT", "/api/nodes/user/" + nid, {"gist": gist, "notes": notes})[0] == 200
        assert d.json("POST", "/api/remote", {"wait": 60})[1]["completed"]
        assert d.json("PUT", "/api/nodes/user/x", {"gist": "second", "notes": ["b"]})[0] == 200
        assert d.json("DELETE", "/api/nodes/user/y")[0] == 200
        time.sleep(0.1)
        d.stop()
        d.start()
        assert d.json("POST", "/api/remote", {"wait": 60})[1]["completed"]
        st, g = d.json("GET", "/api/graph")
        assert {n["id"]: (n["gist"], n["notes"]) for n in g["user"]["nodes"]} == {"x": ("second", ["b"])}
    finally:
        d.stop()



# ---------------------------------------------------------------- found by the 100-round run (seed 3434)

class _Died(BaseException):
    """The process dies here (no except Exception in kgd catches it)."""


@GIT
def test_a_delete_acknowledged_while_a_pass_writes_the_folder_survives_a_kill_before_its_fold(tmp_path, monkeypatch):
    """bench/crash.py --rounds 100 --seed 3434 at 7396aab, round 57: a node deleted (acknowledged) while
    a personal-remote pass wrote ROOT/sync, the kill before the pass folded its new base; the next
    pass took the node back from the folder as another machine's. Kept as a strict xfail until
    eaaff12 (the pass folds its base before it writes the folder)."""
    from kg.core import kg_format
    from kg.memory import git_runner
    from kg.memory.store import Settings, Store
    from kg.travel import remote_files, team
    from kg.travel.remote_bridge import Bridge
    from kg.travel.remote_repo import SyncRepo

    remote = str(tmp_path / "remote.git")
    git_runner.run(["init", "-q", "--bare", remote], str(tmp_path))
    root = str(tmp_path / "a")

    def machine():
        store = team.install(Store(root, Settings(max_tokens=10 ** 6))).open()
        folder = os.path.join(root, "sync")
        bridge = Bridge(store, folder)
        repo = SyncRepo(folder, remote)
        return store, bridge, lambda: repo.round(export=lambda: bridge.export(full=True), pickup=bridge.pickup)

    store, bridge, round_ = machine()
    store.put_node(None, "user", "x", "kept", None)
    round_()
    store.put_node(None, "user", "y", "written, then deleted", None)
    real_write = remote_files.SyncFiles.write

    def write_then_die(self, path, data, records, stamps):
        real_write(self, path, data, records, stamps)
        if path.endswith(os.path.join("user", kg_format.NODES_FILE)) and b'"y"' in data:
            assert not store.lock._is_owned()  # the pass writes the folder outside the store's lock
            store.delete_node(None, "y", "user")  # a request served meanwhile: journalled, acknowledged
            raise _Died()
    monkeypatch.setattr(remote_files.SyncFiles, "write", write_then_die)
    with pytest.raises(_Died):
        round_()
    monkeypatch.setattr(remote_files.SyncFiles, "write", real_write)
    for j in store.journals.values():  # the process is gone: nothing folded, only the OS lock released
        j.close()
    store.root_lock.release()

    store, bridge, round_ = machine()  # the restart: graph file + journal
    try:
        assert set(store.graph("user").nodes) == {"x"}
        round_()
        assert set(store.graph("user").nodes) == {"x"}, "the acknowledged delete of y was undone"
    finally:
        store.close()
