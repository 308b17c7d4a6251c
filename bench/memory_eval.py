"""Memory quality evaluation: seeded months of simulated agent sessions driving the real
kgd store in-process with an injected clock, measuring whether the facts a session needs are in
its context when needed.

Run from the repository root:
    python3 bench/memory_eval.py                       # 180 days, 2500/5000/10000 tokens, seed 1
    python3 bench/memory_eval.py --quick               # 180 days at 5000 tokens only, under 20 s
    python3 bench/memory_eval.py --seed 1,2 --max-tokens 5000 --policy kgd,lru,oracle
    python3 bench/memory_eval.py --compare before.json after.json

Rules owned here (bench/README.md says why and what the model leaves out):
- Every policy faces the same world (bench/memory_world.py); only what memory shows differs.
- A need is "in context" when the gist of one of its fact's nodes (its first 28 characters) is in
  a text the agent received before needing it; the source is the first such text (preload,
  recall, file recall). Otherwise, in order: an id of one of its nodes shown in a received text
  (one kg_read id= call), found by the agent's search in the top 5 (search + read: two calls),
  lost (none of its nodes exists any more) or missed (they exist, the agent did not reach them).
  A missed fact is re-derived and put again under a new id: a duplicate.
- Baselines (none, lru, oracle) run on a store whose budget never triggers compaction; they pick
  the active set themselves with the contract's estimate and the same max_tokens, cap the archived
  ids shown at 0.3 x max_tokens / 5 like pass 2, and render with kg.render.render_read.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


from memory_report import compare, table  # noqa: E402
from memory_world import DAY, KINDS, World  # noqa: E402

from kg.api import render  # noqa: E402
from kg.core.errors import KgError  # noqa: E402
from kg.memory.store import Settings, Store  # noqa: E402
from kg.travel import team

PREFIX = 28
TIMELINE_DAYS = 30
EDGE_TOKENS = 15
SEARCH_TOP = 5
POLICIES = ["kgd", "kgd-hooks", "none", "lru", "oracle"]  # and "reference" with --reference
IN_CONTEXT = ("preload", "recall", "file")
OUTCOMES = IN_CONTEXT + ("id", "search", "missed", "lost")


def node_tokens(n):
    """Contract section 5's per-node estimate."""
    return 20 + (len(n["gist"]) + sum(len(x) for x in n["notes"])) // 4


def hooks_module():
    try:
        from kg.agents import loop as hooks
    except ImportError:
        return None
    return hooks if hasattr(hooks, "handler") else None


# ---------------------------------------------------------------- memories: what the agent can call

class Memory:
    """One policy over a real Store. Subclasses decide what the session start (and hooks) show."""

    name = "?"

    def __init__(self, root, project, max_tokens, args, clock):
        self.max_tokens = max_tokens
        self.project = project
        self.store = team.install(Store(root, self.settings(max_tokens, args), clock=clock)).open()
        self.session = None
        self.read_chars = []

    def settings(self, max_tokens, args):
        return Settings(max_tokens=max_tokens, grace_days=args.grace_days, orphan_grace_days=args.orphan_grace_days)

    def close(self):
        self.store.close()

    def begin(self, sess, world, run):
        """Start a session; return [(source, text)] the agent receives before its first prompt."""
        self.session = self.store.start_session(self.project)
        text = self.preload(sess, world, run)
        self.read_chars.append(len(text))
        return [("preload", text)]

    def preload(self, sess, world, run):
        graphs = self.store.read_graphs(self.session)
        return render.render_read(self._result(graphs), self.max_tokens)

    def _result(self, graphs):
        return {"session_id": self.session.id, "project_path": self.session.project_path,
                "user": graphs["user"], "project": graphs["project"],
                "budget": {"max_tokens": self.max_tokens, "user_tokens": graphs["user"]["tokens"],
                           "project_tokens": graphs["project"]["tokens"]}}

    def prompt(self, text):
        return []

    def file_read(self, path):
        return []

    def file_edit(self, path, old, new):
        return []

    def stop(self):
        return []

    def read_ids(self, ids):
        r = self.store.read_nodes(self.session, list(ids))
        return render.render_nodes(r)

    def search(self, query):
        r = self.store.search(query, self.session, 20)
        return render.render_search(r, query), [x["id"] for x in r["results"]]

    def put_node(self, level, nid, gist, notes, touches):
        self.store.put_node(self.session, level, nid, gist, notes, touches)

    def put_edge(self, level, frm, to, rel):
        self.store.put_edge(self.session, level, frm, to, rel, None)

    def exists(self, nid):
        try:
            r = self.store.search(nid, self.session, 1)
        except KgError:
            return False
        return bool(r["results"]) and r["results"][0]["id"] == nid

    def end_of_day(self, now):
        self.store.maintenance(now)

    def counts(self):
        s = self.store.start_session(self.project)
        g = self.store.read_graphs(s)
        return {lv: {"active": len(g[lv]["nodes"]), "archived": len(g[lv]["archived"]), "edges": len(g[lv]["edges"]),
                     "tokens": g[lv]["tokens"], "node_tokens": sum(node_tokens(n) for n in g[lv]["nodes"])}
                for lv in ("user", "project")}


class KgdRead(Memory):
    """kgd as it is: the session-start kg_read text (tools._read), nothing else."""

    name = "kgd"


class KgdHooks(Memory):
    """kgd with its Claude Code hooks (kg/agents/loop.py): preload, prompt recall, file recall."""

    name = "kgd-hooks"

    def __init__(self, root, project, max_tokens, args, clock):
        Memory.__init__(self, root, project, max_tokens, args, clock)
        self.handle = hooks_module().handler(self.store)
        self.claude_id = None
        self.errors = 0

    def _hook(self, payload):
        """The hook's answer as the model would see it: additionalContext (or a Stop's reason)."""
        payload = dict(payload, session_id=self.claude_id, cwd=self.project, transcript_path="")
        try:
            out = self.handle(payload) or {}
        except Exception:  # a hook failure is non-blocking in Claude Code: count it, show the first
            self.errors += 1
            if self.errors == 1:
                traceback.print_exc()
            return ""
        spec = out.get("hookSpecificOutput") or {}
        return spec.get("additionalContext") or out.get("reason") or ""

    def stop(self):
        return [("stop", self._hook({"hook_event_name": "Stop", "stop_hook_active": False,
                                     "last_assistant_message": "Done."}))]

    def begin(self, sess, world, run):
        self.claude_id = "00000000-0000-4000-8000-%012d" % sess.index
        text = self._hook({"hook_event_name": "SessionStart", "source": "startup"})
        m = re.search(r"Session: (\S+)", text)
        self.session = None
        if m:
            try:
                self.session = self.store.session(m.group(1))
            except KgError:
                self.session = None
        if self.session is None:
            self.session = self.store.start_session(self.project)
        self.read_chars.append(len(text))
        return [("preload", text)]

    def prompt(self, text):
        return [("recall", self._hook({"hook_event_name": "UserPromptSubmit", "prompt": text,
                                       "permission_mode": "default"}))]

    def file_read(self, path):
        full = os.path.join(self.project, path)
        return [("file", self._hook({"hook_event_name": "PostToolUse", "tool_name": "Read",
                                     "tool_input": {"file_path": full},
                                     "tool_response": {"type": "text", "file": {"filePath": full, "content": "..."}}}))]

    def file_edit(self, path, old, new):
        full = os.path.join(self.project, path)
        return [("file", self._hook({"hook_event_name": "PostToolUse", "tool_name": "Edit",
                                     "tool_input": {"file_path": full, "old_string": old, "new_string": new},
                                     "tool_response": {"filePath": full, "oldString": old, "newString": new}}))]


class Baseline(Memory):
    """A preload chosen by the bench over a store that never compacts (all nodes stay active).

    Per graph: nodes are taken in `order` while the contract's estimate stays within max_tokens
    (past a node that does not fit: the next ones are tried when skip_misfits, else the fill
    stops); the next ones in that order are listed as archived ids, at most 0.3 x max_tokens / 5."""

    skip_misfits = True

    def __init__(self, root, project, max_tokens, args, clock):
        Memory.__init__(self, root, project, max_tokens, args, clock)
        self.last_counts = {}

    def settings(self, max_tokens, args):
        return Settings(max_tokens=10 ** 9, grace_days=args.grace_days, orphan_grace_days=args.orphan_grace_days)

    def order(self, nodes, sess, world, run):
        raise NotImplementedError

    def counts(self):
        """What the last preload held (the store itself keeps every node active)."""
        return self.last_counts

    def fill(self, nodes, edges, order):
        by_id = {n["id"]: n for n in nodes}
        adj = {}
        for e in edges:
            for end in {e["from"], e["to"]}:
                adj.setdefault(end, []).append(e)
        active, total = set(), 0
        for nid in order:
            # an edge already counted through its other (active) end costs nothing more
            cost = node_tokens(by_id[nid]) + EDGE_TOKENS * sum(
                1 for e in adj.get(nid, ()) if not ({e["from"], e["to"]} - {nid}) & active)
            if total + cost > self.max_tokens:
                if self.skip_misfits:
                    continue
                break
            active.add(nid)
            total += cost
        return active, total

    def select(self, g, sess, world, run):
        order = self.order(g["nodes"], sess, world, run)
        active, total = self.fill(g["nodes"], g["edges"], order)
        archived = [nid for nid in order if nid not in active][:int(0.3 * self.max_tokens / 5)]
        return active, archived, total

    def preload(self, sess, world, run):
        graphs = self.store.read_graphs(self.session)
        out = {}
        for lv in ("user", "project"):
            g = graphs[lv]
            active, archived, total = self.select(g, sess, world, run)
            self.last_counts[lv] = {"active": len(active), "archived": len(archived), "tokens": total,
                                    "nodes": len(g["nodes"])}
            out[lv] = {"nodes": [n for n in g["nodes"] if n["id"] in active], "archived": sorted(archived),
                       "edges": [e for e in g["edges"] if e["from"] in active or e["to"] in active],
                       "recency": g["recency"], "tokens": total}
        return render.render_read(self._result(out), self.max_tokens)


class NoCompaction(Baseline):
    """Every node active; only the renderer's 40,000 characters bound the text."""

    name = "none"

    def select(self, g, sess, world, run):
        return {n["id"] for n in g["nodes"]}, [], g["tokens"]


class LRU(Baseline):
    """Least recently used, by what a memory can observe: writes, reads by id, search hits read."""

    name = "lru"
    skip_misfits = False

    def order(self, nodes, sess, world, run):
        return [n["id"] for n in sorted(nodes, key=lambda n: (-run.last_use.get(n["id"], 0.0), n["id"]))]


class Oracle(Baseline):
    """Knows the future: this session's needs first, then by next need; the ceiling."""

    name = "oracle"

    def order(self, nodes, sess, world, run):
        best = {}
        for n in nodes:
            fid = run.fact_of.get(n["id"])
            nxt = None
            if fid is not None and run.nodes_of[fid][-1] == n["id"]:  # one node per fact: the newest
                nxt = next((i for i in world.need_times.get(fid, ()) if i >= sess.index), None)
            best[n["id"]] = (nxt if nxt is not None else 10 ** 9, -run.node_born.get(n["id"], 0), n["id"])
        return sorted(best, key=best.get)


MEMORIES = {"kgd": KgdRead, "kgd-hooks": KgdHooks, "none": NoCompaction, "lru": LRU, "oracle": Oracle}


# ---------------------------------------------------------------- one run

class Run:
    """One (policy, budget, seed) over the world: the agent, its bookkeeping and the figures."""

    def __init__(self, world, policy, max_tokens, args):
        self.world = world
        self.policy = policy
        self.max_tokens = max_tokens
        self.args = args
        self.now = 0.0
        self.nodes_of = {}   # fid -> node ids put for it, oldest first
        self.fact_of = {}    # node id -> fid
        self.node_born = {}  # node id -> time put
        self.last_use = {}   # node id -> last write / read by id (what LRU sees)
        self.stats = {"needs": 0, "warm": dict.fromkeys(OUTCOMES, 0), "cold": dict.fromkeys(OUTCOMES, 0),
                      "user": dict.fromkeys(OUTCOMES, 0), "project": dict.fromkeys(OUTCOMES, 0),
                      "conventions": dict.fromkeys(OUTCOMES, 0), "session_chars": [],
                      "duplicates": 0, "recreated_after_loss": 0, "sessions": 0, "chars": 0, "preload_chars": 0,
                      "hook_chars": 0, "calls": 0, "max_read_chars": 0, "reads_over_40000": 0, "put_errors": 0,
                      "timeline": []}

    def clock(self):
        return self.now

    def execute(self):
        base = tempfile.mkdtemp(prefix="kgd-mem-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        try:
            project = self.project = os.path.join(base, "project")
            os.makedirs(os.path.join(project, ".git"))
            self.project_files(project)
            self.now = -DAY
            mem = self.memories()[self.policy](os.path.join(base, "root"), project, self.max_tokens, self.args,
                                               self.clock)
            try:
                day = 0
                for sess in self.world.sessions:
                    while sess.t >= (day + 1) * DAY:
                        self.day_end(mem, day)
                        day += 1
                    self.now = sess.t
                    self.session(mem, sess)
                while day < self.world.days:
                    self.day_end(mem, day)
                    day += 1
                self.stats["end"] = mem.counts()
            finally:
                mem.close()
            self.stats["hook_errors"] = getattr(mem, "errors", 0)
            reads = mem.read_chars
            self.stats["max_read_chars"] = max(reads) if reads else 0
            self.stats["reads_over_40000"] = sum(1 for r in reads if r > 40000)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return self.summary()

    def project_files(self, project):
        for f in self.world.files:
            p = os.path.join(project, f)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as fh:
                fh.write("# %s\n" % f)

    def memories(self):
        return MEMORIES

    def day_end(self, mem, day):
        """The daemon's maintenance pass (once a simulated day); every 30 days a point of the timeline."""
        self.now = (day + 1) * DAY - 3600
        mem.end_of_day(self.now)
        if (day + 1) % TIMELINE_DAYS == 0:
            st = self.stats
            done = {k: st["warm"][k] + st["cold"][k] for k in OUTCOMES}
            prev = st.get("_mark", dict.fromkeys(OUTCOMES, 0))
            period = {k: done[k] - prev[k] for k in OUTCOMES}
            st["_mark"] = done
            n = sum(period.values())
            point = {"day": day + 1, "needs": n, "in_context": pct(sum(period[k] for k in IN_CONTEXT), n),
                     "reachable": pct(sum(period[k] for k in IN_CONTEXT + ("id",)), n)}
            point.update(mem.counts())
            st["timeline"].append(point)

    def tick(self, seconds=20.0):
        self.now += seconds

    def session(self, mem, sess):
        st = self.stats
        st["sessions"] += 1
        chars_before = st["chars"]
        texts = mem.begin(sess, self.world, self)
        self.tick()
        texts += mem.prompt(sess.prompt)
        for path in sess.files:
            self.tick()
            texts += mem.file_read(path)
        for src, text in texts:
            st["chars"] += len(text)
            if src == "preload":
                st["preload_chars"] += len(text)
            else:
                st["hook_chars"] += len(text)
        for need in sess.needs:
            self.tick()
            outcome = self.resolve(mem, need, texts)
            st["needs"] += 1
            st["warm" if need.warm else "cold"][outcome] += 1
            st[self.world.facts[need.fid].level][outcome] += 1
            if self.world.facts[need.fid].topic == "conventions":
                st["conventions"][outcome] += 1
        for fid in sess.discover:
            self.tick()
            self.learn(mem, fid)
        self.tick()
        for src, text in mem.stop():
            st["chars"] += len(text)
            st["hook_chars"] += len(text)
        st["session_chars"].append(st["chars"] - chars_before)

    def resolve(self, mem, need, texts):
        fact = self.world.facts[need.fid]
        nids = self.nodes_of.get(need.fid, [])
        prefixes = [self.marker(nid) for nid in nids]
        found = None
        for src, text in texts:
            if any(p in text for p in prefixes):
                found = src
                break
        if found is not None and found in IN_CONTEXT:
            self.used(mem, need, nids[-1])
            return found
        if found is not None:  # in the text of an earlier read or search of this session
            self.used(mem, need, nids[-1])
            return "search" if found == "search" else "id"
        for src, text in texts if need.notice else ():
            hit = next((nid for nid in reversed(nids) if re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(nid), text)),
                       None)
            if hit is not None:
                self.read(mem, texts, hit)
                self.used(mem, need, hit)
                return "id"
        if need.search:
            self.stats["calls"] += 1
            try:
                text, ids = mem.search(need.query)
            except KgError:
                text, ids = "", []
            self.stats["chars"] += len(text)
            texts.append(("search", text))
            hit = next((i for i in ids[:SEARCH_TOP] if i in nids), None)
            if hit is not None:
                self.read(mem, texts, hit)
                self.used(mem, need, hit)
                return "search"
        lost = not any(mem.exists(nid) for nid in nids)
        k = len(nids) + 1
        nid = "%s-%s-again-%d" % (fact.topic, fact.ident.replace("_", "-"), k)
        if self.fact_of.get(nid, fact.fid) != fact.fid:  # two facts, one slug (`Argument` and `argument`)
            nid = "%s-%s-again-%d" % (fact.node_id, fact.fid, k)
        if lost:
            self.stats["recreated_after_loss"] += 1
        else:
            self.stats["duplicates"] += 1
        self.put(mem, fact, nid, "%s (re-derived %d): %s" % (fact.ident, k, fact.gist))
        return "lost" if lost else "missed"

    def read(self, mem, texts, nid):
        self.stats["calls"] += 1
        try:
            text = mem.read_ids([nid])
        except KgError:
            text = ""
        self.stats["chars"] += len(text)
        texts.append(("read", text))
        self.last_use[nid] = self.now

    def used(self, mem, need, nid):
        """After the agent has the fact: sometimes it updates the node (a put with new notes)."""
        if need.update:
            fact = self.world.facts[need.fid]
            self.tick()
            try:
                mem.put_node(fact.level, nid, self.gist_of(nid), fact.notes + ["Checked again on day %d." %
                                                                              (self.now // DAY)], None)
                self.last_use[nid] = self.now
            except KgError:
                self.stats["put_errors"] += 1

    def marker(self, nid):
        """What of a node's text shows that the agent has it: its gist's head."""
        return self.gist_of(nid)[:PREFIX]

    def gist_of(self, nid):
        fact = self.world.facts[self.fact_of[nid]]
        k = self.nodes_of[fact.fid].index(nid)
        return fact.gist if k == 0 else "%s (re-derived %d): %s" % (fact.ident, k + 1, fact.gist)

    def learn(self, mem, fid):
        fact = self.world.facts[fid]
        self.put(mem, fact, fact.node_id, fact.gist)

    def put(self, mem, fact, nid, gist):
        try:
            mem.put_node(fact.level, nid, gist, list(fact.notes), list(fact.touches))
        except KgError:
            self.stats["put_errors"] += 1
            return
        self.nodes_of.setdefault(fact.fid, []).append(nid)
        self.fact_of[nid] = fact.fid
        self.node_born[nid] = self.now
        self.last_use[nid] = self.now
        for other in fact.related:
            onids = self.nodes_of.get(other)
            if onids:
                self.edge(mem, fact.level, nid, onids[-1], "relates-to")
        for path in fact.touches[:1]:
            self.edge(mem, fact.level, nid, path, "implemented-in")

    def edge(self, mem, level, frm, to, rel):
        self.tick(1.0)
        try:
            mem.put_edge(level, frm, to, rel)
        except KgError:
            pass  # the other end was deleted: an agent would get an error and move on

    def summary(self):
        st = self.stats
        out = {"policy": self.policy, "max_tokens": self.max_tokens, "seed": self.world.seed,
               "days": self.world.days, "world": self.world.kind}
        n = max(1, st["needs"])
        for part in ("warm", "cold"):
            total = sum(st[part].values())
            out[part + "_needs"] = total
            out[part + "_in_context"] = pct(sum(st[part][k] for k in IN_CONTEXT), total)
        both = {k: st["warm"][k] + st["cold"][k] for k in OUTCOMES}
        out["needs"] = st["needs"]
        out["outcomes"] = both
        out["in_context"] = pct(sum(both[k] for k in IN_CONTEXT), n)
        out["reachable"] = pct(sum(both[k] for k in IN_CONTEXT + ("id",)), n)
        for k in OUTCOMES:
            out["share_" + k] = pct(both[k], n)
        s = max(1, st["sessions"])
        conv = st["conventions"]
        out["conventions_needs"] = sum(conv.values())
        out["conventions"] = dict(conv)
        out["conventions_in_context"] = pct(sum(conv[k] for k in IN_CONTEXT), sum(conv.values()))
        out["chars_per_session_median"] = median(st["session_chars"])
        out["chars_per_session_p90"] = p90(st["session_chars"])
        out.update(
            {
                "sessions": st["sessions"],
                "duplicates": st["duplicates"],
                "recreated_after_loss": st["recreated_after_loss"],
                "lost": both["lost"],
                "chars_per_session": round(st["chars"] / s),
                "preload_chars_per_session": round(st["preload_chars"] / s),
                "hook_chars_per_session": round(st["hook_chars"] / s),
                "calls_per_session": round(st["calls"] / s, 2),
                "max_read_chars": st["max_read_chars"],
                "reads_over_40000": st["reads_over_40000"],
                "put_errors": st["put_errors"],
                "hook_errors": st.get("hook_errors", 0),
                "warm": st["warm"],
                "cold": st["cold"],
                "by_level": {lv: st[lv] for lv in ("user", "project")},
                "end": st.get("end"),
                "timeline": st["timeline"],
            }
        )
        return out


def median(xs):
    xs = sorted(xs)
    if not xs:
        return 0
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else round((xs[mid - 1] + xs[mid]) / 2)


def p90(xs):
    """The 90th percentile (nearest rank) of the characters memory put into one session's context."""
    xs = sorted(xs)
    return xs[max(0, -(-9 * len(xs) // 10) - 1)] if xs else 0


def pct(a, b):
    return round(100.0 * a / b, 1) if b else 0.0


def load_plugin(path):
    """Run a variant file with this module importable as `memory_eval` (also when run as a script)."""
    import importlib.util
    sys.modules.setdefault("memory_eval", sys.modules[__name__])
    spec = importlib.util.spec_from_file_location("memory_eval_plugin_%d" % len(sys.modules), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seed", default="1", help="seed or comma list (default 1)")
    p.add_argument("--days", type=int, default=180)
    p.add_argument("--world", default=KINDS[0], choices=KINDS + ("history",),
                   help="conventions (default: 30 cross-topic conventions), classic (the first world) or history "
                        "(a real repository's commits, --repo)")
    p.add_argument("--repo", default=None, metavar="GITDIR",
                   help="--world history: the git directory to replay (e.g. a /work/.mirror/OWNER+NAME/repo)")
    p.add_argument("--commits", type=int, default=1000, help="--world history: the last N non-merge commits")
    p.add_argument("--touches", default="part", choices=("part", "file"),
                   help="--world history: knowledge touches PATH#NAME (default) or PATH")
    p.add_argument("--git-project", action="store_true",
                   help="--world history: the project is a git repository, each replayed commit committed "
                        "(kgd's marks then say how many commits ago; slower)")
    p.add_argument("--max-tokens", default="2500,5000,10000", help="comma list")
    p.add_argument("--policy", default=",".join(POLICIES), help="comma list of " + ", ".join(POLICIES))
    p.add_argument("--no-hooks", action="store_true", help="leave out kgd-hooks")
    p.add_argument("--quick", action="store_true", help="one budget (5000 unless --max-tokens is given): under 20 s")
    p.add_argument("--grace-days", type=float, default=7.0)
    p.add_argument("--orphan-grace-days", type=float, default=365.0)
    p.add_argument("--json", default=None, help="where to write the results (default bench/results/memory-*.json)")
    p.add_argument("--label", default="", help="a name for this run, kept in the JSON (e.g. the variant tried)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="a Python file that adds policies: memory_eval.MEMORIES['name'] = SomeMemorySubclass")
    p.add_argument("--reference", default=None, metavar="DIR",
                   help="a checkout of the reference plugin's knowledge-graph/ (adds the 'reference' row)")
    p.add_argument("--reference-python", default=None, metavar="PY", help="the interpreter of its throwaway venv")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="print two JSON results side by side")
    a = p.parse_args(argv)
    a.seeds = [int(x) for x in a.seed.split(",") if x.strip()]
    a.budgets = [int(x) for x in a.max_tokens.split(",") if x.strip()]
    if a.world == "history":
        if not a.repo:
            p.error("--world history needs --repo GITDIR")
    known = set(MEMORIES)
    if a.world == "history":
        sys.modules.setdefault("memory_eval", sys.modules[__name__])
        import memory_history
        known |= set(memory_history.MEMORIES)
        if a.policy == ",".join(POLICIES):
            a.policy = ",".join(memory_history.POLICIES)
    a.policies = [x.strip() for x in a.policy.split(",") if x.strip()]
    for path in a.plugin:
        load_plugin(path)
    known |= set(MEMORIES)
    bad = [x for x in a.policies if x not in known and x != "reference"]
    if bad:
        p.error("unknown policy %s; choose from %s" % (", ".join(bad), ", ".join(MEMORIES)))
    if a.quick:
        if a.max_tokens == "2500,5000,10000":
            a.budgets = [5000]
    if a.no_hooks and "kgd-hooks" in a.policies:
        a.policies.remove("kgd-hooks")
    if a.reference and "reference" not in a.policies:
        a.policies.append("reference")
    return a


def main(argv=None, out=sys.stdout):
    a = parse_args(argv)
    if a.compare:
        print(compare(*a.compare), file=out)
        return 0
    if "kgd-hooks" in a.policies and hooks_module() is None:
        print("kgd-hooks skipped: kg.agents.loop.handler is not importable", file=out)
        a.policies.remove("kgd-hooks")
    if "reference" in a.policies:
        import memory_ref
        cls, why = memory_ref.configure(a.reference, a.reference_python)
        if cls is None:
            print(why, file=out)
            a.policies.remove("reference")
        else:
            MEMORIES["reference"] = cls
    started = time.time()
    runs = []
    run_class, doc = Run, None
    if a.world == "history":
        sys.modules.setdefault("memory_eval", sys.modules[__name__])
        import memory_history
        import memory_history_git
        doc = memory_history_git.load(a.repo, a.commits, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                    "results"))
        run_class = memory_history.HistoryRun
        print("history: %s, HEAD %s, %d commits%s" % (a.repo, doc["head"], doc["n"],
                                                     " (shallow mirror)" if doc["shallow"] else ""), file=out)
    for seed in a.seeds:
        world = World(seed, a.days, a.world) if doc is None else memory_history.HistoryWorld(doc, seed, a.touches)
        for i, m in enumerate(a.budgets):
            for policy in a.policies:
                budget = m
                if policy == "reference":  # its budget is its own (fixed): one run per seed, M shown "own"
                    if i:
                        continue
                    budget = 0
                t0 = time.time()
                r = run_class(world, policy, budget, a).execute()
                runs.append(r)
                print("  %-9s M=%-6d seed=%d  %.1f s" % (policy, budget, seed, time.time() - t0), file=sys.stderr)
    wall = time.time() - started
    print(table(runs), file=out)
    if doc is not None:
        import memory_stale
        print(memory_stale.table(runs), file=out)
    print("%d run(s), %d days, %.1f s wall" % (len(runs), runs[0]["days"] if runs else a.days, wall), file=out)
    path = a.json
    if path is None:
        d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "memory-%s.json" % time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    doc = {
        "label": a.label,
        "args": {
            "seeds": a.seeds,
            "days": a.days,
            "world": a.world,
            "repo": doc and {"path": a.repo, "head": doc["head"], "commits": doc["n"], "touches": a.touches},
            "max_tokens": a.budgets,
            "policies": a.policies,
            "grace_days": a.grace_days,
            "orphan_grace_days": a.orphan_grace_days,
        },
        "runs": runs,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    print("JSON: %s" % path, file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
