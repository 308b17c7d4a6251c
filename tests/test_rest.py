"""REST API end to end (contract sections 2 and 6): every route's success shape and every
error status, over a real kgd process.

409 note: the store raises Conflict when a delete names no level and the id (or edge) exists
in both the user and the project graph (kg/memory/store.py `_find_level`, `delete_edge`). Every REST
route that deletes carries the level in its path, so REST cannot reach that 409; the MCP tools,
whose `level` is optional, can, and `test_conflict_is_reachable_over_mcp_not_rest` pins both.
"""

import json
import os
import socket
from urllib.parse import quote, urlencode

import pytest

pytestmark = pytest.mark.e2e

# ----------------------------------------------------------------------------- helpers

WEIRD_IDS = [
    "plain-id",
    "with space",
    "a/b/c",  # slashes: %2F in the path
    "unicodé-ü-日本語",
    "mix of/everything ü?#&%+",
]


def enc(node_id):
    return quote(node_id, safe="")


def qs(**params):
    return urlencode({k: v for k, v in params.items() if v is not None})


def assert_error(resp, status):
    """An error answer: the status, JSON content type, body {"error": str}."""
    st, hdrs, data = resp
    assert st == status, (st, data[:300])
    assert hdrs.get("content-type", "").startswith("application/json"), hdrs
    body = json.loads(data)
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    assert set(body) == {"error"}, body
    return body["error"]


def ok(resp):
    st, hdrs, data = resp
    assert st == 200, (st, data[:500])
    assert hdrs.get("content-type", "").startswith("application/json"), hdrs
    assert int(hdrs["content-length"]) == len(data)
    return json.loads(data)


def is_node(obj, state="active"):
    assert set(obj) >= {"id", "gist", "notes", "touches", "state"}, obj
    assert isinstance(obj["id"], str) and isinstance(obj["gist"], str)
    assert isinstance(obj["notes"], list) and all(isinstance(n, str) for n in obj["notes"])
    assert isinstance(obj["touches"], list) and all(isinstance(t, str) for t in obj["touches"])
    assert obj["state"] in ("active", "archived", "orphaned")
    if state is not None:
        assert obj["state"] == state, obj
    assert not any(k.startswith("_") for k in obj), obj
    return True


def is_edge(obj):
    assert set(obj) >= {"from", "to", "rel", "notes"}, obj
    assert all(isinstance(obj[k], str) for k in ("from", "to", "rel"))
    assert isinstance(obj["notes"], list)
    return True


def raw_exchange(port, data, read_timeout=10):
    """Send raw bytes, read until the server closes or a whole response arrives."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                length = None
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v.strip())
                if length is not None and len(rest) >= length:
                    break
        return buf
    finally:
        s.close()


def parse_raw(buf):
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


@pytest.fixture(scope="module")
def _shared(tmp_path_factory):
    from helpers import Daemon
    d = Daemon(tmp_path_factory.mktemp("shared") / "root").start()
    yield d
    d.stop()


@pytest.fixture
def shared(_shared):
    """One daemon for the parametrized error tests (errors change nothing); each test starts on
    a fresh connection so that one test's refused body cannot leak into the next."""
    _shared.close_conn()
    yield _shared
    _shared.close_conn()


# ----------------------------------------------------------------------------- health, sessions

def test_health_both_paths(daemon):
    for path in ("/api/health", "/health"):
        h = ok(daemon.request("GET", path))
        assert h["status"] == "ok"
        assert isinstance(h["version"], str) and h["version"]
        assert isinstance(h["uptime_s"], (int, float)) and h["uptime_s"] >= 0
        assert isinstance(h["sessions"], int) and isinstance(h["graphs_loaded"], int)


def test_sessions_create_and_stats(daemon, proj, project):
    s = ok(daemon.request("POST", "/api/sessions", {"project_path": str(project / "src")}))
    assert set(s) >= {"session_id", "project_path"}
    assert isinstance(s["session_id"], str) and s["session_id"]
    assert s["project_path"] == proj  # the git root, not the subfolder

    bare = ok(daemon.request("POST", "/api/sessions", {}))
    assert bare["project_path"] is None
    no_body = ok(daemon.request("POST", "/api/sessions"))
    assert no_body["project_path"] is None and no_body["session_id"] != bare["session_id"]

    stats = ok(daemon.request("GET", "/api/sessions/" + enc(s["session_id"])))
    assert stats["id"] == s["session_id"]
    assert stats["project_path"] == s["project_path"]
    for k in ("started", "last_active", "sync_mark"):
        assert isinstance(stats[k], (int, float)), stats
    assert ok(daemon.request("GET", "/api/health"))["sessions"] >= 3


# ----------------------------------------------------------------------------- nodes

@pytest.mark.parametrize("node_id", WEIRD_IDS)
def test_node_put_get_delete_with_encoded_ids(daemon, node_id):
    path = "/api/nodes/user/" + enc(node_id)
    r = ok(daemon.request("PUT", path, {"gist": "the gist", "notes": ["n1", "n2"], "touches": ["src/a.py"]}))
    assert r["level"] == "user" and r["created"] is True
    assert is_node(r["node"]) and r["node"]["id"] == node_id
    assert r["node"]["notes"] == ["n1", "n2"] and r["node"]["touches"] == ["src/a.py"]

    got = ok(daemon.request("GET", path))
    assert is_node(got) and got["id"] == node_id and got["gist"] == "the gist"
    assert got["level"] == "user" and got["edges"] == []

    # merge: omitted fields stay, given lists replace
    r2 = ok(daemon.request("PUT", path, {"notes": ["only"]}))
    assert r2["created"] is False
    assert r2["node"]["gist"] == "the gist" and r2["node"]["notes"] == ["only"]
    assert r2["node"]["touches"] == ["src/a.py"]

    d = ok(daemon.request("DELETE", path))
    assert d == {"level": "user", "id": node_id, "edges_removed": 0}
    assert_error(daemon.request("GET", path), 404)


def test_path_segment_decoding(daemon):
    """The path is percent-decoded once: '+' stays '+', '%252F' is the three characters '%2F'."""
    ok(daemon.request("PUT", "/api/nodes/user/a+b", {"gist": "plus"}))
    assert ok(daemon.request("GET", "/api/nodes/user/" + enc("a+b")))["gist"] == "plus"
    assert_error(daemon.request("GET", "/api/nodes/user/a%20b"), 404)
    r = ok(daemon.request("PUT", "/api/nodes/user/x%252Fy", {"gist": "pct"}))
    assert r["node"]["id"] == "x%2Fy"
    assert_error(daemon.request("GET", "/api/nodes/user/x%2Fy"), 404)  # that is "x/y"


def test_project_node_via_project_path_and_session(daemon, proj):
    path = "/api/nodes/project/p1"
    r = ok(daemon.request("PUT", path, {"gist": "proj insight", "project_path": proj}))
    assert r["level"] == "project" and r["created"] is True
    got = ok(daemon.request("GET", path + "?" + qs(project_path=proj)))
    assert got["level"] == "project" and got["id"] == "p1"
    # project_path in the query works for PUT as well
    ok(daemon.request("PUT", path + "?" + qs(project_path=proj), {"gist": "updated"}))
    # via a session bound to the project
    sid = ok(daemon.request("POST", "/api/sessions", {"project_path": proj}))["session_id"]
    got = ok(daemon.request("GET", path + "?" + qs(session_id=sid)))
    assert got["gist"] == "updated"
    # the node is not in the user graph
    assert_error(daemon.request("GET", "/api/nodes/user/p1"), 404)
    d = ok(daemon.request("DELETE", path + "?" + qs(project_path=proj)))
    assert d == {"level": "project", "id": "p1", "edges_removed": 0}


def test_delete_node_counts_its_edges(daemon):
    ok(daemon.request("PUT", "/api/nodes/user/a", {"gist": "a"}))
    ok(daemon.request("PUT", "/api/nodes/user/b", {"gist": "b"}))
    ok(daemon.request("PUT", "/api/edges/user", {"from": "a", "to": "b", "rel": "r1"}))
    ok(daemon.request("PUT", "/api/edges/user", {"from": "a", "to": "src/x.py", "rel": "implemented-in"}))
    got = ok(daemon.request("GET", "/api/nodes/user/a"))
    assert sorted(e["rel"] for e in got["edges"]) == ["implemented-in", "r1"]
    assert all(is_edge(e) for e in got["edges"])
    d = ok(daemon.request("DELETE", "/api/nodes/user/a"))
    assert d["edges_removed"] == 2
    assert ok(daemon.request("GET", "/api/nodes/user/b"))["edges"] == []


def test_get_node_promotes_archived(make_daemon):
    d = make_daemon(args=["--max-tokens", "200"], env={"KG_GRACE_PERIOD_DAYS": "0"})
    for i in range(12):
        ok(d.request("PUT", "/api/nodes/user/n%02d" % i, {"gist": "x" * 120}))
    g = ok(d.request("GET", "/api/graph"))["user"]
    archived = [n["id"] for n in g["nodes"] if n["state"] == "archived"]
    assert archived, g
    got = ok(d.request("GET", "/api/nodes/user/" + archived[0]))
    assert got["state"] == "active"
    g = ok(d.request("GET", "/api/graph"))["user"]
    assert {n["id"]: n["state"] for n in g["nodes"]}[archived[0]] == "active"


# ----------------------------------------------------------------------------- edges

def test_edges_put_update_delete(daemon, proj):
    ok(daemon.request("PUT", "/api/nodes/user/" + enc("from node"), {"gist": "f"}))
    body = {"from": "from node", "to": "src/app.py", "rel": "implemented-in", "notes": ["why"]}
    r = ok(daemon.request("PUT", "/api/edges/user", body))
    assert r == {"level": "user", "created": True,
                 "edge": {"from": "from node", "to": "src/app.py", "rel": "implemented-in", "notes": ["why"]}}
    r = ok(daemon.request("PUT", "/api/edges/user", dict(body, notes=["new"])))
    assert r["created"] is False and r["edge"]["notes"] == ["new"]
    q = qs(**{"from": "from node", "to": "src/app.py", "rel": "implemented-in"})
    d = ok(daemon.request("DELETE", "/api/edges/user?" + q))
    assert d == {"level": "user", "edge": {"from": "from node", "to": "src/app.py", "rel": "implemented-in",
                                           "notes": ["new"]}}
    assert_error(daemon.request("DELETE", "/api/edges/user?" + q), 404)

    # project level
    ok(daemon.request("PUT", "/api/nodes/project/pa", {"gist": "pa", "project_path": proj}))
    r = ok(daemon.request("PUT", "/api/edges/project", {"from": "pa", "to": "README.md", "rel": "doc",
                                                         "project_path": proj}))
    assert r["level"] == "project"
    d = ok(daemon.request("DELETE", "/api/edges/project?" + qs(**{"from": "pa", "to": "README.md", "rel": "doc",
                                                                  "project_path": proj})))
    assert d["level"] == "project"


# ----------------------------------------------------------------------------- graph, search, projects

def test_graph_both_levels_all_states(daemon, proj):
    ok(daemon.request("PUT", "/api/nodes/user/u1", {"gist": "user one"}))
    ok(daemon.request("PUT", "/api/nodes/project/p1", {"gist": "proj one", "project_path": proj}))
    ok(daemon.request("PUT", "/api/edges/project", {"from": "p1", "to": "u1", "rel": "r", "project_path": proj}))
    g = ok(daemon.request("GET", "/api/graph?" + qs(project_path=proj)))
    assert g["project_path"] == proj
    for level, nid in (("user", "u1"), ("project", "p1")):
        graph = g[level]
        assert set(graph) >= {"nodes", "edges"}
        assert [n["id"] for n in graph["nodes"]] == [nid]
        assert is_node(graph["nodes"][0])
    assert g["project"]["edges"] == [{"from": "p1", "to": "u1", "rel": "r", "notes": []}]
    g2 = ok(daemon.request("GET", "/api/graph"))
    assert [n["id"] for n in g2["user"]["nodes"]] == ["u1"]
    assert g2["project"] is None


def test_search(daemon, proj):
    ok(daemon.request("PUT", "/api/nodes/user/alpha-thing", {"gist": "about zebras"}))
    ok(daemon.request("PUT", "/api/nodes/project/beta", {"gist": "zebras in the project", "project_path": proj}))
    ok(daemon.request("PUT", "/api/nodes/user/gamma", {"gist": "unrelated"}))
    r = ok(daemon.request("GET", "/api/search?" + qs(q="zebras")))
    ids = [x["id"] for x in r["results"]]
    assert set(ids) == {"alpha-thing", "beta"}
    for x in r["results"]:
        assert is_node(x) and x["level"] in ("user", "project") and isinstance(x["score"], (int, float))
    r = ok(daemon.request("GET", "/api/search?" + qs(q="zebras", project_path=proj, limit=1)))
    assert len(r["results"]) == 1
    r = ok(daemon.request("GET", "/api/search?" + qs(q="alpha-thing")))
    assert r["results"][0]["id"] == "alpha-thing"
    r = ok(daemon.request("GET", "/api/search?" + qs(q="nothingmatches")))
    assert r == {"results": []}


def test_projects(daemon, proj, other_project):
    assert ok(daemon.request("GET", "/api/projects")) == {"projects": []}
    ok(daemon.request("PUT", "/api/nodes/project/a", {"gist": "a", "project_path": proj}))
    ok(daemon.request("PUT", "/api/nodes/project/b", {"gist": "b", "project_path": proj}))
    ok(daemon.request("PUT", "/api/edges/project", {"from": "a", "to": "b", "rel": "r", "project_path": proj}))
    ok(daemon.request("PUT", "/api/nodes/project/c", {"gist": "c", "project_path": other_project}))
    ps = ok(daemon.request("GET", "/api/projects"))["projects"]
    by_path = {p["project_path"]: p for p in ps}
    assert set(by_path) == {proj, other_project}
    mine = by_path[proj]
    assert mine["slug"] == "myproj" and mine["nodes"] == 2 and mine["edges"] == 1
    assert by_path[other_project]["nodes"] == 1


# ----------------------------------------------------------------------------- sync, progress

def test_sync_sees_other_writers(daemon, proj):
    sid = ok(daemon.request("POST", "/api/sessions", {"project_path": proj}))["session_id"]
    other = ok(daemon.request("POST", "/api/sessions", {"project_path": proj}))["session_id"]
    empty = ok(daemon.request("GET", "/api/sync?" + qs(session_id=sid)))
    assert empty["session_id"] == sid
    for k in ("nodes", "edges", "deleted_nodes", "deleted_edges"):
        assert empty[k] == []
    ok(daemon.request("PUT", "/api/nodes/user/x", {"gist": "x", "session_id": other}))
    ok(daemon.request("PUT", "/api/nodes/project/y", {"gist": "y", "session_id": other}))
    ok(daemon.request("PUT", "/api/nodes/user/mine", {"gist": "mine", "session_id": sid}))  # own: left out
    r = ok(daemon.request("GET", "/api/sync?" + qs(session_id=sid)))
    assert sorted((n["level"], n["id"]) for n in r["nodes"]) == [("project", "y"), ("user", "x")]
    ok(daemon.request("DELETE", "/api/nodes/user/x?" + qs(session_id=other)))
    r = ok(daemon.request("GET", "/api/sync?" + qs(session_id=sid)))
    assert r["nodes"] == [] and r["deleted_nodes"] == [{"level": "user", "id": "x"}]


def test_progress_get_put(daemon, proj):
    r = ok(daemon.request("GET", "/api/progress/task-1"))
    assert r == {"task_id": "task-1", "level": "user", "state": None}
    r = ok(daemon.request("PUT", "/api/progress/task-1", {"state": {"step": 3, "done": ["a"]}}))
    assert r == {"task_id": "task-1", "level": "user", "state": {"step": 3, "done": ["a"]}}
    assert ok(daemon.request("GET", "/api/progress/task-1"))["state"] == {"step": 3, "done": ["a"]}
    # replacing, not merging
    ok(daemon.request("PUT", "/api/progress/task-1", {"state": {"step": 4}}))
    assert ok(daemon.request("GET", "/api/progress/task-1?level=user"))["state"] == {"step": 4}
    # project level, by query and by body
    r = ok(daemon.request("PUT", "/api/progress/" + enc("task 2/ü") + "?" + qs(level="project", project_path=proj),
                          {"state": {"p": True}}))
    assert r == {"task_id": "task 2/ü", "level": "project", "state": {"p": True}}
    r = ok(daemon.request("GET", "/api/progress/" + enc("task 2/ü") + "?" + qs(level="project", project_path=proj)))
    assert r["state"] == {"p": True}
    assert ok(daemon.request("GET", "/api/progress/" + enc("task 2/ü")))["state"] is None  # user level: nothing
    r = ok(daemon.request("PUT", "/api/progress/t3", {"state": {"b": 1}, "level": "project", "project_path": proj}))
    assert r["level"] == "project"
    # null clears
    ok(daemon.request("PUT", "/api/progress/task-1", {"state": None}))
    assert ok(daemon.request("GET", "/api/progress/task-1"))["state"] is None


# ----------------------------------------------------------------------------- REST == MCP

def test_writes_answer_the_tools_structured_content(daemon, proj):
    sid = daemon.call_tool("kg_read", {"cwd": proj})["session_id"]
    notes, touches = ["n"], ["src/a.py"]

    def same_but_id(a, b, rid, mid):
        return json.loads(json.dumps(a).replace(rid, "ID")) == json.loads(json.dumps(b).replace(mid, "ID"))

    for level in ("user", "project"):
        extra = {"project_path": proj} if level == "project" else {}
        rest = ok(daemon.request("PUT", "/api/nodes/%s/rest-%s" % (level, level),
                                 dict({"gist": "g", "notes": notes, "touches": touches}, **extra)))
        mcp = daemon.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": "mcp-" + level,
                                               "gist": "g", "notes": notes, "touches": touches})
        assert set(rest) == set(mcp) == {"level", "created", "node"}
        assert same_but_id(rest, mcp, "rest-" + level, "mcp-" + level), (rest, mcp)
        # update (created false)
        rest = ok(daemon.request("PUT", "/api/nodes/%s/rest-%s" % (level, level), dict({"gist": "g2"}, **extra)))
        mcp = daemon.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": "mcp-" + level, "gist": "g2"})
        assert same_but_id(rest, mcp, "rest-" + level, "mcp-" + level), (rest, mcp)

        rest = ok(daemon.request("PUT", "/api/edges/" + level,
                                 dict({"from": "rest-" + level, "to": "src/z.py", "rel": "r", "notes": notes},
                                      **extra)))
        mcp = daemon.call_tool("kg_put_edge", {"session_id": sid, "level": level, "from": "mcp-" + level,
                                               "to": "src/z.py", "rel": "r", "notes": notes})
        assert same_but_id(rest, mcp, "rest-" + level, "mcp-" + level), (rest, mcp)

        q = qs(**dict({"from": "rest-" + level, "to": "src/z.py", "rel": "r"}, **extra))
        rest = ok(daemon.request("DELETE", "/api/edges/%s?%s" % (level, q)))
        mcp = daemon.call_tool("kg_delete_edge", {"session_id": sid, "level": level, "from": "mcp-" + level,
                                                  "to": "src/z.py", "rel": "r"})
        assert same_but_id(rest, mcp, "rest-" + level, "mcp-" + level), (rest, mcp)

        rest = ok(daemon.request("DELETE", "/api/nodes/%s/rest-%s?%s" % (level, level, qs(**extra))))
        mcp = daemon.call_tool("kg_delete_node", {"session_id": sid, "level": level, "id": "mcp-" + level})
        assert same_but_id(rest, mcp, "rest-" + level, "mcp-" + level), (rest, mcp)

    rest = ok(daemon.request("PUT", "/api/progress/rest-t", {"state": {"a": 1}}))
    mcp = daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "mcp-t", "state": {"a": 1}})
    assert same_but_id(rest, mcp, "rest-t", "mcp-t")
    rest = ok(daemon.request("GET", "/api/progress/rest-t"))
    mcp = daemon.call_tool("kg_progress", {"session_id": sid, "task_id": "mcp-t"})
    assert same_but_id(rest, mcp, "rest-t", "mcp-t")

    ok(daemon.request("PUT", "/api/nodes/user/searchme", {"gist": "findable words"}))
    rest = ok(daemon.request("GET", "/api/search?" + qs(q="findable")))
    mcp = daemon.call_tool("kg_search", {"query": "findable"})
    assert rest == mcp


def test_rest_write_visible_to_mcp_kg_sync(daemon, proj):
    sid = daemon.call_tool("kg_read", {"cwd": proj})["session_id"]
    ok(daemon.request("PUT", "/api/nodes/user/from-rest", {"gist": "written over REST"}))
    ok(daemon.request("PUT", "/api/nodes/project/from-rest-p", {"gist": "project, over REST", "project_path": proj}))
    ok(daemon.request("PUT", "/api/edges/project", {"from": "from-rest-p", "to": "src/x.py", "rel": "in",
                                                   "project_path": proj}))
    r = daemon.call_tool("kg_sync", {"session_id": sid})
    assert sorted((n["level"], n["id"]) for n in r["nodes"]) == [("project", "from-rest-p"), ("user", "from-rest")]
    assert [(e["level"], e["from"], e["to"]) for e in r["edges"]] == [("project", "from-rest-p", "src/x.py")]
    ok(daemon.request("DELETE", "/api/nodes/user/from-rest"))
    r = daemon.call_tool("kg_sync", {"session_id": sid})
    assert r["deleted_nodes"] == [{"level": "user", "id": "from-rest"}]
    # and the other way: an MCP write is in GET /api/sync of another session
    other = ok(daemon.request("POST", "/api/sessions", {"project_path": proj}))["session_id"]
    daemon.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "from-mcp", "gist": "g"})
    r = ok(daemon.request("GET", "/api/sync?" + qs(session_id=other)))
    assert [(n["level"], n["id"]) for n in r["nodes"]] == [("project", "from-mcp")]


# ----------------------------------------------------------------------------- 400

@pytest.mark.parametrize("method,path,body", [
    ("GET", "/api/nodes/global/x", None),
    ("PUT", "/api/nodes/global/x", {"gist": "g"}),
    ("DELETE", "/api/nodes/USER/x", None),
    ("PUT", "/api/edges/bogus", {"from": "a", "to": "b.py", "rel": "r"}),
    ("DELETE", "/api/edges/bogus?from=a&to=b.py&rel=r", None),
    ("GET", "/api/progress/t?level=bogus", None),
    ("PUT", "/api/progress/t?level=bogus", {"state": {}}),
    ("PUT", "/api/progress/t", {"state": {}, "level": "bogus"}),
])
def test_400_bad_level(shared, method, path, body):
    assert "level" in assert_error(shared.request(method, path, body), 400)


# the routes that take a JSON body
JSON_BODY_ROUTES = [
    ("PUT", "/api/nodes/user/x"),
    ("PUT", "/api/edges/user"),
    ("POST", "/api/sessions"),
    ("PUT", "/api/progress/t"),
]


@pytest.mark.parametrize("raw", [b"{not json", b'{"gist": "x",}', b"\xff\xfe{}", b"[1, 2]", b'"just a string"',
                                 b"null", b"42"])
@pytest.mark.parametrize("method,path", JSON_BODY_ROUTES)
def test_400_bad_json(shared, method, path, raw):
    assert_error(shared.request(method, path, raw, {"Content-Type": "application/json"}), 400)


@pytest.mark.parametrize("method,path,body", [
    ("PUT", "/api/nodes/user/new-node", {"notes": ["no gist"]}),
    ("PUT", "/api/nodes/user/new-node", None),  # no body at all: still no gist
    ("PUT", "/api/edges/user", {"to": "b.py", "rel": "r"}),
    ("PUT", "/api/edges/user", {"from": "a", "rel": "r"}),
    ("PUT", "/api/edges/user", {"from": "a", "to": "b.py"}),
    ("DELETE", "/api/edges/user?to=b.py&rel=r", None),
    ("DELETE", "/api/edges/user?from=a&rel=r", None),
    ("DELETE", "/api/edges/user?from=a&to=b.py", None),
    ("DELETE", "/api/edges/user?from=&to=b.py&rel=r", None),
    ("GET", "/api/search", None),
    ("GET", "/api/search?q=", None),
    ("GET", "/api/sync", None),
    ("PUT", "/api/progress/t", {}),
    # project level with neither a session nor a project_path
    ("PUT", "/api/nodes/project/x", {"gist": "g"}),
    ("GET", "/api/nodes/project/x", None),
    ("PUT", "/api/edges/project", {"from": "a", "to": "b.py", "rel": "r"}),
    ("GET", "/api/progress/t?level=project", None),
])
def test_400_missing_fields(shared, method, path, body):
    assert_error(shared.request(method, path, body), 400)


@pytest.mark.parametrize("method,path,body", [
    ("PUT", "/api/nodes/user/x", {"gist": 5}),
    ("PUT", "/api/nodes/user/x", {"gist": ["a"]}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "notes": [1, 2]}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "notes": {"a": "b"}}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "touches": [None]}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "session_id": 7}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "project_path": ["/tmp"]}),
    ("PUT", "/api/nodes/user/x", {"gist": ""}),
    ("PUT", "/api/nodes/user/x", {"gist": "bad \x00 char"}),
    ("PUT", "/api/nodes/user/x", {"gist": "g" * 100000}),
    ("PUT", "/api/edges/user", {"from": 1, "to": "b.py", "rel": "r"}),
    ("PUT", "/api/edges/user", {"from": "a.py", "to": "b.py", "rel": True}),
    ("PUT", "/api/edges/user", {"from": "a.py", "to": "b.py", "rel": "r", "notes": [3]}),
    ("PUT", "/api/progress/t", {"state": "a string"}),
    ("PUT", "/api/progress/t", {"state": [1]}),
    ("PUT", "/api/progress/t", {"state": 3}),
    ("POST", "/api/sessions", {"project_path": 12}),
    ("POST", "/api/sessions", {"project_path": "relative/path"}),
    ("POST", "/api/sessions", {"project_path": "/no/such/dir/for/kgd/tests"}),
    ("GET", "/api/search?q=x&limit=abc", None),
    ("GET", "/api/search?q=x&limit=0", None),
    ("GET", "/api/search?q=x&limit=100000", None),
    ("GET", "/api/graph?project_path=relative", None),
    ("GET", "/api/nodes/user/" + "x" * 300, None),
])
def test_400_wrong_types_and_values(shared, method, path, body):
    assert_error(shared.request(method, path, body), 400)


def test_400_notes_as_a_bare_string(daemon):
    """OpenAPI (and the MCP inputSchema) say notes / touches are arrays of strings."""
    assert_error(daemon.request("PUT", "/api/nodes/user/x", {"gist": "g", "notes": "a string"}), 400)
    assert_error(daemon.request("PUT", "/api/nodes/user/x", {"gist": "g", "touches": "src/a.py"}), 400)


@pytest.mark.parametrize("method,path,body", [
    ("PUT", "/api/nodes/user/x", {"gist": "g", "colour": "red"}),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "level": "user"}),
    ("PUT", "/api/edges/user", {"from": "a.py", "to": "b.py", "rel": "r", "weight": 2}),
    ("POST", "/api/sessions", {"cwd": "/tmp"}),
    ("PUT", "/api/progress/t", {"state": {}, "extra": 1}),
])
def test_400_unknown_fields(shared, method, path, body):
    msg = assert_error(shared.request(method, path, body), 400)
    assert "unknown" in msg.lower()


def test_400_bad_percent_encoding(daemon):
    assert_error(daemon.request("GET", "/api/nodes/user/%FF%FE"), 400)


def test_failed_write_changes_nothing(daemon):
    ok(daemon.request("PUT", "/api/nodes/user/keep", {"gist": "kept", "notes": ["n"]}))
    assert_error(daemon.request("PUT", "/api/nodes/user/keep", {"gist": "g", "bogus": 1}), 400)
    assert_error(daemon.request("PUT", "/api/nodes/user/keep", {"notes": [1]}), 400)
    got = ok(daemon.request("GET", "/api/nodes/user/keep"))
    assert got["gist"] == "kept" and got["notes"] == ["n"]


# ----------------------------------------------------------------------------- 401

TOKEN = "s3cret-T"


@pytest.fixture(scope="module")
def _token_daemon(tmp_path_factory):
    from helpers import Daemon
    d = Daemon(tmp_path_factory.mktemp("token") / "root", ["--token", TOKEN]).start()
    yield d
    d.stop()


@pytest.fixture
def token_daemon(_token_daemon):
    _token_daemon.close_conn()
    yield _token_daemon
    _token_daemon.close_conn()


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/api/health", None),
    ("GET", "/api/graph", None),
    ("POST", "/api/sessions", {}),
    ("GET", "/api/nodes/user/x", None),
    ("PUT", "/api/nodes/user/x", {"gist": "g"}),
    ("DELETE", "/api/nodes/user/x", None),
    ("PUT", "/api/edges/user", {"from": "a.py", "to": "b.py", "rel": "r"}),
    ("GET", "/api/search?q=x", None),
    ("GET", "/api/projects", None),
    ("GET", "/api/progress/t", None),
    ("GET", "/api/openapi.json", None),
    ("GET", "/api/no-such-route", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
])
def test_401_without_or_with_wrong_token(token_daemon, method, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + TOKEN},
                    {"Authorization": "Bearer " + TOKEN + "x"}):
        token_daemon.close_conn()  # one connection per try (see test_early_refusal_keeps_keep_alive_in_step)
        resp = token_daemon.request(method, path, body, headers)
        assert_error(resp, 401)
        assert resp[1].get("www-authenticate", "").lower().startswith("bearer"), resp[1]


def test_401_right_token_passes(token_daemon):
    auth = {"Authorization": "Bearer " + TOKEN}
    ok(token_daemon.request("GET", "/api/health", None, auth))
    ok(token_daemon.request("PUT", "/api/nodes/user/x", {"gist": "g"}, auth))
    assert ok(token_daemon.request("GET", "/api/nodes/user/x", None, auth))["gist"] == "g"
    ok(token_daemon.request("GET", "/api/openapi.json", None, auth))
    # the scheme name is case-insensitive (RFC 7235)
    ok(token_daemon.request("GET", "/api/health", None, {"Authorization": "bearer " + TOKEN}))
    # with the token, the usual errors come back instead of 401
    assert_error(token_daemon.request("GET", "/api/nodes/user/missing", None, auth), 404)
    st, hdrs, _ = token_daemon.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, auth)
    assert st == 200


def test_401_not_needed_for_health_and_ui(token_daemon):
    h = ok(token_daemon.request("GET", "/health"))
    assert h["status"] == "ok"
    st, hdrs, data = token_daemon.request("GET", "/ui")
    assert st == 200, data[:300]
    assert hdrs["content-type"].startswith("text/html")


# ----------------------------------------------------------------------------- 403 (section 2 guard)

def test_403_foreign_host_and_origin(daemon):
    assert_error(daemon.request("GET", "/api/health", None, {"Host": "evil.example:%d" % daemon.port}), 403)
    assert_error(daemon.request("GET", "/api/graph", None, {"Origin": "https://evil.example"}), 403)
    assert_error(daemon.request("PUT", "/api/nodes/user/x", {"gist": "g"}, {"Origin": "null"}), 403)
    daemon.close_conn()  # see test_early_refusal_keeps_keep_alive_in_step
    assert_error(daemon.request("GET", "/api/nodes/user/x"), 404)  # the refused PUT wrote nothing
    ok(daemon.request("GET", "/api/health", None, {"Host": "localhost:%d" % daemon.port}))
    ok(daemon.request("GET", "/api/health", None, {"Origin": "http://localhost:%d" % daemon.port}))
    ok(daemon.request("GET", "/api/health", None, {"Origin": "http://127.0.0.1:5173"}))


# ----------------------------------------------------------------------------- 404

@pytest.mark.parametrize("method,path,body", [
    ("GET", "/api/nodes/user/nope", None),
    ("DELETE", "/api/nodes/user/nope", None),
    ("GET", "/api/nodes/user/" + enc("no/such id"), None),
    ("GET", "/api/sessions/not-a-session", None),
    ("GET", "/api/sync?session_id=not-a-session", None),
    ("PUT", "/api/nodes/user/x", {"gist": "g", "session_id": "not-a-session"}),
    ("GET", "/api/nodes/user/x?session_id=not-a-session", None),
    ("GET", "/api/search?q=x&session_id=not-a-session", None),
    ("DELETE", "/api/edges/user?from=a&to=b.py&rel=r", None),
    # an edge end that is neither a node nor a path
    ("PUT", "/api/edges/user", {"from": "no-such-node", "to": "other-missing", "rel": "r"}),
    ("GET", "/api/no-such-route", None),
    ("GET", "/api/nodes", None),
    ("GET", "/api/nodes/user", None),
    ("GET", "/api/nodes/user/a/b", None),  # an unencoded slash is another path
    ("GET", "/api", None),
    ("GET", "/no-such-path", None),
    ("GET", "/.well-known/oauth-authorization-server", None),
    ("GET", "/.well-known/oauth-protected-resource", None),
])
def test_404(shared, method, path, body):
    assert_error(shared.request(method, path, body), 404)


# ----------------------------------------------------------------------------- 405

@pytest.mark.parametrize("method,path,allowed", [
    ("POST", "/api/health", {"GET"}),
    ("POST", "/api/graph", {"GET"}),
    ("DELETE", "/api/graph", {"GET"}),
    ("GET", "/api/sessions", {"POST"}),
    ("DELETE", "/api/sessions/abc", {"GET"}),
    ("POST", "/api/nodes/user/x", {"GET", "PUT", "DELETE"}),
    ("PATCH", "/api/nodes/user/x", {"GET", "PUT", "DELETE"}),
    ("GET", "/api/edges/user", {"PUT", "DELETE"}),
    ("POST", "/api/search", {"GET"}),
    ("PUT", "/api/sync", {"GET"}),
    ("DELETE", "/api/progress/t", {"GET", "PUT"}),
    ("POST", "/api/projects", {"GET"}),
    ("PUT", "/api/openapi.json", {"GET"}),
    ("GET", "/mcp", {"POST"}),
    ("GET", "/", {"POST"}),
    ("DELETE", "/mcp", {"POST"}),
    ("DELETE", "/", {"POST"}),
])
def test_405_with_allow(shared, method, path, allowed):
    body = {"gist": "g"} if method in ("PUT", "POST", "PATCH") else None
    resp = shared.request(method, path, body)
    assert_error(resp, 405)
    allow = {m.strip().upper() for m in resp[1].get("allow", "").split(",") if m.strip()}
    assert allowed <= allow, resp[1]
    assert method not in allow


# ----------------------------------------------------------------------------- 409

def test_conflict_is_reachable_over_mcp_not_rest(daemon, proj):
    """The same id in both graphs: a delete without level is 409-worthy. REST always names
    the level in its path, so REST deletes exactly that level's node and never answers 409."""
    sid = daemon.call_tool("kg_read", {"cwd": proj})["session_id"]
    for level in ("user", "project"):
        daemon.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": "twin", "gist": level})
        daemon.call_tool("kg_put_edge", {"session_id": sid, "level": level, "from": "twin", "to": "a.py",
                                         "rel": "r"})
    # MCP without level: the Conflict, as a tool error
    for tool, args in (("kg_delete_node", {"id": "twin"}),
                       ("kg_delete_edge", {"from": "twin", "to": "a.py", "rel": "r"})):
        res = daemon.call(tool, dict(args, session_id=sid))
        assert res.get("isError") is True and "structuredContent" not in res
        assert "level" in res["content"][0]["text"]
    # REST: level in the path, so no ambiguity
    d = ok(daemon.request("DELETE", "/api/edges/user?" + qs(**{"from": "twin", "to": "a.py", "rel": "r"})))
    assert d["level"] == "user"
    d = ok(daemon.request("DELETE", "/api/nodes/user/twin?" + qs(project_path=proj)))
    assert d["level"] == "user"
    assert ok(daemon.request("GET", "/api/nodes/project/twin?" + qs(project_path=proj)))["gist"] == "project"


# ----------------------------------------------------------------------------- 413

@pytest.mark.parametrize("path", ["/api/nodes/user/big", "/api/edges/user", "/api/sessions", "/mcp"])
def test_413_over_4_mib_without_reading(daemon, path):
    method = "POST" if path in ("/api/sessions", "/mcp") else "PUT"
    n = 4 * 1024 * 1024 + 1
    head = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (method, path, daemon.port, n)).encode()
    # headers plus only a little of the body: the answer must come without the rest
    st, hdrs, body = parse_raw(raw_exchange(daemon.port, head + b'{"gist": "'))
    assert st == 413
    assert json.loads(body)["error"]
    # the daemon is fine afterwards
    ok(daemon.request("GET", "/api/health"))


def test_exactly_4_mib_is_not_413(daemon):
    # a body of exactly 4 MiB is read (and then refused for its content, not its size)
    n = 4 * 1024 * 1024
    body = b'{"gist": "' + b"x" * (n - 12) + b'"}'
    assert len(body) == n
    st, hdrs, data = daemon.request("PUT", "/api/nodes/user/big", body)
    assert st == 400, data[:200]  # gist over its length limit


def test_413_chunked(daemon):
    head = ("PUT /api/nodes/user/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n" % daemon.port).encode()
    chunk = b"%x\r\n" % (4 * 1024 * 1024 + 1)
    st, hdrs, body = parse_raw(raw_exchange(daemon.port, head + chunk))
    assert st == 413
    assert json.loads(body)["error"]


# ----------------------------------------------------------------------------- 415

@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "text/html; charset=utf-8"])
@pytest.mark.parametrize("method,path", JSON_BODY_ROUTES)
def test_415_non_json_body(shared, ctype, method, path):
    resp = shared.request(method, path, b'{"gist": "g"}', {"Content-Type": ctype})
    assert_error(resp, 415)


def test_json_content_type_variants_accepted(daemon):
    for i, ctype in enumerate(("application/json", "application/json; charset=utf-8", "Application/JSON",
                               "application/merge-patch+json")):
        ok(daemon.request("PUT", "/api/nodes/user/ct%d" % i, b'{"gist": "g"}', {"Content-Type": ctype}))


# ----------------------------------------------------------------------------- HTTP plumbing

def test_keep_alive_and_content_length_on_errors(daemon):
    """Many requests, successes and errors, over one connection; each carries Content-Length."""
    daemon.close_conn()
    for i in range(20):
        st, hdrs, data = daemon.request("GET", "/api/nodes/user/missing-%d" % i)
        assert st == 404 and int(hdrs["content-length"]) == len(data)
        st, hdrs, data = daemon.request("GET", "/api/health")
        assert st == 200 and int(hdrs["content-length"]) == len(data)
    assert daemon._conn is not None  # never closed by the daemon


@pytest.mark.parametrize("method,path,headers,status", [
    ("POST", "/api/sessions", {"Origin": "https://evil.example"}, 403),
    ("PUT", "/api/nodes/user/x", {"Origin": "https://evil.example"}, 403),
    ("POST", "/mcp", {"Origin": "https://evil.example"}, 403),
    ("POST", "/api/health", {}, 405),
    ("POST", "/ui", {}, 405),
    ("POST", "/no-such-path", {}, 404),
    ("POST", "/.well-known/oauth-authorization-server", {}, 404),
])
def test_early_refusal_keeps_keep_alive_in_step(daemon, method, path, headers, status):
    """A request refused before its body is read (guard, 404, 405) must not leave that body on a
    keep-alive connection to be parsed as the next request: read it, or close the connection."""
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    assert_error(daemon.request(method, path, body, headers), status)
    h = daemon.request("GET", "/api/health")
    assert h[0] == 200, h


def test_early_refusal_keeps_keep_alive_in_step_token(token_daemon):
    token_daemon.close_conn()
    assert_error(token_daemon.request("PUT", "/api/nodes/user/x", {"gist": "g"}), 401)
    h = token_daemon.request("GET", "/health")
    assert h[0] == 200, h


def test_head_health(daemon):
    st, hdrs, data = daemon.request("HEAD", "/api/health")
    assert st == 200 and data == b""


def test_reading_a_project_without_a_graph_creates_nothing(daemon, tmp_path):
    """GET /api/graph and /ws for a project that has no graph yet answer an empty one and write
    no file: only a write (or a session) creates a project graph."""
    fresh = tmp_path / "untouched"
    (fresh / ".git").mkdir(parents=True)
    status, g = daemon.json("GET", "/api/graph?project_path=" + quote(str(fresh)))
    assert status == 200
    assert g["project_path"] == str(fresh)
    assert g["project"]["nodes"] == [] and g["project"]["edges"] == []
    assert not os.path.exists(os.path.join(daemon.root, "projects", "untouched"))
