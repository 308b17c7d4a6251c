"""Running git (contract section 9): never a prompt, never the caller's repository, a timeout that
kills, failures sorted into what a person can do about them."""

import os
import time

import pytest

from kg.memory import git_runner

from helpers import clean_env


def test_env_drops_redirects_and_prompts(tmp_path):
    env = git_runner.git_env(
        {
            "GIT_DIR": "/elsewhere",
            "GIT_WORK_TREE": "/x",
            "GIT_INDEX_FILE": "/i",
            "PATH": os.environ["PATH"],
            "GIT_ASKPASS": "/bin/askpass",
            "HOME": str(tmp_path),
        }
    )
    assert "GIT_DIR" not in env and "GIT_WORK_TREE" not in env and "GIT_INDEX_FILE" not in env
    assert "GIT_ASKPASS" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_PAGER"] == "cat" and env["GIT_EDITOR"] == "true"
    assert "BatchMode=yes" in env["GIT_SSH_COMMAND"]
    mine = git_runner.git_env({"GIT_SSH_COMMAND": "ssh -i key", "PATH": "/bin"})
    assert mine["GIT_SSH_COMMAND"] == "ssh -i key"


def test_a_leaked_git_dir_does_not_redirect_git(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        git_runner.run(["init", "-q"], str(d))
    monkeypatch.setenv("GIT_DIR", str(b / ".git"))
    top = git_runner.output(["rev-parse", "--absolute-git-dir"], str(a))
    assert os.path.realpath(top) == os.path.realpath(str(a / ".git"))


def test_commit_identity_and_no_signing_whatever_the_user_config(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[commit]\n\tgpgsign = true\n[user]\n\tsigningkey = NOPE\n")
    repo = tmp_path / "r"
    repo.mkdir()
    env = clean_env(home)
    git_runner.run(["init", "-q"], str(repo), env=env)
    (repo / "f").write_text("x\n")
    git_runner.run(["add", "f"], str(repo), env=env)
    git_runner.run(["commit", "-q", "-m", "m"], str(repo), env=env)
    who = git_runner.output(["log", "-1", "--format=%an <%ae>"], str(repo))
    assert who == "kgd <kgd@%s>" % git_runner.host_name()


def test_repository_hooks_never_run(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git_runner.run(["init", "-q"], str(repo))
    marker = tmp_path / "ran"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch %s\nexit 1\n" % marker)
    hook.chmod(0o755)
    (repo / "f").write_text("x\n")
    git_runner.run(["add", "f"], str(repo))
    git_runner.run(["commit", "-q", "-m", "m"], str(repo))
    assert not marker.exists()


def test_timeout_kills_git_and_its_children(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git_runner.run(["init", "-q"], str(repo))
    pidfile = tmp_path / "pid"
    # an alias that runs a shell which starts a long sleep: both must die on timeout
    t0 = time.monotonic()
    with pytest.raises(git_runner.GitError) as e:
        git_runner.run(["-c", "alias.hang=!sh -c 'sleep 30 & echo $! > %s; wait'" % pidfile, "hang"], str(repo),
                       timeout=1)
    assert e.value.kind == "timeout" and time.monotonic() - t0 < 10
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    try:
        os.kill(pid, 0)
        alive = open("/proc/%d/stat" % pid).read().split()[2] != "Z" if os.path.exists("/proc/%d" % pid) else True
    except OSError:
        alive = False
    assert not alive


def test_no_prompt_for_a_password(tmp_path):
    """An https remote that wants a password fails at once instead of asking on the terminal."""
    repo = tmp_path / "r"
    repo.mkdir()
    git_runner.run(["init", "-q"], str(repo))
    # A local HTTP server answering 401 would be nicer; a refused port must fail fast with no prompt.
    with pytest.raises(git_runner.GitError) as e:
        git_runner.run(["ls-remote", "https://127.0.0.1:9/x.git"], str(repo), timeout=30)
    assert e.value.kind in ("offline", "auth")


def test_missing_remote_path_is_no_remote(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git_runner.run(["init", "-q"], str(repo))
    with pytest.raises(git_runner.GitError) as e:
        git_runner.run(["fetch", str(tmp_path / "gone.git")], str(repo))
    assert e.value.kind == "no_remote"
    assert "\n" not in e.value.message


@pytest.mark.parametrize("stderr,kind", [
    ("fatal: unable to access 'https://h/x/': Could not resolve host: h", "offline"),
    ("remote: Invalid username or password.\nfatal: Authentication failed for 'https://h/x/'", "auth"),
    ("git@h: Permission denied (publickey).\nfatal: Could not read from remote repository.", "auth"),
    (" ! [rejected]        HEAD -> main (fetch first)\nerror: failed to push some refs to '/r'", "rejected"),
    ("fatal: '/gone' does not appear to be a git repository", "no_remote"),
    ("fatal: something else", "failed"),
])
def test_classify(stderr, kind):
    assert git_runner.classify(stderr) == kind


def test_git_missing_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(git_runner.GitError) as e:
        git_runner.run(["--version"], str(tmp_path))
    assert e.value.kind == "missing" and "git" in e.value.message
    assert git_runner.available() is False
