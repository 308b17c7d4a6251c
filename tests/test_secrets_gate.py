"""The secrets gate wired in (contract section 10): every write refused when it holds a
credential (store, MCP isError, REST 422, import per node), KG_SECRET_SCAN=0 for private graphs
only, and knowledge that arrived otherwise (an old graph file, a scan-off write) hidden from
kg_read, kg_search, kg_sync and the hooks, reported (log, kgd doctor) and deletable.

Every secret here is generated at run time (tests/secrets_corpus.py).
"""

import json
import logging
import os

import pytest
import secrets_corpus as corpus
from helpers import StoreEnv, run_kgd

from kg import hooks, secrets
from kg.errors import SecretRefused

CREDS = corpus.credentials(seed=77)


def cred(kind):
    return next(t for k, t in CREDS if k == kind)


GITHUB = cred("github")
JWT = cred("jwt")
CLEAN = {"gist": "tokens expire hourly; refresh in the client", "notes": ["see auth/refresh.py"]}


@pytest.fixture
def senv(tmp_path):
    e = StoreEnv(tmp_path, max_tokens=10 ** 9)
    yield e
    e.close_all()


def _files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(folder, n), "rb") as f:
                out[os.path.join(folder, n)] = f.read()
    return out


# ---------------------------------------------------------------- the store refuses

@pytest.mark.parametrize("fields, field", [
    (dict(node_id=GITHUB, gist="g"), "id"),
    (dict(gist="uses " + GITHUB), "gist"),
    (dict(gist="g", notes=["a", "b", "export GITHUB_TOKEN=" + GITHUB]), "notes[2]"),
    (dict(gist="g", touches=[GITHUB]), "touches[0]"),
])
def test_put_node_refused_names_field_and_kind_and_writes_nothing(senv, fields, field):
    store = senv.open()
    s = store.start_session(senv.project())
    before = _files(senv.root)
    seq = store.log.seq
    args = dict(node_id="n1", gist=None, notes=None, touches=None)
    args.update(fields)
    with pytest.raises(SecretRefused) as exc:
        store.put_node(s, "user", args.pop("node_id"), **args)
    assert exc.value.status == 422
    assert exc.value.message.startswith("%s looks like a GitHub token: save where the secret lives" % field)
    assert GITHUB not in exc.value.message and GITHUB[4:20] not in exc.value.message
    assert _files(senv.root) == before and store.log.seq == seq and "n1" not in store.user.nodes


@pytest.mark.parametrize("kind, text", CREDS, ids=["%s-%d" % (k, i) for i, (k, _) in enumerate(CREDS)])
def test_every_kind_refused_in_a_note(senv, kind, text):
    store = senv.open()
    with pytest.raises(SecretRefused) as exc:
        store.put_node(None, "user", "n", "g", notes=["ok", text])
    assert exc.value.message.startswith("notes[1] looks like ")
    assert text not in exc.value.message


def test_an_update_keeping_an_old_secret_is_refused_until_the_field_is_replaced(senv):
    store = senv.open(secret_scan=False)
    store.put_node(None, "user", "n", "g", notes=[GITHUB])
    store.settings.secret_scan = True
    with pytest.raises(SecretRefused):
        store.put_node(None, "user", "n", "a new gist")  # the merged node still holds notes[0]
    store.put_node(None, "user", "n", "a new gist", notes=["in .env as GITHUB_TOKEN"])
    assert store.user.shown("n")


@pytest.mark.parametrize("edge, field, label", [
    (dict(frm="a", to="b", rel="r", notes=["ok", JWT]), "edge notes[1]", "a JSON Web Token"),
    (dict(frm="a", to="b", rel=cred("aws-access-key-id")), "rel", "an AWS access key id"),
])
def test_put_edge_refused(senv, edge, field, label):
    store = senv.open()
    store.put_node(None, "user", "a", "a")
    store.put_node(None, "user", "b", "b")
    with pytest.raises(SecretRefused) as exc:
        store.put_edge(None, "user", edge.pop("frm"), edge.pop("to"), edge.pop("rel"), **edge)
    assert exc.value.message.startswith("%s looks like %s" % (field, label))
    assert not store.user.edges


def test_ordinary_notes_pass(senv):
    store = senv.open()
    store.put_node(None, "user", "n", corpus.near_misses()[0], notes=corpus.near_misses()[:80])
    store.put_edge(None, "user", "n", "kg/secrets.py", "explains", notes=corpus.near_misses()[80:])
    assert store.user.shown("n") and not store.user.flagged_edges


# ---------------------------------------------------------------- KG_SECRET_SCAN=0

def test_scan_off_lets_a_private_write_in_but_never_shows_it(senv):
    store = senv.open(secret_scan=False)
    s = store.start_session(senv.project())
    other = store.start_session(senv.project())
    store.put_node(s, "user", "leaky", "deploy key", notes=[GITHUB])
    store.put_node(s, "user", "fine", "deploy uses the GitHub token from CI secrets")
    store.put_edge(s, "user", "fine", "leaky", "see")
    assert store.user.flagged["leaky"][0] == "notes[0]"
    view = store.read_graphs(s)["user"]
    assert [n["id"] for n in view["nodes"]] == ["fine"] and view["edges"] == []
    assert view["withheld"] == (["leaky"], 1)
    r = store.read_nodes(s, ["leaky", "fine"])
    assert [n["id"] for n in r["nodes"]] == ["fine"] and r["withheld"] == ["leaky"]
    assert r["nodes"][0]["edges"] == []
    assert [x["id"] for x in store.search("deploy", s)["results"]] == ["fine"]
    assert [n["id"] for n in store.sync(other)["nodes"]] == ["fine"]
    store.delete_node(s, "leaky", "user")
    assert not store.user.flagged and store.read_graphs(s)["user"]["withheld"] == ([], 0)


def test_scan_off_never_applies_to_a_shared_graph(senv):
    store = senv.open(secret_scan=False)
    s = store.start_session(senv.project())
    store.graph("project", s).shared = True
    with pytest.raises(SecretRefused):
        store.put_node(s, "project", "n", "g", notes=[GITHUB])
    store.put_node(s, "user", "n", "g", notes=[GITHUB])  # the user graph is private


def test_flagged_set_follows_put_and_delete_and_rescans_only_changed_text(senv, monkeypatch):
    store = senv.open(secret_scan=False)
    store.put_node(None, "user", "n", "g", notes=[GITHUB])
    assert "n" in store.user.flagged
    store.put_node(None, "user", "n", "g", notes=["in the vault"])
    assert "n" not in store.user.flagged
    calls = []
    real = secrets.scan_node
    monkeypatch.setattr(secrets, "scan_node", lambda node: calls.append(node["id"]) or real(node))
    with store.lock:
        for _ in range(3):
            store.user.refresh("n")  # recency, promotion, compaction: no text changed
    assert calls == []
    store.put_node(None, "user", "n", "another gist")
    assert calls == ["n"]


# ---------------------------------------------------------------- an old graph file

def _old_graph(root, nodes):
    os.makedirs(root, exist_ok=True)
    obj = {"nodes": {n["id"]: dict({"notes": [], "touches": []}, **n) for n in nodes}, "edges": {},
           "_meta": {"level": "user"}}
    with open(os.path.join(root, "user.json"), "w") as f:
        json.dump(obj, f)


def test_an_old_graph_holding_a_secret_loads_hidden_reported_and_deletable(senv, caplog):
    _old_graph(senv.root, [{"id": "old-leak", "gist": "prod db", "notes": [cred("url-password")]},
                           {"id": "prod-db", "gist": "the prod db is reached through the bastion"}])
    with caplog.at_level(logging.WARNING, logger="kg.registry"):
        store = senv.open()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "old-leak" in logged and "look like credentials" in logged
    assert cred("url-password") not in logged
    s = store.start_session(senv.project())
    assert [n["id"] for n in store.read_graphs(s)["user"]["nodes"]] == ["prod-db"]
    assert store.search("prod", s)["results"][0]["id"] == "prod-db" and len(store.search("prod", s)["results"]) == 1
    store.delete_node(s, "old-leak")
    assert not store.user.flagged


def test_hooks_never_inject_a_flagged_node(tmp_path):
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "app.py").write_text("x")
    _old_graph(str(tmp_path / "root"), [
        {"id": "leak-bastion", "gist": "bastion login for app.py", "notes": [cred("password")], "touches": ["app.py"]},
        {"id": "bastion-how", "gist": "bastion login goes through ssh agent forwarding", "touches": ["app.py"]}])
    from kg.store import Settings, Store
    store = Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9)).open()
    try:
        handle = hooks.handler(store, env={})
        base = {"session_id": "c1", "transcript_path": "/tmp/t", "cwd": str(proj)}
        start = handle(dict(base, hook_event_name="SessionStart", source="startup"))
        text = start["hookSpecificOutput"]["additionalContext"]
        assert "bastion-how" in text and "leak-bastion" not in text
        handle(dict(base, hook_event_name="SessionStart", source="clear"))  # forget what was shown
        out = handle(dict(base, hook_event_name="UserPromptSubmit", prompt="how does the bastion login work?"))
        recalled = out["hookSpecificOutput"]["additionalContext"] if out else ""
        assert "leak-bastion" not in recalled
        out = handle(dict(base, hook_event_name="PostToolUse", tool_name="Read",
                          tool_input={"file_path": str(proj / "app.py")}, tool_response={}))
        assert "leak-bastion" not in json.dumps(out or {})
    finally:
        store.close()


def test_kgd_doctor_lists_it_without_the_secret(tmp_path):
    root = tmp_path / "root"
    _old_graph(str(root), [{"id": "old-leak", "gist": "ci", "notes": ["ok", GITHUB]}])
    code, out, err, _ = run_kgd("doctor", "--root", root, "--skip-service", "--skip-client")
    assert "user graph: node 'old-leak': notes[1] looks like a GitHub token" in out, out + err
    assert GITHUB not in out + err


# ---------------------------------------------------------------- through the daemon

@pytest.mark.e2e
def test_mcp_put_is_an_error_naming_field_and_kind(make_daemon, tmp_path):
    d = make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})
    proj = tmp_path / "p"
    (proj / ".git").mkdir(parents=True)
    first = d.call("kg_read", {"cwd": str(proj)})["content"][0]["text"]
    sid = first.split("Session: ", 1)[1].split()[0]
    r = d.call("kg_put_node", {"session_id": sid, "level": "project", "id": "ci-token", "gist": "CI",
                               "notes": ["one", "two", "GITHUB_TOKEN=" + GITHUB]})
    assert r["isError"] is True and "structuredContent" not in r
    text = r["content"][0]["text"]
    assert "notes[2] looks like a GitHub token: save where the secret lives" in text and GITHUB not in text
    r = d.call("kg_put_edge", {"session_id": sid, "level": "project", "from": "a.py", "to": "b.py", "rel": "r",
                               "notes": [JWT]})
    assert r["isError"] is True and "edge notes[0] looks like a JSON Web Token" in r["content"][0]["text"]
    r = d.call("kg_read", {"session_id": sid, "id": "ci-token"})
    assert "Not found: ci-token" in r["content"][0]["text"]


@pytest.mark.e2e
def test_rest_put_answers_422(make_daemon):
    d = make_daemon()
    code, body = d.json("PUT", "/api/nodes/user/n1", {"gist": "g", "notes": [cred("aws-access-key-id")]})
    assert code == 422 and body["error"].startswith("notes[0] looks like an AWS access key id")
    assert cred("aws-access-key-id") not in body["error"]
    code, body = d.json("PUT", "/api/edges/user", {"from": "a.py", "to": "b.py", "rel": "r",
                                                   "notes": [cred("private-key")]})
    assert code == 422 and "edge notes[0] looks like a private key" in body["error"]
    assert d.json("GET", "/api/nodes/user/n1")[0] == 404
    _, spec = d.json("GET", "/api/openapi.json")
    assert "422" in spec["paths"]["/api/nodes/{level}/{id}"]["put"]["responses"]


@pytest.mark.e2e
def test_the_env_switch_lets_private_writes_in_and_they_stay_hidden(make_daemon):
    d = make_daemon(env={"KG_SECRET_SCAN": "0"})
    code, _ = d.json("PUT", "/api/nodes/user/leak", {"gist": "staging creds", "notes": [cred("password")]})
    assert code == 200
    d.json("PUT", "/api/nodes/user/staging", {"gist": "staging creds live in the team vault"})
    r = d.call("kg_read", {"cwd": d.root})
    text = r["content"][0]["text"]
    assert "staging" in text and "- leak:" not in text
    assert "1 node withheld because it looks like a credential; delete it with kg_delete_node: leak" in text
    r = d.call("kg_read", {"session_id": r["structuredContent"]["session_id"], "id": "leak"})
    assert "Withheld" in r["content"][0]["text"] and cred("password") not in json.dumps(r)
    _, found = d.json("GET", "/api/search?q=staging")
    assert [x["id"] for x in found["results"]] == ["staging"]
    assert d.json("DELETE", "/api/nodes/user/leak")[0] == 200


# ---------------------------------------------------------------- import

def _export(path, nodes, edges=None):
    doc = {"format": "kgd-export", "format_version": 1, "projects": [],
           "user": {"nodes": {n["id"]: dict({"notes": [], "touches": [], "_write_ts": 10.0}, **n) for n in nodes},
                    "edges": edges or {}, "_meta": {}}}
    path.write_text(json.dumps(doc))
    return path


IMPORTED = [{"id": "a", "gist": "the cache is per process"},
            {"id": "leak", "gist": "slack bot", "notes": [cred("slack")]},
            {"id": "b", "gist": "retries back off exponentially"}]
IMPORTED_EDGES = {"a->leak:see": {"from": "a", "to": "leak", "rel": "see", "notes": []},
                  "a->b:then": {"from": "a", "to": "b", "rel": "then", "notes": []},
                  "b->a:jwt": {"from": "b", "to": "a", "rel": "jwt", "notes": [JWT]}}


@pytest.mark.e2e
def test_import_refuses_per_node_counts_and_imports_the_rest(tmp_path):
    dump = _export(tmp_path / "dump.json", IMPORTED, IMPORTED_EDGES)
    code, out, err, _ = run_kgd("import", dump, "--root", tmp_path / "root")
    assert code == 0, err
    assert "nodes: 2 added, 1 refused; edges: 1 added, 1 skipped, 1 refused" in out, out
    assert "node 'leak' refused: notes[0] looks like a Slack token" in err
    assert cred("slack") not in out + err and JWT not in out + err
    with open(tmp_path / "root" / "user.json") as f:
        g = json.load(f)
    assert sorted(g["nodes"]) == ["a", "b"] and list(g["edges"]) == ["a->b:then"]


@pytest.mark.e2e
def test_import_into_a_running_daemon_refuses_per_node(make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "live")
    dump = _export(tmp_path / "dump.json", IMPORTED, IMPORTED_EDGES)
    code, out, err, _ = run_kgd("import", dump, "--root", tmp_path / "live")
    assert code == 0 and "through the running daemon" in out, err
    assert "nodes: 2 added, 1 refused" in out
    assert d.json("GET", "/api/nodes/user/leak")[0] == 404 and d.json("GET", "/api/nodes/user/a")[0] == 200
    # the client's scan off: the daemon's own check still refuses, counted, the rest goes on
    dump = _export(tmp_path / "dump2.json", [{"id": "c", "gist": "c"}, {"id": "leak2", "gist": "x", "notes": [GITHUB]}])
    code, out, err, _ = run_kgd("import", dump, "--root", tmp_path / "live", env={"KG_SECRET_SCAN": "0"})
    assert code == 0, err
    assert "nodes: 1 added, 1 refused" in out and "refused by the daemon: notes[0] looks like a GitHub token" in err
    assert GITHUB not in out + err


@pytest.mark.e2e
def test_import_with_the_scan_off_keeps_it_hidden_after_load(make_daemon, tmp_path):
    dump = _export(tmp_path / "dump.json", IMPORTED)
    code, out, err, _ = run_kgd("import", dump, "--root", tmp_path / "root", env={"KG_SECRET_SCAN": "0"})
    assert code == 0 and "nodes: 3 added" in out, err
    d = make_daemon(root=tmp_path / "root")
    assert any("leak" in line and "look like credentials" in line for line in d.stderr_lines)
    assert not any(cred("slack") in line for line in d.stderr_lines)
    _, found = d.json("GET", "/api/search?q=slack")
    assert found["results"] == []
