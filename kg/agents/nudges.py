"""Nudges to save knowledge (contract section 8): after a tool call, about a target the agent keeps
re-deriving; at Stop, about a session of substantial work that saved nothing.

Rules owned here:
- A target (file, url, web query) is nudged about when it was used in 2+ agent sessions (a url or
  query also twice in one) and no node covers it: at most one nudge per NUDGE_GAP per session,
  NUDGE_MAX per session, one per target per NUDGE_TARGET_GAP. A nudge quotes at most NUDGE_SHOWN
  characters of a path or url.
- The daemon remembers targets hashed (Targets, bounded by DAEMON_TARGETS, CLIENTS_PER_TARGET
  client sessions each), a session its last SESSION_TARGETS; never prompt text.
- Stop: once per session, after substantial work (STOP_EDITS edits or STOP_TOOLS tool calls) with
  nothing written to memory, never when stop_hook_active, off with KG_CAPTURE_NUDGE=0.
"""

import collections
import hashlib
import json
import re
import threading
import weakref

from . import recall

NUDGE_SHOWN = 300           # a path or url longer than this is not spelled out in a nudge
NUDGE_GAP, NUDGE_MAX, NUDGE_TARGET_GAP = 600.0, 3, 86400.0
STOP_EDITS, STOP_TOOLS = 3, 12
SESSION_TARGETS = 64        # targets remembered per client session
DAEMON_TARGETS = 5000       # targets remembered by the daemon
CLIENTS_PER_TARGET = 4
STOP_HEAD = "Before you stop: this session did substantial work"  # agents send it back as a prompt

_TARGETS = weakref.WeakKeyDictionary()
_TARGETS_LOCK = threading.Lock()


def targets_for(store):
    """The daemon-wide target memory of one store, however often the hooks handler is built."""
    with _TARGETS_LOCK:
        targets = _TARGETS.get(store)
        if targets is None:
            targets = _TARGETS[store] = Targets()
        return targets


def digest(kind, value, root):
    v = recall.relative_path(value.strip(), root) if kind == "file" else value.strip()
    if kind == "url":
        v = recall.norm_url(v)
    elif kind == "query":
        v = " ".join(sorted(set(recall.words(v))))
    return hashlib.sha256(("%s\0%s\0%s" % (kind, root or "", v)).encode("utf-8", "replace")).hexdigest()[:20]


class Targets:
    """Daemon-wide, bounded: per target digest, the client sessions that used it and when it was
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


def nudge(mem, session, payload, kind, value, covered, targets, env):
    if env.get("KG_CAPTURE_NUDGE", "1") == "0":
        return None
    h = session.hook
    root = session.project_path
    key = digest(kind, value, root)
    mine = h.setdefault("targets", {})
    if not isinstance(mine, dict):
        mine = h["targets"] = {}
    count = mine.pop(key, 0) + 1
    mine[key] = count
    while len(mine) > SESSION_TARGETS:
        mine.pop(next(iter(mine)))
    rec = targets.use(key, getattr(session, "client_id", None) or session.id)
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
        what = "You have now read %s in %d agent sessions and no kg node covers it." % (recall.clip(rel, 200), clients)
        call = 'kg_put_node session_id="%s" level="project" id="%s" gist="<what this file does and why, in one ' \
               'line>" notes=["<what you had to work out>"] touches=["%s"]' % (
                   session.id, _slug(recall.path_parts(rel)[-1]), _quoted(rel, "<the file's path>"))
    elif kind == "url":
        what = "You keep fetching %s (%d time(s) here, %d agent session(s)) and no kg node covers it." % (
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

def stop(mem, payload, targets, env):
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
    reason = (STOP_HEAD + " (%d file edits, %d tool calls) and saved "
              "nothing to kg memory. Save what a future session would need — decisions, gotchas, how things "
              "work — as nodes: kg_put_node session_id=\"%s\" level=\"project\" (or \"user\" when it holds "
              "across projects) id=... gist=... notes=[...] touches=[files]; link them with kg_put_edge. If "
              "nothing is worth keeping, say so in one line and stop." % (
                  int(h.get("edits", 0)), int(h.get("tools", 0)), session.id))
    return {"decision": "block", "reason": reason}
