"""Claude Code hook events -> what to put in the agent's context (contract section 8).

Rules owned here:
- One handler for every event, dispatched on `hook_event_name`; an unknown event, a missing or
  ill-typed field, or anything going wrong answers None (an empty 200): a hook never disturbs.
- A Claude session id is bound to one kgd session (store.bind_client). What it was shown lives
  in the session ("level:id" keys), so nothing is shown twice until a compact or a clear.
- SessionStart: a preload within PRELOAD_LIMIT characters (startup, clear, compact, fork, and a
  resume kgd does not know), or a short continuity note (a resume it knows). The preload gives
  gists of the most valuable active nodes in all but CRUMB_SHARE of its room: in each level's
  half, recency first, and in value.SHARE of it the nodes that order leaves out but that were
  used on many occasions or across many parts of the project (kg/value.py; up to
  value.LIFT_MAX archived ones are read back first); then ids only (crumbs) of the active nodes
  left out and of the archived ones.
- UserPromptSubmit: words-matched recall (kg/recall.py), every state, at most PROMPT_NODES and
  PROMPT_CHARS; a node shown counts as read (store.read_nodes: recency, promotion).
- PostToolUse: nodes about the file just used (FILE_NODES, FILE_CHARS), and a nudge to save what
  keeps being re-derived: a target used in 2+ Claude sessions (a url or query also twice in one)
  that no node covers, at most one per NUDGE_GAP per session, NUDGE_MAX per session, one per
  target per day. Targets over TARGET_MAX chars are ignored; a nudge quotes at most NUDGE_SHOWN.
- Stop: once per Claude session, after substantial work with nothing written to memory, never
  when stop_hook_active, off with KG_CAPTURE_NUDGE=0.
- Prompt text is never kept; per-session counters are small and bounded, targets are hashed.
- Recall indexes: one per graph in `recall_index` (the store resets it to None on any change),
  rebuilt from `recall_prev` (only changed nodes redone); a big graph's first index is built on
  a thread from a snapshot, and its hooks say nothing until it is there.
"""

import collections
import hashlib
import json
import logging
import os
import re
import threading
import weakref

from . import model, recall, value
from .errors import KgError

log = logging.getLogger(__name__)

PRELOAD_LIMIT = 10000
PRELOAD_GIST = 200
CRUMB_SHARE = (1, 10)       # of the preload room kept for ids without gists (crumbs)
CRUMB_HEAD = "Ids only (kg_read id=... gives one; an archived one comes back): "
PROMPT_NODES, PROMPT_CHARS = 5, 2500
FILE_NODES, FILE_CHARS = 3, 1500
TARGET_MAX = 65536          # characters of a file path, url or web query worth looking at
NUDGE_SHOWN = 300           # a path or url longer than this is not spelled out in a nudge
NUDGE_GAP, NUDGE_MAX, NUDGE_TARGET_GAP = 600.0, 3, 86400.0
STOP_EDITS, STOP_TOOLS = 3, 12
SESSION_TARGETS = 64        # targets remembered per Claude session
DAEMON_TARGETS = 5000       # targets remembered by the daemon
CLIENTS_PER_TARGET = 4
WARM_INLINE = 2000          # nodes: a graph this small is indexed inline at session start

FILE_TOOLS = {"Read": "file_path", "Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
EDIT_TOOLS = frozenset(("Edit", "Write", "MultiEdit", "NotebookEdit"))
SOURCES = ("startup", "resume", "clear", "compact", "fork")


def handler(store, env=None):
    """handle(payload) -> hook output dict, or None when there is nothing to say."""
    env = os.environ if env is None else env
    with _TARGETS_LOCK:  # one memory per store, however often handler() is called
        targets = _TARGETS.get(store)
        if targets is None:
            targets = _TARGETS[store] = _Targets()

    def handle(payload):
        if not isinstance(payload, dict):
            return None
        event = payload.get("hook_event_name")
        fn = _EVENTS.get(event) if isinstance(event, str) else None
        if fn is None:
            return None
        try:
            return fn(_Memory(store), payload, targets, env)
        except _Warming:
            pass
        except KgError as exc:
            log.info("hook %s answered nothing: %s", event, exc.message)
        except Exception:  # a hook must never break the agent's turn
            log.exception("hook %s failed", event)
        return None
    return handle


# ---- the store, in one place

class _Memory:
    """What the hooks need of the store."""

    def __init__(self, store):
        self.store = store

    def bind(self, payload, fresh=False):
        cid, cwd = payload.get("session_id"), payload.get("cwd")
        if not (isinstance(cid, str) and cid.strip() and len(cid) <= 200 and isinstance(cwd, str) and cwd):
            return None, False
        if fresh:
            return self.store.bind_client(cid, cwd, fresh=True)
        return self.store.bind_client(cid, cwd)

    def now(self):
        return self.store.clock()

    def graphs(self, session):
        return self.store.graphs_for(session)

    def index(self, g):
        """The graph's recall index (lock held): built when the store has reset it, from the
        last one built (recall_prev), so that only changed nodes are redone. A big graph with no
        index yet is indexed on a thread (a cold index of 10,000 nodes takes about a second);
        meanwhile its hooks answer nothing."""
        ix = getattr(g, "recall_index", None)
        if ix is None:
            prev = getattr(g, "recall_prev", None)
            if prev is None and len(g.nodes) > WARM_INLINE:
                if not getattr(g, "recall_warming", False):
                    g.recall_warming = True
                    threading.Thread(target=self._warm, args=(g, dict(g.nodes), dict(g.edges)),
                                     name="kgd-recall-index", daemon=True).start()
                raise _Warming()
            ix = recall.Index(g.nodes, g.edges, prev=prev)
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
                if getattr(g, "recall_prev", None) is None:
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

def _session_start(mem, payload, targets, env):
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
    return ["Session: %s" % session_id,
            "kg memory (kgd): what earlier sessions learned is below. kg_read id=... gives a node's notes and "
            "edges, kg_search query=... finds more (archived too); pass session_id=%s to every kg_* call." % session_id,
            "Save what a future session would need as nodes with kg_put_node (level project = this codebase, "
            "user = across projects): decisions, gotchas, how things work; link them with kg_put_edge."]


def _value_order(g):
    """Active nodes of one graph, most valuable first: two thirds recency, one third
    connectedness (edges to active nodes or files), each as a rank; ties by id. Recency leads
    (issue 13): compaction already kept the well-connected nodes active, and a tenth of the
    room should show what is being worked on now; recall brings the rest when it is named."""
    active = g.by_state[model.ACTIVE]
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
    archived = sorted(g.by_state[model.ARCHIVED], key=lambda i: (-model.recency(g.nodes[i]), i))
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
    head = _usage(session.id)
    graphs = {g.level: g for g in mem.graphs(session)}
    levels = ("user", "project")
    if orders is None or orders[0] != mem.store.log.seq or set(orders[1]) != set(graphs):
        orders = (None, {lv: _value_order(g) for lv, g in graphs.items()})
    ordered = {lv: list(orders[1].get(lv, ())) for lv in levels}
    tail_room = 400
    room = PRELOAD_LIMIT - sum(len(x) + 1 for x in head) - tail_room - 80
    num, den = CRUMB_SHARE

    def gist_line(level, nid):
        return "- %s: %s" % (nid, recall.clip(graphs[level].nodes[nid].get("gist", ""), PRELOAD_GIST))

    now = mem.now()
    for lv in levels:  # knowledge used on many occasions keeps a share of each level's room
        if lv in graphs:
            g = graphs[lv]
            ordered[lv] = value.reserve(g, ordered[lv], lambda nid, g=g: _gist_cost(g, nid), _level_room(session), now)

    used = {lv: 0 for lv in levels}
    taken = _share(room - room * num // den, ordered, lambda lv, nid: len(gist_line(lv, nid)) + 1, used)
    lines = {lv: [gist_line(lv, nid) for nid in ordered[lv][:taken[lv]]] for lv in levels}
    crumbs = {lv: _crumb_order(graphs[lv], ordered[lv][taken[lv]:]) if lv in graphs else [] for lv in levels}
    head_len = len(CRUMB_HEAD) + 2
    spent = {lv: used[lv] + (head_len if crumbs[lv] else 0) for lv in levels}
    shown = _share(room - sum(spent.values()), crumbs, lambda lv, nid: len(nid) + 2,
                   {lv: 0 for lv in levels})
    body = []
    for lv, title in (("user", "User knowledge (all projects)"), ("project", "Project knowledge")):
        if lv == "project" and lv not in graphs:
            continue
        body.append("")
        body.append("## %s, most valuable first:" % title)
        body.extend(lines[lv] or ["(nothing yet)"])
        if shown[lv]:
            body.append(CRUMB_HEAD + ", ".join(crumbs[lv][:shown[lv]]))
    left = {lv: len(ordered[lv]) - taken[lv] for lv in ordered}
    archived = sum(len(g.by_state[model.ARCHIVED]) + len(g.by_state[model.ORPHANED]) for g in graphs.values())
    n_edges = sum(len(g.edges) for g in graphs.values())
    tail = "Left out here: %d more active user nodes, %d more active project nodes, %d archived or orphaned " \
           "nodes, %d edges, all notes; kg_read session_id=%s lists the whole active graph, kg_read id=... a " \
           "node in full, kg_search query=... finds any of them." % (
               left["user"], left["project"], archived, n_edges, session.id)
    text = "\n".join(head + body + ["", tail])
    if len(text) > PRELOAD_LIMIT:  # long ids can outgrow the estimate: never past the limit
        text = text[:PRELOAD_LIMIT - 60] + "\n… cut to fit; kg_read gives the rest."
    keys = ["%s:%s" % (lv, nid) for lv in levels for nid in ordered[lv][:taken[lv]]]
    stats = {"shown": taken["user"] + taken["project"], "user": taken["user"], "project": taken["project"],
             "active": len(ordered["user"]) + len(ordered["project"])}
    return text, keys, stats


def _continuity(mem, session, since):
    changed = []
    for g in mem.graphs(session):
        for nid, node in g.nodes.items():
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

def _prompt(mem, payload, targets, env):
    text = recall.user_text(payload.get("prompt"))
    if text is None:
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

def _target(payload):
    """(kind, target) of a file or web tool call, or None. A value over TARGET_MAX characters, or a
    path without a single component ("/", "."), names nothing worth recalling or nudging about."""
    tool, ti = payload.get("tool_name"), payload.get("tool_input")
    if not isinstance(tool, str) or not isinstance(ti, dict):
        return None
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
        return None
    if kind == "file" and not recall.path_parts(value):
        return None
    if tool in ("Grep", "Glob"):  # a search over one file is about it; over a folder, about no one file
        cwd = payload.get("cwd")
        if not os.path.isabs(value) and isinstance(cwd, str) and os.path.isabs(cwd):
            value = os.path.join(cwd, value)
        if not os.path.isfile(value):
            return None
    return kind, value


def _tool(mem, payload, targets, env):
    tool = payload.get("tool_name")
    if not isinstance(tool, str):
        return None
    session, _ = mem.bind(payload)
    if session is None:
        return None
    parts, used = [], []
    target = _target(payload)  # may look at the file system: before the lock
    with mem.store.lock:
        h = session.hook
        h["seen"] = mem.now()
        h["tools"] = int(h.get("tools", 0)) + 1
        if tool in EDIT_TOOLS:
            h["edits"] = int(h.get("edits", 0)) + 1
        if "kg_put_node" in tool or "kg_put_edge" in tool:
            h["kg_writes"] = int(h.get("kg_writes", 0)) + 1
        if target is not None:
            parts, used = _about_target(mem, session, payload, target, targets, env)
            mem.shown(session, used)
    mem.read(session, used)
    mem.save(session)
    if not parts:
        return None
    return _context("PostToolUse", "\n".join(parts))


def _about_target(mem, session, payload, target, targets, env):
    """(lines, hits shown) for one file or web target (lock held)."""
    kind, value = target
    indexes = mem.indexes(session)
    root = session.project_path
    if kind == "file":
        covered = recall.file_hits(indexes, value, root, limit=1000)
    elif kind == "url":
        covered = recall.url_hits(indexes, value, limit=1000)
    else:
        covered = recall.prompt_hits(indexes, value, limit=FILE_NODES)
    fresh = [c for c in covered if "%s:%s" % (c.level, c.id) not in session.shown][:FILE_NODES]
    parts, used = [], []
    if fresh and kind != "query":
        name = recall.relative_path(value, root) if kind == "file" else value
        head = "kg memory about %s:" % recall.clip(name, 200)
        lines, used = _lines(mem, session, fresh, FILE_NODES, FILE_CHARS - len(head) - 1)
        if lines:
            parts.append(head)
            parts.extend(lines)
    nudge = _nudge(mem, session, payload, kind, value, bool(covered), targets, env)
    if nudge:
        parts.append(nudge)
    return parts, used


def _digest(kind, value, root):
    v = recall.relative_path(value.strip(), root) if kind == "file" else value.strip()
    if kind == "url":
        v = recall.norm_url(v)
    elif kind == "query":
        v = " ".join(sorted(set(recall.words(v))))
    return hashlib.sha256(("%s\0%s\0%s" % (kind, root or "", v)).encode("utf-8", "replace")).hexdigest()[:20]


_TARGETS = weakref.WeakKeyDictionary()
_TARGETS_LOCK = threading.Lock()


class _Targets:
    """Daemon-wide, bounded: per target digest, the Claude sessions that used it and when it was
    last nudged about."""

    def __init__(self, limit=DAEMON_TARGETS):
        self.limit = limit
        self.items = collections.OrderedDict()

    def use(self, digest, client):
        rec = self.items.pop(digest, None) or {"clients": [], "nudged": None}
        if client not in rec["clients"]:
            rec["clients"] = (rec["clients"] + [client])[-CLIENTS_PER_TARGET:]
        self.items[digest] = rec
        while len(self.items) > self.limit:
            self.items.popitem(last=False)
        return rec


def _nudge(mem, session, payload, kind, value, covered, targets, env):
    if env.get("KG_CAPTURE_NUDGE", "1") == "0":
        return None
    h = session.hook
    root = session.project_path
    digest = _digest(kind, value, root)
    mine = h.setdefault("targets", {})
    if not isinstance(mine, dict):
        mine = h["targets"] = {}
    count = mine.pop(digest, 0) + 1
    mine[digest] = count
    while len(mine) > SESSION_TARGETS:
        mine.pop(next(iter(mine)))
    rec = targets.use(digest, getattr(session, "client_id", None) or session.id)
    repeated = len(rec["clients"]) >= 2 or (kind != "file" and count >= 2)
    if covered or not repeated:
        return None
    now = mem.now()
    if int(h.get("nudges", 0)) >= NUDGE_MAX:
        return None
    if now - float(h.get("nudge_ts", -1e18)) < NUDGE_GAP:
        return None
    if rec["nudged"] is not None and now - rec["nudged"] < NUDGE_TARGET_GAP:
        return None
    if kind == "url" and _url_in_text(mem, session, value):
        return None
    rec["nudged"] = now
    h["nudges"] = int(h.get("nudges", 0)) + 1
    h["nudge_ts"] = now
    return _nudge_text(session, kind, value, root, count, len(rec["clients"]))


def _url_in_text(mem, session, url):
    """A node that quotes the url in its gist or notes covers it too (checked only before a nudge)."""
    key = recall.norm_url(url)
    for g in mem.graphs(session):
        for n in g.nodes.values():
            if key in recall.norm_url(n.get("gist", "")) or any(key in note.lower() for note in n.get("notes", ())):
                return True
    return False


def _slug(text):
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:60].strip("-") or "note"


def _quoted(value, placeholder):
    """value as it goes between double quotes in a suggested call, or the placeholder when it is too
    long to spell out (the nudge stays short; the agent knows the path it just used)."""
    return json.dumps(value, ensure_ascii=False)[1:-1] if len(value) <= NUDGE_SHOWN else placeholder


def _nudge_text(session, kind, value, root, count, clients):
    if kind == "file":
        rel = recall.relative_path(value, root)
        what = "You have now read %s in %d Claude sessions and no kg node covers it." % (recall.clip(rel, 200), clients)
        call = 'kg_put_node session_id="%s" level="project" id="%s" gist="<what this file does and why, in one ' \
               'line>" notes=["<what you had to work out>"] touches=["%s"]' % (
                   session.id, _slug(recall.path_parts(rel)[-1]), _quoted(rel, "<the file's path>"))
    elif kind == "url":
        what = "You keep fetching %s (%d time(s) here, %d Claude session(s)) and no kg node covers it." % (
            recall.clip(value, 200), count, clients)
        key = recall.norm_url(value)
        call = 'kg_put_node session_id="%s" level="user" id="%s" gist="<what this page says that matters>" ' \
               'touches=["%s"]' % (session.id, _slug(key.split("/")[0] + "-" + "-".join(key.split("/")[1:3])),
                                   _quoted(value, "<the url>"))
    else:
        what = "You searched the web for %r again and no kg node covers it." % recall.clip(value, 120)
        call = 'kg_put_node session_id="%s" level="user" id="%s" gist="<the answer you found>" ' \
               'notes=["<sources>"]' % (session.id, _slug(" ".join(recall.words(value)[:5])))
    return "kg memory nudge: %s If what you learned will be needed again, save it once:\n%s" % (what, call)


# ---- Stop

def _stop(mem, payload, targets, env):
    if env.get("KG_CAPTURE_NUDGE", "1") == "0":
        return None
    if payload.get("stop_hook_active") is not False and payload.get("stop_hook_active") is not None:
        return None
    session, _ = mem.bind(payload)
    if session is None:
        return None
    with mem.store.lock:
        h = session.hook
        if h.get("stop_nudged"):
            return None
        substantial = int(h.get("edits", 0)) >= STOP_EDITS or int(h.get("tools", 0)) >= STOP_TOOLS
        if not substantial or session.writes or h.get("kg_writes"):
            return None
        h["stop_nudged"] = True
    mem.save(session)
    reason = ("Before you stop: this session did substantial work (%d file edits, %d tool calls) and saved "
              "nothing to kg memory. Save what a future session would need — decisions, gotchas, how things "
              "work — as nodes: kg_put_node session_id=\"%s\" level=\"project\" (or \"user\" when it holds "
              "across projects) id=... gist=... notes=[...] touches=[files]; link them with kg_put_edge. If "
              "nothing is worth keeping, say so in one line and stop." % (
                  int(h.get("edits", 0)), int(h.get("tools", 0)), session.id))
    return {"decision": "block", "reason": reason}


_EVENTS = {"SessionStart": _session_start, "UserPromptSubmit": _prompt, "PostToolUse": _tool, "Stop": _stop}
