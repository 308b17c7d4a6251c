"""Contract section 9, "Clocks do not decide": an edit made after seeing a version wins over it
whatever the clocks say; only edits made without seeing each other are ordered by time (then by
content); a time in the future counts as now. Random histories on three clones, one clock 30 days
ahead and one an hour behind, with kgd's own records and merge rule (kg_format, reconcile), and
the same through real stores and real git."""

import os
import random
import shutil
import subprocess

import pytest

from kg.core import kg_format
from kg.core.reconcile import past_seen
from kg.memory.store import Settings, Store
from kg.travel import team

import kg_view
from helpers import git_env

DAY = 86400.0
T0 = 1_700_000_000.0
SKEW = {"a": 0.0, "b": -3600.0, "c": 30 * DAY}  # c's clock runs 30 days ahead, b's an hour behind
IDS = ["x", "y", "z"]


class Clone:
    """One clone's knowledge as records, written the way kgd writes them: a change made here is
    this clone's (team_sync._own_record: its vector gains this clone's entry at its version)."""

    def __init__(self, name):
        self.name, self.view, self.objs = name, {}, {}

    def edit(self, nid, gist, now):
        old = self.objs.get(nid)
        seen = self.view.get(nid)
        if old is None:
            obj = {"id": nid, "gist": gist, "notes": [], "touches": [], "_created_ts": now, "_write_ts": now, "_v": 1}
        else:
            obj = dict(old, gist=gist, _write_ts=now, _v=(old.get("_v") or 0) + 1)
        rec = kg_format.node_record(obj, clone=self.name)
        obj = past_seen(obj, seen, kg_format.vector(rec))  # a node put again after its delete
        rec = kg_format.node_record(obj, clone=self.name)
        self.objs[nid], self.view[nid] = obj, rec
        return seen, rec

    def delete(self, nid, now):
        seen = self.view.get(nid)
        if seen is None or kg_format.is_tombstone(seen):
            return None, None
        v = kg_format.version(seen) + 1
        tomb = kg_format.tombstone(nid, now, v=v)
        tomb["vv"] = kg_format.join([kg_format.vector(seen), {self.name: v}])
        self.objs.pop(nid, None)
        self.view[nid] = tomb
        return seen, tomb

    def receive(self, other, now):
        """A pull: every key of the other's files merged with this clone's by the one rule."""
        for nid, rec in other.view.items():
            mine = self.view.get(nid)
            merged = rec if mine is None else kg_format.merge_versions([mine, rec], now)
            self.view[nid] = merged
            if kg_format.is_tombstone(merged):
                self.objs.pop(nid, None)
            else:
                self.objs[nid] = kg_format.node_fields(merged)


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_with_skewed_clocks_converge_by_the_rule(seed):
    rnd = random.Random(seed)
    clones = {n: Clone(n) for n in SKEW}
    t, seen_pairs, made = T0, [], []
    for step in range(60):
        t += rnd.choice((1.0, 10.0, 600.0))
        c = clones[rnd.choice(sorted(clones))]
        now = t + SKEW[c.name]
        roll = rnd.random()
        if roll < 0.55:
            seen, rec = c.edit(rnd.choice(IDS), "%s %d" % (c.name, step), now)
        elif roll < 0.7:
            seen, rec = c.delete(rnd.choice(IDS), now)
        else:
            seen, rec = None, None
            c.receive(clones[rnd.choice(sorted(set(clones) - {c.name}))], now)
        if rec is not None:
            made.append(rec)
            if seen is not None:
                seen_pairs.append((seen, rec))
    t += 1.0
    for _ in range(2):  # everyone pulls everyone: the same knowledge everywhere
        for c in clones.values():
            for other in clones.values():
                if other is not c:
                    c.receive(other, t + SKEW[c.name])
    views = [c.view for c in clones.values()]
    assert views[0] == views[1] == views[2], "the clones did not converge"
    final = views[0]
    for seen, after in seen_pairs:  # an edit (or delete) made after seeing a version wins over it
        assert final[kg_format.key_of(seen)] != seen or seen == after
        assert kg_format.covers(kg_format.vector(after), kg_format.vector(seen))
    for nid, rec in final.items():  # the winner was seen by no later change
        assert not any(kg_format.covers(kg_format.vector(m), kg_format.vector(rec))
                       for m in made if kg_format.key_of(m) == nid)


def test_concurrent_edits_are_ordered_by_time_and_the_future_counts_as_now():
    a, c = Clone("a"), Clone("c")
    a.edit("x", "base", T0)
    c.receive(a, T0 + SKEW["c"])
    _, from_c = c.edit("x", "c's, dated 30 days ahead", T0 + 10 + SKEW["c"])
    _, from_a = a.edit("x", "a's, made later", T0 + 20)
    # Read at T0 + 30 by a: c's time counts as T0 + 30, later than a's change (T0 + 20): c's wins
    # what it would win dated now, no more.
    assert kg_format.merge_versions([from_a, from_c], T0 + 30)["gist"] == "c's, dated 30 days ahead"
    # And an edit a makes after seeing c's future-dated version wins over it, at a's own time.
    a.receive(c, T0 + 40)
    _, after = a.edit("x", "a's, after seeing c's", T0 + 50)
    assert kg_format.merge_versions([after, from_c], T0 + 60)["gist"] == "a's, after seeing c's"
    assert kg_format.merge_versions([after, from_c], T0 + SKEW["c"] + 60)["gist"] == "a's, after seeing c's"


# ---------------------------------------------------------------- real stores, real git

class Clock:
    def __init__(self, skew):
        self.t, self.skew = T0, skew

    def __call__(self):
        return self.t + self.skew


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_an_edit_after_seeing_a_future_dated_version_wins_through_git(tmp_path):
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], env=env, check=True)
    people, clocks = {}, {n: Clock(s) for n, s in SKEW.items()}

    def git(name, *args):
        p = subprocess.run(["git", *args], cwd=str(tmp_path / name), env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p

    def pause(name):
        clocks[name].t += 5
        people[name].fold_idle()

    def publish(name):
        pause(name)
        git(name, "add", ".kg")
        if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=str(tmp_path / name), env=env).returncode:
            git(name, "-c", "user.name=%s" % name, "-c", "user.email=%s@l" % name, "commit", "-q", "-m", name)
        if git(name, "ls-remote", "--heads", "origin", "main").stdout.strip():
            git(name, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        git(name, "push", "-q", "origin", "HEAD:main")

    def pull(name):
        git(name, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main")
        people[name].team.poll()
        pause(name)

    def node(name, nid):
        return people[name].project_graph(os.path.realpath(str(tmp_path / name))).nodes.get(nid)

    try:
        for name in ("a", "b", "c"):
            subprocess.run(["git", "clone", "-q", str(remote), str(tmp_path / name)], env=env, check=True,
                           capture_output=True)
            git(name, "checkout", "-q", "-B", "main")
            people[name] = team.install(Store(str(tmp_path / ("root-" + name)), Settings(),
                                              clock=clocks[name])).open()
        sessions = {}
        sessions["a"] = people["a"].start_session(str(tmp_path / "a"))
        people["a"].put_node(sessions["a"], "project", "x", "a's first")
        people["a"].team.share(str(tmp_path / "a"))
        publish("a")
        for name in ("b", "c"):
            pull(name)
            sessions[name] = people[name].start_session(str(tmp_path / name))
        # c, 30 days ahead, changes x; b, an hour behind, pulls it and changes it after seeing it.
        people["c"].put_node(sessions["c"], "project", "x", "c's change, dated 30 days ahead")
        publish("c")
        pull("b")
        assert node("b", "x")["gist"] == "c's change, dated 30 days ahead"
        people["b"].put_node(sessions["b"], "project", "x", "b's change after seeing c's")
        publish("b")
        for name in ("a", "c", "b"):
            pull(name)
        for name in ("a", "b", "c"):
            assert node(name, "x")["gist"] == "b's change after seeing c's", name
        # A delete made after seeing a future-dated version wins too.
        people["c"].put_node(sessions["c"], "project", "y", "c's node, 30 days ahead")
        publish("c")
        pull("a")
        people["a"].delete_node(sessions["a"], "y", "project")
        publish("a")
        for name in ("b", "c"):
            pull(name)
        for name in ("a", "b", "c"):
            assert node(name, "y") is None, name
        views = [kg_view.records(str(tmp_path / n), now=T0) for n in ("a", "b", "c")]
        assert views[0] == views[1] == views[2]
    finally:
        for s in people.values():
            s.close()
