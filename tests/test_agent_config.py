"""`kgd hooks install|remove|print --agent codex|gemini|copilot` (contract section 11): each agent's own
MCP entry and hooks written the careful way, table-driven (one row per agent)."""

import json
import os
import shlex
import stat
import sys

import pytest

from helpers import KGD, run_kgd

pytestmark = pytest.mark.e2e

# agent -> where kgd writes, and a person's own file content to keep (in each file's own style)
AGENTS = {
    "codex": {
        "mcp": ".codex/config.toml",
        "hooks": ".codex/hooks.json",
        "events": ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"],
        "flat": False,
        "mine_mcp": '# my Codex\nmodel = "o3"\n\n[mcp_servers.other]\nurl = "http://127.0.0.1:9/mcp"\n',
        "mine_hooks": json.dumps(
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}]}},
            indent=2,
        )
        + "\n",
    },
    "gemini": {
        "mcp": ".gemini/settings.json",
        "hooks": ".gemini/settings.json",
        "events": ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent"],
        "flat": False,
        "mine_mcp": json.dumps(
            {
                "theme": "dark",
                "mcpServers": {"other": {"httpUrl": "http://127.0.0.1:9/mcp"}},
                "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
            },
            indent=4,
        )
        + "\n",
    },
    "copilot": {
        "mcp": ".copilot/mcp-config.json",
        "hooks": ".copilot/hooks/kgd.json",
        "events": ["sessionStart", "userPromptSubmitted", "postToolUse", "agentStop"],
        "flat": True,
        "mine_mcp": json.dumps(
            {"mcpServers": {"other": {"type": "http", "url": "http://127.0.0.1:9/mcp", "tools": ["*"]}}}, indent=2
        )
        + "\n",
    },
}
NAMES = sorted(AGENTS)


def kgd(home, *args):
    return run_kgd("hooks", *args, home=home)


def files_of(home, name):
    a = AGENTS[name]
    return sorted({home / a["mcp"], home / a["hooks"]})


def snapshot(home):
    out = {}
    for folder, _, names in os.walk(str(home)):
        for n in names:
            p = os.path.join(folder, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, str(home))] = (f.read(), stat.S_IMODE(os.lstat(p).st_mode))
    return out


def kgd_hooks(home, name):
    """{event: [the command of each kgd hook]}."""
    a = AGENTS[name]
    conf = json.loads((home / a["hooks"]).read_text())
    out = {}
    for event, entries in conf.get("hooks", {}).items():
        hooks = entries if a["flat"] else [h for g in entries for h in g["hooks"]]
        for h in hooks:
            cmd = h.get("command") or h.get("bash") or ""
            if "kgd.py" in cmd:
                out.setdefault(event, []).append(cmd)
    return out


def mcp_url(home, name):
    path = home / AGENTS[name]["mcp"]
    if name == "codex":
        text = path.read_text()
        start = text.index("[mcp_servers.kg]")
        line = next(ln for ln in text[start:].splitlines() if ln.startswith("url = "))
        return line.split('"')[1]
    entry = json.loads(path.read_text())["mcpServers"]["kg"]
    return entry.get("httpUrl") or entry.get("url")


@pytest.mark.parametrize("name", NAMES)
def test_install_into_an_empty_home_then_remove_leaves_nothing(tmp_path, name):
    home = tmp_path / "home"
    home.mkdir()
    code, out, err, _ = kgd(home, "install", "--agent", name)
    assert code == 0, err
    assert mcp_url(home, name) == "http://127.0.0.1:8765/mcp"
    mine = kgd_hooks(home, name)
    assert sorted(mine) == sorted(AGENTS[name]["events"])
    for event, [cmd] in mine.items():
        words = shlex.split(cmd)
        assert words[:4] == [sys.executable, "-S", KGD, "hook"] and words[4:6] == ["--agent", name], words
        if name == "copilot":  # its input names no event: the command does
            assert words[6:8] == ["--event", event]
    by_hand = [line for line in out.splitlines() if "by hand" in line]
    if name == "codex":
        assert len(by_hand) == 1 and "/hooks" in by_hand[0] and "trust" in by_hand[0], out
    else:
        assert by_hand == [], out
    for path in files_of(home, name):
        assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    first = snapshot(home)
    code, out, _, _ = kgd(home, "install", "--agent", name)
    assert code == 0 and "unchanged" in out and snapshot(home) == first
    code, out, err, _ = kgd(home, "remove", "--agent", name)
    assert code == 0 and "removed" in out, err
    assert snapshot(home) == {}, "kgd's files should go with kgd's entries"
    code, out, _, _ = kgd(home, "remove", "--agent", name)
    assert code == 0 and "nothing to remove" in out


@pytest.mark.parametrize("name", NAMES)
def test_the_persons_files_come_back_byte_for_byte(tmp_path, name):
    home = tmp_path / "home"
    a = AGENTS[name]
    (home / a["mcp"]).parent.mkdir(parents=True)
    (home / a["mcp"]).write_text(a["mine_mcp"])
    os.chmod(str(home / a["mcp"]), 0o644)
    if a.get("mine_hooks"):
        (home / a["hooks"]).write_text(a["mine_hooks"])
    before = snapshot(home)
    code, out, err, _ = kgd(home, "install", "--agent", name)
    assert code == 0, err
    assert "backup" not in out and not any(".bak-" in p for p in snapshot(home))
    # the person's own entries are still there, and kgd's beside them
    text = (home / a["mcp"]).read_text()
    assert "other" in text and "127.0.0.1:9/mcp" in text and mcp_url(home, name).endswith(":8765/mcp")
    if a.get("mine_hooks") or name == "gemini":
        assert "notify-send done" in (home / a["hooks"]).read_text()
    assert stat.S_IMODE(os.stat(str(home / a["mcp"])).st_mode) == 0o644
    code, out, err, _ = kgd(home, "install", "--agent", name, "--port", "9100")  # a new port: updated in place
    assert code == 0 and "updated" in out, err
    assert mcp_url(home, name) == "http://127.0.0.1:9100/mcp"
    assert all("--port 9100" in c for cmds in kgd_hooks(home, name).values() for c in cmds)
    code, out, err, _ = kgd(home, "remove", "--agent", name)
    assert code == 0, err
    assert snapshot(home) == before


@pytest.mark.parametrize("name", NAMES)
def test_a_symlinked_file_is_edited_where_it_points(tmp_path, name):
    home = tmp_path / "home"
    a = AGENTS[name]
    dots = tmp_path / "dotfiles" / "mcp"
    dots.parent.mkdir()
    dots.write_text(a["mine_mcp"])
    (home / a["mcp"]).parent.mkdir(parents=True)
    os.symlink(str(dots), str(home / a["mcp"]))
    code, _, err, _ = kgd(home, "install", "--agent", name)
    assert code == 0, err
    assert os.path.islink(str(home / a["mcp"])) and "8765/mcp" in dots.read_text()
    kgd(home, "remove", "--agent", name)
    assert os.path.islink(str(home / a["mcp"])) and dots.read_text() == a["mine_mcp"]


@pytest.mark.parametrize("name", NAMES)
def test_a_read_only_file_is_refused(tmp_path, name):
    home = tmp_path / "home"
    a = AGENTS[name]
    (home / a["mcp"]).parent.mkdir(parents=True)
    (home / a["mcp"]).write_text(a["mine_mcp"])
    os.chmod(str(home / a["mcp"]), 0o444)
    before = snapshot(home)
    code, out, err, _ = kgd(home, "install", "--agent", name)
    assert code == 1 and err.count("\n") == 1 and "read-only" in err, (out, err)
    assert snapshot(home) == before


MALFORMED = {"codex": "model = [1,\n", "gemini": "{broken", "copilot": "[1, 2]"}


@pytest.mark.parametrize("name", NAMES)
def test_a_malformed_file_is_refused_in_one_line(tmp_path, name):
    if name == "codex":
        pytest.importorskip("tomllib")  # Python 3.11+: older ones cannot check TOML, only kgd's markers
    home = tmp_path / "home"
    path = home / AGENTS[name]["mcp"]
    path.parent.mkdir(parents=True)
    path.write_text(MALFORMED[name])
    before = snapshot(home)
    for action in ("install", "remove"):
        code, out, err, _ = kgd(home, action, "--agent", name)
        if action == "remove" and name == "copilot":
            continue  # its hooks file is its own; the malformed mcp-config.json is only read on install
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, (action, out, err)
        assert str(path) in err
    assert snapshot(home) == before


@pytest.mark.parametrize("name", NAMES)
def test_a_kg_server_that_is_not_kgd_is_refused(tmp_path, name):
    home = tmp_path / "home"
    path = home / AGENTS[name]["mcp"]
    path.parent.mkdir(parents=True)
    if name == "codex":
        path.write_text('[mcp_servers.kg]\ncommand = "some-other-kg"\n')
    else:
        path.write_text(json.dumps({"mcpServers": {"kg": {"command": "some-other-kg"}}}))
    before = snapshot(home)
    code, out, err, _ = kgd(home, "install", "--agent", name)
    assert code == 1 and err.count("\n") == 1 and "kg" in err, (out, err)
    assert snapshot(home) == before


def test_codex_block_without_its_end_is_refused(tmp_path):
    home = tmp_path / "home"
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('model = "o3"\n# >>> kgd >>> (written by `kgd hooks install`; `kgd hooks remove` takes it out)\n'
                    '[mcp_servers.kg]\nurl = "http://127.0.0.1:8765/mcp"\n')
    for action in ("install", "remove"):
        code, _, err, _ = kgd(home, action, "--agent", "codex")
        assert code == 1 and "end marker" in err and err.count("\n") == 1


def test_codex_file_without_a_final_line_break_comes_back(tmp_path):
    home = tmp_path / "home"
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('model = "o3"')
    kgd(home, "install", "--agent", "codex")
    assert path.read_text().startswith('model = "o3"\n')
    kgd(home, "remove", "--agent", "codex")
    assert path.read_text() == 'model = "o3"'


@pytest.mark.parametrize("name", NAMES)
def test_print_and_dry_run_write_nothing(tmp_path, name):
    home = tmp_path / "home"
    home.mkdir()
    code, out, _, _ = kgd(home, "print", "--agent", name, "--port", "9200")
    assert code == 0 and "127.0.0.1:9200/mcp" in out and "hook --agent %s" % name in out
    code, out, _, _ = kgd(home, "install", "--agent", name, "--dry-run")
    assert code == 0 and "would add" in out
    assert snapshot(home) == {}


def test_all_installs_the_agents_found_and_removes_every_one(tmp_path):
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)  # Gemini CLI is "here"; the others are not on this PATH
    env_path = str(tmp_path / "nobin")
    code, out, err, _ = run_kgd("hooks", "install", "--agent", "all", home=home, env={"PATH": env_path})
    assert code == 0, err
    assert (home / ".claude" / "settings.json").exists() and (home / ".gemini" / "settings.json").exists()
    assert not (home / ".codex").exists() and not (home / ".copilot").exists()
    code, out, err, _ = run_kgd("hooks", "remove", "--agent", "all", home=home, env={"PATH": env_path})
    assert code == 0, err
    assert snapshot(home) == {}


def test_the_agent_folder_follows_its_environment_variable(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "codexhome"
    code, _, err, _ = run_kgd("hooks", "install", "--agent", "codex", home=home, env={"CODEX_HOME": elsewhere})
    assert code == 0, err
    assert (elsewhere / "config.toml").exists() and not (home / ".codex").exists()


@pytest.mark.parametrize("name", NAMES)
def test_doctor_checks_each_agent(tmp_path, name):
    home = tmp_path / "home"
    (home / AGENTS[name]["mcp"]).parent.mkdir(parents=True)
    args = ("doctor", "--skip-service", "--root", tmp_path / "r", "--port", "9300")
    _, out, _, _ = run_kgd(*args, home=home)
    label = {"codex": "Codex CLI", "gemini": "Gemini CLI", "copilot": "Copilot CLI"}[name]
    assert "warn  %s has no kg MCP server" % label in out and "kgd hooks install --agent %s --port 9300" % name in out
    kgd(home, "install", "--agent", name, "--port", "9300")
    _, out, _, _ = run_kgd(*args, home=home)
    assert "ok    %s MCP server kg" % label in out and "ok    %s hooks in" % label in out, out
    kgd(home, "install", "--agent", name)  # the default port: not the daemon's
    code, out, _, _ = run_kgd(*args, home=home)
    assert code == 1 and "FAIL  %s's kg MCP server points at" % label in out and "not 9300" in out, out


def test_codex_hooks_set_the_hook_context_limit_the_preload_needs(tmp_path):
    """Contract section 13: Codex cuts hook context over additionalContextLimit (default 2,500 tokens,
    one per 4 bytes) into a file; kgd's SessionStart, UserPromptSubmit and PostToolUse hooks set a
    limit that holds the whole preload in any script, and Stop (which adds no context) none."""
    from kg.agents import dialects, preload

    home = tmp_path / "home"
    home.mkdir()
    code, _, err, _ = kgd(home, "install", "--agent", "codex")
    assert code == 0, err
    conf = json.loads((home / ".codex" / "hooks.json").read_text())
    limits = {event: [h.get("additionalContextLimit") for g in groups for h in g["hooks"]]
              for event, groups in conf["hooks"].items()}
    want = dialects.HOOK_CONTEXT_LIMITS["codex"]
    assert limits == {"SessionStart": [want], "UserPromptSubmit": [want], "PostToolUse": [want], "Stop": [None]}
    assert want * 4 >= preload.PRELOAD_LIMIT * 4    # Codex's tokens (4 bytes) vs the preload's worst UTF-8 bytes
    assert want > 2500


def test_codex_hooks_of_an_older_kgd_are_brought_up_to_date(tmp_path):
    """A hooks.json written before the limit existed: install replaces kgd's entries, keeps the person's."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    code, _, err, _ = kgd(home, "install", "--agent", "codex")
    assert code == 0, err
    path = home / ".codex" / "hooks.json"
    conf = json.loads(path.read_text())
    for groups in conf["hooks"].values():
        for g in groups:
            for h in g["hooks"]:
                h.pop("additionalContextLimit", None)
    conf["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]})
    path.write_text(json.dumps(conf, indent=2) + "\n")
    code, out, err, _ = kgd(home, "install", "--agent", "codex")
    assert code == 0 and "unchanged" not in out, (out, err)
    conf = json.loads(path.read_text())
    assert conf["hooks"]["SessionStart"][0]["hooks"][0]["additionalContextLimit"] > 2500
    assert any(h["command"] == "notify-send done" for g in conf["hooks"]["Stop"] for h in g["hooks"])
