"""kg_progress and kg_sync across one person's machines, end to end (contract sections 3 and 9,
personal remote): two daemons (own roots, own ports), a bare git remote in a temp folder, MCP tool
calls. A task's state set on one machine is on the other after a sync; the change alone makes the
daemon commit it (its listener hears it); a session's kg_sync lists neither the task nor the nodes
it had read when another machine's reads arrive."""

import shutil
import subprocess
import time

import pytest

from helpers import Daemon, clean_env, run_kgd, start

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

ENV = {"KG_SYNC_INTERVAL": "3600", "KG_MAX_TOKENS": "1000000"}


class Machine:
    def __init__(self, tmp_path, name, remote):
        self.root = tmp_path / name
        self.remote = remote
        self.daemon = Daemon(self.root, env=ENV)
        self.daemon.http_timeout = 180

    def setup(self):
        code, out, err, _ = run_kgd("sync", "--remote", self.remote, "--root", self.root, "--port",
                                    self.daemon.port, env=ENV, timeout=180)
        assert code == 0, out + err

    def sync(self):
        st, body = self.daemon.json("POST", "/api/remote", {"wait": 120})
        assert st == 200 and body["completed"], body
        return body

    def tool(self, name, **args):
        return self.daemon.call_tool(name, args)


@pytest.fixture
def pair(tmp_path):
    remote = str(tmp_path / "remote.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True, env=clean_env())
    ms = [Machine(tmp_path, n, remote) for n in ("a", "b")]
    for m in ms:
        m.daemon.start()
    yield ms
    for m in ms:
        m.daemon.stop()


def _commits(root):
    p = subprocess.run(["git", "log", "--format=%H", "--", "user/progress.jsonl"], cwd=str(root / "sync"),
                       capture_output=True, text=True, env=clean_env())
    return p.stdout.split() if p.returncode == 0 else []


def test_task_progress_follows_you_and_kg_sync_stays_quiet(pair, tmp_path):
    a, b = pair
    a.setup()
    b.setup()
    sa = start(a.daemon, tmp_path)["session_id"]
    sb = start(b.daemon, tmp_path)["session_id"]
    a.tool("kg_put_node", session_id=sa, level="user", id="n", gist="a node both machines read")
    a.sync()
    b.sync()
    b.tool("kg_read", session_id=sb, id="n")  # b's session reads it, then is up to date
    b.tool("kg_sync", session_id=sb)

    a.tool("kg_progress", session_id=sa, task_id="release", state={"step": 2, "left": ["notes"]})
    # the change alone is heard: the daemon commits it within its debounce (5 s), no `kgd sync`
    deadline = time.monotonic() + 30
    while not _commits(a.root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _commits(a.root), "a kg_progress change was never committed to ROOT/sync"
    a.tool("kg_read", session_id=sa, id="n")  # a reads it later: personal state only
    a.sync()
    b.sync()
    got = b.tool("kg_progress", session_id=sb, task_id="release")
    assert got["state"] == {"step": 2, "left": ["notes"]}
    diff = b.tool("kg_sync", session_id=sb)
    assert diff["nodes"] == [] and diff["edges"] == [], diff

    st, _ = b.daemon.json("PUT", "/api/progress/release", {"state": None})  # done: cleared on b
    assert st == 200
    b.sync()
    a.sync()
    assert a.tool("kg_progress", session_id=sa, task_id="release")["state"] is None
