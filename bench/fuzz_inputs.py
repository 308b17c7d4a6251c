#!/usr/bin/env python3
"""Fuzz what kgd reads besides requests (contract sections 8, 9 and 11): the hook inputs of
all four agents and the team's `.kg/` files, against one live daemon.

    python3 bench/fuzz_inputs.py                      # 100,000 cases, a random seed (printed)
    python3 bench/fuzz_inputs.py --cases 3000 --seed 7
    python3 bench/fuzz_inputs.py --replay 7:12        # batch 12 of seed 7 again, alone

Kinds of case, in batches (each batch its own seed, derived from the run's: a failure names it):
- `hook-http:AGENT`: POST /api/hooks?agent=AGENT[&event=E] with a hostile input of that agent's
  dialect (kg/agents/dialects.py): its events and field names, wrong types, huge, nested, non-UTF-8,
  not JSON; cwd inside the fuzzed repositories, ids of other agents, transcripts that are FIFOs or
  /dev/zero. Expected: 200 with an empty body or a JSON object, or a 4xx with {"error"}; never a
  5xx, never over 64 KiB, never a hang.
- `hook-cmd:AGENT`: the same input on `kgd hook --agent AGENT` stdin (a fresh process each): exit
  0 within 3 s, stdout empty or one JSON object.
- `kg-line`: one hostile line in a `.kg/` file (`nodes.jsonl`, `edges.jsonl`, or a file of this
  clone's own under a subfolder), among valid canary lines: mutated records, wrong types, times out
  of range, conflict markers, encodings (Latin-1, UTF-16, lone surrogates, NUL, CR), long lines,
  deep nesting. Expected: the canaries load (a bad line is skipped, never the file).
- `kg-file`: one hostile whole-file case: symlinks (to /etc/passwd, /dev/zero, a loop, another
  clone's `.kg/`), a FIFO, a directory where a file goes, mode 000, a sparse file over the size
  limit, more lines than read, UTF-16, CRLF, only conflict markers, `.kg` as a file, many files.
  Expected: nothing hangs or crashes; the project still loads.
After every batch: GET /health answers 200, kg_read with the cwd of each fuzzed repository answers
without an error, the daemon's process lives, and its log holds no new traceback. A failure prints
its batch seed and the case; the run exits 1.
"""

import argparse
import collections
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, HERE)
from crash import Daemon, Git  # noqa: E402

from kg.agents import dialects  # noqa: E402
from kg.core import kg_format  # noqa: E402

from helpers import ToolClient, clean_env, git_env  # noqa: E402

KGD = os.path.join(REPO, "kgd.py")
REPOS = 6
MAX_ANSWER = 64 * 1024

# ---------------------------------------------------------------- values

WEIRD_STR = ["", " ", "\x00", "\ud800", "é✓", "a" * 5000, "../../etc/passwd", "\n\r\t", "<hook_context>",
             "<hook_context>x", "</hook_context>", "${HOME}", "$(rm -rf /)", "`id`", "%s%n", "\u202e", "null",
             "claude:abc", "codex:x", "C:\\Windows", "~", "/dev/zero", "/proc/self/mem", "*" * 300]
WEIRD_VAL = [None, True, False, 0, -1, 2 ** 64, 1e308, -1e308, 0.5, [], {}, [None], {"a": {"b": []}}, "x"]


def weird(rnd, depth=0):
    r = rnd.random()
    if r < 0.45:
        return rnd.choice(WEIRD_STR)
    if r < 0.7 or depth > 3:
        return rnd.choice(WEIRD_VAL)
    if r < 0.85:
        return [weird(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    return {rnd.choice(WEIRD_STR)[:20]: weird(rnd, depth + 1) for _ in range(rnd.randrange(4))}


def text(rnd):
    r = rnd.random()
    if r < 0.3:
        return "how does the cache in src/app.py invalidate on deploy?"
    if r < 0.5:
        return rnd.choice(WEIRD_STR) * rnd.randrange(1, 40)
    if r < 0.6:
        return "x" * rnd.choice([1000, 100000, 1100000])
    if r < 0.7:
        return "<hook_context>" + "kgd said this " * rnd.randrange(100) + rnd.choice(["", "</hook_context> then"])
    return "".join(chr(rnd.choice([rnd.randrange(32, 127), rnd.randrange(0x80, 0xd7ff), rnd.randrange(0, 32),
                                  rnd.randrange(0xe000, 0x10ffff)])) for _ in range(rnd.randrange(200)))


# ---------------------------------------------------------------- hook inputs

CLAUDE_TOOLS = ["Read", "Edit", "Write", "Grep", "Glob", "Bash", "WebFetch", "WebSearch", "mcp__kg__kg_read", "Task"]


def hook_case(rnd, agent, cwds, fifo):
    """-> (query string, body bytes, content type) of one hostile hook input for `agent`."""
    spec = dialects.AGENTS[agent]
    events = list(spec["events"]) + ["Nope", "", "sessionstart", "SessionStart\x00"]
    fields = spec.get("fields", {})
    rev = {v: k for k, v in fields.items()}

    def name(claude_field):
        return rev.get(claude_field, claude_field) if rnd.random() < 0.9 else claude_field

    p = {}
    event = rnd.choice(events)
    if rnd.random() < 0.8:
        p[name("hook_event_name")] = event if rnd.random() < 0.9 else weird(rnd)
    p[name("session_id")] = rnd.choice(["s-%d" % rnd.randrange(50), "s-1", weird(rnd)]) if rnd.random() < 0.9 else None
    p["cwd"] = rnd.choice(cwds + [cwds[0] + "/src/deep", "/", "/nonexistent/x", "relative/path", weird(rnd)])
    tp = rnd.random()
    if tp < 0.1:
        p[name("transcript_path")] = rnd.choice([fifo, "/dev/zero", "/etc/shadow", cwds[0], weird(rnd)])
    kind = spec["events"].get(event)
    if kind == dialects.PROMPT or rnd.random() < 0.2:
        p["prompt"] = text(rnd) if rnd.random() < 0.9 else weird(rnd)
    if kind == dialects.TOOL or rnd.random() < 0.2:
        tools = CLAUDE_TOOLS + list(spec.get("tools", {})) + list(spec.get("shell", {})) + list(spec.get("patch", {}))
        tool = rnd.choice(tools) if rnd.random() < 0.9 else weird(rnd)
        p[name("tool_name")] = tool
        args = {k: rnd.choice([cwds[rnd.randrange(len(cwds))] + "/src/app.py", text(rnd), weird(rnd)])
                for k in rnd.sample(["file_path", "path", "command", "pattern", "url", "query", "dir_path", "prompt",
                                     "patch", "old_string", "new_string", "content"], rnd.randrange(1, 4))}
        if "command" in args and rnd.random() < 0.5:
            args["command"] = rnd.choice(["cat src/app.py | head", "sed -n 1,20p '%s/src/a b.py'" % cwds[0],
                                          "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch",
                                          "cd / && cat " + "x " * 3000, "grep -r " + "'" * 101, "bash -c \"$(echo)\""])
        ti = args if rnd.random() < 0.8 else weird(rnd)
        if agent == "copilot" and rnd.random() < 0.5:
            ti = json.dumps(ti) if rnd.random() < 0.8 else "{not json"
        p[name("tool_input")] = ti
        if rnd.random() < 0.7:
            blocks = {"content": [{"type": "text", "text": text(rnd)}]}
            p[name("tool_response")] = rnd.choice([text(rnd), weird(rnd), blocks])
    if kind == dialects.START or rnd.random() < 0.1:
        p["source"] = rnd.choice(["startup", "resume", "clear", "compact", "new", weird(rnd)])
    if kind == dialects.STOP or rnd.random() < 0.1:
        p[name("stop_hook_active")] = rnd.choice([True, False, weird(rnd)])
    for _ in range(rnd.randrange(3)):
        p[rnd.choice(WEIRD_STR)[:30]] = weird(rnd)
    query = "agent=" + agent if rnd.random() < 0.95 else "agent=" + rnd.choice(["nobody", "", "claude%00", "Claude"])
    if agent == "copilot" and "hookEventName" not in p and rnd.random() < 0.7:
        query += "&event=" + rnd.choice(list(spec["events"]) + ["x" * 70, "bad%20name"])
    r = rnd.random()
    if r < 0.85:
        body = json.dumps(p, ensure_ascii=rnd.random() < 0.5, allow_nan=True).encode("utf-8", "surrogatepass")
    elif r < 0.9:
        body = json.dumps(weird(rnd)).encode()
    elif r < 0.94:
        body = json.dumps(p).encode()[: rnd.randrange(1, 200)]  # cut short
    elif r < 0.97:
        body = b"[" * rnd.choice([100, 10000, 200000]) + b"]" * rnd.randrange(3)
    else:
        body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 300)))
    ctype = "application/json" if rnd.random() < 0.95 else rnd.choice(
        ["text/plain", "", "application/json; charset=latin-1"])
    return query, body, ctype


def check_hook_answer(status, body):
    """None when the answer is one kgd may give, else what is wrong."""
    if len(body) > MAX_ANSWER:
        return "an answer of %d bytes" % len(body)
    if status >= 500:
        return "status %d: %r" % (status, body[:300])
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        return "status %d with a body that is not JSON: %r" % (status, body[:300])
    if status == 200:
        return None if obj is None or isinstance(obj, dict) else "200 with %r" % (obj,)
    if 400 <= status < 500:
        return None if isinstance(obj, dict) and isinstance(obj.get("error"), str) else "%d with %r" % (status, obj)
    return "status %d" % status


class Hooks:
    def __init__(self, port):
        self.port = port
        self.conn = None

    def post(self, query, body, ctype):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
            try:
                self.conn.request("POST", "/api/hooks?" + query, body=body, headers={"Content-Type": ctype})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


# ---------------------------------------------------------------- .kg/ lines and files

def canary(nid, now):
    return {"id": nid, "gist": "canary " + nid, "notes": ["kept"], "touches": [], "created": now, "changed": now}


def good_node(rnd, now):
    return {"id": "n-%d" % rnd.randrange(10 ** 6), "gist": text(rnd)[:200] or "g", "notes": [], "touches": [],
            "created": now, "changed": now}


def hostile_line(rnd, now):
    """One line (bytes, no LF) no canary can be hurt by: ids are never a canary's."""
    r = rnd.random()
    rec = good_node(rnd, now) if rnd.random() < 0.6 else {"from": "n-1", "to": "src/x.py", "rel": "uses",
                                                          "notes": [], "changed": now}
    if r < 0.45:  # a record with one field made hostile
        key = rnd.choice(list(rec) + ["deleted", "extra", "_archived", "id"])
        rec[key] = weird(rnd) if rnd.random() < 0.7 else rnd.choice(
            [1e11 + 1, -1, float("nan"), float("inf"), 2 ** 70, now * 1000, "1700000000", "x" * 300000])
        if rec.get("id") is not None and str(rec.get("id")).startswith("canary"):
            rec["id"] = "n-0"
        try:
            return json.dumps(rec, ensure_ascii=rnd.random() < 0.5, allow_nan=True).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError):
            return b"{}"
    if r < 0.55:
        return rnd.choice(kg_format.CONFLICT_MARKERS) + rnd.choice([b"", b" HEAD", b" theirs", b"<<<"])
    if r < 0.65:
        line = json.dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass")
        u = line.decode("utf-8", "surrogatepass")
        return rnd.choice([u.encode("latin-1", "replace"), u.encode("utf-16", "surrogatepass"),
                           line[: rnd.randrange(1, len(line))], line + b"\x00", b"\xed\xa0\x80" + line,
                           line.replace(b",", b"\r", 1), b"\xef\xbb\xbf" + line, line + b" trailing"])
    if r < 0.7:
        return b'{"id":"n-2","gist":"' + b"y" * rnd.choice([1024 * 1024, 1024 * 1024 + 1, 3000]) + b'"}'
    if r < 0.75:
        return b"[" * rnd.choice([50, 1000, 100000])
    if r < 0.8:
        return json.dumps(rec).encode() * rnd.randrange(2, 4)  # two records on one line
    if r < 0.9:  # a second version of one node (a merge left both): the rule decides, nothing breaks
        rec = good_node(rnd, now)
        rec["id"] = "n-dup"
        rec["changed"] = now - rnd.randrange(10 ** 6)
        if rnd.random() < 0.3:
            rec = {"id": "n-dup", "deleted": rec["changed"]}
        return json.dumps(rec).encode()
    return bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 120))).replace(b"\n", b" ")


def line_of(rec):
    line = kg_format.canonical(rec)
    return line.encode("utf-8") if isinstance(line, str) else line


def lines_file(rnd, canaries, lines_per_case, now):
    """The bytes of a file: canary lines and hostile ones, shuffled; -> (data, hostile count)."""
    lines = [line_of(c) for c in canaries]
    bad = [hostile_line(rnd, now) for _ in range(lines_per_case)]
    allx = lines + bad
    rnd.shuffle(allx)
    return b"\n".join(allx) + rnd.choice([b"\n", b"", b"\r\n"]), len(bad)


FILE_CASES = ["symlink-passwd", "symlink-zero", "symlink-loop", "kg-symlink", "fifo", "dir-for-file", "mode-000",
              "kg-mode-000", "sparse-huge", "too-many-lines", "utf16", "crlf", "only-markers", "kg-is-file",
              "many-files", "bom-everywhere", "empty", "newlines-only", "edges-only-bad", "long-name"]


def reset_kg(kg):
    if os.path.islink(kg) or os.path.isfile(kg):
        os.unlink(kg)
    elif os.path.isdir(kg):
        for d, dirs, names in os.walk(kg):
            os.chmod(d, 0o755)
        shutil.rmtree(kg)
    os.makedirs(kg)
    with open(os.path.join(kg, ".gitattributes"), "w") as f:
        f.write(kg_format.GITATTRIBUTES)


def write_file_case(case, kg, other_kg, rnd, now, canary_rec):
    """Lay one whole-file case out in `kg`; nodes.jsonl's canary is kept where the case allows."""
    nodes = os.path.join(kg, kg_format.NODES_FILE)
    edges = os.path.join(kg, kg_format.EDGES_FILE)
    good = kg_format.render({canary_rec["id"]: canary_rec})
    if case == "symlink-passwd":
        os.symlink("/etc/passwd", nodes)
    elif case == "symlink-zero":
        os.symlink("/dev/zero", nodes)
    elif case == "symlink-loop":
        os.symlink(nodes, nodes)
    elif case == "kg-symlink":
        shutil.rmtree(kg)
        os.symlink(other_kg, kg)
    elif case == "fifo":
        os.mkfifo(nodes)
    elif case == "dir-for-file":
        os.makedirs(nodes)
    elif case == "mode-000":
        open(nodes, "wb").write(good)
        os.chmod(nodes, 0)
    elif case == "kg-mode-000":
        open(nodes, "wb").write(good)
        os.chmod(kg, 0)
    elif case == "sparse-huge":
        with open(nodes, "wb") as f:
            f.write(good)
            f.truncate(kg_format.MAX_FILE + 1)
    elif case == "too-many-lines":
        recs = {"t-%06d" % i: dict(canary_rec, id="t-%06d" % i) for i in range(kg_format.MAX_RECORDS["node"] + 5)}
        open(nodes, "wb").write(good + kg_format.render(recs))
    elif case == "utf16":
        open(nodes, "wb").write(good.decode().encode("utf-16"))
    elif case == "crlf":
        open(nodes, "wb").write(good.replace(b"\n", b"\r\n"))
    elif case == "only-markers":
        open(nodes, "wb").write(b"<<<<<<< HEAD\n=======\n>>>>>>> x\n" * 50)
    elif case == "kg-is-file":
        shutil.rmtree(kg)
        open(kg, "wb").write(good)
    elif case == "many-files":
        open(nodes, "wb").write(good)
        sub = os.path.join(kg, "changes")
        os.makedirs(sub, exist_ok=True)
        for i in range(300):
            open(os.path.join(sub, "c%03d-%d.nodes.jsonl" % (i, rnd.randrange(9))), "wb").write(
                hostile_line(rnd, now) + b"\n")
    elif case == "bom-everywhere":
        open(nodes, "wb").write(b"".join(b"\xef\xbb\xbf" + ln + b"\n" for ln in good.splitlines()) * 3)
    elif case == "empty":
        open(nodes, "wb").write(b"")
    elif case == "newlines-only":
        open(nodes, "wb").write(b"\n" * 100000)
    elif case == "edges-only-bad":
        open(nodes, "wb").write(good)
        open(edges, "wb").write(b"\n".join(hostile_line(rnd, now) for _ in range(50)))
    elif case == "long-name":
        open(nodes, "wb").write(good)
        sub = os.path.join(kg, "changes")
        os.makedirs(sub, exist_ok=True)
        open(os.path.join(sub, ("x" * 200) + ".nodes.jsonl"), "wb").write(good)
        open(os.path.join(os.fsencode(sub), b"\xff\n.nodes.jsonl"), "wb").write(good)


# ---------------------------------------------------------------- the run

class Fuzz:
    def __init__(self, seed, tmp, lines_per_case=60, hooks_per_batch=400, commands_every=1):
        self.seed, self.tmp = seed, tmp
        self.lines_per_case = lines_per_case
        self.hooks_per_batch = hooks_per_batch
        self.commands_every = commands_every
        self.counts = collections.Counter()
        self.answers = collections.Counter()  # hook-http answers by status
        self.failures = []
        self.home = os.path.join(tmp, "home")
        os.makedirs(self.home)
        self.env = {"KG_MAX_TOKENS": "1000000", "KG_SYNC_INTERVAL": "3600"}
        self.root = os.path.join(tmp, "root")
        self.fifo = os.path.join(tmp, "transcript.fifo")
        os.mkfifo(self.fifo)

    def setup(self):
        genv = git_env(self.home)
        self.repos = []
        for i in range(REPOS):
            path = os.path.join(self.tmp, "r%d" % i)
            os.makedirs(path)
            g = Git(path, genv)
            g("init", "-q", "-b", "main")
            reset_kg(os.path.join(path, ".kg"))
            with open(os.path.join(path, ".kg", kg_format.NODES_FILE), "wb") as f:
                f.write(kg_format.render({"seed": canary("seed", time.time())}))
            self.repos.append(os.path.realpath(path))
        self.d = Daemon(self.root, self.home, self.env).start()
        self.client = ToolClient(self.d.port, timeout=30)
        self.hooks = Hooks(self.d.port)
        self.sids = {}
        for path in self.repos:
            self.sids[path] = self.session(path)

    def session(self, path):
        r = self.client.call("kg_read", {"cwd": path})
        assert not r.get("isError"), r
        return r["structuredContent"]["session_id"]

    def fail(self, batch_seed, kind, what, case=None):
        line = "FAIL (batch seed %s) %s: %s%s" % (batch_seed, kind, what, "" if case is None else "\n  case: %r" % (
            case if not isinstance(case, (bytes, str)) or len(case) < 600 else case[:600],))
        self.failures.append(line)
        print(line, flush=True)

    def batch(self, batch_no, hooks=True, kg=True):
        batch_seed = "%d:%d" % (self.seed, batch_no)
        rnd = random.Random(batch_seed)
        log_mark = len(self.d.log)
        now = kg_format.ts(time.time())
        # .kg/ first: the daemon picks the files up while the hooks run.
        expect = {}
        if kg:
            for i, path in enumerate(self.repos):
                kg_dir = os.path.join(path, ".kg")
                reset_kg(kg_dir)
                cid = "canary-%d-%d" % (batch_no, i)
                crec = canary(cid, now)
                if rnd.random() < 0.25:
                    case = rnd.choice(FILE_CASES)
                    write_file_case(case, kg_dir, os.path.join(self.repos[(i + 1) % REPOS], ".kg"), rnd, now, crec)
                    self.counts["kg-file:" + case] += 1
                    self.counts["kg-file"] += 1
                else:
                    where = rnd.choice([kg_format.NODES_FILE, kg_format.NODES_FILE, kg_format.EDGES_FILE])
                    data, n = lines_file(rnd, [crec], self.lines_per_case, now)
                    if where == kg_format.EDGES_FILE:  # the canary node stays in nodes.jsonl
                        open(os.path.join(kg_dir, kg_format.NODES_FILE), "wb").write(kg_format.render({cid: crec}))
                        data = data.replace(line_of(crec), b"")
                    open(os.path.join(kg_dir, where), "wb").write(data)
                    expect[path] = cid
                    self.counts["kg-line"] += n
        if hooks:
            cwds = self.repos
            for _ in range(self.hooks_per_batch):
                agent = rnd.choice(dialects.NAMES)
                query, body, ctype = hook_case(rnd, agent, cwds, self.fifo)
                t0 = time.monotonic()
                try:
                    status, answer = self.hooks.post(query, body, ctype)
                except (OSError, http.client.HTTPException) as exc:
                    self.fail(batch_seed, "hook-http:" + agent, "no answer: %r" % exc, (query, body))
                    break
                problem = check_hook_answer(status, answer)
                if problem is None and time.monotonic() - t0 > 10:
                    problem = "answered after %.1f s" % (time.monotonic() - t0)
                if problem:
                    self.fail(batch_seed, "hook-http:" + agent, problem, (query, body))
                self.counts["hook-http:" + agent] += 1
                self.answers["%d%s" % (status, " empty" if status == 200 and not answer else "")] += 1
            if self.commands_every and batch_no % self.commands_every == 0:
                agent = rnd.choice(dialects.NAMES)
                query, body, _ = hook_case(rnd, agent, cwds, self.fifo)
                self.command(batch_seed, agent, body)
        if kg:
            self.check_kg(batch_seed, expect)
        self.check_alive(batch_seed, log_mark)

    def command(self, batch_seed, agent, body):
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-S", KGD, "hook", "--agent", agent, "--root", self.root, "--port",
                            str(self.d.port)], input=body, capture_output=True, timeout=30,
                           env=clean_env(self.home, **self.env), cwd=self.repos[0])
        took = time.monotonic() - t0
        out = p.stdout.strip()
        problem = None
        if p.returncode != 0:
            problem = "exit %d: %r" % (p.returncode, p.stderr[-300:])
        elif took > 3.0:
            problem = "took %.1f s" % took
        elif out:
            try:
                if not isinstance(json.loads(out), dict):
                    problem = "printed %r" % out[:200]
            except ValueError:
                problem = "printed what is not JSON: %r" % out[:200]
        if problem:
            self.fail(batch_seed, "hook-cmd:" + agent, problem, body)
        self.counts["hook-cmd:" + agent] += 1

    def check_kg(self, batch_seed, expect):
        """Each canary among hostile lines is read back (the pickup is within 5 s); every fuzzed
        project still answers kg_read."""
        deadline = time.monotonic() + 8.0
        pending = dict(expect)
        while pending and time.monotonic() < deadline:
            for path, cid in list(pending.items()):
                r = self.read(path, [cid])
                if r is not None and not r.get("isError") and any(
                        n["id"] == cid for n in r["structuredContent"].get("nodes", [])):
                    del pending[path]
            if pending:
                time.sleep(0.25)
        for path, cid in pending.items():
            self.fail(batch_seed, "kg-line", "the canary %s of %s was not loaded among hostile lines" % (cid, path),
                      open(self._kg_file(path), "rb").read()[:2000] if self._kg_file(path) else None)
        time.sleep(0.6)  # a beat more: the whole-file cases were looked at too
        for path in self.repos:
            r = self.client.call("kg_read", {"cwd": path})
            if r.get("isError"):
                self.fail(batch_seed, "kg-file", "kg_read with the cwd of %s: %s" % (path, r["content"][0]["text"]))

    def _kg_file(self, path):
        for name in (kg_format.NODES_FILE, kg_format.EDGES_FILE):
            p = os.path.join(path, ".kg", name)
            if os.path.isfile(p):
                return p
        return None

    def read(self, path, ids):
        sid = self.sids[path]
        r = self.client.call("kg_read", {"session_id": sid, "ids": ids})
        if r.get("isError") and "session" in r["content"][0]["text"]:
            self.sids[path] = self.session(path)
            return None
        return r

    def check_alive(self, batch_seed, log_mark):
        if self.d.proc.poll() is not None:
            self.fail(batch_seed, "daemon", "kgd exited %s:\n%s" % (self.d.proc.returncode, self.d.log_text()))
            raise SystemExit(1)
        st, body = self.d.json("GET", "/health", timeout=10)
        if st != 200:
            self.fail(batch_seed, "daemon", "GET /health answered %s %r" % (st, body))
        new = "".join(line for _, line in self.d.log[log_mark:])
        if "Traceback" in new:
            self.fail(batch_seed, "daemon", "a traceback in the log:\n" + new[new.index("Traceback") - 200:][:3000])

    def close(self):
        for path in self.repos:
            kg = os.path.join(path, ".kg")
            if os.path.isdir(kg) and not os.path.islink(kg):
                os.chmod(kg, 0o755)
        self.client.close()
        self.d.stop()


def total(counts):
    return sum(v for k, v in counts.items() if ":" in k and not k.startswith("kg-file:")) + counts["kg-line"] + \
        counts["kg-file"]


def run(cases=100000, seed=None, tmp=None, replay=None, quiet=False, lines_per_case=60, hooks_per_batch=400):
    """-> (counts, failures). `replay` = a batch number: that batch of `seed` alone."""
    seed = seed if seed is not None else random.SystemRandom().randrange(10 ** 9)
    own = tmp is None
    tmp = tmp or tempfile.mkdtemp(prefix="kgd-fuzz-")
    f = Fuzz(seed, tmp, lines_per_case=lines_per_case, hooks_per_batch=hooks_per_batch)
    t0 = time.monotonic()
    try:
        f.setup()
        batch_no = replay or 0
        try:
            if replay is not None:
                f.batch(replay)
            while replay is None and total(f.counts) < cases:
                batch_no += 1
                f.batch(batch_no)
                if not quiet and batch_no % 10 == 0:
                    print("  batch %d: %d cases, %d failures, %.0f s" % (batch_no, total(f.counts), len(f.failures),
                                                                         time.monotonic() - t0), flush=True)
        except Exception:
            print("the fuzzer itself failed in batch seed %d:%d (the daemon's log ends:)\n%s"
                  % (seed, batch_no, f.d.log_text() if getattr(f, "d", None) else ""), flush=True)
            raise
    finally:
        f.close()
        if own and not f.failures:
            shutil.rmtree(tmp, ignore_errors=True)
    f.counts["seconds"] = round(time.monotonic() - t0)
    f.counts.answers = f.answers
    return f.counts, f.failures, seed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--replay", metavar="SEED:BATCH", help="one batch of a run again")
    args = ap.parse_args(argv)
    seed, replay = args.seed, None
    if args.replay:
        seed, replay = (int(x) for x in args.replay.split(":"))
    seed = seed if seed is not None else random.SystemRandom().randrange(10 ** 9)
    print("bench/fuzz_inputs.py --cases %d --seed %d" % (args.cases, seed), flush=True)
    counts, failures, seed = run(args.cases, seed, replay=replay)
    print()
    print("cases: %d in %d s, seed %d" % (total(counts), counts["seconds"], seed))
    for k in sorted(counts):
        if k != "seconds":
            print("  %7d  %s" % (counts[k], k))
    print("hook-http answers: %s" % ", ".join("%s %d" % kv for kv in sorted(counts.answers.items())))
    print("failures: %d" % len(failures))
    if failures:
        print("replay a batch with: python3 bench/fuzz_inputs.py --replay SEED:BATCH (the batch seed printed)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
