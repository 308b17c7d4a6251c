"""The OpenAPI 3.1 document of the REST API (contract section 6), served at GET /api/openapi.json.

Data only; kg/api/rest.py owns the routes it describes, and tests/test_openapi.py keeps the two in step.
"""

from .. import __version__
from ..agents import dialects
from ..core import model


def _ref(name):
    return {"$ref": "#/components/schemas/" + name}


def _param(name, where="query", required=False, schema=None, description=None):
    p = {"name": name, "in": where, "required": required, "schema": schema or {"type": "string"}}
    if description:
        p["description"] = description
    return p


def _json(schema):
    return {"application/json": {"schema": schema}}


def _ok(schema, description="OK"):
    return {"description": description, "content": _json(schema)}


_ERR = {"description": "error", "content": _json(_ref("Error"))}
_LEVEL_P = _param("level", "path", True, {"type": "string", "enum": list(model.LEVELS)})
_PP = _param("project_path", description="a directory inside the project (its git root is used)")
_SID = _param("session_id")


def _errors(*codes):
    return {str(c): _ERR for c in codes}


_S = {"type": "string"}
_SN = {"type": ["string", "null"]}
_STRS = {"type": "array", "items": _S}
_NODE = {"type": "object", "required": ["id", "gist", "notes", "touches", "state"],
         "properties": {"id": _S, "gist": _S, "notes": _STRS, "touches": _STRS,
                        "state": {"type": "string", "enum": ["active", "archived", "orphaned"]},
                        "private": {"type": "boolean"}}}
_EDGE = {"type": "object", "required": ["from", "to", "rel", "notes"],
         "properties": {"from": _S, "to": _S, "rel": _S, "notes": _STRS}}
_INT = {"type": "integer"}
_NODE["properties"]["stale"] = {  # contract section 12: present only when a touched file changed since the put
    "type": "object", "required": ["mark", "since", "files"],
    "description": "the touched code changed since this node was written or confirmed; a put confirms it",
    "properties": {"mark": _S, "since": {"type": "number"}, "more": _INT, "files": {"type": "array", "items": {
        "type": "object", "required": ["touch", "change"], "properties": {
            "touch": _S, "change": {"type": "string", "enum": ["changed", "deleted", "renamed", "vanished"]},
            "to": _S, "commits": _INT, "lines_changed": _INT, "lines": _INT}}}}}
_EDGE["properties"]["stale"] = _NODE["properties"]["stale"]  # a file-path end whose file changed
_NODE["properties"]["uncommitted"] = {"type": "boolean", "description": "changed in this clone's .kg/, not in "
                                      "HEAD yet (contract 9): git add .kg && git commit publishes it"}
_PENDING = {"type": "object", "required": ["nodes", "deleted", "edges"], "description": "this clone's knowledge "
            "not yet committed (contract 9)", "properties": {"nodes": _INT, "deleted": _INT, "edges": _INT}}
_SHARING = {"type": "object", "required": ["shared"], "description": "a project graph's sharing (contract 9)",
            "properties": {"shared": {"type": "boolean"}, "off": {"type": "boolean"}, "kg_dir": _S, "nodes": _INT,
                           "edges": _INT, "problems": _STRS, "error": {}, "uncommitted": _PENDING}}

OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "kgd REST API", "version": __version__,
             "description": "The knowledge-graph memory daemon's REST API: the same store as the MCP tools."},
    "servers": [{"url": "/"}],
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                       "description": "only when the daemon runs with --token"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": _S}},
            "Node": _NODE,
            "Edge": _EDGE,
            "NodeFull": {"allOf": [_ref("Node"), {"type": "object", "required": ["level", "edges"], "properties": {
                "level": _S, "edges": {"type": "array", "items": _ref("Edge")}}}]},
            "Graph": {"type": "object", "required": ["nodes", "edges", "tokens", "max_tokens"], "properties": {
                "nodes": {"type": "array", "items": {"allOf": [_ref("Node"), {"type": "object", "properties": {
                    "created_ts": {"type": ["number", "null"]}, "updated_ts": {"type": "number"}}}]}},
                "edges": {"type": "array", "items": _ref("Edge")},
                "tokens": {"type": "integer"}, "max_tokens": {"type": "integer"}, "sharing": _SHARING}},
            "PutNodeResult": {"type": "object", "required": ["level", "created", "node"], "properties": {
                "level": _S, "created": {"type": "boolean"}, "node": _ref("Node")}},
            "PutEdgeResult": {"type": "object", "required": ["level", "created", "edge"], "properties": {
                "level": _S, "created": {"type": "boolean"}, "edge": _ref("Edge")}},
            "Progress": {"type": "object", "required": ["task_id", "level", "state"], "properties": {
                "task_id": _S, "level": _S, "state": {"type": ["object", "null"]}}},
            "RemoteStatus": {"type": "object", "required": ["enabled", "remote", "last_ok", "last_error"],
                             "properties": {"enabled": {"type": "boolean"}, "remote": _SN,
                                            "last_ok": {"type": ["number", "null"]},
                                            "last_error": {"type": ["object", "null"]},
                                            "syncing": {"type": "boolean"}, "completed": {"type": "boolean"}}},
            "Health": {"type": "object", "required": ["status", "version", "uptime_s", "sessions", "graphs_loaded"],
                       "properties": {"status": _S, "version": _S,
                                      "uptime_s": {"type": "number"}, "sessions": {"type": "integer"},
                                      "graphs_loaded": {"type": "integer"}}},
        },
    },
    "security": [{}, {"bearer": []}],
    "paths": {
        "/api/health": {"get": {"summary": "daemon status", "operationId": "health",
                                "responses": {"200": _ok(_ref("Health"))}}},
        "/api/graph": {"get": {
            "summary": "both graphs, all states", "operationId": "graph", "parameters": [_PP],
            "responses": dict({"200": _ok({"type": "object", "required": ["project_path", "user", "project"],
                                           "properties": {"project_path": _SN,
                                                          "user": _ref("Graph"),
                                                          "project": {"oneOf": [_ref("Graph"), {"type": "null"}]}}})},
                              **_errors(400))}},
        "/api/sessions": {"post": {
            "summary": "start a session", "operationId": "createSession",
            "requestBody": {"required": False, "content": _json({"type": "object", "additionalProperties": False,
                                                                  "properties": {"project_path": _SN}})},
            "responses": dict({"200": _ok({"type": "object", "required": ["session_id", "project_path"], "properties": {
                "session_id": _S, "project_path": _SN}})}, **_errors(400, 415))}},
        "/api/sessions/{sid}": {"get": {
            "summary": "a session's stats", "operationId": "getSession", "parameters": [_param("sid", "path", True)],
            "responses": dict({"200": _ok({"type": "object",
                                           "required": ["id", "started", "last_active", "sync_mark"]})},
                              **_errors(404))}},
        "/api/nodes/{level}/{id}": {
            "get": {"summary": "one node with its edges (promotes it, as kg_read)", "operationId": "getNode",
                    "parameters": [_LEVEL_P, _param("id", "path", True), _PP, _SID],
                    "responses": dict({"200": _ok(_ref("NodeFull"))}, **_errors(400, 404))},
            "put": {"summary": "create or update a node", "operationId": "putNode",
                    "parameters": [_LEVEL_P, _param("id", "path", True)],
                    "requestBody": {"required": True, "content": _json({
                        "type": "object", "additionalProperties": False, "properties": {
                            "gist": _S, "notes": _STRS, "touches": _STRS,
                            "session_id": _SN, "project_path": _SN, "private": {"type": ["boolean", "null"]}}})},
                    "responses": dict({"200": _ok(_ref("PutNodeResult"))}, **_errors(400, 404, 415, 422, 507))},
            "delete": {"summary": "delete a node and its edges", "operationId": "deleteNode",
                       "parameters": [_LEVEL_P, _param("id", "path", True), _PP, _SID],
                       "responses": dict({"200": _ok({"type": "object", "required": ["level", "id", "edges_removed"],
                                                      "properties": {"level": _S, "id": _S,
                                                                     "edges_removed": {"type": "integer"}}})},
                                         **_errors(400, 404, 409, 507))}},
        "/api/edges/{level}": {
            "put": {"summary": "create or update an edge", "operationId": "putEdge", "parameters": [_LEVEL_P],
                    "requestBody": {"required": True, "content": _json({
                        "type": "object", "required": ["from", "to", "rel"], "additionalProperties": False,
                        "properties": {"from": _S, "to": _S, "rel": _S,
                                       "notes": _STRS, "session_id": _SN,
                                       "project_path": _SN}})},
                    "responses": dict({"200": _ok(_ref("PutEdgeResult"))}, **_errors(400, 404, 415, 422, 507))},
            "delete": {"summary": "delete an edge", "operationId": "deleteEdge",
                       "parameters": [_LEVEL_P, _param("from", required=True), _param("to", required=True),
                                      _param("rel", required=True), _PP, _SID],
                       "responses": dict({"200": _ok({"type": "object", "required": ["level", "edge"], "properties": {
                           "level": _S, "edge": _ref("Edge")}})}, **_errors(400, 404, 409, 507))}},
        "/api/search": {"get": {
            "summary": "search all states, best first", "operationId": "search",
            "parameters": [_param("q", description="the words to look for (required unless query is given)"),
                           _param("query", description="the same as q (the MCP tool's name for it)"), _PP, _SID,
                           _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 200})],
            "responses": dict({"200": _ok({"type": "object", "required": ["results"], "properties": {
                "results": {"type": "array", "items": {"allOf": [_ref("Node"), {"type": "object", "properties": {
                    "level": _S, "score": {"type": "number"}}}]}}}})}, **_errors(400, 404))}},
        "/api/sync": {"get": {
            "summary": "changes by other sessions since this session's last sync", "operationId": "sync",
            "parameters": [_param("session_id", required=True)],
            "responses": dict({"200": _ok({"type": "object", "required": [
                "session_id", "nodes", "edges", "deleted_nodes", "deleted_edges"]})}, **_errors(400, 404))}},
        "/api/progress/{task_id}": {
            "get": {"summary": "a task's stored progress", "operationId": "getProgress",
                    "parameters": [_param("task_id", "path", True),
                                   _param("level", schema={"type": "string", "enum": list(model.LEVELS)}), _PP, _SID],
                    "responses": dict({"200": _ok(_ref("Progress"))}, **_errors(400, 404))},
            "put": {"summary": "store a task's progress (replacing)", "operationId": "putProgress",
                    "parameters": [_param("task_id", "path", True),
                                   _param("level", schema={"type": "string", "enum": list(model.LEVELS)})],
                    "requestBody": {"required": True, "content": _json({
                        "type": "object", "required": ["state"], "additionalProperties": False,
                        "properties": {"state": {"type": ["object", "null"]}, "session_id": _SN,
                                       "project_path": _SN,
                                       "level": {"type": ["string", "null"], "enum": list(model.LEVELS) + [None]}}})},
                    "responses": dict({"200": _ok(_ref("Progress"))}, **_errors(400, 404, 415, 507))}},
        "/api/projects": {"get": {
            "summary": "project graphs on disk", "operationId": "projects",
            "responses": {"200": _ok({"type": "object", "required": ["projects"], "properties": {"projects": {
                "type": "array", "items": {"type": "object", "required": [
                    "slug", "project_path", "nodes", "edges", "active", "archived", "orphaned"], "properties": {
                    "stale": dict(_INT, description="nodes marked stale (contract 12)"),
                    "stale_problem": dict(_S, description="why some marks say less than they could"),
                    "shared": {"type": "boolean"}, "uncommitted": _PENDING}}}}})}}},
        "/api/share": {"post": {
            "summary": "share a project's graph in its repository's .kg/ (or stop: off)", "operationId": "share",
            "requestBody": {"required": True, "content": _json({
                "type": "object", "required": ["project_path"], "additionalProperties": False,
                "properties": {"project_path": _S, "off": {"type": "boolean"}}})},
            "responses": dict({"200": _ok({"type": "object", "required": ["shared", "project_path"], "properties": {
                "shared": {"type": "boolean"}, "project_path": _S}})}, **_errors(400, 415))}},
        "/api/hooks": {"post": {
            "summary": "agent hooks: hook input in, hook output (or nothing) out", "operationId": "hooks",
            "parameters": [_param("agent", schema={"type": "string", "enum": list(dialects.NAMES)},
                                  description="the agent whose hook calls (default claude)"),
                           _param("event", description="the agent's event name, when its input does not carry it")],
            "requestBody": {"required": True, "content": _json({
                "type": "object", "additionalProperties": True,
                "description": "the agent's hook input, unchanged (for Claude Code: session_id, transcript_path, "
                               "cwd, hook_event_name and the event's own fields)"})},
            "responses": dict({"200": {"description": "the agent's hook output as JSON (for Claude Code: "
                                                      "hookSpecificOutput, decision, systemMessage; for Copilot "
                                                      "a top-level additionalContext), or an empty body when there is "
                                                      "nothing worth saying"}}, **_errors(400, 415))}},
        "/api/remote": {
            "get": {"summary": "the personal remote (kgd sync): where, last sync, last error",
                    "operationId": "remoteStatus",
                    "responses": dict({"200": _ok(_ref("RemoteStatus"))}, **_errors(409))},
            "post": {"summary": "re-read ROOT/sync.json and sync with the personal remote now",
                     "operationId": "remoteSync",
                     "requestBody": {"required": False, "content": _json({
                         "type": "object", "additionalProperties": False, "properties": {
                             "wait": {"type": "number", "minimum": 0, "maximum": 300,
                                      "description": "seconds to wait for the round (60)"}}})},
                     "responses": dict({"200": _ok(_ref("RemoteStatus"))}, **_errors(400, 409, 415))}},
        "/api/openapi.json": {"get": {"summary": "this document", "operationId": "openapi",
                                      "responses": {"200": _ok({"type": "object"})}}},
    },
}
