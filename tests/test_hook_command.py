"""`kgd hook` (contract section 8): Claude Code's SessionStart command hook. It forwards
stdin to the daemon's /api/hooks, prints a non-empty JSON answer, starts the daemon when none
runs, exits 0 in every case and returns within about 2 seconds."""

import fcntl
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import free_port, run_kgd

pytestmark = pytest.mark.e2e

INPUT = {"session_id": "0d9f6c2e-claude", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
         "hook_event_name": "SessionStart", "source": "startup"}
LIMIT = 2.6  # the hook's 1.9 s budget plus Python's start on a loaded machine


class FakeDaemon:
    """A port answering /api/hooks as told, and a root whose lock file names it as a running kgd."""

    def __init__(self, root, status=200, answer=b"", hang=False):
        self.requests = []
        self.root = root
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake.requests.append((self.path, dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *a):
                pass

        if hang:
            self.server = socket.socket()
            self.server.bind(("127.0.0.1", 0))
            self.server.listen(8)
            self.port = self.server.getsockname()[1]
        else:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        os.makedirs(str(root), exist_ok=True)
        self.lock = os.open(os.path.join(str(root), "kgd.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(self.lock, ("pid %d port %d\n" % (os.getpid(), self.port)).encode())

    def close(self):
        os.close(self.lock)
        if isinstance(self.server, socket.socket):
            self.server.close()
        else:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def fake(tmp_path):
    made = []

    def make(**kw):
        made.append(FakeDaemon(tmp_path / "root", **kw))
        return made[-1]
    yield make
    for f in made:
        f.close()


def hook(root, stdin, *args, env=None):
    return run_kgd("hook", "--root", root, "--port", free_port(), *args, stdin=stdin, env=env)


def test_forwards_the_input_unchanged_and_prints_the_answer(fake, tmp_path):
    answer = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "Session: s1\nmemory"}}
    f = fake(answer=json.dumps(answer).encode())
    raw = json.dumps(INPUT, indent=1).encode() + b"\n"
    code, out, err, took = hook(tmp_path / "root", raw, env={"KG_TOKEN": "t0k"})
    assert code == 0 and json.loads(out) == answer, err
    assert took < LIMIT
    [(path, headers, body)] = f.requests
    assert path == "/api/hooks" and body == raw
    assert headers["Authorization"] == "Bearer t0k" and headers["Content-Type"] == "application/json"


def test_flags_before_the_command_work_too(fake, tmp_path):
    f = fake(answer=b'{"systemMessage": "x"}')
    code, out, _, _ = run_kgd("--root", tmp_path / "root", "hook", stdin=json.dumps(INPUT).encode())
    assert code == 0 and json.loads(out) == {"systemMessage": "x"} and len(f.requests) == 1


@pytest.mark.parametrize("status, answer", [(200, b""), (200, b"{}"), (200, b"[1]"), (200, b"not json"),
                                            (404, b'{"error": "no such route"}'), (500, b'{"a": 1}')])
def test_prints_nothing_unless_a_200_with_a_non_empty_object(fake, tmp_path, status, answer):
    fake(status=status, answer=answer)
    code, out, _, took = hook(tmp_path / "root", json.dumps(INPUT).encode())
    assert code == 0 and out == "" and took < LIMIT


@pytest.mark.slow
def test_a_daemon_that_hangs(fake, tmp_path):
    fake(hang=True)
    code, out, err, took = hook(tmp_path / "root", json.dumps(INPUT).encode())
    assert code == 0 and out == "" and took < LIMIT, (err, took)
    assert "no context added" in err


@pytest.mark.parametrize("stdin", [b"", b"garbage", b"[1, 2]", b"\xff\xfe", b'{"a": ' + b"1" * (1024 * 1024) + b"}"])
def test_garbage_stdin(tmp_path, stdin):
    code, out, err, took = hook(tmp_path / "root", stdin)
    assert code == 0 and out == "" and took < LIMIT
    assert not (tmp_path / "root").exists()  # no daemon started for it


def test_bad_configuration_still_exits_0(tmp_path):
    code, out, err, _ = run_kgd("hook", "--root", tmp_path / "r", stdin=json.dumps(INPUT).encode(),
                                env={"KG_HTTP_PORT": "eighty"})
    assert code == 0 and out == "" and "KG_HTTP_PORT" in err


def test_starts_the_daemon_when_none_runs(tmp_path):
    root, port = tmp_path / "root", free_port()
    try:
        code, out, err, took = run_kgd("hook", "--root", root, "--port", port, stdin=json.dumps(INPUT).encode())
        assert code == 0 and took < LIMIT, (err, took)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # it keeps starting after the hook gave up waiting
            code, status, _, _ = run_kgd("status", "--json", "--root", root, "--port", port)
            if code == 0:
                break
            time.sleep(0.2)
        state = json.loads(status)
        assert state["running"] and state["port"] == port and state["root"] == str(root)
        code, out, err, took = run_kgd("hook", "--root", root, "--port", port, stdin=json.dumps(INPUT).encode())
        assert code == 0 and took < LIMIT, err
    finally:
        run_kgd("stop", "--root", root)
