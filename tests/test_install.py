"""install.sh: files written, service files valid, idempotent, clean uninstall, clear errors.

Every run uses a temporary HOME and --dry-run, --no-service or --no-start, so neither the real
~/.local, ~/.knowledge-graph nor the systemd / launchd user session is ever touched. Service
start-up is exercised with a fake `systemctl` first on PATH that starts kgd through the launcher.
"""

import hashlib
import http.client
import json
import os
import plistlib
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

from helpers import clean_env, free_port

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL = None  # install.sh in a snapshot of the source tree (see `snapshot`)
TOOLS = ["kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search", "kg_sync",
         "kg_progress"]


def health(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        r = c.getresponse()
        return json.loads(r.read()) if r.status == 200 else None
    except OSError:
        return None


@pytest.fixture(scope="module", autouse=True)
def snapshot(tmp_path_factory):
    """A copy of what install.sh installs, so edits to the working tree during the run (the
    project is being worked on) cannot make a second install differ from the first."""
    global INSTALL
    src = tmp_path_factory.mktemp("src")
    os.mkdir(src / "kg")
    for name in ("install.sh", "kgd.py", "README.md", "LICENSE"):
        shutil.copy2(os.path.join(REPO, name), str(src / name))
    for name in os.listdir(os.path.join(REPO, "kg")):
        path = os.path.join(REPO, "kg", name)
        if name.endswith(".py"):
            shutil.copy2(path, str(src / "kg" / name))
        elif os.path.isdir(path) and name != "__pycache__":  # the viewer's files (kg/serve/ui/)
            shutil.copytree(path, str(src / "kg" / name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    INSTALL = str(src / "install.sh")
    yield src


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    return h


def env_for(home, **extra):
    return clean_env(home, **dict({"KGD_PYTHON": sys.executable, "KG_STORAGE_ROOT": home / ".knowledge-graph"},
                                  **extra))


def run_install(home, *args, env=None, shell=None, check=True):
    r = subprocess.run([shell or "/bin/sh", INSTALL] + [str(a) for a in args], env=env or env_for(home),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, cwd=str(home))
    out, err = r.stdout.decode(), r.stderr.decode()
    if check:
        assert r.returncode == 0, (r.returncode, out, err)
    return r.returncode, out, err


def tree(root):
    """{relative path: (kind, mode, sha256 or None, mtime_ns)} for everything under root."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(folder, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, root)] = ("d" if stat.S_ISDIR(st.st_mode) else "f", stat.S_IMODE(st.st_mode),
                                             digest, st.st_mtime_ns)
    return out


def without_mtimes(t):
    return {k: v[:3] for k, v in t.items()}


def shown_file(out, path):
    """The content a dry run shows under `would write PATH`."""
    lines = out.splitlines()
    start = lines.index("would write %s" % path) + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        body.append(line[4:])
    return "\n".join(body) + "\n"


def prefix(home):
    return home / ".local" / "share" / "kgd"


def test_dry_run_changes_nothing_and_shows_everything(home):
    port = free_port()
    _, out, _ = run_install(home, "--dry-run", "--desktop", "--port", port)
    assert tree(home) == {}, "a dry run wrote files"
    url = "http://127.0.0.1:%d/" % port
    unit = str(home / ".config" / "systemd" / "user" / "kgd.service")
    assert "would write %s" % unit in out
    assert "    ExecStart=" in out  # the unit's content is shown
    assert "would run: systemctl --user daemon-reload && systemctl --user enable --now kgd.service" in out
    assert "claude mcp add --transport http --scope user kg %s" % url in out
    assert '"type": "http"' in out and '"url": "%s"' % url in out
    for tool in TOOLS:
        assert '"mcp__kg__%s"' % tool in out
    assert "localhost" not in out
    assert '"stdio"' in out  # the Claude Desktop entry it would add
    assert "dry run: nothing was changed" in out


def test_systemd_unit(home):
    port = free_port()
    _, dry, _ = run_install(home, "--dry-run", "--port", port)
    run_install(home, "--no-start", "--no-client", "--port", port)
    unit = home / ".config" / "systemd" / "user" / "kgd.service"
    text = unit.read_text()
    entry = prefix(home) / "kgd.py"
    assert 'ExecStart="%s" "%s" serve --port %d' % (sys.executable, entry, port) in text
    assert "WantedBy=default.target" in text and "Restart=on-failure" in text
    assert shown_file(dry, unit) == text, "the dry run showed another unit"
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # System mode: it parses and checks the unit without a user session (none is touched).
    r = subprocess.run([tool, "verify", str(unit)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                       env=clean_env())
    assert r.returncode == 0, r.stderr.decode()
    assert "kgd.service" not in r.stderr.decode(), r.stderr.decode()  # no warning about our unit


def test_launchd_plist_and_its_uninstall(home):
    before = tree(home)
    port = free_port()
    run_install(home, "--no-start", "--no-client", "--desktop", "--port", port,
                env=env_for(home, KGD_INSTALL_OS="darwin"))
    path = home / "Library" / "LaunchAgents" / "local.kgd.plist"
    with open(path, "rb") as f:
        plist = plistlib.load(f)
    assert plist["Label"] == "local.kgd"
    assert plist["ProgramArguments"] == [sys.executable, str(prefix(home) / "kgd.py"), "serve", "--port", str(port)]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardErrorPath"] == str(home / "Library" / "Logs" / "kgd.log")
    assert not (home / ".config" / "systemd").exists()
    assert (home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json").exists()
    run_install(home, "--uninstall", "--no-start")  # the manifest remembers it was a macOS install
    assert without_mtimes(tree(home)) == without_mtimes(before)


def test_launcher_starts_a_daemon(home, tmp_path):
    port = free_port()
    run_install(home, "--no-service", "--no-client", "--port", port)
    launcher = home / ".local" / "bin" / "kgd"
    assert os.access(launcher, os.X_OK)
    env = env_for(home, KG_STORAGE_ROOT=tmp_path / "root")
    proc = subprocess.Popen([str(launcher)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline().decode()
        assert "listening on http://127.0.0.1:%d/" % port in line, line
        h = health(port)
        assert h and h["status"] == "ok"
        r = subprocess.run([str(launcher), "stop"], env=env, stdout=subprocess.PIPE, timeout=30)
        assert r.returncode == 0 and b"stopped" in r.stdout
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_second_run_changes_nothing(home):
    port = free_port()
    args = ("--no-start", "--desktop", "--port", port)
    run_install(home, *args)
    first = tree(home)
    time.sleep(0.05)
    _, out, _ = run_install(home, *args)
    assert tree(home) == first  # hashes, modes and mtimes: nothing was even rewritten
    assert "wrote " not in out and "nothing changed" in out


def test_uninstall_removes_what_it_added_and_nothing_else(home):
    """Run by bash (macOS's /bin/sh is bash 3.2); every other test runs /bin/sh (dash here)."""
    shell = shutil.which("bash") or "/bin/sh"
    (home / ".knowledge-graph").mkdir(mode=0o700)
    (home / ".knowledge-graph" / "user.json").write_text('{"nodes": {}, "edges": {}}')
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "other-tool").write_text("#!/bin/sh\n")
    (home / ".config").mkdir()
    (home / ".config" / "other.conf").write_text("x")
    before = tree(home)
    port = free_port()
    run_install(home, "--no-start", "--desktop", "--port", port, shell=shell)
    assert (home / ".config" / "Claude" / "claude_desktop_config.json").exists()
    launcher = str(home / ".local" / "bin" / "kgd")
    subprocess.run([launcher, "--version"], env=env_for(home), check=True, stdout=subprocess.DEVNULL)  # __pycache__
    _, out, _ = run_install(home, "--uninstall", "--no-start", shell=shell)
    assert without_mtimes(tree(home)) == without_mtimes(before), out
    assert ".knowledge-graph" in out


FAKE_CLAUDE = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "mcp get") [ -f "$FAKE_STATE" ] || { echo "No MCP server found with name: $3" >&2; exit 1; }
             printf 'kg:\\n  Scope: User config\\n  Type: http\\n  URL: %s\\n' "$(cat "$FAKE_STATE")" ;;
  "mcp add") printf '%s' "$8" > "$FAKE_STATE" ;;
  "mcp remove") rm -f "$FAKE_STATE" ;;
esac
"""


def fake_bin(tmp_path, name, script):
    d = tmp_path / "fakebin"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(script)
    p.chmod(0o755)
    return d


def test_registers_with_claude_code_once(home, tmp_path):
    bindir = fake_bin(tmp_path, "claude", FAKE_CLAUDE)
    log, state = tmp_path / "claude.log", tmp_path / "claude.state"
    port = free_port()
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=log, FAKE_STATE=state)
    url = "http://127.0.0.1:%d/" % port
    run_install(home, "--no-service", "--port", port, env=env)
    calls = log.read_text().splitlines()
    assert "mcp add --transport http --scope user kg %s" % url in calls
    log.write_text("")
    _, out, _ = run_install(home, "--no-service", "--port", port, env=env)
    assert "already has kg" in out
    assert not any(c.startswith("mcp add") for c in log.read_text().splitlines())
    other = free_port()  # a new port replaces the entry
    run_install(home, "--no-service", "--port", other, env=env)
    assert state.read_text() == "http://127.0.0.1:%d/" % other
    run_install(home, "--uninstall", "--no-service", env=env)
    assert "mcp remove --scope user kg" in log.read_text().splitlines()
    assert not state.exists()


FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$*" in
  "--user show-environment"|"--user daemon-reload") exit 0 ;;
  "--user is-active --quiet kgd.service") [ -f "$FAKE_STATE" ] || exit 3 ;;
  "--user is-enabled --quiet kgd.service") [ -f "$FAKE_STATE" ] || exit 1 ;;
  "--user enable --now --quiet kgd.service") touch "$FAKE_STATE"; "$HOME/.local/bin/kgd" start >/dev/null ;;
  "--user restart kgd.service") "$HOME/.local/bin/kgd" stop >/dev/null; "$HOME/.local/bin/kgd" start >/dev/null ;;
  "--user disable --now kgd.service") rm -f "$FAKE_STATE"; "$HOME/.local/bin/kgd" stop >/dev/null ;;
  *) exit 0 ;;
esac
"""


def test_service_is_enabled_started_and_stopped(home, tmp_path):
    """The whole service path, with a stand-in systemctl that runs kgd through the launcher."""
    bindir = fake_bin(tmp_path, "systemctl", FAKE_SYSTEMCTL)
    log, state = tmp_path / "systemctl.log", tmp_path / "systemctl.state"
    port = free_port()
    root = tmp_path / "root"
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=log, FAKE_STATE=state,
                  KG_STORAGE_ROOT=root, KGD_INSTALL_OS="linux")
    try:
        _, out, _ = run_install(home, "--no-client", "--port", port, env=env)
        assert "kgd answers on http://127.0.0.1:%d/" % port in out
        assert health(port)["status"] == "ok"
        assert "--user enable --now --quiet kgd.service" in log.read_text()
        _, out, _ = run_install(home, "--no-client", "--port", port, env=env)  # running: left alone
        assert "restart" not in log.read_text() and "nothing changed" in out
        run_install(home, "--uninstall", "--no-client", env=env)
        assert "--user disable --now kgd.service" in log.read_text()
        assert health(port) is None
    finally:
        subprocess.run([sys.executable, INSTALL[:-len("install.sh")] + "kgd.py", "stop", "--root", str(root)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, env=clean_env())


def test_install_from_a_pyz(home, tmp_path, snapshot):
    pyz = tmp_path / "dist" / "kgd.pyz"
    pyz.parent.mkdir()
    subprocess.run([sys.executable, str(snapshot / "kgd.py"), "bundle", "-o", str(pyz)], check=True,
                   stdout=subprocess.DEVNULL, env=clean_env())
    port = free_port()
    run_install(home, "--no-service", "--no-client", "--from", pyz, "--port", port)
    assert sorted(os.listdir(prefix(home))) == [".kgd-install-manifest", "kgd.pyz"]
    r = subprocess.run([str(home / ".local" / "bin" / "kgd"), "--version"], env=env_for(home),
                       stdout=subprocess.PIPE, check=True)
    assert r.stdout.startswith(b"kgd ")
    run_install(home, "--no-service", "--no-client", "--port", port)  # switch to the source tree
    assert not (prefix(home) / "kgd.pyz").exists() and (prefix(home) / "kgd.py").exists()


@pytest.mark.slow
def test_errors_are_clear(home, tmp_path):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    env = env_for(home, PATH=str(empty))
    env.pop("KGD_PYTHON")
    code, _, err = run_install(home, "--dry-run", env=env, check=False)
    assert code != 0 and "python3 was not found on PATH" in err, err

    old = fake_bin(tmp_path, "python3", "#!/bin/sh\necho 3.8\n")
    code, _, err = run_install(home, "--dry-run", "--python", old / "python3", check=False)
    assert code != 0 and "Python 3.8" in err and "too old" in err and "3.9" in err, err

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, _, err = run_install(home, "--no-service", "--port", port, check=False)
    assert code != 0 and "port %d" % port in err and "in use by another program" in err, err
    assert "(pid %d, " % os.getpid() in err and "--port N" in err, err  # the program is named

    code, _, err = run_install(home, "--bogus", check=False)
    assert code != 0 and "unknown option --bogus" in err
    code, _, err = run_install(home, "--port", "http", check=False)
    assert code != 0 and "--port must be a number" in err
    assert tree(home) == {}


def test_a_foreign_launcher_is_not_overwritten(home):
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "kgd").write_text("#!/bin/sh\necho mine\n")
    code, _, err = run_install(home, "--no-service", "--no-client", "--port", free_port(), check=False)
    assert code != 0 and "was not written by this installer" in err
    assert (home / ".local" / "bin" / "kgd").read_text() == "#!/bin/sh\necho mine\n"


def test_a_kgd_already_on_the_port_is_fine_without_a_service(home, make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "r")
    _, out, _ = run_install(home, "--no-service", "--no-client", "--port", d.port)
    assert "kgd is installed" in out
    assert re.search(r'KG_HTTP_PORT:=%d' % d.port, (home / ".local" / "bin" / "kgd").read_text())


NO_BUS_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
echo "Failed to connect to bus: No medium found" >&2
exit 1
"""


def test_no_user_session_is_detected_before_anything_is_written(home, tmp_path):
    bindir = fake_bin(tmp_path, "systemctl", NO_BUS_SYSTEMCTL)
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=tmp_path / "log",
                  KGD_INSTALL_OS="linux")
    code, out, err = run_install(home, "--no-client", "--port", free_port(), env=env, check=False)
    assert code != 0 and "--no-service" in err and "user session" in err, err
    assert tree(home) == {}, "it wrote files before finding there is no user session"
    code, out, err = run_install(home, "--dry-run", "--no-client", "--port", free_port(), env=env)
    assert "a real run would stop" in out and "--no-service" in out
    assert (out + err).count("user session") == 1, out + err  # said once, not twice
    assert tree(home) == {}
    run_install(home, "--no-start", "--no-client", "--port", free_port(), env=env)  # no bus needed to write the unit
    assert (home / ".config" / "systemd" / "user" / "kgd.service").exists()


def test_uninstall_says_what_really_happened(home, tmp_path):
    port = free_port()
    run_install(home, "--no-start", "--no-client", "--port", port)
    _, out, _ = run_install(home, "--uninstall", "--dry-run")
    assert "kgd would be uninstalled." in out and "is would" not in out
    bindir = fake_bin(tmp_path, "systemctl", NO_BUS_SYSTEMCTL)
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=tmp_path / "log",
                  KGD_INSTALL_OS="linux")
    _, out, _ = run_install(home, "--uninstall", env=env)
    assert "stopped and disabled" not in out
    assert "could not stop and disable kgd.service" in out and "Failed to connect to bus" in out
    assert "kgd is uninstalled." in out


def test_every_file_of_the_package_is_installed(home, snapshot):
    run_install(home, "--no-service", "--no-client", "--port", free_port())
    want = set()
    for d, dirs, files in os.walk(str(snapshot / "kg")):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        want |= {os.path.relpath(os.path.join(d, f), str(snapshot)) for f in files if not f.endswith(".pyc")}
    have = {os.path.relpath(os.path.join(d, f), str(prefix(home))) for d, _, files in os.walk(str(prefix(home) / "kg"))
            for f in files if not f.endswith(".pyc")}
    assert want and want <= have, sorted(want - have)


def test_hooks_are_added_and_taken_away_leaving_the_rest(home):
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"permissions": {"allow": ["Bash(ls)"]},
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
    settings.write_text(json.dumps(mine))
    port = free_port()
    run_install(home, "--no-service", "--no-client", "--no-hooks", "--port", port)
    assert json.loads(settings.read_text()) == mine  # --no-hooks (and --no-client) leave it alone
    run_install(home, "--no-service", "--port", port)
    assert json.loads(settings.read_text()) == mine  # a re-run keeps them off
    _, out, _ = run_install(home, "--client", "--hooks", "--port", port)  # --no-service is kept
    assert "changed from the earlier install: --no-client -> --client" in out
    assert "changed from the earlier install: --no-hooks -> --hooks" in out
    assert "kept from the earlier install: --no-service" in out
    conf = json.loads(settings.read_text())
    assert conf["permissions"] == {"allow": ["Bash(ls)"] + ["mcp__kg__" + t for t in TOOLS]}
    assert {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"} <= set(conf["hooks"])
    assert "notify-send done" in json.dumps(conf["hooks"]["Stop"])
    assert " hook" in conf["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    assert "127.0.0.1:%d/api/hooks" % port in json.dumps(conf["hooks"]["UserPromptSubmit"])
    run_install(home, "--uninstall", "--no-service")
    assert settings.read_text() == json.dumps(mine)  # byte for byte
    assert os.listdir(str(settings.parent)) == ["settings.json"]  # no backup left


def test_permissions_are_added_unless_told_not_to(home):
    port = free_port()
    _, out, _ = run_install(home, "--no-service", "--port", port)
    settings = home / ".claude" / "settings.json"
    assert json.loads(settings.read_text())["permissions"]["allow"] == ["mcp__kg__" + t for t in TOOLS]
    assert "So that Claude Code does not ask" not in out  # nothing left to do by hand
    run_install(home, "--uninstall", "--no-service")
    _, out, _ = run_install(home, "--no-service", "--no-permissions", "--port", port)
    assert "permissions" not in json.loads(settings.read_text())
    assert "So that Claude Code does not ask" in out and '"mcp__kg__kg_read"' in out


def test_hooks_settings_made_by_the_installer_go_with_it(home):
    before = tree(home)
    run_install(home, "--no-service", "--port", free_port())
    assert (home / ".claude" / "settings.json").exists()
    run_install(home, "--uninstall", "--no-service")
    assert without_mtimes(tree(home)) == without_mtimes(before)  # no settings.json, backup or .prev left


def test_uninstall_stops_the_daemon_serving_the_installed_root(home, tmp_path):
    """A daemon started by hand (or by a hook) must not keep answering from deleted files."""
    port = free_port()
    root = tmp_path / "root"
    run_install(home, "--no-service", "--no-client", "--port", port, env=env_for(home, KG_STORAGE_ROOT=root))
    launcher = str(home / ".local" / "bin" / "kgd")
    subprocess.run([launcher, "start"], env=env_for(home, KG_STORAGE_ROOT=root), check=True,
                   stdout=subprocess.DEVNULL, timeout=30)
    try:
        assert health(port)["status"] == "ok"
        _, out, _ = run_install(home, "--uninstall", "--dry-run")
        assert "would stop the kgd serving %s" % root in out and health(port)
        _, out, _ = run_install(home, "--uninstall")  # the manifest names the root, not the environment
        assert health(port) is None, out
        assert "stopped; root %s is flushed" % root in out, out
    finally:
        subprocess.run(
            [sys.executable, INSTALL[: -len("install.sh")] + "kgd.py", "stop", "--root", str(root)],
            env=env_for(home),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )


def test_without_a_service_the_last_line_says_what_starts_kgd(home, tmp_path):
    """Where there is no user session (--no-service), the person must learn what starts the daemon."""
    bindir = fake_bin(tmp_path, "systemctl", NO_BUS_SYSTEMCTL)
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=tmp_path / "log",
                  KGD_INSTALL_OS="linux")
    port = free_port()
    _, out, _ = run_install(home, "--no-service", "--port", port, env=env)
    last = out.strip().splitlines()[-1]
    assert "without a service" in last and "SessionStart hook" in last and "kgd start" in last, out
    _, out, _ = run_install(home, "--no-service", "--no-hooks", "--port", port, env=env)
    last = out.strip().splitlines()[-1]
    assert "kgd start" in last and "SessionStart" not in last, out
    _, out, _ = run_install(home, "--no-service", "--dry-run", "--port", port, env=env)
    assert "kgd start" in out.strip().splitlines()[-1], out
    # and doctor does not send the person back to an installer that cannot put a service here
    r = subprocess.run([str(home / ".local" / "bin" / "kgd"), "doctor"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    text = r.stdout.decode()
    assert "install.sh installs one" not in text and "no user session here" in text, text
    assert "systemctl --user start" not in text, text


def test_a_dry_run_says_one_line_per_action(home):
    _, out, _ = run_install(home, "--dry-run", "--no-service", "--port", free_port())
    lines = out.splitlines()
    assert not any(line.startswith("would create folder") for line in lines), out
    assert not any(line.startswith("would write %s/kg/" % prefix(home)) for line in lines), out
    [copy] = [line for line in lines if line.startswith("would copy ")]
    assert "program file(s)" in copy and str(prefix(home)) in copy
    actions = [line for line in lines if line.startswith("would ")]
    assert len(actions) == len(set(actions)) and len(actions) <= 8, actions


def test_a_reader_that_goes_away_leaves_no_temp_folder(home, tmp_path):
    """`./install.sh --dry-run | head -1`: SIGPIPE must not leave the installer's temp folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line
    try:
        p = subprocess.Popen(["/bin/sh", INSTALL, "--dry-run", "--no-service", "--port", str(free_port())],
                             env=env_for(home, TMPDIR=tmp), stdout=w, stderr=subprocess.DEVNULL, cwd=str(home))
    finally:
        os.close(w)
    assert p.wait(60) != 0
    assert os.listdir(str(tmp)) == []


def test_other_agents_on_path_are_configured_and_unconfigured(home, tmp_path):
    """Codex CLI, Gemini CLI and Copilot CLI found on PATH get kgd's MCP entry and hooks."""
    bindir = None
    for agent in ("codex", "gemini", "copilot"):
        bindir = fake_bin(tmp_path, agent, "#!/bin/sh\nexit 0\n")
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text('{\n  "theme": "dark"\n}\n')
    before = tree(home)
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]))
    port = free_port()
    _, out, _ = run_install(home, "--no-service", "--port", port, env=env)
    url = "http://127.0.0.1:%d/mcp" % port
    assert 'url = "%s"' % url in (home / ".codex" / "config.toml").read_text()
    assert json.loads((home / ".gemini" / "settings.json").read_text())["mcpServers"]["kg"]["httpUrl"] == url
    assert json.loads((home / ".gemini" / "settings.json").read_text())["theme"] == "dark"
    assert json.loads((home / ".copilot" / "mcp-config.json").read_text())["mcpServers"]["kg"]["url"] == url
    for path, agent in ((".codex/hooks.json", "codex"), (".gemini/settings.json", "gemini"),
                        (".copilot/hooks/kgd.json", "copilot")):
        assert "hook --agent %s" % agent in (home / path).read_text()
    by_hand = [line for line in out.splitlines() if "by hand" in line]
    assert len(by_hand) == 1 and "Codex" in by_hand[0] and "/hooks" in by_hand[0], out
    _, out, _ = run_install(home, "--no-service", "--port", port, env=env)  # again: nothing changes
    assert "by hand" not in out and "unchanged" in out
    run_install(home, "--uninstall", "--no-service", env=env)
    assert without_mtimes(tree(home)) == without_mtimes(before)


def test_no_hooks_leaves_the_other_agents_alone(home, tmp_path):
    bindir = fake_bin(tmp_path, "codex", "#!/bin/sh\nexit 0\n")
    env = env_for(home, PATH="%s:%s" % (bindir, os.environ["PATH"]))
    run_install(home, "--no-service", "--no-hooks", "--port", free_port(), env=env)
    assert not (home / ".codex").exists()


def manifest(home):
    return dict(line.split(" ", 1) for line in (prefix(home) / ".kgd-install-manifest").read_text().splitlines()
                if not line.startswith("#") and line.split(" ", 1)[0] not in ("file", "dir"))


def hook_ports(home):
    text = (home / ".claude" / "settings.json").read_text()
    return set(re.findall(r"127\.0\.0\.1:(\d+)/api/hooks", text))


def test_a_rerun_without_options_keeps_what_the_install_was_given(home, tmp_path):
    """`./install.sh` again without --port moved an install made with --port 8766 to 8765: the
    hooks then pointed at a port no daemon served."""
    port = free_port()
    root = tmp_path / "my memory"  # a space: quoted everywhere it is written
    env = env_for(home, KG_STORAGE_ROOT=root, KG_TOKEN="s3cret-t0ken")
    run_install(home, "--no-start", "--desktop", "--no-permissions", "--port", port, env=env)
    unit = home / ".config" / "systemd" / "user" / "kgd.service"
    first = tree(home)
    m = manifest(home)
    assert (m["port"], m["root"], m["token"], m["desktop"], m["permissions"]) == (str(port), str(root), "1", "1", "0")
    assert "s3cret-t0ken" not in json.dumps(first) and "s3cret" not in "".join(
        (home / p).read_text() for p, v in first.items() if v[0] == "f" and not p.startswith(".local/share"))
    assert hook_ports(home) == {str(port)}
    assert '"--root" "%s"' % root in unit.read_text() or "--root \"%s\"" % root in unit.read_text()
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert "Bearer $KG_TOKEN" in json.dumps(settings) and "permissions" not in settings
    time.sleep(0.05)
    bare = env_for(home)
    del bare["KG_STORAGE_ROOT"]
    _, out, _ = run_install(home, "--no-start", env=bare)  # no --port, no root, no token, no --desktop
    assert tree(home) == first, out  # not one file rewritten
    assert "kept from the earlier install: --port %d, --root %s, the token (KG_TOKEN), --no-permissions, " \
        "--desktop" % (port, root) in out
    assert "nothing changed" in out
    # the launcher runs on that root unless told otherwise
    r = subprocess.run([str(home / ".local" / "bin" / "kgd"), "status", "--json"], env=bare,
                       stdout=subprocess.PIPE, timeout=30)
    assert json.loads(r.stdout)["root"] == str(root) and json.loads(r.stdout)["port"] == port


def test_an_option_given_again_changes_it_and_says_so(home, tmp_path):
    old, new = free_port(), free_port()
    run_install(home, "--no-start", "--port", old)
    _, out, _ = run_install(home, "--no-start", "--port", new)
    assert "changed from the earlier install: --port %d -> --port %d" % (old, new) in out
    assert hook_ports(home) == {str(new)} and manifest(home)["port"] == str(new)
    assert "--port %d" % new in (home / ".config" / "systemd" / "user" / "kgd.service").read_text()
    _, out, _ = run_install(home, "--no-start", "--no-service")
    assert "changed from the earlier install: --service -> --no-service" in out
    assert "kept from the earlier install: --port %d" % new in out
    _, out, _ = run_install(home, "--no-start")
    assert "kept from the earlier install: --port %d, --no-service" % new in out
    _, out, _ = run_install(home, "--no-start", "--port", "8765", "--service")
    assert "changed from the earlier install: --port %d -> --port 8765" % new in out
    assert "kept from the earlier install" not in out  # the defaults again: nothing to say
