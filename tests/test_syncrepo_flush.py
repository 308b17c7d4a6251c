"""kg/travel/remote_repo.py SyncRepo.flush: what a clean stop does with the personal remote (`kgd stop`
once did not push what was committed locally). Real git, a bare remote in a temp folder."""

import os
import shutil
import time

import pytest

from kg.memory import git_runner as gitrun
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


def remote_main(remote):
    code, out, _ = gitrun.run(["rev-parse", "-q", "--verify", "refs/heads/main"], remote, check=False)
    return out.strip() if code == 0 else None


def test_flush_commits_and_pushes_what_waits(tmp_path, remote):
    a = SyncRepo(str(tmp_path / "a" / "sync"), remote)
    a.round()
    exported = []
    assert a.flush(export=lambda: (exported.append(1), write(a, "user/n.jsonl", '{"id":"x"}\n'))) is True
    assert exported and remote_main(remote) == a.head()
    assert a.flush() is False  # nothing waits: no push


def test_flush_after_a_cancelled_round_still_runs(tmp_path, remote):
    a = SyncRepo(str(tmp_path / "a" / "sync"), remote)
    a.round()
    a.cancel()  # the worker's round was cancelled by the stop
    write(a, "user/n.jsonl", '{"id":"y"}\n')
    assert a.flush() is True and remote_main(remote) == a.head()


def test_flush_pushes_nothing_when_the_remote_moved_past_ours(tmp_path, remote):
    a, b = SyncRepo(str(tmp_path / "a" / "sync"), remote), SyncRepo(str(tmp_path / "b" / "sync"), remote)
    a.round()
    b.round()
    write(b, "user/n.jsonl", '{"id":"z"}\n')
    b.round()
    a.fetch()  # a knows the remote's newer main, and has nothing of its own
    before = remote_main(remote)
    assert a.flush() is False and remote_main(remote) == before


def test_flush_offline_gives_up_within_its_budget(tmp_path, remote, monkeypatch):
    monkeypatch.setenv("GIT_SSH_COMMAND", "sleep 30 #")  # a remote that never answers
    a = SyncRepo(str(tmp_path / "a" / "sync"), "ssh://kgd-test.invalid/x.git")
    write(a, "user/n.jsonl", '{"id":"w"}\n')
    t0 = time.monotonic()
    with pytest.raises(gitrun.GitError) as info:
        a.flush(budget=1.5)
    assert time.monotonic() - t0 < 4 and info.value.kind == "timeout"
    assert a.head() is not None  # committed locally: the next start pushes it
