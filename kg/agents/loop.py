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
- SessionStart: a preload (startup, clear, compact, fork, and a resume kgd does not know), or a
  short continuity note (a resume it knows); what each holds is kg/agents/preload.py.
- UserPromptSubmit: words-matched recall (kg/agents/recall.py), every state, at most PROMPT_NODES and
  PROMPT_CHARS, never matching kgd's own words (<hook_context> blocks, a Stop's reason sent back
  as the next prompt); a node shown counts as read (store.read_nodes: recency, promotion).
- Recall text says what it is, memory that may be relevant (contract section 13), never an
  instruction the model could take for the user's task.
- PostToolUse: nodes about the files or url just used (FILE_NODES, FILE_CHARS in all): the file's
  own nodes first; after an Edit, those linked by an edge to the knowledge about the part it changed
  (`PATH#NAME`); the parts the work points to, best first (the last prompt's words in a part's name
  and code, after an Edit also the edit's words in its code: kg/agents/part_code.py); those the
  prompt pointed to (below recall's bar too); after an Edit, the parts nearest the edited one in
  the file, that part's own first; then the most recently written; and a nudge to save what keeps
  being re-derived (kg/agents/nudges.py).
  Targets over TARGET_MAX chars are ignored.
  For agents that read files through their shell, the files a shell command reads or a patch
  edits (kg/agents/shell_files.py) are the targets.
- Stop: kg/agents/nudges.py.
- Stale knowledge (contract section 12): recall and the preload carry each node's mark; the first
  file recall of a context (a session, or since its compact or clear) that shows a stale node adds
  STALE_ASK, later ones only the marks; a node that became stale after this session was shown it
  counts as not yet shown. The marks are the store's (`store.staleness`, computed off this path):
  the hooks only look them up.
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
from . import dialects, file_order, nudges, part_code, preload, recall, recall_lines, shell_files, value
from .nudges import CLIENTS_PER_TARGET, SESSION_TARGETS, STOP_TOOLS  # noqa: F401 (the loop's numbers, in one place)
from .nudges import Targets as _Targets  # noqa: F401

log = logging.getLogger(__name__)

PROMPT_NODES, PROMPT_CHARS = 5, 2500
FILE_NODES, FILE_CHARS = 3, 1500
NEAR_MAX = file_order.NEAR_MAX  # nodes the last prompt pointed to, kept to order file recall
TARGET_MAX = 65536          # characters of a file path, url or web query worth looking at
WARM_INLINE = 2000          # nodes: a graph this small is indexed inline at session start

FILE_TOOLS = {"Read": "file_path", "Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
EDIT_TOOLS = frozenset(("Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch"))
SOURCES = ("startup", "resume", "clear", "compact", "fork")
STALE_ASK = ("Marked stale: check them against the code, then kg_put_node each again (the same content "
             "confirms it) or fix it.")


def handler(store, env=None):
    """handle(payload, agent="claude", event=None) -> the agent's hook output dict, or None when
    there is nothing to say. `event` names the event when the input does not (Copilot)."""
    env = os.environ if env is None else env
    targets = nudges.targets_for(store)  # one memory per store, however often handler() is called

    def handle(payload, agent=dialects.CLAUDE, event=None):
        call = dialects.normalise(agent, payload, event)
        if call is None:
            return None
        try:
            return dialects.shape(call, _EVENTS[call.kind](_Memory(store, agent), call, targets, env))
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

    def __init__(self, store, agent=dialects.CLAUDE):
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
            return
        finally:
            g.recall_warming = False
        if g.level == "project":  # then the files its part touches name (_warm_parts), on this thread
            part_code.warm(recall.part_files(recall.part_touches([(g.level, ix)]), g.project_path))

    def indexes(self, session):
        return [(g.level, self.index(g)) for g in self.graphs(session)]

    def stale(self, g):
        """{id: Mark} of g's nodes marked stale (lock held; a look-up, never a file or git)."""
        w = getattr(self.store, "staleness", None)
        return w.marks.valid(g) if w is not None else {}

    def shown_keys(self, session):
        """What this session was shown, less the nodes that became stale after it was shown (lock
        held): recall shows those again, with their mark."""
        shown, out = session.shown, None
        for g in self.graphs(session):
            for nid, m in self.stale(g).items():
                k = model.node_key(g.level, nid)
                t = shown.get(k)
                if t is not None and m.since > t:
                    if out is None:
                        out = dict(shown)
                    del out[k]
        return shown if out is None else out

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
            text = preload.continuity(mem, session, h.get("seen"))
            h["seen"] = mem.now()
        mem.save(session)
        return _context("SessionStart", text)
    if source != "resume":
        mem.store.forget_shown(session)
        h.pop("stale_asked", None)  # a new context: the request to confirm is made again, once
    orders = value.lift(mem.store, session, lambda g: preload.value_order(g, mem.stale(g)), preload.gist_cost,
                        preload.level_room(session), mem.now())
    with mem.store.lock:
        text, keys, stats = preload.preload(mem, session, orders)
        h["seen"] = mem.now()
    mem.mark(session, keys)
    mem.save(session)
    mem.warm(session)
    _warm_parts(mem, session)
    out = _context("SessionStart", text)
    if source in ("startup", "fork") or not known:
        out["systemMessage"] = "kg memory: %d of %d active nodes loaded (user %d, project %d)" % (
            stats["shown"], stats["active"], stats["user"], stats["project"])
    return out


def _warm_parts(mem, session):
    """Read the files the project's part touches name on a thread (kg/agents/part_code.py), so the
    first prompt's hint costs no more than the next one's. A graph whose index is still being built
    has them read by that thread, once it is done (_Memory._warm)."""
    with mem.store.lock:
        try:
            touches = recall.part_touches(mem.indexes(session))
        except _Warming:
            return
    if any(named for _, named in touches):
        wanted = recall.part_files(touches, session.project_path)
        threading.Thread(target=part_code.warm, args=(wanted,), name="kgd-part-code", daemon=True).start()


def _context(event, text):
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


# ---- UserPromptSubmit

def _prompt(mem, call, targets, env):
    payload = call.payload
    text = recall.user_text(dialects.strip_hook_context(payload.get("prompt")))
    if text is None or text.startswith(nudges.STOP_HEAD):  # Gemini and Copilot send a Stop's reason back as a prompt
        return None
    session, _ = mem.bind(payload)
    if session is None:
        return None
    with mem.store.lock:
        session.hook["seen"] = mem.now()
        indexes = mem.indexes(session)
        hits = recall.prompt_hits(indexes, text, exclude=mem.shown_keys(session), limit=PROMPT_NODES)
        # which nodes the prompt is about (ids, never its words): they lead this session's file recall
        near = recall.prompt_hits(indexes, text, limit=NEAR_MAX, near=True)
        session.hook["near"] = [model.node_key(h.level, h.id) for h in near]
        named = recall.named_hits(indexes, text, limit=NEAR_MAX)  # the parts it names: what will be edited
        touches = recall.part_touches(indexes)
        lines, used = _lines(mem, session, hits, PROMPT_NODES, PROMPT_CHARS - 120)
        mem.shown(session, used)
    # the parts whose code holds its words (files read outside the lock): with the parts it names,
    # they lead this session's file recall
    score = part_code.node_scores(recall.part_files(touches, session.project_path), text)
    for h in named:
        k = model.node_key(h.level, h.id)
        score[k] = score.get(k, 0.0) + h.score
    with mem.store.lock:
        session.hook["named"] = [[k, round(s, 3)] for k, s in part_code.best(score)]
        session.hook.pop("edited", None)  # a new prompt, a new task: the last edit no longer leads
    mem.save(session)
    if not lines:
        return None
    mem.read(session, used)
    head = "kg memory that may be relevant to this prompt (%d node%s):" % (len(lines), "" if len(lines) == 1 else "s")
    return _context("UserPromptSubmit", "\n".join([head] + lines))


def _lines(mem, session, hits, max_nodes, max_chars, stale_out=None):
    """Rendered lines for hits within the budget (lock held): (lines, hits used). A stale node's
    state says its mark; stale_out (a list) gets the hits used that are stale. An archived or
    orphaned node's state is not said: being shown makes it active (mem.read), so the word would be
    out of date as the model reads it, and it costs every recalled line."""
    graphs = {g.level: g for g in mem.graphs(session)}
    marks = {lv: mem.stale(g) for lv, g in graphs.items()}
    items = []
    for h in hits:
        node = graphs[h.level].nodes.get(h.id)
        if node is not None:
            m = marks[h.level].get(h.id)
            items.append((h.level, node, m.text if m is not None else model.ACTIVE, h, m is not None))
    lines, used = recall_lines.fit_lines([(lv, n, st) for lv, n, st, _, _ in items], max_nodes, max_chars)
    if stale_out is not None:
        stale_out.extend(items[k][3] for k in range(len(used)) if items[k][4])
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
        return [("file", f) for f in shell_files.command_files(ti.get("command"), cwd)]
    if call.shell and tool == "apply_patch":
        return [("file", f) for f in shell_files.patch_files(ti.get("command"), cwd)]
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
    focus, spans, edit_text = _edited(call, found)
    edit_score = None
    if edit_text:  # the parts whose code holds the edit's words (files read outside the lock)
        with mem.store.lock:
            touches = recall.part_touches(mem.indexes(session))
        edit_score = part_code.node_scores(recall.part_files(touches, session.project_path), edit_text)
    with mem.store.lock:
        h = session.hook
        if edit_score is not None:  # node keys only, never the edit's words; they lead later recalls too
            h["edited"] = [[k, round(v, 3)] for k, v in part_code.best(edit_score)]
        h["seen"] = mem.now()
        h["tools"] = int(h.get("tools", 0)) + 1
        if tool in EDIT_TOOLS:
            h["edits"] = int(h.get("edits", 0)) + 1
        if "kg_put_node" in tool or "kg_put_edge" in tool:
            h["kg_writes"] = int(h.get("kg_writes", 0)) + 1
        for target in found:
            more, shown = _about_target(mem, session, payload, target, targets, env,
                                        FILE_NODES - len(used), FILE_CHARS - sum(len(x) + 1 for x in parts), focus,
                                        spans)
            parts.extend(more)
            used.extend(shown)
            mem.shown(session, shown)
    mem.read(session, used)
    mem.save(session)
    if not parts:
        return None
    return _context("PostToolUse", "\n".join(parts))


def _edited(call, found):
    """(the parts of the file an Edit or MultiEdit changed, innermost first; the spans of all its
    parts; the text it replaced and wrote), or ([], {}, ""): they lead file recall (contract section
    12's part touches). Reads the file: before the lock."""
    ti = call.payload.get("tool_input")
    if call.payload.get("tool_name") not in ("Edit", "MultiEdit") or len(found) != 1 or not isinstance(ti, dict):
        return [], {}, ""
    edits = [e for e in (ti.get("edits") if isinstance(ti.get("edits"), list) else [ti]) if isinstance(e, dict)]
    first = edits[0] if edits else {}
    path, cwd = found[0][1], call.payload.get("cwd")
    if not os.path.isabs(path) and isinstance(cwd, str):
        path = os.path.join(cwd, path)
    focus, spans = shell_files.edit_site(path, [first.get("new_string"), first.get("old_string")])
    return focus, spans, part_code.edit_text(edits)


def _about_target(mem, session, payload, target, targets, env, max_nodes=FILE_NODES, max_chars=FILE_CHARS,
                  focus=(), spans=None):
    """(lines, hits shown) for one file or web target within what is left of the budget (lock held)."""
    kind, value = target
    indexes = mem.indexes(session)
    root = session.project_path
    if kind == "file":
        covered = recall.file_hits(indexes, value, root, limit=1000)
        recall.order_file_hits(covered, _file_key(mem, session, focus, covered, value, spans))
    elif kind == "url":
        covered = recall.url_hits(indexes, value, limit=1000)
    else:
        covered = recall.prompt_hits(indexes, value, limit=FILE_NODES)
    shown = mem.shown_keys(session)
    fresh = [c for c in covered if "%s:%s" % (c.level, c.id) not in shown][:max(0, max_nodes)]
    parts, used = [], []
    if fresh and kind != "query":
        name = recall.relative_path(value, root) if kind == "file" else value
        head = "kg memory that may be relevant to %s:" % recall.clip(name, 200)
        stale = []
        marks = {g.level: mem.stale(g) for g in mem.graphs(session)} if kind == "file" else {}
        asked = session.hook.get("stale_asked")
        ask = len(STALE_ASK) + 1 if not asked and any(c.id in marks.get(c.level, ()) for c in fresh) else 0
        lines, used = _lines(mem, session, fresh, max_nodes, max_chars - len(head) - 1 - ask, stale)
        if lines:
            parts.append(head)
            parts.extend(lines)
            if stale and ask:
                parts.append(STALE_ASK)
                session.hook["stale_asked"] = True
    nudge = nudges.nudge(mem, session, payload, kind, value, bool(covered), targets, env)
    if nudge:
        parts.append(nudge)
    return parts, used


def _file_key(mem, session, focus, hits, path=None, spans=None):
    """File recall's order (lock held): kg/agents/file_order.py."""
    return file_order.file_key({g.level: g for g in mem.graphs(session)}, session.hook, focus, hits, path, spans)


HINTS = ("named", "edited")  # the last prompt's and edit's: made again by the next prompt


def _stop(mem, call, targets, env):
    _drop_hints(mem, call.payload)
    return nudges.stop(mem, call.payload, targets, env)


def _drop_hints(mem, payload):
    """A turn ended: the next prompt makes the hints that order file recall again, so they leave the
    session and the saved sessions stay small. An unknown client id starts nothing."""
    find = getattr(mem.store, "client_session", None)
    session = find(payload.get("session_id")) if find is not None else None
    if session is not None and any(k in session.hook for k in HINTS):
        with mem.store.lock:
            for k in HINTS:
                session.hook.pop(k, None)
        mem.save(session)


_EVENTS = {dialects.START: _session_start, dialects.PROMPT: _prompt, dialects.TOOL: _tool, dialects.STOP: _stop}
