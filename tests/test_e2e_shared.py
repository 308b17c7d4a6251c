"""Memory that travels with the code, end to end: real git (a bare remote and two clones), one kgd
daemon per clone with its own storage root, agents writing through MCP and REST, commits, pulls,
merges with and without concurrent edits of one node, a branch switch, worktrees, a SIGKILL during
a pickup, and a hostile .kg/."""

import json
import os
import shutil
import subprocess
import time

import pytest

from kg.core import kg_format

import kg_view
from helpers import git_env, real, run_kgd, start

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]


class Repo:
    def __init__(self, path, env):
        self.path, self.env = path, env

    def git(self, *args, check=True):
        p = subprocess.run(["git", *args], cwd=str(self.path), env=self.env, capture_output=True, text=True,
                           timeout=60, check=False)
        if check and p.returncode:
            raise AssertionError("git %s: %s%s" % (" ".join(args), p.stdout, p.stderr))
        return p

    def commit_all(self, msg):
        self.git("add", "-A", ".")
        if self.git("diff", "--cached", "--quiet", check=False).returncode:
            self.git("commit", "-q", "-m", msg)

    def nodes(self):
        """(the live nodes of every file under .kg/ read as one view, {file: bytes})."""
        return kg_view.live(self.path), kg_view.files(self.path)

    def tracked_kg(self):
        """{path: blob id} of what git tracks under .kg/ (kgd never changes one of these)."""
        out = self.git("ls-files", "-s", "--", ".kg").stdout.split("\n")
        return {line.split("\t")[1]: line.split()[1] for line in out if line.strip()}


@pytest.fixture
def team(tmp_path):
    env = git_env(tmp_path)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], env=env, check=True)
    repos = []
    for name in ("alice", "bob"):
        p = tmp_path / name / "app"
        p.parent.mkdir()
        subprocess.run(["git", "clone", "-q", str(remote), str(p)], env=env, check=True, capture_output=True)
        r = Repo(p, env)
        r.git("checkout", "-q", "-B", "main")
        repos.append(r)
    a = repos[0]
    (a.path / "README").write_text("app\n")
    a.commit_all("init")
    a.git("push", "-q", "origin", "main")
    repos[1].git("pull", "-q", "origin", "main")
    repos[1].git("branch", "-q", "--set-upstream-to=origin/main", "main")
    a.git("branch", "-q", "--set-upstream-to=origin/main", "main")
    return repos


def wait_for(cond, timeout=5.0, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def put(d, sid, nid, gist, notes=None):
    args = {"session_id": sid, "level": "project", "id": nid, "gist": gist}
    if notes is not None:
        args["notes"] = notes
    return d.call_tool("kg_put_node", args)


def read_ids(d, sid, ids):
    return d.call_tool("kg_read", {"session_id": sid, "ids": ids})


def share(d, repo):
    code, out, err, _ = run_kgd("share", str(repo.path), "--root", d.root, "--port", str(d.port), cwd=repo.path)
    assert code == 0, err
    return out


def test_team_setup_pull_pickup_and_concurrent_edits(make_daemon, team, tmp_path):
    a_repo, b_repo = team
    a = make_daemon(tmp_path / "root-a")
    sa = start(a, a_repo.path)["session_id"]
    put(a, sa, "auth-flow", "tokens are refreshed by the gateway", ["see src/gw.py"])
    a.call_tool("kg_put_edge", {"session_id": sa, "level": "project", "from": "auth-flow", "to": "src/gw.py",
                                "rel": "lives-in"})
    out = share(a, a_repo)
    assert "git add .kg && git commit -m" in out and "Shared 1 node and 1 edge" in out
    a_repo.commit_all("share memory")
    a_repo.git("push", "-q")

    # Bob's clone: the pull brings .kg/; his daemon loads it for his first session, no command.
    b_repo.git("pull", "-q")
    b = make_daemon(tmp_path / "root-b")
    first = start(b, b_repo.path)
    sb = first["session_id"]
    assert [n["id"] for n in first["project"]["nodes"]] == ["auth-flow"]
    assert b_repo.git("status", "--porcelain").stdout == ""  # loading wrote nothing

    # Alice's session is open while Bob's knowledge arrives by a pull: kg_sync reports it.
    a.call_tool("kg_sync", {"session_id": sa})
    put(b, sb, "cache-ttl", "the cache TTL is 5 minutes")
    assert wait_for(lambda: "cache-ttl" in b_repo.nodes()[0])  # exported once writes pause
    b_repo.commit_all("bob: cache")
    b_repo.git("push", "-q")
    a_repo.git("pull", "-q", "--no-rebase", "--no-edit")
    t0 = time.monotonic()
    got = wait_for(lambda: [n["id"] for n in a.call_tool("kg_sync", {"session_id": sa})["nodes"]])
    assert got == ["cache-ttl"] and time.monotonic() - t0 < 5

    # Both change one node at once: git's union merge keeps both lines, kgd resolves them.
    put(a, sa, "auth-flow", "tokens are refreshed by the gateway (alice)", ["see src/gw.py", "alice's note"])
    time.sleep(0.05)
    put(b, sb, "auth-flow", "tokens are refreshed by the gateway (bob)", ["see src/gw.py", "bob's note"])
    assert wait_for(lambda: "(alice)" in a_repo.nodes()[0]["auth-flow"]["gist"])
    assert wait_for(lambda: "(bob)" in b_repo.nodes()[0]["auth-flow"]["gist"])
    a_repo.commit_all("alice: auth")
    a_repo.git("push", "-q")
    b_repo.commit_all("bob: auth")
    p = b_repo.git("pull", "-q", "--no-rebase", "--no-edit", check=False)
    assert p.returncode == 0, p.stderr  # no conflict
    # Two versions of the node, each in its writer's own file, as git left them.
    assert kg_view.raw_count(b_repo.path, b'"id":"auth-flow"') == 3  # the shared one, alice's, bob's
    assert len({name.split("-")[0] for name in kg_view.change_files(b_repo.path)}) == 2  # one clone id each
    node = wait_for(lambda: [n for n in read_ids(b, sb, ["auth-flow"])["nodes"] if "alice's note" in n["notes"]])
    assert node and node[0]["gist"].endswith("(bob)")  # the later change wins the gist
    assert node[0]["notes"] == ["see src/gw.py", "bob's note", "alice's note"]
    # Bob's next write never touches a file git tracks: it goes to a new file of his own.
    tracked = b_repo.tracked_kg()
    put(b, sb, "deploy", "deploys go through CI only")
    assert wait_for(lambda: "deploy" in b_repo.nodes()[0])
    assert b_repo.tracked_kg() == tracked and b_repo.git("diff", "--quiet", "--", ".kg", check=False).returncode == 0
    assert kg_view.live(b_repo.path)["auth-flow"]["gist"].endswith("(bob)")  # the view is the merge
    b_repo.commit_all("bob: merge")
    b_repo.git("push", "-q")
    a_repo.git("pull", "-q", "--no-rebase", "--no-edit")
    assert wait_for(lambda: [n for n in read_ids(a, sa, ["auth-flow"])["nodes"] if "bob's note" in n["notes"]])
    a.stop()
    b.stop()
    a_nodes, a_bytes = a_repo.nodes()
    b_nodes, b_bytes = b_repo.nodes()
    assert a_bytes == b_bytes and set(a_nodes) == {"auth-flow", "cache-ttl", "deploy"} and a_nodes == b_nodes
    assert a_repo.git("status", "--porcelain").stdout == ""


def test_branch_switch_shows_that_branchs_knowledge(make_daemon, team, tmp_path):
    repo = team[0]
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "on-main", "known on main")
    share(d, repo)
    repo.commit_all("share")
    repo.git("checkout", "-q", "-b", "feature")
    put(d, sid, "feature-only", "known on the feature branch")
    assert wait_for(lambda: "feature-only" in repo.nodes()[0])
    repo.commit_all("feature knowledge")
    d.call_tool("kg_sync", {"session_id": sid})
    repo.git("checkout", "-q", "main")
    assert wait_for(lambda: read_ids(d, sid, ["feature-only"])["missing"] == ["feature-only"])
    synced = d.call_tool("kg_sync", {"session_id": sid})  # left with the branch: not a delete (contract 9)
    assert synced["deleted_nodes"] == [] and synced["left_nodes"] == [{"level": "project", "id": "feature-only"}]
    status, _ = d.json("PUT", "/api/nodes/project/more-main", {"gist": "written on main after the switch (REST)",
                                                                 "project_path": str(repo.path)})
    assert status == 200
    assert wait_for(lambda: "more-main" in repo.nodes()[0])
    nodes, _ = repo.nodes()
    assert set(nodes) == {"on-main", "more-main"}  # the other branch's node is not written back
    repo.commit_all("main knowledge")
    repo.git("checkout", "-q", "feature")
    assert wait_for(lambda: not read_ids(d, sid, ["feature-only"])["missing"])
    assert wait_for(lambda: read_ids(d, sid, ["more-main"])["missing"] == ["more-main"])


def test_worktrees_on_different_branches_keep_their_knowledge(make_daemon, team, tmp_path):
    repo = team[0]
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "shared-main", "main's knowledge")
    share(d, repo)
    repo.commit_all("share")
    wt = tmp_path / "alice" / "app-feature"
    repo.git("worktree", "add", "-q", "-b", "feature", str(wt))
    first = start(d, wt)
    assert first["project_path"] == real(wt)  # a checkout holding .kg/ is its own project
    assert [n["id"] for n in first["project"]["nodes"]] == ["shared-main"]
    put(d, first["session_id"], "feature-work", "only on the feature worktree")
    assert wait_for(lambda: "feature-work" in kg_view.live(wt))
    assert read_ids(d, sid, ["feature-work"])["missing"] == ["feature-work"]
    assert "feature-work" not in repo.nodes()[0]


def test_sigkill_during_a_pickup_loses_nothing(make_daemon, team, tmp_path):
    repo = team[0]
    root = tmp_path / "root"
    d = make_daemon(root)
    sid = start(d, repo.path)["session_id"]
    share(d, repo)
    repo.commit_all("share")
    acked, pulled = [], []
    for round_, delay in enumerate((0.2, 0.5, 0.7, 0.9)):
        # A "pull" that changes 3,000 nodes; puts acknowledged meanwhile; SIGKILL while the
        # daemon picks it up (the beat is 0.5 s: the delays straddle it).
        recs = dict(repo.nodes()[0])
        for i in range(3000):
            nid = "pulled-%d-%04d" % (round_, i)
            recs[nid] = {"id": nid, "gist": "from the remote %d" % i, "notes": ["x" * 50], "touches": [],
                         "created": 1.7e9, "changed": 1.7e9}
        pulled += ["pulled-%d-0000" % round_, "pulled-%d-2999" % round_]
        tmp = repo.path / ".kg" / "incoming"
        tmp.write_bytes(kg_format.render(recs))
        os.replace(str(tmp), str(repo.path / ".kg" / "nodes.jsonl"))
        t0 = time.monotonic()
        while time.monotonic() - t0 < delay:
            nid = "acked-%d-%d" % (round_, len(acked))
            put(d, sid, nid, "acknowledged before the kill")
            acked.append(nid)
            time.sleep(0.02)
        d.kill()
        # Every file kgd writes (its own under changes/) is whole: nothing half-written to skip.
        assert kg_view.problems(repo.path) == [] and len(kg_view.live(repo.path)) >= 3000 * (round_ + 1)
        d = make_daemon(root)
        sid = start(d, repo.path)["session_id"]
        want = acked + pulled
        for i in range(0, len(want), 200):
            assert read_ids(d, sid, want[i:i + 200])["missing"] == []
    status = repo.git("status", "--porcelain", "--untracked-files=all").stdout.splitlines()
    assert [line for line in status if ".tmp-" in line] == []  # a temp file a kill left is ignored
    assert wait_for(lambda: set(acked) <= set(repo.nodes()[0]))  # exported by the restarted daemon


def test_a_hostile_kg_loads_the_rest_and_the_daemon_keeps_serving(make_daemon, team, tmp_path):
    repo = team[0]
    kg = repo.path / ".kg"
    kg.mkdir()
    (kg / ".gitattributes").write_text(kg_format.GITATTRIBUTES)
    lines = [kg_format.canonical({"id": "good", "gist": "fine", "notes": [], "touches": [], "created": 1.0,
                              "changed": 1.0})]
    lines += [kg_format.canonical({"id": "dup", "gist": "v%d" % i, "notes": [], "touches": [], "created": 1.0,
                               "changed": float(i)}) for i in range(10000)]
    lines += ["{not json", "x" * (kg_format.MAX_LINE + 1), "<<<<<<< HEAD", "=======", ">>>>>>> theirs",
              '{"id":"bad->id","gist":"g","notes":[],"touches":[],"created":1,"changed":1}',
              kg_format.canonical({"id": "Case", "gist": "upper", "notes": [], "touches": [], "created": 1.0,
                               "changed": 1.0}),
              kg_format.canonical({"id": "case", "gist": "lower", "notes": [], "touches": [], "created": 1.0,
                               "changed": 1.0})]
    (kg / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    (kg / "edges.jsonl").write_bytes(b"\x00\xff garbage\n")
    root = tmp_path / "root"
    d = make_daemon(root)
    r = start(d, repo.path)
    assert sorted(n["id"] for n in r["project"]["nodes"]) == ["Case", "case", "dup", "good"]
    assert d.json("GET", "/api/health")[0] == 200
    assert any("problem" in line for line in d.stderr_lines)
    put(d, r["session_id"], "after", "still serving")
    code, out, err, _ = run_kgd("doctor", "--root", root, "--port", str(d.port), "--skip-service", "--skip-client")
    assert "not JSON" in out and "edges.jsonl" in out
    status, view = d.json("GET", "/api/graph?project_path=" + str(repo.path))
    assert view["project"]["sharing"]["shared"] and view["project"]["sharing"]["problems"]


def test_share_off_and_show_say_what_is_shared(make_daemon, team, tmp_path):
    repo = team[0]
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "x", "a node")
    code, _, out, _ = run_kgd("show", "--cwd", str(repo.path), "--root", d.root, "--port", str(d.port))
    assert "project graph: personal" in out
    share(d, repo)
    code, _, out, _ = run_kgd("show", "--cwd", str(repo.path), "--root", d.root, "--port", str(d.port))
    assert "project graph: shared in %s (1 node)" % os.path.join(real(repo.path), ".kg") in out
    code, out, _, _ = run_kgd("share", "--off", str(repo.path), "--root", d.root, "--port", str(d.port))
    assert code == 0 and "no longer reads or writes" in out
    put(d, sid, "y", "private from now on")
    time.sleep(2)
    assert set(repo.nodes()[0]) == {"x"}
    status, view = d.json("POST", "/api/share", {"project_path": str(repo.path), "off": "yes"})
    assert status == 400
    status, view = d.json("POST", "/api/share", {"project_path": str(tmp_path)})
    assert status == 400 and "git" in view["error"]
    d.stop()
    code, _, out, _ = run_kgd("show", "--cwd", str(repo.path), "--root", d.root, "--port", "1")
    assert "sharing turned off" in out
    json.dumps(view)


def test_show_on_a_fresh_clone_reads_the_repositorys_knowledge(make_daemon, team, tmp_path):
    a_repo, b_repo = team
    a = make_daemon(tmp_path / "root-a")
    put(a, start(a, a_repo.path)["session_id"], "from-alice", "written by alice's agent")
    share(a, a_repo)
    a_repo.commit_all("share")
    a_repo.git("push", "-q")
    b_repo.git("pull", "-q")
    root_b = tmp_path / "root-b"
    code, out, err, _ = run_kgd("show", "--cwd", str(b_repo.path), "--root", root_b, "--port", "1")
    assert code == 0 and "from-alice" in out and "shared in" in err and "(1 node)" in err
    assert not root_b.exists() or not any(root_b.iterdir())  # read-only
    b = make_daemon(root_b)
    code, out, err, _ = run_kgd("show", "--cwd", str(b_repo.path), "--root", root_b, "--port", str(b.port))
    assert code == 0 and "from-alice" in out and "(1 node)" in err
