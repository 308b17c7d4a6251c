"""End to end with the real client: Claude Code (`claude -p`, pinned in tests/claude) against kgd.

Claude Code runs offline: its model is a scripted fake Messages API on loopback
(tests/claude/fake_anthropic.py) that records every request, so these tests assert on what the
model is actually sent.

- Tools (contract section 3): the scripted model loads kgd's deferred tools with ToolSearch
  and calls kg_read (cwd), kg_put_node, kg_search, kg_read (id), kg_sync on a project graph of
  1,000 nodes in grace. Each tool_result the model receives must be kgd's text (with `Session: <id>`
  for kg_read), not `JSON.stringify(structuredContent)` (Claude Code prefers that whenever a result
  carries structuredContent), and within the bounds: 40,000 characters for kg_read and kg_sync,
  10,000 for kg_search.
- Hooks (contract section 8): with kgd's hooks in a throwaway HOME's
  ~/.claude/settings.json (SessionStart as the `kgd hook` command, UserPromptSubmit as an HTTP hook
  to /api/hooks), the model's first request carries the preload (`Session: <id>` of a live kgd
  session and active knowledge), and after a prompt naming an archived node's words the request
  carries that node (recall), which is active again afterwards.

Skips (with the reason) where Claude Code is not installed in tests/claude/node_modules
(`cd tests/claude && npm ci`) or cannot run here, and while kgd has no /api/hooks route.
"""

import json
import os
import shlex
import sys

import pytest

from helpers import KGD

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "claude"))
from cc_harness import ScriptedModel, claude_version, make_home, request_text, run_claude, session_id_in, tool_exchanges  # noqa: E402
from fake_anthropic import FakeAnthropic, text_block  # noqa: E402

pytestmark = pytest.mark.e2e

READ_LIMIT = 40000
SEARCH_LIMIT = 10000
SEEDED = 1000
NEW_ID = "cc-e2e-fact"
NEW_GIST = "Claude Code hands the model the text of a kgd tool result"
NEW_NOTE = "written by the scripted model through the real Claude Code"
OTHER_ID = "cc-other-session-fact"


@pytest.fixture(scope="module")
def claude():
    version, why = claude_version()
    if version is None:
        pytest.skip(why)
    return version


@pytest.fixture
def fake_api():
    servers = []

    def make(responder):
        servers.append(FakeAnthropic(responder).start())
        return servers[-1]
    yield make
    for s in servers:
        s.stop()


def put_node(daemon, level, nid, gist, project, notes=(), session_id=None):
    body = {"gist": gist, "notes": list(notes), "project_path": str(project)}
    if session_id:
        body["session_id"] = session_id
    status, obj = daemon.json("PUT", "/api/nodes/%s/%s" % (level, nid), body)
    assert status == 200, obj


def node_states(daemon, project):
    status, g = daemon.json("GET", "/api/graph?project_path=" + str(project))
    assert status == 200, g
    return {(lvl, n["id"]): n["state"] for lvl in ("user", "project") for n in g[lvl]["nodes"]}


def claude_failed(proc, fake, daemon):
    return "claude exited %d\nstdout: %s\nstderr: %s\nfake API errors: %s\nkgd stderr tail: %s" % (
        proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:], fake.errors, "".join(daemon.stderr_lines[-20:]))


def model_got_json(text):
    """True when the text is a JSON object: what Claude Code sends when it stringifies structuredContent."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@pytest.mark.parametrize("mcp_path", ["/", "/mcp"])
def test_model_receives_kgd_text_for_every_tool(claude, make_daemon, project, fake_api, tmp_path, mcp_path):
    daemon = make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})  # the default mode: text only
    for i in range(SEEDED):
        put_node(daemon, "project", "seed-%04d" % i,
                 "Seeded fact %d about the widget pipeline and its cache layer" % i, project,
                 notes=["note %d: %s" % (i, "detail " * 80)])
    status, other = daemon.json("POST", "/api/sessions", {"project_path": str(project)})
    assert status == 200, other

    def other_session_writes(state):
        put_node(daemon, "project", OTHER_ID, "Another session wrote this while Claude worked", project,
                 session_id=other["session_id"])

    plan = [
        ("mcp__kg__kg_read", {"cwd": str(project / "src")}),
        ("mcp__kg__kg_put_node", lambda s: {"session_id": s["session_id"], "level": "project", "id": NEW_ID,
                                            "gist": NEW_GIST, "notes": [NEW_NOTE]}),
        ("mcp__kg__kg_search", lambda s: {"query": "widget cache layer", "session_id": s["session_id"]}),
        ("mcp__kg__kg_read", lambda s: {"id": NEW_ID, "session_id": s["session_id"]}),
        ("mcp__kg__kg_sync", lambda s: {"session_id": s["session_id"]}, other_session_writes),
    ]
    model = ScriptedModel(plan, final="Memory used.")
    fake = fake_api(model)
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"kg": {"type": "http", "url": daemon.url + mcp_path}}}))
    home = make_home(str(tmp_path / "home"))
    allowed = sorted({step[0] for step in plan})
    proc = run_claude(["-p", "Use your memory of this project.", "--output-format", "json",
                       "--mcp-config", str(mcp_config), "--strict-mcp-config",
                       "--allowedTools", ",".join(allowed)], cwd=project / "src", home=home, api_url=fake.url)
    fake.dump(tmp_path / "requests.json")
    assert proc.returncode == 0, claude_failed(proc, fake, daemon)
    assert fake.errors == [], claude_failed(proc, fake, daemon)
    assert json.loads(proc.stdout)["result"] == "Memory used.", proc.stdout[-2000:]

    calls = [c for c in tool_exchanges(fake.messages()) if c["name"] != "ToolSearch"]
    assert [c["name"] for c in calls] == [step[0] for step in plan], calls
    problems = []  # every deviation at once, so one run shows the whole picture

    def check(ok, what, c):
        if not ok:
            problems.append("%s %s: %s\n    the model got (%d chars): %s" % (
                c["name"], json.dumps(c["input"])[:120], what, len(c.get("text", "")), c.get("text", "")[:400]))

    for c in calls:
        check("text" in c, "Claude Code never sent the model a result", c)
        c.setdefault("text", "")
        check(not c["is_error"], "the call failed", c)
        check(not model_got_json(c["text"]), "a JSON object (JSON.stringify(structuredContent)), not kgd's text", c)
    read, put, search, read_id, sync = calls

    # kg_read with cwd: the session line, the memory, within the bound.
    sid = put["input"].get("session_id")  # what the scripted model found in the kg_read result
    check(sid and "Session: %s" % sid in read["text"], "no `Session: <id>` line", read)
    if sid:
        check(daemon.json("GET", "/api/sessions/" + sid)[0] == 200, "names a session kgd does not know", read)
    check(len(read["text"]) <= READ_LIMIT, "over %d characters" % READ_LIMIT, read)
    check("seed-0999" in read["text"] and "widget pipeline" in read["text"], "the newest seeded node is missing", read)
    # kg_put_node: says which node it wrote.
    check(NEW_ID in put["text"], "does not name the node written", put)
    # kg_search: finds the seeded nodes, within its bound.
    check("seed-" in search["text"], "no seeded node found", search)
    check(len(search["text"]) <= SEARCH_LIMIT, "over %d characters" % SEARCH_LIMIT, search)
    # kg_read id=: the full node, notes included.
    check(NEW_GIST in read_id["text"] and NEW_NOTE in read_id["text"], "the node's gist or note is missing", read_id)
    # kg_sync: the other session's write, within the bound.
    check(OTHER_ID in sync["text"], "the other session's write is missing", sync)
    check(len(sync["text"]) <= READ_LIMIT, "over %d characters" % READ_LIMIT, sync)
    assert not problems, "Claude Code %s (kg tools %s) showed the model:\n%s" % (
        claude, "deferred" if model.deferred else "listed", "\n".join(problems))


FIRST_TURN_TOOLS = {"mcp__kg__kg_read", "mcp__kg__kg_put_node", "mcp__kg__kg_search"}
ALL_KG_TOOLS = FIRST_TURN_TOOLS | {"mcp__kg__kg_put_edge", "mcp__kg__kg_delete_node", "mcp__kg__kg_delete_edge",
                                   "mcp__kg__kg_sync", "mcp__kg__kg_progress"}


def test_tool_search_on_still_offers_the_first_turn_tools(claude, make_daemon, project, fake_api, tmp_path):
    """Contract section 13: with ENABLE_TOOL_SEARCH=true and the entry `claude mcp add` writes (no
    alwaysLoad), the model's first request carries kg_read, kg_put_node and kg_search with their
    schemas (kgd's _meta["anthropic/alwaysLoad"]), the other five only by name behind ToolSearch,
    and the model calls kg_read in its first turn with no ToolSearch."""
    daemon = make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})
    plan = [("mcp__kg__kg_read", {"cwd": str(project / "src")}),
            ("mcp__kg__kg_put_node", lambda s: {"session_id": s["session_id"], "level": "project", "id": NEW_ID,
                                                "gist": NEW_GIST})]
    model = ScriptedModel(plan, final="Saved.")
    fake = fake_api(model)
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"kg": {"type": "http", "url": daemon.url + "/"}}}))
    home = make_home(str(tmp_path / "home"))
    proc = run_claude(["-p", "Remember this project.", "--output-format", "json", "--mcp-config", str(mcp_config),
                       "--strict-mcp-config", "--allowedTools", ",".join(sorted(FIRST_TURN_TOOLS))],
                      cwd=project / "src", home=home, api_url=fake.url, extra_env={"ENABLE_TOOL_SEARCH": "true"})
    fake.dump(tmp_path / "requests.json")
    assert proc.returncode == 0, claude_failed(proc, fake, daemon)
    assert fake.errors == [], claude_failed(proc, fake, daemon)
    main = [b for b in fake.messages() if any(t.get("name") == "ToolSearch" for t in b.get("tools") or [])]
    assert main, "tool search is not on: no request offered ToolSearch"
    first = {t["name"]: t for t in main[0]["tools"]}
    assert FIRST_TURN_TOOLS <= set(first), sorted(first)
    for name in FIRST_TURN_TOOLS:
        assert first[name].get("input_schema", {}).get("type") == "object" and not first[name].get("defer_loading")
    deferred = ALL_KG_TOOLS - set(first)
    assert deferred == ALL_KG_TOOLS - FIRST_TURN_TOOLS, "loaded: %s" % sorted(set(first) & ALL_KG_TOOLS)
    assert all(name in request_text(main[0]) for name in deferred)   # named for ToolSearch
    calls = tool_exchanges(fake.messages())
    assert [c["name"] for c in calls] == ["mcp__kg__kg_read", "mcp__kg__kg_put_node"], calls
    assert model.deferred is False
    assert "Session: " in calls[0]["text"] and NEW_ID in calls[1]["text"]


ZEBRA_ID = "okavango-zebra-crossing"
ZEBRA_GIST = "Zebra herds cross the Okavango delta when the flood pulse peaks in July"
ZEBRA_PROMPT = "When do the zebra herds cross the Okavango delta?"


def hooks_settings(daemon):
    """kgd's hooks as contract section 8 wires them: SessionStart runs the command, the rest POST."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, KGD, "hook", "--port", str(daemon.port),
                                                "--root", daemon.root])
    http_hook = {"type": "http", "url": daemon.url + "/api/hooks", "timeout": 10}
    return {"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": command, "timeout": 10}]}],
        "UserPromptSubmit": [{"hooks": [http_hook]}],
    }}


def test_hooks_preload_and_recall_reach_the_model(claude, make_daemon, project, fake_api, tmp_path):
    daemon = make_daemon(args=["--max-tokens", "200"],
                         env={"KG_GRACE_PERIOD_DAYS": "0", "KG_SAVE_INTERVAL": "3600", "KG_STRUCTURED_OUTPUT": "0"})
    status, _, _ = daemon.request("POST", "/api/hooks", {"hook_event_name": "KgdProbe", "session_id": "probe"})
    assert status == 200  # an unknown event: an empty 200 (contract 8)

    # An archived project node with distinctive words, under newer connected ones; one user node.
    put_node(daemon, "user", "prefers-small-commits", "The user prefers small commits with honest messages", project)
    put_node(daemon, "project", ZEBRA_ID, ZEBRA_GIST, project, notes=["Seen from the Boteti river camp."])
    for i in range(40):
        put_node(daemon, "project", "build-step-%02d" % i, "Build step %02d compiles the parser tables" % i, project)
        if i:
            status, obj = daemon.json("PUT", "/api/edges/project", {
                "from": "build-step-%02d" % i, "to": "build-step-%02d" % (i - 1), "rel": "follows",
                "project_path": str(project)})
            assert status == 200, obj
        if node_states(daemon, project)[("project", ZEBRA_ID)] == "archived":
            break
    states = node_states(daemon, project)
    assert states[("project", ZEBRA_ID)] == "archived", states
    active_gists = {"Build step %s compiles the parser tables" % nid[-2:]
                    for (lvl, nid), st in states.items() if lvl == "project" and st == "active"}

    fake = fake_api(lambda body: [text_block("Noted.")])
    home = make_home(str(tmp_path / "home"), hooks_settings(daemon))
    cwd = project / "src"

    # Session 1, an unrelated prompt: the preload reaches the model; the archived node does not.
    proc = run_claude(["-p", "Say hello.", "--output-format", "json"], cwd=cwd, home=home, api_url=fake.url)
    fake.dump(tmp_path / "requests.json")
    assert proc.returncode == 0, claude_failed(proc, fake, daemon)
    claude_session = json.loads(proc.stdout)["session_id"]
    first = request_text(fake.messages()[0])
    sids = [s for s in (line.split("Session: ", 1)[1].split()[0] for line in first.splitlines()
                        if "Session: " in line)]
    assert sids, "no `Session: <id>` preload in the model's first request:\n%s" % first[:3000]
    assert any(daemon.json("GET", "/api/sessions/" + s)[0] == 200 for s in sids), sids
    assert any(g in first for g in active_gists) or "small commits" in first, first[:3000]
    assert ZEBRA_GIST not in first

    # Session 1 resumed with a prompt naming the archived node's words: its recall reaches the model.
    seen = len(fake.messages())
    proc = run_claude(["-p", ZEBRA_PROMPT, "--output-format", "json", "--resume", claude_session],
                      cwd=cwd, home=home, api_url=fake.url)
    fake.dump(tmp_path / "requests.json")
    assert proc.returncode == 0, claude_failed(proc, fake, daemon)
    later = fake.messages()[seen:]
    assert later, "Claude Code sent the model nothing after the second prompt"
    assert ZEBRA_GIST in request_text(later[0]), request_text(later[0])[-3000:]
    assert node_states(daemon, project)[("project", ZEBRA_ID)] == "active"  # recall counts as a read


def test_a_model_that_calls_kg_read_with_cwd_after_the_preload_gets_no_gist_twice(
        claude, make_daemon, project, fake_api, tmp_path):
    """With the hooks installed, a model that still calls kg_read(cwd) (as older instructions told it)
    is handed the preloaded session back: across everything the model receives, each gist once."""
    daemon = make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})
    gists = ["Fact %02d: the exporter batches rows by tenant before the flush" % i for i in range(30)]
    for i, g in enumerate(gists):
        put_node(daemon, "project", "fact-%02d" % i, g, project)
    model = ScriptedModel([("mcp__kg__kg_read", {"cwd": str(project)})], final="Read.")
    fake = fake_api(model)
    settings = hooks_settings(daemon)
    home = make_home(str(tmp_path / "home"), settings)
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"kg": {"type": "http", "url": daemon.url + "/mcp"}}}))
    proc = run_claude(["-p", "What do you remember?", "--output-format", "json", "--mcp-config", str(mcp_config),
                       "--strict-mcp-config", "--allowedTools", "mcp__kg__kg_read"],
                      cwd=project, home=home, api_url=fake.url)
    fake.dump(tmp_path / "requests.json")
    assert proc.returncode == 0, claude_failed(proc, fake, daemon)
    assert fake.errors == [], claude_failed(proc, fake, daemon)
    main = [b for b in fake.messages() if any(c["name"] == "mcp__kg__kg_read" for c in tool_exchanges([b]))]
    assert main, "the scripted model never got its kg_read result"
    first = request_text(fake.messages()[0])
    preload_sid = session_id_in(first)
    assert preload_sid, first[:3000]
    read = [c for c in tool_exchanges(main) if c["name"] == "mcp__kg__kg_read"][0]
    assert session_id_in(read["text"]) == preload_sid, read["text"][:500]
    everything = request_text(main[-1])
    twice = [g for g in gists if everything.count(g) > 1]
    assert not twice, "the model received %d gists twice, e.g. %r" % (len(twice), twice[:2])
    assert all(g in everything for g in gists)  # and nothing was lost
