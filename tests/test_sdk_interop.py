"""Interop with the official MCP Python SDK client (development-only dependency `mcp`).

Default mode probes server/discover (protocol 2026-07-28); legacy mode runs initialize. By
default kgd sends text only (no outputSchema, no structuredContent); with --structured-output the
SDK validates every structuredContent against the tool's outputSchema, so calling each of the
eight tools here also proves the schemas and results agree.
"""

import re

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _exercise(client, cwd, structured):
    tools = await client.list_tools()
    names = {t.name for t in tools.tools}
    assert names == {"kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
                     "kg_search", "kg_sync", "kg_progress"}
    for t in tools.tools:
        assert (t.output_schema is not None) is structured, t.name
    r = await client.call_tool("kg_read", {"cwd": cwd})
    assert not r.is_error
    sid = re.match(r"Session: (\S+)", r.content[0].text).group(1)
    if structured:
        assert r.structured_content["session_id"] == sid

    async def ok(name, args):
        """-> (text, structuredContent); by default there is none, only the text."""
        res = await client.call_tool(name, args)
        assert not res.is_error, res.content[0].text
        assert len(res.content) == 1 and res.content[0].type == "text"
        if not structured:
            assert res.structured_content is None, (name, res.structured_content)
            return res.content[0].text, None
        assert isinstance(res.structured_content, dict)
        return res.content[0].text, res.structured_content

    text, sc = await ok("kg_put_node", {"session_id": sid, "level": "project", "id": "sdk-a", "gist": "from the SDK",
                                        "notes": ["n"], "touches": ["src/a.py"]})
    assert text.startswith("Created project node sdk-a") and (sc is None or sc["created"] is True)
    await ok("kg_put_node", {"session_id": sid, "level": "user", "id": "sdk-b", "gist": "user level"})
    text, sc = await ok("kg_put_edge", {"session_id": sid, "level": "project", "from": "sdk-a", "to": "src/a.py",
                                        "rel": "implemented-in"})
    assert "sdk-a -[implemented-in]-> src/a.py" in text and (sc is None or sc["edge"]["rel"] == "implemented-in")
    text, sc = await ok("kg_read", {"session_id": sid, "id": "sdk-a"})
    assert "edge: sdk-a -[implemented-in]-> src/a.py" in text and "Session: " + sid in text
    assert sc is None or sc["nodes"][0]["edges"][0]["to"] == "src/a.py"
    text, sc = await ok("kg_read", {"session_id": sid})
    assert "- sdk-a: from the SDK" in text
    assert sc is None or [n["id"] for n in sc["project"]["nodes"]] == ["sdk-a"]
    text, sc = await ok("kg_search", {"query": "sdk", "session_id": sid})
    assert "sdk-a" in text and (sc is None or sc["results"])
    text, sc = await ok("kg_sync", {"session_id": sid})
    assert text.startswith("No changes") and (sc is None or sc["nodes"] == [])
    text, sc = await ok("kg_progress", {"session_id": sid, "task_id": "t", "state": {"step": 2}})
    assert sc is None or sc["state"] == {"step": 2}
    text, sc = await ok("kg_progress", {"session_id": sid, "task_id": "t"})
    assert '"step": 2' in text and (sc is None or sc["state"] == {"step": 2})
    text, sc = await ok("kg_delete_edge", {"session_id": sid, "from": "sdk-a", "to": "src/a.py",
                                           "rel": "implemented-in"})
    assert text.startswith("Deleted project edge") and (sc is None or sc["level"] == "project")
    text, sc = await ok("kg_delete_node", {"session_id": sid, "id": "sdk-b"})
    assert text.startswith("Deleted user node sdk-b") and (sc is None or sc["level"] == "user")
    bad = await client.call_tool("kg_delete_node", {"session_id": sid, "id": "no-such-node"})
    assert bad.is_error and "no-such-node" in bad.content[0].text and bad.structured_content is None


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured-output"])
@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
@pytest.mark.parametrize("path", ["/mcp", "/"])
async def test_sdk_client_modes(make_daemon, project, mode, version, path, structured):
    """By default no tool has an outputSchema and no result structuredContent; with
    --structured-output both are there and the SDK validates each result against its schema."""
    daemon = make_daemon(args=["--structured-output"] if structured else [], env={"KG_STRUCTURED_OUTPUT": "0"})
    async with Client(daemon.url + path, mode=mode) as client:
        assert client.protocol_version == version
        assert client.server_info.name == "kgd"
        assert "kg_read" in client.instructions
        await _exercise(client, str(project / "src"), structured)


async def test_env_turns_structured_output_on(make_daemon, project):
    daemon = make_daemon(env={"KG_STRUCTURED_OUTPUT": "1"})
    async with Client(daemon.url + "/mcp") as client:
        await _exercise(client, str(project / "src"), True)
