"""End to end with the real Codex CLI, Gemini CLI and Copilot CLI (pinned in tests/agents/<name>) against kgd.

Each agent runs headless (`codex exec`, `gemini -p`, `copilot -p`) with a throwaway HOME configured by
`kgd hooks install --agent NAME` (its MCP entry and kgd's command hooks; Copilot a second time with
HTTP hooks to /api/hooks), against a scripted fake model on loopback that records every request
(tests/agents/fake_model.py), in a private network namespace where the host allows it. The MCP
traffic goes through a tap that keeps kgd's own answers, so "whole" is checked against what kgd sent.
Per agent, two runs on one seeded graph (contract sections 8 and 11):

- run A, an unrelated prompt: the model calls kg_read (with the preload's session id, as the usage
  guide says; else with cwd), then reads a source file with the agent's own tool (Codex: `cat` through
  its shell tool), then answers;
- run B, a prompt naming an archived node's words: the model answers at once.

Asserted from what the model received: the usage guide in the conversation itself (not only in tool
definitions), the preload (`Session: <id>` of a live kgd session and active knowledge) before the
first turn; kg_read's result as kgd's text (not JSON), whole (not cut, not moved to a file); the
archived node's recall after run B's prompt (and the node active again); the file's node after the
file read; no archived node recalled on words it shares only with the preload; nothing leaving
loopback. What each agent showed the model is in tests/agents/README.md.

Skips (with the reason) where node/npm or the pinned package is missing (`cd tests/agents/<name> &&
npm ci`).
"""

import json
import os
import sys

import pytest

from helpers import Daemon

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "agents"))
import harness  # noqa: E402
from fake_model import say  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT_A = "Hello there, start working."
FINAL_A = "Memory used."
ZEBRA_ID = "okavango-zebra-crossing"
ZEBRA_GIST = "Zebra herds cross the Okavango delta when the flood pulse peaks in July"
ZEBRA_PROMPT = "When do the zebra herds cross the Okavango delta?"
FILE = "src/billing_ledger.py"
FILE_ID = "ledger-rounding"
FILE_GIST = "Ledger totals round half-even because the bank reconciliation rejects half-up sums"
DECOY_ID = "commit-message-style"  # shares words only with the preloaded user node
DECOY_GIST = "Honest commit messages name the subsystem first and keep small commits reviewed the same day"
USER_GIST = "The user prefers small commits with honest messages"
FILLERS = 1000
MAX_TOKENS = 40000  # room for about 600 active fillers: kg_read's natural text is well over 40,000 chars
INSTRUCTIONS_HEAD = "kgd is your long-term memory"  # kgd's MCP instructions


def filler(i):
    return ("gear-%04d" % i, "Seeded fact %d: the gearbox assembly line keeps its torque sensor readings in "
                             "station %03d buffers for the nightly report" % (i, i % 997))


def seed(daemon, project):
    """The graph both runs share: one user node; archived, oldest and unconnected (so archived first):
    the zebra node, the file's node (touches the file) and the decoy; then FILLERS newer nodes."""
    def put(level, nid, gist, touches=()):
        status, obj = daemon.json("PUT", "/api/nodes/%s/%s" % (level, nid), {
            "gist": gist, "touches": list(touches), "project_path": str(project)})
        assert status == 200, obj
    put("user", "prefers-small-commits", USER_GIST)
    put("project", ZEBRA_ID, ZEBRA_GIST)
    put("project", FILE_ID, FILE_GIST, [str(project / FILE)])
    put("project", DECOY_ID, DECOY_GIST)
    for i in range(FILLERS):
        put("project", *filler(i))
    states = node_states(daemon, project)
    for nid in (ZEBRA_ID, FILE_ID, DECOY_ID):
        assert states[("project", nid)] == "archived", (nid, states[("project", nid)])
    return states


def gist_probe(nid):
    """A piece of a seeded project node's gist that names it alone (gists may be shortened when shown)."""
    fixed = {ZEBRA_ID: ZEBRA_GIST, FILE_ID: FILE_GIST, DECOY_ID: DECOY_GIST}
    if nid in fixed:
        return fixed[nid][:60]
    return "Seeded fact %d:" % int(nid.split("-")[1])


def archived(states):
    return sorted(nid for (lvl, nid), st in states.items() if lvl == "project" and st == "archived")


def node_states(daemon, project):
    status, g = daemon.json("GET", "/api/graph?project_path=" + str(project))
    assert status == 200, g
    return {(lvl, n["id"]): n["state"] for lvl in ("user", "project") for n in g[lvl]["nodes"]}


BENCHES = {"codex": ("codex", "install"), "gemini": ("gemini", "install"), "copilot": ("copilot", "install"),
           "copilot-http": ("copilot", "write")}


@pytest.fixture(scope="module", params=sorted(BENCHES))
def runs(request, tmp_path_factory):
    """Both runs of one agent on a freshly seeded graph: {"agent", "version", "A", "B", "daemon", ...}.
    Configured by `kgd hooks install --agent NAME`, and Copilot once more with HTTP hooks."""
    name, setup = BENCHES[request.param]
    agent = harness.AGENTS[name]
    version, why = agent.version()
    if version is None:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp(request.param)
    project = tmp / "work" / "myproj"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    (project / FILE).write_text("def total(lines):\n    return round(sum(lines), 2)\n")
    daemon = Daemon(tmp / "root", args=["--max-tokens", str(MAX_TOKENS)],
                    env={"KG_STRUCTURED_OUTPUT": "0", "KG_GRACE_PERIOD_DAYS": "0"}).start()
    bench = None
    try:
        states = seed(daemon, project)
        cwd = project / "src"
        file_path = str(project / FILE)

        def kg_read(turn, state):  # as the usage guide says: the preload's session, else cwd
            args = {"session_id": state["session_id"]} if state["session_id"] else {"cwd": str(cwd)}
            return harness.call(agent.tool(turn, "kg_read"), args)
        steps = [kg_read, lambda turn, state: agent.read_file(turn, file_path)]
        bench = harness.Bench(agent, daemon, tmp / "home", setup)
        out = {"name": request.param, "agent": agent, "version": version, "daemon": daemon, "bench": bench,
               "archived": archived(states)}
        out["A"] = bench.run(PROMPT_A, harness.script(agent, steps, FINAL_A), cwd, artifacts=str(tmp / "A"))
        assert out["A"].proc.returncode == 0, out["A"].describe()
        out["states_between"] = node_states(daemon, project)
        out["archived_between"] = archived(out["states_between"])
        out["B"] = bench.run(ZEBRA_PROMPT, lambda turn: [say("Noted.")], cwd, artifacts=str(tmp / "B"))
        assert out["B"].proc.returncode == 0, out["B"].describe()
        out["states_after"] = node_states(daemon, project)
        out["artifacts"] = str(tmp)
        yield out
    finally:
        if bench:
            bench.close()
        daemon.stop()


def first_turn(r, run="A"):
    turns = r[run].main_turns(r["agent"])
    assert turns, "the model was never asked a turn with kg tools offered:\n" + r[run].describe()
    return turns[0]


def model_got_json(text):
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def tail(text, n=1500):
    return text if len(text) <= n else "...%s" % text[-n:]


def observe(r):
    """What reached the model in both runs, as figures (also written to tests/artifacts/agents-<name>.json)."""
    agent, a, b = r["agent"], r["A"], r["B"]
    turns = a.main_turns(agent)
    first = turns[0].text if turns else ""
    context = turns[0].context if turns else ""
    sent = a.mcp.tool_results("kg_read")
    kgd_text = sent[0][1] if sent else ""
    got = ([c.get("text") for c in turns[-1].calls if c["name"].endswith("kg_read")] or [None])[0] if turns else None
    got = got or ""
    at = got.find(kgd_text) if kgd_text else -1
    after_read = [t for t in turns if len(t.calls) >= 2]
    b_turns = b.main_turns(agent)

    def archived_in(text, ids):
        return [nid for nid in ids if gist_probe(nid) in text]
    return {
        "agent": r["name"], "version": r["version"], "netns": a.netns and b.netns,
        "seconds": [round(a.seconds, 1), round(b.seconds, 1)],
        "mcp_clients": a.mcp.client_names(),
        "model_requests": [len(a.requests), len(b.requests)],
        "instructions_via_mcp": INSTRUCTIONS_HEAD in first,
        "usage_guide_in_context": all(w in context for w in ("kg_put_node", "session_id", "kg_search")),
        "preload_session": bool(harness.SESSION.search(first)),
        "preload_knowledge": USER_GIST in first or filler(FILLERS - 1)[1] in first,
        "kg_read_chars_kgd": len(kgd_text), "kg_read_chars_model": len(got),
        "kg_read_whole": at >= 0, "kg_read_json": model_got_json(got),
        "kg_read_wrapper": [got[:at], got[at + len(kgd_text):]] if at >= 0 else None,
        "prompt_recall": bool(b_turns) and ZEBRA_GIST in b_turns[0].text,
        "file_recall": bool(after_read) and FILE_GIST in after_read[0].text,
        "file_tool": turns[-1].calls[1]["name"] if turns and len(turns[-1].calls) > 1 else None,
        "archived_before_the_read": sorted({n for t in turns if len(t.calls) < 2
                                            for n in archived_in(t.text, r["archived"])}),
        "archived_in_run_b": sorted({n for t in b_turns for n in archived_in(t.text, r["archived_between"])}),
        "refused_proxy_attempts": a.attempts + b.attempts,
        "http_hooks": [(path.partition("?")[2] or (i or {}).get("hook_event_name"), bool(o))
                       for path, i, o in a.mcp.hooks() + b.mcp.hooks()],
    }


@pytest.fixture(scope="module")
def seen(runs):
    obs = observe(runs)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts", "agents-%s.json" % obs["agent"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(dict(obs, artifacts=runs["artifacts"]), f, indent=1)
    return obs


def test_the_agent_answers_with_kgd_tools_offered(runs):
    turns = runs["A"].main_turns(runs["agent"])
    assert turns and FINAL_A in runs["A"].proc.stdout, runs["A"].describe()
    names = [c["name"] for c in turns[-1].calls]
    assert len(names) == 2 and names[0].endswith("kg_read"), names


def test_usage_guide_reaches_the_model(runs, seen):
    """Not only in the tool definitions: the conversation tells the model how to use its memory (Copilot
    shows no MCP instructions, so the preload carries the guide)."""
    assert seen["usage_guide_in_context"], tail(first_turn(runs).context)


def test_preload_before_the_first_turn(runs, seen):
    text = first_turn(runs).text
    sids = harness.SESSION.findall(text)
    assert sids, "no `Session: <id>` before the first turn: " + tail(text)
    assert any(runs["daemon"].json("GET", "/api/sessions/" + s)[0] == 200 for s in sids), sids
    assert seen["preload_knowledge"], "no active knowledge in the preload: " + tail(text)
    for gist in (ZEBRA_GIST, FILE_GIST, DECOY_GIST):
        assert gist not in text  # archived: never preloaded


def test_kg_read_reaches_the_model_whole_as_kgd_text(runs, seen):
    assert seen["kg_read_chars_kgd"] > 5000, runs["A"].mcp.exchanges[-3:]
    assert seen["kg_read_chars_model"], "the agent never sent the model the kg_read result"
    assert not seen["kg_read_json"]
    assert seen["kg_read_whole"], "kgd sent %d chars; the model got %d" % (
        seen["kg_read_chars_kgd"], seen["kg_read_chars_model"])


def test_prompt_naming_archived_words_brings_its_recall(runs, seen):
    assert runs["states_between"][("project", ZEBRA_ID)] == "archived"
    assert seen["prompt_recall"], tail(first_turn(runs, "B").text)
    assert runs["states_after"][("project", ZEBRA_ID)] == "active"  # a recall counts as a read


def test_file_read_brings_the_files_nodes(runs, seen):
    turns = runs["A"].main_turns(runs["agent"])
    assert not any(FILE_GIST in t.text for t in turns if len(t.calls) < 2), "the file's node came before the read"
    assert seen["file_recall"], tail(turns[-1].text)


def test_only_what_the_prompt_or_file_names_is_recalled(seen):
    """No archived node reaches the model on words it shares only with the preload (Gemini hands its
    prompt hook kgd's own preload back; the decoy shares words with the preloaded user node alone):
    before the file read of run A (an unrelated prompt) none does, in run B only the node the
    prompt names."""
    assert seen["archived_before_the_read"] == []
    assert set(seen["archived_in_run_b"]) <= {ZEBRA_ID}


def test_nothing_leaves_loopback(runs, seen):
    assert seen["refused_proxy_attempts"] == []
    for run in ("A", "B"):
        r = runs[run]
        hosts = {req["headers"].get("Host") or req["headers"].get("host") for req in r.requests}
        assert hosts <= {"127.0.0.1:%d" % runs["bench"].fake.port}, hosts
        if not r.netns:
            pytest.skip("no private network namespace here (%s): checked the proxy and hosts only" % harness.NETNS_WHY)
