"""`kgd sync`'s pieces without a daemon (contract section 9): which remotes it accepts, a missing
local path made into a bare repository, and the status lines."""

import os

import pytest

from kg.memory import git_runner
from kg.ops.sync import describe, offline_status, resolve_remote
from kg.travel.remote_repo import check_remote, write_config, write_status


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "fd::3", "-uhack", "", " ", "a\x00b", "x" * 5000,
                                 "https://h/x\n"])
def test_remotes_that_would_run_commands_or_options_are_refused(url):
    with pytest.raises(ValueError):
        check_remote(url)


@pytest.mark.parametrize("url", ["git@github.com:me/kg.git", "https://github.com/me/kg.git", "ssh://h:22/x.git",
                                 "/srv/git/kg.git", "file:///srv/git/kg.git"])
def test_urls_are_kept_as_given(url):
    assert check_remote(url) == url
    if "://" in url or "@" in url:
        assert resolve_remote(url) == (url, False)


def test_a_missing_local_path_becomes_an_empty_bare_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, created = resolve_remote("mem.git")
    assert created and path == os.path.join(str(tmp_path), "mem.git")
    assert git_runner.output(["rev-parse", "--is-bare-repository"], path) == "true"
    assert resolve_remote(path) == (path, False)


def test_a_path_under_a_missing_folder_is_refused(tmp_path):
    from kg.ops.console import CommandError

    with pytest.raises(CommandError):
        resolve_remote(str(tmp_path / "nope" / "mem.git"))


def test_status_lines(tmp_path):
    assert describe(None)[0].startswith("remote:   none")
    now = 1000000.0
    ok = {"remote": "/r", "enabled": True, "last_ok": now - 30, "last_error": None}
    assert describe(ok, now) == ["remote:   /r, last sync 30s ago"]
    failing = dict(ok, last_error={"at": now - 5, "kind": "offline", "message": "could not resolve host"})
    lines = describe(failing, now)
    assert "last sync 30s ago" in lines[0] and "last error 5s ago (offline): could not resolve host" in lines[1]
    recovered = dict(ok, last_error={"at": now - 60, "kind": "offline", "message": "x"})
    assert len(describe(recovered, now)) == 1
    assert "(off)" in describe(dict(ok, enabled=False), now)[0]


def test_offline_status_reads_the_files(tmp_path):
    root = str(tmp_path)
    assert offline_status(root) is None
    write_config(root, {"remote": "/r", "enabled": True})
    write_status(root, {"remote": "/r", "last_ok": 5.0, "last_error": None})
    st = offline_status(root)
    assert st["remote"] == "/r" and st["last_ok"] == 5.0 and st["enabled"] is True
    write_config(root, {"remote": "/other", "enabled": False})
    st = offline_status(root)
    assert st["remote"] == "/other" and "last_ok" not in st and st["enabled"] is False


def test_status_lines_say_what_waits_to_be_pushed():
    """Not "last sync 14s ago" alone while a commit waited for the next round."""
    now = 1000000.0
    ok = {"remote": "/r", "enabled": True, "last_ok": now - 14, "last_error": None}
    assert describe(dict(ok, waiting=0, next_round_in=20), now) == ["remote:   /r, last sync 14s ago"]
    assert describe(dict(ok, waiting=1, next_round_in=16.4), now) == [
        "remote:   /r, last sync 14s ago; 1 change waits to be pushed (in about 16s)"]
    assert describe(dict(ok, waiting=3, next_round_in=0), now)[0].endswith(
        "; 3 changes wait to be pushed (pushing now)")
    assert describe(dict(ok, waiting=2, next_round_in=290), now)[0].endswith("(in about 4m)")
    assert describe(dict(ok, waiting=2), now)[0].endswith("; 2 changes wait to be pushed (pushed when kgd starts)")
    assert "kgd sync --remote turns it on" in describe(dict(ok, waiting=2, enabled=False), now)[0]


def test_offline_status_keeps_what_waits(tmp_path):
    root = str(tmp_path)
    write_config(root, {"remote": "/r", "enabled": True})
    write_status(root, {"remote": "/r", "last_ok": 5.0, "last_error": None, "waiting": 4})
    assert offline_status(root)["waiting"] == 4
