"""kg/agents/dialects.py and the one ambient loop (kg/agents/loop.py) for each agent (contract section 11): each
agent's events in its own input shape, the answer in the shape it reads; Gemini's <hook_context>
never matched; Codex's shell reads and patches recalled; Copilot's camelCase with or without an
event name; hostile input; kg_read / kg_sync bounded for the agent that asks."""

import json
import re

import pytest

from kg.agents import dialects as agents
from kg.agents import loop
from kg.api import mcp, tools
from kg.memory.store import Settings, Store
from kg.travel import team

T0 = 1_700_000_000.0


class Env:
    def __init__(self, tmp_path):
        self.t = [T0]
        self.proj = tmp_path / "work" / "proj"
        (self.proj / "kg").mkdir(parents=True)
        (self.proj / ".git").mkdir()
        self.file = self.proj / "kg" / "store.py"
        self.file.write_text("x")
        self.cwd = str(self.proj)
        store = Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9), clock=lambda: self.t[0])
        self.store = team.install(store).open()
        self.handle = loop.handler(self.store, env={})
        self.writer = self.store.start_session(self.cwd)

    def put(self, level, nid, gist, touches=None, notes=None):
        self.store.put_node(self.writer, level, nid, gist, notes=notes, touches=touches)


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.store.close()


# ---- each agent's hook input, as its program sends it

def claude_like(names):
    def make(kind, env, sid, **kw):
        p = {"session_id": sid, "transcript_path": "/tmp/t.jsonl", "cwd": env.cwd, "hook_event_name": names[kind]}
        p.update(kw)
        return p, None
    return make


CLAUDE_NAMES = {"start": "SessionStart", "prompt": "UserPromptSubmit", "tool": "PostToolUse", "stop": "Stop"}
GEMINI_NAMES = {"start": "SessionStart", "prompt": "BeforeAgent", "tool": "AfterTool", "stop": "AfterAgent"}
COPILOT_NAMES = {"start": "sessionStart", "prompt": "userPromptSubmitted", "tool": "postToolUse", "stop": "agentStop"}


def copilot(kind, env, sid, **kw):
    """Copilot CLI's camelCase input carries no event name: the hook command passes --event."""
    fields = {"source": "source", "prompt": "prompt", "tool_name": "toolName", "tool_input": "toolArgs",
              "tool_response": "toolResult", "stop_hook_active": "stopHookActive"}
    p = {"sessionId": sid, "timestamp": 1704614400000, "cwd": env.cwd}
    p.update({fields.get(k, k): v for k, v in kw.items()})
    if kind == "stop":
        p.update({"transcriptPath": "/tmp/t.jsonl", "stopReason": "end_turn"})
    return p, COPILOT_NAMES[kind]


MAKERS = {"claude": claude_like(CLAUDE_NAMES), "codex": claude_like(CLAUDE_NAMES),
          "gemini": claude_like(GEMINI_NAMES), "copilot": copilot}
NAMES = {"claude": CLAUDE_NAMES, "codex": CLAUDE_NAMES, "gemini": GEMINI_NAMES, "copilot": COPILOT_NAMES}


def read_call(agent, env):
    """(tool_name, tool_input) of reading the project's kg/store.py in that agent."""
    path = str(env.file)
    return {"claude": ("Read", {"file_path": path}),
            "codex": ("Bash", {"command": "sed -n '1,120p' kg/store.py"}),
            "gemini": ("read_file", {"file_path": path}),
            "copilot": ("view", {"path": path})}[agent]


def edit_call(agent, env):
    path = str(env.file)
    return {
        "claude": ("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}),
        "codex": (
            "apply_patch",
            {"command": "*** Begin Patch\n*** Update File: kg/store.py\n@@\n-x\n+y\n*** End Patch"},
        ),
        "gemini": ("replace", {"file_path": path, "old_string": "a", "new_string": "b"}),
        "copilot": ("edit", {"path": path, "old_str": "a", "new_str": "b"}),
    }[agent]


def send(env, agent, kind, sid="s-1", **kw):
    payload, event = MAKERS[agent](kind, env, sid, **kw)
    return env.handle(payload, agent, event)


def context(agent, out, kind):
    """The context text of an answer, checking the shape the agent reads."""
    assert isinstance(out, dict), out
    if agent == "copilot":
        assert set(out) == {"additionalContext"}, out
        return out["additionalContext"]
    assert set(out) <= {"hookSpecificOutput", "systemMessage"}, out
    assert out["hookSpecificOutput"]["hookEventName"] == NAMES[agent][kind]
    return out["hookSpecificOutput"]["additionalContext"]


AGENTS = ["claude", "codex", "gemini", "copilot"]


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_gets_the_preload_in_its_shape(env, agent):
    env.put("project", "store-lock", "one RLock guards every graph")
    out = send(env, agent, "start", source="new" if agent == "copilot" else "startup")
    text = context(agent, out, "start")
    assert text.startswith("Session: ") and "store-lock" in text
    assert ("systemMessage" in out) == (agent != "copilot")  # Copilot shows no systemMessage
    session = env.store.bind_client(agent + ":s-1" if agent != "claude" else "s-1", env.cwd)[0]
    assert text.splitlines()[0] == "Session: %s" % session.id
    assert session.hook["agent"] == agent


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_gets_prompt_recall_in_its_shape(env, agent):
    env.put("project", "ws-close", "websocket close frames carry a status code")
    text = context(agent, send(env, agent, "prompt", prompt="why does the websocket close early?"), "prompt")
    assert "ws-close" in text
    assert send(env, agent, "prompt", prompt="why does the websocket close early?") is None  # shown once


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_gets_file_recall_in_its_shape(env, agent):
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    name, args = read_call(agent, env)
    text = context(agent, send(env, agent, "tool", tool_name=name, tool_input=args, tool_response={}), "tool")
    assert "kg memory that may be relevant to kg/store.py" in text and "store-lock" in text


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_gets_the_stop_nudge_once(env, agent):
    name, args = edit_call(agent, env)
    for _ in range(loop.nudges.STOP_EDITS):
        send(env, agent, "tool", tool_name=name, tool_input=args, tool_response={})
    out = send(env, agent, "stop", stop_hook_active=False)
    assert out["decision"] == "block" and "kg_put_node" in out["reason"] and set(out) == {"decision", "reason"}
    assert send(env, agent, "stop", stop_hook_active=False) is None


@pytest.mark.parametrize("agent", AGENTS)
def test_a_kg_write_through_the_agent_means_no_stop_nudge(env, agent):
    name, args = edit_call(agent, env)
    for _ in range(loop.nudges.STOP_EDITS):
        send(env, agent, "tool", tool_name=name, tool_input=args, tool_response={})
    mcp_name = {"claude": "mcp__kg__kg_put_node", "codex": "mcp__kg__kg_put_node", "gemini": "kg_put_node",
                "copilot": "kg-kg_put_node"}[agent]
    send(env, agent, "tool", tool_name=mcp_name, tool_input={"id": "x"}, tool_response={})
    assert send(env, agent, "stop", stop_hook_active=False) is None


def test_the_agents_sessions_are_apart(env):
    """The same client id in two agents binds two kgd sessions."""
    ids = set()
    for agent in AGENTS:
        out = send(env, agent, "start", sid="same-id", source="startup")
        ids.add(context(agent, out, "start").splitlines()[0])
    assert len(ids) == 4


@pytest.mark.parametrize("agent, event", [
    ("gemini", "UserPromptSubmit"), ("gemini", "PostToolUse"), ("gemini", "Stop"),
    ("copilot", "BeforeAgent"), ("copilot", "preToolUse"), ("copilot", "sessionEnd"),
    ("codex", "BeforeAgent"), ("claude", "userPromptSubmitted"), ("codex", "PreToolUse"),
])
def test_events_the_agent_does_not_have_answer_nothing(env, agent, event):
    env.put("project", "ws-close", "websocket close frames carry a status code")
    payload = {"session_id": "s", "sessionId": "s", "cwd": env.cwd, "hook_event_name": event,
               "prompt": "why does the websocket close", "source": "startup"}
    assert env.handle(payload, agent) is None
    assert env.handle(payload, agent, event) is None


def test_an_unknown_agent_answers_nothing(env):
    assert env.handle({"session_id": "s", "cwd": env.cwd, "hook_event_name": "SessionStart"}, "cursor") is None
    assert agents.normalise("cursor", {}) is None


# ---- Gemini hands kgd's own context back inside <hook_context>

@pytest.mark.parametrize("agent", AGENTS)
def test_hook_context_is_never_matched(env, agent):
    env.put("project", "ws-close", "websocket close frames carry a status code")
    echoed = "<hook_context>Session: x\n- ws-close: websocket close frames carry a status code</hook_context>"
    assert send(env, agent, "prompt", prompt=echoed + "\n\nhello, please list the files") is None
    assert send(env, agent, "prompt", prompt=echoed) is None
    assert send(env, agent, "prompt", prompt="<hook_context>websocket close frames") is None  # never closed
    text = context(agent, send(env, agent, "prompt", prompt=echoed + "\n\nwhy does the websocket close?"), "prompt")
    assert "ws-close" in text


@pytest.mark.parametrize("agent", AGENTS)
def test_a_stop_reason_sent_back_as_a_prompt_is_not_matched(env, agent):
    """Gemini CLI (AfterAgent) and Copilot CLI (agentStop) continue with the reason as the next prompt."""
    env.put("project", "gotcha-list", "decisions gotchas and how things work in this codebase")
    name, args = edit_call(agent, env)
    for _ in range(loop.nudges.STOP_EDITS):
        send(env, agent, "tool", tool_name=name, tool_input=args, tool_response={})
    reason = send(env, agent, "stop", stop_hook_active=False)["reason"]
    assert send(env, agent, "prompt", prompt=reason) is None
    assert "gotcha-list" in context(agent, send(env, agent, "prompt", prompt="list the codebase gotchas"), "prompt")


@pytest.mark.parametrize("text, expected", [
    ("plain", "plain"),
    ("<hook_context>a</hook_context>b", "b"),
    ("a<hook_context>x</hook_context>b<hook_context>y</hook_context>c", "abc"),
    ("a<hook_context>x", "a"),
    ("a</hook_context>b", "a</hook_context>b"),
    (None, None),
    (5, 5),
])
def test_strip_hook_context(text, expected):
    assert agents.strip_hook_context(text) == expected


# ---- agent specifics

def test_copilot_without_an_event_name_is_told_by_its_fields(env):
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    env.put("project", "ws-close", "websocket close frames carry a status code")
    base = {"sessionId": "c-1", "timestamp": 1, "cwd": env.cwd}
    assert env.handle(dict(base, source="new"), "copilot")["additionalContext"].startswith("Session: ")
    env.store.forget_shown(env.store.bind_client("copilot:c-1", env.cwd)[0])
    out = env.handle(dict(base, prompt="why does the websocket close?"), "copilot")
    assert "ws-close" in out["additionalContext"]
    out = env.handle(dict(base, toolName="view", toolArgs={"path": str(env.file)},
                          toolResult={"resultType": "success", "textResultForLlm": "x"}), "copilot")
    assert "store-lock" in out["additionalContext"]
    assert env.handle(dict(base, stopReason="end_turn"), "copilot") is None  # no substantial work


def test_copilot_tool_args_as_json_text_and_its_snake_case_form(env):
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    out = env.handle({"sessionId": "c-2", "cwd": env.cwd, "toolName": "bash",
                      "toolArgs": json.dumps({"command": "cat kg/store.py", "description": "read"}),
                      "toolResult": {"resultType": "success"}}, "copilot", "postToolUse")
    assert "store-lock" in out["additionalContext"]
    out = env.handle({"hook_event_name": "PostToolUse", "session_id": "c-3", "cwd": env.cwd, "tool_name": "view",
                      "tool_input": {"path": str(env.file)}, "tool_result": {"result_type": "success"}}, "copilot")
    assert "store-lock" in out["additionalContext"]


def test_codex_reads_through_its_shell_and_edits_by_patch(env):
    (env.proj / "kg" / "other.py").write_text("y")
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    env.put("project", "other-mod", "other.py holds the other things", touches=["kg/other.py"])
    out = send(env, "codex", "tool", tool_name="Bash", tool_input={"command": "nl -ba kg/store.py | head -50"},
               tool_response="...")
    assert "store-lock" in context("codex", out, "tool")
    patch = "*** Begin Patch\n*** Update File: kg/other.py\n@@\n-y\n+z\n*** End Patch\n"
    out = send(env, "codex", "tool", tool_name="apply_patch", tool_input={"command": patch}, tool_response="ok")
    assert "other-mod" in context("codex", out, "tool")
    assert env.store.bind_client("codex:s-1", env.cwd)[0].hook["edits"] == 1


def test_claude_code_bash_stays_unparsed(env):
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    assert send(env, "claude", "tool", tool_name="Bash", tool_input={"command": "cat kg/store.py"}) is None


def test_shell_reads_share_one_budget(env):
    for f in ("a", "b", "c"):
        (env.proj / "kg" / (f + ".py")).write_text("x")
        for i in range(3):
            env.put("project", "%s-%d" % (f, i), "note %d about %s.py " % (i, f) + "q" * 300, touches=["kg/%s.py" % f])
    out = send(env, "codex", "tool", tool_name="Bash", tool_input={"command": "cat kg/a.py kg/b.py kg/c.py"})
    text = context("codex", out, "tool")
    assert len(re.findall(r"^- \[", text, re.M)) <= loop.FILE_NODES and len(text) <= loop.FILE_CHARS


def test_gemini_tools(env):
    env.put("project", "store-lock", "one RLock guards every graph", touches=["kg/store.py"])
    env.put("user", "re-docs", "python re module notes", touches=["https://docs.python.org/3/library/re.html"])
    out = send(env, "gemini", "tool", tool_name="run_shell_command", tool_input={"command": "grep -n lock kg/store.py"},
               tool_response={"llmContent": "x"})
    assert "store-lock" in context("gemini", out, "tool")
    out = send(env, "gemini", "tool", tool_name="web_fetch",
               tool_input={"prompt": "Summarise https://docs.python.org/3/library/re.html please"})
    assert "re-docs" in context("gemini", out, "tool")


def test_the_usage_guide_in_the_preload_names_every_tool_the_instructions_name(env):
    """Copilot CLI does not show its model kgd's MCP instructions: the preload must carry them."""
    text = context("copilot", send(env, "copilot", "start", source="new"), "start")
    head = text.split("\n\n", 1)[0]
    for name in set(re.findall(r"kg_[a-z_]+", mcp.INSTRUCTIONS)):
        assert name in head, name
    for idea in ("kebab-case", "gist", "notes", "touches", "update", "kg_search first", "wrong"):
        assert idea in head, idea


# ---- hostile input: nothing, never an exception

HOSTILE = [
    {"sessionId": 5, "cwd": "/tmp", "prompt": "websocket close"},
    {"sessionId": "x", "cwd": ["/tmp"], "prompt": "websocket close"},
    {"sessionId": "x" * 5000, "cwd": "/tmp", "source": "new"},
    {"sessionId": "x", "cwd": "/tmp", "prompt": {"text": "websocket"}},
    {"sessionId": "x", "cwd": "/tmp", "toolName": 7, "toolArgs": {"path": "/etc/passwd"}},
    {"sessionId": "x", "cwd": "/tmp", "toolName": "view", "toolArgs": "not json"},
    {"sessionId": "x", "cwd": "/tmp", "toolName": "view", "toolArgs": [1, 2]},
    {"sessionId": "x", "cwd": "/tmp", "toolName": "bash", "toolArgs": {"command": ["cat", 5]}},
    {"sessionId": "x", "cwd": "/tmp", "toolName": "bash", "toolArgs": {"command": "cat " + "a" * 100000}},
    {"sessionId": "x", "cwd": "/tmp", "toolName": "bash", "toolArgs": "{" * 100000},
    {"hook_event_name": 5}, {"hookEventName": ["x"]}, {}, [], "text", None,
]


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("payload", HOSTILE)
@pytest.mark.parametrize("event", [None, "postToolUse", "AfterTool", "PostToolUse", "x" * 100])
def test_hostile_input_answers_nothing(env, agent, payload, event):
    assert env.handle(payload, agent, event) is None


@pytest.mark.parametrize("agent", AGENTS)
def test_huge_prompt_answers_quickly(env, agent):
    import time
    env.put("project", "ws-close", "websocket close frames carry a status code")
    t0 = time.monotonic()
    send(env, agent, "prompt", prompt="<hook_context>" + "websocket " * 200000 + "</hook_context>" + "a" * 10 ** 6)
    assert time.monotonic() - t0 < 2.0


# ---- which agent asks, and its result bounds

@pytest.mark.parametrize("user_agent, params, expected", [
    ("codex-mcp-client/0.171.0", None, "codex"),
    ("copilot-cli/1.0.102", None, "copilot"),
    ("node", None, None),                                   # Gemini CLI's MCP client sends no name
    ("claude-code/2.1.3", None, "claude"),
    (None, {"_meta": {"io.modelcontextprotocol/clientInfo": {"name": "copilot-cli", "version": "1"}}}, "copilot"),
    ("node", {"_meta": {"io.modelcontextprotocol/clientInfo": {"name": "gemini-cli-mcp-client"}}}, "gemini"),
    ("codex-mcp-client (kgd stdio)", {"_meta": {"io.modelcontextprotocol/clientInfo": {"name": 5}}}, "codex"),
    (None, {"_meta": "x"}, None),
    (None, None, None),
    ("x" * 10000 + "codex", None, None),                   # only the head of a header is looked at
])
def test_agent_of_request(user_agent, params, expected):
    assert agents.agent_of_request(user_agent, params) == expected


def _big(env, n=600):
    for i in range(n):
        env.put("project", "node-%04d-%s" % (i, "x" * 40), "a gist about part %d of the system " % i + "g" * 150)


@pytest.mark.parametrize("agent, limit", [("codex", 10000), ("copilot", 18000), ("gemini", 40000),
                                          ("claude", 40000), (None, 40000)])
def test_kg_read_is_bounded_for_the_agent_that_asks(env, agent, limit):
    _big(env)
    assert agents.read_limit(agent) == limit
    out = tools.call(env.store, "kg_read", {"cwd": env.cwd}, agent=agent)
    text = out["content"][0]["text"]
    assert limit - 10000 < len(text) <= limit, len(text)
    assert "not listed in full to fit the context" in text  # says what it left out
    sid = text.splitlines()[0].split()[1]
    ids = ["node-%04d-%s" % (i, "x" * 40) for i in range(200)]
    text = tools.call(env.store, "kg_read", {"session_id": sid, "ids": ids}, agent=agent)["content"][0]["text"]
    assert len(text) <= limit and "read but not shown to fit the context" in text
    structured = tools.call(env.store, "kg_read", {"session_id": sid}, structured=True, agent=agent)
    assert len(json.dumps(structured["structuredContent"], ensure_ascii=False, separators=(",", ":"))) <= limit


def test_a_session_bound_by_codex_hooks_reads_within_codex_bound(env):
    _big(env)
    text = context("codex", send(env, "codex", "start", source="startup"), "start")
    sid = text.splitlines()[0].split()[1]
    out = tools.call(env.store, "kg_read", {"session_id": sid})  # no User-Agent tells: the binding does
    assert len(out["content"][0]["text"]) <= agents.READ_LIMITS["codex"]
    out = tools.call(env.store, "kg_read", {"session_id": sid}, agent="claude")  # the request wins
    assert len(out["content"][0]["text"]) > agents.READ_LIMITS["codex"]


@pytest.mark.parametrize("agent", ["codex", "copilot", None])
def test_kg_sync_is_bounded_for_the_agent_that_asks(env, agent):
    reader = env.store.start_session(env.cwd)
    _big(env)
    out = tools.call(env.store, "kg_sync", {"session_id": reader.id}, agent=agent)
    text = out["content"][0]["text"]
    assert len(text) <= agents.read_limit(agent) and "cut to fit the context" in text


def test_mcp_tools_call_takes_the_agent_from_the_request(env):
    _big(env)
    server = mcp.Server(env.store)
    params = {"name": "kg_read", "arguments": {"cwd": env.cwd}}
    for ua, limit in (("codex-mcp-client/0.171.0", 10000), ("copilot-cli/1.0.102", 18000), ("node", 40000)):
        req = mcp.Request(user_agent=ua)
        text = server.dispatch("tools/call", params, False, req)["content"][0]["text"]
        assert limit - 10000 < len(text) <= limit, (ua, len(text))
