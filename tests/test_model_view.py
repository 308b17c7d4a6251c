"""What the model sees (a full read once reached Claude Code as 500 KB of JSON): Claude Code hands
the model JSON.stringify(structuredContent) when a result carries it, else the text. For every tool,
in both modes, that view stays within the contract's bounds (40,000 characters for kg_read and
kg_sync, 10,000 for kg_search) on a graph of 3,000 nodes still in their grace period, with notes;
structuredContent stays valid against the tool's outputSchema; the text of a full read names or
counts every active node. In process: Store in a temporary root + mcp.Server, called as JSON-RPC
dicts."""

import json
import re

import jsonschema
import pytest

from kg.api.mcp import Request, Server
from kg.memory.store import Settings, Store
from kg.travel import team

STATELESS = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}
USER_NODES, PROJECT_NODES = 600, 2400
BOUND = {"kg_search": 10000}


def stringify(obj):
    """JSON.stringify as a JavaScript client computes it: compact, non-ASCII kept."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def model_view(result):
    if "structuredContent" in result:
        return stringify(result["structuredContent"])
    return result["content"][0]["text"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model-view")
    proj = tmp / "proj"
    (proj / ".git").mkdir(parents=True)
    store = team.install(Store(str(tmp / "root"), Settings())).open()
    reader = store.start_session(str(proj))
    syncers = {(structured, stateless): store.start_session(str(proj))   # before the writes: each
               for structured in (False, True) for stateless in (False, True)}  # kg_sync sees them all
    writer = store.start_session(str(proj))
    for level, count, prefix in (("user", USER_NODES, "u"), ("project", PROJECT_NODES, "p")):
        for i in range(count):
            store.put_node(
                writer,
                level,
                "%s-insight-%04d-about-things" % (prefix, i),
                "%s gist %d: the cache key includes the tenant — café naïve ✓ %s" % (prefix, i, "w" * (i % 40)),
                ["note %d of %s: why it was decided and what broke before" % (k, i) + " détail" * 10 for k in range(3)],
                ["src/module_%d.py" % (i % 50)],
            )
    for i in range(1000):
        store.put_edge(writer, "project", "p-insight-%04d-about-things" % i,
                       "p-insight-%04d-about-things" % ((i * 7 + 1) % PROJECT_NODES), "depends-on", ["because %d" % i])
    for i in range(200):
        store.put_edge(writer, "user", "u-insight-%04d-about-things" % i, "src/file_%d.py" % i, "explains")
    yield store, reader, str(proj), syncers
    store.close()


def call(server, name, args, stateless):
    if stateless:
        params = {"name": name, "arguments": args, "_meta": dict(META)}
        return server.dispatch("tools/call", params, False, Request(STATELESS, "tools/call", name))
    return server.dispatch("tools/call", {"name": name, "arguments": args}, False, Request())


def tool_calls(reader, cwd):
    ids = ["p-insight-%04d-about-things" % i for i in range(0, 2400, 12)]       # 200 ids, the maximum
    return [
        ("kg_read", {"cwd": cwd}),
        ("kg_read", {"session_id": reader.id}),
        ("kg_read", {"session_id": reader.id, "ids": ids}),
        ("kg_read", {"session_id": reader.id, "id": "p-insight-0001-about-things"}),
        ("kg_search", {"query": "gist insight cache tenant", "session_id": reader.id, "limit": 200}),
        ("kg_search", {"query": "note decided", "limit": 200}),
        ("kg_put_node", {"session_id": reader.id, "level": "project", "id": "probe", "gist": "probe node",
                         "notes": ["x" * 5000]}),
        ("kg_put_edge", {"session_id": reader.id, "level": "project", "from": "probe", "to": "src/x.py",
                         "rel": "in"}),
        ("kg_progress", {"session_id": reader.id, "task_id": "t", "state": {"step": 3}}),
        ("kg_delete_edge", {"session_id": reader.id, "from": "probe", "to": "src/x.py", "rel": "in"}),
        ("kg_delete_node", {"session_id": reader.id, "id": "probe"}),
    ]


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured"])
@pytest.mark.parametrize("stateless", [False, True], ids=["handshake", "stateless"])
def test_what_the_model_sees_is_bounded(world, structured, stateless):
    store, reader, cwd, syncers = world
    server = Server(store, structured=structured)
    schemas = {t["name"]: t.get("outputSchema") for t in
               server.dispatch("tools/list", {}, False, Request())["tools"]}
    sync_seen = False
    for name, args in tool_calls(reader, cwd) + [("kg_sync", {"session_id": syncers[structured, stateless].id})]:
        r = call(server, name, args, stateless)
        assert r["isError"] is False, (name, r)
        assert len(r["content"]) == 1 and r["content"][0]["type"] == "text"
        assert len(r["content"][0]["text"]) <= BOUND.get(name, 40000), name
        view = model_view(r)
        assert len(view) <= BOUND.get(name, 40000), (name, len(view))
        if structured:
            jsonschema.validate(r["structuredContent"], schemas[name])
        else:
            assert "structuredContent" not in r and schemas[name] is None
        if name == "kg_read" and "ids" not in args and "id" not in args:
            assert re.match(r"Session: \S+", r["content"][0]["text"])
        if name == "kg_sync":
            sync_seen = True
            assert "cut to fit the context" in r["content"][0]["text"]
            if structured:
                assert r["structuredContent"]["truncated"]["nodes"] > 0
    assert sync_seen


def test_structured_results_say_what_they_left_out(world):
    store, reader, cwd, _ = world
    server = Server(store, structured=True)
    full = call(server, "kg_read", {"session_id": reader.id}, False)["structuredContent"]
    for level, count in (("user", USER_NODES), ("project", PROJECT_NODES)):
        cut = full["truncated"][level]
        assert len(full[level]["nodes"]) + cut.get("nodes", 0) == count
        assert len(full[level]["nodes"]) > 0
    assert full["truncated"]["project"]["edges"] >= 1000
    found = call(server, "kg_search", {"query": "gist", "limit": 200, "session_id": reader.id}, False)
    sc = found["structuredContent"]
    assert len(sc["results"]) + sc["truncated"].get("results", 0) == 200
    text = found["content"][0]["text"]
    assert "more not shown" in text or text.count("\n- ") == 200


def _named_or_counted(text, title, ids):
    """How many of ids the text of a full read names or counts in the section of one level."""
    section = text.split("## %s graph:" % title, 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"[\w-]+", section)) & set(ids)
    counted = sum(int(m) for m in re.findall(r"^(\d+) older active nodes not listed in full", section, re.M))
    listed = re.findall(r"\((\d+) of them named here", section)
    return named, counted - sum(int(x) for x in listed)


def test_full_read_text_names_or_counts_every_active_node(world):
    store, reader, cwd, _ = world
    server = Server(store)
    text = call(server, "kg_read", {"session_id": reader.id}, True)["content"][0]["text"]
    assert len(text) <= 40000
    graphs = store.read_graphs(reader)
    for title, level in (("User", "user"), ("Project", "project")):
        ids = [n["id"] for n in graphs[level]["nodes"]]
        assert len(ids) >= (USER_NODES if level == "user" else PROJECT_NODES)
        named, counted_only = _named_or_counted(text, title, ids)
        assert len(named) + counted_only == len(ids), (title, len(named), counted_only, len(ids))
        header = re.search(r"## %s graph: (\d+) active" % title, text)
        assert int(header.group(1)) == len(ids)
