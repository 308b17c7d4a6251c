"""bench/memory_stale.py: what counts as knowledge shown, when it is wrong (the bench's truth from
the files), and, on a real temp repository replayed as the history world, kgd's marks cover every
stale line its hooks show while the rows without marks show them unmarked."""

import io
import json
import os
import subprocess
import sys

import pytest

from helpers import clean_env

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import memory_eval  # noqa: E402

sys.modules.setdefault("memory_eval", memory_eval)

import memory_stale  # noqa: E402

KNOWN = {"a-node", "b-node"}


@pytest.mark.parametrize("text, want", [
    ("- a-node: f in x.py: subject", [("a-node", False)]),
    ("- a-node [stale: f in x.py changed]: f in x.py: subject", [("a-node", True)]),
    ("- [project] a-node (stale: f in x.py changed): f in x.py: s | note: n", [("a-node", True)]),
    ("- [project] a-node (archived): f in x.py: s", [("a-node", False)]),
    ("- a-node (project /p) [archived]: f in x.py: s", [("a-node", False)]),
    ("## a-node [project, active]\nf in x.py: s\nstale: f in x.py changed (the code changed ...)\n"
     "## b-node [project, active]\ng in y.py: t", [("a-node", True), ("b-node", False)]),
    ("Ids only (kg_read id=... gives one): a-node, b-node", []),
    ("  a-node: f in x.py: s\n    \u2192 changed-with \u2192 b-node\n  a-node --changed-with--> b-node",
     [("a-node", False)]),                                   # the reference's preload
    ("\u25b8 b-node (project, active)\n  gist: g in y.py: t\n  edges:\n  b-node --rel--> a-node",
     [("b-node", False)]),                                   # the reference's read and search
    ("- other-node: f in x.py: s", []),
    ("edge: a-node -changed-with-> b-node", []),
])
def test_what_a_text_shows(text, want):
    assert memory_stale.shown(text, KNOWN) == want


def test_the_truth_is_the_parts_own_text():
    t = memory_stale.Truth()
    t.land("m.py", "def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    f0, g0 = t.state("m.py", "f"), t.state("m.py", "g")
    t.land("m.py", "def f():\n    return 1   \n\n\ndef g():\n    return 3\n")  # trailing spaces aside
    assert not t.wrong(f0, t.state("m.py", "f"))
    assert t.wrong(g0, t.state("m.py", "g"))
    t.land("m.py", "def g():\n    return 3\n")
    assert t.wrong(f0, t.state("m.py", "f")) and t.state("m.py", "f") is None  # gone
    t.land("m.py", "def g(:\n")  # does not parse: judges nothing
    assert not t.wrong(g0, t.state("m.py", "g"))
    assert not t.wrong(t.state("n.py", "h"), None)  # a file not on disk: not judged


def test_overloads_and_the_body_are_one_part():
    stub = "@overload\ndef f(x: int) -> int: ...\n\n\n"
    t = memory_stale.Truth()
    t.land("m.py", stub + "def f(x):\n    return x\n")
    before = t.state("m.py", "f")
    t.land("m.py", stub + "def f(x):\n    return x + 1\n")
    assert t.wrong(before, t.state("m.py", "f"))


def _repo(tmp_path):
    """Functions changed one commit at a time, then one commit rewriting all of them (more than the
    world's MECHANICAL parts: no knowledge is written for it), then work on another file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = clean_env()

    def git(*args, when=None):
        e = dict(env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
                 GIT_COMMITTER_EMAIL="t@example.invalid")
        if when:
            e.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
        subprocess.run(["git", "-C", str(repo)] + list(args), check=True, capture_output=True, env=e)

    git("init", "-q")
    names = ["f%02d" % i for i in range(45)]
    values = dict.fromkeys(names, 0)

    def write(day, msg):
        (repo / "mod.py").write_text("\n\n".join("def %s():\n    return %d\n" % (n, values[n]) for n in names))
        git("add", "mod.py")
        git("commit", "-q", "-m", msg, when="2024-01-%02dT10:00:00" % day)

    write(1, "start")
    for k in range(8):
        for n in names[2 * k:2 * k + 2]:
            values[n] += 1
        write(k + 2, "change %s" % " and ".join(names[2 * k:2 * k + 2]))
    for n in names:
        values[n] += 10
    write(10, "rewrite every function")
    for k in range(6):
        (repo / "other.py").write_text("def h():\n    return %d\n" % k)
        git("add", "other.py")
        git("commit", "-q", "-m", "work on h, like f00 and f01 (%d)" % k, when="2024-01-%02dT10:00:00" % (11 + k))
    return str(repo / ".git")


@pytest.mark.parametrize("git_project", [[], ["--git-project"]])
def test_kgd_marks_every_stale_line_it_shows(tmp_path, git_project):
    gitdir = _repo(tmp_path)
    out = io.StringIO()
    path = str(tmp_path / "h.json")
    assert memory_eval.main(["--world", "history", "--repo", gitdir, "--max-tokens", "5000", "--policy",
                             "kgd-hooks,kgd-hooks-nostale,lru", "--json", path] + git_project, out=out) == 0
    with open(path) as f:
        runs = {r["policy"]: r["stale"] for r in json.load(f)["runs"]}
    assert "stale unmarked" in out.getvalue()
    assert runs["kgd-hooks"]["stale_marked"] > 0 and runs["kgd-hooks"]["stale_unmarked"] == 0
    assert runs["kgd-hooks"]["marked_current"] == 0
    for policy in ("kgd-hooks-nostale", "lru"):
        assert runs[policy]["stale_unmarked"] > 0 and runs[policy]["stale_marked"] == 0
