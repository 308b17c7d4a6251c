"""Nodes and edges: validation, states and the token estimate (contract sections 3-5). Pure.

A node is a plain dict: `id`, `gist`, `notes` (list of str), `touches` (list of str) and the
store's own fields `_created_ts`, `_write_ts`, `_read_ts` (Unix seconds), `_archived` (true)
and `_orphaned_ts` (Unix seconds). Its state is derived, never stored twice: orphaned when
`_orphaned_ts` is set, else archived when `_archived` is true, else active. The two state
keys are present only when set (the reference plugin reads state by key presence); files
holding `"_archived": false` or `"_orphaned_ts": null` still load.
An edge is `{"from", "to", "rel", "notes"}`, keyed `"FROM->TO:REL"` in a graph file.
A node's gist and notes together hold at most MAX_NODE_TEXT characters.
The daemon's default settings (DEFAULT_*) are defined here once.
"""

import re

from .errors import BadInput
from .text import compact_json

ACTIVE, ARCHIVED, ORPHANED = "active", "archived", "orphaned"
LEVELS = ("user", "project")

NODE_BASE_TOKENS = 20
EDGE_TOKENS = 15

# Limits that keep one node readable in an agent's context and one request small.
MAX_ID = 200
MAX_REL = 100
MAX_GIST = 2000
MAX_NOTE = 10000
MAX_NOTES = 100
MAX_TOUCH = 1000
MAX_TOUCHES = 100
MAX_PATH = 4096
MAX_STATE = 64 * 1024  # bytes of a progress state as stored
MAX_NODE_TEXT = 16000  # gist + every note: one node must not push the rest out of kg_read

# Defaults of the daemon's settings (command line / KG_* environment).
DEFAULT_MAX_TOKENS = 5000
DEFAULT_GRACE_DAYS = 7.0
DEFAULT_ORPHAN_GRACE_DAYS = 365.0
DEFAULT_SAVE_INTERVAL = 30.0
DEFAULT_SESSION_TTL = 86400.0


def node_state(node):
    if node.get("_orphaned_ts") is not None:
        return ORPHANED
    if node.get("_archived"):
        return ARCHIVED
    return ACTIVE


def is_active(node):
    return node_state(node) == ACTIVE


def node_tokens(node):
    """Contract 5: 20 + (len(gist) + sum of len(note)) // 4 for an active node."""
    return NODE_BASE_TOKENS + (len(node.get("gist", "")) + sum(len(n) for n in node.get("notes", ()))) // 4


def recency(node):
    """max(last write, last read); a node never written by kgd falls back to its creation."""
    return max(node.get("_write_ts") or 0, node.get("_read_ts") or 0, node.get("_created_ts") or 0)


def edge_key(frm, to, rel):
    return "%s->%s:%s" % (frm, to, rel)


def node_key(level, node_id):
    """"level:id", a node of either graph: how a client session records what it was shown."""
    return "%s:%s" % (level, node_id)


def edge_counts(edge, nodes):
    """An edge counts in kg_read (and the estimate) when one end is an ACTIVE node of this graph
    (contract 5, revised 2026-12-01). A file-path end alone does not count: nothing could ever
    take such an edge out of the budget once its node is archived."""
    for end in (edge["from"], edge["to"]):
        n = nodes.get(end)
        if n is not None and is_active(n):
            return True
    return False


def estimate_tokens(nodes, edges):
    """The whole-graph token estimate of contract section 5 (the store keeps it incrementally)."""
    total = sum(node_tokens(n) for n in nodes.values() if is_active(n))
    total += EDGE_TOKENS * sum(1 for e in edges.values() if edge_counts(e, nodes))
    return total


def public_node(node, with_state=True):
    """The NODE of the contract: no underscore fields."""
    out = {"id": node["id"], "gist": node.get("gist", ""), "notes": list(node.get("notes", [])),
           "touches": list(node.get("touches", []))}
    if with_state:
        out["state"] = node_state(node)
    if node.get("_private"):
        out["private"] = True  # kept personal in a shared project: never written under .kg/ (contract 9)
    elif node.get("_unpublished"):
        out["unpublished"] = True  # had before the project's .kg/ arrived: personal until `kgd share`
    if node.get("_by"):
        out["by"] = node["_by"]  # a teammate's knowledge (from .kg/): who last changed it, and when
        out["changed"] = node.get("_write_ts")
    return out


def check_private(value):
    if value is not None and not isinstance(value, bool):
        raise BadInput("private must be true or false.")
    return value


def public_edge(edge):
    return {"from": edge["from"], "to": edge["to"], "rel": edge["rel"], "notes": list(edge.get("notes", []))}


# ---- validation: every argument that reaches the store passes one of these ----

# Control characters: C0 (NUL, escapes...), DEL and C1; notes may keep tab, newline and CR.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _bad_chars(s, allow_newlines=False):
    return (_CONTROL_BUT_LINES if allow_newlines else _CONTROL).search(s) is not None


def check_text(value, name, max_len, allow_empty=False, allow_newlines=False):
    if not isinstance(value, str):
        raise BadInput("%s must be a string, got %s." % (name, type(value).__name__))
    if not value.strip() and not allow_empty:
        raise BadInput("%s must not be empty." % name)
    if len(value) > max_len:
        raise BadInput("%s is %d characters; the limit is %d. Shorten it." % (name, len(value), max_len))
    if _bad_chars(value, allow_newlines):
        raise BadInput("%s contains control characters (NUL, escapes, C1 controls); remove them." % name)
    return value


# An edge is stored under the key "FROM->TO:REL". That key names one edge only if no end holds
# "->" and rel holds no ":" (the first "->" then ends FROM and the last ":" starts REL), so node
# ids and edge ends may not contain "->", nor rel ":".
ARROW = "->"


def _no_arrow(value, name):
    if ARROW in value:
        raise BadInput('%s may not contain "->" (it separates the ends in an edge\'s key).' % name)
    return value


def check_id(value, name="id"):
    return _no_arrow(check_text(value, name, MAX_ID), name)


def check_end(value, name):
    """An edge end: a node id or a file path."""
    return _no_arrow(check_text(value, name, MAX_PATH), name)


def check_rel(value):
    check_text(value, "rel", MAX_REL)
    if ":" in value:
        raise BadInput('rel may not contain ":" (it separates rel in an edge\'s key); use a word like depends-on.')
    return value


def check_list(value, name, max_items, max_len, allow_newlines):
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadInput("%s must be a list of strings." % name)
    if len(value) > max_items:
        raise BadInput("%s has %d items; the limit is %d." % (name, len(value), max_items))
    return [check_text(v, "each of " + name, max_len, allow_newlines=allow_newlines) for v in value]


def check_notes(value):
    return check_list(value, "notes", MAX_NOTES, MAX_NOTE, True)


def check_touches(value):
    return check_list(value, "touches", MAX_TOUCHES, MAX_TOUCH, False)


def check_node_text(node):
    """The node as it would be stored: gist and notes within MAX_NODE_TEXT characters."""
    size = len(node.get("gist", "")) + sum(len(n) for n in node.get("notes", ()))
    if size > MAX_NODE_TEXT:
        raise BadInput("node %r would hold %d characters of gist and notes; the limit is %d per node. "
                       "Split it into several nodes joined by edges (kg_put_edge)."
                       % (node.get("id", "")[:200], size, MAX_NODE_TEXT))
    return node


def check_ids(ids):
    """The ids of a read by id: a non-empty list of at most 200 ids."""
    if not isinstance(ids, list) or not ids:
        raise BadInput("give id (a string) or ids (a non-empty list of strings).")
    if len(ids) > 200:
        raise BadInput("at most 200 ids per kg_read.")
    return [check_id(i, "each id") for i in ids]


def put_result(old, node_id, gist, notes, touches, now):
    """The node a put leaves: a new node, or the old one with the given fields replaced
    (omitted ones kept) and its write time refreshed."""
    if old is None:
        if gist is None:
            raise BadInput("gist is required for a new node %r: one line saying the insight." % node_id)
        return {"id": node_id, "gist": gist, "notes": notes or [], "touches": touches or [],
                "_created_ts": now, "_write_ts": now, "_read_ts": None, "_v": 1}
    node = dict(old)
    for field, value in (("gist", gist), ("notes", notes), ("touches", touches)):
        if value is not None:
            node[field] = value
    node["_write_ts"] = now
    node["_v"] = (old.get("_v") or 0) + 1  # written after seeing old: ordered after it (contract 9)
    node.pop("_by", None)  # now this person's
    return node


def put_edge_result(old, frm, to, rel, notes, now):
    """The edge a put leaves: the old one (if any) with the given notes (omitted: kept) and its
    write time refreshed (the merge rule of a shared graph needs it)."""
    edge = {"from": frm, "to": to, "rel": rel, "notes": notes if notes is not None else (old or {}).get("notes", [])}
    if old is not None:
        edge = dict(old, **edge)
    edge["_write_ts"] = now
    edge["_v"] = ((old or {}).get("_v") or 0) + 1
    return edge


def check_state(state):
    """A progress state to store: a JSON object, or None to clear it; at most MAX_STATE bytes."""
    if state is not None and not isinstance(state, dict):
        raise BadInput("state must be a JSON object (or omit it to read the stored state).")
    if state is not None and len(compact_json(state).encode("utf-8")) > MAX_STATE:
        raise BadInput("state is over 64 KiB; keep progress notes short.")
    return state


def set_active(node):
    """Drop both state keys (an active node carries neither)."""
    node.pop("_archived", None)
    node.pop("_orphaned_ts", None)


def set_archived(node):
    node["_archived"] = True
    node.pop("_orphaned_ts", None)


def set_orphaned(node, now):
    node["_archived"] = True
    node["_orphaned_ts"] = now


def check_level(value, default=None):
    if value is None:
        if default is None:
            raise BadInput('level is required: "user" (cross-project wisdom) or "project" (this codebase).')
        return default
    if value not in LEVELS:
        raise BadInput('level must be "user" or "project", got %r.' % (value,))
    return value
