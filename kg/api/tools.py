"""The eight kg_* tools: schemas, descriptions for an agent, and handlers over the store.

Rules owned here: which arguments each tool takes (inputSchema, checked before the handler
runs), what it returns (by default one text item from kg/render and nothing else; with
structured output also the outputSchema and a structuredContent bounded by kg/structured),
and the single mapping of KgError to a tool result with isError (contract section 3).
"""

import logging

from ..agents import dialects
from ..core import model
from ..core.errors import BadInput, KgError
from . import render
from . import structured as bounds

log = logging.getLogger(__name__)


class UnknownTool(Exception):
    """Not a tool failure but a protocol fault: JSON-RPC -32602."""


# ---------------------------------------------------------------- schemas

_STR = {"type": "string"}
_STRS = {"type": "array", "items": {"type": "string"}}
_LEVEL = {"type": "string", "enum": list(model.LEVELS),
          "description": "user = cross-project wisdom; project = knowledge of this codebase"}
_SESSION = {"type": "string", "description": "the id kg_read gave you"}
_STATE = {"type": "string", "enum": [model.ACTIVE, model.ARCHIVED, model.ORPHANED]}

# contract 12: present only when code a node touches (or an edge's file end) changed since its put
_STALE = {"type": "object", "required": ["mark", "since", "files"],
          "properties": {"mark": _STR, "since": {"type": "number"}, "more": {"type": "integer"},
                         "files": {"type": "array", "items": {
                             "type": "object", "required": ["touch", "change"], "properties": {
                                 "touch": _STR, "change": {"type": "string",
                                                           "enum": ["changed", "deleted", "renamed", "vanished"]},
                                 "to": _STR, "commits": {"type": "integer"}, "lines_changed": {"type": "integer"},
                                 "lines": {"type": "integer"}}}}}}
NODE = {"type": "object", "required": ["id", "gist", "notes", "touches", "state"],
        "properties": {"id": _STR, "gist": _STR, "notes": _STRS, "touches": _STRS, "state": _STATE,
                       "private": {"type": "boolean"}, "unpublished": {"type": "boolean"},
                       "by": _STR, "changed": {"type": ["number", "null"]}, "stale": _STALE}}
EDGE = {"type": "object", "required": ["from", "to", "rel", "notes"],
        "properties": {"from": _STR, "to": _STR, "rel": _STR, "notes": _STRS, "stale": _STALE}}


def _with(base, **extra):
    out = {"type": "object", "required": list(base["required"]) + [k for k in extra if k != "project_path"],
           "properties": dict(base["properties"])}
    out["properties"].update(extra)
    return out


GRAPH = {"type": "object", "required": ["nodes", "archived", "edges"],
         "properties": {"nodes": {"type": "array", "items": NODE}, "archived": _STRS,
                        "edges": {"type": "array", "items": EDGE}}}


def _obj(required, **props):
    return {"type": "object", "required": required, "properties": props}


_INT = {"type": "integer"}


def _counts(**props):
    """An object of optional fields (no empty `required`: draft-04 validators reject it)."""
    return {"type": "object", "properties": props}


_CUT_GRAPH = _counts(edge_notes=_INT, notes_of_nodes=_INT, edges=_INT, archived=_INT, gists_cut_to=_INT,
                  nodes=_INT)
_CUT_NOTE = "what was left out to keep the serialized result within its size bound (counts or ids)"
READ_CUT = dict(_counts(user=_CUT_GRAPH, project=_CUT_GRAPH, hint=_STR, notes_of=_STRS, edges_of=_STRS,
                     nodes=_INT, missing=_INT), description=_CUT_NOTE)
SEARCH_CUT = dict(_counts(notes_of_results=_INT, results=_INT), description=_CUT_NOTE)
SYNC_CUT = dict(_counts(notes_of=_INT, nodes=_INT, edges=_INT, deleted_nodes=_INT, deleted_edges=_INT),
                description=_CUT_NOTE)


def _in(required, **props):
    schema = _obj(required, **props)
    schema["additionalProperties"] = False
    return schema


TOOLS = [
    {
        "name": "kg_read",
        "title": "Read memory",
        "description": (
            "Load your long-term memory. If your context already shows it (a `Session: <id>` line from kgd's "
            "session-start hook), it is loaded: pass that session_id and do not call this with cwd. Otherwise call "
            "it FIRST with cwd = your working directory: it returns the whole active knowledge graph of both "
            "levels (user: cross-project wisdom; project: this codebase) and a session_id (first line: "
            "Session: <id>) to pass to the other kg_* tools. Later, call it with id or ids to read a node's full "
            "notes and edges (this also recalls archived nodes into the active graph)."),
        "inputSchema": _in([], cwd={"type": "string", "description": "absolute path of your working directory"},
                           session_id=_SESSION,
                           id={"type": "string", "description": "read one node in full"},
                           ids={"type": "array", "items": _STR, "description": "read several nodes in full"},
                           level=_LEVEL),
        "outputSchema": _obj(["session_id"], session_id=_STR, project_path={"type": ["string", "null"]},
                             user=GRAPH, project=GRAPH,
                             budget=_obj(["max_tokens", "user_tokens", "project_tokens"], max_tokens=_INT,
                                         user_tokens=_INT, project_tokens=_INT),
                             nodes={"type": "array",
                                    "items": _with(NODE, level=_LEVEL, edges={"type": "array", "items": EDGE})},
                             missing=_STRS, withheld=_STRS, truncated=READ_CUT),
        "annotations": {"title": "Read memory", "readOnlyHint": False, "destructiveHint": False,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_put_node",
        "title": "Save an insight",
        "description": (
            "Save one distilled insight as a node: a short stable id (kebab-case, e.g. 'auth-tokens-expire-hourly'), "
            "a one-line gist, optional notes (details, reasons, gotchas) and touches (files it concerns; PATH#NAME "
            "when it is about one function or class). "
            "Put what a future session would want to know: decisions, pitfalls, conventions, how things fit. "
            "An existing id is updated: given fields replace, omitted ones stay. level=user for lessons that hold "
            "across projects, project for this codebase. Never a secret (token, password, key): a put holding "
            "one is refused; note where it lives instead (e.g. 'in .env as GITHUB_TOKEN')."),
        "inputSchema": _in(["session_id", "level", "id", "gist"], session_id=_SESSION, level=_LEVEL,
                           id={"type": "string", "maxLength": model.MAX_ID},
                           gist={"type": "string", "maxLength": model.MAX_GIST}, notes=_STRS, touches=_STRS,
                           private={"type": "boolean", "description": "true: keep it personal, never shared "
                                    "through the repository's .kg/ (omitted: as it was)"}),
        "outputSchema": _obj(["level", "created", "node"], level=_LEVEL, created={"type": "boolean"}, node=NODE),
        "annotations": {"title": "Save an insight", "readOnlyHint": False, "destructiveHint": False,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_put_edge",
        "title": "Connect two insights",
        "description": (
            "Connect two nodes (or a node and a file path) with a typed relationship, e.g. rel = 'depends-on', "
            "'explains', 'contradicts', 'implemented-in'. Well-connected nodes stay in the active memory longer. "
            "An existing (from, to, rel) gets its notes updated."),
        "inputSchema": _in(["session_id", "level", "from", "to", "rel"], session_id=_SESSION, level=_LEVEL,
                           **{"from": _STR, "to": _STR, "rel": {"type": "string", "maxLength": model.MAX_REL},
                              "notes": _STRS}),
        "outputSchema": _obj(["level", "created", "edge"], level=_LEVEL, created={"type": "boolean"}, edge=EDGE),
        "annotations": {"title": "Connect two insights", "readOnlyHint": False, "destructiveHint": False,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_delete_node",
        "title": "Delete an insight",
        "description": ("Delete a node that is wrong or obsolete, with every edge touching it. Prefer updating it "
                        "with kg_put_node when it is only out of date."),
        "inputSchema": _in(["session_id", "id"], session_id=_SESSION, id=_STR, level=_LEVEL),
        "outputSchema": _obj(["level", "id", "edges_removed"], level=_LEVEL, id=_STR, edges_removed=_INT),
        "annotations": {"title": "Delete an insight", "readOnlyHint": False, "destructiveHint": True,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_delete_edge",
        "title": "Delete a relationship",
        "description": "Delete one edge, named by from, to and rel.",
        "inputSchema": _in(["session_id", "from", "to", "rel"], session_id=_SESSION, level=_LEVEL,
                           **{"from": _STR, "to": _STR, "rel": _STR}),
        "outputSchema": _obj(["level", "edge"], level=_LEVEL, edge=EDGE),
        "annotations": {"title": "Delete a relationship", "readOnlyHint": False, "destructiveHint": True,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_search",
        "title": "Search memory",
        "description": (
            "Search every node, including archived and orphaned ones that kg_read no longer shows, by words in "
            "the id, gist, notes and touches. Best match first. Use it before writing a node that may exist, and "
            "to recall forgotten knowledge; kg_read id=... brings a result back into the active graph."),
        "inputSchema": _in(["query"], query=_STR, session_id=_SESSION,
                           limit={"type": "integer", "minimum": 1, "maximum": 200}),
        "outputSchema": _obj(["results"], results={"type": "array", "items": _with(
            NODE, level=_LEVEL, score={"type": "number"}, project_path={"type": "string"})},
                             truncated=SEARCH_CUT),
        "annotations": {"title": "Search memory", "readOnlyHint": True, "destructiveHint": False,
                        "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "kg_sync",
        "title": "See other sessions' changes",
        "description": (
            "Get what other agent sessions added, changed or deleted in your user and project graphs since your "
            "last kg_sync (or since your kg_read). Call it in long sessions, before relying on memory you read "
            "long ago. Your own writes are left out."),
        "inputSchema": _in(["session_id"], session_id=_SESSION),
        "outputSchema": _obj(["session_id", "nodes", "edges", "deleted_nodes", "deleted_edges"], session_id=_STR,
                             nodes={"type": "array", "items": _with(NODE, level=_LEVEL)},
                             edges={"type": "array", "items": _with(EDGE, level=_LEVEL)},
                             deleted_nodes={"type": "array", "items": _obj(["level", "id"], level=_LEVEL, id=_STR)},
                             deleted_edges={"type": "array", "items": _obj(["level", "from", "to", "rel"], level=_LEVEL,
                                                                           **{"from": _STR, "to": _STR, "rel": _STR})},
                             full_resync={"type": "boolean"}, truncated=SYNC_CUT),
        "annotations": {"title": "See other sessions' changes", "readOnlyHint": True, "destructiveHint": False,
                        "idempotentHint": False, "openWorldHint": False},
    },
    {
        "name": "kg_progress",
        "title": "Task progress",
        "description": (
            "Keep the state of a long task across sessions: with state (a JSON object) it stores it under task_id, "
            "replacing what was there; without state (or with null) it returns what is stored (null if nothing). "
            "Default level user (the answer says which level was used); level project keeps it with this project."),
        "inputSchema": _in(["session_id", "task_id"], session_id=_SESSION, task_id=_STR,
                           state={"type": ["object", "null"]}, level=_LEVEL),
        "outputSchema": _obj(["task_id", "level", "state"], task_id=_STR, level=_LEVEL,
                             state={"type": ["object", "null"]}),
        "annotations": {"title": "Task progress", "readOnlyHint": False, "destructiveHint": False,
                        "idempotentHint": True, "openWorldHint": False},
    },
]

TOOLS_BY_NAME = {t["name"]: t for t in TOOLS}


# The tools an agent needs in its first turn (contract section 13): Claude Code loads a tool whose
# _meta says "anthropic/alwaysLoad": true into the prompt even with tool search on, and defers the
# rest behind ToolSearch (docs/agents.md has the measurement behind this choice).
ALWAYS_LOAD = ("kg_read", "kg_put_node", "kg_search")
ALWAYS_LOAD_META = "anthropic/alwaysLoad"


def list_tools(structured=False):
    """Without structured output no tool declares an outputSchema (the spec then requires
    structuredContent, which Claude Code would show the model instead of the text)."""
    out = []
    for t in TOOLS:
        tool = dict(t) if structured else {k: v for k, v in t.items() if k != "outputSchema"}
        if tool["name"] in ALWAYS_LOAD:
            tool["_meta"] = {ALWAYS_LOAD_META: True}
        out.append(tool)
    return out


# ---------------------------------------------------------------- argument checking

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
               "object": dict, "null": type(None)}


def _type_ok(value, types):
    for t in types if isinstance(types, list) else [types]:
        py = _JSON_TYPES[t]
        if isinstance(value, bool) and t in ("integer", "number"):
            continue
        if isinstance(value, py):
            return True
    return False


def check_arguments(tool, args):
    """The subset of JSON Schema our inputSchemas use: types, required, enum, items, bounds."""
    schema = tool["inputSchema"]
    if not isinstance(args, dict):
        raise BadInput("arguments must be a JSON object.")
    props = schema["properties"]
    unknown = [k for k in args if k not in props]
    if unknown:
        raise BadInput("unknown argument(s) %s; %s takes %s." % (
            ", ".join(repr(k)[:80] for k in unknown[:5]), tool["name"], ", ".join(props)))
    missing = [k for k in schema["required"] if k not in args or args[k] is None]
    if missing:
        raise BadInput("missing required argument(s): %s." % ", ".join(missing))
    for k, v in args.items():
        p = props[k]
        if v is None and k not in schema["required"]:
            continue
        if not _type_ok(v, p["type"]):
            raise BadInput("%s must be %s." % (k, p["type"] if isinstance(p["type"], str) else " or ".join(p["type"])))
        if "enum" in p and v not in p["enum"]:
            raise BadInput("%s must be one of %s." % (k, ", ".join(p["enum"])))
        if p["type"] == "array" and not all(isinstance(x, str) for x in v):
            raise BadInput("%s must be a list of strings." % k)
        if p.get("type") == "integer" and not p.get("minimum", v) <= v <= p.get("maximum", v):
            raise BadInput("%s must be from %s to %s." % (k, p["minimum"], p["maximum"]))


# ---------------------------------------------------------------- handlers
# Each handler returns (result, text, bound): bound(result) is the structuredContent, called only
# with structured output on, so the default path never serializes or trims the objects.

def _same(result):
    return result


def _read(store, a, agent=None):
    session = None
    sid = a.get("session_id")
    if sid is not None:
        try:
            session = store.session(sid)
        except KgError:
            if a.get("cwd") is None:
                raise
    if session is None:
        if a.get("cwd") is None:
            raise BadInput("kg_read needs cwd (your working directory's absolute path) to start a session, "
                           "or the session_id it gave you before.")
        session = store.start_session(a["cwd"], adopt=True)
    ids = a.get("ids")
    if a.get("id") is not None:
        ids = [a["id"]] + [i for i in (ids or []) if i != a["id"]]
    limit = dialects.read_limit(agent or dialects.session_agent(session))
    if ids is not None:
        result = store.read_nodes(session, ids, a.get("level"))
        return result, render.render_nodes(result, limit=limit), lambda r: bounds.bound_nodes(r, limit=limit)
    graphs = store.read_graphs(session)
    result = {"session_id": session.id, "project_path": session.project_path,
              "user": graphs["user"], "project": graphs["project"],
              "budget": {"max_tokens": store.settings.max_tokens, "user_tokens": graphs["user"]["tokens"],
                         "project_tokens": graphs["project"]["tokens"]}}
    with store.lock:  # what kgd's hooks already put in this session's context
        shown = list(session.shown)
    text = render.render_read(result, store.settings.max_tokens, limit=limit, preloaded=shown)

    def bound(result):
        recency = {}
        for level in ("user", "project"):
            g = result[level] = dict(result[level])
            recency[level] = g.pop("recency", None) or {}
            g.pop("tokens", None)
            g.pop("withheld", None)
        return bounds.bound_read(result, recency, limit=limit)
    return result, text, bound


def _put_node(store, a):
    r = store.put_node(store.session(a["session_id"]), a["level"], a["id"], a["gist"], a.get("notes"), a.get("touches"),
                       private=a.get("private"))
    return r, render.render_put_node(r), _same


def _put_edge(store, a):
    r = store.put_edge(store.session(a["session_id"]), a["level"], a["from"], a["to"], a["rel"], a.get("notes"))
    return r, render.render_put_edge(r), _same


def _delete_node(store, a):
    r = store.delete_node(store.session(a["session_id"]), a["id"], a.get("level"))
    return r, render.render_delete_node(r), _same


def _delete_edge(store, a):
    r = store.delete_edge(store.session(a["session_id"]), a["from"], a["to"], a["rel"], a.get("level"))
    return r, render.render_delete_edge(r), _same


def _search(store, a):
    session = store.session(a["session_id"]) if a.get("session_id") is not None else None
    limit = a.get("limit", 20)
    r = store.search(a["query"], session, limit)
    text = render.render_search(r, a["query"], project_path=session.project_path if session else None, asked=limit)
    return r, text, bounds.bound_search


def _sync(store, a, agent=None):
    session = store.session(a["session_id"])
    limit = dialects.read_limit(agent or dialects.session_agent(session))
    r = store.sync(session)
    return r, render.render_sync(r, limit=limit), lambda r: bounds.bound_sync(r, limit=limit)


def _progress(store, a):
    # A null state is "omitted" (as for every optional argument): it reads, never clears.
    r = store.progress(store.session(a["session_id"]), a["task_id"], a.get("state"), a.get("level"),
                       has_state=a.get("state") is not None)
    text = render.render_progress(r)
    if a.get("level") is None:  # said, not silently chosen: the agent may have meant this project
        text += " (No level given: kg_progress's default, user, was used; level=project keeps it with this project.)"
    return r, text, _same


HANDLERS = {"kg_read": _read, "kg_put_node": _put_node, "kg_put_edge": _put_edge, "kg_delete_node": _delete_node,
            "kg_delete_edge": _delete_edge, "kg_search": _search, "kg_sync": _sync, "kg_progress": _progress}


def error_result(message):
    return {"content": [{"type": "text", "text": message}], "isError": True}


_PER_AGENT = frozenset(("kg_read", "kg_sync"))  # their text is bounded for the agent that asks


def call(store, name, args, structured=False, agent=None):
    """tools/call -> CallToolResult: one text item, plus structuredContent only when structured.
    KgError becomes isError; an unknown name raises UnknownTool. `agent` (kg/agents/dialects.py), when
    known, bounds kg_read and kg_sync for what that agent passes its model whole; else the agent
    whose hooks bound the session does."""
    tool = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
    if tool is None:
        raise UnknownTool("unknown tool %r; tools/list names the eight kg_* tools." % (str(name)[:100],))
    try:
        check_arguments(tool, {} if args is None else args)
        if name in _PER_AGENT:
            result, text, bound = HANDLERS[name](store, args or {}, agent)
        else:
            result, text, bound = HANDLERS[name](store, args or {})
    except KgError as exc:
        return error_result("%s failed: %s" % (name, exc.message))
    out = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured:
        out["structuredContent"] = bound(result)
    return out
