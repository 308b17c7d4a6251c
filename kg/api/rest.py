"""REST API (contract section 6): routes -> the same store calls as the MCP tools; the OpenAPI
3.1 document that describes them is kg/api/openapi.py.

Rules owned here: the route table, how query strings and JSON bodies become store arguments,
and the single mapping of KgError to a status code and `{"error": ...}` body (400 bad input,
404 unknown node / session / route, 405 wrong method with Allow, 409 conflict, 415 a body that
is not JSON, 422 a write holding a credential (contract section 10), 507 the disk refused the
write).
"""

import re
from urllib.parse import unquote

from ..agents import dialects
from ..core import model
from ..core.errors import BadInput, KgError, NotFound
from ..core.text import strict_loads
from ..memory import foreground
from ..memory.projects import resolve_project_root
from ..secrets import fields
from ..travel import team
from ..travel.team_folder import holds_kg
from .openapi import OPENAPI


class RestError(Exception):
    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


# ---------------------------------------------------------------- argument helpers

def _q(query, name, required=False):
    values = query.get(name)
    if not values or values[0] == "":
        if required:
            raise BadInput("query parameter %s is required." % name)
        return None
    return values[0]


def _json_body(body, content_type):
    if not body:
        return {}
    ct = (content_type or "application/json").split(";")[0].strip().lower()
    if ct != "application/json" and not ct.endswith("+json"):
        raise RestError(415, "the body must be JSON: send Content-Type: application/json.")
    try:
        obj = strict_loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput("the body is not valid UTF-8 JSON (%s)." % str(exc)[:200])
    if not isinstance(obj, dict):
        raise BadInput("the body must be a JSON object.")
    return obj


def _session(store, sid):
    return store.session(sid) if sid is not None else None


def _body_fields(body, allowed):
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise BadInput(
            "unknown field(s) %s; allowed: %s." % (", ".join(repr(k)[:60] for k in unknown[:5]), ", ".join(allowed))
        )
    for k in ("session_id", "project_path"):
        if body.get(k) is not None and not isinstance(body[k], str):
            raise BadInput("%s must be a string." % k)


# ---------------------------------------------------------------- handlers: (store, match, query, body) -> obj

def graph(store, m, q, body):
    """Both graphs; a project without a graph yet shows an empty one (a GET creates nothing)."""
    pp = _q(q, "project_path")
    root = resolve_project_root(pp) if pp else None  # walks the file system: before taking the store's lock
    store.registry.warm(project_path=root)  # git (the project's identity) never runs under the lock
    with store.lock:
        durable = store.registry.existing(root) if root else None
        if durable is None and root and holds_kg(root):
            durable = store.registry.project(root)  # the repository shares its knowledge: load it
        pend = store.team.pending(durable) if durable is not None and store.team is not None else None
        shown = _full_graph(store, durable.graph, pend) if durable else (
            {"nodes": [], "edges": [], "tokens": 0, "max_tokens": store.settings.max_tokens} if root else None)
        if durable is not None:
            shown["sharing"] = team.describe(durable)  # contract 9: shared in the repository, or personal
            if pend is not None:  # this clone's knowledge not in HEAD yet (`git add .kg && git commit`)
                shown["sharing"]["uncommitted"] = team.counts(pend)
        path = durable.project_path if durable is not None else root  # another checkout: its graph's
        return {"project_path": path, "user": _full_graph(store, store.user), "project": shown}


def _full_graph(store, g, pend=None):
    """Every node in every state, with its times (lock held). A node or edge holding a
    credential is shown so its owner can delete it, marked `flagged` (field, kind), its texts
    withheld (contract section 10). `pend` (team.uncommitted): the nodes this clone changed in
    `.kg/` that HEAD does not hold yet are marked `"uncommitted": true` (contract section 9)."""
    nodes = []
    marks = store.staleness.marks.valid(g)
    fresh = set(pend["node"]) if pend else ()
    for n in g.nodes.values():
        item = _flag(model.public_node(n), g.flagged.get(n["id"]))
        item["created_ts"] = n.get("_created_ts")
        item["updated_ts"] = model.recency(n)
        mark = marks.get(n["id"])
        if mark is not None:  # contract section 12: what changed in the code it touches
            item["stale"] = mark.public
        if n["id"] in fresh:
            item["uncommitted"] = True
        nodes.append(item)
    edge_marks = store.staleness.marks.valid_edges(g)  # a file-path end whose file changed (contract 12)
    edges = []
    for k, e in g.edges.items():
        item = _flag(model.public_edge(e), g.flagged_edges.get(k))
        if k in edge_marks:
            item["stale"] = edge_marks[k].public
        edges.append(item)
    return {"nodes": nodes, "edges": edges, "tokens": g.tokens, "max_tokens": store.settings.max_tokens}


def _flag(item, found):
    if found is None:
        return item
    item = fields.redact_item(item)
    item["flagged"] = {"field": found[0], "kind": found[1].kind, "label": found[1].label}
    return item


def create_session(store, m, q, body):
    _body_fields(body, ("project_path",))
    s = store.start_session(body.get("project_path"))
    return {"session_id": s.id, "project_path": s.project_path}


def get_session(store, m, q, body):
    return session_stats(store, store.session(m["sid"]))


def session_stats(store, session):
    """A session as GET /api/sessions/{id} shows it: its public fields and the changes by other
    sessions its next kg_sync would return."""
    with store.lock:
        d = session.to_obj()
        for private in ("client_id", "shown", "hook", "claimed"):
            d.pop(private)
        d["pending_changes"] = store.log.pending(session.sync_mark, session.id)
        return d


def get_node(store, m, q, body):
    s = _session(store, _q(q, "session_id"))
    pp = _q(q, "project_path")
    r = store.read_nodes(s, [m["id"]], m["level"], pp)
    if not r["nodes"]:
        raise NotFound("no node %r in the %s graph." % (m["id"][:200], m["level"]))
    node = r["nodes"][0]
    if m["level"] == "project" and store.team is not None:
        with store.lock:
            durable = store.registry.addressed("project", s, pp)[0]
            if store.team.node_pending(durable, node["id"]):
                node = dict(node, uncommitted=True)  # contract 9: changed here, not in HEAD yet
    return node


def put_node(store, m, q, body):
    _body_fields(body, ("gist", "notes", "touches", "session_id", "project_path", "private"))
    s = _session(store, body.get("session_id"))
    return store.put_node(s, m["level"], m["id"], body.get("gist"), body.get("notes"), body.get("touches"),
                          body.get("project_path") or _q(q, "project_path"), private=body.get("private"))


def delete_node(store, m, q, body):
    s = _session(store, _q(q, "session_id"))
    return store.delete_node(s, m["id"], m["level"], _q(q, "project_path"))


def put_edge(store, m, q, body):
    _body_fields(body, ("from", "to", "rel", "notes", "session_id", "project_path"))
    for k in ("from", "to", "rel"):
        if k not in body:
            raise BadInput("%s is required." % k)
    s = _session(store, body.get("session_id"))
    return store.put_edge(s, m["level"], body["from"], body["to"], body["rel"], body.get("notes"),
                          body.get("project_path") or _q(q, "project_path"))


def delete_edge(store, m, q, body):
    s = _session(store, _q(q, "session_id"))
    return store.delete_edge(s, _q(q, "from", True), _q(q, "to", True), _q(q, "rel", True), m["level"],
                             _q(q, "project_path"))


def search(store, m, q, body):
    limit = _q(q, "limit")
    try:
        limit = int(limit) if limit is not None else 20
    except ValueError:
        raise BadInput("limit must be an integer.")
    s = _session(store, _q(q, "session_id"))
    words = _q(q, "q") or _q(q, "query")  # `query` is the MCP tool's name for it
    if words is None:
        raise BadInput("query parameter q (or query) is required.")
    return store.search(words, s, limit, _q(q, "project_path"))


def sync(store, m, q, body):
    return store.sync(store.session(_q(q, "session_id", True)))


def _query_level(q):
    if "level" in q:
        model.check_level(q["level"][0])


def get_progress(store, m, q, body):
    _query_level(q)
    s = _session(store, _q(q, "session_id"))
    return store.progress(s, m["task_id"], level=_q(q, "level"), project_path=_q(q, "project_path"))


def put_progress(store, m, q, body):
    _body_fields(body, ("state", "session_id", "project_path", "level"))
    _query_level(q)
    if "state" not in body:
        raise BadInput("state is required (a JSON object, or null to clear it).")
    s = _session(store, body.get("session_id"))
    return store.progress(s, m["task_id"], body["state"],
                          body["level"] if body.get("level") is not None else _q(q, "level"), has_state=True,
                          project_path=body.get("project_path") or _q(q, "project_path"))


def projects(store, m, q, body):
    """The project graphs on disk; a loaded one also says how many of its nodes are stale
    (contract 12) and, shared, how much of this clone's knowledge is not yet committed (contract 9)."""
    with store.lock:
        out = []
        for d in sorted(store.registry.load_all(), key=lambda d: d.graph.slug or ""):
            g = d.graph
            item = {"slug": g.slug, "project_path": g.project_path, "nodes": len(g.nodes), "edges": len(g.edges),
                    "active": g.state_counts[model.ACTIVE], "archived": g.state_counts[model.ARCHIVED],
                    "orphaned": g.state_counts[model.ORPHANED], "stale": len(store.staleness.marks.valid(g))}
            why = store.staleness.problems.get(g.project_path)
            if why:
                item["stale_problem"] = why  # why some marks say less than they could
            if d.shared is not None:
                item["shared"] = True
                pend = store.team.pending(d) if store.team is not None else None
                if pend is not None:
                    item["uncommitted"] = team.counts(pend)
            out.append(item)
        return {"projects": out}


def get_remote(store, m, q, body):
    """Placeholder in the table: handle() answers /api/remote through the daemon's RemoteSync."""
    raise AssertionError("handled by handle()")


def post_remote(store, m, q, body):
    raise AssertionError("handled by handle()")


def _remote_answer(remote, method, body):
    """GET: the personal remote's status; POST {wait?}: re-read ROOT/sync.json, sync now, wait."""
    if remote is None:
        raise RestError(409, "this daemon has no personal remote support wired in.")
    if method == "GET":
        return remote.status()
    _body_fields(body, ("wait",))
    wait = body.get("wait", 60)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 300:
        raise BadInput("wait must be a number of seconds from 0 to 300.")
    with foreground.aside():  # the round this waits for must not give way to this very request
        return remote.sync_now(wait)


def share(store, m, q, body):
    """`kgd share [--off]` through the daemon, so the live graph is the one written."""
    _body_fields(body, ("project_path", "off"))
    if not isinstance(body.get("project_path"), str):
        raise BadInput("project_path is required: the folder of the repository to share.")
    if not isinstance(body.get("off", False), bool):
        raise BadInput("off must be true or false.")
    return store.team.share(body["project_path"], off=body.get("off", False))


def openapi(store, m, q, body):
    return OPENAPI


def post_hooks(store, m, q, body):
    """Placeholder in the table: handle() answers /api/hooks through the daemon's hooks callable."""
    raise AssertionError("handled by handle()")


def _hook_answer(answer_hook, body, content_type, query):
    """An agent's hook input -> its hook output, or None for an empty 200 (nothing to say).
    ?agent= names the agent (claude when absent), ?event= the event when the input does not."""
    agent = _q(query, "agent") or dialects.CLAUDE
    if not dialects.known(agent):
        raise BadInput(dialects.unknown_message(agent))
    event = _q(query, "event")
    if event is not None and len(event) > 64:
        raise BadInput("event is over 64 characters.")
    if not body:
        raise BadInput("the body must be a JSON object (the agent's hook input).")
    payload = _json_body(body, content_type)
    answer = answer_hook(payload, agent, event) if agent != dialects.CLAUDE or event else answer_hook(payload)
    if answer is not None and not isinstance(answer, dict):
        raise TypeError("the hooks handler answered %s, not a dict or None" % type(answer).__name__)
    return answer


ROUTES = [
    (r"/api/graph", {"GET": graph}),
    (r"/api/sessions", {"POST": create_session}),
    (r"/api/sessions/(?P<sid>[^/]+)", {"GET": get_session}),
    (r"/api/nodes/(?P<level>[^/]+)/(?P<id>[^/]+)", {"GET": get_node, "PUT": put_node, "DELETE": delete_node}),
    (r"/api/edges/(?P<level>[^/]+)", {"PUT": put_edge, "DELETE": delete_edge}),
    (r"/api/search", {"GET": search}),
    (r"/api/sync", {"GET": sync}),
    (r"/api/progress/(?P<task_id>[^/]+)", {"GET": get_progress, "PUT": put_progress}),
    (r"/api/projects", {"GET": projects}),
    (r"/api/share", {"POST": share}),
    (r"/api/openapi.json", {"GET": openapi}),
    (r"/api/hooks", {"POST": post_hooks}),
    (r"/api/remote", {"GET": get_remote, "POST": post_remote}),
]
_COMPILED = [(re.compile(p + r"/?\Z"), methods) for p, methods in ROUTES]


def handle(store, method, path, query, body, content_type=None, hooks=None, remote=None):
    """-> (status, json object or None for an empty body, extra headers). Every failure is a JSON
    {"error": ...}. `hooks` answers POST /api/hooks (the daemon's, set where it is wired)."""
    if method == "HEAD":
        method = "GET"
    for pattern, methods in _COMPILED:
        m = pattern.match(path)
        if not m:
            continue
        fn = methods.get(method)
        if fn is None:
            return 405, {"error": "%s is not allowed on %s; use %s." % (method, path[:200], ", ".join(methods))}, \
                {"Allow": ", ".join(methods)}
        try:
            args = {k: unquote(v, errors="strict") for k, v in m.groupdict().items()}
            if "level" in args:
                model.check_level(args["level"])
            if fn is post_hooks:
                return 200, _hook_answer(hooks or (lambda payload, *a: None), body, content_type, query), None
            if method in ("PUT", "POST", "PATCH"):
                body = _json_body(body, content_type)
            if fn in (get_remote, post_remote):
                return 200, _remote_answer(remote, method, body or {}), None
            return 200, fn(store, args, query, body or {}), None
        except UnicodeDecodeError:
            return 400, {"error": "the path is not valid percent-encoded UTF-8."}, None
        except RestError as exc:
            return exc.status, {"error": exc.message}, exc.headers
        except KgError as exc:
            return exc.status, {"error": exc.message}, None
    return 404, {"error": "no such API route %s; GET /api/openapi.json lists them." % path[:200]}, None
