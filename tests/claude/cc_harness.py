"""Running the real Claude Code CLI offline, scripting its model, and reading what the model was sent.

Rules owned here: Claude Code runs from tests/claude/node_modules (the version package-lock.json
pins) with a clean environment and a throwaway HOME, so nothing of the developer's own Claude set-up
(settings, hooks, MCP servers, keys) leaks in and nothing leaves the machine; the scripted model
loads deferred tools with ToolSearch before calling them; and what "the model received" means is
read from the recorded Messages API requests, never from Claude Code's own output.
"""

import json
import os
import re
import subprocess
import tempfile

from fake_anthropic import text_block, tool_use_block

HERE = os.path.dirname(os.path.abspath(__file__))
CLAUDE_BIN = os.path.join(HERE, "node_modules", ".bin", "claude")


def claude_version():
    """-> (version string, None) when the pinned claude runs here, else (None, why not)."""
    if not os.path.exists(CLAUDE_BIN):
        return None, ("tests/claude/node_modules has no claude binary: run (cd tests/claude && npm ci) "
                      "(needs node/npm; the platform binary comes in an optional dependency)")
    try:
        with tempfile.TemporaryDirectory() as home:
            out = subprocess.run([CLAUDE_BIN, "--version"], capture_output=True, text=True, timeout=60,
                                 env={"PATH": os.environ.get("PATH", ""), "HOME": home}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "the installed claude binary cannot run here: %r" % exc
    m = re.match(r"(\d+\.\d+\.\d+)", out.stdout.strip())
    if out.returncode != 0 or not m:
        return None, "the installed claude binary cannot run here (exit %d): %s" % (
            out.returncode, (out.stderr or out.stdout).strip()[:300])
    return m.group(1), None


def make_home(path, settings=None):
    """A throwaway HOME: onboarding done, optional ~/.claude/settings.json (hooks live there)."""
    os.makedirs(os.path.join(path, ".claude"), exist_ok=True)
    with open(os.path.join(path, ".claude.json"), "w") as f:
        json.dump({"hasCompletedOnboarding": True, "numStartups": 1}, f)
    if settings is not None:
        with open(os.path.join(path, ".claude", "settings.json"), "w") as f:
            json.dump(settings, f, indent=2)
    return str(path)


def run_claude(args, cwd, home, api_url, timeout=180, extra_env=None):
    """`claude -p ...` against the fake Messages API at api_url; -> CompletedProcess (text).
    extra_env: Claude Code's own switches a test sets (e.g. ENABLE_TOOL_SEARCH)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": "sk-ant-kgd-test-not-a-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    env.update(extra_env or {})
    return subprocess.run([CLAUDE_BIN] + list(args), cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def result_text(content):
    """The text a tool_result carries: Claude Code sends a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def tool_exchanges(bodies):
    """Every tool call of the conversation, in order, with the tool_result the model was sent
    (taken from the first request that carried it): dicts name, input, id, content, text, is_error."""
    calls, order = {}, []
    for body in bodies:
        for msg in body.get("messages", []):
            if not isinstance(msg.get("content"), list):
                continue
            for block in msg["content"]:
                if block.get("type") == "tool_use" and block["id"] not in calls:
                    calls[block["id"]] = {"name": block["name"], "input": block.get("input"), "id": block["id"]}
                    order.append(block["id"])
                elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                    call = calls[block["tool_use_id"]]
                    if "content" not in call:
                        call.update(content=block.get("content"), text=result_text(block.get("content")),
                                    is_error=bool(block.get("is_error")))
    return [calls[i] for i in order]


def request_text(body):
    """All the text of one request the model would read (system, messages, tool results)."""
    parts = []

    def walk(x):
        if isinstance(x, str):
            parts.append(x)
        elif isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for k in ("text", "content"):
                if k in x:
                    walk(x[k])
    walk(body.get("system"))
    walk(body.get("messages"))
    return "\n".join(parts)


SESSION_TEXT = re.compile(r"Session: ([A-Za-z0-9_-]+)")
SESSION_JSON = re.compile(r'"session_id"\s*:\s*"([A-Za-z0-9_-]+)"')


def session_id_in(text):
    """The kgd session id a result names (its `Session:` line, or a JSON field, so the script goes on)."""
    m = SESSION_TEXT.search(text or "") or SESSION_JSON.search(text or "")
    return m.group(1) if m else None


class ScriptedModel:
    """The model's turns: load the kg tools with ToolSearch when Claude Code defers them, then make
    the planned calls one per turn, then answer `final`. A plan step is (tool name, args) where args
    may be a function of the state dict {"session_id", "results": [texts so far]}; a step may also
    carry a callable run just before the call is issued (to change the world between turns)."""

    def __init__(self, plan, final="Done."):
        self.plan = list(plan)
        self.final = final
        self.deferred = None  # whether the first main request listed kg tools only by name

    def __call__(self, body):
        tools = {t.get("name") for t in body.get("tools") or []}
        if "ToolSearch" not in tools and not any(n.startswith("mcp__") for n in tools):
            return [text_block("ok")]  # a side request (title, summary): not the scripted thread
        made = tool_exchanges([body])
        kg_made = [c for c in made if c["name"] != "ToolSearch"]
        wanted = sorted({step[0] for step in self.plan})
        if self.deferred is None:
            self.deferred = not set(wanted) <= tools
        if not set(wanted) <= tools:
            if any(c["name"] == "ToolSearch" for c in made):
                raise AssertionError("ToolSearch did not load %s; tools: %s" % (wanted, sorted(tools)))
            return [tool_use_block("ToolSearch", {"query": "select:" + ",".join(wanted), "max_results": len(wanted)})]
        if len(kg_made) >= len(self.plan):
            return [text_block(self.final)]
        step = self.plan[len(kg_made)]
        state = {"session_id": None, "results": [c.get("text", "") for c in kg_made]}
        for c in kg_made:
            state["session_id"] = state["session_id"] or session_id_in(c.get("text"))
        if len(step) > 2 and step[2] is not None:
            step[2](state)
        args = step[1](state) if callable(step[1]) else step[1]
        return [tool_use_block(step[0], args)]
