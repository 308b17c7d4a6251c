"""`kgd diff`, `kgd fold` and private nodes (contract section 9, "Living with git"): with real git
in temp folders, and the diff's rules as a table over views."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from kg.core import kg_diff, kg_format
from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import clean_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=alice", "-c", "user.email=a@example.org", *args], cwd=cwd,
                          check=True, capture_output=True, text=True, env=clean_env()).stdout


def kgd(cwd, *args):
    return subprocess.run([sys.executable, os.path.join(REPO, "kgd.py"), *args], cwd=cwd, capture_output=True,
                          text=True, env=clean_env(), timeout=60)


def line(nid, gist, v=1, changed=100.0, **extra):
    rec = dict({"id": nid, "gist": gist, "notes": [], "touches": [], "created": 100.0, "changed": changed, "v": v},
               **extra)
    return kg_format.canonical(rec) + "\n"


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "README").write_text("x\n")
    git(r, "add", "README")
    git(r, "commit", "-qm", "init")
    return r


def test_the_diff_of_two_views_lists_added_changed_deleted_and_withholds_a_credential():
    before, _ = kg_diff.view({"node": [(line("a", "one") + line("b", "two") + line("c", "three")).encode()]})
    secret = "the token is ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"
    after, _ = kg_diff.view({"node": [(line("a", "one") + line("b", "two, better", v=2)).encode(),
                                      (line("d", "four") + line("e", secret)).encode()]})
    d = kg_diff.diff(before, after)
    assert [n["id"] for n in d["added"]] == ["d"]
    assert [(c["id"], c["before"]["gist"], c["after"]["gist"]) for c in d["changed"]] == [("b", "two", "two, better")]
    assert d["deleted"] == ["c"] and d["withheld"] == ["e"] and d["stale"] == []
    text = kg_diff.render(d, "title")
    assert "ghp_" not in text and "+ d: four" in text and "~ b: two -> two, better" in text and "- c" in text


def test_a_tombstone_in_a_change_file_is_a_delete_and_a_later_version_a_change():
    before, _ = kg_diff.view({"node": [line("a", "one").encode()]})
    tomb = kg_format.canonical({"id": "a", "deleted": 200.0, "v": 2}) + "\n"
    after, _ = kg_diff.view({"node": [line("a", "one").encode(), tomb.encode()]})
    assert kg_diff.diff(before, after)["deleted"] == ["a"]
    assert kg_diff.is_empty(kg_diff.diff(before, before))


def test_kgd_diff_shows_what_a_commit_would_publish_and_a_range_what_a_pull_request_changed(repo):
    kg = repo / ".kg"
    kg.mkdir()
    (kg / "nodes.jsonl").write_text(line("a", "one") + line("b", "two"))
    git(repo, "add", ".kg")
    git(repo, "commit", "-qm", "kg")
    r = kgd(repo, "diff", "--exit-code")
    assert r.returncode == 0 and "no change to the team's memory" in r.stdout, r.stderr
    (kg / "changes").mkdir()
    (kg / "changes" / "c1-1.nodes.jsonl").write_text(line("b", "two again", v=2, changed=200.0) + line("c", "new"))
    r = kgd(repo, "diff", "--json", "--exit-code")
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert [n["id"] for n in d["added"]] == ["c"] and [c["id"] for c in d["changed"]] == ["b"]
    assert set(d) >= {"added", "changed", "deleted", "stale", "withheld"}
    git(repo, "add", ".kg")
    git(repo, "commit", "-qm", "more")
    r = kgd(repo, "diff", "HEAD~1..HEAD")
    assert r.returncode == 0 and "+ c: new" in r.stdout and "~ b: two -> two again" in r.stdout, r.stdout
    assert "no change" in kgd(repo, "diff").stdout


def test_kgd_fold_folds_only_committed_change_files(repo):
    kg = repo / ".kg"
    (kg / "changes").mkdir(parents=True)
    (kg / "nodes.jsonl").write_text(line("a", "one"))
    (kg / "changes" / "c1-1.nodes.jsonl").write_text(line("a", "one, later", v=2, changed=200.0))
    git(repo, "add", ".kg")
    git(repo, "commit", "-qm", "kg")
    (kg / "changes" / "c1-2.nodes.jsonl").write_text(line("z", "not committed yet"))
    before = json.loads(kgd(repo, "diff", "--json").stdout)
    assert [n["id"] for n in before["added"]] == ["z"] and before["changed"] == []
    r = kgd(repo, "fold")
    assert r.returncode == 0 and "folded 1 committed file" in r.stdout, r.stderr
    assert sorted(os.listdir(kg / "changes")) == ["c1-2.nodes.jsonl"]  # not committed: left alone
    view, _ = kg_diff.view({"node": [(kg / "nodes.jsonl").read_bytes()]})
    assert view["node"]["a"]["gist"] == "one, later"
    assert json.loads(kgd(repo, "diff", "--json").stdout) == before  # the same knowledge, in fewer files
    git(repo, "add", "-A", ".kg")
    git(repo, "commit", "-qm", "kgd fold")  # c1-2 is committed now too: the next fold takes it
    assert "folded 1 committed file" in kgd(repo, "fold").stdout and os.listdir(kg / "changes") == []
    git(repo, "add", "-A", ".kg")
    git(repo, "commit", "-qm", "kgd fold again")
    assert "nothing to fold" in kgd(repo, "fold").stdout
    assert "no change to the team's memory" in kgd(repo, "diff").stdout


def test_a_private_node_is_never_written_to_kg_and_says_so(tmp_path, repo, caplog):
    caplog.set_level("WARNING")
    store = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 6))).open()
    try:
        s = store.start_session(str(repo))
        store.put_node(s, "project", "public-one", "everyone may know this")
        r = store.put_node(s, "project", "mine", "my manager thinks this code is a mess", private=True)
        assert r["node"]["private"] is True
        store.team.share(str(repo))
        data = (repo / ".kg" / "nodes.jsonl").read_text()
        assert "public-one" in data and "mine" not in data and "manager" not in data
        store.put_node(s, "project", "mine", "my manager still thinks so")  # a sync with it held back
        store.fold_idle(force=True)
        assert "credential" not in caplog.text  # held back for being private, not for a secret
        shown = store.read_nodes(s, ["mine"])["nodes"][0]
        assert shown["private"] is True
        from kg.api import render

        assert ", private]" in render.render_nodes(store.read_nodes(s, ["mine"]))
        store.put_node(s, "project", "mine", None, private=False)  # published now
        store.fold_idle(force=True)
        assert "mine" in (repo / ".kg" / "nodes.jsonl").read_text()
    finally:
        store.close()


DB = (b"import socket\n\n\ndef connect(url):\n    return socket.create_connection(url)\n\n\n"
      b"def close(s):\n    s.close()\n")


def _files(repo, commit, touches):
    from kg.core import staleness
    states = {}
    for t in touches:
        path, part = staleness.split_touch(t)
        states[t] = staleness.state_of((repo / path).read_bytes(), path, part)
    return {"commit": commit, "files": states}


def test_kgd_diff_lists_the_knowledge_a_change_makes_stale(repo):
    """Section 12 in review: the states a node line carries in `.kg/` are judged against the new
    state's tree; what the change touches is judged, and each stale node is shown with its mark."""
    (repo / "src").mkdir()
    (repo / "src" / "db.py").write_bytes(DB)
    (repo / "src" / "old.py").write_text("def gone():\n    pass\n")
    (repo / "src" / "moved.py").write_text("def stays():\n    return 'the same text, another name'\n")
    git(repo, "add", "src")
    git(repo, "commit", "-qm", "code")
    head = git(repo, "rev-parse", "HEAD").strip()
    kg = repo / ".kg"
    kg.mkdir()
    nodes = [("whole", ["src/db.py"]), ("connect", ["src/db.py#connect"]), ("close", ["src/db.py#close"]),
             ("old", ["src/old.py"]), ("moved", ["src/moved.py"]), ("plain", ["README"])]
    (kg / "nodes.jsonl").write_text("".join(line(n, "about " + n, touches=t, files=_files(repo, head, t))
                                            for n, t in nodes))
    git(repo, "add", ".kg")
    git(repo, "commit", "-qm", "kg")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "db.py").write_bytes(DB.replace(b"create_connection(url)", b"create_connection(url, 5)"))
    git(repo, "rm", "-q", "src/old.py")
    git(repo, "mv", "src/moved.py", "src/renamed.py")
    git(repo, "commit", "-qam", "connect times out; old gone; moved renamed")
    r = kgd(repo, "diff", "%s..HEAD" % base, "--json", "--exit-code")
    assert r.returncode == 1, r.stderr  # no knowledge changed, but the change made some stale: listed
    d = json.loads(r.stdout)
    assert d["stale"] == ["connect", "moved", "old", "whole"]  # not close (its part is the same), nor plain
    assert d["added"] == d["changed"] == d["deleted"] == []
    text = kgd(repo, "diff", "%s..HEAD" % base).stdout
    assert "! connect: stale: connect in src/db.py changed" in text
    assert "! old: stale: src/old.py deleted" in text
    assert "! moved: stale: src/moved.py renamed to src/renamed.py" in text
    assert "! whole: stale: src/db.py changed" in text and "4 stale (their code changed since)" in text
    # the same change not yet committed: this clone's diff judges the working tree
    git(repo, "reset", "-q", "--soft", base)
    d = json.loads(kgd(repo, "diff", "--json").stdout)
    assert d["stale"] == ["connect", "moved", "old", "whole"]
    # a range the code change is not in lists nothing stale: a review sees what it is about
    r = kgd(repo, "diff", "%s..%s" % (head, base), "--json")
    assert json.loads(r.stdout)["stale"] == []
