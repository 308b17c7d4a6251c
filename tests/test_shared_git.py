"""Random histories through the real store: two storage roots (two people), two clones of one bare
remote, random puts and deletes through the store's operations, exports when writes pause, commits,
pulls with union merges, pickups on the beat. No acknowledged node is lost unless a later delete
removed it; both people end with the same knowledge and the same files (every file under .kg/, read
as one view: tests/kg_view.py)."""

import os
import random
import shutil
import subprocess
import time

import pytest

from kg.core.errors import KgError
from kg.memory.store import Settings, Store
from kg.travel import team

import kg_view
from helpers import git_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

IDS = ["cache", "Cache", "db", "api", "auth", "queue"]


class Person:
    def __init__(self, tmp, name, remote, env, clock):
        self.env, self.clock = env, clock
        self.repo = str(tmp / name / "app")
        self.git("clone", "-q", str(remote), self.repo, cwd=str(tmp))
        self.store = team.install(Store(str(tmp / name / "root"), Settings(), clock=clock)).open()
        self.session = None

    def git(self, *args, cwd=None, check=True):
        p = subprocess.run(["git", *args], cwd=cwd or self.repo, env=self.env, capture_output=True, text=True,
                           timeout=60, check=False)
        if check and p.returncode:
            raise AssertionError("git %s: %s%s" % (" ".join(args), p.stdout, p.stderr))
        return p

    def open(self):
        self.session = self.store.start_session(self.repo)

    @property
    def graph(self):
        return self.store.project_graph(os.path.realpath(self.repo))

    def pause(self):
        self.clock.advance(5)
        self.store.fold_idle()

    def commit(self):
        self.git("add", "-A", ".")
        if self.git("diff", "--cached", "--quiet", check=False).returncode:
            self.git("commit", "-q", "-m", "kg")

    def pull(self):
        self.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        time.sleep(0.15)  # the next beat comes after git has settled (kg/travel/team.py waits SETTLE_S)
        self.store.team.poll()
        self.pause()
        self.commit()

    def push(self):
        for _ in range(5):
            if self.git("push", "-q", "origin", "main", check=False).returncode == 0:
                return
            self.pull()
        raise AssertionError("push kept failing")

    def content(self):
        return {nid: (n["gist"], tuple(n["notes"])) for nid, n in self.graph.nodes.items()}


class Clock:
    def __init__(self):
        self.t = 1_700_000_000.0

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


def random_ops(rnd, p, clock, puts, deletes):
    g = p.graph
    for _ in range(rnd.randint(1, 4)):
        clock.advance(1)
        roll = rnd.random()
        if roll < 0.2 and g.nodes:
            nid = rnd.choice(sorted(g.nodes))
            p.store.delete_node(p.session, nid, "project")
            deletes.setdefault(nid, []).append(clock.t)
        elif roll < 0.35 and len(g.nodes) >= 2:
            a, b = rnd.sample(sorted(g.nodes), 2)
            try:
                who = os.path.basename(os.path.dirname(p.store.layout.root))
                p.store.put_edge(p.session, "project", a, b, "uses", notes=["by %s" % who])
            except KgError:
                pass
        else:
            nid = rnd.choice(IDS)
            gist = "%s at %s" % (nid, clock.t)
            notes = ["note %s" % clock.t]
            p.store.put_node(p.session, "project", nid, gist, notes=notes)
            puts.setdefault(nid, []).append((clock.t, gist, notes))


@pytest.mark.parametrize("seed", range(4))
def test_two_people_random_histories_through_the_store(tmp_path, seed):
    rnd = random.Random(seed)
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], env=env, check=True)
    clock = Clock()
    alice = Person(tmp_path, "alice", remote, env, clock)
    alice.git("checkout", "-q", "-B", "main")
    alice.open()
    alice.store.put_node(alice.session, "project", "seed", "the first shared node")
    alice.store.team.share(alice.repo)
    alice.commit()
    alice.git("push", "-q", "origin", "main")
    bob = Person(tmp_path, "bob", remote, env, clock)
    bob.open()
    assert "seed" in bob.graph.nodes  # the clone's .kg/ is loaded with no command
    puts, deletes = {"seed": [(clock.t, "the first shared node", [])]}, {}
    people = [alice, bob]
    try:
        for _ in range(10):
            rnd.shuffle(people)
            for p in people:
                random_ops(rnd, p, clock, puts, deletes)
                p.pause()
                p.commit()
                if rnd.random() < 0.7:
                    p.pull()
                if rnd.random() < 0.8:
                    p.push()
        for p in people + people:
            p.pause()
            p.commit()
            p.pull()
            p.push()
        for p in people:
            p.pull()
            assert p.git("status", "--porcelain").stdout == ""
        assert alice.content() == bob.content()
        # The same files, byte for byte (one commit, clean trees), and they hold what memory holds.
        assert kg_view.files(alice.repo) == kg_view.files(bob.repo)
        assert set(kg_view.live(alice.repo)) == set(alice.graph.nodes)
        assert set(kg_view.live(alice.repo, "edge")) == set(alice.graph.edges)
        assert set(alice.graph.edges) == set(bob.graph.edges)
        final = alice.graph.nodes
        for nid, history in puts.items():
            t, gist, notes = max(history)
            if t >= max(deletes.get(nid, [float("-inf")])):
                assert nid in final, "acknowledged put of %r at %s lost" % (nid, t)
                assert final[nid]["gist"] == gist and set(notes) <= set(final[nid]["notes"])
            else:
                assert nid not in final
    finally:
        for p in (alice, bob):
            p.store.close()
