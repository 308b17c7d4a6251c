"""Contract section 12 with the real agents: Claude Code (tests/claude) and Codex CLI, Gemini CLI,
Copilot CLI (tests/agents), each against a real kgd (`--port 0`) in a real git repository and a
scripted model on loopback that records what it was sent.

Per agent, on a fresh daemon and repository: four nodes touch src/db.py, two as the whole file and
two as `src/db.py#connect`; two of them active (the preload shows them), two archived (only file
recall brings them). A commit changes connect; once REST says every one of them is `"stale"` (the
marks come with the maintenance beat), run A: the model's first request must carry the two active
nodes' gist lines with their marks, and after the model reads src/db.py with the agent's own tool
the next request must carry the file recall of the two archived nodes with their marks and the one
request to confirm or update; the model then puts each node it saw marked again, unchanged, through
kgd's MCP tool. REST shows no mark after that, and run B (a new session) preloads them unmarked.
Run C (a new session) preloads them current; then, before the model reads the file, a commit
changes close (not connect): the read brings back the two whole-file nodes the preload showed, with
their new mark and the request, and not the two `#connect` ones (their part did not change).

kgd's part of each HOME is what `kgd hooks install [--agent NAME]` writes (Copilot once more with HTTP
hooks, as tests/test_agents_e2e.py's copilot-http bench). Skips (with the reason)
where the pinned agent is not installed: `cd tests/claude && npm ci` / `cd tests/agents/NAME && npm ci`.
What each model received is written to tests/artifacts/agents-stale-NAME.json.
"""

import collections
import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import Daemon, git_env, run_kgd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "agents"))
sys.path.insert(0, os.path.join(HERE, "claude"))
import harness  # noqa: E402
from fake_model import call, say  # noqa: E402

from cc_harness import claude_version, make_home, request_text, run_claude, tool_exchanges  # noqa: E402
from fake_anthropic import FakeAnthropic, text_block, tool_use_block  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FILE = "src/db.py"
BEFORE = ("import time\n\n\ndef connect(url):\n    return open_socket(url)\n\n\n"
          "def close(conn):\n    conn.shutdown()\n")
AFTER = ("import time\n\n\ndef connect(url, retries=3):\n    return open_socket(url, retries)\n\n\n"
         "def close(conn):\n    conn.shutdown()\n")
LATER = AFTER.replace("conn.shutdown()", "conn.shutdown(wait=True)")  # run C: close changes, connect does not
LATER_MARK = "stale: src/db.py changed, 1 of 9 lines, 1 commit ago"
WHOLE_MARK = "stale: src/db.py changed, 2 of 9 lines, 1 commit ago"
PART_MARK = "stale: connect in src/db.py changed, 1 commit ago"
# a gist that already names src/db.py is not told it again (kg/core/staleness.py mark(changes, said))
SAID_MARK, SAID_LATER = "stale: changed, 2 of 9 lines, 1 commit ago", "stale: changed, 1 of 9 lines, 1 commit ago"
# id -> (gist, touch, mark once connect changed); put in this order, the archived ones first
ARCHIVED = {
    "db-connect-opens-raw-socket": ("connect opens one raw socket per call; there is no pool",
                                    FILE + "#connect", PART_MARK),
    "db-module-has-no-retries": ("the db module has no retry logic anywhere", FILE, WHOLE_MARK),
}
ACTIVE = {
    "db-connect-takes-a-url": ("connect takes a url and returns an open socket", FILE + "#connect", PART_MARK),
    "db-imports-time-for-close": ("src/db.py imports time only for the sleep in close", FILE, SAID_MARK),
}
NODES = dict(ARCHIVED, **ACTIVE)
FILLERS = 30
MAX_TOKENS = 400  # with FILLERS newer unconnected nodes, the first two put are archived
RECALL_HEAD = "kg memory that may be relevant to %s:" % FILE
# contract section 12's one short request (kg/agents/loop.py's STALE_ASK), as the model must read it
STALE_ASK = ("Marked stale: check them against the code, then kg_put_node each again (the same content "
             "confirms it) or fix it.")
# run -> (prompt: words no node has, so no prompt recall; the model's last answer)
RUNS = {"A": ("Hello there, start working.", "Memory checked."), "B": ("Hello again.", "Nothing to do."),
        "C": ("Good morning, carry on.", "Checked again.")}
# a node the model was shown marked: `- ID [stale: ...]` (preload) or `- [project] ID (stale: ...)` (recall)
MARKED = re.compile(r"^- (?:\[project\] )?([a-z0-9][a-z0-9-]*) [\[(](?:[a-z]+, )?stale: ", re.M)
SESSION = re.compile(r"Session: ([A-Za-z0-9_-]+)")


def preload_line(nid, marked=True):
    gist, _, mark = NODES[nid]
    return "- %s%s: %s" % (nid, " [%s]" % mark if marked else "", gist)


def recall_line(nid):
    """Shown by recall, an archived node is active: its line says only its mark."""
    gist, _, mark = NODES[nid]
    return "- [project] %s (%s): %s" % (nid, mark, gist)


def later_mark(nid):
    """Its mark after run C's commit (close changed): whole-file nodes only."""
    return SAID_LATER if NODES[nid][2] == SAID_MARK else LATER_MARK


# ---- the world: a real repository, a real daemon

def git(repo, env, *args):
    subprocess.run(["git"] + list(args), cwd=str(repo), env=env, check=True, capture_output=True, timeout=60)


def graph_nodes(daemon, project):
    status, g = daemon.json("GET", "/api/graph?project_path=" + str(project))
    assert status == 200, g
    return {n["id"]: n for n in g["project"]["nodes"]}


def marks(daemon, project):
    return {nid: (n.get("stale") or {}).get("mark") for nid, n in graph_nodes(daemon, project).items()
            if nid in NODES}


def wait_for(daemon, project, want, timeout=30.0):
    """Poll REST until the four nodes' marks are `want` ({id: mark or None}): the marks come with
    the maintenance beat, not with the request that changed things."""
    deadline = time.monotonic() + timeout
    got = marks(daemon, project)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = marks(daemon, project)
    return got


def make_world(tmp):
    """A git repository with src/db.py committed, a daemon, the nodes; then connect changed and
    committed, and the marks current. -> (daemon, project, git env, seconds from the commit to the
    marks on REST)."""
    project = tmp / "work" / "shop"
    (project / "src").mkdir(parents=True)
    env = git_env(tmp / "git-home")
    (project / FILE).write_text(BEFORE)
    (project / "README.md").write_text("shop\n")
    git(project, env, "init", "-q")
    git(project, env, "add", "-A")
    git(project, env, "commit", "-qm", "the db module")
    daemon = Daemon(tmp / "root", args=["--max-tokens", str(MAX_TOKENS)],
                    env={"KG_STRUCTURED_OUTPUT": "0", "KG_GRACE_PERIOD_DAYS": "0"}).start()
    try:
        def put(nid, gist, touches=()):
            status, obj = daemon.json("PUT", "/api/nodes/project/%s" % nid, {
                "gist": gist, "touches": list(touches), "project_path": str(project)})
            assert status == 200, obj
        for nid, (gist, touch, _) in ARCHIVED.items():
            put(nid, gist, [touch])
        for i in range(FILLERS):
            put("label-printer-%02d" % i, "Fact %02d: the shipping label printer queue flushes at noon" % i)
        for nid, (gist, touch, _) in ACTIVE.items():
            put(nid, gist, [touch])
        states = {nid: n["state"] for nid, n in graph_nodes(daemon, project).items()}
        assert {nid: states[nid] for nid in NODES} == dict(
            {nid: "archived" for nid in ARCHIVED}, **{nid: "active" for nid in ACTIVE}), states
        assert wait_for(daemon, project, {nid: None for nid in NODES}, timeout=2) == {nid: None for nid in NODES}
        (project / FILE).write_text(AFTER)
        git(project, env, "commit", "-qam", "connect retries")
        t0 = time.monotonic()
        want = {nid: mark for nid, (_, _, mark) in NODES.items()}
        got = wait_for(daemon, project, want)
        assert got == want, "REST after the commit: %s" % got
    except BaseException:
        daemon.stop()
        raise
    return daemon, project, env, time.monotonic() - t0


def change_close(daemon, project, env):
    """Run C, between the preload and the read: a commit changes close only; returns once REST
    marks the whole-file nodes (and not the `#connect` ones)."""
    (project / FILE).write_text(LATER)
    git(project, env, "commit", "-qam", "close waits")
    want = {nid: (later_mark(nid) if touch == FILE else None) for nid, (_, touch, _) in NODES.items()}
    got = wait_for(daemon, project, want)
    assert got == want, "REST after the second commit: %s" % got


def whole_file_ids():
    return sorted(nid for nid, (_, touch, _) in NODES.items() if touch == FILE)


# ---- the scripted model, one plan for every agent

def plan(text, calls_made):
    """What the model does next, from the text it was sent and how many tool calls it made: read
    src/db.py, then put again (unchanged) each node it was shown marked stale, one per turn, then
    answer. -> ("read", None) / ("put", id) / ("final", None)."""
    if calls_made == 0:
        return "read", None
    marked = sorted(set(MARKED.findall(text)) & set(NODES))
    if calls_made - 1 < len(marked):
        return "put", marked[calls_made - 1]
    return "final", None


def put_args(text, nid):
    m = SESSION.search(text)
    return {"session_id": m.group(1) if m else None, "level": "project", "id": nid, "gist": NODES[nid][0]}


class ClaudeModel:
    """Claude Code's model: ToolSearch for kg_put_node when Claude Code defers it, then `plan`."""

    PUT = "mcp__kg__kg_put_node"

    def __init__(self, file_path, final, work=True, before_read=None):
        self.file_path, self.final, self.work, self.before_read = file_path, final, work, before_read

    def __call__(self, body):
        tools = {t.get("name") for t in body.get("tools") or []}
        if "ToolSearch" not in tools and not any(n.startswith("mcp__") for n in tools):
            return [text_block("ok")]  # a side request (a title): not the conversation
        made = tool_exchanges([body])
        if self.PUT not in tools:
            if any(c["name"] == "ToolSearch" for c in made):
                raise AssertionError("ToolSearch did not load %s: %s" % (self.PUT, sorted(tools)))
            return [tool_use_block("ToolSearch", {"query": "select:" + self.PUT, "max_results": 1})]
        text = request_text(body)
        what, nid = plan(text, len([c for c in made if c["name"] != "ToolSearch"])) if self.work else ("final", None)
        if what == "read":
            if self.before_read:
                self.before_read()
            return [tool_use_block("Read", {"file_path": self.file_path})]
        if what == "put":
            return [tool_use_block(self.PUT, put_args(text, nid))]
        return [text_block(self.final)]


def responder(agent, file_path, final, work=True, before_read=None):
    """The model of Codex, Gemini or Copilot (harness): the same plan, in the agent's own tools
    (work=False: answer at once; before_read: called before the read is asked for)."""
    def respond(turn):
        if not agent.tool(turn, "kg_read"):
            return [say("ok")]  # a side question
        what, nid = plan(turn.context, len(turn.calls)) if work else ("final", None)
        if what == "read":
            if before_read:
                before_read()
            return [agent.read_file(turn, file_path)]
        if what == "put":
            return [call(agent.tool(turn, "kg_put_node"), put_args(turn.context, nid))]
        return [say(final)]
    return respond


# ---- one agent's runs, each reduced to the same record

class Conversation:
    """One run as the model saw it: texts[i] is the conversation text of its i-th main request,
    calls[i] the tool calls made before it (name, args, result text)."""

    def __init__(self, texts, calls, seconds, ok, describe):
        self.texts, self.calls, self.seconds, self.ok, self.describe = texts, calls, seconds, ok, describe

    def after_read(self):
        """The first request that carries the file read's result."""
        for text, calls in zip(self.texts, self.calls):
            if calls:
                return text
        return None

    def before_read(self):
        return [t for t, c in zip(self.texts, self.calls) if not c]

    def puts(self):
        last = self.calls[-1] if self.calls else []
        return [(c["args"] or {}).get("id") for c in last if c["name"].endswith("kg_put_node")]


def run_claude_code(daemon, project, tmp, scripts):
    home = make_home(str(tmp / "home"))
    code, out, err, _ = run_kgd("hooks", "install", "--port", daemon.port, "--root", daemon.root, home=home)
    assert code == 0, out + err
    mcp = tmp / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"kg": {"type": "http", "url": daemon.url + "/mcp"}}}))
    runs = {}
    for name, (prompt, final, work, before_read) in scripts.items():
        fake = FakeAnthropic(ClaudeModel(str(project / FILE), final, work, before_read)).start()
        try:
            t0 = time.monotonic()
            proc = run_claude(["-p", prompt, "--output-format", "json", "--mcp-config", str(mcp), "--strict-mcp-config",
                               "--allowedTools", "Read,ToolSearch," + ClaudeModel.PUT],
                              cwd=project / "src", home=home, api_url=fake.url)
            seconds = time.monotonic() - t0
            fake.dump(tmp / ("requests-%s.json" % name))
        finally:
            fake.stop()
        main = [b for b in fake.messages() if any((t.get("name") or "").startswith("mcp__")
                                                  or t.get("name") == "ToolSearch" for t in b.get("tools") or [])]
        calls = [[{"name": c["name"], "args": c["input"], "text": c.get("text")} for c in tool_exchanges([b])
                  if c["name"] != "ToolSearch"] for b in main]
        describe = "claude exited %d\nstdout: %s\nstderr: %s\nfake errors: %s" % (
            proc.returncode, proc.stdout[-1500:], proc.stderr[-2500:], fake.errors)
        ok = proc.returncode == 0 and not fake.errors and final in proc.stdout
        runs[name] = Conversation([request_text(b) for b in main], calls, seconds, ok, describe)
        runs.setdefault("rest", {})[name] = graph_nodes(daemon, project)
    return runs


def run_harness_agent(agent, setup, daemon, project, tmp, scripts):
    bench = harness.Bench(agent, daemon, tmp / "home", setup)
    runs = {}
    try:
        for name, (prompt, final, work, before_read) in scripts.items():
            r = bench.run(prompt, responder(agent, str(project / FILE), final, work, before_read), project / "src",
                          artifacts=str(tmp / name))
            turns = r.main_turns(agent)
            runs[name] = Conversation([t.context for t in turns], [t.calls for t in turns], r.seconds,
                                      r.proc.returncode == 0 and not r.errors and final in r.proc.stdout,
                                      r.describe())
            runs.setdefault("rest", {})[name] = graph_nodes(daemon, project)
    finally:
        bench.close()
    return runs


# bench -> (agent, how kgd is configured): `kgd hooks install --agent NAME`; copilot-http: Copilot's hooks
# as HTTP hooks to /api/hooks (tests/agents/harness.py's "write")
BENCHES = {"claude": ("claude", "install"), "codex": ("codex", "install"), "gemini": ("gemini", "install"),
           "copilot": ("copilot", "install"), "copilot-http": ("copilot", "write")}


@pytest.fixture(scope="module", params=sorted(BENCHES))
def stale_runs(request, tmp_path_factory):
    """The three runs of one agent: {"name", "version", "A", "B", "C", "marks_s", "rest" (run ->
    the project's nodes on REST after it), "daemon", "project"}."""
    name, (agent, setup) = request.param, BENCHES[request.param]
    version, why = claude_version() if agent == "claude" else harness.AGENTS[agent].version()
    if version is None:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("stale-" + name)
    daemon, project, env, marks_s = make_world(tmp)
    scripts = collections.OrderedDict([
        ("A", RUNS["A"] + (True, None)),
        ("B", RUNS["B"] + (False, None)),
        ("C", RUNS["C"] + (True, lambda: change_close(daemon, project, env))),
    ])
    try:
        if agent == "claude":
            runs = run_claude_code(daemon, project, tmp, scripts)
        else:
            runs = run_harness_agent(harness.AGENTS[agent], setup, daemon, project, tmp, scripts)
        out = {"name": name, "version": version, "A": runs["A"], "B": runs["B"], "C": runs["C"],
               "marks_s": marks_s, "daemon": daemon, "project": project, "rest": runs["rest"]}
        record(out, tmp)
        yield out
    finally:
        daemon.stop()


def recall_block(text):
    """The file recall of src/db.py in a request, up to and with the request to confirm (or 1,500
    characters when that is missing), or None."""
    i = (text or "").find(RECALL_HEAD)
    if i < 0:
        return None
    j = text.find(STALE_ASK, i)
    return text[i:j + len(STALE_ASK)] if j >= 0 else text[i:i + 1500]


def record(r, tmp):
    """What reached the model, for reading after the run (tests/artifacts/agents-stale-NAME.json)."""
    obs = {"agent": r["name"], "version": r["version"], "seconds": {n: round(r[n].seconds, 1) for n in RUNS},
           "marks_on_rest_after_commit_s": round(r["marks_s"], 2), "artifacts": str(tmp)}
    for n in RUNS:
        first = r[n].texts[0] if r[n].texts else ""
        after = r[n].after_read() or ""
        obs[n] = {"preload_db_lines": [line for line in first.splitlines() if line.startswith("- db-")],
                  "file_recall": recall_block(after), "stale_ask_count_after_read": after.count(STALE_ASK),
                  "puts": r[n].puts()}
    path = os.path.join(HERE, "artifacts", "agents-stale-%s.json" % r["name"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obs, f, indent=1)


def tail(text, n=2500):
    return text if len(text or "") <= n else "...%s" % text[-n:]


def db_lines(text):
    """The lines of a request that name one of the four nodes (what a failure shows)."""
    return "\n".join(line for line in (text or "").splitlines() if any(nid in line for nid in NODES))[:3000]


def test_every_run_ends_with_the_scripted_answer(stale_runs):
    for run in RUNS:
        r = stale_runs[run]
        assert r.ok and r.texts, "run %s: %s" % (run, r.describe)


def test_the_preload_carries_the_marks(stale_runs):
    a = stale_runs["A"]
    assert a.texts, a.describe
    first = a.texts[0]
    assert SESSION.search(first), "no preload before the first turn: " + tail(first)
    for nid in ACTIVE:
        assert preload_line(nid) in first, "%s's marked line is not in the preload:\n%s" % (nid, db_lines(first))
    for nid in ARCHIVED:  # archived: never preloaded with a gist
        assert NODES[nid][0] not in first


def test_a_read_of_the_file_brings_its_stale_nodes_with_one_request(stale_runs):
    a = stale_runs["A"]
    for text in a.before_read():
        assert RECALL_HEAD not in text and STALE_ASK not in text, "file recall came before the read"
    after = a.after_read()
    assert after is not None, "the model never got the read's result: " + a.describe
    i = after.find(RECALL_HEAD)
    assert i >= 0, "no file recall after the read of %s:\n%s" % (FILE, db_lines(after))
    block = after[i:]
    j = block.find(STALE_ASK)
    assert j >= 0, "no request to confirm or update after the recall: %s" % block[:2000]
    for nid in ARCHIVED:
        assert recall_line(nid) in block[:j], "%s's marked line is not in the file recall: %s" % (nid, block[:2000])
    assert after.count(STALE_ASK) == 1, "the request reached the model %d times" % after.count(STALE_ASK)


def test_the_model_confirms_what_it_saw_marked_and_a_re_put_clears_the_marks(stale_runs):
    a, b = stale_runs["A"], stale_runs["B"]
    assert sorted(a.puts()) == sorted(NODES), "the model put again: %s" % a.puts()
    last = a.calls[-1] if a.calls else []
    for c in last:
        if c["name"].endswith("kg_put_node"):
            assert c.get("text") and c["args"]["id"] in c["text"], c
    nodes = stale_runs["rest"]["A"]
    for nid, (gist, touch, _) in NODES.items():
        assert "stale" not in nodes[nid], (nid, nodes[nid].get("stale"))
        assert nodes[nid]["gist"] == gist and touch in nodes[nid]["touches"], nodes[nid]
    assert b.texts, b.describe
    first = b.texts[0]
    assert SESSION.search(first), "no preload in run B: " + tail(first)
    for nid in NODES:
        assert preload_line(nid, marked=False) in first, "%s is not preloaded unmarked:\n%s" % (nid, db_lines(first))
    for mark in (WHOLE_MARK, PART_MARK, SAID_MARK):
        assert mark not in first
    assert "[stale:" not in first


def test_a_node_gone_stale_after_the_preload_showed_it_comes_back_on_the_read(stale_runs):
    """Run C: the preload shows the four nodes current; then a commit changes close, not connect;
    the read brings the two whole-file nodes back with their mark and the request, not the
    `#connect` ones (shown, and their part did not change); the model confirms those two."""
    c = stale_runs["C"]
    assert c.texts, c.describe
    first = c.texts[0]
    for nid in NODES:
        assert preload_line(nid, marked=False) in first, "%s is not preloaded unmarked:\n%s" % (nid, db_lines(first))
    after = c.after_read()
    assert after is not None, "the model never got the read's result: " + c.describe
    block = recall_block(after)
    assert block and block.endswith(STALE_ASK), "no file recall with the request after the read:\n%s" % db_lines(after)
    for nid in NODES:
        line = "- [project] %s (%s): %s" % (nid, later_mark(nid), NODES[nid][0])
        if nid in whole_file_ids():
            assert line in block, "%s is not recalled with its new mark: %s" % (nid, block)
        else:
            assert nid not in block, "%s came back though its part did not change: %s" % (nid, block)
    assert after.count(STALE_ASK) == 1
    assert sorted(c.puts()) == whole_file_ids(), c.puts()
    for nid, node in stale_runs["rest"]["C"].items():
        assert "stale" not in node or nid not in NODES, (nid, node.get("stale"))
