"""What the model receives with Claude Code's tool search on, three ways (docs/agents.md quotes it).

    .venv/bin/python tests/claude/tool_search_figures.py

Runs the pinned `claude -p` with ENABLE_TOOL_SEARCH=true against a fresh kgd on --port 0 and the
scripted fake model, for one session that calls kg_read (cwd), kg_put_node and kg_search, with
kgd's MCP entry as:
- "deferred": `"alwaysLoad": false` (Claude Code then defers every kgd tool, whatever its _meta:
  what kgd got before it set any hint),
- "meta": no alwaysLoad (the entry `claude mcp add` writes): kgd's
  _meta["anthropic/alwaysLoad"] loads kg_read, kg_put_node and kg_search,
- "entry": `"alwaysLoad": true` (all eight tools loaded).
Prints per way: model requests, ToolSearch turns, the first request's characters, of which kgd's
tool schemas, and the characters of every request of the session together. Tokens are estimated
at 4 characters a token (the fake model cannot count Claude's tokens).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from cc_harness import ScriptedModel, claude_version, make_home, run_claude, tool_exchanges  # noqa: E402
from fake_anthropic import FakeAnthropic  # noqa: E402

WAYS = (("deferred", {"alwaysLoad": False}), ("meta", {}), ("entry", {"alwaysLoad": True}))


def start_kgd(root):
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "kgd.py"), "--port", "0", "--root", root],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={"PATH": os.environ["PATH"],
                                                                                    "HOME": root})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode("utf-8", "replace")
        if "listening on " in line:
            return proc, line.split("listening on ")[1].split()[0].rstrip("/")
    proc.kill()
    raise SystemExit("kgd did not start")


def one_way(url, extra_entry, tmp):
    project = os.path.join(tmp, "proj")
    os.makedirs(os.path.join(project, ".git"), exist_ok=True)
    plan = [("mcp__kg__kg_read", {"cwd": project}),
            ("mcp__kg__kg_put_node", lambda s: {"session_id": s["session_id"], "level": "project",
                                                "id": "tool-search-figure", "gist": "a figure for docs/agents.md"}),
            ("mcp__kg__kg_search", lambda s: {"query": "figure", "session_id": s["session_id"]})]
    fake = FakeAnthropic(ScriptedModel(plan, final="Done.")).start()
    try:
        cfg = os.path.join(tmp, "mcp.json")
        with open(cfg, "w") as f:
            json.dump({"mcpServers": {"kg": dict({"type": "http", "url": url + "/"}, **extra_entry)}}, f)
        proc = run_claude(["-p", "Use your memory.", "--output-format", "json", "--mcp-config", cfg,
                           "--strict-mcp-config", "--allowedTools", ",".join(sorted({s[0] for s in plan}))],
                          cwd=project, home=make_home(os.path.join(tmp, "home")), api_url=fake.url,
                          extra_env={"ENABLE_TOOL_SEARCH": "true"})
        if proc.returncode != 0 or fake.errors:
            raise SystemExit("claude failed: %s %s %s" % (proc.returncode, fake.errors, proc.stderr[-500:]))
        bodies = [b for b in fake.messages() if any(t.get("name") == "ToolSearch" for t in b.get("tools") or [])]
    finally:
        fake.stop()
    first = bodies[0]
    kg = [t for t in first["tools"] if t["name"].startswith("mcp__kg__")]
    return {"requests": len(bodies),
            "tool_searches": sum(1 for c in tool_exchanges(bodies) if c["name"] == "ToolSearch"),
            "loaded": sorted(t["name"][len("mcp__kg__"):] for t in kg),
            "first_chars": len(json.dumps(first)), "schema_chars": len(json.dumps(kg)) if kg else 0,
            "session_chars": sum(len(json.dumps(b)) for b in bodies)}


def main():
    version, why = claude_version()
    if version is None:
        raise SystemExit(why)
    print("Claude Code %s, ENABLE_TOOL_SEARCH=true, a session calling kg_read, kg_put_node, kg_search" % version)
    rows = []
    for name, entry in WAYS:
        with tempfile.TemporaryDirectory() as tmp:
            kgd, url = start_kgd(os.path.join(tmp, "root"))
            try:
                rows.append((name, one_way(url, entry, tmp)))
            finally:
                kgd.terminate()
                kgd.wait(10)
    base = rows[0][1]
    print("%-9s %8s %8s %12s %14s %14s  %s" % ("way", "requests", "searches", "first chars", "kgd schemas",
                                            "session chars", "loaded at once"))
    for name, r in rows:
        print("%-9s %8d %8d %12d %14s %14d  %s" % (
            name, r["requests"], r["tool_searches"], r["first_chars"],
            "%d (~%d tok)" % (r["schema_chars"], r["schema_chars"] // 4), r["session_chars"],
            ", ".join(r["loaded"]) or "-"))
    for name, r in rows[1:]:
        print("%s vs deferred: first request %+d chars (~%+d tokens), session %+d chars, %+d request(s)" % (
            name, r["first_chars"] - base["first_chars"], (r["first_chars"] - base["first_chars"]) // 4,
            r["session_chars"] - base["session_chars"], r["requests"] - base["requests"]))


if __name__ == "__main__":
    main()
