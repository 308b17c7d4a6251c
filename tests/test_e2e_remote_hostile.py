"""An outside evaluator's attacks on the personal remote (contract section 9): a URL carrying a
token, a remote that never answers, a history force-pushed by another machine, ROOT/sync deleted
or corrupted while the daemon runs, two daemons racing on one bare remote."""

import os
import random
import shutil
import socket
import string
import subprocess
import threading
import time

import pytest
from test_e2e_remote import Machine, git

from helpers import clean_env, start

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]


def token():
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(32))


class Silent:
    """A TCP server on loopback that accepts and never answers (a remote that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def everything_said(m):
    """What a person or a log could see: kgd status, kgd doctor, the daemon's log, the status
    file, the sync repository's commit messages (not sync.json nor the sync repository's own
    config: they hold the setting git uses)."""
    out = []
    for args in (("status",), ("doctor", "--skip-service", "--skip-client")):
        _, o, e, _ = m.kgd(*args)
        out += [o, e]
    out += m.daemon.stderr_lines
    for name in os.listdir(str(m.root)):
        p = m.root / name
        if p.is_file() and name != "sync.json":  # sync.json is the setting itself (0600)
            out.append(p.read_bytes().decode("utf-8", "replace"))
    if (m.root / "sync" / ".git").exists():
        out.append(git(m.root / "sync", "log", "--all", "--format=%B"))
    return "\n".join(out)


def test_a_token_in_the_remote_url_is_never_shown(tmp_path):
    secret = token()
    url = "https://kgd-user:%s@127.0.0.1:1/me/kg-memory.git" % secret
    m = Machine(tmp_path, "m", url).start()
    try:
        code, out, err, _ = m.kgd("sync", "--remote", url)
        assert code == 1 and secret not in out + err
        assert "127.0.0.1" in out + err  # the remote is still named, redacted
        text = everything_said(m)
        assert secret not in text
        assert "kgd-user" in text or "***" in text
    finally:
        m.daemon.stop()
    assert secret not in "".join(m.daemon.stderr_lines)


@pytest.mark.slow
def test_a_remote_that_hangs_is_killed_by_the_timeout_and_tool_calls_never_wait(tmp_path):
    silent = Silent()
    url = "http://127.0.0.1:%d/kg.git" % silent.port
    m = Machine(tmp_path, "m", url)
    m.start()
    try:
        code, out, err, _ = m.kgd("sync", "--remote", url, "--no-wait")
        assert code == 0, out + err
        sid = start(m.daemon, tmp_path)["session_id"]
        worst = 0.0
        t_end = time.monotonic() + 3
        i = 0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            m.daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "n%d" % i, "gist": "x"})
            worst = max(worst, time.monotonic() - t0)
            i += 1
        assert worst < 1.0, worst
        st = m.daemon.json("GET", "/api/remote")[1]
        assert st["syncing"] or st["last_error"]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            st = m.daemon.json("GET", "/api/remote")[1]
            if st["last_error"]:
                break
            time.sleep(0.5)
        assert st["last_error"] and st["last_error"]["kind"] == "timeout", st
        assert m.daemon.json("GET", "/api/health")[0] == 200
    finally:
        m.daemon.stop()
        silent.close()
    assert "Traceback" not in "".join(m.daemon.stderr_lines)


@pytest.fixture
def bare(tmp_path):
    r = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(r)], check=True, env=clean_env())
    return str(r)


def machines(tmp_path, bare, *names):
    ms = [Machine(tmp_path, n, bare).start() for n in names]
    for m in ms:
        m.setup()
    return ms


def sync_ok(m):
    body = m.sync()
    assert not body["failing"], body
    return body


def test_history_force_pushed_by_another_machine(tmp_path, bare):
    a, b = machines(tmp_path, bare, "a", "b")
    try:
        a.put("kept-a", "on a before the force-push")
        sync_ok(a)
        sync_ok(b)
        # Another machine rewrites the remote's history: an unrelated root commit, force-pushed.
        other = tmp_path / "rogue"
        git(tmp_path, "clone", "-q", bare, str(other))
        git(other, "checkout", "-q", "--orphan", "fresh")
        git(other, "rm", "-rq", "--cached", "--ignore-unmatch", ".")
        for p in other.iterdir():
            if p.name != ".git":
                shutil.rmtree(str(p)) if p.is_dir() else p.unlink()
        (other / "user").mkdir()
        (other / "user" / "nodes.jsonl").write_text(
            '{"changed":1700000000.0,"created":1700000000.0,"gist":"from the rogue","id":"rogue","notes":[],'
            '"touches":[]}\n')
        git(other, "add", "-A")
        git(other, "commit", "-q", "-m", "rewritten")
        git(other, "push", "-q", "--force", "origin", "fresh:main")
        b.put("kept-b", "on b after the force-push")
        sync_ok(b)
        sync_ok(a)
        sync_ok(b)
        for m in (a, b):
            assert {"kept-a", "kept-b", "rogue"} <= set(m.user_nodes())
    finally:
        for m in (a, b):
            m.daemon.stop()


@pytest.mark.parametrize("damage", ["deleted", "git-corrupt", "file-garbage"])
def test_the_sync_folder_damaged_while_the_daemon_runs(tmp_path, bare, damage):
    a, b = machines(tmp_path, bare, "a", "b")
    try:
        for i in range(5):
            a.put("a-%d" % i, "acknowledged on a")
        sync_ok(a)
        folder = a.root / "sync"
        if damage == "deleted":
            shutil.rmtree(str(folder))
        elif damage == "git-corrupt":
            (folder / ".git" / "HEAD").write_text("garbage\n")
            shutil.rmtree(str(folder / ".git" / "objects"))
        else:
            (folder / "user" / "nodes.jsonl").write_bytes(b"\x00\xff" * 1000 + b"[" * 100000)
        a.put("after", "written after the damage")
        sid = start(a.daemon, tmp_path)["session_id"]
        t0 = time.monotonic()
        a.daemon.call_tool("kg_put_node", {"session_id": sid, "level": "user", "id": "fast", "gist": "x"})
        assert time.monotonic() - t0 < 1.0
        deadline = time.monotonic() + 60
        while True:  # it converges: a later round repairs what it can
            body = a.sync()
            if not body["failing"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        sync_ok(b)
        want = {"a-%d" % i for i in range(5)} | {"after", "fast"}
        assert want <= set(a.user_nodes())
        assert want <= set(b.user_nodes()), (body, "".join(a.daemon.stderr_lines)[-3000:])
    finally:
        for m in (a, b):
            m.daemon.stop()
    assert "Traceback" not in "".join(a.daemon.stderr_lines)


def test_two_daemons_racing_rounds_on_one_bare_remote(tmp_path, bare):
    a, b = machines(tmp_path, bare, "a", "b")
    try:
        errors = []

        def work(m):
            try:
                for i in range(15):
                    m.put("%s-%d" % (m.name, i), "from %s" % m.name, ["n %d" % i])
                    m.put("same", "%s's gist %d" % (m.name, i), ["%s note %d" % (m.name, i)])
                    st, body = m.daemon.json("POST", "/api/remote", {"wait": 60})
                    assert st == 200, body
            except Exception as exc:  # reported below
                errors.append(exc)
        ts = [threading.Thread(target=work, args=(m,)) for m in (a, b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        assert not errors, errors
        for _ in range(2):
            sync_ok(a)
            sync_ok(b)
        va, vb = a.user_nodes(), b.user_nodes()
        want = {"same"} | {"%s-%d" % (n, i) for n in "ab" for i in range(15)}
        assert set(va) == set(vb) == want
        assert va["same"]["gist"] == vb["same"]["gist"] and va["same"]["notes"] == vb["same"]["notes"]
        ra = (a.root / "sync" / "user" / "nodes.jsonl").read_bytes()
        rb = (b.root / "sync" / "user" / "nodes.jsonl").read_bytes()
        assert ra == rb
    finally:
        for m in (a, b):
            m.daemon.stop()
