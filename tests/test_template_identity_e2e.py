"""Two machines across the upgrade of the identity rule (kg/memory/repo_id.py, identities.py):
a machine still on identities by root commit alone keeps writing the personal remote's old folder,
an upgraded one meets it there, a template's other clone does not; a real daemon upgrading a
storage root the old rule wrote, and a real daemon meeting an old machine through a bare remote."""

import os
import subprocess

import pytest
from test_template_identity import (
    HTTPS,
    OTHER,
    SCP,
    SSH,
    I,
    clone,
    ids,
    index,
    make_template,
    old_root,
    old_rule,
    open_store,
    put,
    root_of,
)

from kg.memory import git_runner, repo_id
from kg.travel.remote_bridge import Bridge
from kg.travel.remote_repo import SyncRepo

from helpers import Daemon, clean_env, run_kgd

pytestmark = pytest.mark.skipif(git_runner.available() is False, reason="git is not installed")


def git(cwd, *args):
    return git_runner.output(list(args), str(cwd))


@pytest.fixture
def template_clones(tmp_path):
    t = make_template(tmp_path / "template")
    return (t, clone(t, tmp_path / "src" / "app", HTTPS), clone(t, tmp_path / "work" / "app", OTHER))


class InProcessMachine:
    """A storage root with its personal remote, the sync round run by hand (as tests/test_sync_bridge.py)."""

    def __init__(self, root, remote):
        self.store = open_store(root)
        self.folder = os.path.join(str(root), "sync")
        self.bridge = Bridge(self.store, self.folder)
        self.repo = SyncRepo(self.folder, remote)

    def sync(self):
        return self.repo.round(export=lambda: self.bridge.export(full=True), pickup=self.bridge.pickup)


def test_machines_meet_in_the_personal_remote_across_the_upgrade(tmp_path, monkeypatch, template_clones):
    t, p, q = template_clones
    remote = str(tmp_path / "remote.git")
    git(tmp_path, "init", "-q", "--bare", remote)
    with monkeypatch.context() as m:  # machine A, not upgraded yet
        m.setattr(repo_id, "project_identity", old_rule)
        a = InProcessMachine(tmp_path / "a", remote)
        put(a.store, p, "from-a")
        a.sync()
        assert os.path.isdir(os.path.join(a.folder, "projects", "git-" + root_of(p)))
        b = InProcessMachine(tmp_path / "b", remote)  # machine B, upgraded
        m.undo()
        pb = clone(t, tmp_path / "b-src" / "app", SSH)  # P's repository on B, another path
        b.sync()
        put(b.store, pb, "from-b")
        b.sync()
        assert ids(b.store, pb) == {"from-a", "from-b"}
        qb = clone(t, tmp_path / "b-src" / "other", OTHER)
        assert ids(b.store, qb) == set()  # the template's other clone does not meet P's knowledge ...
        put(b.store, qb, "from-qb")
        b.sync()
        assert ids(b.store, qb) == {"from-qb"}  # ... not even through the old folder
        m.setattr(repo_id, "project_identity", old_rule)
        put(a.store, p, "a-later")  # A, still not upgraded, goes on writing the old folder
        a.sync()
        m.undo()
        b.sync()
        assert ids(b.store, pb) == {"from-a", "from-b", "a-later"}
        assert ids(b.store, qb) == {"from-qb"}
    a.store.close()
    a = InProcessMachine(tmp_path / "a", remote)  # A upgraded: its graph re-identified, it meets B's
    try:
        assert ids(a.store, p) == {"from-a", "a-later"}
        a.sync()
        assert ids(a.store, p) == {"from-a", "from-b", "a-later"}
    finally:
        a.store.close()
        b.store.close()


# ---------------------------------------------------------------- end to end: a real daemon


ENV = {"KG_SYNC_INTERVAL": "3600", "KG_MAX_TOKENS": "1000000"}


def daemon_ids(d, path):
    st, body = d.json("GET", "/api/graph?project_path=%s" % path)
    assert st == 200, body
    return {n["id"] for n in (body["project"] or {}).get("nodes", [])}


def daemon_put(d, path, nid):
    st, out = d.json("PUT", "/api/nodes/project/%s" % nid, {"gist": "written by the daemon", "project_path": str(path)})
    assert st == 200, out


@pytest.mark.e2e
def test_daemon_upgrades_a_root_the_old_rule_wrote(tmp_path, monkeypatch, template_clones):
    t, p, q = template_clones
    p2 = clone(t, tmp_path / "p2", SCP)
    root = old_root(tmp_path, monkeypatch, [(p, "from-p"), (q, "from-q")])
    d = Daemon(root, env=ENV).start()
    try:
        assert daemon_ids(d, q) == set()  # the other clone opens first: its own, empty graph
        assert daemon_ids(d, p2) == {"from-p", "from-q"}  # a clone of P's repository: P's old graph
        daemon_put(d, q, "q-new")
        daemon_put(d, p, "p-new")
        assert daemon_ids(d, p2) == {"from-p", "from-q", "p-new"} and daemon_ids(d, q) == {"q-new"}
    finally:
        assert d.stop() == 0
    d = Daemon(root, env=ENV).start()
    try:
        assert daemon_ids(d, p) == {"from-p", "from-q", "p-new"} and daemon_ids(d, q) == {"q-new"}
    finally:
        d.stop()
    rid = root_of(p)
    assert sorted(index(root)) == sorted([I(rid, HTTPS, str(p)), I(rid, OTHER, str(q))])
    assert len(os.listdir(str(root / "projects"))) == 2


@pytest.mark.e2e
def test_daemon_meets_an_old_machine_in_the_personal_remote(tmp_path, monkeypatch, template_clones):
    t, p, _ = template_clones
    remote = str(tmp_path / "remote.git")
    git(tmp_path, "init", "-q", "--bare", remote)
    with monkeypatch.context() as m:  # machine A, the previous rule
        m.setattr(repo_id, "project_identity", old_rule)
        a = InProcessMachine(tmp_path / "a", remote)
        try:
            put(a.store, p, "from-a")
            a.sync()
        finally:
            a.store.close()
    pb = clone(t, tmp_path / "b-src" / "app", HTTPS)
    d = Daemon(tmp_path / "b", env=ENV).start()
    try:
        code, out, err, _ = run_kgd("sync", "--remote", remote, "--root", tmp_path / "b", "--port", d.port,
                                    env=ENV, timeout=180)
        assert code == 0, out + err
        daemon_put(d, pb, "from-b")
        st, body = d.json("POST", "/api/remote", {"wait": 120})
        assert st == 200 and body["completed"], body
        assert daemon_ids(d, pb) == {"from-a", "from-b"}
    finally:
        d.stop()
    listing = subprocess.run(["git", "--git-dir", remote, "ls-tree", "--name-only", "main", "projects/"],
                             capture_output=True, text=True, env=clean_env(), timeout=60).stdout.split()
    assert sorted(listing) == sorted(["projects/git-" + root_of(p), "projects/" + I(root_of(p), HTTPS)])
