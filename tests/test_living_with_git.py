"""Contract section 9, "Living with git": the team's everyday git never refuses because of what kgd
wrote under `.kg/`, and nothing acknowledged is lost across it. Real git (a bare remote, real
clones), the in-process store with its beat running in a thread (the daemon's maintenance loop:
pickup and the export when writes pause) while an agent's thread keeps writing through the store's
operations. A teammate has pushed a change to a node this clone's agent is changing too, and a
new node; then this clone runs one git operation while its agent writes: git exits 0, every put
acknowledged is in memory and in `.kg/`, the teammate's knowledge arrived (where the operation
brings it), no tracked file under `.kg/` is left modified, and the teammate reads the same."""

import os
import shutil
import subprocess
import threading
import time

import pytest

from kg.memory.store import Settings, Store
from kg.travel import team

import kg_view
from helpers import git_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

FOLD_DELAY = 0.2  # seconds of no writes before .kg/ is written (the daemon's default is longer)


class Person:
    """A clone, its own storage root, a store with its beat in a thread, and one agent session."""

    def __init__(self, tmp, name, remote, env, clone_args=()):
        self.name, self.env = name, env
        self.repo = str(tmp / name / "app")
        self.git("clone", "-q", *clone_args, str(remote), self.repo, cwd=str(tmp))
        self.git("config", "user.name", name)
        self.git("config", "user.email", "%s@example.com" % name)
        self.store = team.install(Store(str(tmp / name / "root"), Settings(fold_delay=FOLD_DELAY))).open()
        self.session = self.store.start_session(self.repo)
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._beat_loop, daemon=True)
        self._beat.start()

    def _beat_loop(self):
        while not self._stop.is_set():
            try:
                self.store.fold_idle()
                self.store.team.poll()
            except Exception:  # a failed beat is retried, as the daemon's is; the asserts judge
                pass
            time.sleep(0.05)

    def close(self):
        self._stop.set()
        self._beat.join(10)
        self.store.close()

    def git(self, *args, cwd=None, check=True):
        p = subprocess.run(["git", *args], cwd=cwd or self.repo, env=self.env, capture_output=True, text=True,
                           timeout=60, check=False)
        if check and p.returncode:
            raise AssertionError("git %s exited %d: %s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
        return p

    @property
    def graph(self):
        return self.store.project_graph(os.path.realpath(self.repo))

    def put(self, nid, gist, notes=None):
        self.store.put_node(self.session, "project", nid, gist, notes=notes)

    def publish(self, msg):
        """`git add .kg && git commit` (the README's way to publish), then push."""
        self.settle()
        self.git("add", ".kg")
        if self.git("diff", "--cached", "--quiet", check=False).returncode:
            self.git("commit", "-q", "-m", msg)
        self.git("push", "-q", "origin", "HEAD:main")

    def settle(self, timeout=10.0):
        """Until memory's knowledge is all in `.kg/` (the export after the pause) and stays so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(FOLD_DELAY + 0.2)
            view = kg_view.live(self.repo)
            if all(nid in view and view[nid]["gist"] == n["gist"] for nid, n in self.graph.nodes.items()):
                return
        raise AssertionError("%s: .kg/ never caught up with memory" % self.name)

    def modified_tracked(self):
        """Tracked files git reports changed (kgd must never leave one under .kg/)."""
        out = self.git("status", "--porcelain", "--untracked-files=all").stdout.splitlines()
        return [line for line in out if not line.startswith("??") and ".kg/" in line]


class Agent:
    """This clone's agent, writing while git works: new nodes, and changes to a node the teammate
    changed too. Records every acknowledged put."""

    def __init__(self, person, prefix="w"):
        self.p, self.prefix = person, prefix
        self.acked = {}  # id -> the gist of its last acknowledged put
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self._stop.is_set():
            try:
                nid = "%s-%d" % (self.prefix, i)
                self.p.put(nid, "written while git works %d" % i)
                self.acked[nid] = "written while git works %d" % i
                if i % 3 == 0:  # its note once; later changes keep the notes as they are
                    gist = "%s's change %d to the hot node" % (self.p.name, i)
                    self.p.put("hot", gist, notes=["original note", "%s's note" % self.p.name] if i == 0 else None)
                    self.acked["hot"] = gist
            except Exception as exc:
                self.errors.append(exc)
            i += 1
            time.sleep(0.01)

    def __enter__(self):
        self._thread.start()
        time.sleep(0.3)  # some writes before git starts, some exported
        return self

    def __exit__(self, *exc):
        time.sleep(0.2)  # and some after
        self._stop.set()
        self._thread.join(10)
        assert not self.errors, self.errors[:3]


@pytest.fixture
def pair(tmp_path):
    """alice (the teammate) shared the project and pushed; bob cloned it. alice then changed the
    hot node, added one, and pushed again: bob has not pulled it yet."""
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], env=env, check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "clone", "-q", str(remote), str(seed)], env=env, check=True, capture_output=True)
    (seed / "app.py").write_text("print('app')\n")
    for args in (["checkout", "-q", "-B", "main"], ["add", "app.py"],
                 ["-c", "user.name=s", "-c", "user.email=s@l", "commit", "-q", "-m", "init"],
                 ["push", "-q", "origin", "main"]):
        subprocess.run(["git", *args], cwd=str(seed), env=env, check=True, capture_output=True)
    alice = Person(tmp_path, "alice", remote, env)
    people = [alice]
    try:
        alice.put("hot", "the original hot node", notes=["original note"])
        alice.put("kept", "a node nobody changes")
        alice.store.team.share(alice.repo)
        alice.publish("share memory")
        bob = Person(tmp_path, "bob", remote, env)
        people.append(bob)
        assert {"hot", "kept"} <= set(bob.graph.nodes)
        alice.put("hot", "alice's change to the hot node", notes=["original note", "alice's note"])
        alice.put("from-alice", "alice's new node")
        alice.publish("alice: hot and a new node")
        yield alice, bob
    finally:
        for p in people:
            p.close()


def check_nothing_lost(bob, agent, teammate_arrived=True, concurrent=True):
    bob.settle()
    g = bob.graph.nodes
    for nid, gist in agent.acked.items():
        assert nid in g, "acknowledged put of %r lost from memory" % nid
        assert g[nid]["gist"] == gist, (nid, g[nid]["gist"], gist)
    view = kg_view.live(bob.repo)
    for nid, gist in agent.acked.items():
        assert nid in view and view[nid]["gist"] == gist, "acknowledged put of %r not in .kg/" % nid
    assert bob.modified_tracked() == []
    assert kg_view.problems(bob.repo) == []
    if teammate_arrived:
        assert "from-alice" in g and "from-alice" in view
        # bob's later change wins the gist (concurrent with alice's: time decides), notes are the union
        assert g["hot"]["gist"] == agent.acked["hot"]
        if concurrent:  # bob's change was made without seeing alice's: the notes are the union
            assert {"alice's note", "bob's note"} <= set(g["hot"]["notes"])


def check_teammate_reads_the_same(alice, bob):
    bob.publish("bob: his knowledge")
    alice.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    alice.settle()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        a = {k: (n["gist"], sorted(n["notes"])) for k, n in alice.graph.nodes.items()}
        b = {k: (n["gist"], sorted(n["notes"])) for k, n in bob.graph.nodes.items()}
        if a == b:
            break
        time.sleep(0.2)
    assert a == b
    assert kg_view.records(alice.repo) == kg_view.records(bob.repo)


def bob_commits_code(bob, text="bob's code\n"):
    with open(os.path.join(bob.repo, "bob.py"), "w") as f:
        f.write(text)
    bob.git("add", "bob.py")
    bob.git("commit", "-q", "-m", "bob: code")


def test_pull_merge(pair):
    alice, bob = pair
    bob_commits_code(bob)  # a real merge, not a fast-forward
    with Agent(bob) as agent:
        bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_pull_rebase(pair):
    alice, bob = pair
    bob_commits_code(bob)
    with Agent(bob) as agent:
        bob.git("pull", "-q", "--rebase", "origin", "main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_checkout_and_switch(pair):
    alice, bob = pair
    bob.git("fetch", "-q", "origin")
    with Agent(bob) as agent:
        bob.git("switch", "-q", "-c", "feature")
        time.sleep(0.3)
        bob.git("checkout", "-q", "-b", "incoming", "origin/main")  # a branch holding alice's change
        time.sleep(0.3)
        bob.git("switch", "-q", "main")
        time.sleep(0.3)
        bob.git("checkout", "-q", "incoming")
    check_nothing_lost(bob, agent)  # knowledge not yet committed stays, like any untracked work
    bob.git("switch", "-q", "main")
    bob.git("merge", "-q", "--ff-only", "incoming")
    check_teammate_reads_the_same(alice, bob)


def test_merge(pair):
    alice, bob = pair
    bob_commits_code(bob)
    bob.git("fetch", "-q", "origin")
    with Agent(bob) as agent:
        bob.git("merge", "-q", "--no-edit", "origin/main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_rebase(pair):
    alice, bob = pair
    bob_commits_code(bob)
    bob_commits_code(bob, "bob's code, again\n")
    bob.git("fetch", "-q", "origin")
    with Agent(bob) as agent:
        bob.git("rebase", "-q", "origin/main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_cherry_pick(pair):
    alice, bob = pair
    bob.git("fetch", "-q", "origin")
    with Agent(bob) as agent:
        bob.git("cherry-pick", "origin/main")  # alice's commit of her knowledge
    check_nothing_lost(bob, agent)
    bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    check_teammate_reads_the_same(alice, bob)


@pytest.mark.parametrize("untracked", [False, True], ids=["stash", "stash-u"])
def test_stash_and_stash_pop(pair, untracked):
    alice, bob = pair
    with open(os.path.join(bob.repo, "app.py"), "a") as f:
        f.write("# bob's work in progress\n")
    with Agent(bob) as agent:
        time.sleep(0.5)  # some knowledge exported to bob's own file before the stash takes it
        bob.git("stash", "push", "-q", *(["--include-untracked"] if untracked else []))
        time.sleep(0.6)  # the beat sees the checkout without the stashed files
        bob.git("stash", "pop", "-q")
    check_nothing_lost(bob, agent, teammate_arrived=False)
    assert "# bob's work in progress" in open(os.path.join(bob.repo, "app.py")).read()
    bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def untracked(p):
    return set(p.git("ls-files", "--others", "--", ".kg").stdout.split())


def test_git_clean_brings_back_knowledge_not_yet_committed(pair):
    alice, bob = pair
    bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    for i in range(5):
        bob.put("uncommitted-%d" % i, "exported, not committed")
    bob.settle()
    cleaned = untracked(bob)
    assert cleaned  # bob's own file, untracked
    with Agent(bob) as agent:
        bob.git("clean", "-q", "-fdx")
    check_nothing_lost(bob, agent, concurrent=False)  # bob had pulled alice's change before writing
    view = kg_view.live(bob.repo)
    assert {"uncommitted-%d" % i for i in range(5)} <= set(view)  # written again from the storage root
    assert untracked(bob) and untracked(bob).isdisjoint(cleaned)  # under a new name
    check_teammate_reads_the_same(alice, bob)


def test_a_branch_switch_after_a_commit_is_not_a_loss(pair):
    """Knowledge committed on a branch leaves the view with it and is not written back into the
    branch checked out next (contract 9): it is git's, not lost."""
    alice, bob = pair
    bob.git("switch", "-q", "-c", "feature")
    bob.put("feature-only", "known on the feature branch")
    bob.settle()
    bob.git("add", ".kg")
    bob.git("commit", "-q", "-m", "feature knowledge")
    bob.git("switch", "-q", "main")  # at once: no beat between the commit and the switch
    deadline = time.monotonic() + 5
    while "feature-only" in bob.graph.nodes and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "feature-only" not in bob.graph.nodes
    time.sleep(1)
    assert "feature-only" not in kg_view.live(bob.repo) and bob.git("status", "--porcelain").stdout == ""
    bob.git("switch", "-q", "feature")
    deadline = time.monotonic() + 5
    while "feature-only" not in bob.graph.nodes and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "feature-only" in bob.graph.nodes


def test_kg_sync_says_what_came_from_the_repository_by_whom_and_what_left_with_the_branch(pair):
    """A pull's nodes are "from the repository ... by alice" in kg_sync, never another session's
    change alone; a branch switch that takes a node out of the view is "left with the branch",
    never "deleted" (contract 9)."""
    from kg.api import render

    alice, bob = pair
    reader = bob.store.start_session(bob.repo)
    bob.store.sync(reader)  # the mark: now
    bob.git("pull", "-q", "--no-rebase", "origin", "main")
    deadline = time.monotonic() + 10
    while "from-alice" not in bob.graph.nodes and time.monotonic() < deadline:
        time.sleep(0.1)
    r = bob.store.sync(reader)
    assert r["from_repository"]["nodes"] >= 2 and r["from_repository"]["by"].get("alice", 0) >= 1, r
    text = render.render_sync(r)
    assert "From the repository" in text and "by alice" in text
    node = bob.store.read_nodes(reader, ["from-alice"])["nodes"][0]
    assert node["by"] == "alice" and "(alice, " in render.render_nodes({"nodes": [node], "missing": []})
    bob.git("checkout", "-q", "HEAD~1")  # before alice's last commit: her new node is not on it
    deadline = time.monotonic() + 10
    while "from-alice" in bob.graph.nodes and time.monotonic() < deadline:
        time.sleep(0.1)
    r = bob.store.sync(reader)
    assert [d["id"] for d in r.get("left_nodes", [])] == ["from-alice"] and r["deleted_nodes"] == [], r
    text = render.render_sync(r)
    assert "left with the branch" in text and "deleted node from-alice" not in text
