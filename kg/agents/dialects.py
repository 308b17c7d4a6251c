"""What each coding agent's hooks send and read, and how much of a tool result it passes whole
(contract section 11). Data in one table, AGENTS; small pure functions around it.

Rules owned here:
- kgd's ambient loop (kg/agents/loop.py) speaks Claude Code's hook language. `normalise` turns an
  agent's hook input into that (its event -> one of START, PROMPT, TOOL, STOP; its field names
  -> Claude's; its file, search, web and shell tools -> Claude's Read/Edit/Write/Grep/Glob/
  WebFetch/WebSearch, or Bash/apply_patch where the agent reads files through its shell); `shape`
  turns the loop's answer into what that agent reads. What an agent does not support is simply
  absent from its row (Copilot shows no systemMessage, Claude Code's Bash is not parsed).
- The event comes from the caller when it names one (`?event=` / `--event`: Copilot's command
  input carries no event name), else from the input's own event field, else (Copilot) from the
  fields the input has. An event the agent's row does not name is no event (an empty answer).
- The client session ids of agents other than Claude Code are bound as "<agent>:<id>", so two
  agents can never share one binding by accident.
- Prompts: kgd's own earlier context, which Gemini CLI hands back inside <hook_context>...
  </hook_context> in the next prompt, is cut out before any matching (for every agent).
- Hook context: HOOK_CONTEXT_LIMITS gives the limit kgd's hook entries set for an agent that cuts
  hook context (Codex's additionalContextLimit), so the preload reaches its model whole.
- Result bounds: READ_LIMITS gives, per agent, the largest kg_read / kg_sync text it passes whole
  to its model (measured with the real programs: Codex cuts near 11,800 characters, Copilot saves
  anything over about 20,000 to a file); `agent_of_request` tells the agent from what an MCP
  request carries (User-Agent, clientInfo in params._meta).
"""

import json
import re

CLAUDE = "claude"
START, PROMPT, TOOL, STOP = "start", "prompt", "tool", "stop"

_CLAUDE_EVENTS = {"SessionStart": START, "UserPromptSubmit": PROMPT, "PostToolUse": TOOL, "Stop": STOP}

AGENTS = {
    "claude": {
        "events": _CLAUDE_EVENTS,
        "answer": "hookSpecificOutput",
        "system_message": True,
    },
    "codex": {  # Claude Code's events and shapes; files are read through its shell
        "events": _CLAUDE_EVENTS,
        "shell": {"Bash": "command"},
        "patch": {"apply_patch": "command"},
        "answer": "hookSpecificOutput",
        "system_message": True,
    },
    "gemini": {
        "events": {"SessionStart": START, "BeforeAgent": PROMPT, "AfterTool": TOOL, "AfterAgent": STOP},
        # agent tool -> (Claude's tool, {agent field: Claude field})
        "tools": {"read_file": ("Read", {"file_path": "file_path"}),
                  "write_file": ("Write", {"file_path": "file_path"}),
                  "replace": ("Edit", {"file_path": "file_path"}),
                  "grep_search": ("Grep", {"dir_path": "path"}),
                  "glob": ("Glob", {"dir_path": "path"}),
                  "web_fetch": ("WebFetch", {"prompt": "url"}),   # the first url of its prompt
                  "google_web_search": ("WebSearch", {"query": "query"})},
        "shell": {"run_shell_command": "command"},
        "answer": "hookSpecificOutput",
        "system_message": True,
    },
    "copilot": {
        # camelCase events (and the snake_case input of its PascalCase "VS Code compatible" ones)
        "events": {"sessionStart": START, "userPromptSubmitted": PROMPT, "postToolUse": TOOL, "agentStop": STOP,
                   "SessionStart": START, "UserPromptSubmit": PROMPT, "PostToolUse": TOOL, "Stop": STOP},
        "fields": {"sessionId": "session_id", "hookEventName": "hook_event_name", "toolName": "tool_name",
                   "toolArgs": "tool_input", "toolResult": "tool_response", "tool_result": "tool_response",
                   "stopHookActive": "stop_hook_active", "transcriptPath": "transcript_path",
                   "initialPrompt": "initial_prompt"},
        # without an event name: the first field present tells the event
        "infer": (("toolResult", TOOL), ("toolName", TOOL), ("prompt", PROMPT), ("stopReason", STOP),
                  ("stopHookActive", STOP), ("source", START)),
        "tools": {"view": ("Read", {"path": "file_path"}), "create": ("Write", {"path": "file_path"}),
                  "edit": ("Edit", {"path": "file_path"}), "grep": ("Grep", {"path": "path"}),
                  "glob": ("Glob", {"path": "path"}), "web_fetch": ("WebFetch", {"url": "url"})},
        "shell": {"bash": "command"},
        "answer": "top-level",
        "system_message": False,
        "source": {"new": "startup"},
    },
}
NAMES = tuple(AGENTS)

# Characters of a kg_read / kg_sync text each agent passes to its model whole (contract section 3
# bounds Claude Code's at 40,000).
READ_LIMITS = {"claude": 40000, "codex": 10000, "gemini": 40000, "copilot": 18000}

# Tokens of hook context an agent passes to its model whole, where the agent has such a limit and its
# hook entry can set it (contract section 13). Codex cuts a hook's additionalContext over its
# additionalContextLimit (default 2,500 tokens, counted as one per 4 bytes of UTF-8) into a file with
# a preview; kgd's largest hook context, the preload, is at most 10,000 characters, which is at most
# 40,000 bytes: 10,000 tokens never cut it, in any script. kgd's Codex hooks set this (measured with
# the real Codex 0.171.0: a 9,792-character preload of 10,161 bytes was cut at the default).
HOOK_CONTEXT_LIMITS = {"codex": 10000}

# What an MCP request carries that names its client: a lower-case piece of the User-Agent header
# or of clientInfo.name -> agent.
CLIENT_MARKS = (("codex", "codex"), ("gemini", "gemini"), ("copilot", "copilot"), ("claude", "claude"))

HOOK_CONTEXT = ("<hook_context>", "</hook_context>")
MAX_ARGS_TEXT = 1024 * 1024
_URL = re.compile(r"https?://[^\s<>\"'`)\]]{1,2048}")


def known(name):
    return isinstance(name, str) and name in AGENTS


def unknown_message(name):
    return "unknown agent %r; kgd's hooks know %s" % (str(name)[:40], ", ".join(NAMES))


class Call:
    """One hook event, normalised: its kind (START...), the agent's own event name, and the
    Claude-shaped payload the loop reads."""

    __slots__ = ("agent", "kind", "event", "payload", "shell")

    def __init__(self, agent, kind, event, payload):
        self.agent, self.kind, self.event, self.payload = agent, kind, event, payload
        spec = AGENTS[agent]
        self.shell = bool(spec.get("shell") or spec.get("patch"))  # its Bash / apply_patch calls are parsed


def normalise(agent, payload, event=None):
    """The agent's hook input -> Call, or None when it is no event of that agent."""
    spec = AGENTS.get(agent)
    if spec is None or not isinstance(payload, dict):
        return None
    events = spec["events"]
    if event is None:
        event = payload.get("hook_event_name", payload.get("hookEventName"))
    if event is None:
        for field, kind in spec.get("infer", ()):
            if field in payload:
                event = next(name for name, k in events.items() if k == kind)
                break
    kind = events.get(event) if isinstance(event, str) else None
    if kind is None:
        return None
    if agent == CLAUDE:
        return Call(agent, kind, event, payload)
    p = {spec.get("fields", {}).get(k, k): v for k, v in payload.items()}
    cid = p.get("session_id")
    if isinstance(cid, str) and cid.strip() and len(cid) + len(agent) < 200:
        p["session_id"] = "%s:%s" % (agent, cid)
    elif cid is not None:
        p["session_id"] = None
    p["hook_event_name"] = _CLAUDE_NAME[kind]
    source = p.get("source")
    if isinstance(source, str):
        p["source"] = spec.get("source", {}).get(source, source)
    if kind == TOOL:
        _tool(spec, p)
    return Call(agent, kind, event, p)


_CLAUDE_NAME = {kind: name for name, kind in _CLAUDE_EVENTS.items()}


def _tool(spec, p):
    """Map the agent's tool call onto Claude Code's tool names and fields, in place."""
    name, args = p.get("tool_name"), p.get("tool_input")
    if isinstance(args, str) and len(args) <= MAX_ARGS_TEXT:  # Copilot may send its args as JSON text
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    if not isinstance(name, str) or not isinstance(args, dict):
        p["tool_input"] = args if isinstance(args, dict) else None
        return
    p["tool_input"] = args
    if name in spec.get("shell", {}):
        p["tool_name"], p["tool_input"] = "Bash", {"command": args.get(spec["shell"][name])}
    elif name in spec.get("patch", {}):
        p["tool_name"], p["tool_input"] = "apply_patch", {"command": args.get(spec["patch"][name])}
    elif name in spec.get("tools", {}):
        claude, fields = spec["tools"][name]
        mapped = {}
        for theirs, ours in fields.items():
            value = args.get(theirs)
            if claude == "WebFetch" and theirs == "prompt":
                value = first_url(value)
            mapped[ours] = value
        p["tool_name"], p["tool_input"] = claude, mapped


def first_url(text):
    if not isinstance(text, str):
        return None
    m = _URL.search(text[:20000])
    return m.group(0).rstrip(".,;:!?") if m else None


def strip_hook_context(text):
    """text without <hook_context>...</hook_context> blocks (an unclosed one runs to the end)."""
    if not isinstance(text, str):
        return text
    start_tag, end_tag = HOOK_CONTEXT
    if start_tag not in text:
        return text
    out, i = [], 0
    while True:
        j = text.find(start_tag, i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = text.find(end_tag, j + len(start_tag))
        if k < 0:
            break
        i = k + len(end_tag)
    return "".join(out).strip()


def shape(call, out):
    """The loop's Claude-shaped answer -> what call.agent reads (None stays None)."""
    if out is None or call.agent == CLAUDE:
        return out
    spec = AGENTS[call.agent]
    answer = {}
    specific = out.get("hookSpecificOutput")
    if isinstance(specific, dict) and specific.get("additionalContext"):
        if spec["answer"] == "top-level":
            answer["additionalContext"] = specific["additionalContext"]
        else:
            answer["hookSpecificOutput"] = {"hookEventName": call.event,
                                            "additionalContext": specific["additionalContext"]}
    if out.get("decision") == "block" and out.get("reason"):
        answer["decision"], answer["reason"] = "block", out["reason"]
    if spec["system_message"] and out.get("systemMessage"):
        answer["systemMessage"] = out["systemMessage"]
    return answer or None


# ---- which agent is asking (for the result bounds)

def read_limit(agent):
    return READ_LIMITS.get(agent, READ_LIMITS[CLAUDE])


def agent_of_client(text):
    """The agent a User-Agent header or an MCP clientInfo name belongs to, or None."""
    if not isinstance(text, str):
        return None
    low = text[:300].lower()
    for mark, agent in CLIENT_MARKS:
        if mark in low:
            return agent
    return None


def agent_of_request(user_agent=None, params=None):
    """The agent an MCP request comes from: clientInfo in params._meta (the stateless revision),
    else its User-Agent; None when neither says."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict):
        for key in ("io.modelcontextprotocol/clientInfo", "clientInfo"):
            info = meta.get(key)
            if isinstance(info, dict):
                found = agent_of_client(info.get("name"))
                if found:
                    return found
    return agent_of_client(user_agent)


def session_agent(session):
    """The agent whose hooks bound this kgd session, or None."""
    hook = getattr(session, "hook", None)
    agent = hook.get("agent") if isinstance(hook, dict) else None
    return agent if known(agent) else None
