"""Other agents through a real daemon (contract section 11): POST /api/hooks?agent=NAME[&event=E]
and `kgd hook --agent NAME [--event E]` answer each agent's events in the shape it reads; an
unknown agent is a 400 (the route) or one line on stderr and exit 0 (the command); kg_read over
MCP is bounded for the agent the request comes from (its User-Agent, as the real clients send it)."""

import json
import re

import pytest

from helpers import real, run_kgd

pytestmark = pytest.mark.e2e


@pytest.fixture
def seeded(daemon, project):
    (project / "src" / "store.py").write_text("x")
    w = daemon.call("kg_read", {"cwd": str(project)})["content"][0]["text"]
    sid = re.match(r"Session: (\S+)", w).group(1)
    for nid, gist, touches in (("store-lock", "one RLock guards every graph", ["src/store.py"]),
                               ("ws-close", "websocket close frames carry a status code", [])):
        r = daemon.call("kg_put_node", {"session_id": sid, "level": "project", "id": nid, "gist": gist,
                                        "touches": touches})
        assert not r["isError"], r
    return daemon, real(project)


def hook(daemon, agent, payload, event=None):
    path = "/api/hooks?agent=%s" % agent + ("&event=%s" % event if event else "")
    return daemon.json("POST", path, payload)


CASES = [  # agent, event param, start, prompt, tool (reading src/store.py)
    ("codex", None,
     {"hook_event_name": "SessionStart", "session_id": "{sid}", "cwd": "{cwd}", "source": "startup"},
     {"hook_event_name": "UserPromptSubmit", "session_id": "{sid}", "cwd": "{cwd}", "prompt": "websocket close?"},
     {"hook_event_name": "PostToolUse", "session_id": "{sid}", "cwd": "{cwd}", "tool_name": "Bash",
      "tool_input": {"command": "sed -n '1,80p' src/store.py"}, "tool_response": "x"}),
    ("gemini", None,
     {"hook_event_name": "SessionStart", "session_id": "{sid}", "cwd": "{cwd}", "source": "startup"},
     {"hook_event_name": "BeforeAgent", "session_id": "{sid}", "cwd": "{cwd}",
      "prompt": "<hook_context>ws-close: websocket close frames</hook_context>\n\nwebsocket close?"},
     {"hook_event_name": "AfterTool", "session_id": "{sid}", "cwd": "{cwd}", "tool_name": "read_file",
      "tool_input": {"file_path": "{cwd}/src/store.py"}, "tool_response": {"llmContent": "x"}}),
    ("copilot", ("sessionStart", "userPromptSubmitted", "postToolUse"),
     {"sessionId": "{sid}", "timestamp": 1, "cwd": "{cwd}", "source": "new"},
     {"sessionId": "{sid}", "timestamp": 1, "cwd": "{cwd}", "prompt": "websocket close?"},
     {"sessionId": "{sid}", "timestamp": 1, "cwd": "{cwd}", "toolName": "view",
      "toolArgs": {"path": "{cwd}/src/store.py"}, "toolResult": {"resultType": "success", "textResultForLlm": "x"}}),
]


def fill(obj, **kw):
    return json.loads(json.dumps(obj).replace("{sid}", kw["sid"]).replace("{cwd}", kw["cwd"]))


def text_of(agent, out, event):
    if agent == "copilot":
        assert set(out) == {"additionalContext"}, out
        return out["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == event, out
    return out["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("agent, events, start, prompt, tool", CASES, ids=[c[0] for c in CASES])
def test_route_answers_each_agent_in_its_shape(seeded, agent, events, start, prompt, tool):
    daemon, cwd = seeded
    events = events or (None, None, None)
    st, out = hook(daemon, agent, fill(start, sid="a-1", cwd=cwd), events[0])
    assert st == 200 and text_of(agent, out, "SessionStart").startswith("Session: ")
    # a second session of the agent, so that what the preload showed is not held back
    st, out = hook(daemon, agent, fill(prompt, sid="a-2", cwd=cwd), events[1])
    assert st == 200 and "ws-close" in text_of(agent, out, prompt.get("hook_event_name"))
    st, out = hook(daemon, agent, fill(tool, sid="a-2", cwd=cwd), events[2])
    assert st == 200 and "store-lock" in text_of(agent, out, tool.get("hook_event_name"))


def test_gemini_prompt_with_only_kgds_own_context_recalls_nothing(seeded):
    daemon, cwd = seeded
    payload = {"hook_event_name": "BeforeAgent", "session_id": "g-9", "cwd": cwd,
               "prompt": "<hook_context>- ws-close: websocket close frames carry a status code</hook_context>\n\nhi"}
    st, hdrs, data = daemon.request("POST", "/api/hooks?agent=gemini", payload)
    assert (st, data) == (200, b"")


@pytest.mark.parametrize("query", ["agent=cursor", "agent=", "agent=CLAUDE", "agent=codex&event=" + "x" * 65])
def test_route_refuses_an_unknown_agent(daemon, query):
    st, out = daemon.json("POST", "/api/hooks?" + query, {"hook_event_name": "SessionStart"})
    if query == "agent=":  # an empty agent is the default one
        assert st == 200
        return
    assert st == 400
    if "cursor" in query or "CLAUDE" in query:
        assert "claude, codex, gemini, copilot" in out["error"]


@pytest.mark.parametrize("body", [b"[1]", b"not json", b"", b'"x"'])
@pytest.mark.parametrize("agent", ["codex", "gemini", "copilot"])
def test_route_refuses_a_body_that_is_not_an_object(daemon, agent, body):
    st, _, data = daemon.request("POST", "/api/hooks?agent=" + agent, body)
    assert st == 400 and "error" in json.loads(data)


@pytest.mark.parametrize("agent", ["codex", "gemini", "copilot"])
def test_route_hostile_fields_answer_an_empty_200(daemon, agent):
    for payload in ({"hook_event_name": 5}, {"sessionId": ["x"], "cwd": 7, "prompt": {"a": 1}},
                    {"hook_event_name": "PostToolUse", "session_id": "x", "cwd": "/tmp", "tool_name": "Bash",
                     "tool_input": {"command": "cat " + "a" * 200000}},
                    {"sessionId": "x", "cwd": "/tmp", "toolName": "bash", "toolArgs": "{" * 100000}):
        st, hdrs, data = daemon.request("POST", "/api/hooks?agent=" + agent, payload)
        assert (st, data) == (200, b""), (payload, data[:200])


# ---- `kgd hook --agent`

def test_command_hook_for_each_agent(seeded):
    daemon, cwd = seeded
    args = ("--root", daemon.root, "--port", daemon.port)
    codex = {"hook_event_name": "PostToolUse", "session_id": "x-1", "cwd": cwd, "tool_name": "Bash",
             "tool_input": {"command": "cat src/store.py"}, "tool_response": "x"}
    code, out, err, _ = run_kgd("hook", "--agent", "codex", *args, stdin=json.dumps(codex).encode())
    assert code == 0 and "store-lock" in json.loads(out)["hookSpecificOutput"]["additionalContext"], err
    copilot = {"sessionId": "c-1", "timestamp": 1, "cwd": cwd, "prompt": "why does the websocket close?"}
    code, out, err, _ = run_kgd("hook", "--agent", "copilot", "--event", "userPromptSubmitted", *args,
                                stdin=json.dumps(copilot).encode())
    assert code == 0 and "ws-close" in json.loads(out)["additionalContext"], err
    gemini = {"hook_event_name": "SessionStart", "session_id": "g-1", "cwd": cwd, "source": "startup"}
    code, out, err, _ = run_kgd("--root", daemon.root, "hook", "--agent=gemini", "--port", daemon.port,
                                stdin=json.dumps(gemini).encode())  # through the full command line too
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["additionalContext"].startswith("Session: "), err


@pytest.mark.parametrize("args", [("--agent", "cursor"), ("--agent", "codex", "--event", "bad event!")])
def test_command_hook_with_a_bad_agent_or_event_says_so_and_exits_0(tmp_path, args):
    code, out, err, _ = run_kgd("hook", "--root", tmp_path / "root", *args, stdin=b'{"hook_event_name": "Stop"}')
    assert code == 0 and out == "" and "no context added" in err
    assert not (tmp_path / "root").exists()  # nothing started for it


@pytest.mark.parametrize("argv", [("hook", "--help"), ("hook", "-h"), ("hook", "--agent", "codex", "--help")])
def test_command_hook_help_does_not_wait_on_stdin(argv):
    code, out, err, took = run_kgd(*argv, stdin=None, timeout=20)
    assert code == 0 and "--agent" in out and "copilot" in out and took < 10


# ---- the result bounds of the agent that asks

def test_kg_read_over_mcp_is_bounded_for_the_client(daemon, project):
    w = daemon.call("kg_read", {"cwd": str(project)})["content"][0]["text"]
    sid = re.match(r"Session: (\S+)", w).group(1)
    for i in range(400):
        daemon.call("kg_put_node", {"session_id": sid, "level": "project", "id": "part-%04d-of-the-system" % i,
                                    "gist": "a gist about part %d of the system " % i + "g" * 150})
    sizes = {}
    for ua in ("codex-mcp-client/0.171.0", "copilot-cli/1.0.102", "node", "claude-code/2.1.3"):
        resp = daemon.rpc("tools/call", {"name": "kg_read", "arguments": {"cwd": str(project)}},
                          headers={"User-Agent": ua})
        sizes[ua] = len(resp["result"]["content"][0]["text"])
    assert sizes["codex-mcp-client/0.171.0"] <= 10000 < sizes["copilot-cli/1.0.102"] <= 18000
    assert 18000 < sizes["node"] <= 40000 and 18000 < sizes["claude-code/2.1.3"] <= 40000
    stateless = {"name": "kg_read", "arguments": {"cwd": str(project)}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "copilot-cli", "version": "1.0.102"}}}
    resp = daemon.rpc("tools/call", stateless, headers={"MCP-Protocol-Version": "2026-07-28",
                                                         "Mcp-Method": "tools/call", "Mcp-Name": "kg_read"})
    assert 10000 < len(resp["result"]["content"][0]["text"]) <= 18000
