"""Random histories with REAL git: a bare remote and three clones, each holding a memory that is
synced with its `.kg/` by kg/reconcile.plan, committing, pulling (merging with the union driver the
committed .gitattributes names) and pushing in random orders. Asserts that no acknowledged node is
lost unless a later delete removed it, that the latest put wins the gist, and that all clones end
with identical bytes and identical memories."""

import random
import shutil
import subprocess

import pytest

from kg.core import kg_format, model
from kg.core.reconcile import plan

from helpers import git_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

IDS = ["cache", "Cache", "db", "api", "auth", "é-unicode", "x:y", "queue"]
RELS = ["uses", "about"]


def git(cwd, *args, env, check=True):
    p = subprocess.run(["git", *args], cwd=str(cwd), env=env, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError("git %s failed: %s%s" % (" ".join(args), p.stdout, p.stderr))
    return p


class Clone:
    """A clone with a stand-in for the daemon's memory: shared records, the base, pending
    tombstones of explicit deletes."""

    def __init__(self, path, env):
        self.path, self.env = path, env
        self.kg = path / ".kg"
        self.nodes, self.edges = {}, {}
        self.base = {"node": {}, "edge": {}}
        self.deleted = {"node": {}, "edge": {}}
        self.merged_lines = 0  # lines a union merge left beside another version of their key

    def files(self):
        return {"node": self.kg / kg_format.NODES_FILE, "edge": self.kg / kg_format.EDGES_FILE}

    def sync(self, now, force=False):
        for kind, path in self.files().items():
            held = self.nodes if kind == "node" else self.edges
            memory = dict(held)
            memory.update(self.deleted[kind])
            data = path.read_bytes() if path.exists() else None
            r, out, problems = plan(memory, data, self.base[kind], now, kind, force=force)
            assert problems == []
            if data:
                self.merged_lines += data.count(b"\n") - len(kg_format.parse(data, kind)[0])
            for k, rec in r.memory.items():
                if rec is None:
                    held.pop(k, None)
                else:
                    held[k] = rec
            self.base[kind] = r.base
            self.deleted[kind] = {}
            if out is not None:
                self.kg.mkdir(exist_ok=True)
                path.write_bytes(out)

    def commit(self, msg):
        git(self.path, "add", "-A", ".", env=self.env)
        if git(self.path, "diff", "--cached", "--quiet", env=self.env, check=False).returncode:
            git(self.path, "commit", "-q", "-m", msg, env=self.env)

    def pull(self):
        git(self.path, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", env=self.env)

    def push(self):
        for _ in range(5):
            if git(self.path, "push", "-q", "origin", "main", env=self.env, check=False).returncode == 0:
                return
            self.pull()
        raise AssertionError("push kept failing")


def make_repo(tmp_path, n):
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote), env=env)
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(remote), str(seed), env=env)
    git(seed, "checkout", "-q", "-b", "main", env=env, check=False)
    (seed / ".kg").mkdir()
    (seed / ".kg" / ".gitattributes").write_text(kg_format.GITATTRIBUTES)
    (seed / "README").write_text("app\n")
    git(seed, "add", "-A", ".", env=env)
    git(seed, "commit", "-q", "-m", "init", env=env)
    git(seed, "push", "-q", "origin", "main", env=env)
    clones = []
    for i in range(n):
        p = tmp_path / ("clone%d" % i)
        git(tmp_path, "clone", "-q", str(remote), str(p), env=env)
        clones.append(Clone(p, env))
    return clones


class History:
    """What was acknowledged: every put (time, gist) and delete time, per id."""

    def __init__(self):
        self.puts, self.deletes = {}, {}

    def put(self, nid, t, gist, notes):
        self.puts.setdefault(nid, []).append((t, gist, notes))

    def delete(self, nid, t):
        self.deletes.setdefault(nid, []).append(t)


def random_ops(rnd, c, clock, hist):
    for _ in range(rnd.randint(1, 4)):
        t = kg_format.ts(next(clock))
        roll = rnd.random()
        if roll < 0.15 and c.nodes:
            nid = rnd.choice(sorted(c.nodes))
            del c.nodes[nid]
            c.deleted["node"][nid] = kg_format.tombstone(nid, t)
            for key in [k for k, e in c.edges.items() if nid in (e["from"], e["to"])]:
                del c.edges[key]
                c.deleted["edge"][key] = kg_format.tombstone(None, t, edge=c_edge(key))
            hist.delete(nid, t)
        elif roll < 0.3 and len(c.nodes) >= 2:
            a, b = rnd.sample(sorted(c.nodes), 2)
            rel = rnd.choice(RELS)
            key = model.edge_key(a, b, rel)
            c.edges[key] = {"from": a, "to": b, "rel": rel, "notes": ["edge note %d" % t], "changed": t}
            c.deleted["edge"].pop(key, None)
        else:
            nid = rnd.choice(IDS)
            old = c.nodes.get(nid)
            gist = "%s by %s at %s" % (nid, c.path.name, t)
            notes = ["note %s %s" % (c.path.name, t)]
            if old is not None and rnd.random() < 0.5:
                notes = old["notes"][:3] + notes
            c.nodes[nid] = {"id": nid, "gist": gist, "notes": notes, "touches": ["src/%s.py" % c.path.name],
                            "created": old["created"] if old else t, "changed": t}
            c.deleted["node"].pop(nid, None)
            hist.put(nid, t, gist, notes)


def c_edge(key):
    frm, rest = key.split("->", 1)
    to, rel = rest.rsplit(":", 1)
    return {"from": frm, "to": to, "rel": rel}


def clock_from(start):
    t = start
    while True:
        t += 1.0
        yield t


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_converge_and_lose_nothing(tmp_path, seed):
    rnd = random.Random(seed)
    clones = make_repo(tmp_path, 3)
    clock, hist = clock_from(1_700_000_000.0), History()
    for rnd_i in range(8):
        order = list(clones)
        rnd.shuffle(order)
        for c in order:
            random_ops(rnd, c, clock, hist)
            c.sync(next(clock))
            c.commit("kg %d" % rnd_i)
            if rnd.random() < 0.7:
                c.pull()
                c.sync(next(clock))  # pickup, and the clean write-back if anything was written
                c.commit("kg merge %d" % rnd_i)
            if rnd.random() < 0.8:
                c.push()
    # Final round: everyone syncs, pulls and pushes in turn, then everyone pulls.
    for c in clones:
        c.sync(next(clock))
        c.commit("final")
        c.pull()
        c.sync(next(clock))
        c.commit("final merge")
        c.push()
    for c in clones:
        c.pull()
        c.sync(next(clock))
        assert git(c.path, "status", "--porcelain", env=c.env).stdout == ""  # nothing left to write
    assert sum(c.merged_lines for c in clones) > 0  # concurrent edits of one node did happen
    files = [(c.kg / kg_format.NODES_FILE).read_bytes() for c in clones]
    assert files[0] == files[1] == files[2]
    edges = [(c.kg / kg_format.EDGES_FILE).read_bytes() if (c.kg / kg_format.EDGES_FILE).exists() else b""
             for c in clones]
    assert edges[0] == edges[1] == edges[2]
    assert clones[0].nodes == clones[1].nodes == clones[2].nodes
    assert clones[0].edges == clones[1].edges == clones[2].edges
    on_disk, problems = kg_format.parse(files[0], "node")
    assert problems == [] and {k: v for k, v in on_disk.items() if "deleted" not in v} == clones[0].nodes
    final = dict(clones[0].nodes)
    c = clones[0]  # the next write leaves the file clean (one sorted line per id)
    c.nodes["zz-next"] = {"id": "zz-next", "gist": "g", "notes": [], "touches": [], "created": 1.0, "changed": 1.0}
    c.sync(next(clock))
    data = (c.kg / kg_format.NODES_FILE).read_bytes()
    assert not kg_format.needs_rewrite(data, kg_format.parse(data, "node")[0])
    for nid, puts in hist.puts.items():
        t, gist, notes = max(puts)
        last_delete = max(hist.deletes.get(nid, [float("-inf")]))
        if t >= last_delete:
            assert nid in final, "acknowledged put of %r at %s lost" % (nid, t)
            assert final[nid]["gist"] == gist
            assert set(notes) <= set(final[nid]["notes"])
        else:
            assert nid not in final


def test_conflict_markers_left_by_git_load_and_are_written_back_clean(tmp_path):
    """Without the union attribute git leaves conflict markers; committing the file as git left
    it still loads everywhere, resolved by the merge rule, and the next write cleans it."""
    clones = make_repo(tmp_path, 2)
    a, b = clones
    (a.kg / ".gitattributes").unlink()
    a.commit("no union")
    a.push()
    b.pull()
    a.nodes["x"] = {"id": "x", "gist": "base", "notes": ["n0"], "touches": [], "created": 1.0, "changed": 1.0}
    a.sync(2.0)
    a.commit("x")
    a.push()
    b.pull()
    b.sync(3.0)
    a.nodes["x"] = dict(a.nodes["x"], gist="from a", notes=["n0", "na"], changed=10.0)
    b.nodes["x"] = dict(b.nodes["x"], gist="from b", notes=["n0", "nb"], changed=11.0)
    a.sync(12.0)
    a.commit("a")
    a.push()
    b.sync(13.0)
    b.commit("b")
    p = git(b.path, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", env=b.env, check=False)
    assert p.returncode != 0
    data = (b.kg / kg_format.NODES_FILE).read_bytes()
    assert b"<<<<<<<" in data
    b.commit("commit the file as git left it")
    b.sync(14.0)
    assert b.nodes["x"]["gist"] == "from b" and b.nodes["x"]["notes"] == ["n0", "nb", "na"]
    assert (b.kg / kg_format.NODES_FILE).read_bytes() == data  # a pickup alone leaves the file as git left it
    b.nodes["y"] = {"id": "y", "gist": "new", "notes": [], "touches": [], "created": 15.0, "changed": 15.0}
    b.sync(15.0)
    clean = (b.kg / kg_format.NODES_FILE).read_bytes()
    assert b"<<<<<<<" not in clean and not kg_format.needs_rewrite(clean, kg_format.parse(clean, "node")[0])
    b.commit("y")
    b.push()
    a.pull()
    a.sync(16.0)
    assert a.nodes == b.nodes
