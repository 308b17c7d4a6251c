#!/usr/bin/env python3
"""Crash anywhere, lose nothing, also in the middle of git (contract sections 4 and 9): the project's
crash bench.

    python3 bench/crash.py                       # 100 rounds, a random seed (printed)
    python3 bench/crash.py --rounds 5 --seed 7   # a short run; the same seed replays the same choices

One real daemon (kgd.py on --port 0, a temp storage root, KG_SYNC_INTERVAL=1) serves three places at
once: a private project, a shared project (a clone whose `.kg/` was made by `kgd share`; a teammate's
clone commits and pushes to a bare remote; this clone pulls, commits, and goes to a feature branch
and back, merging it) and the personal remote (`kgd sync --remote` to a local bare repository, rounds
every second and forced at random). Four writers put, change and delete nodes and edges over MCP.
Each round the daemon's whole process group (its git children too) is SIGKILLed at a random moment,
sometimes aimed: at a git child of the personal remote, at a temp file under `.kg/`, at the pickup
window after a pull or a checkout, at the fold once writes pause. Then, before the restart: every
`*.jsonl` under `.kg/` and ROOT/sync/ is whole (a final newline, every line one kgd's parser reads,
kg/core/kg_format.py and kg/core/personal.py), no record committed in HEAD's `.kg/` is missing from
the work tree, `git fsck` of ROOT/sync and of the remote is clean, no graph file was quarantined.
After the restart (and the clone's branches merged back into main, the teammate's pushes pulled):
every acknowledged write and every pushed teammate line is read back through REST, and the next
round goes on from there.

A loss is an acknowledged node or edge missing or different after a restart (in a shared project a
node may gain notes from another version, by the merge rule, but never lose one), a pushed teammate
line missing, or a broken file or repository. The output names each, the seed to replay, and ends
with the acknowledged writes, the losses (must be 0) and the kinds of moment the kills hit (what
ran in the daemon's process tree, which temp files were open, what git was doing in the clone).
Exit 0 when nothing was lost.
"""

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if "--kgd" in sys.argv[:-1]:  # another checkout's daemon and parsers (e.g. `git archive HEAD` unpacked)
    REPO = os.path.abspath(sys.argv[sys.argv.index("--kgd") + 1])
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from kg.core import kg_format, personal  # noqa: E402

from helpers import START_LINE, Gone, ToolClient, clean_env, git_env, http_request  # noqa: E402

KGD = os.path.join(REPO, "kgd.py")
BIG = 10 ** 6
WRITERS = 4
TARGETS = ("user", "priv", "shared")
FILE_ENDS = ["src/app.py", "src/db.py", "docs/notes.md", "tests/test_x.py"]
RELS = ["uses", "explains", "depends-on"]
PICKUPS = ("pull", "checkout", "merge")
AIMS = ("any", "any", "remote-git", "kg-write", "project-git", "fold")


# ---------------------------------------------------------------- the daemon, in its own process group

class Daemon:
    def __init__(self, root, home, env):
        self.root, self.home, self.env = root, home, env
        self.proc = None
        self.port = None
        self.log = []  # (monotonic time, line)
        self.log_file = os.path.join(os.path.dirname(root), "daemon.log")

    def start(self, timeout=30):
        self.proc = subprocess.Popen(
            [sys.executable, KGD, "--port", "0", "--root", self.root, "--max-tokens", str(BIG), "--structured-output"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(self.home, **self.env), cwd=REPO,
            start_new_session=True)  # its own group: the kill takes its git children with it
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = self.proc.stderr.readline()
            if not raw:
                raise RuntimeError("kgd exited early (%s): %s" % (self.proc.wait(), self.log_text()))
            line = raw.decode("utf-8", "replace")
            self.log.append((time.monotonic(), line))
            m = START_LINE.search(line)
            if m:
                self.port = int(m.group(3))
                break
        else:
            raise RuntimeError("kgd did not print its start line")

        def drain(stream=self.proc.stderr, sink=self.log):
            for raw in iter(stream.readline, b""):
                sink.append((time.monotonic(), raw.decode("utf-8", "replace")))
                if self.log_file:
                    with open(self.log_file, "ab") as f:
                        f.write(raw)
        threading.Thread(target=drain, daemon=True).start()
        return self

    def mark(self, text):
        """A line of the bench's own in the daemon's log file, to read the two side by side."""
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write("%s === bench: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), text))

    def log_text(self, last=40):
        return "".join(line for _, line in self.log[-last:])

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait()
        self.proc = None
        return code

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        self.proc = None
        return code

    def json(self, method, path, body=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        st, _, out = http_request(self.port, method, path, data, {"Content-Type": "application/json"}, timeout)
        return st, (json.loads(out) if out else None)

    def descendants(self):
        """[(pid, argv)] of every process under the daemon (its git children and theirs)."""
        kids = collections.defaultdict(list)
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                kids[ppid].append(int(name))
            except (OSError, ValueError, IndexError):
                continue
        out, todo = [], list(kids.get(self.proc.pid, []))
        while todo:
            pid = todo.pop()
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            except OSError:
                continue
            out.append((pid, argv))
            todo.extend(kids.get(pid, []))
        return out


def kgd_cli(home, env, *args, cwd=REPO, timeout=180):
    p = subprocess.run([sys.executable, "-S", KGD] + [str(a) for a in args], env=clean_env(home, **env), cwd=cwd,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


# ---------------------------------------------------------------- git

class Git:
    def __init__(self, path, env):
        self.path, self.env = path, env

    def __call__(self, *args, check=True, timeout=120):
        p = subprocess.run(["git", *args], cwd=self.path, env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode:
            raise RuntimeError("git %s in %s: %s%s" % (" ".join(args), self.path, p.stdout, p.stderr))
        return p

    def branch(self):
        return self("rev-parse", "--abbrev-ref", "HEAD").stdout.strip()


def fsck(path):
    """[problem] from `git fsck` of a repository (a work tree's or a bare one); [] when clean."""
    if not os.path.exists(path):
        return []
    p = subprocess.run(["git", "fsck", "--no-progress", "--no-dangling"], cwd=path, capture_output=True, text=True,
                       env=clean_env(os.path.dirname(path), GIT_CONFIG_NOSYSTEM="1"), timeout=120)
    if p.returncode == 0:
        return []
    return ["git fsck %s: exit %d: %s" % (path, p.returncode, (p.stdout + p.stderr).strip()[:600])]


# ---------------------------------------------------------------- files, read with kgd's own parsers

def jsonl_files(folder):
    """Every *.jsonl under `folder` (any layout kgd chooses), .git aside."""
    out = []
    for d, dirs, names in os.walk(folder):
        dirs[:] = [x for x in dirs if x != ".git"]
        out.extend(os.path.join(d, n) for n in names if n.endswith(".jsonl"))
    return sorted(out)


def split_lines(data, name, problems):
    """(node lines, edge lines) of one file; a line no kgd parser reads, or a file without its final
    newline (a half-written file), is a problem."""
    nodes, edges = [], []
    if data and not data.endswith(b"\n"):
        problems.append("%s: no final newline (a half-written file?): ...%r" % (name, data[-80:]))
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        line = raw.rstrip(b"\r")
        if not line.strip() or line.startswith(kg_format.CONFLICT_MARKERS):
            continue
        _, bad = kg_format.parse(line, "node")
        if not bad:
            nodes.append(line)
            continue
        _, bad_edge = kg_format.parse(line, "edge")
        if not bad_edge:
            edges.append(line)
            continue
        _, bad_personal = personal.parse(line)
        if not bad_personal:
            continue
        problems.append("%s line %d: %s / %s: %r" % (name, lineno, bad[0], bad_edge[0], line[:160]))
    return nodes, edges


def union(node_lines, edge_lines):
    """{key: record} of every node and edge line, several versions merged by kgd's rule."""
    out = dict(kg_format.parse(b"\n".join(node_lines) + b"\n", "node")[0])
    out.update(kg_format.parse(b"\n".join(edge_lines) + b"\n", "edge")[0])
    return out


def read_folder(folder, problems):
    nodes, edges = [], []
    for path in jsonl_files(folder):
        with open(path, "rb") as f:
            n, e = split_lines(f.read(), os.path.relpath(path, os.path.dirname(folder)), problems)
        nodes += n
        edges += e
    return union(nodes, edges)


def committed(git):
    """{key: record} of HEAD's `.kg/` (every *.jsonl in it)."""
    names = git("ls-tree", "-r", "--name-only", "HEAD", "--", ".kg").stdout.split()
    nodes, edges, problems = [], [], []
    for name in names:
        if name.endswith(".jsonl"):
            data = subprocess.run(["git", "show", "HEAD:" + name], cwd=git.path, env=git.env, capture_output=True,
                                  timeout=60).stdout
            n, e = split_lines(data, "HEAD:" + name, problems)
            nodes += n
            edges += e
    return union(nodes, edges), problems


def check_kg(git, problems):
    """`.kg/` whole, every line read, nothing committed in HEAD missing from the work tree. -> its records."""
    work = read_folder(os.path.join(git.path, ".kg"), problems)
    head, bad = committed(git)
    problems.extend(bad)
    for key, rec in head.items():
        have = work.get(key)
        if have is None:
            problems.append(".kg/: %r is committed in HEAD and missing from the work tree" % (key,))
        elif when(have) < when(rec):
            problems.append(".kg/: %r in the work tree is older than HEAD's: %r < %r" % (key, have, rec))
    return work


def when(rec):
    return kg_format.ts(rec.get("changed", rec.get("deleted")))


def quarantined(root):
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names if ".corrupt-" in n)


def temp_files(root, repo):
    """{area: set of paths} of the temp files kgd's atomic writes leave while they run (.tmp-*)."""
    out = {".kg": set(), "sync": set(), "root": set()}
    for area, folder in ((".kg", os.path.join(repo, ".kg")), ("root", root)):
        for d, dirs, names in os.walk(folder):
            dirs[:] = [x for x in dirs if x != ".git"]
            for n in names:
                if n.startswith(".tmp-"):
                    where = "sync" if area == "root" and (d + os.sep).startswith(os.path.join(root, "sync") + os.sep) \
                        else area
                    out[where].add(os.path.join(d, n))
    return out


# ---------------------------------------------------------------- what the writers were told is stored

class Model:
    """What one writer has been told is stored; only it touches ids starting w<k>-."""

    def __init__(self, k):
        self.k = k
        self.prefix = "w%d-" % k
        self.nodes = {}  # id -> (target, gist, notes, touches)
        self.edges = {}  # (target, key) -> (from, to, rel, notes)
        self.pending = None  # (tool, target, args) in flight when the daemon died
        self.counter = 0
        self.acked = collections.Counter()
        self.refused = collections.Counter()  # shared project: a node that left with a branch
        self.deleted = {}  # node id or (target, edge key) -> round of its acknowledged delete
        self.log = None  # a file: every acknowledged write, for the post-mortem


def apply_op(nodes, edges, tool, target, args):
    nodes, edges = dict(nodes), dict(edges)
    if tool == "kg_put_node":
        nodes[args["id"]] = (target, args["gist"], tuple(args["notes"]), tuple(args["touches"]))
    elif tool == "kg_put_edge":
        key = "%s->%s:%s" % (args["from"], args["to"], args["rel"])
        edges[(target, key)] = (args["from"], args["to"], args["rel"], tuple(args["notes"]))
    elif tool == "kg_delete_node":
        del nodes[args["id"]]
        for k in [k for k, e in edges.items() if k[0] == target and args["id"] in (e[0], e[1])]:
            del edges[k]
    elif tool == "kg_delete_edge":
        del edges[(target, "%s->%s:%s" % (args["from"], args["to"], args["rel"]))]
    return nodes, edges


def next_op(m, rnd, round_no, sids):
    m.counter += 1
    target = rnd.choice(TARGETS)
    sid = sids["shared" if target == "shared" else "priv"]
    level = "user" if target == "user" else "project"
    live = sorted(i for i, v in m.nodes.items() if v[0] == target)
    text = "round %d op %d of writer %d " % (round_no, m.counter, m.k)
    base = {"session_id": sid, "level": level}
    r = rnd.random()
    if not live or r < 0.4:
        nid = "%s%s-r%d-%d" % (m.prefix, target, round_no, m.counter)
        return "kg_put_node", target, dict(base, id=nid, gist=text + "é✓" * rnd.randrange(3),
                                           notes=["n%d" % i for i in range(rnd.randrange(3))],
                                           touches=rnd.sample(FILE_ENDS, rnd.randrange(2)))
    if r < 0.6:
        return "kg_put_node", target, dict(base, id=rnd.choice(live), gist="updated " + text,
                                           notes=["x" * rnd.randrange(1, 200)],
                                           touches=rnd.sample(FILE_ENDS, rnd.randrange(3)))
    if r < 0.82:
        frm = rnd.choice(live)
        others = [i for i in live if i != frm]
        to = rnd.choice(others) if others and rnd.random() < 0.7 else rnd.choice(FILE_ENDS)
        return "kg_put_edge", target, dict(base, **{"from": frm, "to": to, "rel": rnd.choice(RELS), "notes": [text]})
    mine = [k for k in m.edges if k[0] == target]
    if r < 0.93 or not mine:
        return "kg_delete_node", target, dict(base, id=rnd.choice(live))
    e = m.edges[rnd.choice(sorted(mine))]
    return "kg_delete_edge", target, dict(base, **{"from": e[0], "to": e[1], "rel": e[2]})


def writer(port, cwds, m, rnd, round_no, go, stop, problems):
    client = ToolClient(port, timeout=30)
    try:
        sids = {}
        for name in ("priv", "shared"):
            try:
                sids[name] = client.call("kg_read", {"cwd": cwds[name]})["structuredContent"]["session_id"]
            except Gone:
                return
        while not stop.is_set():
            go.wait()
            tool, target, args = next_op(m, rnd, round_no, sids)
            m.pending = (tool, target, args)
            try:
                result = client.call(tool, args)
            except Gone:
                return  # the daemon died with this request in flight
            m.pending = None
            if result.get("isError"):
                text = result["content"][0]["text"]
                # In a shared project a node committed on a branch leaves the view on another
                # (contract section 9): a write naming it is refused, nothing is applied.
                if target == "shared" and ("neither a node" in text or "no node" in text or "no edge" in text):
                    m.refused[tool] += 1
                    continue
                problems.append("writer %d: %s %r -> %s" % (m.k, tool, args, text))
                return
            before_e = m.edges
            m.nodes, m.edges = apply_op(m.nodes, m.edges, tool, target, args)
            m.acked[tool] += 1
            if tool == "kg_delete_node":
                m.deleted[args["id"]] = round_no
            gone = set(before_e) - set(m.edges)  # deleted, or with the node they came from or went to
            for key in gone:
                m.deleted[key] = round_no
            if m.log:
                m.log.write("%.3f r%d %s %s %s\n" % (time.time(), round_no, tool, target, json.dumps(
                    {k: v for k, v in args.items() if k not in ("session_id", "level")}, ensure_ascii=False)))
    except Exception as exc:  # reported by the round
        problems.append("writer %d crashed: %r" % (m.k, exc))
    finally:
        client.close()


# ---------------------------------------------------------------- git around the daemon

class Activity:
    """What a background actor is doing now and what it did last (for the kill's moment)."""

    def __init__(self):
        self.now = None  # (what, since)
        self.last = None  # (what, ended)

    def doing(self, what):
        self.now = (what, time.monotonic())

    def done(self):
        if self.now:
            self.last = (self.now[0], time.monotonic())
        self.now = None


class Clone:
    """This clone: pulls, commits `.kg/`, goes to a feature branch and back (merging it)."""

    def __init__(self, git):
        self.git = git
        self.act = Activity()
        self.feature_no = 0
        self.refusals = collections.Counter()  # git refused something: its first line

    def run(self, what, *args):
        self.act.doing(what)
        try:
            p = self.git(*args, check=False)
        finally:
            self.act.done()
        if p.returncode:
            first = next((ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip()), "")
            self.refusals["git %s: %s" % (what, first[:120])] += 1
        return p.returncode == 0

    def commit(self):
        self.run("add", "add", "-A", ".kg")
        if self.git("diff", "--cached", "--quiet", check=False).returncode:
            self.run("commit", "commit", "-q", "-m", "knowledge")

    def pull(self):
        self.commit()
        self.run("pull", "pull", "-q", "--no-rebase", "--no-edit", "origin", "main")

    def to_feature(self):
        self.commit()
        self.feature_no += 1
        self.run("checkout", "checkout", "-q", "-b", "feat-%d" % self.feature_no)

    def to_main(self):
        branch = self.git.branch()
        for _ in range(3):
            self.commit()
            if self.run("checkout", "checkout", "-q", "main"):
                break
        if branch != "main" and self.git.branch() == "main":
            self.commit()
            self.run("merge", "merge", "-q", "--no-edit", branch)

    def step(self, rnd):
        on_main = self.git.branch() == "main"
        r = rnd.random()
        if r < 0.4:
            self.pull()
        elif r < 0.7:
            self.commit()
        elif on_main:
            self.to_feature()
        else:
            self.to_main()

    def recover(self):
        """After a restart: everything this clone has back on main, the teammate's pushes pulled."""
        self.to_main()
        for b in self.git("branch", "--format=%(refname:short)", "--no-merged", "main").stdout.split():
            self.commit()
            self.run("merge", "merge", "-q", "--no-edit", b)
        self.pull()
        self.commit()


class Teammate:
    """Another clone: adds and changes nodes of its own in `.kg/nodes.jsonl` as kgd renders them,
    commits, pulls, pushes. `pushed` is what reached the remote."""

    def __init__(self, git):
        self.git = git
        self.act = Activity()
        self.pushed = {}  # id -> gist in the remote
        self.n = 0
        self.failures = collections.Counter()

    def step(self, rnd):
        g = self.git
        self.act.doing("teammate pull")
        g("pull", "-q", "--no-rebase", "--no-edit", check=False)
        path = os.path.join(g.path, ".kg", kg_format.NODES_FILE)
        with open(path, "rb") as f:
            recs, _ = kg_format.parse(f.read(), "node")
        mine = sorted(k for k in recs if k.startswith("mate-") and "deleted" not in recs[k])
        now = time.time()
        if mine and rnd.random() < 0.4:
            nid = rnd.choice(mine)
        else:
            self.n += 1
            nid = "mate-%d-%d" % (os.getpid() % 1000, self.n)
        gist = "teammate's note %d at %.3f" % (self.n, now)
        old = recs.get(nid)
        recs[nid] = {"id": nid, "gist": gist, "notes": ["by the teammate"], "touches": ["src/mate.py"],
                     "created": old["created"] if old else kg_format.ts(now), "changed": kg_format.ts(now)}
        tmp = path + ".new"
        with open(tmp, "wb") as f:
            f.write(kg_format.render(recs))
        os.replace(tmp, path)
        g("add", ".kg")
        g("commit", "-q", "-m", "teammate: " + nid, check=False)
        self.act.doing("teammate push")
        for _ in range(3):
            if g("push", "-q", "origin", "main", check=False).returncode == 0:
                self.pushed[nid] = gist
                break
            g("pull", "-q", "--no-rebase", "--no-edit", check=False)
        else:
            self.failures["push refused three times"] += 1
        self.act.done()


def loop(step, rnd, stop, lo, hi, errors, name):
    while not stop.wait(rnd.uniform(lo, hi)):
        try:
            step(rnd)
        except Exception as exc:  # reported by the round
            errors.append("%s: %r" % (name, exc))
            return


def forcer(daemon_port, rnd, stop):
    """Rounds of the personal remote asked for at random (as `kgd sync` does), besides the 1 s interval."""
    while not stop.wait(rnd.uniform(0.2, 1.5)):
        try:
            http_request(daemon_port, "POST", "/api/remote", b'{"wait": 0}', {"Content-Type": "application/json"}, 5)
        except OSError:
            return


def pacer(rnd, go, stop, state):
    """Writers run in bursts and pause together: a pause of over a second is when kgd folds its
    journals and writes `.kg/`."""
    while not stop.is_set():
        go.set()
        state["paused"] = None
        if stop.wait(rnd.uniform(0.3, 1.6)):
            break
        go.clear()
        state["paused"] = time.monotonic()
        stop.wait(rnd.uniform(0.8, 2.2))
    go.set()


# ---------------------------------------------------------------- one run

class Bench:
    def __init__(self, seed, rounds, tmp, verbose=False):
        self.seed, self.rounds, self.tmp, self.verbose = seed, rounds, tmp, verbose
        self.rnd = random.Random(seed)
        self.home = os.path.join(tmp, "home")
        os.makedirs(self.home)
        self.genv = git_env(self.home)
        self.root = os.path.join(tmp, "root")
        self.env = {"KG_SYNC_INTERVAL": "1", "KG_MAX_TOKENS": str(BIG), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@localhost", "GIT_COMMITTER_NAME": "me",
                    "GIT_COMMITTER_EMAIL": "me@localhost", "GIT_TERMINAL_PROMPT": "0"}
        self.models = [Model(k) for k in range(WRITERS)]
        for m in self.models:
            m.log = open(os.path.join(tmp, "acked-w%d.log" % m.k), "a", buffering=1, encoding="utf-8")
        self.losses = []
        self.loss_where = collections.Counter()  # user / priv / shared / files / teammate
        self.unexpected = []  # there and never acknowledged, or back after a delete
        self.moments = collections.Counter()
        self.aims = collections.Counter()
        self.notes = collections.Counter()
        self.in_flight = self.in_flight_landed = 0
        self.cwds = {}

    def git(self, path):
        return Git(path, self.genv)

    def setup(self):
        t = self.tmp
        team_remote = os.path.join(t, "team.git")
        self.personal_remote = os.path.join(t, "personal.git")
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", team_remote], env=self.genv, check=True)
        priv = os.path.join(t, "priv")
        os.makedirs(priv)
        self.git(priv)("init", "-q", "-b", "main")
        mine, mate = os.path.join(t, "me", "app"), os.path.join(t, "mate", "app")
        for p in (mine, mate):
            os.makedirs(os.path.dirname(p))
            subprocess.run(["git", "clone", "-q", team_remote, p], env=self.genv, check=True, capture_output=True)
            self.git(p)("checkout", "-q", "-B", "main")
        g = self.git(mine)
        with open(os.path.join(mine, "README"), "w") as f:
            f.write("app\n")
        g("add", "README")
        g("commit", "-q", "-m", "init")
        g("push", "-q", "-u", "origin", "main")
        self.cwds = {"priv": os.path.realpath(priv), "shared": os.path.realpath(mine)}
        self.clone = Clone(g)
        self.d = Daemon(self.root, self.home, self.env).start()
        c = ToolClient(self.d.port)
        sid = c.call("kg_read", {"cwd": self.cwds["shared"]})["structuredContent"]["session_id"]
        c.call("kg_put_node", {"session_id": sid, "level": "project", "id": "seed-node",
                               "gist": "shared from the start"})
        c.close()
        code, out = kgd_cli(self.home, self.env, "share", mine, "--root", self.root, "--port", self.d.port, cwd=mine)
        assert code == 0, out
        g("add", ".kg")
        g("commit", "-q", "-m", "share memory")
        g("push", "-q")
        self.mate = Teammate(self.git(mate))
        self.mate.git("pull", "-q", "origin", "main")
        self.mate.git("branch", "-q", "--set-upstream-to=origin/main", "main")
        code, out = kgd_cli(self.home, self.env, "sync", "--remote", self.personal_remote, "--root", self.root,
                            "--port", self.d.port)
        assert code == 0, out

    # ---- the kill

    def aim_and_kill(self, aim, state):
        rnd = self.rnd
        deadline = time.monotonic() + 6.0
        kg = os.path.join(self.cwds["shared"], ".kg")
        if aim == "any":
            time.sleep(rnd.uniform(0.3, 4.0))
        elif aim == "remote-git":
            time.sleep(rnd.uniform(0.2, 1.0))
            while time.monotonic() < deadline and not any(a[:1] == ["git"] for _, a in self.d.descendants()):
                time.sleep(0.003)
            time.sleep(rnd.uniform(0, 0.02))
        elif aim == "kg-write":
            time.sleep(rnd.uniform(0.2, 1.0))
            while time.monotonic() < deadline and not any(
                    n.startswith(".tmp-") and os.path.join(kg, n) not in self.temps_before[".kg"]
                    for n in os.listdir(kg)):
                time.sleep(0.001)
        elif aim == "project-git":
            time.sleep(rnd.uniform(0.2, 1.0))
            while time.monotonic() < deadline and self.clone.act.now is None and not (
                    self.clone.act.last and time.monotonic() - self.clone.act.last[1] < 0.05):
                time.sleep(0.005)
            time.sleep(rnd.uniform(0, 1.2))  # the pickup: the daemon polls .kg/ every 0.5 s
        elif aim == "fold":
            while time.monotonic() < deadline and state.get("paused") is None:
                time.sleep(0.005)
            time.sleep(rnd.uniform(0.6, 1.8))
        moment = self.moment(state)
        code = self.d.kill()
        assert code == -signal.SIGKILL, code
        return moment

    def moment(self, state):
        """The kinds of moment the kill hits, seen just before it."""
        now = time.monotonic()
        kinds = set()
        for _, argv in self.d.descendants():
            if argv[:1] == ["git"]:
                sub = next((a for a in argv[1:] if not a.startswith("-") and "=" not in a), "?")
                kinds.add("personal remote: git %s running" % sub)
        temps = temp_files(self.root, self.cwds["shared"])
        new = {area: temps[area] - self.temps_before[area] for area in temps}  # stale ones are no moment
        if new[".kg"]:
            kinds.add(".kg/: a temp file open (kgd writing the team's files)")
        if new["sync"]:
            kinds.add("ROOT/sync: a temp file open (mirroring for the remote)")
        if new["root"]:
            kinds.add("ROOT: a temp file open (a graph file or sessions.json written)")
        if os.path.exists(os.path.join(self.root, "sync", ".git", "index.lock")):
            kinds.add("ROOT/sync: index.lock held")
        for who, act in (("clone", self.clone.act), ("teammate", self.mate.act)):
            if act.now is not None:
                kinds.add("%s: git %s in flight" % (who, act.now[0]))
            elif who == "clone" and act.last and now - act.last[1] < 1.0 and act.last[0] in PICKUPS:
                kinds.add("clone: within 1 s after git %s (the pickup)" % act.last[0])
        paused = state.get("paused")
        if paused is not None:
            kinds.add("writes paused %s" % ("over 1 s (fold, .kg/ export)" if now - paused >= 1.0 else "under 1 s"))
        else:
            kinds.add("writers writing")
        for t, line in self.d.log[-20:]:
            if now - t < 0.5 and " kg." in line:
                kinds.add("log: %s" % line.split(" kg.", 1)[1].split(":", 1)[0])
        return kinds

    # ---- checks

    def check_files(self, round_no):
        problems = []
        self.kg_work = check_kg(self.clone.git, problems)
        if self.clone.git("diff", "--quiet", "HEAD", "--", ".kg", check=False).returncode:
            self.notes["kills with a tracked .kg/ file modified in the work tree (contract 9: never)"] += 1
        read_folder(os.path.join(self.root, "sync"), problems)
        problems += fsck(os.path.join(self.root, "sync"))
        problems += fsck(self.personal_remote)
        problems += ["graph file quarantined: %s" % p for p in quarantined(self.root)]
        broken = [n for n in os.listdir(self.root) if "-broken-" in n]
        problems += ["ROOT/sync/.git was found damaged and moved aside: %s" % b for b in broken]
        for p in problems:
            self.lose(round_no, "files after the kill: " + p)

    def lose(self, round_no, what, kind="loss", where="files"):
        self.loss_where["%s %s" % (kind, where)] += 1
        (self.losses if kind == "loss" else self.unexpected).append("round %d: %s" % (round_no, what))
        line = "%s (seed %d) round %d: %s" % (kind.upper(), self.seed, round_no, what)
        print(line, flush=True)
        with open(os.path.join(self.tmp, "losses.txt"), "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def actual(self):
        nodes, edges = {}, {}
        for target, cwd in (("priv", self.cwds["priv"]), ("shared", self.cwds["shared"])):
            st, body = self.d.json("GET", "/api/graph?project_path=%s" % urllib.parse.quote(cwd))
            assert st == 200, body
            parts = [("project", target)] + ([("user", "user")] if target == "priv" else [])
            for part, name in parts:
                g = body[part] or {"nodes": [], "edges": []}
                for n in g["nodes"]:
                    nodes[n["id"]] = (name, n["gist"], tuple(n["notes"]), tuple(n["touches"]))
                for e in g["edges"]:
                    key = "%s->%s:%s" % (e["from"], e["to"], e["rel"])
                    edges[(name, key)] = (e["from"], e["to"], e["rel"], tuple(e["notes"]))
        return nodes, edges

    def compare(self, nodes, edges):
        """[(what, key, want, got)] of every acknowledged write not as told (the write in flight
        may have landed), and of every pushed teammate node missing or older."""
        out = []
        for m in self.models:
            alt = apply_op(m.nodes, m.edges, *m.pending) if m.pending else None
            out += writer_diffs(m, m.nodes, m.edges, nodes, edges, alt)
        for nid, gist in self.mate.pushed.items():
            got = nodes.get(nid)
            if got is None or got[1] != gist:
                out.append(("teammate node", nid, gist, got))
        return out

    def settle(self, round_no):
        """Wait (10 s at most: the pickup's bound is 5) until the daemon shows every acknowledged write."""
        deadline = time.monotonic() + 10.0
        while True:
            nodes, edges = self.actual()
            diffs = self.compare(nodes, edges)
            if not diffs or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        deleted = {}
        for m in self.models:
            deleted.update(m.deleted)
        for what, key, want, got in diffs:
            if want is None and key in deleted:
                self.lose(round_no, "%s %r came back after its acknowledged delete (round %d): %r"
                          % (what, key, deleted[key], got), where=got[0] if what == "node" else key[0])
            elif want is None:
                self.lose(round_no, "%s %r is there and was never acknowledged (or came back with a node whose "
                                    "delete was): %r" % (what, key, got), kind="unexpected",
                          where=got[0] if what == "node" else key[0])
            else:
                where = "teammate" if what == "teammate node" else (want[0] if what == "node" else key[0])
                self.lose(round_no, "%s %r: acknowledged %r, read back %r" % (what, key, want, got), where=where)
        for m in self.models:
            if m.pending is not None:
                self.in_flight += 1
                alt = apply_op(m.nodes, m.edges, *m.pending)
                if (alt[0], alt[1]) != (m.nodes, m.edges) and not writer_diffs(m, alt[0], alt[1], nodes, edges):
                    self.in_flight_landed += 1
                    m.nodes, m.edges = alt
                m.pending = None
            # What was read back is the next round's starting point (a shared node may have gained
            # notes; a difference is reported once, above, not again each round).
            m.nodes = {k: v for k, v in nodes.items() if k.startswith(m.prefix)}
            m.edges = {k: v for k, v in edges.items() if v[0].startswith(m.prefix)}

    # ---- rounds

    def round(self, round_no):
        rnd = self.rnd
        if self.d.proc is None:
            self.d.start()
        stop, go = threading.Event(), threading.Event()
        go.set()
        state = {"paused": None}
        problems = []
        before = sum(sum(m.acked.values()) for m in self.models)
        threads = [threading.Thread(target=writer, daemon=True,
                                    args=(self.d.port, self.cwds, m, random.Random(rnd.random()), round_no, go, stop,
                                          problems)) for m in self.models]
        threads += [
            threading.Thread(target=pacer, args=(random.Random(rnd.random()), go, stop, state), daemon=True),
            threading.Thread(target=loop, args=(self.clone.step, random.Random(rnd.random()), stop, 0.2, 1.2, problems,
                                                "clone"), daemon=True),
            threading.Thread(target=loop, args=(self.mate.step, random.Random(rnd.random()), stop, 0.3, 2.0, problems,
                                                "teammate"), daemon=True),
            threading.Thread(target=forcer, args=(self.d.port, random.Random(rnd.random()), stop), daemon=True)]
        for t in threads:
            t.start()
        aim = rnd.choice(AIMS)
        self.aims[aim] += 1
        self.temps_before = temp_files(self.root, self.cwds["shared"])
        self.d.mark("round %d starts, the kill aimed at %s" % (round_no, aim))
        moment = self.aim_and_kill(aim, state)
        self.d.mark("round %d: killed; moment: %s" % (round_no, "; ".join(sorted(moment))))
        for k in moment:
            self.moments[k] += 1
        stop.set()
        go.set()
        for t in threads:
            t.join(120)
            if t.is_alive():
                problems.append("a thread hung after the kill")
        for p in problems:
            self.lose(round_no, p, where="writers")
        acked = sum(sum(m.acked.values()) for m in self.models) - before
        self.check_files(round_no)
        self.d.start()
        self.d.mark("round %d: restarted" % round_no)
        self.clone.recover()
        self.d.mark("round %d: clone back on main, checking" % round_no)
        self.settle(round_no)
        problems = []
        check_kg(self.clone.git, problems)
        for p in problems:
            self.lose(round_no, "after the restart: " + p)
        if self.verbose:
            print("round %d: aim %s, %d writes acknowledged, moment: %s"
                  % (round_no, aim, acked, "; ".join(sorted(moment))), flush=True)
        return acked

    def finish(self):
        """A last clean stop: the journals fold, `.kg/` and the remote are written whole."""
        code = self.d.stop()
        if code != 0:
            self.lose(self.rounds + 1, "the clean stop exited %s:\n%s" % (code, self.d.log_text()))
        self.check_files(self.rounds + 1)
        left = temp_files(self.root, self.cwds["shared"])
        for area, paths in sorted(left.items()):
            if paths:
                self.notes["temp files the kills left in %s, still there after the clean stop" % area] += len(paths)
        tracebacks = [line for _, line in self.d.log if "Traceback" in line]
        if tracebacks:
            self.notes["tracebacks in the daemon's log"] += len(tracebacks)


def writer_diffs(m, want_n, want_e, nodes, edges, alt=None):
    """[(what, key, want, got)]: one writer's nodes and edges read back against what it was told
    (or, with `alt`, against the state had its write in flight landed)."""
    out = []
    wants = [(want_n, want_e)] + ([alt] if alt else [])
    for key in set().union(*(w[0] for w in wants)) | {i for i in nodes if i.startswith(m.prefix)}:
        got = nodes.get(key)
        if not any(same(w[0].get(key), got) for w in wants):
            out.append(("node", key, want_n.get(key), got))
    for key in set().union(*(w[1] for w in wants)) | {k for k in edges if edges[k][0].startswith(m.prefix)}:
        got = edges.get(key)
        if not any(same(w[1].get(key), got, edge=True, shared=key[0] == "shared") for w in wants):
            out.append(("edge", key, want_e.get(key), got))
    return out


def same(want, got, edge=False, shared=None):
    """An acknowledged node or edge read back: the same, or in a shared project (notes merged from
    another version, the documented rule) the same gist with every acknowledged note and touch kept."""
    if want is None or got is None:
        return want is got
    if want == got:
        return True
    if edge:
        return bool(shared) and want[:3] == got[:3] and set(want[3]) <= set(got[3])
    return want[0] == "shared" and want[:2] == got[:2] and set(want[2]) <= set(got[2]) and set(want[3]) <= set(got[3])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--kgd", metavar="DIR", help="run the kgd checkout in DIR (default: this one)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (its path is printed)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per round")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10 ** 9)
    if shutil.which("git") is None:
        print("git is not installed")
        return 2
    tmp = tempfile.mkdtemp(prefix="kgd-crash-")
    print("bench/crash.py --rounds %d --seed %d (folder %s)" % (args.rounds, seed, tmp), flush=True)
    b = Bench(seed, args.rounds, tmp, args.verbose)
    t0 = time.monotonic()
    acked = 0
    try:
        b.setup()
        for round_no in range(1, args.rounds + 1):
            acked += b.round(round_no)
        b.finish()
    except Exception:
        print("FAILED (seed %d): the bench itself stopped; the daemon's log ends:\n%s" % (seed, b.d.log_text()
              if getattr(b, "d", None) else ""))
        raise
    finally:
        if b.__dict__.get("d") is not None and b.d.proc is not None:
            b.d.kill()
        if not args.keep and not b.losses and not b.unexpected:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - t0
    total = collections.Counter()
    refused = collections.Counter()
    for m in b.models:
        total.update(m.acked)
        refused.update(m.refused)
    print()
    print("rounds: %d in %.0f s (%.1f s a round), seed %d"
          % (args.rounds, elapsed, elapsed / max(1, args.rounds), seed))
    print("acknowledged writes: %d (%s)" % (acked, ", ".join("%s %d" % kv for kv in sorted(total.items()))))
    print("in flight at a kill: %d (landed whole: %d); refused in the shared project because the node left with a "
          "branch: %d" % (b.in_flight, b.in_flight_landed, sum(refused.values())))
    print("teammate nodes pushed and read back: %d" % len(b.mate.pushed))
    print("losses: %d; unexpected (never acknowledged, or back after a delete): %d"
          % (len(b.losses), len(b.unexpected)))
    if b.loss_where:
        print("  by place: %s" % ", ".join("%s %d" % kv for kv in sorted(b.loss_where.items())))
    print("kills aimed at: %s" % ", ".join("%s %d" % kv for kv in sorted(b.aims.items())))
    print("kinds of moment the kills hit (a kill may hit several):")
    for kind, n in sorted(b.moments.items(), key=lambda kv: (-kv[1], kv[0])):
        print("  %4d  %s" % (n, kind))
    if b.clone.refusals or b.notes:
        print("noticed (not losses):")
        for what, n in sorted(list(b.clone.refusals.items()) + list(b.notes.items())):
            print("  %4d  %s" % (n, what))
    if b.losses or b.unexpected:
        print("FAILED: %d losses, %d unexpected; replay with: python3 bench/crash.py --rounds %d --seed %d (kept %s)"
              % (len(b.losses), len(b.unexpected), args.rounds, seed, tmp))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
