"""The command line: typos answered with the closest command, help, status, start, and the
structured-output setting."""

import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from kg.ops import cli
from kg.ops.config import ConfigError, resolve_config

from helpers import KGD, REPO, START_LINE, clean_env, free_port, run_kgd


class Args:
    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---------------------------------------------------------------- typos and help

@pytest.mark.e2e
@pytest.mark.parametrize("argv, expected", [
    (["statsu"], "unknown command 'statsu'; did you mean status?"),
    (["--prot", "9000"], "unknown option --prot; did you mean --port?"),
    (["status", "--jsn"], "unknown option --jsn; did you mean --json?"),
    (["exprot"], "did you mean export?"),
    (["--port", "9000", "hoks"], "did you mean hooks?"),
    (["hooks", "instal"], "unknown choice 'instal'; did you mean install? Choices: install, remove, print."),
])
def test_a_typo_names_the_closest_command_or_option(argv, expected):
    code, out, err, _ = run_kgd(*argv)
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and err.startswith("kgd: ") and expected in err, err
    if "command" in expected:
        for name in ("serve",) + cli.OPERATOR_COMMANDS:
            assert name in err


@pytest.mark.e2e
def test_nothing_close_still_names_the_commands():
    code, _, err, _ = run_kgd("xyzzy")
    assert code != 0 and "did you mean" not in err and "Commands: serve, status" in err


@pytest.mark.e2e
def test_help_describes_every_global_option():
    code, out, _, _ = run_kgd("--help")
    assert code == 0
    for option in ("--host", "--port", "--root", "--max-tokens", "--log-level", "--token", "--structured-output",
                   "--version"):
        line = next(line for line in out.splitlines() if line.strip().startswith(option))
        rest = line.strip()[len(option):].split(None, 1)
        assert len(rest) == 2 or "help" in line or "version" in line, line
    for name in cli.OPERATOR_COMMANDS:
        assert re.search(r"^\s+%s\s+\S" % name, out, re.M), name


@pytest.mark.e2e
def test_serve_imports_no_operator_module(tmp_path):
    """The background service stays small: `serve` loads none of the operator commands."""
    p = subprocess.Popen([sys.executable, "-S", "-X", "importtime", KGD, "--port", "0", "--root", str(tmp_path / "r")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(), cwd=REPO)
    lines = []
    try:
        for raw in iter(p.stderr.readline, b""):
            lines.append(raw.decode())
            if START_LINE.search(lines[-1]):
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(15)
    assert START_LINE.search(lines[-1]), "".join(lines[-5:])
    loaded = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    assert "kg.serve.http" in loaded
    for name in ("kg.ops.commands", "kg.ops.client", "kg.ops.backup", "kg.ops.doctor", "kg.ops.setup.desktop",
                 "kg.ops.browse", "kg.ops.setup.claude_hooks", "kg.ops.hook", "kg.ops.lifecycle", "kg.ops.disk_view",
                 "kg.ops.bundle", "zipapp", "subprocess"):
        assert name not in loaded, name


@pytest.mark.parametrize("module", ["kg.ops.cli", "kg.ops.commands", "kg.ops.client", "kg.ops.stdio", "kg.ops.backup",
                                    "kg.ops.doctor", "kg.ops.setup.desktop", "kg.ops.lifecycle", "kg.ops.bundle",
                                    "kg.ops.browse", "kg.ops.hook", "kg.ops.setup.claude_hooks", "kg.ops.disk_view",
                                    "kg.ops.setup.settings_file", "kg.ops.config", "kg.ops.suggest"])
def test_each_command_module_imports_alone(module):
    """No import cycle: each module imports first in a fresh interpreter; the bridge does not
    need the command table."""
    probe = "import sys, %s; print('kg.ops.commands' in sys.modules)" % module
    r = subprocess.run([sys.executable, "-S", "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=REPO, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    if module != "kg.ops.commands":
        assert r.stdout.decode().strip() == "False"


# ---------------------------------------------------------------- structured_output: off by default, for programs

@pytest.mark.parametrize("env, flag, expected", [
    ({}, None, False), ({"KG_STRUCTURED_OUTPUT": "1"}, None, True), ({"KG_STRUCTURED_OUTPUT": "Yes"}, None, True),
    ({"KG_STRUCTURED_OUTPUT": "true"}, None, True), ({"KG_STRUCTURED_OUTPUT": "0"}, None, False),
    ({"KG_STRUCTURED_OUTPUT": "no"}, None, False), ({"KG_STRUCTURED_OUTPUT": "false"}, True, True),
    ({"KG_STRUCTURED_OUTPUT": ""}, None, False)])
def test_structured_output_setting(env, flag, expected):
    assert resolve_config(Args(structured_output=flag), env)["structured_output"] is expected


@pytest.mark.e2e
def test_structured_output_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match="KG_STRUCTURED_OUTPUT='maybe' is not one of 1, true, yes, 0, false, no"):
        resolve_config(Args(), {"KG_STRUCTURED_OUTPUT": "maybe"})
    code, _, err, _ = run_kgd("--root", "/nonexistent/x", env={"KG_STRUCTURED_OUTPUT": "maybe"})
    assert code == 2 and err.count("\n") == 1 and "KG_STRUCTURED_OUTPUT" in err


@pytest.mark.e2e
def test_serve_hands_structured_output_to_the_daemon(tmp_path, monkeypatch):
    from kg.serve import app, http

    seen = {}

    class Refused(http.Daemon):
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)
            raise OSError(98, "in use")

    monkeypatch.setattr(app, "Daemon", Refused)  # kg/serve/app.py wires the daemon for `serve`
    cfg = resolve_config(Args(root=str(tmp_path / "r"), port="0", structured_output=True), {})
    assert cli.serve(cfg) == 2  # the refused port: one line, exit code 2
    assert seen == {"structured_output": True}


@pytest.mark.e2e
def test_structured_output_reaches_tools_list(make_daemon):
    """The setting reaches the tools: outputSchema in tools/list only when it is on."""
    plain = make_daemon(root=None, env={"KG_STRUCTURED_OUTPUT": "0"})  # the default mode
    tools = plain.rpc("tools/list")["result"]["tools"]
    structured = make_daemon(root=plain.root + "-2", args=["--structured-output"])
    tools_s = structured.rpc("tools/list")["result"]["tools"]
    assert all("outputSchema" in t for t in tools_s)
    assert not any("outputSchema" in t for t in tools)


# ---------------------------------------------------------------- status and start: right counts, one-line refusals

@pytest.mark.e2e
def test_status_counts_the_user_graph_in_the_right_number(make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "r")
    d.json("PUT", "/api/nodes/user/only", {"gist": "one node"})
    code, out, err, _ = run_kgd("status", "--root", tmp_path / "r", "--port", d.port)
    assert code == 0, err
    assert "user:     1 node (1 active, 0 archived, 0 orphaned), 0 edges" in out
    assert "1 nodes" not in out and "projects: none on disk" in out
    d.json("PUT", "/api/nodes/user/two", {"gist": "two nodes"})
    d.json("PUT", "/api/edges/user", {"from": "only", "to": "two", "rel": "next"})
    _, out, _, _ = run_kgd("status", "--root", tmp_path / "r")
    assert "user:     2 nodes (2 active, 0 archived, 0 orphaned), 1 edge\n" in out


@pytest.mark.e2e
@pytest.mark.parametrize("token", [None, "wrong"])
def test_status_with_a_missing_or_wrong_token_fails_in_one_line(make_daemon, tmp_path, token):
    make_daemon(root=tmp_path / "r", args=["--token", "s3cret"])
    args = ["status", "--root", tmp_path / "r"] + (["--token", token] if token else [])
    code, out, err, _ = run_kgd(*args)
    assert code == 1 and out == "", out
    assert err.count("\n") == 1 and "token" in err and ("missing" if token is None else "given") in err, err
    assert "project graph" not in err
    code, out, _, _ = run_kgd("status", "--root", tmp_path / "r", env={"KG_TOKEN": "s3cret"})
    assert code == 0 and "user:     0 nodes" in out


@pytest.mark.e2e
@pytest.mark.slow
def test_start_on_a_taken_port_says_so_once(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, out, err, _ = run_kgd("start", "--root", tmp_path / "r", "--port", port, "--timeout", "10")
    assert code == 1, (out, err)
    assert err.count("\n") == 1 and err.startswith("kgd: ") and err.count("kgd:") == 1, err
    assert "port %d" % port in err and "taken by another program" in err and "--port N" in err, err
    assert "pid %d, " % os.getpid() in err  # the program is named: this test's own Python holds it
    assert not (tmp_path / "r" / "kgd.log").exists()  # refused before a daemon was started to fail


MEMORY_SERVER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(60)
"""


@pytest.mark.e2e
def test_start_and_doctor_name_the_program_on_the_port(tmp_path):
    """Another memory server that also defaults to 8765 (contract section 13): named, with the --port fix."""
    script = tmp_path / "mcp-memory-service"
    script.write_text(MEMORY_SERVER)
    other = subprocess.Popen([sys.executable, str(script), "--http"], stdout=subprocess.PIPE, env=clean_env())
    try:
        port = int(other.stdout.readline())
        code, out, err, _ = run_kgd("start", "--root", tmp_path / "r", "--port", port)
        assert code == 1 and err.count("\n") == 1, (out, err)
        assert "pid %d, " % other.pid in err and "mcp-memory-service --http" in err and "--port N" in err, err
        code, out, err, _ = run_kgd("doctor", "--root", tmp_path / "r", "--port", port, "--skip-service",
                                    "--skip-client")
        assert code == 1 and "FAIL  port %d on 127.0.0.1 is taken by another program (pid %d, " % (
            port, other.pid) in out and "mcp-memory-service --http" in out and "--port N" in out, out
        code, out, err, _ = run_kgd("status", "--root", tmp_path / "r", "--port", port)
        assert code == 1 and "mcp-memory-service" in out, out
    finally:
        other.kill()
        other.wait()


@pytest.mark.e2e
def test_start_and_status_refuse_a_daemon_that_serves_another_root(make_daemon, tmp_path):
    """`kgd start --root X` must not call a daemon of another root "already running" for X."""
    d = make_daemon(root=tmp_path / "theirs")
    mine = tmp_path / "mine"
    for argv in (["start"], ["status"]):
        code, out, err, _ = run_kgd(*argv, "--root", mine, "--port", d.port)
        assert code == 1 and out == "", (argv, out, err)
        assert err.count("\n") == 1 and "another storage root" in err and "--port" in err, err
        assert "another storage root (%s)" % (tmp_path / "theirs") in err  # that root is named
        assert "kgd stop --root %s" % (tmp_path / "theirs") in err, err
    assert not mine.exists()
    code, out, _, _ = run_kgd("status", "--json", "--root", mine, "--port", d.port)
    assert code == 1 and "another storage root" in out
    code, out, _, _ = run_kgd("start", "--root", tmp_path / "theirs", "--port", d.port)
    assert code == 0 and "already running" in out  # its own root: fine


@pytest.mark.e2e
@pytest.mark.parametrize("main, prev, expected", [
    ("{ bad", None, "user.json does not parse; read as empty"),
    ("{ bad", "{ bad", "user.json and its .prev copy do not parse; read as empty"),
    ("{ bad", '{"nodes": {}, "edges": {}}', "user.json does not parse; read its .prev copy instead"),
    (None, "{ bad", "user.json is missing and its .prev copy does not parse; read as empty"),
])
def test_offline_show_says_a_bad_graph_file_in_one_line(tmp_path, main, prev, expected):
    root = tmp_path / "r"
    root.mkdir()
    for name, text in (("user.json", main), ("user.json.prev", prev)):
        if text is not None:
            (root / name).write_text(text)
    code, out, err, _ = run_kgd("show", "--root", root, "--port", free_port(), cwd=tmp_path)
    assert code == 0 and "## User graph" in out, err
    assert err.count("\n") == 1 and expected in err, err


@pytest.mark.e2e
@pytest.mark.parametrize("argv, like", [(["help"], ["--help"]), (["help", "status"], ["status", "--help"])])
def test_help_is_a_command(argv, like):
    code, out, err, _ = run_kgd(*argv)
    assert code == 0 and err == "", err
    assert out == run_kgd(*like)[1] and out.startswith("usage: kgd")


@pytest.mark.e2e
def test_bundle_without_output_writes_outside_the_current_folder(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    code, out, err, _ = run_kgd("bundle", "--no-bytecode", home=home, cwd=project)
    assert code == 0, err
    assert os.listdir(str(project)) == []
    made = home / ".cache" / "kgd" / "kgd.pyz"
    assert made.is_file() and "wrote %s" % made in out and "-o FILE" in out
