"""Helpers shared by the test files: one copy of each way the tests start, call and inspect kgd.

Fixtures live in conftest.py; plain functions and classes live here and are imported by name
(`from helpers import Daemon, real`). Paths: kgd reports resolved paths, so a helper that returns
a path a test compares with kgd's answer returns `real(...)` of it.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")
START_LINE = re.compile(r"kgd (\S+) listening on http://(\S+):(\d+)/ \(root: (.*)\)")


def real(p):
    """The resolved path, as kgd reports it."""
    return os.path.realpath(str(p))


def free_port():
    """A port nothing listens on right now (for tests that must name a port up front)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(nid, gist="", notes=(), touches=(), **fields):
    """A node as the graph holds it; `fields` adds or overrides keys (the `_..._ts` times, `_archived`)."""
    n = {"id": nid, "gist": gist, "notes": list(notes), "touches": list(touches)}
    n.update(fields)
    return n


# ---------------------------------------------------------------- kgd's command line

# The only variables a child process of the tests takes from the host: where programs are, the
# locale, the temp folder, who runs it, and what Windows needs to start a process at all.
HOST_VARS = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME",
             "SYSTEMROOT", "SYSTEMDRIVE", "COMSPEC", "PATHEXT", "WINDIR")


class ChildHomes:
    """HOME for the tests' child processes: a folder of the running test's own, made on first use;
    outside any test (a module's shared daemon) one folder for the session."""

    def __init__(self):
        self.factory = None  # pytest's tmp_path_factory (conftest.py sets it)
        self.in_test = False
        self.made = {}

    def enter_test(self, in_test):
        self.in_test = in_test
        self.made.pop(True, None)

    def path(self):
        if self.in_test not in self.made:
            made = self.factory.mktemp("home") if self.factory is not None else tempfile.mkdtemp(prefix="kgd-home-")
            self.made[self.in_test] = str(made)
        return self.made[self.in_test]


HOMES = ChildHomes()


def clean_env(home=None, **extra):
    """The environment of every child process the tests start: the one policy, used for each.

    From the host only HOST_VARS and LC_*: never PYTEST_CURRENT_TEST (it holds the test id, and
    exec fails with E2BIG once that is large), nor the host's KG_*, XDG_*, PYTHON* or HOME, which
    would let the host steer a test or a test reach the user's own kgd. HOME is `home`, else the
    running test's own folder; then `extra`, the variables the test sets."""
    env = {k: v for k, v in os.environ.items() if k in HOST_VARS or k.startswith("LC_")}
    env["HOME"] = str(home) if home is not None else HOMES.path()
    env.update({k: str(v) for k, v in extra.items()})
    return env


def git_env(home, **extra):
    """clean_env for running git in a test: its own HOME, no system config, a fixed identity,
    never a prompt."""
    return clean_env(home, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@localhost",
                     GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@localhost", GIT_TERMINAL_PROMPT="0", **extra)


def short_id(value, limit=40):
    """A parametrized test's id for a large str / bytes input: its start and its length. pytest
    would use the whole value, and PYTEST_CURRENT_TEST carries the id. None: pytest's own id."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return "%s...%d%s" % (ascii(value[:16])[:24], len(value), "B" if isinstance(value, bytes) else "ch")
    return None


def run_kgd(*args, env=None, stdin=None, home=None, cwd=None, timeout=60):
    """-> (exit code, stdout, stderr, seconds taken). -S: kgd needs nothing from site-packages."""
    e = clean_env(home, **(env or {}))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-S", KGD] + [str(a) for a in args], env=e, input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=str(cwd or REPO))
    return r.returncode, r.stdout.decode(), r.stderr.decode(), time.monotonic() - t0


# ---------------------------------------------------------------- a daemon process

class Daemon:
    """A kgd subprocess (`--port 0`, working directory `cwd`) plus small clients for its HTTP surface."""

    def __init__(self, root, args=(), env=None, cwd=REPO):
        self.root = str(root)
        self.args = list(args)
        self.env = env
        self.cwd = str(cwd)
        self.proc = None
        self.port = None
        self.stderr_lines = []
        self._conn = None
        self.http_timeout = 30

    # ---- process

    def start(self, timeout=10):
        env = clean_env(**(self.env or {}))
        args = list(self.args)
        # These tests read results' structuredContent: they run the opt-in structured mode unless a
        # test asks for the default (text only) with KG_STRUCTURED_OUTPUT=0.
        if "--structured-output" not in args and "KG_STRUCTURED_OUTPUT" not in (self.env or {}):
            args.append("--structured-output")
        self.proc = subprocess.Popen([sys.executable, KGD, "--port", "0", "--root", self.root] + args,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=self.cwd)
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
        """-> (status, headers dict (lower-case), body bytes) over one keep-alive connection, opened
        again once if the daemon closed it."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.http_timeout)
            try:
                self._conn.request(method, path, body=body, headers=hdrs)
                r = self._conn.getresponse()
                data = r.read()
                out = (r.status, {k.lower(): v for k, v in r.getheaders()}, data)
                if r.getheader("Connection", "").lower() == "close":
                    self.close_conn()
                return out
            except ConnectionError:  # RemoteDisconnected is one
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


def start(daemon, cwd):
    """kg_read with cwd -> its structuredContent, or {"session_id"} from the text by default."""
    r = daemon.call("kg_read", {"cwd": str(cwd)})
    assert r["isError"] is False, r
    if "structuredContent" in r:
        return r["structuredContent"]
    return {"session_id": re.match(r"Session: (\S+)\n", r["content"][0]["text"]).group(1)}


# ---------------------------------------------------------------- plain HTTP clients

def http_request(port, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection -> (status, headers dict (lower-case), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


class Gone(Exception):
    """The connection died: the request in flight may or may not have been applied."""


class ToolClient:
    """tools/call over one keep-alive connection, for many calls from one thread."""

    def __init__(self, port, timeout=60):
        self.port = port
        self.timeout = timeout
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.n = 0

    def call(self, name, args):
        """-> the CallToolResult; Gone when the connection died, AssertionError on an HTTP or JSON-RPC error."""
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                           "params": {"name": name, "arguments": args}})
        try:
            self.conn.request("POST", "/mcp", body=body, headers={"Content-Type": "application/json"})
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as exc:
            raise Gone(repr(exc))
        if r.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        assert r.status == 200, (r.status, data[:300])
        msg = json.loads(data)
        assert "result" in msg, msg
        return msg["result"]

    def close(self):
        self.conn.close()


# ---------------------------------------------------------------- the WebSocket feed, client side

_OWN_MASK = object()


class FeedPeer:
    """The client end of one feed over a socket: reads server frames (never masked), sends masked ones."""

    def __init__(self, sock, timeout=5, mask=b"\x11\x22\x33\x44"):
        self.sock = sock
        self.sock.settimeout(timeout)
        self.mask = mask
        self.buf = bytearray()

    def frame(self):
        from kg.serve.ws import parse_frame
        while True:
            parsed = parse_frame(self.buf, None)
            if parsed:
                frame, used = parsed
                del self.buf[:used]
                assert frame.mask is None, frame
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.buf += data

    def json(self):
        from kg.serve.ws import OP_TEXT
        frame = self.frame()
        assert frame.opcode == OP_TEXT, frame
        return json.loads(frame.payload)

    def send(self, opcode, payload, fin=True, mask=_OWN_MASK):
        """mask=None sends an unmasked frame, which a client must never do."""
        from kg.serve.ws import encode_frame
        self.sock.sendall(encode_frame(opcode, payload, fin=fin, mask=self.mask if mask is _OWN_MASK else mask))

    def close_code(self):
        """Reads past other frames to the close frame -> its code."""
        from kg.serve.ws import OP_CLOSE, parse_close
        while True:
            frame = self.frame()
            if frame.opcode == OP_CLOSE:
                return parse_close(frame.payload)


# ---------------------------------------------------------------- an in-process Store

class StoreEnv:
    """A storage root, a settable clock, and the Stores opened on it (`close_all` at teardown)."""

    T0 = 1_700_000_000.0

    def __init__(self, tmp_path, **defaults):
        self.tmp = tmp_path
        self.root = str(tmp_path / "root")
        self.t = [self.T0]
        self.defaults = defaults
        self.stores = []

    def clock(self):
        return self.t[0]

    def advance(self, seconds):
        self.t[0] += seconds

    def open(self, **settings):
        from kg.memory.store import Settings, Store
        from kg.travel import team
        s = team.install(Store(self.root, Settings(**dict(self.defaults, **settings)), clock=self.clock)).open()
        self.stores.append(s)
        return s

    def close(self, store):
        store.close()
        self.stores.remove(store)

    def close_all(self):
        """Closes what is still open; a store a test crashed (`crashed` set) stays as it died."""
        for s in self.stores:
            if not getattr(s, "crashed", False):
                try:
                    s.close()
                except Exception:
                    pass

    def project(self, name="app", git=True):
        """A project folder (with a .git unless git=False, and a src/ subfolder) -> its path as given."""
        d = self.tmp / "work" / name
        (d / "src").mkdir(parents=True, exist_ok=True)
        if git:
            (d / ".git").mkdir(exist_ok=True)
        return str(d)
