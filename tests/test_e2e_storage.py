"""End to end against a real kgd process: storage, restarts, crashes, the lock, configuration
errors and the reference plugin's files (contract sections 1 and 4)."""

import glob
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from helpers import KGD, REPO, clean_env, real, run_kgd, start

pytestmark = pytest.mark.e2e

# ---------------------------------------------------------------- helpers


def batch(d, calls):
    msgs = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)]
    status, out = d.json("POST", "/mcp", msgs)
    assert status == 200 and len(out) == len(calls), out
    for r in sorted(out, key=lambda r: r["id"]):
        assert "result" in r and r["result"]["isError"] is False, r
    return [r["result"]["structuredContent"] for r in sorted(out, key=lambda r: r["id"])]


def load(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def write_json(path, obj, mode=0o600):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
    os.chmod(path, mode)


def assert_one_clear_line(stderr):
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert len(lines[0]) > 15, stderr
    return lines[0]


def snapshot(d, sid):
    """(user nodes by id, project nodes by id, user edges, project edges) from a full kg_read."""
    sc = d.call_tool("kg_read", {"session_id": sid})
    return ({n["id"]: n for n in sc["user"]["nodes"]}, {n["id"]: n for n in sc["project"]["nodes"]},
            sorted((e["from"], e["to"], e["rel"], tuple(e["notes"])) for e in sc["user"]["edges"]),
            sorted((e["from"], e["to"], e["rel"], tuple(e["notes"])) for e in sc["project"]["edges"]))


def write_sample(d, sid):
    batch(d, [
        ("kg_put_node", {"session_id": sid, "level": "user", "id": "u-pref", "gist": "Prefer small diffs",
                         "notes": ["reviewers asked", "ünïcödé ✓"], "touches": ["~/.gitconfig"]}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "p-db", "gist": "SQL lives in db.py",
                         "notes": ["no ORM"], "touches": ["src/db.py"]}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "p-api", "gist": "API calls db layer"}),
        ("kg_put_node", {"session_id": sid, "level": "project", "id": "p-gone", "gist": "to be deleted"}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p-api", "to": "p-db", "rel": "depends-on",
                         "notes": ["hot path"]}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p-db", "to": "src/db.py",
                         "rel": "implemented-in"}),
        ("kg_put_edge", {"session_id": sid, "level": "project", "from": "p-gone", "to": "p-db", "rel": "x"}),
        ("kg_put_edge", {"session_id": sid, "level": "user", "from": "u-pref", "to": "docs/style.md",
                         "rel": "documented-in"}),
        ("kg_progress", {"session_id": sid, "task_id": "task-1", "state": {"step": 2, "todo": ["a"]}}),
        ("kg_progress", {"session_id": sid, "task_id": "task-p", "level": "project", "state": {"phase": "b"}}),
        ("kg_delete_node", {"session_id": sid, "id": "p-gone"}),
    ])


def check_sample(d, project):
    sid = start(d, project)["session_id"]
    users, projs, uedges, pedges = snapshot(d, sid)
    assert users["u-pref"] == {"id": "u-pref", "gist": "Prefer small diffs", "notes": ["reviewers asked", "ünïcödé ✓"],
                               "touches": ["~/.gitconfig"], "state": "active"}
    assert {"p-db", "p-api"} <= set(projs) and "p-gone" not in projs
    assert projs["p-db"]["notes"] == ["no ORM"] and projs["p-db"]["touches"] == ["src/db.py"]
    assert pedges == [("p-api", "p-db", "depends-on", ("hot path",)), ("p-db", "src/db.py", "implemented-in", ())]
    assert uedges == [("u-pref", "docs/style.md", "documented-in", ())]
    assert d.call_tool("kg_progress", {"session_id": sid, "task_id": "task-1"})["state"] == {"step": 2, "todo": ["a"]}
    assert d.call_tool("kg_progress", {"session_id": sid, "task_id": "task-p", "level": "project"})["state"] == \
        {"phase": "b"}
    return sid


def project_files(root):
    return sorted(glob.glob(os.path.join(str(root), "projects", "*", "graph.json")))


# ================================================================ restart

def test_restart_keeps_everything(make_daemon, project, tmp_path):
    d = make_daemon()
    sid = start(d, project / "src")["session_id"]
    write_sample(d, sid)
    assert d.stop() == 0, "SIGTERM must exit 0"
    root = tmp_path / "root"
    # The graph files are whole and parse after a clean stop.
    user = load(root / "user.json")
    assert set(user) >= {"nodes", "edges", "_meta"}
    assert user["nodes"]["u-pref"]["gist"] == "Prefer small diffs"
    assert user["nodes"]["u-pref"]["notes"] == ["reviewers asked", "ünïcödé ✓"]
    assert "u-pref->docs/style.md:documented-in" in user["edges"]
    files = project_files(root)
    assert len(files) == 1
    assert os.path.basename(os.path.dirname(files[0])) == "myproj"
    graph = load(files[0])
    assert graph["_meta"]["project_path"] == real(project)
    assert set(graph["nodes"]) == {"p-db", "p-api"}
    node = graph["nodes"]["p-db"]
    assert node["id"] == "p-db" and node["gist"] == "SQL lives in db.py" and node["notes"] == ["no ORM"]
    assert isinstance(node.get("_created_ts"), (int, float)) and abs(node["_created_ts"] - time.time()) < 600
    assert set(graph["edges"]) == {"p-api->p-db:depends-on", "p-db->src/db.py:implemented-in"}
    assert graph["edges"]["p-api->p-db:depends-on"]["notes"] == ["hot path"]
    sessions = load(root / "sessions.json")
    assert sid in json.dumps(sessions)
    # Same root again: everything is there.
    d.start()
    check_sample(d, project)
    # The old session survived the restart (sessions.json).
    assert d.call("kg_sync", {"session_id": sid})["isError"] is False
    assert d.stop() == 0


def test_file_and_folder_modes(make_daemon, project, tmp_path):
    old = os.umask(0)
    try:
        d = make_daemon()
    finally:
        os.umask(old)
    sid = start(d, project)["session_id"]
    write_sample(d, sid)
    root = str(tmp_path / "root")
    # Look both while running (journals, lock) and after a stop (folded files, .prev copies).
    for phase in ("running", "stopped"):
        if phase == "stopped":
            assert d.stop() == 0
        bad = []
        for folder, dirs, files in os.walk(root):
            mode = stat.S_IMODE(os.stat(folder).st_mode)
            if mode != 0o700:
                bad.append((folder, oct(mode)))
            for f in files:
                path = os.path.join(folder, f)
                mode = stat.S_IMODE(os.stat(path).st_mode)
                if mode != 0o600:
                    bad.append((path, oct(mode)))
        assert not bad, (phase, bad)


def test_sigkill_right_after_acknowledged_writes(make_daemon, project, tmp_path):
    d = make_daemon()
    sid = start(d, project)["session_id"]
    write_sample(d, sid)
    # One more write, acknowledged, then kill at once: no time for any fold or flush.
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "p-last", "gist": "acknowledged"})
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "p-db", "gist": "SQL lives in db.py",
                                "notes": ["no ORM"]})
    assert d.kill() == -signal.SIGKILL
    d.start()
    sid2 = check_sample(d, project)
    _, projs, _, _ = snapshot(d, sid2)
    assert projs["p-last"]["gist"] == "acknowledged"
    assert d.stop() == 0
    # After the clean stop the graph file holds what the journal replayed.
    graph = load(project_files(tmp_path / "root")[0])
    assert {"p-db", "p-api", "p-last"} == set(graph["nodes"])


def test_sigkill_during_a_burst_of_writes_keeps_every_acknowledged_one(make_daemon, project):
    d = make_daemon()
    sid = start(d, project)["session_id"]
    acked = []
    for k in range(5):
        batch(d, [("kg_put_node", {"session_id": sid, "level": "user", "id": "burst-%d-%d" % (k, i),
                                   "gist": "burst write"}) for i in range(40)])
        acked.extend("burst-%d-%d" % (k, i) for i in range(40))
    d.kill()
    d.start()
    sid = start(d, project)["session_id"]
    users, _, _, _ = snapshot(d, sid)
    assert set(acked) <= set(users)


def test_torn_last_journal_record_is_dropped(make_daemon, project, tmp_path):
    d = make_daemon()
    sid = start(d, project)["session_id"]
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "kept", "gist": "acknowledged"})
    d.kill()
    folder = os.path.dirname(project_files(tmp_path / "root")[0]) if project_files(tmp_path / "root") else \
        glob.glob(os.path.join(str(tmp_path / "root"), "projects", "*"))[0]
    journals = [p for p in glob.glob(os.path.join(folder, "*"))
                if os.path.isfile(p) and os.path.getsize(p) > 0 and not re.search(r"graph\.json(\.prev)?$", p)]
    if not journals:
        pytest.skip("no journal beside the graph file (every write rewrote the graph file)")
    with open(journals[0], "ab") as f:
        f.write(b'{"op":"node","node":{"id":"torn-record","gist":"never acknow')
    d.start()
    sid = start(d, project)["session_id"]
    _, projs, _, _ = snapshot(d, sid)
    assert "kept" in projs and "torn-record" not in projs
    # And the daemon keeps working on that graph.
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "after", "gist": "after the tear"})
    assert d.stop() == 0
    d.start()
    sid = start(d, project)["session_id"]
    _, projs, _, _ = snapshot(d, sid)
    assert {"kept", "after"} <= set(projs) and "torn-record" not in projs


# ================================================================ lock and configuration

def test_second_daemon_on_the_same_root_refuses(make_daemon, tmp_path, project):
    d = make_daemon()
    root = str(tmp_path / "root")
    t0 = time.monotonic()
    code, out, err, _ = run_kgd("--port", "0", "--root", root, timeout=20)
    assert code != 0
    assert time.monotonic() - t0 < 15
    line = assert_one_clear_line(err)
    assert re.search(r"already|another|running|lock", line, re.I), line
    assert "listening" not in err
    # The first daemon is untouched.
    assert d.json("GET", "/health")[0] == 200
    start(d, project)
    # Same root spelled differently (trailing slash, relative ..) is the same root.
    code, _, err, _ = run_kgd("--port", "0", "--root", root + "/../root/", timeout=20)
    assert code != 0
    assert_one_clear_line(err)


def test_lock_is_released_after_a_stop(make_daemon):
    d = make_daemon()
    assert d.stop() == 0
    d.start()
    assert d.json("GET", "/health")[0] == 200


@pytest.mark.parametrize("args,env", [
    (["--port", "abc"], {}),
    (["--port", "99999"], {}),
    (["--max-tokens", "lots"], {}),
    ([], {"KG_MAX_TOKENS": "x"}),
    ([], {"KG_HTTP_PORT": "http"}),
    ([], {"KG_SAVE_INTERVAL": "soon"}),
    ([], {"KG_GRACE_PERIOD_DAYS": "a week"}),
    ([], {"KG_SESSION_TTL": "1e"}),
])
def test_bad_configuration_exits_with_one_line(tmp_path, args, env):
    root = str(tmp_path / "root")
    code, out, err, _ = run_kgd("--root", root, *args, env=env, timeout=20)
    assert code != 0
    line = assert_one_clear_line(err)
    bad_value = (args[1:] or list(env.values()))[0]
    assert bad_value in line, line
    assert out == ""


def test_flag_beats_a_bad_environment_value(tmp_path):
    """Flags beat the environment: a good --port with a bad KG_HTTP_PORT starts fine."""
    p = subprocess.Popen([sys.executable, KGD, "--port", "0", "--root", str(tmp_path / "root")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO,
                         env=clean_env(KG_HTTP_PORT="nonsense"))
    try:
        line = p.stderr.readline().decode()
        assert "listening on http://" in line, line
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=15)
    assert p.returncode == 0


def test_port_in_use_exits_with_one_line(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        code, _, err, _ = run_kgd("--port", port, "--root", tmp_path / "root", timeout=20)
    finally:
        s.close()
    assert code != 0
    line = assert_one_clear_line(err)
    assert str(port) in line


def test_unusable_root_exits_with_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err, _ = run_kgd("--port", "0", "--root", blocker / "root", timeout=20)
    assert code != 0
    assert_one_clear_line(err)


# ================================================================ the reference plugin's files

def test_reference_plugin_storage_loads_without_loss(make_daemon, project, tmp_path):
    root = tmp_path / "plugin-root"
    now = time.time()
    old = now - 30 * 86400
    user = {
        "nodes": {
            "prefer-composition": {"id": "prefer-composition", "gist": "Prefer composition over inheritance",
                                   "notes": ["flexible", "testable"], "touches": []},
            "bash-strict-mode": {"id": "bash-strict-mode", "gist": "set -euo pipefail in every script",
                                 "notes": [], "touches": ["*.sh"]},
        },
        "edges": {
            "bash-strict-mode->prefer-composition:unrelated-but-linked": {
                "from": "bash-strict-mode", "to": "prefer-composition", "rel": "unrelated-but-linked",
                "notes": ["edge note in user graph"]},
        },
        "_meta": {"versions": {
            "node:prefer-composition": {"v": 3, "ts": old, "session": "abc"},
            "node:bash-strict-mode": {"v": 1, "ts": old + 100, "session": None},
            "edge:bash-strict-mode->prefer-composition:unrelated-but-linked": {"v": 1, "ts": old + 200,
                                                                               "session": "abc"},
        }},
    }
    proj = {
        "nodes": {
            "config-loader": {"id": "config-loader", "gist": "Config is loaded once at startup",
                              "notes": ["see main.py", "env overrides file"], "touches": ["config.py", "main.py"]},
            "retry-policy": {"id": "retry-policy", "gist": "HTTP retries back off exponentially",
                             "notes": ["max 5 tries"], "touches": ["net/retry.py"]},
            "old-archived": {"id": "old-archived", "gist": "An archived insight", "notes": ["still here"],
                             "touches": [], "_archived": True},
        },
        "edges": {
            "config.py->main.py:must-load-before": {"from": "config.py", "to": "main.py", "rel": "must-load-before",
                                                    "notes": ["Config needs to initialize before main runs"]},
            "retry-policy->config-loader:configured-by": {"from": "retry-policy", "to": "config-loader",
                                                          "rel": "configured-by", "notes": []},
            "old-archived->retry-policy:explains": {"from": "old-archived", "to": "retry-policy", "rel": "explains",
                                                    "notes": ["why"]},
        },
        "_meta": {"project_path": real(project), "versions": {
            "node:config-loader": {"v": 2, "ts": old + 300, "session": "s1"},
            "node:retry-policy": {"v": 5, "ts": now - 3600, "session": "s2"},
        }},
    }
    write_json(str(root / "user.json"), user)
    write_json(str(root / "projects" / "myproj" / "graph.json"), proj)
    d = make_daemon(root=root)
    r = d.call("kg_read", {"cwd": str(project / "src")})
    sc = r["structuredContent"]
    text = r["content"][0]["text"]
    users = {n["id"]: n for n in sc["user"]["nodes"]}
    projs = {n["id"]: n for n in sc["project"]["nodes"]}
    assert set(users) == {"prefer-composition", "bash-strict-mode"}
    assert set(projs) == {"config-loader", "retry-policy"}
    assert sc["project"]["archived"] == ["old-archived"]
    for nid, raw in list(user["nodes"].items()) + [(k, v) for k, v in proj["nodes"].items() if k != "old-archived"]:
        n = users.get(nid) or projs.get(nid)
        assert (n["gist"], n["notes"], n["touches"]) == (raw["gist"], raw["notes"], raw["touches"]), nid
        assert nid in text and raw["gist"] in text
    pedges = {(e["from"], e["to"], e["rel"]): e["notes"] for e in sc["project"]["edges"]}
    # Two file-path ends: no active node, so it costs nothing and kg_read does not list it
    # (contract 5 revised); it is kept, as the full graph shows.
    assert ("config.py", "main.py", "must-load-before") not in pedges
    status, full = d.json("GET", "/api/graph?project_path=" + str(project))
    kept = {(e["from"], e["to"], e["rel"]): e["notes"] for e in full["project"]["edges"]}
    assert kept[("config.py", "main.py", "must-load-before")] == ["Config needs to initialize before main runs"]
    assert pedges[("retry-policy", "config-loader", "configured-by")] == []
    assert pedges[("old-archived", "retry-policy", "explains")] == ["why"]
    uedges = {(e["from"], e["to"], e["rel"]): e["notes"] for e in sc["user"]["edges"]}
    assert uedges == {("bash-strict-mode", "prefer-composition", "unrelated-but-linked"): ["edge note in user graph"]}
    sid = sc["session_id"]
    # Notes and edges of single nodes, the archived one included (reading it recalls it).
    nodes = {n["id"]: n for n in d.call_tool("kg_read", {"session_id": sid,
                                                         "ids": ["config-loader", "old-archived"]})["nodes"]}
    assert nodes["config-loader"]["notes"] == ["see main.py", "env overrides file"]
    assert nodes["old-archived"]["notes"] == ["still here"] and nodes["old-archived"]["state"] == "active"
    assert [(e["to"], e["notes"]) for e in nodes["old-archived"]["edges"]] == [("retry-policy", ["why"])]
    # Search finds notes and touches of the loaded files.
    ids = [x["id"] for x in d.call_tool("kg_search", {"query": "exponentially", "session_id": sid})["results"]]
    assert ids == ["retry-policy"]
    ids = [x["id"] for x in d.call_tool("kg_search", {"query": "testable", "session_id": sid})["results"]]
    assert ids == ["prefer-composition"]
    # The REST view (all states), when it answers: every node and edge of both files.
    status, g = d.json("GET", "/api/graph?project_path=" + str(project))
    if status == 200 and isinstance(g, dict) and isinstance(g.get("project"), dict):
        assert {n["id"] for n in g["user"]["nodes"]} == set(user["nodes"])
        assert {n["id"] for n in g["project"]["nodes"]} == set(proj["nodes"])
        assert {(e["from"], e["to"], e["rel"]) for e in g["project"]["edges"]} == \
            {(e["from"], e["to"], e["rel"]) for e in proj["edges"].values()}
        notes = {n["id"]: n["notes"] for n in g["project"]["nodes"]}
        assert notes == {k: v["notes"] for k, v in proj["nodes"].items()}
    # A write and a clean stop keep the plugin's data in the rewritten file.
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "new-one", "gist": "added by kgd"})
    assert d.stop() == 0
    graph = load(root / "projects" / "myproj" / "graph.json")
    assert {"config-loader", "retry-policy", "old-archived", "new-one"} <= set(graph["nodes"])
    assert graph["nodes"]["retry-policy"]["notes"] == ["max 5 tries"]
    assert {"config.py->main.py:must-load-before", "retry-policy->config-loader:configured-by",
            "old-archived->retry-policy:explains"} <= set(graph["edges"])
    assert graph["_meta"]["project_path"] == real(project)
    assert load(root / "user.json")["nodes"]["prefer-composition"]["notes"] == ["flexible", "testable"]


def test_reference_plugin_times_come_from_meta_versions(make_daemon, project, tmp_path):
    """The plugin keeps a node's last write time in _meta.versions["node:<id>"] = {"v", "ts", "session"}.
    Loaded without loss, nodes last written 30 days ago are past their grace period: over the budget,
    the first write's compaction may archive them. Had the times been lost (taken as "now"), every node
    would look new and nothing could be archived."""
    root = tmp_path / "plugin-root"
    old = time.time() - 30 * 86400
    names = ["old-%d" % i for i in range(6)]
    nodes = {n: {"id": n, "gist": "An old insight number %s that is long enough to cost tokens here" % n,
                 "notes": [], "touches": []} for n in names}
    versions = {"node:" + n: {"v": 1, "ts": old + i, "session": "s"} for i, n in enumerate(names)}
    write_json(str(root / "projects" / "myproj" / "graph.json"),
               {"nodes": nodes, "edges": {}, "_meta": {"project_path": real(project), "versions": versions}})
    d = make_daemon(root=root, args=["--max-tokens", "100"])
    sc = start(d, project)
    assert sorted(n["id"] for n in sc["project"]["nodes"]) == names
    assert sc["budget"]["project_tokens"] > 100
    sid = sc["session_id"]
    # REST view of the times, when it gives them.
    status, g = d.json("GET", "/api/graph?project_path=" + str(project))
    if status == 200 and isinstance(g, dict) and isinstance(g.get("project"), dict):
        for n in g["project"]["nodes"]:
            if "updated_ts" in n:
                assert abs(n["updated_ts"] - (old + names.index(n["id"]))) < 2, n
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "fresh", "gist": "new"})
    sc = d.call_tool("kg_read", {"session_id": sid})
    assert sc["project"]["archived"], "nodes last written 30 days ago were treated as new (in grace)"
    assert sc["budget"]["project_tokens"] <= 100
    assert "fresh" in [n["id"] for n in sc["project"]["nodes"]]


def test_reference_plugin_project_file_without_project_path(make_daemon, project, tmp_path):
    """An older file with no _meta.project_path in projects/<base name>/ belongs to that project."""
    root = tmp_path / "plugin-root"
    write_json(str(root / "projects" / "myproj" / "graph.json"), {
        "nodes": {"legacy": {"id": "legacy", "gist": "from an old plugin file", "notes": ["n"], "touches": []}},
        "edges": {}, "_meta": {"versions": {}}})
    d = make_daemon(root=root)
    sc = start(d, project)
    assert [n["id"] for n in sc["project"]["nodes"]] == ["legacy"]


# ================================================================ slugs

def _two_apps(tmp_path):
    a = tmp_path / "clients" / "one" / "app"
    b = tmp_path / "clients" / "two" / "app"
    for p in (a, b):
        (p / ".git").mkdir(parents=True)
    return a, b


def _check_two_app_graphs(root, a, b):
    files = project_files(root)
    slugs = sorted(os.path.basename(os.path.dirname(f)) for f in files)
    assert len(slugs) == 2, slugs
    assert "app" in slugs
    other = [s for s in slugs if s != "app"][0]
    assert re.fullmatch(r"app-[0-9a-f]{8}", other), other
    by_path = {}
    for f in files:
        g = load(f)
        by_path[g["_meta"]["project_path"]] = set(g["nodes"])
    assert by_path == {real(a): {"only-in-a"}, real(b): {"only-in-b"}}


def test_slug_collision_keeps_both_graphs(make_daemon, tmp_path):
    a, b = _two_apps(tmp_path)
    d = make_daemon()
    sa = start(d, a)["session_id"]
    sb = start(d, b)["session_id"]
    d.call_tool("kg_put_node", {"session_id": sa, "level": "project", "id": "only-in-a", "gist": "A"})
    d.call_tool("kg_put_node", {"session_id": sb, "level": "project", "id": "only-in-b", "gist": "B"})
    assert [n["id"] for n in d.call_tool("kg_read", {"session_id": sa})["project"]["nodes"]] == ["only-in-a"]
    assert [n["id"] for n in d.call_tool("kg_read", {"session_id": sb})["project"]["nodes"]] == ["only-in-b"]
    assert d.stop() == 0
    _check_two_app_graphs(tmp_path / "root", a, b)
    # After a restart, in the other order, each project still gets its own graph.
    d.start()
    assert [n["id"] for n in start(d, b)["project"]["nodes"]] == ["only-in-b"]
    assert [n["id"] for n in start(d, a)["project"]["nodes"]] == ["only-in-a"]
    assert d.stop() == 0
    _check_two_app_graphs(tmp_path / "root", a, b)


def test_slug_collision_after_a_restart(make_daemon, tmp_path):
    """The second `app` arrives only after a restart, when the first is on disk and not loaded."""
    a, b = _two_apps(tmp_path)
    d = make_daemon()
    sa = start(d, a)["session_id"]
    d.call_tool("kg_put_node", {"session_id": sa, "level": "project", "id": "only-in-a", "gist": "A"})
    assert d.stop() == 0
    d.start()
    sb = start(d, b)
    assert sb["project"]["nodes"] == []
    d.call_tool("kg_put_node", {"session_id": sb["session_id"], "level": "project", "id": "only-in-b", "gist": "B"})
    assert [n["id"] for n in start(d, a)["project"]["nodes"]] == ["only-in-a"]
    assert d.stop() == 0
    _check_two_app_graphs(tmp_path / "root", a, b)


def test_slug_collision_after_a_crash_before_the_graph_file_was_written(make_daemon, tmp_path):
    """The first `app` graph exists only as acknowledged journal records when the daemon dies; a
    second `app` after the restart must not take over its slug (and with it those records)."""
    a, b = _two_apps(tmp_path)
    d = make_daemon()
    sa = start(d, a)["session_id"]
    d.call_tool("kg_put_node", {"session_id": sa, "level": "project", "id": "only-in-a", "gist": "A"})
    d.kill()
    d.start()
    sb = start(d, b)
    assert sb["project"]["nodes"] == [], "project b was given project a's graph"
    d.call_tool("kg_put_node", {"session_id": sb["session_id"], "level": "project", "id": "only-in-b", "gist": "B"})
    assert [n["id"] for n in start(d, a)["project"]["nodes"]] == ["only-in-a"]
    assert d.stop() == 0
    _check_two_app_graphs(tmp_path / "root", a, b)


# ================================================================ corruption

def _graph(project_path, nodes, level=None):
    meta = {"project_path": project_path} if project_path else {}
    return {"nodes": {n: {"id": n, "gist": "gist of " + n, "notes": ["note of " + n], "touches": []} for n in nodes},
            "edges": {}, "_meta": meta}


def test_corrupt_project_graph_with_good_prev(make_daemon, project, tmp_path):
    root = tmp_path / "root"
    gfile = root / "projects" / "myproj" / "graph.json"
    write_json(str(gfile) + ".prev", _graph(real(project), ["from-prev", "also-prev"]))
    os.makedirs(str(gfile.parent), exist_ok=True)
    corrupt = b'{"nodes": {"half-written": {"id": "half-wr'
    gfile.write_bytes(corrupt)
    os.chmod(str(gfile), 0o600)
    d = make_daemon()
    assert d.json("GET", "/health")[0] == 200
    sc = start(d, project)
    assert sorted(n["id"] for n in sc["project"]["nodes"]) == ["also-prev", "from-prev"]
    kept = glob.glob(str(gfile) + ".corrupt-*")
    assert len(kept) == 1, os.listdir(str(gfile.parent))
    with open(kept[0], "rb") as f:
        assert f.read() == corrupt
    # Reads of the healed graph work, and writes land on it.
    sid = sc["session_id"]
    assert d.call_tool("kg_read", {"session_id": sid, "id": "from-prev"})["nodes"][0]["notes"] == ["note of from-prev"]
    d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "after", "gist": "after healing"})
    assert d.stop() == 0
    assert set(load(gfile)["nodes"]) == {"from-prev", "also-prev", "after"}
    assert len(glob.glob(str(gfile) + ".corrupt-*")) == 1


def test_corrupt_user_graph_with_good_prev(make_daemon, project, tmp_path):
    root = tmp_path / "root"
    ufile = root / "user.json"
    write_json(str(ufile) + ".prev", _graph(None, ["user-prev"]))
    ufile.write_bytes(b"\x00\x00\x00garbage")
    os.chmod(str(ufile), 0o600)
    d = make_daemon()
    sc = start(d, project)
    assert [n["id"] for n in sc["user"]["nodes"]] == ["user-prev"]
    assert len(glob.glob(str(ufile) + ".corrupt-*")) == 1


def test_corrupt_graph_without_prev_is_kept_aside(make_daemon, project, tmp_path):
    root = tmp_path / "root"
    gfile = root / "projects" / "myproj" / "graph.json"
    os.makedirs(str(gfile.parent), mode=0o700)
    gfile.write_bytes(b"[1, 2,")
    d = make_daemon()
    sc = start(d, project)
    assert sc["project"]["nodes"] == []
    kept = glob.glob(str(gfile) + ".corrupt-*")
    assert len(kept) == 1 and open(kept[0], "rb").read() == b"[1, 2,"
