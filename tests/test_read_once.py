"""With kgd's hooks installed the agent reads its memory once (contract sections 3 and 8).

The session-start preload says `Session: <id>` and that the memory is loaded; the MCP instructions and
kg_read's description say the same. An agent that still calls kg_read with cwd and no session id right
after a session-start preload for that project gets the preloaded session back, with only what the
preload did not show (its gists named, not repeated). A second such call, or one after the session was
used by id, starts a new session as before.
"""

import json
import re

import pytest

from helpers import start

pytestmark = pytest.mark.e2e


def put(daemon, project, nid, gist):
    status, obj = daemon.json("PUT", "/api/nodes/project/" + nid, {"gist": gist, "project_path": str(project)})
    assert status == 200, obj


def session_start(daemon, client, cwd):
    status, _, body = daemon.request("POST", "/api/hooks", {
        "hook_event_name": "SessionStart", "session_id": client, "cwd": str(cwd), "source": "startup"})
    assert status == 200
    text = json.loads(body)["hookSpecificOutput"]["additionalContext"]
    return re.match(r"Session: (\S+)", text).group(1), text


def read_text(daemon, args):
    r = daemon.call("kg_read", args)
    assert r["isError"] is False, r
    text = r["content"][0]["text"]
    return re.match(r"Session: (\S+)\n", text).group(1), text


GISTS = ["Gist number %d says the parser caches its tables in build/" % i for i in range(12)]


@pytest.fixture
def seeded(make_daemon, project):
    daemon = make_daemon()
    for i, g in enumerate(GISTS):
        put(daemon, project, "fact-%02d" % i, g)
    return daemon


def test_preload_and_instructions_agree(seeded, project):
    _, preload = session_start(seeded, "cc-1", project)
    assert "do not call kg_read with cwd" in preload
    init = seeded.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "t", "version": "1"}})
    assert "do not call kg_read with cwd" in init["result"]["instructions"]
    tools = {t["name"]: t for t in seeded.rpc("tools/list")["result"]["tools"]}
    assert "do not call this with cwd" in tools["kg_read"]["description"]


def test_kg_read_with_cwd_after_a_preload_reuses_it_and_repeats_no_gist(seeded, project):
    sid, preload = session_start(seeded, "cc-1", project)
    shown = [g for g in GISTS if g in preload]
    assert shown, preload
    got, text = read_text(seeded, {"cwd": str(project / "src")})
    assert got == sid
    assert not [g for g in shown if g in text], text
    assert "Already in your context" in text
    # The adopted session is now in use: another kg_read(cwd) is a new session with everything.
    other, full = read_text(seeded, {"cwd": str(project)})
    assert other != sid
    assert all(g in full for g in GISTS)


def test_a_session_already_used_by_id_is_not_adopted(seeded, project):
    sid, _ = session_start(seeded, "cc-1", project)
    read_text(seeded, {"session_id": sid})
    got, text = read_text(seeded, {"cwd": str(project)})
    assert got != sid
    assert all(g in text for g in GISTS)


def test_another_project_does_not_adopt(seeded, project, tmp_path):
    sid, _ = session_start(seeded, "cc-1", project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    got = start(seeded, elsewhere)["session_id"]
    assert got != sid
