"""Interop with the official MCP Python SDK client (development-only dependency `mcp`).

Default mode probes server/discover (protocol 2026-07-28); legacy mode runs initialize. The
SDK validates every structuredContent against the tool's outputSchema, so calling each of
the eight tools here also proves the schemas and results agree.
"""

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _exercise(client, cwd):
    tools = await client.list_tools()
    names = {t.name for t in tools.tools}
    assert names == {"kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
                     "kg_search", "kg_sync", "kg_progress"}
    r = await client.call_tool("kg_read", {"cwd": cwd})
    assert not r.is_error
    sid = r.structured_content["session_id"]
    assert "Session: " + sid in r.content[0].text

    async def ok(name, args):
        res = await client.call_tool(name, args)
        assert not res.is_error, res.content[0].text
        return res.structured_content

    assert (await ok("kg_put_node", {"session_id": sid, "level": "project", "id": "sdk-a", "gist": "from the SDK",
                                     "notes": ["n"], "touches": ["src/a.py"]}))["created"] is True
    await ok("kg_put_node", {"session_id": sid, "level": "user", "id": "sdk-b", "gist": "user level"})
    e = await ok("kg_put_edge", {"session_id": sid, "level": "project", "from": "sdk-a", "to": "src/a.py",
                                 "rel": "implemented-in"})
    assert e["edge"]["rel"] == "implemented-in"
    got = await ok("kg_read", {"session_id": sid, "id": "sdk-a"})
    assert got["nodes"][0]["edges"][0]["to"] == "src/a.py"
    full = await ok("kg_read", {"session_id": sid})
    assert [n["id"] for n in full["project"]["nodes"]] == ["sdk-a"]
    assert (await ok("kg_search", {"query": "sdk", "session_id": sid}))["results"]
    assert (await ok("kg_sync", {"session_id": sid}))["nodes"] == []
    assert (await ok("kg_progress", {"session_id": sid, "task_id": "t", "state": {"step": 2}}))["state"] == {"step": 2}
    assert (await ok("kg_progress", {"session_id": sid, "task_id": "t"}))["state"] == {"step": 2}
    assert (await ok("kg_delete_edge", {"session_id": sid, "from": "sdk-a", "to": "src/a.py",
                                        "rel": "implemented-in"}))["level"] == "project"
    assert (await ok("kg_delete_node", {"session_id": sid, "id": "sdk-b"}))["level"] == "user"
    bad = await client.call_tool("kg_delete_node", {"session_id": sid, "id": "no-such-node"})
    assert bad.is_error and "no-such-node" in bad.content[0].text


@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
@pytest.mark.parametrize("path", ["/mcp", "/"])
async def test_sdk_client_modes(daemon, project, mode, version, path):
    async with Client(daemon.url + path, mode=mode) as client:
        assert client.protocol_version == version
        assert client.server_info.name == "kgd"
        assert "kg_read" in client.instructions
        await _exercise(client, str(project / "src"))
