"""Contract section 9, "Living with git", the faults: `git gc`, a rebase stopped by a conflict in
code files while the agent writes, a detached HEAD, a shallow clone, and the file names a
case-insensitive file system sees. The same real clones, stores and writing agent as
tests/test_living_with_git.py: git does what it would do without kgd, nothing acknowledged is lost,
no tracked file under `.kg/` is left modified."""

import os
import subprocess
import time

import test_living_with_git as lwg
from test_living_with_git import Agent, Person, check_nothing_lost, check_teammate_reads_the_same

import kg_view

pytestmark = lwg.pytestmark
pair = lwg.pair  # alice pushed a change to "hot" and a new node; bob has not pulled


def test_git_gc_while_the_agent_writes(pair):
    alice, bob = pair
    bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    with Agent(bob) as agent:
        bob.git("gc", "-q", "--aggressive", "--prune=now")
    check_nothing_lost(bob, agent, concurrent=False)
    check_teammate_reads_the_same(alice, bob)


def test_a_rebase_stopped_by_a_conflict_in_code(pair):
    """git stops on app.py (both changed it); kgd's files are not part of the conflict, the agent
    keeps writing through it, and the rebase continues once the person resolves the code."""
    alice, bob = pair
    alice.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    with open(os.path.join(alice.repo, "app.py"), "w") as f:
        f.write("print('alice')\n")
    alice.git("commit", "-q", "-am", "alice: app")
    alice.git("push", "-q", "origin", "HEAD:main")
    with open(os.path.join(bob.repo, "app.py"), "w") as f:
        f.write("print('bob')\n")
    bob.git("commit", "-q", "-am", "bob: app")
    with Agent(bob) as agent:
        stopped = bob.git("pull", "--rebase", "origin", "main", check=False)
        assert stopped.returncode != 0  # the code conflict: git's, not kgd's
        conflicted = bob.git("diff", "--name-only", "--diff-filter=U").stdout.split()
        assert conflicted == ["app.py"], conflicted
        time.sleep(0.6)  # the agent writes, and the beat runs, in the middle of the rebase
        with open(os.path.join(bob.repo, "app.py"), "w") as f:
            f.write("print('alice and bob')\n")
        bob.git("add", "app.py")
        done = subprocess.run(["git", "-c", "core.editor=true", "rebase", "--continue"], cwd=bob.repo,
                              env=bob.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_a_detached_head(pair):
    alice, bob = pair
    bob.git("fetch", "-q", "origin")
    with Agent(bob) as agent:
        bob.git("checkout", "-q", "--detach", "origin/main")  # alice's knowledge, no branch
        time.sleep(0.6)
    check_nothing_lost(bob, agent)
    bob.git("switch", "-q", "main")
    bob.git("merge", "-q", "--ff-only", "origin/main")
    check_nothing_lost(bob, agent)
    check_teammate_reads_the_same(alice, bob)


def test_a_shallow_clone_reads_and_writes_the_teams_memory(pair, tmp_path):
    """A CI-style `--depth 1` clone: it cannot see the root commit (its identity is the origin's
    URL, kg/memory/repo_id.py), but the team's knowledge is in the checkout, and its own writes go
    where git never has to overwrite them."""
    alice, bob = pair
    remote = alice.git("remote", "get-url", "origin").stdout.strip()
    carol = Person(tmp_path, "carol", "file://" + remote, alice.env, clone_args=("--depth", "1"))
    assert carol.git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    try:
        assert {"hot", "kept", "from-alice"} <= set(carol.graph.nodes)
        with Agent(carol, prefix="c") as agent:
            carol.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        carol.settle()
        for nid, gist in agent.acked.items():
            assert carol.graph.nodes[nid]["gist"] == gist
            assert kg_view.live(carol.repo)[nid]["gist"] == gist
        assert carol.modified_tracked() == []
        carol.publish("carol: from a shallow clone")
        alice.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not set(agent.acked) <= set(alice.graph.nodes):
            time.sleep(0.2)
        assert set(agent.acked) <= set(alice.graph.nodes)
    finally:
        carol.close()


def test_the_names_kgd_writes_under_kg_differ_on_a_case_insensitive_file_system(pair):
    """On macOS and Windows two names that differ only in case are one file. The names kgd
    draws under `.kg/changes/` (CLONE-N.KIND.jsonl, CLONE lower-case hex) are lower-case, and with
    the fixed names (README.md, nodes.jsonl, ...) no two fold into one there: read from what a real
    clone wrote."""
    alice, bob = pair
    bob.git("pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
    for round_ in range(3):  # three commits: three numbers of this clone's files
        bob.put("case-%d" % round_, "a node of round %d" % round_)
        bob.publish("bob: round %d" % round_)
    names = []
    for folder, _, files in os.walk(os.path.join(bob.repo, ".kg")):
        names += [os.path.relpath(os.path.join(folder, f), bob.repo) for f in files]
    drawn = [n for n in names if n.startswith(os.path.join(".kg", "changes"))]
    assert drawn and all(n == n.lower() for n in drawn), names
    assert len({n.casefold() for n in names}) == len(names)
