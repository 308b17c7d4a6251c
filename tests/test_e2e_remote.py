"""Your memory on every machine, end to end (contract section 9, personal remote): real git, a bare
remote in a temp folder, three storage roots with one daemon each (own port), agents writing
concurrently while apart, syncs in different orders; the same repository cloned at two paths; the
remote gone mid-run and back; SIGKILL during a sync."""

import os
import shutil
import subprocess
import threading
import time

import pytest

from kg.core import kg_format
from kg.memory import repo_id

from helpers import Daemon, clean_env, run_kgd

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

ENV = {"KG_SYNC_INTERVAL": "3600", "KG_MAX_TOKENS": "1000000"}


def git(cwd, *args):
    p = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=str(cwd),
                       capture_output=True, text=True, timeout=60, env=clean_env())
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


class Machine:
    def __init__(self, tmp_path, name, remote):
        self.name = name
        self.root = tmp_path / name
        self.remote = remote
        self.daemon = Daemon(self.root, env=ENV)
        self.daemon.http_timeout = 180

    def start(self):
        self.daemon.start()
        return self

    def kgd(self, *args, timeout=180):
        return run_kgd(*args, "--root", self.root, "--port", self.daemon.port, env=ENV, timeout=timeout)

    def setup(self):
        code, out, err, _ = self.kgd("sync", "--remote", self.remote)
        assert code == 0, out + err
        return out

    def sync(self):
        st, body = self.daemon.json("POST", "/api/remote", {"wait": 120})
        assert st == 200 and body["completed"], body
        return body

    def put(self, nid, gist, notes=None, level="user", project_path=None):
        body = {"gist": gist}
        if notes is not None:
            body["notes"] = notes
        if project_path:
            body["project_path"] = str(project_path)
        st, out = self.daemon.json("PUT", "/api/nodes/%s/%s" % (level, nid), body)
        assert st == 200, out
        return out

    def user_nodes(self):
        st, body = self.daemon.json("GET", "/api/graph")
        assert st == 200
        return {n["id"]: n for n in body["user"]["nodes"]}

    def project_nodes(self, path):
        st, body = self.daemon.json("GET", "/api/graph?project_path=%s" % path)
        assert st == 200, body
        return {n["id"]: n for n in (body["project"] or {}).get("nodes", [])}


@pytest.fixture
def remote(tmp_path):
    r = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(r)], check=True, env=clean_env())
    return str(r)


@pytest.fixture
def fleet(tmp_path, remote):
    made = []

    def make(*names):
        ms = [Machine(tmp_path, n, remote).start() for n in names]
        made.extend(ms)
        return ms
    yield make
    for m in made:
        m.daemon.stop()


def write_apart(machines, n=25):
    """Every machine writes n nodes of its own and changes one common node, all at once."""
    errors = []

    def agent(i, m):
        try:
            for j in range(n):
                m.put("%s-%d" % (m.name, j), "node %d written on %s" % (j, m.name), ["by %s" % m.name])
            m.put("common", "%s's view of the common node" % m.name, ["note from %s" % m.name])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=agent, args=(i, m)) for i, m in enumerate(machines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_three_machines_write_apart_sync_in_different_orders_and_converge(fleet):
    a, b, c = fleet("a", "b", "c")
    a.put("before", "written before any remote")
    for m in (a, b, c):
        m.setup()
    write_apart([a, b, c])
    for order in ((c, a, b), (b, c, a), (a, b, c)):
        for m in order:
            m.sync()
    want = {"before", "common"} | {"%s-%d" % (m, j) for m in "abc" for j in range(25)}
    views = [m.user_nodes() for m in (a, b, c)]
    for v in views:
        assert set(v) == want
        assert set(v["common"]["notes"]) == {"note from a", "note from b", "note from c"}
    content = [{k: (n["gist"], n["notes"], n["touches"], n["state"]) for k, n in v.items()} for v in views]
    assert content[0] == content[1] == content[2]
    for k, n in views[0].items():  # times agree to the millisecond the files keep
        assert all(abs((v[k].get("updated_ts") or 0) - (n.get("updated_ts") or 0)) < 0.002 for v in views)
    # what the remote holds is clean: canonical, sorted, one line per node
    for m in (a, b, c):
        data = (m.root / "sync" / "user" / kg_format.NODES_FILE).read_bytes()
        assert data == kg_format.render(kg_format.parse(data, "node")[0])
    code, out, err, _ = a.kgd("status")
    assert code == 0 and "remote:" in out and "last sync" in out and "never" not in out, out


def test_same_repository_at_two_paths_is_one_graph_across_machines(fleet, tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    (origin / "README").write_text("app\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "first")
    on_a, on_b = tmp_path / "home-a" / "src" / "app", tmp_path / "home-b" / "work" / "app-renamed"
    for p in (on_a, on_b):
        git(tmp_path, "clone", "-q", str(origin), str(p))
    a, b = fleet("a", "b")
    a.setup()
    b.setup()
    a.put("arch", "the architecture of the app", level="project", project_path=on_a)
    b.put("bug", "a bug found on the other machine", level="project", project_path=on_b)
    a.sync()
    b.sync()
    a.sync()
    deadline = time.monotonic() + 15  # a project first opened after a pull is reconciled on the next beat
    while time.monotonic() < deadline:
        if set(a.project_nodes(on_a)) == {"arch", "bug"} and set(b.project_nodes(on_b)) == {"arch", "bug"}:
            break
        b.sync()
        a.sync()
        time.sleep(0.3)
    assert set(a.project_nodes(on_a)) == {"arch", "bug"}
    assert set(b.project_nodes(on_b)) == {"arch", "bug"}
    root_commit = git(origin, "rev-list", "--max-parents=0", "HEAD")
    identity = repo_id.identity_for(root_commit, str(origin), str(origin))
    assert (a.root / "sync" / "projects" / identity / kg_format.NODES_FILE).exists()
    # a second checkout on the same machine is the same graph too
    other = tmp_path / "home-a" / "scratch" / "app"
    git(tmp_path, "clone", "-q", str(origin), str(other))
    assert set(a.project_nodes(other)) == {"arch", "bug"}


def test_remote_gone_mid_run_and_back(fleet, tmp_path, remote):
    a, b = fleet("a", "b")
    a.setup()
    b.setup()
    a.put("one", "synced")
    a.sync()
    away = remote + ".away"
    os.rename(remote, away)
    a.put("two", "written while the remote is gone")
    body = a.sync()
    assert body["last_error"]["kind"] == "no_remote" and body["failing"]
    a.put("three", "still written, still acknowledged")
    a.sync()
    code, out, err, _ = a.kgd("doctor", "--skip-service", "--skip-client")
    assert "personal remote" in out and "last error" in out, out
    code, out, err, _ = a.kgd("sync")
    assert code == 1 and "last error" in out
    log = "".join(a.daemon.stderr_lines)
    assert log.count("remote sync failed") == 1, log  # once per state change, not per try
    os.rename(away, remote)
    body = a.sync()
    assert not body["failing"] and body["last_ok"] >= body["last_error"]["at"]
    b.sync()
    assert {"one", "two", "three"} <= set(b.user_nodes())
    assert "works again" in "".join(a.daemon.stderr_lines)


def test_sigkill_during_a_sync_loses_nothing(fleet, tmp_path):
    a, b = fleet("a", "b")
    a.setup()
    b.setup()
    for i in range(300):
        a.put("bulk-%d" % i, "node %d" % i, ["a note long enough to make the files worth writing %d" % i])
    acknowledged = {"bulk-%d" % i for i in range(300)}
    # a round here takes ~0.1-0.15 s: the kills land at points spread over it
    for round_, delay in enumerate((0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.03)):
        for j in range(20):
            a.put("k%d-%d" % (round_, j), "written before kill %d" % round_)
            acknowledged.add("k%d-%d" % (round_, j))
        st, _ = a.daemon.json("POST", "/api/remote", {"wait": 0})
        assert st == 200
        time.sleep(delay)
        a.daemon.kill()
        a.daemon.start()
    a.sync()
    b.sync()
    assert acknowledged <= set(a.user_nodes())
    assert acknowledged <= set(b.user_nodes())
    p = subprocess.run(["git", "fsck", "--no-progress"], cwd=str(a.root / "sync"), capture_output=True, text=True,
                       env=clean_env())
    assert p.returncode == 0, p.stderr


def test_sync_off_keeps_the_repository_and_stops(fleet):
    (a,) = fleet("a")
    a.setup()
    code, out, err, _ = a.kgd("sync", "--off")
    assert code == 0 and "off" in out
    st, body = a.daemon.json("GET", "/api/remote")
    assert body["enabled"] is False
    assert (a.root / "sync" / ".git").is_dir()
    code, out, err, _ = a.kgd("sync")
    assert code == 1 and "off" in err


def remote_holds(remote, nid):
    p = subprocess.run(["git", "--git-dir", remote, "show", "main:user/" + kg_format.NODES_FILE],
                       capture_output=True, text=True, timeout=60, env=clean_env())
    return p.returncode == 0 and ('"id":"%s"' % nid) in p.stdout


def test_a_clean_stop_pushes_what_waits_and_status_says_it_waits(fleet, remote):
    """`kgd stop` once did not push what was committed locally, and `kgd status` said "last sync
    14s ago" while a commit waited."""
    (a,) = fleet("a")
    a.setup()
    a.put("fresh", "written just before the stop")
    code, out, err, _ = a.kgd("status")
    assert code == 0 and "1 change waits to be pushed (in about " in out, out
    assert not remote_holds(remote, "fresh")
    t0 = time.monotonic()
    code, out, err, _ = a.kgd("stop")
    assert code == 0, out + err
    assert time.monotonic() - t0 < 8
    assert remote_holds(remote, "fresh")
    assert "pushed 1 change at stop" in "".join(a.daemon.stderr_lines)
    code, out, err, _ = a.kgd("status")
    assert code == 1 and "wait" not in out, out  # stopped: nothing waits


def test_a_stop_offline_is_quick_and_leaves_what_waits_for_the_next_start(fleet, remote):
    (a,) = fleet("a")
    a.setup()
    os.rename(remote, remote + ".away")
    a.put("stranded", "written while the remote is gone")
    t0 = time.monotonic()
    code, out, err, _ = a.kgd("stop")
    assert code == 0 and time.monotonic() - t0 < 8, out + err
    assert "left unpushed at stop" in "".join(a.daemon.stderr_lines)
    code, out, err, _ = a.kgd("status")
    assert code == 1 and "1 change waits to be pushed (pushed when kgd starts)" in out, out
    os.rename(remote + ".away", remote)
    a.start()
    a.sync()
    assert remote_holds(remote, "stranded")
    code, out, err, _ = a.kgd("status")
    assert code == 0 and "to be pushed" not in out, out
