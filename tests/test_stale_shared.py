"""Contract section 12 across a team: the recorded states travel in `.kg/` (a node line's `files`),
so two clones sharing `.kg/` agree on what is stale; a teammate's re-put verifies it for both."""

import os
import shutil
import subprocess
import time

import pytest

from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import git_env

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class Clock:
    def __init__(self):
        self.t = 1_700_000_000.0

    def __call__(self):
        return self.t


class Person:
    def __init__(self, tmp, name, remote, env, clock):
        self.env, self.clock = env, clock
        self.repo = str(tmp / name / "app")
        self.git("clone", "-q", str(remote), self.repo, cwd=str(tmp))
        self.store = team.install(Store(str(tmp / name / "root"), Settings(), clock=clock)).open()
        self.session = None

    def git(self, *args, cwd=None):
        p = subprocess.run(["git", *args], cwd=cwd or self.repo, env=self.env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, "git %s: %s%s" % (" ".join(args), p.stdout, p.stderr)
        return p.stdout

    def write(self, rel, text):
        with open(os.path.join(self.repo, rel), "w") as f:
            f.write(text)

    def export(self):
        self.clock.t += 5
        self.store.fold_idle()
        self.git("add", "-A", ".")
        self.git("commit", "-qm", "kg", "--allow-empty")
        self.git("push", "-q", "origin", "HEAD:main")

    def pull(self):
        self.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        time.sleep(0.15)  # the beat after git settled (kg/travel/team.py)
        self.store.team.poll()
        self.clock.t += 5
        self.store.fold_idle()

    def edge_marks(self):
        self.store.staleness.refresh()
        got = self.store.read_graphs(self.session)["project"]["edges"]
        return {"%s->%s:%s" % (e["from"], e["to"], e["rel"]): e["stale"]["mark"] for e in got if "stale" in e}

    def marks(self):
        self.store.staleness.refresh()
        got = self.store.read_graphs(self.session)["project"]["nodes"]
        return {n["id"]: n["stale"]["mark"] for n in got if "stale" in n}


def test_two_clones_sharing_kg_agree_on_what_is_stale(tmp_path):
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], env=env, check=True)
    clock = Clock()
    alice = Person(tmp_path, "alice", remote, env, clock)
    alice.git("checkout", "-q", "-B", "main")
    alice.write("pool.py", "def acquire():\n    return 1\n")
    alice.write("cache.py", "def get():\n    return 2\n")
    alice.git("add", "-A")
    alice.git("commit", "-qm", "code")
    alice.session = alice.store.start_session(alice.repo)
    alice.store.put_node(alice.session, "project", "pool", "the pool blocks", touches=["pool.py#acquire"])
    alice.store.put_node(alice.session, "project", "cache", "the cache is lazy", touches=["cache.py"])
    alice.store.put_edge(alice.session, "project", "cache", "pool.py", "wraps")  # a file-path end
    alice.store.team.share(alice.repo)
    alice.export()
    line = open(os.path.join(alice.repo, ".kg", "nodes.jsonl")).read()
    assert '"files":{"commit":"' in line  # the states travel with the node
    # alice changes the pool's code after writing the node, and pushes the code
    alice.write("pool.py", "def acquire(timeout):\n    return 1\n")
    alice.git("commit", "-qam", "acquire takes a timeout")
    alice.git("push", "-q", "origin", "HEAD:main")
    bob = Person(tmp_path, "bob", remote, env, clock)
    bob.session = bob.store.start_session(bob.repo)
    assert bob.store.project_graph(os.path.realpath(bob.repo)).nodes["pool"]["_files"]["files"]
    want = {"pool": "stale: acquire in pool.py changed, 1 commit ago"}
    assert bob.marks() == want == alice.marks()
    edge = "stale: pool.py changed, 1 of 2 lines, 1 commit ago"
    assert bob.edge_marks() == {"cache->pool.py:wraps": edge} == alice.edge_marks()  # its state travelled too
    # bob checks it and confirms it as it is: current for both once alice pulls
    bob.store.put_node(bob.session, "project", "pool", None)
    assert bob.marks() == {}
    bob.export()
    alice.pull()
    assert alice.marks() == {}


def test_an_ill_formed_files_field_loses_nothing(tmp_path):
    from kg.core import kg_format

    line = ('{"changed":1.0,"created":1.0,"files":{"commit":"nope","files":{}},"gist":"g","id":"n",'
            '"notes":[],"touches":["a.py"]}\n').encode()
    records, problems = kg_format.parse(line, "node")[:2]
    assert list(records) == ["n"] and "files" not in records["n"]
