"""Hook events of every agent -> what to put in its context: the one ambient loop (contract
sections 8 and 11).

Rules owned here:
- One handler for every agent and event: kg/agents/dialects.py turns the agent's input into Claude Code's
  shape (a Call: START, PROMPT, TOOL or STOP), the loop answers in Claude Code's shape, and
  kg/agents/dialects.py shapes that for the agent. An unknown event, a missing or ill-typed field, or
  anything going wrong answers None (an empty 200): a hook never disturbs.
- A client session id is bound to one kgd session (store.bind_client), which remembers the agent
  that bound it (session.hook["agent"]: it sets the result bounds of kg_read for that session).
  What it was shown lives in the session ("level:id" keys), so nothing is shown twice until a
  compact or a clear.
- SessionStart: a preload within PRELOAD_LIMIT characters (startup, clear, compact, fork, and a
  resume kgd does not know), or a short continuity note (a resume it knows). The preload gives
  gists of the most valuable active nodes in all but CRUMB_SHARE of its room: in each level's
  half, recency first, and in value.SHARE of it the nodes that order leaves out but that were
  used on many occasions or across many parts of the project (kg/agents/value.py; up to
  value.LIFT_MAX archived ones are read back first); then ids only (crumbs) of the active nodes
  left out and of the archived ones. It opens with the usage guide kgd's MCP instructions give
  (an agent may not show its model those).
- UserPromptSubmit: words-matched recall (kg/agents/recall.py), every state, at most PROMPT_NODES and
  PROMPT_CHARS, never matching kgd's own words (<hook_context> blocks, a Stop's reason sent back
  as the next prompt); a node shown counts as read (store.read_nodes: recency, promotion).
- PostToolUse: nodes about the files or url just used (FILE_NODES, FILE_CHARS in all), and a nudge
  to save what keeps being re-derived (kg/agents/nudges.py). Targets over TARGET_MAX chars are ignored.
  For agents that read files through their shell, the files a shell command reads or a patch
  edits (kg/agents/shell_files.py) are the targets.
- Stop: kg/agents/nudges.py.
- Prompt text is never kept; per-session counters are small and bounded, targets are hashed.
- Recall indexes: one per graph in `recall_index` (the store resets it to None on any change),
  rebuilt from `recall_prev` (only changed nodes redone); a big graph's first index is built on
  a thread from a snapshot, and its hooks say nothing until it is there.
"""

import collections
import logging
import os
import threading

from ..core import model
from ..core.errors import KgError
from . import dialects as agents
from . import nudges, recall, value
from . import shell_files as shellfiles
from .nudges import CLIENTS_PER_TARGET, SESSION_TARGETS, STOP_TOOLS  # noqa: F401 (the loop's numbers, in one place)
from .nudges import Targets as _Targets  # noqa: F401

log = logging.getLogger(__name__)

PRELOAD_LIMIT = 10000
PRELOAD_GIST = 200
CRUMB_SHARE = (1, 10)       # of the preload room kept for ids without gists (crumbs)
CRUMB_HEAD = "Ids only (kg_read id=... gives one; an archived one comes back): "
PROMPT_NODES, PROMPT_CHARS = 5, 2500
FILE_NODES, FILE_CHARS = 3, 1500
TARGET_MAX = 65536          # characters of a file path, url or web query worth looking at
WARM_INLINE = 2000          # nodes: a graph this small is indexed inline at session start

FILE_TOOLS = {"Read": "file_path", "Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
EDIT_TOOLS = frozenset(("Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch"))
SOURCES = ("startup", "resume", "clear", "compact", "fork")


def handler(store, env=None):
    """handle(payload, agent="claude", event=None) -> the agent's hook output dict, or None when
    there is nothing to say. `event` names the event when the input does not (Copilot)."""
    env = os.environ if env is None else env
    targets = nudges.targets_for(store)  # one memory per store, however often handler() is called

    def handle(payload, agent=agents.CLAUDE, event=None):
        call = agents.normalise(agent, payload, event)
        if call is None:
            return None
        try:
            return agents.shape(call, _EVENTS[call.kind](_Memory(store, agent), call, targets, env))
        except _Warming:
            pass
        except KgError as exc:
            log.info("hook %s answered nothing: %s", call.event, exc.message)
        except Exception:  # a hook must never break the agent's turn
            log.exception("hook %s failed", call.event)
        return None
    return handle


# ---- the store, in one place

class _Memory:
    """What the hooks need of the store."""

    def __init__(self, store, agent=agents.CLAUDE):
        self.store = store
        self.agent = agent

    def bind(self, payload, fresh=False):
        cid, cwd = payload.get("session_id"), payload.get("cwd")
        if not (isinstance(cid, str) and cid.strip() and len(cid) <= 200 and isinstance(cwd, str) and cwd):
            return None, False
        if fresh:
            session, known = self.store.bind_client(cid, cwd, fresh=True)
        else:
            session, known = self.store.bind_client(cid, cwd)
        if session.hook.get("agent") != self.agent:
            with self.store.lock:
                session.hook["agent"] = self.agent
        return session, known

    def now(self):
        return self.store.clock()

    def graphs(self, session):
        return self.store.graphs_for(session)

    def index(self, g):
        """The graph's recall index (lock held): built when the store has reset it, from the
        last one built (recall_prev), so that only changed nodes are redone. A big graph with no
        index yet is indexed on a thread (a cold index of 10,000 nodes takes about a second);
        meanwhile its hooks answer nothing."""
        ix = g.recall_index
        if ix is None:
            prev = g.recall_prev
            if prev is None and len(g.nodes) > WARM_INLINE:
                if not g.recall_warming:
                    g.recall_warming = True
                    threading.Thread(target=self._warm, args=(g, dict(g.visible_nodes()), dict(g.edges)),
                                     name="kgd-recall-index", daemon=True).start()
                raise _Warming()
            ix = recall.Index(g.visible_nodes(), g.edges, prev=prev)  # never a node holding a credential
            g.recall_index = g.recall_prev = ix
        return ix

    def warm(self, session):
        """Index the session's graphs ahead of the first prompt."""
        with self.store.lock:
            for g in self.graphs(session):
                try:
                    self.index(g)
                except _Warming:
                    pass

    def _warm(self, g, nodes, edges):
        """Build from a snapshot outside the lock; the next request takes it over as recall_prev
        and redoes only the nodes changed meanwhile."""
        try:
            ix = recall.Index(nodes, edges)
            with self.store.lock:
                if g.recall_prev is None:
                    g.recall_prev = ix
        except Exception:
            log.exception("building the recall index failed")
        finally:
            g.recall_warming = False

    def indexes(self, session):
        return [(g.level, self.index(g)) for g in self.graphs(session)]

    def mark(self, session, keys):
        if keys:
            self.store.mark_shown(session, keys)

    def read(self, session, hits):
        """Recalled nodes count as read (recency, promotion), level by level."""
        by_level = collections.OrderedDict()
        for h in hits:
            by_level.setdefault(h.level, []).append(h.id)
        for level, ids in by_level.items():
            self.store.read_nodes(session, ids, level=level)

    def save(self, session):
        self.store.save_hook_state(session)

    def shown(self, session, hits):
        """Mark hits shown, under the same lock hold that chose them: a parallel hook of this
        Claude session then cannot choose them again. Count them as read afterwards, outside
        the lock (mem.read: a read waits for its fsync)."""
        self.mark(session, ["%s:%s" % (h.level, h.id) for h in hits])


class _Warming(Exception):
    """A graph's first recall index is still being built."""


# ---- SessionStart

def _session_start(mem, call, targets, env):
    payload = call.payload
    source = payload.get("source", "startup")
    if source not in SOURCES:
        source = "startup"
    session, known = mem.bind(payload, fresh=source == "clear")
    if session is None:
        return None
    h = session.hook
    if source == "resume" and known and h.get("seen") is not None:
        with mem.store.lock:
            text = _continuity(mem, session, h.get("seen"))
            h["seen"] = mem.now()
        mem.save(session)
        return _context("SessionStart", text)
    if source != "resume":
        mem.store.forget_shown(session)
    orders = value.lift(mem.store, session, _value_order, _gist_cost, _level_room(session), mem.now())
    with mem.store.lock:
        text, keys, stats = _preload(mem, session, orders)
        h["seen"] = mem.now()
    mem.mark(session, keys)
    mem.save(session)
    mem.warm(session)
    out = _context("SessionStart", text)
    if source in ("startup", "fork") or not known:
        out["systemMessage"] = "kg memory: %d of %d active nodes loaded (user %d, project %d)" % (
            stats["shown"], stats["active"], stats["user"], stats["project"])
    return out


def _usage(session_id):
    """The usage guide kgd's MCP instructions give, in short: some agents (Copilot CLI) do not show
    their model those instructions, so the preload carries them. Every character here is taken from
    the preload's room for knowledge (memory_eval --quick: a 900-character guide left 73 % of the
    conventions in context, this one of about 550 leaves 78 %)."""
    return ["Session: %s" % session_id,
            "kg memory (kgd) is loaded below: do not call kg_read with cwd; pass session_id=%s to every kg_* "
            "call. kg_read id=... gives a node in full, kg_search query=... finds more (archived too)." % session_id,
            "Save what a later session needs with kg_put_node: kebab-case id, one-line gist, notes, touches (its "
            "files); level project or user. To update, put the same id (kg_search first); delete what is wrong; "
            "link with kg_put_edge. kg_sync: other sessions' changes; kg_progress: a long task's state."]


def _value_order(g):
    """Active nodes of one graph, most valuable first: two thirds recency, one third
    connectedness (edges to active nodes or files), each as a rank; ties by id. Recency leads:
    compaction already kept the well-connected nodes active, and a tenth of the
    room should show what is being worked on now; recall brings the rest when it is named."""
    active = g.visible(model.ACTIVE)  # never a node holding a credential
    nodes = g.nodes
    deg = {}
    for nid in active:
        d = 0
        for key in g.adj.get(nid, ()):
            e = g.edges.get(key)
            if e is None:
                continue
            other = e["to"] if e["from"] == nid else e["from"]
            o = nodes.get(other)
            if o is None or model.is_active(o):
                d += 1
        deg[nid] = d
    n = len(active)
    if not n:
        return []
    by_rec = sorted(active, key=lambda i: (model.recency(nodes[i]), i))
    rec_rank = {nid: k for k, nid in enumerate(by_rec)}
    by_deg = sorted(active, key=lambda i: deg[i])
    deg_rank, k = {}, 0
    while k < n:
        j = k
        while j < n and deg[by_deg[j]] == deg[by_deg[k]]:
            j += 1
        for x in by_deg[k:j]:
            deg_rank[x] = (k + j - 1) / 2.0
        k = j
    return sorted(active, key=lambda i: (-(2 * rec_rank[i] + deg_rank[i]), i))


def _crumb_order(g, left):
    """Ids a preload shows without their gists: the active nodes it left out (most valuable
    first), then the archived ones, most recently used first (ties by id)."""
    archived = sorted(g.visible(model.ARCHIVED), key=lambda i: (-model.recency(g.nodes[i]), i))
    return list(left) + archived


def _share(room, ordered, cost, rooms):
    """Take items of both levels in order, each level within half the room first, then what the
    other left; `rooms` holds what each level already used. Returns how many of each were taken."""
    taken = {lv: 0 for lv in ordered}

    def fill(level, budget):
        items = ordered[level]
        while taken[level] < len(items):
            c = cost(level, items[taken[level]])
            if rooms[level] + c > budget:
                return
            rooms[level] += c
            taken[level] += 1

    start = dict(rooms)
    for lv in ordered:
        fill(lv, start[lv] + room // 2)
    for lv in ordered:
        spare = room - sum(rooms[x] - start[x] for x in ordered)
        fill(lv, rooms[lv] + spare)
    return taken


def _gist_cost(g, nid):
    return len("- %s: %s" % (nid, recall.clip(g.nodes[nid].get("gist", ""), PRELOAD_GIST))) + 1


def _level_room(session):
    """Characters of one level's half of the preload's gist room."""
    room = PRELOAD_LIMIT - sum(len(x) + 1 for x in _usage(session.id)) - 480
    num, den = CRUMB_SHARE
    return (room - room * num // den) // 2


def _preload(mem, session, orders=None):
    """The preload text, the keys it shows and counts. Gists of the most valuable active nodes
    take the room but a CRUMB_SHARE of it, each level half of that (what one leaves goes to the
    other); the rest lists, ids only, the active nodes left out and the archived ones: a crumb
    costs a tenth of a gist line and one kg_read id=... brings its node back."""
    p = _Preload(mem, session, orders)
    p.keep_worth(mem.now())
    p.take_gists()
    p.take_crumbs()
    return p.text(), p.keys(), p.stats()


_LEVELS = ("user", "project")
_TITLES = (("user", "User knowledge (all projects)"), ("project", "Project knowledge"))


class _Preload:
    """A preload being laid out, one step at a time. ordered: level -> active ids, best first;
    taken: level -> how many of them get a gist line (used: the characters those cost);
    crumbs: level -> ids listed without gists, shown: how many of them fit."""

    __slots__ = ("session", "head", "graphs", "room", "ordered", "taken", "used", "crumbs", "shown")
    TAIL_ROOM = 400  # characters kept for the closing line (what was left out)

    def __init__(self, mem, session, orders):
        self.session = session
        self.head = _usage(session.id)
        self.graphs = {g.level: g for g in mem.graphs(session)}
        if orders is None or orders[0] != mem.store.log.seq or set(orders[1]) != set(self.graphs):
            orders = (None, {lv: _value_order(g) for lv, g in self.graphs.items()})
        self.ordered = {lv: list(orders[1].get(lv, ())) for lv in _LEVELS}
        self.room = PRELOAD_LIMIT - sum(len(x) + 1 for x in self.head) - self.TAIL_ROOM - 80

    def keep_worth(self, now):
        """Knowledge used on many occasions keeps a share of each level's room (kg/agents/value.py)."""
        for lv in _LEVELS:
            g = self.graphs.get(lv)
            if g is not None:
                self.ordered[lv] = value.reserve(g, self.ordered[lv], lambda nid, g=g: _gist_cost(g, nid),
                                                 _level_room(self.session), now)

    def gist_line(self, level, nid):
        return "- %s: %s" % (nid, recall.clip(self.graphs[level].nodes[nid].get("gist", ""), PRELOAD_GIST))

    def take_gists(self):
        num, den = CRUMB_SHARE
        self.used = {lv: 0 for lv in _LEVELS}
        self.taken = _share(self.room - self.room * num // den, self.ordered,
                            lambda lv, nid: len(self.gist_line(lv, nid)) + 1, self.used)

    def gists(self, level):
        return self.ordered[level][:self.taken[level]]

    def take_crumbs(self):
        """Ids of what the gists left out, in the room they left (each level's list has a head)."""
        self.crumbs = {lv: _crumb_order(self.graphs[lv], self.ordered[lv][self.taken[lv]:])
                       if lv in self.graphs else [] for lv in _LEVELS}
        spent = sum(self.used[lv] + (len(CRUMB_HEAD) + 2 if self.crumbs[lv] else 0) for lv in _LEVELS)
        self.shown = _share(self.room - spent, self.crumbs, lambda lv, nid: len(nid) + 2, {lv: 0 for lv in _LEVELS})

    def body(self):
        body = []
        for lv, title in _TITLES:
            if lv == "project" and lv not in self.graphs:
                continue
            body.extend(["", "## %s, most valuable first:" % title])
            body.extend([self.gist_line(lv, nid) for nid in self.gists(lv)] or ["(nothing yet)"])
            if self.shown[lv]:
                body.append(CRUMB_HEAD + ", ".join(self.crumbs[lv][:self.shown[lv]]))
        return body

    def tail(self):
        left = {lv: len(self.ordered[lv]) - self.taken[lv] for lv in _LEVELS}
        graphs = self.graphs.values()
        archived = sum(len(g.by_state[model.ARCHIVED]) + len(g.by_state[model.ORPHANED]) for g in graphs)
        return "Left out here: %d more active user nodes, %d more active project nodes, %d archived or " \
               "orphaned nodes, %d edges, all notes; kg_read session_id=%s lists the whole active graph, " \
               "kg_read id=... a node in full, kg_search query=... finds any of them." % (
                   left["user"], left["project"], archived, sum(len(g.edges) for g in graphs), self.session.id)

    def text(self):
        text = "\n".join(self.head + self.body() + ["", self.tail()])
        if len(text) > PRELOAD_LIMIT:  # long ids can outgrow the estimate: never past the limit
            text = text[:PRELOAD_LIMIT - 60] + "\n… cut to fit; kg_read gives the rest."
        return text

    def keys(self):
        return ["%s:%s" % (lv, nid) for lv in _LEVELS for nid in self.gists(lv)]

    def stats(self):
        return {"shown": self.taken["user"] + self.taken["project"], "user": self.taken["user"],
                "project": self.taken["project"], "active": len(self.ordered["user"]) + len(self.ordered["project"])}


def _continuity(mem, session, since):
    changed = []
    for g in mem.graphs(session):
        for nid, node in g.visible_nodes().items():
            w = node.get("_write_ts")
            if isinstance(w, (int, float)) and w > since:
                changed.append((w, g.level, nid))
    changed.sort(reverse=True)
    lines = ["Session: %s (resumed; the kg memory loaded earlier in this conversation still holds)." % session.id]
    if changed:
        ids = ", ".join("%s (%s)" % (nid, lv) for _, lv, nid in changed[:10])
        more = " and %d more" % (len(changed) - 10) if len(changed) > 10 else ""
        lines.append("Changed since: %d node(s): %s%s; kg_sync session_id=%s gives them." % (
            len(changed), ids, more, session.id))
    else:
        lines.append("Nothing in memory changed since.")
    return "\n".join(lines)


def _context(event, text):
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


# ---- UserPromptSubmit

def _prompt(mem, call, targets, env):
    payload = call.payload
    text = recall.user_text(agents.strip_hook_context(payload.get("prompt")))
    if text is None or text.startswith(nudges.STOP_HEAD):  # Gemini and Copilot send a Stop's reason back as a prompt
        return None
    session, _ = mem.bind(payload)
    if session is None:
        return None
    with mem.store.lock:
        session.hook["seen"] = mem.now()
        hits = recall.prompt_hits(mem.indexes(session), text, exclude=session.shown, limit=PROMPT_NODES)
        lines, used = _lines(mem, session, hits, PROMPT_NODES, PROMPT_CHARS - 120)
        mem.shown(session, used)
    mem.save(session)
    if not lines:
        return None
    mem.read(session, used)
    head = "kg memory recalled for this prompt (%d node%s):" % (len(lines), "" if len(lines) == 1 else "s")
    return _context("UserPromptSubmit", "\n".join([head] + lines))


def _lines(mem, session, hits, max_nodes, max_chars):
    """Rendered lines for hits within the budget (lock held): (lines, hits used)."""
    graphs = {g.level: g for g in mem.graphs(session)}
    items = []
    for h in hits:
        node = graphs[h.level].nodes.get(h.id)
        if node is not None:
            items.append((h.level, node, model.node_state(node), h))
    lines, used = recall.fit_lines([(lv, n, st) for lv, n, st, _ in items], max_nodes, max_chars)
    return lines, [items[k][3] for k in range(len(used))]


# ---- PostToolUse

def _targets(call):
    """[(kind, target)] of a file, web or (for agents that read through their shell) shell or patch
    tool call. A value over TARGET_MAX characters, or a path without a single component ("/",
    "."), names nothing worth recalling or nudging about."""
    payload = call.payload
    tool, ti, cwd = payload.get("tool_name"), payload.get("tool_input"), payload.get("cwd")
    if not isinstance(tool, str) or not isinstance(ti, dict):
        return []
    if call.shell and tool == "Bash":
        return [("file", f) for f in shellfiles.command_files(ti.get("command"), cwd)]
    if call.shell and tool == "apply_patch":
        return [("file", f) for f in shellfiles.patch_files(ti.get("command"), cwd)]
    kind, value = None, None
    if tool in FILE_TOOLS:
        kind, value = "file", ti.get(FILE_TOOLS[tool])
    elif tool in ("Grep", "Glob"):
        kind, value = "file", ti.get("path")
    elif tool == "WebFetch":
        kind, value = "url", ti.get("url")
    elif tool == "WebSearch":
        kind, value = "query", ti.get("query")
    if not isinstance(value, str) or not value.strip() or len(value) > TARGET_MAX:
        return []
    if kind == "file" and not recall.path_parts(value):
        return []
    if tool in ("Grep", "Glob"):  # a search over one file is about it; over a folder, about no one file
        if not os.path.isabs(value) and isinstance(cwd, str) and os.path.isabs(cwd):
            value = os.path.join(cwd, value)
        if not os.path.isfile(value):
            return []
    return [(kind, value)]


def _tool(mem, call, targets, env):
    payload = call.payload
    tool = payload.get("tool_name")
    if not isinstance(tool, str):
        return None
    session, _ = mem.bind(payload)
    if session is None:
        return None
    parts, used = [], []
    found = _targets(call)  # may look at the file system: before the lock
    with mem.store.lock:
        h = session.hook
        h["seen"] = mem.now()
        h["tools"] = int(h.get("tools", 0)) + 1
        if tool in EDIT_TOOLS:
            h["edits"] = int(h.get("edits", 0)) + 1
        if "kg_put_node" in tool or "kg_put_edge" in tool:
            h["kg_writes"] = int(h.get("kg_writes", 0)) + 1
        for target in found:
            more, shown = _about_target(mem, session, payload, target, targets, env,
                                        FILE_NODES - len(used), FILE_CHARS - sum(len(x) + 1 for x in parts))
            parts.extend(more)
            used.extend(shown)
            mem.shown(session, shown)
    mem.read(session, used)
    mem.save(session)
    if not parts:
        return None
    return _context("PostToolUse", "\n".join(parts))


def _about_target(mem, session, payload, target, targets, env, max_nodes=FILE_NODES, max_chars=FILE_CHARS):
    """(lines, hits shown) for one file or web target within what is left of the budget (lock held)."""
    kind, value = target
    indexes = mem.indexes(session)
    root = session.project_path
    if kind == "file":
        covered = recall.file_hits(indexes, value, root, limit=1000)
    elif kind == "url":
        covered = recall.url_hits(indexes, value, limit=1000)
    else:
        covered = recall.prompt_hits(indexes, value, limit=FILE_NODES)
    fresh = [c for c in covered if "%s:%s" % (c.level, c.id) not in session.shown][:max(0, max_nodes)]
    parts, used = [], []
    if fresh and kind != "query":
        name = recall.relative_path(value, root) if kind == "file" else value
        head = "kg memory about %s:" % recall.clip(name, 200)
        lines, used = _lines(mem, session, fresh, max_nodes, max_chars - len(head) - 1)
        if lines:
            parts.append(head)
            parts.extend(lines)
    nudge = nudges.nudge(mem, session, payload, kind, value, bool(covered), targets, env)
    if nudge:
        parts.append(nudge)
    return parts, used


def _stop(mem, call, targets, env):
    return nudges.stop(mem, call.payload, targets, env)


_EVENTS = {agents.START: _session_start, agents.PROMPT: _prompt, agents.TOOL: _tool, agents.STOP: _stop}
