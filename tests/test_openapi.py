"""GET /api/openapi.json (contract section 6): an OpenAPI 3.1 document that describes every
REST route kgd answers, and every documented operation answers as documented.

The walk builds a valid request for each documented path + method from the documented
parameters and request body (path parameters filled with ids created first), calls it, checks
the status is one documented for that operation and validates a 200 body against the documented
response schema. The validator below covers the JSON Schema subset the document uses.
"""

import json
import re
import subprocess
import time
from urllib.parse import quote, urlencode

import pytest

from kg.api import rest

from helpers import git_env

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


# ----------------------------------------------------------------------------- a small validator

class SchemaError(AssertionError):
    pass


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}

SUPPORTED_KEYWORDS = {"type", "required", "properties", "additionalProperties", "items", "enum", "const", "allOf",
                      "oneOf", "anyOf", "$ref", "minimum", "maximum", "minLength", "maxLength", "minItems",
                      "maxItems", "description", "title", "format", "default", "examples", "nullable"}


def resolve(doc, ref):
    assert ref.startswith("#/"), "only local $refs are expected: %r" % ref
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if part not in node:
            raise SchemaError("unresolvable $ref %r" % ref)
        node = node[part]
    return node


def validate(value, schema, doc, where="$"):
    """Raise SchemaError when value does not fit schema (the subset above)."""
    if schema is True or schema == {}:
        return
    if schema is False:
        raise SchemaError("%s: no value allowed" % where)
    unknown = set(schema) - SUPPORTED_KEYWORDS
    assert not unknown, "%s: the validator does not know %s; extend it" % (where, unknown)
    if "$ref" in schema:
        validate(value, resolve(doc, schema["$ref"]), doc, where)
    for sub in schema.get("allOf", ()):
        validate(value, sub, doc, where)
    if "oneOf" in schema:
        hits = 0
        for sub in schema["oneOf"]:
            try:
                validate(value, sub, doc, where)
                hits += 1
            except SchemaError:
                pass
        if hits != 1:
            raise SchemaError("%s: matches %d of oneOf, not exactly 1" % (where, hits))
    if "anyOf" in schema:
        for sub in schema["anyOf"]:
            try:
                validate(value, sub, doc, where)
                break
            except SchemaError:
                pass
        else:
            raise SchemaError("%s: matches none of anyOf" % where)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            raise SchemaError("%s: %r is not %s" % (where, value if len(repr(value)) < 80 else type(value), types))
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError("%s: %r not in %r" % (where, value, schema["enum"]))
    if "const" in schema and value != schema["const"]:
        raise SchemaError("%s: %r != %r" % (where, value, schema["const"]))
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError("%s: %r < minimum" % (where, value))
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError("%s: %r > maximum" % (where, value))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise SchemaError("%s: shorter than minLength" % where)
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaError("%s: longer than maxLength" % where)
    if isinstance(value, dict):
        for k in schema.get("required", ()):
            if k not in value:
                raise SchemaError("%s: required %r missing (has %s)" % (where, k, sorted(value)))
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                validate(v, props[k], doc, "%s.%s" % (where, k))
            elif "additionalProperties" in schema:
                validate(v, schema["additionalProperties"], doc, "%s.%s" % (where, k))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaError("%s: fewer than minItems" % where)
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaError("%s: more than maxItems" % where)
        if "items" in schema:
            for i, v in enumerate(value):
                validate(v, schema["items"], doc, "%s[%d]" % (where, i))


def test_validator_itself():
    doc = {"components": {"schemas": {"N": {"type": "object", "required": ["a"],
                                            "properties": {"a": {"type": "integer"}}}}}}
    ref = {"$ref": "#/components/schemas/N"}
    validate({"a": 1}, ref, doc)
    for bad in ({}, {"a": "1"}, {"a": True}, [1]):
        with pytest.raises(SchemaError):
            validate(bad, ref, doc)
    validate(None, {"oneOf": [ref, {"type": "null"}]}, doc)
    with pytest.raises(SchemaError):
        validate({"a": 1, "b": 2}, {"allOf": [ref], "additionalProperties": False}, doc)
    validate([1, 2], {"type": "array", "items": {"type": "integer", "enum": [1, 2]}}, doc)
    with pytest.raises(SchemaError):
        validate([3], {"type": "array", "items": {"enum": [1, 2]}}, doc)
    validate(None, {"type": ["object", "null"]}, doc)


# ----------------------------------------------------------------------------- the document

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from helpers import Daemon
    d = Daemon(tmp_path_factory.mktemp("openapi") / "root").start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def doc(served):
    st, hdrs, data = served.request("GET", "/api/openapi.json")
    assert st == 200
    assert hdrs["content-type"].startswith("application/json")
    return json.loads(data)


def operations(doc):
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method], item


@pytest.mark.e2e
def test_is_openapi_3_1(doc):
    assert doc["openapi"] == "3.1.0"
    assert isinstance(doc["info"]["title"], str) and doc["info"]["title"]
    assert isinstance(doc["info"]["version"], str) and doc["info"]["version"]
    assert doc["paths"]


@pytest.mark.e2e
def test_operation_ids_unique_and_every_operation_has_responses(doc):
    ids = [op.get("operationId") for _, _, op, _ in operations(doc)]
    assert all(ids) and len(ids) == len(set(ids)), ids
    for path, method, op, _ in operations(doc):
        assert op.get("responses"), (path, method)
        assert "200" in op["responses"], (path, method)
        for code, resp in op["responses"].items():
            assert re.fullmatch(r"[1-5]\d\d|[1-5]XX|default", code), code
            assert isinstance(resp.get("description"), str), (path, method, code)


@pytest.mark.e2e
def test_every_ref_resolves(doc):
    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                resolve(doc, node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)


@pytest.mark.e2e
def test_path_parameters_match_templates(doc):
    for path, method, op, item in operations(doc):
        params = op.get("parameters", []) + item.get("parameters", [])
        in_path = {p["name"] for p in params if p["in"] == "path"}
        assert in_path == set(re.findall(r"\{(\w+)\}", path)), (path, method)
        for p in params:
            assert p["in"] in ("path", "query", "header", "cookie")
            if p["in"] == "path":
                assert p.get("required") is True, (path, p)
            assert "schema" in p, (path, p)


def _route_template(pattern):
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)


@pytest.mark.e2e
def test_every_route_kgd_answers_is_documented(doc):
    answered = {}
    for pattern, methods in rest.ROUTES:
        answered[_route_template(pattern)] = {m.lower() for m in methods}
    answered["/api/health"] = {"get"}  # served by kg/serve/http.py, next to /health
    documented = {path: {m for m in METHODS if m in item} for path, item in doc["paths"].items()}
    for path, methods in answered.items():
        assert path in documented, "route %s is not in the OpenAPI document" % path
        assert methods <= documented[path], (path, methods, documented[path])
    for path, methods in documented.items():
        assert path in answered, "documented path %s is not a route" % path
        assert methods <= answered[path], (path, methods, answered[path])


@pytest.mark.e2e
def test_contract_routes_documented(doc):
    """The table of contract section 6."""
    expected = {
        "/api/health": {"get"}, "/api/graph": {"get"}, "/api/sessions": {"post"},
        "/api/sessions/{sid}": {"get"}, "/api/nodes/{level}/{id}": {"get", "put", "delete"},
        "/api/edges/{level}": {"put", "delete"}, "/api/search": {"get"}, "/api/sync": {"get"},
        "/api/progress/{task_id}": {"get", "put"}, "/api/projects": {"get"}, "/api/openapi.json": {"get"},
    }
    for path, methods in expected.items():
        assert path in doc["paths"], path
        assert methods <= set(doc["paths"][path]), path


# ----------------------------------------------------------------------------- the walk

def _value_for(name, schema, ctx, doc):
    """A valid value for a parameter / property named `name` with `schema`."""
    if "$ref" in schema:
        schema = resolve(doc, schema["$ref"])
    if name in ctx:
        return ctx[name]
    if "enum" in schema:
        return schema["enum"][0]
    types = schema.get("type", "string")
    t = types[0] if isinstance(types, list) else types
    if t == "string":
        return "value-" + name
    if t == "integer":
        lo, hi = schema.get("minimum", 1), schema.get("maximum", 100)
        return max(lo, min(hi, 5))
    if t == "number":
        return 1.5
    if t == "boolean":
        return True
    if t == "array":
        item = schema.get("items", {"type": "string"})
        return [_value_for(name + "-item", item, {}, doc)]
    if t == "object":
        return _body_for(schema, ctx, doc) if schema.get("properties") else {"key": "value"}
    if t == "null":
        return None
    raise AssertionError("no value for %s %r" % (name, schema))


def _body_for(schema, ctx, doc):
    if "$ref" in schema:
        schema = resolve(doc, schema["$ref"])
    return {name: _value_for(name, sub, ctx, doc) for name, sub in schema.get("properties", {}).items()}


def _ctx(served, project):
    """Real ids: a session, a node, an edge between that node and a file, a stored task."""
    pp = str(project)
    st, _, data = served.request("POST", "/api/sessions", {"project_path": pp})
    assert st == 200
    sid = json.loads(data)["session_id"]
    node_id = "walk node/ü"
    assert served.request("PUT", "/api/nodes/user/" + quote(node_id, safe=""), {"gist": "walked"})[0] == 200
    assert served.request("PUT", "/api/edges/user", {"from": node_id, "to": "src/walk.py", "rel": "walks"})[0] == 200
    assert served.request("PUT", "/api/progress/walk-task", {"state": {"n": 1}})[0] == 200
    return {
        "sid": sid, "session_id": sid, "id": node_id, "level": "user", "task_id": "walk-task",
        "project_path": pp, "q": "documented walked", "from": node_id, "to": "src/walk.py", "rel": "walks",
        "gist": "a documented gist", "state": {"step": 1}, "limit": 5,
        "notes": ["a note"], "touches": ["src/walk.py"],
    }


def _order(item):
    path, method = item[0], item[1]
    rank = {"post": 0, "put": 1, "get": 2, "head": 2, "delete": 3}[method]
    return rank, path


def _build(path, method, op, item, ctx, doc):
    params = item.get("parameters", []) + op.get("parameters", [])
    url = path
    query = {}
    for p in params:
        if "$ref" in p:
            p = resolve(doc, p["$ref"])
        if p["in"] == "path":
            url = url.replace("{%s}" % p["name"], quote(str(_value_for(p["name"], p["schema"], ctx, doc)), safe=""))
        elif p["in"] == "query":
            if p.get("required") or p["name"] in ("project_path", "limit", "q"):
                v = _value_for(p["name"], p["schema"], ctx, doc)
                query[p["name"]] = v
    if query:
        url += "?" + urlencode(query)
    body = None
    rb = op.get("requestBody")
    if rb:
        schema = rb["content"]["application/json"]["schema"]
        body = _body_for(schema, ctx, doc)
        validate(body, schema, doc, "request body of %s %s" % (method, path))
    return url, body


@pytest.mark.e2e
@pytest.mark.parametrize("level", ["user", "project"])
def test_every_documented_operation_answers_as_documented(served, doc, project, level):
    ctx = _ctx(served, project)
    ctx["level"] = level
    ops = sorted(((p, m, o, i) for p, m, o, i in operations(doc)), key=_order)
    seen = []
    for path, method, op, item in ops:
        url, body = _build(path, method, op, item, ctx, doc)
        st, hdrs, data = served.request(method.upper(), url, body)
        where = "%s %s -> %d %s" % (method.upper(), url, st, data[:300])
        assert str(st) in op["responses"], "undocumented status: " + where
        assert st == 200, "a valid request failed: " + where
        resp = op["responses"]["200"]
        content = resp.get("content", {})
        if not content:  # POST /api/hooks: an empty 200 when there is nothing worth saying
            assert "empty body" in resp["description"] and data == b"", where
            seen.append((method, path))
            continue
        assert "application/json" in content, where
        assert hdrs["content-type"].startswith("application/json"), where
        obj = json.loads(data)
        try:
            validate(obj, content["application/json"]["schema"], doc)
        except SchemaError as exc:
            raise AssertionError("%s: response does not fit its schema: %s" % (where, exc))
        seen.append((method, path))
    assert len(seen) == len(ops) and len(seen) >= 15


@pytest.mark.e2e
def test_documented_error_statuses(served, doc, project):
    """Bad input on each operation gets a status documented for it, with the Error schema."""
    ctx = _ctx(served, project)
    checked = 0
    for path, method, op, item in operations(doc):
        params = [p for p in item.get("parameters", []) + op.get("parameters", [])]
        names = {p["name"] for p in params}
        tries = []
        url, body = _build(path, method, op, item, ctx, doc)
        if "level" in names and "{level}" in path:
            tries.append((url.replace("/user", "/nolevel", 1), body))
        if "{id}" in path and method in ("get", "delete"):
            tries.append((path.replace("{level}", "user").replace("{id}", "no-such-node"), None))
        if "{sid}" in path:
            tries.append((path.replace("{sid}", "no-such-session"), None))
        if any(p.get("required") and p["in"] == "query" for p in params):
            tries.append((path.split("?")[0].replace("{level}", "user"), body))  # required query missing
        if op.get("requestBody") and op["requestBody"]["content"]["application/json"]["schema"].get(
                "additionalProperties") is False:
            tries.append((url, {"not_a_field": 1}))
        elif op.get("requestBody"):
            tries.append((url, [{"not": "an object"}]))
        for turl, tbody in tries:
            served.close_conn()
            st, hdrs, data = served.request(method.upper(), turl, tbody)
            where = "%s %s -> %d %s" % (method.upper(), turl, st, data[:300])
            assert st != 200 and str(st) in op["responses"], "undocumented status: " + where
            schema = op["responses"][str(st)]["content"]["application/json"]["schema"]
            validate(json.loads(data), schema, doc, where)
            checked += 1
        if op.get("requestBody"):
            served.close_conn()
            st, _, data = served.request(method.upper(), url, b"plain text", {"Content-Type": "text/plain"})
            assert st == 415 and "415" in op["responses"], (method, path, st, data)
            checked += 1
    assert checked >= 15


@pytest.mark.e2e
def test_a_shared_projects_graph_and_listing_answer_as_documented(served, doc, tmp_path):
    """`sharing` with this clone's knowledge not yet committed (contract 9) and the projects'
    stale and uncommitted counts: what a shared project's views hold fits the schema too."""
    proj = tmp_path / "shared-proj"
    proj.mkdir()
    env = git_env(tmp_path)
    subprocess.run(["git", "init", "-q", str(proj)], env=env, check=True)
    pp = str(proj)
    assert served.request("PUT", "/api/nodes/project/first?project_path=" + quote(pp), {"gist": "shared"})[0] == 200
    assert served.request("POST", "/api/share", {"project_path": pp})[0] == 200
    for args in (["add", ".kg"], ["commit", "-qm", "kg"]):
        subprocess.run(["git", *args], cwd=pp, env=env, check=True, capture_output=True)
    assert served.request("PUT", "/api/nodes/project/second?project_path=" + quote(pp), {"gist": "not yet"})[0] == 200
    graph = projects = None
    for _ in range(100):  # the beat writes .kg/ once writes pause and learns what HEAD holds
        graph = json.loads(served.request("GET", "/api/graph?project_path=" + quote(pp))[2])
        listing = json.loads(served.request("GET", "/api/projects")[2])
        projects = [p for p in listing["projects"] if p["project_path"] == pp]
        if graph["project"]["sharing"].get("uncommitted", {}).get("nodes") and projects[0].get("uncommitted"):
            break
        time.sleep(0.1)
    assert graph["project"]["sharing"]["shared"] is True and graph["project"]["sharing"]["uncommitted"]["nodes"] == 1
    validate(graph, doc["paths"]["/api/graph"]["get"]["responses"]["200"]["content"]["application/json"]["schema"],
             doc)
    validate(listing, doc["paths"]["/api/projects"]["get"]["responses"]["200"]["content"]["application/json"]
             ["schema"], doc)
    assert projects[0]["shared"] is True and projects[0]["uncommitted"]["nodes"] == 1
