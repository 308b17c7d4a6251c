"""Shared fixtures: a real kgd process on a free port (`--port 0`) over a temporary root."""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")
START_LINE = re.compile(r"kgd (\S+) listening on http://(\S+):(\d+)/ \(root: (.*)\)")


def free_port():
    """A port nothing listens on right now (for tests that must name a port up front)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A kgd subprocess plus small clients for its HTTP surface."""

    def __init__(self, root, args=(), env=None):
        self.root = str(root)
        self.args = list(args)
        self.env = env
        self.proc = None
        self.port = None
        self.stderr_lines = []
        self._conn = None

    # ---- process

    def start(self, timeout=10):
        env = dict(os.environ)
        env.pop("KG_TOKEN", None)
        env.update(self.env or {})
        args = list(self.args)
        # These tests read results' structuredContent: they run the opt-in structured mode unless a
        # test asks for the default (text only) with KG_STRUCTURED_OUTPUT=0.
        if "--structured-output" not in args and "KG_STRUCTURED_OUTPUT" not in (self.env or {}):
            args.append("--structured-output")
        self.proc = subprocess.Popen([sys.executable, KGD, "--port", "0", "--root", self.root] + args,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                raise RuntimeError("kgd exited early (%s): %s" % (self.proc.wait(), "".join(self.stderr_lines)))
            self.stderr_lines.append(line)
            m = START_LINE.search(line)
            if m:
                self.port = int(m.group(3))
                break
        else:
            raise RuntimeError("kgd did not print its start line")
        # Keep draining stderr so the daemon never blocks on a full pipe.
        import threading

        def drain(stream=self.proc.stderr, sink=self.stderr_lines):
            for raw in iter(stream.readline, b""):
                sink.append(raw.decode("utf-8", "replace"))
        threading.Thread(target=drain, daemon=True).start()
        return self

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.close_conn()
        self.proc = None
        return code

    def kill(self):
        return self.stop(signal.SIGKILL)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    # ---- HTTP

    def close_conn(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method, path, body=None, headers=None):
        """-> (status, headers dict (lower-case), body bytes) over one keep-alive connection."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self._conn.request(method, path, body=body, headers=hdrs)
                r = self._conn.getresponse()
                data = r.read()
                out = (r.status, {k.lower(): v for k, v in r.getheaders()}, data)
                if r.getheader("Connection", "").lower() == "close":
                    self.close_conn()
                return out
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close_conn()
                if attempt:
                    raise

    def json(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        return status, (json.loads(data) if data else None)

    def rpc(self, method, params=None, id=1, headers=None):
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        status, obj = self.json("POST", "/mcp", msg, headers)
        return obj

    def call(self, name, args):
        """tools/call -> the CallToolResult dict."""
        resp = self.rpc("tools/call", {"name": name, "arguments": args})
        assert "result" in resp, resp
        return resp["result"]

    def call_tool(self, name, args):
        """tools/call that must succeed -> structuredContent."""
        result = self.call(name, args)
        assert not result.get("isError"), result
        return result["structuredContent"]


@pytest.fixture
def make_daemon(tmp_path):
    started = []

    def make(root=None, args=(), env=None, start=True):
        d = Daemon(root or (tmp_path / "root"), args, env)
        started.append(d)
        return d.start() if start else d
    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(make_daemon):
    return make_daemon()


@pytest.fixture
def project(tmp_path):
    """A project folder with a .git directory and a subfolder to use as cwd."""
    root = tmp_path / "work" / "myproj"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root
