"""`./install.sh --uninstall --dry-run` says what the real uninstall then does, line for line: a
settings file that held nothing but kgd's entries is said to be removed (never that it "would read
{}"), and the folders the installer created are named when, and only when, the real run removes them.

Every run uses a temporary HOME and --no-service, so the real ~ and the user session are never touched.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import clean_env, free_port, run_kgd

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def install_sh(tmp_path_factory):
    """install.sh in a copy of the tree (the tree is edited while tests run)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("install.sh", "kgd.py", "README.md", "LICENSE"):
        shutil.copy2(os.path.join(REPO, name), str(src / name))
    shutil.copytree(os.path.join(REPO, "kg"), str(src / "kg"), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(src / "install.sh")


def fake_agents(tmp_path):
    """A PATH folder with a `codex` and a `gemini` that do nothing: install.sh then configures both."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for name in ("codex", "gemini"):
        (bindir / name).write_text("#!/bin/sh\nexit 0\n")
        os.chmod(str(bindir / name), 0o755)
    return str(bindir)


def run(install_sh, home, *args, path=None):
    env = clean_env(home, KGD_PYTHON=sys.executable, KG_STORAGE_ROOT=home / ".knowledge-graph",
                    **({"PATH": "%s:%s" % (path, os.environ["PATH"])} if path else {}))
    r = subprocess.run(["/bin/sh", install_sh] + [str(a) for a in args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120, cwd=str(home))
    assert r.returncode == 0, (r.stdout.decode(), r.stderr.decode())
    return r.stdout.decode().splitlines()


def as_real(line):
    """A dry-run line in the words the real run uses for the same step."""
    for dry, real in (("would have removed", "removed"), ("would remove", "removed"),
                      ("kgd would be uninstalled", "kgd is uninstalled")):
        line = line.replace(dry, real)
    return line


def plain(line):
    """A real-run line without the advice only a real change carries."""
    return line.replace("; this takes effect in new Claude Code sessions", "")


def listing(home):
    out = set()
    for d, dirs, files in os.walk(str(home)):
        out |= {os.path.relpath(os.path.join(d, x), str(home)) for x in dirs + files}
    return out


def uninstall_both_ways(install_sh, home, path=None):
    dry = run(install_sh, home, "--uninstall", "--dry-run", path=path)
    real = run(install_sh, home, "--uninstall", path=path)
    return dry, real


@pytest.mark.slow
def test_the_dry_run_says_what_the_real_run_does(install_sh, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    agents = fake_agents(tmp_path)
    run(install_sh, home, "--no-service", "--port", free_port(), path=agents)
    for f in (".claude/settings.json", ".codex/config.toml", ".codex/hooks.json", ".gemini/settings.json"):
        assert (home / f).exists(), f
    # the launcher run once: Python leaves __pycache__ folders in the program's folders
    launcher = str(home / ".local" / "bin" / "kgd")
    subprocess.run([launcher, "--version"], env=clean_env(home), stdout=subprocess.DEVNULL, timeout=30, check=True)
    dry, real = uninstall_both_ways(install_sh, home, path=agents)
    text = "\n".join(dry)
    assert "would read" not in text and "{}" not in text, text
    assert "hooks: would remove %s (nothing else in it)" % (home / ".claude" / "settings.json") in dry, text
    assert "would remove folder %s" % (home / ".claude") in dry, text
    assert [as_real(x) for x in dry] == [plain(x) for x in real], (dry, real)
    assert listing(home) == {".knowledge-graph"} or listing(home) == set(), sorted(listing(home))


@pytest.mark.slow
def test_what_the_person_keeps_is_not_said_to_go(install_sh, tmp_path):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    port = free_port()
    run(install_sh, home, "--no-service", "--port", port)
    settings = home / ".claude" / "settings.json"
    conf = json.loads(settings.read_text())
    conf["model"] = "opus"  # the person's own line, added after the install
    settings.write_text(json.dumps(conf, indent=2) + "\n")
    (home / ".local" / "bin" / "mine").write_text("a person's own script\n")
    dry, real = uninstall_both_ways(install_sh, home)
    text = "\n".join(dry)
    assert "the file would read:" in text and '"model": "opus"' in text, text
    assert "(nothing else in it)" not in text, text
    assert "would remove folder %s" % (home / ".local" / "bin") not in dry, text
    assert "would remove folder %s" % (home / ".local") not in dry, text
    assert [as_real(x) for x in dry if x.startswith(("would", "kgd"))] == [
        x for x in real if x.startswith(("removed", "kgd"))], (dry, real)
    assert json.loads(settings.read_text()) == {"model": "opus"}
    assert (home / ".local" / "bin" / "mine").exists()


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini", "copilot"])
def test_hooks_remove_dry_run_names_a_file_it_would_remove(tmp_path, agent):
    home = tmp_path / "home"
    code, _, err, _ = run_kgd("hooks", "install", "--agent", agent, "--port", "9311", home=home)
    assert code == 0, err
    code, dry, err, _ = run_kgd("hooks", "remove", "--agent", agent, "--dry-run", home=home)
    assert code == 0, err
    assert "would read" not in dry and "{}" not in dry, dry
    code, real, err, _ = run_kgd("hooks", "remove", "--agent", agent, home=home)
    assert code == 0, err
    gone = [x.rsplit("removed ", 1)[1][: -len(" (nothing else in it)")] for x in real.splitlines()
            if x.endswith("(nothing else in it)")]
    assert gone and all(not os.path.exists(p) for p in gone), real
    assert [as_real(x) for x in dry.splitlines()] == [plain(x) for x in real.splitlines()], (dry, real)


def test_desktop_remove_dry_run_names_the_file_it_would_remove(tmp_path):
    home = tmp_path / "home"
    config = tmp_path / "claude_desktop_config.json"
    run_kgd("desktop", "--config", config, home=home)
    assert config.exists()
    _, dry, _, _ = run_kgd("desktop", "--remove", "--config", config, "--dry-run", home=home)
    assert "null" not in dry and "would remove %s (nothing else in it)" % config in dry, dry
    _, real, _, _ = run_kgd("desktop", "--remove", "--config", config, home=home)
    assert not config.exists() and [as_real(x) for x in dry.splitlines()] == real.splitlines(), (dry, real)


def test_the_dry_run_warns_of_a_missing_user_session_under_its_header(install_sh, tmp_path):
    """The warning belongs to the run it describes: after the "Installing ..." line, said once."""
    home = tmp_path / "home"
    home.mkdir()
    bindir = tmp_path / "nobus"
    bindir.mkdir()
    (bindir / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    os.chmod(str(bindir / "systemctl"), 0o755)
    env = clean_env(home, KGD_PYTHON=sys.executable, KGD_INSTALL_OS="linux",
                    PATH="%s:%s" % (bindir, os.environ["PATH"]))
    r = subprocess.run(["/bin/sh", install_sh, "--dry-run", "--no-client", "--port", str(free_port())], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, cwd=str(home))
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 0 and lines[0].startswith("Installing kgd "), lines[:3]
    warned = [i for i, x in enumerate(lines) if x.startswith("warning: a real run would stop here")]
    assert warned == [2], lines[:4]  # after the header and "(dry run: nothing is changed)"
