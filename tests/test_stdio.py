"""`kgd.py stdio`: newline-delimited JSON-RPC on stdin/stdout, forwarded to the daemon (for
clients that only start commands, such as Claude Desktop)."""

import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers import clean_env, free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")


def lock_pid(root):
    try:
        with open(os.path.join(str(root), "kgd.lock")) as f:
            words = f.read().split()
        return int(words[1]) if len(words) > 1 and words[0] == "pid" else None
    except (OSError, ValueError):
        return None


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


class Bridge:
    """`kgd.py stdio` as a subprocess, with line-at-a-time reads that time out."""

    def __init__(self, env):
        self.proc = subprocess.Popen(
            [sys.executable, "-S", KGD, "stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append, False), daemon=True).start()

    @staticmethod
    def _pump(stream, sink, mark_end):
        for line in iter(stream.readline, b""):
            sink(line)
        if mark_end:
            sink(None)

    def send(self, obj):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout=15):
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the bridge closed stdout; stderr: %s" % b"".join(self.stderr[-20:]).decode()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        return json.loads(line)

    def request(self, id, method, params=None):
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.read()

    def call(self, id, name, args):
        resp = self.request(id, "tools/call", {"name": name, "arguments": args})
        assert resp["id"] == id and not resp["result"].get("isError"), resp
        return resp["result"]["structuredContent"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def bridge_env(tmp_path):
    """env for a bridge on a free port and a temporary root; stops whatever daemon it started."""
    port, root = free_port(), tmp_path / "root"
    env = clean_env(tmp_path, KG_HTTP_PORT=port, KG_STORAGE_ROOT=root, KG_STRUCTURED_OUTPUT="1")
    yield env
    subprocess.run([sys.executable, KGD, "stop", "--timeout", "10"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30)
    pid = lock_pid(root)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)  # only if stop failed: never leave a daemon behind
        except OSError:
            pass


@pytest.mark.e2e
def test_stdio_bridge_end_to_end(bridge_env, project):
    port, root = int(bridge_env["KG_HTTP_PORT"]), bridge_env["KG_STORAGE_ROOT"]
    b = Bridge(bridge_env)
    try:
        init = b.request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "1"}})
        assert init["id"] == 1
        assert init["result"]["protocolVersion"] == "2025-06-18"
        assert init["result"]["serverInfo"]["name"] == "kgd"
        b.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # 202: nothing comes back
        assert b.request(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
        tools = b.request(3, "tools/list")["result"]["tools"]
        assert sorted(t["name"] for t in tools) == sorted(
            ["kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search", "kg_sync",
             "kg_progress"])
        sid = b.call(4, "kg_read", {"cwd": str(project / "src")})["session_id"]
        put = b.call(5, "kg_put_node", {"session_id": sid, "level": "project", "id": "via-stdio",
                                        "gist": "written through the stdio bridge", "notes": ["line one\nline two"]})
        assert put["created"] is True
        got = b.call(6, "kg_read", {"session_id": sid, "id": "via-stdio"})
        assert got["nodes"][0]["notes"] == ["line one\nline two"]
        bad = b.request(7, "resources/list")
        assert bad["error"]["code"] == -32601
        b.send(b"this is not json")
        assert b.read()["error"]["code"] == -32700
        b.send([{"jsonrpc": "2.0", "id": 8, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"}])
        assert b.read() == [{"jsonrpc": "2.0", "id": 8, "result": {}}]
        assert b.lines.empty()  # one line per answer, nothing else on stdout
        # The stateless revision: over HTTP it needs headers mirroring the body; the bridge adds them.
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}
        found = b.request(9, "tools/call", {"name": "kg_search", "arguments": {"query": "stdio bridge"},
                                            "_meta": meta})
        assert found["result"]["resultType"] == "complete", found
        assert "via-stdio" in [r["id"] for r in found["result"]["structuredContent"]["results"]]
        discover = b.request(10, "server/discover", {"_meta": meta})
        assert "2026-07-28" in discover["result"]["supportedVersions"], discover

        # The daemon it started holds the node, in memory and for other clients.
        status, graph = get(port, "/api/graph?project_path=" + str(project))
        assert status == 200
        assert "via-stdio" in [n["id"] for n in graph["project"]["nodes"]]
        assert get(port, "/health")[1]["status"] == "ok"
        daemon_pid = lock_pid(root)
        assert daemon_pid and daemon_pid != b.proc.pid
        assert b.close() == 0
        # The daemon outlives the bridge; a second bridge reuses it.
        assert get(port, "/health")[1]["status"] == "ok"
        b2 = Bridge(bridge_env)
        assert b2.request(1, "ping")["result"] == {}
        assert lock_pid(root) == daemon_pid
        assert b2.close() == 0
        log = "".join(line.decode() for line in b.stderr if line)
        assert "started kgd" in log  # logs go to stderr
    finally:
        b.close()
    r = subprocess.run([sys.executable, KGD, "stop"], env=bridge_env, stdout=subprocess.PIPE, timeout=30)
    assert r.returncode == 0 and b"stopped" in r.stdout
    with pytest.raises(OSError):
        get(port, "/health")


def test_stdio_reports_an_unreachable_daemon_as_json_rpc_errors(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    env = clean_env(tmp_path, KG_HTTP_PORT=free_port(), KG_STORAGE_ROOT=blocker / "root")
    b = Bridge(env)
    try:
        b.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        resp = b.request(1, "tools/list")
        assert resp["id"] == 1 and resp["error"]["code"] == -32603
        assert "kgd is not reachable" in resp["error"]["message"]
        assert b.lines.empty()
    finally:
        assert b.close() == 0


@pytest.mark.e2e
def test_stdio_uses_a_running_daemon(make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "shared")
    env = clean_env(tmp_path, KG_HTTP_PORT=d.port, KG_STORAGE_ROOT=tmp_path / "shared")
    b = Bridge(env)
    try:
        b.call(1, "kg_put_node", {"session_id": d.call_tool("kg_read", {"cwd": str(tmp_path)})["session_id"],
                                  "level": "user", "id": "shared-node", "gist": "seen by the HTTP client too"})
        status, node = d.json("GET", "/api/nodes/user/shared-node")
        assert status == 200 and node["gist"] == "seen by the HTTP client too"
        assert lock_pid(tmp_path / "shared") == d.proc.pid  # no second daemon
    finally:
        assert b.close() == 0
    time.sleep(0.1)
    assert d.proc.poll() is None


def test_headers_the_bridge_derives_from_a_message():
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from kg.api import mcp
    from kg.ops.stdio import _http_headers

    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    h = _http_headers({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": dict(meta, name="kg_réad")}, None)
    assert h["MCP-Protocol-Version"] == "2026-07-28" and h["Mcp-Method"] == "tools/call"
    assert mcp.decode_header_value(h["Mcp-Name"]) == "kg_réad" and h["Mcp-Name"].isascii()
    assert _http_headers({"jsonrpc": "2.0", "id": 2, "method": "ping"}, "2025-06-18") == {
        "MCP-Protocol-Version": "2025-06-18"}
    assert _http_headers({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}}, "2025-06-18") == {}
    assert _http_headers([{"jsonrpc": "2.0", "id": 4, "method": "ping"}], "2025-06-18") == {}
