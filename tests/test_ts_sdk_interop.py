"""Interop with the official TypeScript MCP SDK 1.x client (`@modelcontextprotocol/sdk`).

tests/ts/client.mjs drives the SDK's Client over StreamableHTTPClientTransport against a real
kgd: initialize handshake, tools/list, all eight tools (by default text only: no outputSchema, no
structuredContent; with --structured-output the SDK validates each structuredContent against the
listed outputSchema), failing calls (isError), GET/DELETE answered 405 without an
Mcp-Session-Id, and a clean close. It prints one JSON summary line and exits 0, or prints the
failed check on stderr and exits non-zero. This test then checks, through the daemon itself,
that what the TS client wrote (and deleted) is what the graph holds.

Needs `node` (18+) and `npm ci` run in tests/ts (CI does it); otherwise it skips.
"""

import json
import os
import re
import shutil
import subprocess
import urllib.parse

import pytest

from helpers import clean_env

pytestmark = pytest.mark.e2e

TS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts")
CLIENT = os.path.join(TS_DIR, "client.mjs")
SDK_DIR = os.path.join(TS_DIR, "node_modules", "@modelcontextprotocol", "sdk")
TOOLS = {"kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
         "kg_search", "kg_sync", "kg_progress"}


def _node():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (the TypeScript SDK interop test needs Node.js 18+)")
    if not os.path.isdir(SDK_DIR):
        pytest.skip("tests/ts/node_modules is missing: run (cd tests/ts && npm ci) first")
    out = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, env=clean_env()
    ).stdout.strip()
    m = re.match(r"v(\d+)\.", out)
    if not m or int(m.group(1)) < 18:
        pytest.skip("Node.js 18+ is needed (global fetch); found %r" % out)
    return node


def _run_client(node, url, cwd, structured=False):
    env = clean_env(KGD_EXPECT_STRUCTURED="1" if structured else "0")
    try:
        proc = subprocess.run([node, CLIENT, url, cwd], capture_output=True, text=True, timeout=120, cwd=TS_DIR,
                              env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("client.mjs did not finish within 120 s; stderr: %s" % (exc.stderr or ""))
    assert proc.returncode == 0, "client.mjs exited %d\nstderr:\n%s\nstdout:\n%s" % (
        proc.returncode, proc.stderr, proc.stdout)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def _daemon(make_daemon, structured):
    return make_daemon(args=["--structured-output"] if structured else [], env={"KG_STRUCTURED_OUTPUT": "0"})


def _text(daemon, name, args):
    result = daemon.call(name, args)
    assert result["isError"] is False, result
    return result["content"][0]["text"]


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured-output"])
@pytest.mark.parametrize("path,prefix", [("/mcp", "ts-mcp"), ("/", "ts-root")])
def test_ts_sdk_client(make_daemon, project, path, prefix, structured):
    node = _node()
    daemon = _daemon(make_daemon, structured)
    cwd = str(project / "src")
    summary = _run_client(node, daemon.url + path, cwd, structured)
    assert summary["structured"] is structured

    # What the client saw.
    assert summary["ok"] is True
    assert summary["sdk_version"].startswith("1."), summary["sdk_version"]
    assert summary["url"] == daemon.url + path
    assert summary["protocol_version"] in ("2025-03-26", "2025-06-18", "2025-11-25")
    assert summary["server_info"]["name"] == "kgd"
    assert set(summary["tools"]) == TOOLS and len(summary["tools"]) == 8
    assert set(summary["called"]) == TOOLS
    assert summary["project_path"] == os.path.realpath(str(project))
    assert summary["failures"] == 3
    assert summary["protocol_error"] == -32601
    assert summary["sdk_get_status"] == 405
    assert summary["probes"]["GET"]["status"] == summary["probes"]["DELETE"]["status"] == 405
    assert summary["session_id_header"] is False
    assert summary["sdk_errors"] == []
    a = summary["kept"]["project"][0]
    assert a == prefix + "-a"
    (c,), (b,) = summary["deleted"]["project"], summary["deleted"]["user"]

    # What the daemon holds: A kept (merged), B and C gone, the A->file edge and C's edge gone.
    sid = summary["session_id"]
    if not structured:
        text = _text(daemon, "kg_read", {"session_id": sid, "ids": [a, b, c]})
        assert "## %s [project, active]\nwritten by the TS SDK, merged\ntouches: src/a.py\n- note: merged note" % a \
            in text
        assert "edge:" not in text and "Not found: %s, %s" % (b, c) in text
        assert '"step": 2' in _text(daemon, "kg_progress", {"session_id": sid, "task_id": summary["progress_task"]})
    else:
        _check_structured(daemon, summary, a, b, c)
    status, graph = daemon.json("GET", "/api/graph?project_path=" + urllib.parse.quote(str(project)))
    assert status == 200, graph
    project_ids = {n["id"] for n in graph["project"]["nodes"]}
    user_ids = {n["id"] for n in graph["user"]["nodes"]}
    assert a in project_ids and c not in project_ids, project_ids
    assert b not in user_ids, user_ids
    assert graph["project"]["edges"] == []

    # A fresh session started by another client (Python, raw JSON-RPC) sees the TS client's node.
    other = daemon.call("kg_read", {"cwd": cwd})
    assert "Session: %s" % sid not in other["content"][0]["text"]
    assert "- %s: written by the TS SDK, merged" % a in other["content"][0]["text"]


def _check_structured(daemon, summary, a, b, c):
    sid = summary["session_id"]
    got = daemon.call_tool("kg_read", {"session_id": sid, "ids": [a, b, c]})
    assert [n["id"] for n in got["nodes"]] == [a]
    node_a = got["nodes"][0]
    assert node_a["level"] == "project"
    assert node_a["gist"] == "written by the TS SDK, merged"
    assert node_a["notes"] == ["merged note"] and node_a["touches"] == ["src/a.py"]
    assert node_a["edges"] == []
    assert sorted(got["missing"]) == sorted([b, c])
    assert daemon.call_tool("kg_progress", {"session_id": sid, "task_id": summary["progress_task"]})["state"] \
        == summary["progress_state"]


def test_ts_sdk_client_both_paths_share_the_graph(make_daemon, project):
    """/mcp and / are the same endpoint: a second run on the other path sees the first run's node."""
    node = _node()
    daemon = _daemon(make_daemon, False)
    cwd = str(project / "src")
    first = _run_client(node, daemon.url + "/mcp", cwd)
    second = _run_client(node, daemon.url + "/", cwd)
    assert first["session_id"] != second["session_id"]
    assert first["project_path"] == second["project_path"]
    found = _text(daemon, "kg_search", {"query": "ts", "limit": 50})
    assert "- ts-mcp-a (project " in found and "- ts-root-a (project " in found
