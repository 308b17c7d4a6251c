"""Operator commands: status, start, stop, export, import, doctor, desktop (the README and docs/
that describe them are checked by tests/test_docs.py).

Export then import into an empty root must reproduce the graphs exactly: every state, note,
underscore time, edge and task progress.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from helpers import clean_env, free_port, run_kgd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")


def kgd(*args, env=None, stdin=None, home=None):
    e = clean_env(home, **(env or {}))
    # -S: kgd needs nothing from site-packages, and this machine's site start-up is slow
    r = subprocess.run([sys.executable, "-S", KGD] + [str(a) for a in args], env=e, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60, cwd=REPO)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def graph_files(root):
    """{relative path: parsed graph} for user.json and every projects/*/graph.json."""
    out = {}
    for folder, _, files in os.walk(str(root)):
        for name in files:
            if name in ("user.json", "graph.json"):
                p = os.path.join(folder, name)
                with open(p) as f:
                    out[os.path.relpath(p, str(root))] = json.load(f)
    return out


def strip(doc):
    return {k: v for k, v in doc.items() if k not in ("exported_at", "root")}


def fill(d, project, other):
    """A varied memory: archived and orphaned nodes (tiny budget, no grace), edges with notes and
    file-path ends, odd ids, progress in both levels, two projects."""
    pp, op = str(project), str(other)
    for i in range(40):
        d.json("PUT", "/api/nodes/project/p%02d" % i, {"gist": "project insight %d " % i + "x" * 40,
                                                       "notes": ["why %d" % i], "touches": ["src/f%d.py" % i],
                                                       "project_path": pp})
        d.json("PUT", "/api/nodes/user/u%02d" % i, {"gist": "user wisdom %d " % i + "y" * 30})
    for i in range(0, 39, 3):
        d.json("PUT", "/api/edges/project", {"from": "p%02d" % i, "to": "p%02d" % (i + 1), "rel": "explains",
                                             "notes": ["n%d" % i], "project_path": pp})
    d.json("PUT", "/api/edges/project", {"from": "p39", "to": "src/app.py", "rel": "implemented-in",
                                         "project_path": pp})
    st, _ = d.json("PUT", "/api/nodes/user/%s" % "a%2Fb%20%C3%BC", {"gist": "odd id", "notes": ["multi\nline"]})
    assert st == 200
    d.json("PUT", "/api/progress/task-1", {"state": {"step": 3, "todo": ["a"]}, "level": "user"})
    d.json("PUT", "/api/progress/task-2", {"state": {"done": True}, "level": "project", "project_path": pp})
    d.json("PUT", "/api/nodes/project/other-node", {"gist": "in the second project", "project_path": op})
    d.json("GET", "/api/nodes/user/u00")  # a read: _read_ts


@pytest.fixture
def projects(tmp_path):
    out = []
    for name in ("alpha", "beta"):
        p = tmp_path / "work" / name
        (p / ".git").mkdir(parents=True)
        out.append(p)
    return out


# ---------------------------------------------------------------- status, start, stop

@pytest.mark.e2e
def test_status_stop_start(tmp_path):
    root, port = tmp_path / "root", free_port()
    env = {"KG_STORAGE_ROOT": str(root), "KG_HTTP_PORT": str(port)}
    code, out, _ = kgd("status", env=env)
    assert code == 1 and "not running" in out
    code, out, err = kgd("stop", env=env)
    assert code == 0 and "not running" in out
    try:
        code, out, err = kgd("start", env=env)
        assert code == 0 and "kgd started at http://127.0.0.1:%d/" % port in out, err
        code, out, _ = kgd("start", env=env)
        assert code == 0 and "already running" in out
        code, out, _ = kgd("status", "--json", env=env)
        st = json.loads(out)
        assert st["running"] and st["port"] == port and st["root"] == str(root) and st["version"]
        assert st["pid"] and st["sessions"] == 0 and st["graphs_loaded"] >= 1
        # flags before the subcommand count too
        code, out, _ = kgd("--port", port, "--root", root, "status")
        assert code == 0 and "is running at http://127.0.0.1:%d/" % port in out and str(root) in out
        code, out, _ = kgd("stop", env=env)
        assert code == 0 and "stopped" in out
        code, out, _ = kgd("status", env=env)
        assert code == 1 and "not running" in out
        with open(root / "kgd.lock") as f:
            assert f.read() == ""  # released and emptied at exit
    finally:
        kgd("stop", env=env)


@pytest.mark.e2e
def test_stop_finds_the_daemon_from_the_lock_file(make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "r")
    with open(tmp_path / "r" / "kgd.lock") as f:
        assert f.read().strip() == "pid %d port %d" % (d.proc.pid, d.port)
    code, out, _ = kgd("status", "--root", tmp_path / "r")  # default port: found through the lock
    assert code == 0 and ":%d/" % d.port in out
    code, out, _ = kgd("stop", "--root", tmp_path / "r")
    assert code == 0 and "pid %d" % d.proc.pid in out
    assert d.proc.wait(5) == 0  # SIGTERM: flushed, exit 0


# ---------------------------------------------------------------- export / import

@pytest.mark.e2e
def test_export_import_reproduces_the_graphs_exactly(make_daemon, tmp_path, projects):
    src = tmp_path / "src"
    d = make_daemon(root=src, args=["--max-tokens", "400"], env={"KG_GRACE_PERIOD_DAYS": "0"})
    fill(d, *projects)
    _, g = d.json("GET", "/api/graph?project_path=" + str(projects[0]))
    states = {n["state"] for n in g["project"]["nodes"]} | {n["state"] for n in g["user"]["nodes"]}
    assert states == {"active", "archived", "orphaned"}

    code, live_export, err = kgd("export", "--root", src)  # while the daemon runs (journals not folded)
    assert code == 0, err
    assert d.stop() == 0
    code, out, err = kgd("export", "--root", src, "-o", tmp_path / "dump.json")
    assert code == 0, err
    assert os.stat(tmp_path / "dump.json").st_mode & 0o777 == 0o600
    with open(tmp_path / "dump.json") as f:
        doc = json.load(f)
    assert strip(json.loads(live_export)) == strip(doc)
    assert len(doc["projects"]) == 2
    assert doc["user"]["_meta"]["progress"]["task-1"] == {"step": 3, "todo": ["a"]}
    node = doc["user"]["nodes"]["u00"]
    assert {"_created_ts", "_write_ts", "_read_ts"} <= set(node)
    # State keys are written only when set (the reference plugin reads state by key presence).
    assert node.get("_archived", True) is True and node.get("_orphaned_ts", 0) is not None

    dest = tmp_path / "dest"
    code, out, err = kgd("import", tmp_path / "dump.json", "--dry-run", "--root", dest)
    assert code == 0 and "dry run" in out and not dest.exists(), (out, err)
    code, out, err = kgd("import", tmp_path / "dump.json", "--root", dest)
    assert code == 0 and "through files" in out, err
    assert graph_files(dest) == graph_files(src)  # the very files, field for field
    code, again, _ = kgd("export", "--root", dest)
    assert strip(json.loads(again)) == strip(doc)
    for path, _, files in os.walk(str(dest)):
        assert os.stat(path).st_mode & 0o777 == 0o700
        for name in files:
            assert os.stat(os.path.join(path, name)).st_mode & 0o777 == 0o600
    code, out, _ = kgd("import", tmp_path / "dump.json", "--root", dest)  # a second import is a no-op
    assert "added" not in out and "updated" not in out and "unchanged" in out

    # the daemon loads the imported root as it was
    d2 = make_daemon(root=dest)
    _, g2 = d2.json("GET", "/api/graph?project_path=" + str(projects[0]))
    assert sorted(map(json.dumps, g2["project"]["nodes"])) == sorted(map(json.dumps, g["project"]["nodes"]))


@pytest.mark.e2e
def test_export_of_a_graph_not_yet_folded(make_daemon, tmp_path, project):
    """A project written a moment ago lives only in its journal; the running daemon names its path."""
    d = make_daemon(root=tmp_path / "r", env={"KG_SAVE_INTERVAL": "3600"})
    d.json("PUT", "/api/nodes/project/fresh", {"gist": "just written", "project_path": str(project)})
    code, out, err = kgd("export", "--root", tmp_path / "r")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["project_path"] for p in doc["projects"]] == [str(project)]
    assert doc["projects"][0]["graph"]["nodes"]["fresh"]["gist"] == "just written"


@pytest.mark.e2e
def test_export_one_project(make_daemon, tmp_path, projects):
    d = make_daemon(root=tmp_path / "r")
    fill(d, *projects)
    code, out, _ = kgd("export", "--root", tmp_path / "r", "--project", projects[1], "--no-user")
    doc = json.loads(out)
    assert doc["user"] is None and [p["project_path"] for p in doc["projects"]] == [str(projects[1])]
    code, out, _ = kgd("export", "--root", tmp_path / "r", "--project", "alpha")  # by slug
    assert [p["slug"] for p in json.loads(out)["projects"]] == ["alpha"]
    code, _, err = kgd("export", "--root", tmp_path / "r", "--project", "/nowhere")
    assert code == 1 and "no project graph matches /nowhere" in err


@pytest.mark.e2e
def test_import_into_a_running_daemon_goes_through_it(make_daemon, tmp_path, projects):
    d = make_daemon(root=tmp_path / "src", env={"KG_GRACE_PERIOD_DAYS": "0"})
    fill(d, *projects)
    d.stop()
    _, dump, _ = kgd("export", "--root", tmp_path / "src")
    (tmp_path / "dump.json").write_text(dump)
    live = make_daemon(root=tmp_path / "live")
    live.json("PUT", "/api/nodes/user/u00", {"gist": "a newer local version"})
    code, out, err = kgd("import", tmp_path / "dump.json", "--root", tmp_path / "live", "--dry-run")
    assert code == 0 and "through the running daemon" in out
    assert live.json("GET", "/api/nodes/user/u01")[0] == 404
    code, out, err = kgd("import", tmp_path / "dump.json", "--root", tmp_path / "live")
    assert code == 0 and "through the running daemon" in out, err
    assert "nodes: 40 added" in out and "nodes: 1 added" in out
    _, node = live.json("GET", "/api/nodes/user/a%2Fb%20%C3%BC")
    assert node["notes"] == ["multi\nline"]
    _, g = live.json("GET", "/api/graph?project_path=" + str(projects[0]))
    assert len(g["project"]["nodes"]) == 40 and len(g["project"]["edges"]) == 14
    _, prog = live.json("GET", "/api/progress/task-2?level=project&project_path=" + str(projects[0]))
    assert prog["state"] == {"done": True}
    # the writes went through the daemon: its files agree once it stops
    assert live.stop() == 0
    _, after, _ = kgd("export", "--root", tmp_path / "live")
    assert len(json.loads(after)["projects"][0]["graph"]["nodes"]) in (40, 1)


@pytest.mark.e2e
def test_offline_merge_rules(tmp_path):
    def doc(nodes, edges=None, progress=None):
        return {"format": "kgd-export", "format_version": 1, "projects": [],
                "user": {"nodes": nodes, "edges": edges or {}, "_meta": {"progress": progress or {}}}}

    def node(nid, gist, written):
        return {"id": nid, "gist": gist, "notes": [], "touches": [], "_created_ts": 1.0, "_write_ts": written,
                "_read_ts": None, "_archived": False, "_orphaned_ts": None}

    root = tmp_path / "r"
    first = doc({"a": node("a", "old a", 10.0), "b": node("b", "newer b here", 50.0)},
                {"a->b:rel": {"from": "a", "to": "b", "rel": "rel", "notes": ["one"]}}, {"t": {"x": 1}})
    second = doc({"a": node("a", "new a", 20.0), "b": node("b", "older b", 40.0), "c": node("c", "c", 1.0)},
                 {"a->b:rel": {"from": "a", "to": "b", "rel": "rel", "notes": ["two"]}}, {"t": {"x": 2}})
    for i, d in enumerate((first, second)):
        (tmp_path / ("%d.json" % i)).write_text(json.dumps(d))
        code, out, err = kgd("import", tmp_path / ("%d.json" % i), "--root", root)
        assert code == 0, err
    assert "nodes: 1 added, 1 updated, 1 kept newer" in out
    g = graph_files(root)["user.json"]
    assert g["nodes"]["a"]["gist"] == "new a" and g["nodes"]["b"]["gist"] == "newer b here"
    assert g["edges"]["a->b:rel"]["notes"] == ["two"] and g["_meta"]["progress"] == {"t": {"x": 2}}


@pytest.mark.e2e
def test_import_refuses_what_is_not_an_export(tmp_path):
    (tmp_path / "x.json").write_text('{"nodes": {}}')
    code, _, err = kgd("import", tmp_path / "x.json", "--root", tmp_path / "r")
    assert code == 1 and "is not a kgd export" in err
    code, _, err = kgd("import", tmp_path / "missing.json", "--root", tmp_path / "r")
    assert code == 1 and "cannot read" in err
    evil = {"format": "kgd-export", "user": None, "projects": [
        {"slug": "../../escape", "project_path": "/tmp/somewhere/proj", "graph": {"nodes": {}, "edges": {}}}]}
    (tmp_path / "evil.json").write_text(json.dumps(evil))
    code, out, err = kgd("import", tmp_path / "evil.json", "--root", tmp_path / "r")
    assert code == 0, err
    assert not (tmp_path / "escape").exists() and "(proj)" in out


# ---------------------------------------------------------------- doctor

@pytest.mark.e2e
@pytest.mark.slow
def test_doctor(make_daemon, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    d = make_daemon(root=tmp_path / "r")
    d.json("PUT", "/api/nodes/user/n", {"gist": "g"})
    code, out, _ = kgd("doctor", "--root", tmp_path / "r", "--port", d.port, home=home)
    assert code == 0, out
    assert "ok    kgd" in out and "folders 0700, files 0600" in out
    assert "claude mcp add --transport http --scope user kg http://127.0.0.1:%d/" % d.port in out
    d.stop()
    os.chmod(tmp_path / "r" / "user.json", 0o644)
    os.makedirs(tmp_path / "r" / "projects" / "broken", mode=0o700)
    (tmp_path / "r" / "projects" / "broken" / "graph.json").write_text("{not json")
    os.chmod(tmp_path / "r" / "projects" / "broken" / "graph.json", 0o600)
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"kg": {"type": "http",
                                                                           "url": "http://localhost:8765/"}}}))
    code, out, _ = kgd("doctor", "--root", tmp_path / "r", "--port", free_port(), home=home)
    assert code == 1
    assert "FAIL" in out and "chmod" in out and "do not parse" in out and "localhost" in out
    assert "kgd is not running" in out
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        code, out, _ = kgd("doctor", "--root", tmp_path / "r", "--port", busy.getsockname()[1], "--skip-client",
                           home=home)
    assert "taken by another program" in out



@pytest.mark.e2e
def test_doctor_judges_each_client_entry_and_skips_odd_files(tmp_path):
    """Every Claude Code scope is read and each entry judged by its first matching rule; a client
    file whose mcpServers is not an object is passed over (doctor used to stop with a traceback)."""
    home, work, port = tmp_path / "home", tmp_path / "work", free_port()
    desktop = home / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    work.mkdir()
    desktop.write_text(json.dumps({"mcpServers": ["kg"]}))
    (home / ".claude.json").write_text(json.dumps({"mcpServers": [], "projects": {
        "/p/a": {"mcpServers": {"kg": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}},
        "/p/b": {"mcpServers": {"kg": {"command": "kgd", "args": ["stdio"]}}},
        "/p/c": ["not an object"]}}))
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"kg": {"type": "sse", "url": "http://x/"}}}))
    code, out, err, _ = run_kgd("doctor", "--root", tmp_path / "r", "--port", port, "--skip-service",
                                home=home, cwd=work)
    assert "Traceback" not in err and code == 1, (out, err)
    claude = str(home / ".claude.json")
    assert "FAIL  %s (project /p/a): the 'kg' entry points at http://127.0.0.1:1/mcp, not this daemon" % claude in out
    assert "ok    Claude Code entry 'kg' in %s (project /p/b) runs kgd stdio" % claude in out
    assert "warn  %s (user): the 'kg' entry is" % (work / ".mcp.json") in out
    assert "Claude Desktop" not in out and "/p/c" not in out

# ---------------------------------------------------------------- Claude Desktop

@pytest.mark.e2e
def test_desktop_entry_merges_and_keeps_a_backup(tmp_path):
    home = tmp_path / "home"
    conf = home / ".config" / "Claude" / "claude_desktop_config.json"
    conf.parent.mkdir(parents=True)
    conf.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}, "theme": "dark"}))
    code, out, err = kgd("desktop", home=home)
    assert code == 0, err
    obj = json.loads(conf.read_text())
    assert obj["theme"] == "dark" and obj["mcpServers"]["other"] == {"command": "x"}
    assert obj["mcpServers"]["kg"] == {"command": sys.executable, "args": [KGD, "stdio"]}
    backups = [p for p in os.listdir(conf.parent) if ".bak-" in p]
    assert len(backups) == 1
    assert json.loads((conf.parent / backups[0]).read_text())["mcpServers"] == {"other": {"command": "x"}}
    code, out, _ = kgd("desktop", home=home)  # idempotent: no rewrite, no new backup
    assert "unchanged" in out and len([p for p in os.listdir(conf.parent) if ".bak-" in p]) == 1
    code, out, _ = kgd("desktop", "--port", "9999", "--dry-run", home=home)
    assert '"9999"' in out and json.loads(conf.read_text())["mcpServers"]["kg"]["args"] == [KGD, "stdio"]
    code, out, _ = kgd("desktop", "--remove", home=home)
    assert "kg" not in json.loads(conf.read_text())["mcpServers"]
    conf.write_text("{broken")
    code, _, err = kgd("desktop", home=home)
    assert code == 1 and "not valid JSON" in err and conf.read_text() == "{broken"


@pytest.mark.e2e
def test_desktop_path_on_macos(tmp_path):
    home = tmp_path / "home"
    code, out, _ = kgd("desktop", "--dry-run", home=home, env={"KGD_INSTALL_OS": "darwin"})
    assert str(home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json") in out


def test_operator_command_names_match_cli():
    """cli.main imports kg/ops/commands.py only when one of OPERATOR_COMMANDS is on the command
    line; every registered subcommand must be in that list or it would be unreachable."""
    import argparse

    from kg.ops import cli, commands
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    commands.register(sub, cli.add_common)
    assert set(sub.choices) == set(cli.OPERATOR_COMMANDS)


def test_import_leaves_the_clones_name_behind(tmp_path):
    """A shared project's sync state travels in an export, but not this clone's name for its
    `.kg/changes/` files: the machine that imports names its own, so two clones never write files
    of one name (git would stop a pull on the two added files)."""
    shared = {"base": {"node": {"n": "s1"}, "edge": {}}, "own": {"node": {"n": "changes/c0ffee-1.nodes.jsonl"},
                                                                  "edge": {}},
              "clone": "c0ffee", "n": {"node": 1}}
    doc = {"format": "kgd-export", "user": None, "projects": [
        {"slug": "proj", "project_path": str(tmp_path / "proj"),
         "graph": {"nodes": {"n": {"id": "n", "gist": "g", "notes": [], "touches": []}}, "edges": {},
                   "_meta": {"level": "project", "kg_shared": shared}}}]}
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    code, out, err = kgd("import", tmp_path / "dump.json", "--root", tmp_path / "r")
    assert code == 0, err
    (graph,) = graph_files(tmp_path / "r").values()
    kept = graph["_meta"]["kg_shared"]
    assert "clone" not in kept and "n" not in kept
    assert kept["base"] == shared["base"] and kept["own"] == shared["own"]  # the rest is the sync state as it was


def test_import_carries_a_tasks_progress_date_with_it(tmp_path):
    """Task progress merges across machines by the later change (kg/travel/remote_progress.py),
    so an imported task keeps its date, also into a graph that already dates others."""
    def doc(task, when):
        return {"format": "kgd-export", "projects": [], "user": {
            "nodes": {}, "edges": {}, "_meta": {"level": "user", "progress": {task: {"step": 1}},
                                                "progress_changed": {task: when}}}}
    for i, (task, when) in enumerate((("a", 1700000000.5), ("b", 1700000100.25))):
        (tmp_path / ("d%d.json" % i)).write_text(json.dumps(doc(task, when)))
        code, _, err = kgd("import", tmp_path / ("d%d.json" % i), "--root", tmp_path / "r")
        assert code == 0, err
    meta = graph_files(tmp_path / "r")["user.json"]["_meta"]
    assert meta["progress"] == {"a": {"step": 1}, "b": {"step": 1}}
    assert meta["progress_changed"] == {"a": 1700000000.5, "b": 1700000100.25}
