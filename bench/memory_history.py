"""The real-history world of bench/memory_eval.py (`--world history --repo GITDIR`): a public
repository's last commits replayed as agent sessions, one commit a session, on its real files.

Rules owned here (bench/README.md says why and what the model leaves out):
- Knowledge is about parts (functions, classes, methods: bench/memory_history_git.py): the first
  commit that changes a part writes a node about it, every later one updates it. Ids, gists and
  notes come from the path, the part's name and the commit (no model): the gist is
  `<part> in <path>: <subject of the last commit that changed it>`.
- A need is the knowledge about a part the commit is about to edit, when a node about it exists
  (it was changed before in the window); it is met when the node's gist head (`: <part> in
  <path>:`) is in a text memory gave before that edit.
- A session: the preload, the prompt (the commit's subject and first lines of its body), then per
  changed file a Read of it, and per part in it the need, then an Edit (old and new lines of the
  part's first hunk); after the edits the knowledge is written (touches `PATH#NAME`, or `PATH`
  with `--touches file`), and a new node is linked to the part changed just before it (at most 3
  links a commit). A commit that changes more than MECHANICAL parts (a reformat, typing all over)
  is replayed as a session with no needs and no knowledge written.
- The clock is the commits' (committer time, at least a minute apart); the daemon's maintenance
  runs once a simulated day, so 365 days without a read can delete orphaned knowledge.
- The baselines get what kgd's hooks get, in the same room: a preload of PRELOAD_LIMIT
  characters with the same usage guide, and file recall of FILE_NODES nodes / FILE_CHARS
  characters on each Read and Edit of a file, not shown before in the session. `lru` takes gists
  newest use first (a write, a read by id, a search hit read, a recall shown); `oracle` this
  session's needs first, then by next need.
"""

import os
import random
import re
import subprocess
import sys

import memory_stale
from memory_eval import DAY, Baseline, KgdHooks, Run
from memory_world import WARM_S, Fact, Need

from kg.agents import loop, preload, recall, recall_lines

MECHANICAL = 40
LINKS = 3


class PartFact(Fact):
    __slots__ = ("path", "qual")


class HSession:
    __slots__ = ("index", "t", "topic", "needs", "discover", "files", "prompt", "steps", "sha", "writes")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _words(qual, path):
    stem = os.path.splitext(os.path.basename(path))[0]
    return [w for w in re.split(r"[._]+", qual) if w][:3] + [stem.strip("_")]


class HistoryWorld:
    """Facts (one per part) and sessions (one per commit) of a replayed history. Every draw (does the
    agent notice an id, search) is seeded, so all policies face the same work."""

    kind = "history"

    def __init__(self, doc, seed=1, touches="part"):
        self.seed, self.doc, self.touch_kind = seed, doc, touches
        rnd = random.Random("history:%s:%s" % (doc["head"], seed))
        commits = doc["commits"]
        t0 = (commits[0]["t"] // 86400) * 86400 if commits else 0
        self.facts, self.sessions, self.need_times = {}, [], {}
        self.by_part, ids = {}, set()
        last_touch, prev_t = {}, -1e18
        for i, c in enumerate(commits):
            t = max(c["t"] - t0 + 9 * 3600.0, prev_t + 600.0)
            prev_t = t
            parts = sum(len(f["parts"]) for f in c["files"])
            steps, needs, writes = [], [], []
            mechanical = parts > MECHANICAL
            for f in c["files"]:
                if f["old"] is not None:
                    steps.append(("read", f["old"]))
                for name, (old, new) in zip(f["parts"], f["edits"]):
                    key = (f["path"], name)
                    fid = self.by_part.get(key)
                    if fid is not None and not mechanical:
                        q = " ".join(rnd.sample(self.facts[fid].words, min(2, len(self.facts[fid].words))))
                        need = Need(fid, rnd.random() < 0.85, rnd.random() < 0.8, q, False,
                                    t - last_touch.get(fid, -1e18) < WARM_S)
                        needs.append(need)
                        steps.append(("need", need))
                        self.need_times.setdefault(fid, []).append(i)
                    steps.append(("edit", f["path"], old, new))
                    if mechanical:
                        continue
                    if fid is None:
                        fid = self._fact(key, ids)
                    writes.append(fid)
                    last_touch[fid] = t
            prompt = (c["subject"] + " " + " ".join(c["body"].split("\n\n")[0].split())[:300]).strip()
            self.sessions.append(HSession(index=i, t=t, topic="history", needs=needs, discover=[], files=[],
                                          prompt=prompt, steps=steps, sha=c["sha"], writes=writes))
        self.days = int(prev_t // DAY) + 2 if commits else 1
        self.files = sorted(doc["tree"])

    def _fact(self, key, ids):
        path, qual = key
        base = "%s-%s" % (_slug(os.path.splitext(re.sub(r"^(src|lib)/", "", path))[0]), _slug(qual))
        nid, k = base, 2
        while nid in ids:
            nid, k = "%s-%d" % (base, k), k + 1
        ids.add(nid)
        fid = "p%04d" % len(self.facts)
        self.by_part[key] = fid
        touch = "%s#%s" % (path, qual) if self.touch_kind == "part" else path
        self.facts[fid] = PartFact(fid=fid, path=path, qual=qual, level="project", topic=_slug(path.split("/")[0]),
                                   node_id=nid, gist="",
                               notes=[], touches=[touch], words=_words(qual, path), ident=_slug(qual),
                               emerge_day=0, weight=1.0, related=[], links=[])
        return fid

    def marker(self, fid):
        f = self.facts[fid]
        return ": %s in %s:" % (f.qual, f.path)


class HistoryRun(Run):
    """Run's agent and figures, with a session shaped as the commit's edits (see the module doc)."""

    def __init__(self, world, policy, max_tokens, args):
        Run.__init__(self, world, policy, max_tokens, args)
        memory_stale.cache_parses()
        self.commit = {c["sha"]: c for c in world.doc["commits"]}
        self.cur = {}  # fid -> (gist, notes) as last written
        self.truth = memory_stale.Truth()
        self.tally = memory_stale.Tally(self.truth, world.facts)

    def memories(self):
        import memory_eval
        return dict(memory_eval.MEMORIES, **MEMORIES)

    def project_files(self, project):
        for path, text in self.world.doc["tree"].items():
            self._write(project, path, text)
            self.truth.land(path, text)
        if getattr(self.args, "git_project", False):
            os.rmdir(os.path.join(project, ".git"))
            self._git("init", "-q")
            self._git("add", "-A", ".")
            self._git("commit", "-q", "--allow-empty", "-m", "the tree before the window", when=0)

    def _git(self, *args, when=None):
        """git in the project (--git-project): the replay's own commits, dated by the simulated clock."""
        env = dict(os.environ, GIT_AUTHOR_NAME="replay", GIT_AUTHOR_EMAIL="replay@example.invalid",
                   GIT_COMMITTER_NAME="replay", GIT_COMMITTER_EMAIL="replay@example.invalid",
                   GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
        if when is not None:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = "@%d +0000" % (1500000000 + int(when))
        subprocess.run(["git", "-C", self.project] + list(args), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)

    def _write(self, project, path, text):
        p = os.path.join(project, path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)

    def marker(self, nid):
        return self.world.marker(self.fact_of[nid])

    def gist_of(self, nid):
        return self.cur[self.fact_of[nid]][0]

    def session(self, mem, sess):
        st = self.stats
        st["sessions"] += 1
        chars_before = st["chars"]
        self.now = max(self.now, sess.t)
        self.tally.begin()
        took = memory_stale.refresh_marks(mem)
        if took is not None:
            self.tally.pass_seconds.append(took)
        texts = self.receive(mem.begin(sess, self.world, self), st)
        self.tick()
        texts += self.receive(mem.prompt(sess.prompt), st)
        for step in sess.steps:
            self.tick()
            if step[0] == "read":
                texts += self.receive(mem.file_read(step[1]), st)
            elif step[0] == "edit":
                texts += self.receive(mem.file_edit(step[1], step[2], step[3]), st)
            else:
                self.need(mem, step[1], texts)
        c = self.commit[sess.sha]
        for f in c["files"]:
            self._write(self.project, f["path"], f["text"])
            self.truth.land(f["path"], f["text"])
        if getattr(self.args, "git_project", False) and c["files"]:
            self._git("add", "--", *[f["path"] for f in c["files"]])
            self._git("commit", "-q", "--allow-empty", "-m", c["subject"] or sess.sha, when=self.now)
        self.write_knowledge(mem, sess, c)
        self.tick()
        for src, text in mem.stop():
            self.tally.see([(src, text)], self)
            st["chars"] += len(text)
            st["hook_chars"] += len(text)
        st["session_chars"].append(st["chars"] - chars_before)

    def receive(self, got, st):
        for src, text in got:
            st["chars"] += len(text)
            st["preload_chars" if src == "preload" else "hook_chars"] += len(text)
        self.tally.see(got, self)
        return got

    def need(self, mem, need, texts):
        st = self.stats
        k = len(texts)
        outcome = self.resolve(mem, need, texts)
        self.tally.see(texts[k:], self)  # what a read by id or a search brought
        st["needs"] += 1
        st["warm" if need.warm else "cold"][outcome] += 1
        st["project"][outcome] += 1

    def write_knowledge(self, mem, sess, c):
        date = c["t"]
        prev = None
        links = 0
        for fid in sess.writes:
            f = self.world.facts[fid]
            gist = "%s in %s: %s" % (f.qual, f.path, c["subject"])
            note = "Changed in %s (day %d): %s" % (sess.sha[:8], (sess.t // DAY), c["subject"])
            old = self.cur.get(fid)
            notes = ((old[1] if old else []) + [note])[-3:]
            self.cur[fid] = (gist, notes)
            nids = self.nodes_of.get(fid)
            new = not nids
            nid = f.node_id if new else nids[-1]
            self.tick(5.0)
            self.put(mem, f, nid, gist, notes=notes, new=new)
            if new and prev is not None and links < LINKS:
                self.edge(mem, "project", nid, self.nodes_of[prev][-1], "changed-with")
                links += 1
            prev = fid
        del date

    def put(self, mem, fact, nid, gist, notes=None, new=True):
        """A put of the fact's node (a re-derived one too: resolve() calls this with a new id)."""
        if notes is None:  # re-derived after a miss: the knowledge as it was last written
            gist, notes = self.cur[fact.fid]
            gist = gist + " (re-derived)"
        try:
            mem.put_node(fact.level, nid, gist, list(notes), list(fact.touches))
        except Exception:
            self.stats["put_errors"] += 1
            return
        if nid not in self.fact_of:
            self.nodes_of.setdefault(fact.fid, []).append(nid)
            self.fact_of[nid] = fact.fid
            self.node_born[nid] = self.now
        self.last_use[nid] = self.now
        self.tally.put(nid, fact.fid)

    def summary(self):
        out = Run.summary(self)
        out["stale"] = self.tally.summary()
        ps = sorted(self.tally.pass_seconds)
        if ps:  # wall times: printed, never stored (the same seed gives the same JSON)
            print("  %s: stale-marks pass median %.3f s, max %.3f s, %.1f s in all" % (
                self.policy, ps[len(ps) // 2], ps[-1], sum(ps)), file=sys.stderr)
        return out


# ---------------------------------------------------------------- baselines with file recall

def _about(node, path):
    """Whether a node's touches name this file (a part touch PATH#NAME names PATH)."""
    return any(t.split("#", 1)[0] == path for t in node.get("touches", ()))


class HistoryBaseline(Baseline):
    """A preload of the hooks' room and file recall on each Read and Edit, in `order`."""

    def begin(self, sess, world, run):
        self.session = self.store.start_session(self.project)
        self.sess, self.world, self.run, self.shown = sess, world, run, set()
        g = self.store.read_graphs(self.session)["project"]
        self.nodes = {n["id"]: n for n in g["nodes"]}
        head = preload._usage(self.session.id)
        room = preload.PRELOAD_LIMIT - sum(len(x) + 1 for x in head) - 480
        lines, used = [], 0
        for nid in self.order(list(self.nodes.values()), sess, world, run):
            line = "- %s: %s" % (nid, recall.clip(self.nodes[nid]["gist"], preload.PRELOAD_GIST))
            if used + len(line) + 1 > room:
                break
            lines.append(line)
            used += len(line) + 1
            self.shown.add(nid)
        self.last_counts = {"project": {"active": len(lines), "archived": 0, "tokens": 0, "nodes": len(self.nodes)}}
        text = "\n".join(head + ["", "## Project knowledge, most valuable first:"] + (lines or ["(nothing yet)"]))
        self.read_chars.append(len(text))
        return [("preload", text)]

    def _recall(self, path):
        about = [n for n in self.nodes.values() if n["id"] not in self.shown and _about(n, path)]
        order = self.order(about, self.sess, self.world, self.run)
        head = "kg memory that may be relevant to %s:" % path
        by_id = {n["id"]: n for n in about}
        lines, used = recall_lines.fit_lines([("project", by_id[i], "active") for i in order], loop.FILE_NODES,
                                       loop.FILE_CHARS - len(head) - 1)
        for _, n, _ in used:
            self.shown.add(n["id"])
            self.run.last_use[n["id"]] = self.run.now  # shown by recall counts as a use, as in kgd
        return [("file", "\n".join([head] + lines))] if lines else []

    def file_read(self, path):
        return self._recall(path)

    def file_edit(self, path, old, new):
        return self._recall(path)

    def put_node(self, level, nid, gist, notes, touches):
        Baseline.put_node(self, level, nid, gist, notes, touches)
        self.nodes[nid] = {"id": nid, "gist": gist, "notes": notes, "touches": touches}


class HistoryLRU(HistoryBaseline):
    name = "lru"

    def order(self, nodes, sess, world, run):
        return [n["id"] for n in sorted(nodes, key=lambda n: (-run.last_use.get(n["id"], 0.0), n["id"]))]


class HistoryOracle(HistoryBaseline):
    name = "oracle"

    def order(self, nodes, sess, world, run):
        best = {}
        for n in nodes:
            fid = run.fact_of.get(n["id"])
            nxt = None
            if fid is not None and run.nodes_of[fid][-1] == n["id"]:
                nxt = next((i for i in world.need_times.get(fid, ()) if i >= sess.index), None)
            best[n["id"]] = (nxt if nxt is not None else 10 ** 9, -run.last_use.get(n["id"], 0), n["id"])
        return sorted(best, key=best.get)


class KgdHooksMarks(KgdHooks):
    """kgd's hooks with its stale marks computed before each session (bench/memory_stale.py)."""

    stale_marks = True


MEMORIES = {"kgd-hooks": KgdHooksMarks, "kgd-hooks-nostale": memory_stale.KgdHooksNoStale, "lru": HistoryLRU,
            "oracle": HistoryOracle}
POLICIES = ["kgd-hooks", "lru", "oracle"]  # and kgd-hooks-nostale (marks off) when asked for
