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

from kg.agents import loop
from kg.core.errors import SecretRefused
from kg.secrets import fields as secretfields
from kg.secrets import kinds as secrets

import secrets_corpus
from helpers import StoreEnv, run_kgd

CREDS = secrets_corpus.credentials(seed=77)


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
    assert exc.value.message.startswith(
        '%s looks like a GitHub token: save where the key lives (e.g. "in .env as GITHUB_TOKEN")' % field)
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
    store.put_node(None, "user", "n", secrets_corpus.near_misses()[0], notes=secrets_corpus.near_misses()[:80])
    store.put_edge(None, "user", "n", "kg/secrets.py", "explains", notes=secrets_corpus.near_misses()[80:])
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
    real = secretfields.scan_node
    monkeypatch.setattr(secretfields, "scan_node", lambda node: calls.append(node["id"]) or real(node))
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
    with caplog.at_level(logging.WARNING, logger="kg.memory.registry"):
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
    from kg.memory.store import Settings, Store
    from kg.travel import team
    store = team.install(Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9))).open()
    try:
        handle = loop.handler(store, env={})
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
    assert "notes[2] looks like a GitHub token: save where the key lives" in text and GITHUB not in text
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


# ---------------------------------------------------------------- what an evaluator tries next

def _pem_lines(seed=9):
    return secrets_corpus._Gen(seed).pem("OPENSSH ").split("\n")


def test_a_private_key_pasted_one_line_per_note_is_refused(senv):
    store = senv.open()
    with pytest.raises(SecretRefused) as exc:
        store.put_node(None, "user", "deploy-key", "the deploy key", notes=_pem_lines())
    assert exc.value.message.startswith("notes[0] looks like a private key")
    assert "deploy-key" not in store.user.nodes


@pytest.mark.parametrize("state, path", [
    ({"step": 2, "env": {"db_password": secrets_corpus._Gen(3).password()}}, "state.env.db_password"),
    ({"log": ["ok", "retrying", "export GITHUB_TOKEN=" + GITHUB]}, "state.log[2]"),
    ({"headers": {"Authorization": "Bearer " + JWT}}, "state.headers.Authorization"),
    ({GITHUB: "a token as a key"}, "state"),
])
def test_progress_state_holding_a_credential_is_refused_naming_the_key_path(senv, state, path):
    store = senv.open()
    s = store.start_session(senv.project())
    seq = store.log.seq
    with pytest.raises(SecretRefused) as exc:
        store.progress(s, "deploy", state, has_state=True)
    assert exc.value.status == 422 and exc.value.message.startswith(path + " looks like ")
    assert GITHUB not in exc.value.message and JWT not in exc.value.message
    assert store.progress(s, "deploy")["state"] is None and store.log.seq == seq
    store.progress(s, "deploy", {"step": 2, "env": {"db_password": "in the vault as DB_PASSWORD"}}, has_state=True)


def test_progress_deeply_nested_is_scanned_without_recursion(senv):
    deep = [GITHUB]
    for _ in range(5000):
        deep = [deep]
    assert secretfields.scan_state({"deep": deep})[1].kind == "github"
    store = senv.open()
    with pytest.raises(SecretRefused):
        store.progress(None, "t", {"a": [[[{"b": [GITHUB]}]]]}, has_state=True)


def test_progress_scan_off_applies_to_private_graphs_only(senv):
    store = senv.open(secret_scan=False)
    s = store.start_session(senv.project())
    store.progress(s, "t", {"token": GITHUB}, has_state=True)  # the user graph is private
    store.graph("project", s).shared = True
    with pytest.raises(SecretRefused):
        store.progress(s, "t", {"token": GITHUB}, level="project", has_state=True)


def test_the_live_feed_never_carries_a_flagged_nodes_text(senv):
    store = senv.open(secret_scan=False)
    events = []
    store.add_listener(events.append)
    store.put_node(None, "user", "leaky", "deploy key", notes=["ok", "GITHUB_TOKEN=" + GITHUB])
    store.put_node(None, "user", GITHUB, "the id is the token")
    store.put_edge(None, "user", "leaky", "kg/app.py", "uses", notes=[JWT])
    store.put_node(None, "user", "fine", "clean")
    text = json.dumps(events)
    assert GITHUB not in text and JWT not in text
    puts = [e for e in events if e["type"] == "node_put"]
    assert [e["node"]["id"] for e in puts] == ["leaky", "fine"]
    assert puts[0]["flagged"] == {"field": "notes[1]", "kind": "github"}
    assert puts[0]["node"]["notes"] == ["ok", "GITHUB_TOKEN=[withheld: github]"]
    edge = next(e for e in events if e["type"] == "edge_put")
    assert edge["flagged"]["kind"] == "jwt" and edge["edge"]["notes"] == ["[withheld: jwt]"]


def test_the_viewers_graph_marks_a_flagged_node_and_withholds_its_text(senv):
    from kg.api import rest
    store = senv.open(secret_scan=False)
    store.put_node(None, "user", "leaky", "deploy key", notes=["see " + GITHUB])
    store.put_node(None, "user", "fine", "clean")
    view = rest.graph(store, {}, {}, None)
    assert GITHUB not in json.dumps(view)
    nodes = {n["id"]: n for n in view["user"]["nodes"]}
    assert nodes["leaky"]["flagged"] == {"field": "notes[0]", "kind": "github", "label": "a GitHub token"}
    assert nodes["leaky"]["notes"] == ["see [withheld: github]"] and "flagged" not in nodes["fine"]


@pytest.mark.parametrize("text", [
    "password=" + secrets_corpus._Gen(4).password(),
    "one " + GITHUB + " two " + JWT + " three",
    "%67hp_" + GITHUB[4:],  # found only percent-decoded: the whole text is withheld
])
def test_redact_leaves_no_secret(text):
    out = secretfields.redact(text)
    assert secrets.find(out) is None and "[withheld: " in out


def test_export_leaves_a_flagged_node_out_unless_asked(tmp_path):
    root = tmp_path / "root"
    _old_graph(str(root), [{"id": "old-leak", "gist": "ci", "notes": ["ok", GITHUB]},
                           {"id": "ci", "gist": "the CI token lives in the repository's secrets"}])
    with open(root / "user.json") as f:
        obj = json.load(f)
    obj["_meta"]["progress"] = {"deploy": {"step": 1, "token": GITHUB}, "tidy": {"step": 3}}
    with open(root / "user.json", "w") as f:
        json.dump(obj, f)
    code, out, err, _ = run_kgd("export", "--root", root)
    assert code == 0, err
    doc = json.loads(out)
    assert GITHUB not in out + err
    assert sorted(doc["user"]["nodes"]) == ["ci"] and sorted(doc["user"]["_meta"]["progress"]) == ["tidy"]
    assert "node 'old-leak' left out: notes[1] looks like a GitHub token (--with-flagged keeps it)" in err
    assert "task progress left out: state.token looks like a GitHub token" in err
    code, out, err, _ = run_kgd("export", "--root", root, "--with-flagged")
    assert code == 0 and sorted(json.loads(out)["user"]["nodes"]) == ["ci", "old-leak"], err


@pytest.mark.e2e
def test_import_refuses_a_task_progress_holding_a_credential(tmp_path):
    dump = _export(tmp_path / "dump.json", [{"id": "a", "gist": "a"}])
    doc = json.loads(dump.read_text())
    doc["user"]["_meta"]["progress"] = {"deploy": {"token": GITHUB}, "tidy": {"step": 3}}
    dump.write_text(json.dumps(doc))
    code, out, err, _ = run_kgd("import", dump, "--root", tmp_path / "root")
    assert code == 0, err
    assert "progress: 1 added, 1 refused" in out, out
    assert "task progress refused: state.token looks like a GitHub token" in err and GITHUB not in out + err
    with open(tmp_path / "root" / "user.json") as f:
        assert sorted(json.load(f)["_meta"]["progress"]) == ["tidy"]


def test_no_error_quotes_a_secret_sent_as_an_id(senv):
    """A new node without a gist, an edge to an unknown end, a task named by a token: the
    refusal comes first, so no other message quotes what was sent."""
    store = senv.open()
    for call in (lambda: store.put_node(None, "user", GITHUB),
                 lambda: store.put_edge(None, "user", GITHUB, "nowhere", "r"),
                 lambda: store.progress(None, GITHUB, {"step": 1}, has_state=True)):
        with pytest.raises(SecretRefused) as exc:
            call()
        assert GITHUB not in exc.value.message
    assert store.progress(None, "t", {"step": 1}, has_state=True)["state"] == {"step": 1}


@pytest.mark.e2e
def test_progress_through_mcp_and_rest_is_refused_naming_the_key_path(make_daemon):
    d = make_daemon(env={"KG_STRUCTURED_OUTPUT": "0"})
    first = d.call("kg_read", {"cwd": d.root})["content"][0]["text"]
    sid = first.split("Session: ", 1)[1].split()[0]
    r = d.call("kg_progress", {"session_id": sid, "task_id": "deploy", "state": {"env": {"token": GITHUB}}})
    assert r["isError"] is True and GITHUB not in json.dumps(r)
    assert "state.env.token looks like a GitHub token" in r["content"][0]["text"]
    code, body = d.json("PUT", "/api/progress/deploy", {"state": {"log": ["ok", JWT]}})
    assert (
        code == 422
        and body["error"].startswith("state.log[1] looks like a JSON Web Token")
        and JWT not in body["error"]
    )
    code, body = d.json("GET", "/api/progress/deploy")
    assert code == 200 and body["state"] is None
