"""What a person looks at shows stale knowledge (contract section 12) and knowledge not yet
committed (contract section 9, "Living with git"): `kgd show`, `kgd status`, `kgd doctor`, REST and
the viewer's page, on a real daemon (`--port 0`) over a real git repository, and `kgd show` from
the files with no daemon. Private nodes stay personal: never counted as not committed."""

import json
import os
import shutil
import subprocess
import time
from urllib.parse import quote

import pytest

from kg.travel import team

from helpers import Daemon, git_env, run_kgd

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]


def git(repo, env, *args):
    p = subprocess.run(["git"] + list(args), cwd=str(repo), env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "app"
    repo.mkdir()
    env = git_env(tmp_path)
    (repo / "auth.py").write_text("def refresh(token):\n    return token\n")
    (repo / "db.py").write_text("POOL = 4\n")
    git(repo, env, "init", "-q")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", "first")
    root = tmp_path / "root"
    d = Daemon(root, env={"KG_STRUCTURED_OUTPUT": "0"})
    d.start()
    yield d, repo, env, root
    d.stop()


def put(d, repo, nid, gist, touches=(), private=None):
    body = {"gist": gist, "touches": list(touches), "project_path": str(repo)}
    if private is not None:
        body["private"] = private
    status, out = d.json("PUT", "/api/nodes/project/%s" % nid, body)
    assert status == 200, out


def until(what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def graph(d, repo):
    status, view = d.json("GET", "/api/graph?project_path=%s" % repo)
    assert status == 200, view
    return view["project"]


def kgd(root, repo, *args):
    code, out, err, _ = run_kgd(*args, "--root", root, cwd=repo)
    return code, out, err


def test_shared_project_marks_stale_and_uncommitted_on_every_surface(world):
    d, repo, env, root = world
    put(d, repo, "refresh-keeps-token", "refresh returns the token unchanged", ["auth.py#refresh"])
    put(d, repo, "pool-size", "the pool holds four connections", ["db.py"])
    code, out, err = kgd(root, repo, "share", str(repo))
    assert code == 0, err
    git(repo, env, "add", ".kg")
    git(repo, env, "commit", "-qm", "share memory")
    # Committed: nothing is pending once the beat has seen the new HEAD.
    assert until(lambda: (graph(d, repo)["sharing"].get("uncommitted") or {}).get("nodes") == 0), graph(d, repo)

    # Code changes under one node; this clone writes one node and keeps one private.
    (repo / "auth.py").write_text("def refresh(token):\n    return token + '!'\n")
    git(repo, env, "commit", "-qam", "refresh changes the token")
    put(d, repo, "cache-ttl", "the cache keeps entries one minute")
    put(d, repo, "my-opinion", "this module is a mess", private=True)
    mark = "stale: refresh in auth.py changed, 1 commit ago"

    def settled():
        p = graph(d, repo)
        by = {n["id"]: n for n in p["nodes"]}
        return by if by["refresh-keeps-token"].get("stale") and by["cache-ttl"].get("uncommitted") else None

    by = until(settled)
    assert by, graph(d, repo)
    # REST: exactly the stale node is stale, exactly the written one is not committed.
    assert by["refresh-keeps-token"]["stale"]["mark"] == mark
    assert [n for n, x in by.items() if x.get("stale")] == ["refresh-keeps-token"]
    assert [n for n, x in by.items() if x.get("uncommitted")] == ["cache-ttl"]
    assert by["my-opinion"].get("private") and not by["my-opinion"].get("uncommitted")
    sharing = graph(d, repo)["sharing"]
    assert sharing["uncommitted"] == {"nodes": 1, "deleted": 0, "edges": 0}
    status, one = d.json("GET", "/api/nodes/project/cache-ttl?project_path=%s" % repo)
    assert status == 200 and one["uncommitted"] is True, one
    status, one = d.json("GET", "/api/nodes/project/pool-size?project_path=%s" % repo)
    assert status == 200 and "uncommitted" not in one, one

    # kgd show through the daemon: stdout is the agent's read (the stale mark); stderr names what is
    # not committed.
    code, out, err = kgd(root, repo, "show")
    assert code == 0, err
    assert "- refresh-keeps-token [%s]: refresh returns" % mark in out
    assert "not yet committed: 1 node: cache-ttl (`kgd diff` lists them; `git add .kg && git commit` " \
           "publishes)" in err
    assert "my-opinion" not in err
    code, out, err = kgd(root, repo, "show", "cache-ttl", "refresh-keeps-token")
    assert code == 0, err
    assert mark in out and "not yet committed: 1 node: cache-ttl" in err

    # kgd status counts it per project, and the stale nodes.
    code, out, err = kgd(root, repo, "status")
    assert code == 0, err
    assert ", 1 stale" in out
    assert "shared project app: 1 change not yet committed (1 node); `kgd diff` lists them, " \
           "`git add .kg && git commit` publishes" in out

    # Deleting a committed node is a change not yet committed too.
    status, _ = d.json("DELETE", "/api/nodes/project/pool-size?project_path=%s" % repo)
    assert status == 200
    assert until(lambda: (graph(d, repo)["sharing"]["uncommitted"] or {}).get("deleted") == 1), graph(d, repo)
    code, out, err = kgd(root, repo, "status")
    assert "2 changes not yet committed (1 node, 1 deleted)" in out

    # From the files, with no daemon: the same marks and the same names.
    assert d.stop() == 0
    code, out, err = kgd(root, repo, "show")
    assert code == 0, err
    assert "- refresh-keeps-token [%s]: refresh returns" % mark in out
    assert "not yet committed: 1 node, 1 deleted: cache-ttl" in err
    code, out, err = kgd(root, repo, "status")
    assert code == 1 and "2 changes not yet committed (1 node, 1 deleted)" in out, out

    # Committed: the mark goes; a re-put clears the stale mark.
    git(repo, env, "add", ".kg")
    git(repo, env, "commit", "-qm", "memory")
    code, out, err = kgd(root, repo, "show")
    assert "not yet committed" not in err
    d.start()
    put(d, repo, "refresh-keeps-token", "refresh appends an exclamation mark")
    by = {n["id"]: n for n in graph(d, repo)["nodes"]}
    assert "stale" not in by["refresh-keeps-token"]
    assert until(lambda: {n["id"] for n in graph(d, repo)["nodes"] if n.get("uncommitted")} == {"refresh-keeps-token"})


def test_uncommitted_reads_the_sync_state_and_heads_files():
    """team.uncommitted: what `own` says was written to a file HEAD does not hold, minus what is
    personal; a tombstone of a node gone from the view is a delete."""

    class G:
        def __init__(self, nodes, own):
            self.nodes = nodes
            self.meta = {"kg_shared": {"own": own}}

    root = "/r"
    g = G({"a": {"id": "a"}, "b": {"id": "b"}, "p": {"id": "p", "_private": True},
           "u": {"id": "u", "_unpublished": True}},
          {"node": {"a": "c1-1.nodes.jsonl", "b": "c1-2.nodes.jsonl", "p": "c1-2.nodes.jsonl",
                    "u": "c1-2.nodes.jsonl", "gone": ["c1-2.nodes.jsonl", 5.0, 2], "junk": 7},
           "edge": {"a\x00b\x00uses": "c1-2.edges.jsonl", "x\x00y\x00r": "edges.jsonl"}})
    committed = {"/r/.kg/changes/c1-1.nodes.jsonl", "/r/.kg/edges.jsonl"}
    assert team.uncommitted(g, committed, root) == {"node": ["b"], "deleted": ["gone"], "edge": ["a\x00b\x00uses"]}
    assert team.uncommitted(g, set(), root)["node"] == ["a", "b"]
    assert team.uncommitted(g, committed, root, only="a")["node"] == []
    assert team.uncommitted(g, committed, root, only="b")["node"] == ["b"]
    assert team.uncommitted(G({}, None), set(), root) == {"node": [], "deleted": [], "edge": []}
    assert g.meta == {"kg_shared": {"own": g.meta["kg_shared"]["own"]}}  # read, never changed
    assert team.counts(team.uncommitted(g, committed, root)) == {"nodes": 1, "deleted": 1, "edges": 1}


def test_the_viewer_marks_stale_and_uncommitted_nodes(world):
    """Headless Chromium on /ui: the stale node wears its mark (drawn mirror, tooltip chips, the
    panel's banner), the node written here and not committed is marked and counted in the card,
    the private one is "private", never "not committed"."""
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    from test_ui import Chromium

    d, repo, env, root = world
    put(d, repo, "refresh-keeps-token", "refresh returns the token unchanged", ["auth.py#refresh"])
    assert kgd(root, repo, "share", str(repo))[0] == 0
    git(repo, env, "add", ".kg")
    git(repo, env, "commit", "-qm", "share memory")
    (repo / "auth.py").write_text("def refresh(token):\n    return token + '!'\n")
    put(d, repo, "cache-ttl", "the cache keeps entries one minute")
    put(d, repo, "my-opinion", "this module is a mess", private=True)
    assert until(lambda: all(
        any(n["id"] == nid and n.get(flag) for n in graph(d, repo)["nodes"])
        for nid, flag in (("refresh-keeps-token", "stale"), ("cache-ttl", "uncommitted"))))
    browser = Chromium()
    try:
        browser.open(d.url + "/ui#?project=" + quote(os.path.realpath(str(repo)), safe=""))
        assert browser.wait_for("document.documentElement.dataset.kgdReady === '1'", 20), browser.exceptions()

        def marks(nid):
            return browser.eval("(document.querySelector('#kgd-drawn li[data-id=%s]') || {dataset: {}}).dataset.marks"
                                " || ''" % json.dumps(nid))

        assert browser.wait_for("!!document.querySelector('#kgd-drawn li[data-id=\"cache-ttl\"]')", 10)
        assert marks("refresh-keeps-token") == "stale"
        assert marks("cache-ttl") == "uncommitted"
        assert marks("my-opinion") == ""
        assert browser.eval("document.getElementById('uncommitted').textContent") == \
            "1 change not yet committed \u00b7 kgd diff"
        assert browser.eval("document.getElementById('stale-project').textContent") == "1stale"

        def panel(nid):
            browser.eval("window.kgd.open('project', %s)" % json.dumps(nid))
            assert browser.wait_for("!!document.querySelector('#panel h2') && "
                                    "document.querySelector('#panel h2').textContent === %s" % json.dumps(nid), 10)
            time.sleep(0.3)  # the node's own GET answers
            return json.loads(browser.eval(
                "JSON.stringify({chips: [].map.call(document.querySelectorAll('#panel .ph .chip'), "
                "function (c) { return c.textContent; }),"
                " banner: (document.getElementById('stalemark') || {}).textContent || '',"
                " memory: document.getElementById('sharingnode').textContent})"))

        p = panel("refresh-keeps-token")
        browser.screenshot(os.path.join(os.path.dirname(__file__), "artifacts", "ui-marks.png"))
        assert p["chips"] == ["project", "active", "stale"], p
        assert p["banner"].startswith("stale: refresh in auth.py changed"), p
        p = panel("cache-ttl")
        assert p["chips"] == ["project", "active", "not committed"], p
        assert p["memory"] == "changed here, not yet committed: git add .kg && git commit publishes it"
        p = panel("my-opinion")
        assert p["chips"] == ["project", "active", "private"], p
        assert p["memory"] == "private: kept out of the repository"
        # committed: the count goes at the next look (the page asks again now and then)
        git(repo, env, "add", ".kg")
        git(repo, env, "commit", "-qm", "memory")
        assert until(lambda: not any(n.get("uncommitted") for n in graph(d, repo)["nodes"]))
        browser.eval("window.kgd.refreshMarks()")
        assert browser.wait_for("!document.getElementById('uncommitted')", 10)
        assert until(lambda: marks("cache-ttl") == "", 10)
        assert browser.exceptions() == []
    finally:
        browser.close()


FAILING_GIT = """#!/bin/sh
# git, except that `git diff` and `git log` (the stale-marks pass asks them for renames, lines and
# commits) fail
for a in "$@"; do
  case "$a" in diff|log) echo "fatal: simulated failure of git $a" >&2; exit 128;; esac
done
exec %s "$@"
"""


def test_doctor_says_why_marks_could_not_be_judged(tmp_path):
    """The daemon's pass could not ask git (its `git diff` fails); a touched file grew past the
    size kgd reads; then, with the daemon stopped, git is not on PATH: each is a warning with its
    fix, and a project whose marks can all be judged says so."""
    repo = tmp_path / "app"
    repo.mkdir()
    env = git_env(tmp_path)
    (repo / "auth.py").write_text("def refresh(token):\n    return token\n")
    (repo / "blob.bin").write_bytes(b"small at first\n")
    git(repo, env, "init", "-q")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", "first")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(FAILING_GIT % shutil.which("git"))
    (bin_dir / "git").chmod(0o755)
    root = tmp_path / "root"
    d = Daemon(root, env={"KG_STRUCTURED_OUTPUT": "0", "PATH": "%s:%s" % (bin_dir, os.environ.get("PATH", ""))})
    d.start()
    try:
        put(d, repo, "refresh-keeps-token", "refresh returns the token unchanged", ["auth.py"])
        put(d, repo, "blob-format", "the blob is a text header", ["blob.bin"])
        (repo / "auth.py").write_text("def refresh(token):\n    return token + '!'\n")
        with open(str(repo / "blob.bin"), "r+b") as f:
            f.truncate(33 * 1024 * 1024)  # sparse: over the 32 MiB kgd reads again
        assert until(lambda: any(p.get("stale_problem") for p in d.json("GET", "/api/projects")[1]["projects"]))
        code, out, err, _ = run_kgd("doctor", "--root", root, "--port", d.port, "--skip-service", "--skip-client")
        assert "warn  project %s: the stale marks cannot say what git knows (renames, commits since): git log: " \
               "fatal: simulated failure of git log" % os.path.realpath(str(repo)) in out, out
        assert "warn  project %s: 1 touched file(s) cannot be read, so 1 node(s) are not judged for staleness: " \
               "blob.bin over 32 MiB, too large to read again" % os.path.realpath(str(repo)) in out, out
        assert "fix: let this user read them (chmod u+r FILE), or drop them from those nodes' touches" in out
    finally:
        d.stop()
    (repo / "blob.bin").write_bytes(b"small at first\n")
    code, out, err, _ = run_kgd("doctor", "--root", root, "--port", d.port, "--skip-service", "--skip-client",
                                env={"PATH": str(tmp_path / "nowhere")})
    assert "warn  project %s: git is not on PATH, so the stale marks name no renames and no commits" % (
        os.path.realpath(str(repo))) in out, out
    code, out, err, _ = run_kgd("doctor", "--root", root, "--port", d.port, "--skip-service", "--skip-client")
    assert "ok    stale marks: every touched file can be judged" in out, out


def test_no_git_runs_when_a_surface_reads_the_marks(tmp_path, monkeypatch):
    """REST's graph, node and projects views (what `kgd show`, `kgd status` and the viewer read) look
    up the stale marks and the files HEAD holds; git runs on the beat only, and only when HEAD moved."""
    from kg.api import rest
    from kg.memory import git_runner
    from kg.memory.store import Settings, Store

    repo = tmp_path / "app"
    repo.mkdir()
    env = git_env(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (repo / "db.py").write_text("POOL = 4\n")
    git(repo, env, "init", "-q")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", "first")
    store = team.install(Store(str(tmp_path / "root"), Settings(fold_delay=0))).open()
    try:
        pp = os.path.realpath(str(repo))
        s = store.start_session(pp)
        store.put_node(s, "project", "pool-size", "the pool holds four connections", touches=["db.py"])
        store.team.share(pp)
        store.put_node(s, "project", "cache-ttl", "the cache keeps entries one minute")
        (repo / "db.py").write_text("POOL = 8\n")
        store.fold_idle()
        store.team.poll()
        store.staleness.refresh()
        calls = []
        real = git_runner.run

        def run(args, *a, **kw):
            calls.append(args)
            return real(args, *a, **kw)
        monkeypatch.setattr(git_runner, "run", run)
        store.team.poll()  # HEAD did not move: git is not asked which files it holds
        assert not [c for c in calls if "ls-tree" in c], calls

        def get(path, **q):
            status, obj, _ = rest.handle(store, "GET", path, {k: [v] for k, v in q.items()}, b"")
            assert status == 200, obj
            return obj
        calls.clear()
        view = get("/api/graph", project_path=pp)["project"]
        node = get("/api/nodes/project/cache-ttl", project_path=pp)
        projects = get("/api/projects")["projects"]
        assert calls == []
        by = {n["id"]: n for n in view["nodes"]}
        assert by["pool-size"]["stale"]["mark"].startswith("stale: db.py changed")
        assert by["pool-size"]["uncommitted"] is True  # published by `kgd share`, never committed
        assert by["cache-ttl"]["uncommitted"] is True and node["uncommitted"] is True
        assert view["sharing"]["uncommitted"] == {"nodes": 2, "deleted": 0, "edges": 0}  # nothing committed yet
        assert projects[0]["stale"] == 1 and projects[0]["uncommitted"]["nodes"] == 2
        git(repo, env, "add", ".kg")
        git(repo, env, "commit", "-qm", "memory")
        store.team.poll()  # HEAD moved: asked once
        assert len([c for c in calls if "ls-tree" in c]) == 1
        assert get("/api/graph", project_path=pp)["project"]["sharing"]["uncommitted"]["nodes"] == 0
    finally:
        store.close()
