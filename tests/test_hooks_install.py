"""`kgd hooks install|remove|print` (contract section 8): kgd's entries in ~/.claude/settings.json, and
nothing else, change."""

import json
import os
import shlex
import sys

import pytest

from kg.api.tools import TOOLS_BY_NAME

from helpers import KGD, run_kgd

pytestmark = pytest.mark.e2e

OTHERS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}],
        "Notification": [{"hooks": [{"type": "http", "url": "https://example.com/notify"}]}],
    },
}


TOOLS = ["kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search", "kg_sync",
         "kg_progress"]


def settings(home):
    return home / ".claude" / "settings.json"


def backups(home):
    return sorted(p for p in os.listdir(str(home / ".claude")) if ".bak-" in p)


def kgd_hooks(conf):
    out = {}
    for event, groups in conf.get("hooks", {}).items():
        for g in groups:
            for h in g["hooks"]:
                if "kgd" in h.get("command", "") or "/api/hooks" in h.get("url", ""):
                    out.setdefault(event, []).append((g.get("matcher"), h))
    return out


def test_install_twice_then_remove_changes_only_kgds_entries(tmp_path):
    home = tmp_path / "home"
    settings(home).parent.mkdir(parents=True)
    original = (json.dumps(OTHERS, indent=4) + "\n").encode()
    settings(home).write_bytes(original)
    os.chmod(str(settings(home)), 0o644)
    code, out, err, _ = run_kgd("hooks", "install", home=home)
    assert code == 0 and "added kgd's hooks" in out and "8 tool permission(s)" in out, err
    conf = json.loads(settings(home).read_text())
    assert {k: v for k, v in conf.items() if k not in ("hooks", "permissions")} == {
        k: v for k, v in OTHERS.items() if k not in ("hooks", "permissions")}
    assert conf["permissions"]["allow"] == ["Bash(ls:*)"] + ["mcp__kg__" + t for t in TOOLS]
    mine = kgd_hooks(conf)
    assert set(mine) == {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"}
    [(matcher, start)] = mine["SessionStart"]
    assert start["type"] == "command" and shlex.split(start["command"]) == [sys.executable, "-S", KGD, "hook"]
    [(matcher, post)] = mine["PostToolUse"]
    assert matcher == "Read|Edit|Write|MultiEdit|Grep|Glob|NotebookEdit|WebFetch|WebSearch"
    for event in ("UserPromptSubmit", "PostToolUse", "Stop"):
        [(_, h)] = mine[event]
        assert h["type"] == "http" and h["url"] == "http://127.0.0.1:8765/api/hooks" and 0 < h["timeout"] <= 10
        assert "headers" not in h
    # the other hooks are where they were
    assert conf["hooks"]["PostToolUse"][0] == OTHERS["hooks"]["PostToolUse"][0]
    assert conf["hooks"]["SessionStart"][0] == OTHERS["hooks"]["SessionStart"][0]
    assert conf["hooks"]["Notification"] == OTHERS["hooks"]["Notification"]
    # the person's formatting and mode are kept, so no backup is needed
    assert settings(home).read_text().startswith('{\n    "model": "opus",\n') and backups(home) == []
    assert os.stat(str(settings(home))).st_mode & 0o777 == 0o644

    first = settings(home).read_bytes()
    code, out, _, _ = run_kgd("hooks", "install", home=home)
    assert code == 0 and "unchanged" in out
    assert settings(home).read_bytes() == first and backups(home) == []

    code, out, err, _ = run_kgd("hooks", "remove", home=home)
    assert code == 0 and "removed kgd's 4 hook(s) and 8 tool permission(s)" in out, err
    assert settings(home).read_bytes() == original  # given back as it was: bytes, mode, no backup
    assert os.stat(str(settings(home))).st_mode & 0o777 == 0o644 and backups(home) == []
    code, out, _, _ = run_kgd("hooks", "remove", home=home)
    assert code == 0 and "nothing to remove" in out


def test_another_port_replaces_kgds_entries(tmp_path):
    home = tmp_path / "home"
    run_kgd("hooks", "install", home=home)
    code, out, _, _ = run_kgd("hooks", "install", "--port", "9100", "--root", tmp_path / "r", home=home)
    assert code == 0
    mine = kgd_hooks(json.loads(settings(home).read_text()))
    assert all(len(v) == 1 for v in mine.values())
    assert mine["Stop"][0][1]["url"] == "http://127.0.0.1:9100/api/hooks"
    words = shlex.split(mine["SessionStart"][0][1]["command"])
    assert words[-4:] == ["--port", "9100", "--root", str(tmp_path / "r")]


def test_a_token_is_referenced_never_written(tmp_path):
    home = tmp_path / "home"
    code, _, err, _ = run_kgd("hooks", "install", "--token", "very-secret", home=home)
    assert code == 0, err
    text = settings(home).read_text()
    assert "very-secret" not in text
    for event, hooks in kgd_hooks(json.loads(text)).items():
        for _, h in hooks:
            if h["type"] == "http":
                assert h["headers"] == {"Authorization": "Bearer $KG_TOKEN"} and h["allowedEnvVars"] == ["KG_TOKEN"]


def test_refuses_a_settings_file_that_is_not_an_object(tmp_path):
    home = tmp_path / "home"
    settings(home).parent.mkdir(parents=True)
    for text in ("[1, 2]", "{broken", '{"hooks": []}'):
        settings(home).write_text(text)
        code, out, err, _ = run_kgd("hooks", "install", home=home)
        assert code == 1 and err.count("\n") == 1 and settings(home).read_text() == text, err
    assert backups(home) == []


def test_dry_run_and_print_write_nothing(tmp_path):
    home = tmp_path / "home"
    code, out, _, _ = run_kgd("hooks", "install", "--dry-run", home=home)
    assert code == 0 and "would have added" in out and not (home / ".claude").exists()
    code, out, _, _ = run_kgd("hooks", "print", "--port", "9200", home=home)
    shown = json.loads(out)["hooks"]
    assert shown["Stop"][0]["hooks"][0]["url"] == "http://127.0.0.1:9200/api/hooks"
    assert not (home / ".claude").exists()
    code, _, err, _ = run_kgd("hooks", "install", "--port", "0", home=home)
    assert code == 1 and "fixed port" in err


def test_doctor_checks_the_hooks(tmp_path):
    home = tmp_path / "home"
    args = ("doctor", "--skip-service", "--root", tmp_path / "r", "--port", "9300")
    _, out, _, _ = run_kgd(*args, home=home)
    assert "warn  no kgd hooks in" in out and "kgd hooks install --port 9300" in out
    run_kgd("hooks", "install", "--port", "9300", home=home)
    _, out, _, _ = run_kgd(*args, home=home)
    assert "ok    Claude Code hooks in %s -> port 9300" % settings(home) in out
    run_kgd("hooks", "install", home=home)  # the default port: not the daemon's
    code, out, _, _ = run_kgd(*args, home=home)
    assert code == 1 and "FAIL  Claude Code hooks" in out and "not port 9300" in out


def test_the_permissions_name_every_tool_kgd_serves():
    from kg.ops.setup import claude_hooks
    assert sorted(claude_hooks.TOOL_NAMES) == sorted(TOOLS_BY_NAME) == sorted(TOOLS)


@pytest.mark.parametrize("text", [
    '{"model": "opus"}',                                         # one line, no final newline
    '{"model":"opus","permissions":{"allow":["Bash(ls)"]}}\n',   # compact, JavaScript's separators
    '{\n\t"model": "opus",\n\t"env": {\n\t\t"A": "\\u00e9"\n\t}\n}\n',  # tabs, \\u escapes
    '{\n  "model": "op\u00e9ra",\n  "permissions": {\n    "allow": []\n  }\n}\n',
])
def test_remove_gives_the_file_back_byte_for_byte(tmp_path, text):
    home = tmp_path / "home"
    settings(home).parent.mkdir(parents=True)
    settings(home).write_bytes(text.encode("utf-8"))
    os.chmod(str(settings(home)), 0o640)
    assert run_kgd("hooks", "install", home=home)[0] == 0
    code, out, err, _ = run_kgd("hooks", "remove", home=home)
    assert code == 0, err
    if '"allow": []' in text:  # kgd cannot tell an empty list it emptied from one that was empty
        assert json.loads(settings(home).read_text()) == {"model": "op\u00e9ra"}
    else:
        assert settings(home).read_bytes() == text.encode("utf-8")
    assert os.stat(str(settings(home))).st_mode & 0o777 == 0o640 and backups(home) == []


def test_formatting_it_cannot_keep_leaves_one_backup(tmp_path):
    home = tmp_path / "home"
    settings(home).parent.mkdir(parents=True)
    text = '{ "model" :   "opus",\n  "n": 1.50 }\n'  # hand-aligned: no json.dumps style gives it back
    settings(home).write_text(text)
    code, out, err, _ = run_kgd("hooks", "install", home=home)
    assert code == 0 and "backup" in out, err
    [b] = backups(home)
    assert (home / ".claude" / b).read_text() == text
    run_kgd("hooks", "remove", home=home)
    assert json.loads(settings(home).read_text()) == {"model": "opus", "n": 1.5}


def test_no_permissions_leaves_permissions_alone(tmp_path):
    home = tmp_path / "home"
    code, out, err, _ = run_kgd("hooks", "install", "--no-permissions", home=home)
    assert code == 0 and "tool permission" not in out, err
    conf = json.loads(settings(home).read_text())
    assert "permissions" not in conf and "SessionStart" in conf["hooks"]
    code, out, _, _ = run_kgd("hooks", "install", home=home)  # adds only what is missing
    assert code == 0 and "8 tool permission(s)" in out
