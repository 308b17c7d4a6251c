"""A sync that could not write (git could not be asked which files it tracks) records no base
for what it did not write (contract section 4: an acknowledged write is never lost; section 9).

The crash bench lost acknowledged writes within seconds of a restart or of a commit, checkout,
merge or pull: the index had changed, the sync ran under the store's lock (a project's load, the
fold's export), so git could not be asked and nothing was written, yet phase 2 recorded the
base of every key memory meant to write. The next sync then saw memory equal to its base and the
key absent from the files, and dropped it as if it had left with a branch."""

import os
import subprocess

import pytest

from kg.travel.team_prepared import Prepared

from helpers import StoreEnv, git_env


@pytest.fixture
def env(tmp_path, monkeypatch):
    (tmp_path / "gitconfig").write_text("[user]\n\tname = Alice Example\n\temail = a@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    e = StoreEnv(tmp_path)
    yield e
    e.close_all()


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, env=git_env(os.path.dirname(root)), check=True,
                          capture_output=True, text=True)


def kg_text(root):
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, ".kg")):
        out += [open(os.path.join(dirpath, n), encoding="utf-8").read() for n in names if n.endswith(".jsonl")]
    return "".join(out)


def test_a_sync_that_cannot_ask_git_writes_nothing_and_loses_nothing(env):
    root = env.project(git=False)
    git(root, "init", "-q", "-b", "main")
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "a", "before sharing")
    s.team.share(root)
    git(root, "add", ".kg")
    git(root, "commit", "-q", "-m", "knowledge")  # the index changed: git must be asked again
    env.advance(1)
    s.put_node(sess, "project", "b", "acknowledged after the commit")
    s.put_node(sess, "project", "a", "changed after the commit")
    g = s.project_graph(os.path.realpath(root))
    with s.lock:  # as at a project's load or the fold's export: git may not run here
        d = next(d for d in s.registry.durables() if d.graph is g)
        d.shared.sync(s)
    assert "acknowledged after the commit" not in kg_text(root)  # not written: git was not asked
    d.shared.sync(s)  # the next beat, git free to run
    assert g.nodes["b"]["gist"] == "acknowledged after the commit"
    assert g.nodes["a"]["gist"] == "changed after the commit"
    text = kg_text(root)
    assert "acknowledged after the commit" in text and "changed after the commit" in text


def test_a_write_journalled_before_a_crash_survives_the_restart_and_a_commit(env, monkeypatch):
    root = env.project(git=False)
    git(root, "init", "-q", "-b", "main")
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "a", "before sharing")
    s.team.share(root)
    env.advance(1)
    s.put_node(sess, "project", "b", "journalled, not exported")
    s.crashed = True  # killed: no fold, no export
    for d in s.registry.durables():
        d.journal.close()
    s.root_lock.release()
    git(root, "add", ".kg")
    git(root, "commit", "-q", "-m", "knowledge")  # the clone's recovery: the index changed meanwhile
    # The load's read ahead (kg/travel/team_prepared.py) asked git before the lock; a checkout's
    # index can change between it and the load, and then the load's sync may not ask git: as here.
    monkeypatch.setattr(Prepared, "take", lambda self, durable: None)
    s2 = env.open()
    sess = s2.start_session(root)
    g = s2.project_graph(os.path.realpath(root))
    for d in s2.registry.durables():
        if d.graph is g:
            d.shared.sync(s2)
            d.shared.sync(s2)
    assert g.nodes["b"]["gist"] == "journalled, not exported"
    assert "journalled, not exported" in kg_text(root)
