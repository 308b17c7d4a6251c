"""kg/travel/remote_repo.py SyncRepo.flush when another machine pushed since our last round: the
stop's push is refused, so it fetches, merges in the sync folder and pushes again, within its
budget (`kgd stop` once left the write behind with "2 changes left unpushed at stop (rejected")."""

import os
import shutil
import time

import pytest

from kg.memory import git_runner as gitrun
from kg.travel import remote_repo
from kg.travel.remote_repo import SyncRepo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture
def remote(tmp_path):
    r = tmp_path / "remote.git"
    gitrun.run(["init", "-q", "--bare", str(r)], str(tmp_path))
    return str(r)


def write(repo, rel, text):
    p = os.path.join(repo.folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "a", encoding="utf-8") as f:
        f.write(text)


def remote_file(remote, rel):
    code, out, _ = gitrun.run(["show", "main:" + rel], remote, check=False)
    return out if code == 0 else None


def two_machines(tmp_path, remote):
    a, b = SyncRepo(str(tmp_path / "a" / "sync"), remote), SyncRepo(str(tmp_path / "b" / "sync"), remote)
    a.round()
    write(b, "user/nodes.jsonl", '{"id":"from-b"}\n')
    b.round()  # b pushed after a's last round
    return a, b


def test_a_stop_after_the_other_machine_pushed_merges_and_pushes(tmp_path, remote):
    a, b = two_machines(tmp_path, remote)
    write(a, "user/nodes.jsonl", '{"id":"from-a"}\n')
    t0 = time.monotonic()
    assert a.flush(budget=10) is True
    assert time.monotonic() - t0 < 10
    held = remote_file(remote, "user/nodes.jsonl")
    assert '"from-a"' in held and '"from-b"' in held  # the union driver kept both machines' lines
    _, theirs = a.fetch()
    assert theirs == a.head()  # the remote holds the merge: nothing waits
    with open(os.path.join(a.folder, "user", "nodes.jsonl"), encoding="utf-8") as f:
        assert '"from-b"' in f.read()  # merged in the folder: the next start takes it into memory
    b.round()
    with open(os.path.join(b.folder, "user", "nodes.jsonl"), encoding="utf-8") as f:
        assert '"from-a"' in f.read()


def test_a_conflict_at_stop_is_committed_as_it_is_and_pushed(tmp_path, remote):
    a, b = SyncRepo(str(tmp_path / "a" / "sync"), remote), SyncRepo(str(tmp_path / "b" / "sync"), remote)
    write(a, "user/meta.txt", "one\n")  # not a .jsonl: no union driver, a real conflict
    a.round()
    b.round()
    with open(os.path.join(b.folder, "user", "meta.txt"), "w", encoding="utf-8") as f:
        f.write("b's\n")
    b.round()
    with open(os.path.join(a.folder, "user", "meta.txt"), "w", encoding="utf-8") as f:
        f.write("a's\n")
    assert a.flush(budget=10) is True
    assert not os.path.exists(os.path.join(a.folder, ".git", "MERGE_HEAD"))
    held = remote_file(remote, "user/meta.txt")
    assert "a's" in held and "b's" in held


def test_the_retry_keeps_to_the_budget(tmp_path, remote, monkeypatch):
    """Every git call of the stop is cut to what is left: a slow fetch after the refusal ends the
    stop at the budget, the commit kept for the next start."""
    a, _ = two_machines(tmp_path, remote)
    write(a, "user/nodes.jsonl", '{"id":"late"}\n')
    real = gitrun.run
    seen = []

    def slow(args, cwd, timeout=gitrun.DEFAULT_TIMEOUT, **kw):
        seen.append((args[0] if args else "", timeout))
        if args and args[0] == "fetch":  # a remote that has gone slow since the refusal
            time.sleep(timeout)
            raise gitrun.GitError("timeout", "git fetch took longer than %.1fs" % timeout)
        return real(args, cwd, timeout, **kw)

    monkeypatch.setattr(remote_repo.git_runner, "run", slow)
    t0 = time.monotonic()
    with pytest.raises(gitrun.GitError) as info:
        a.flush(budget=1.5)
    assert time.monotonic() - t0 < 2.5 and info.value.kind == "timeout"
    assert [name for name, _ in seen].count("push") == 1 and "fetch" in [name for name, _ in seen]
    assert all(t <= 1.5 for _, t in seen)
    assert a.deadline is None  # a later round has no stop's limit


def test_offline_at_stop_tries_no_merge(tmp_path, remote):
    a, _ = two_machines(tmp_path, remote)
    write(a, "user/nodes.jsonl", '{"id":"stranded"}\n')
    os.rename(remote, remote + ".away")
    t0 = time.monotonic()
    with pytest.raises(gitrun.GitError) as info:
        a.flush(budget=5)
    assert info.value.kind in ("no_remote", "offline") and time.monotonic() - t0 < 5
    assert not os.path.exists(os.path.join(a.folder, ".git", "MERGE_HEAD"))
