"""Contract section 12's cost rule, "no git call on the request path of a read or a hook", checked
where git could run: the git runner (kg/memory/git_runner.py) and every process start are wrapped in
process, through the tools' own entry (kg/api/tools.py call) and the hook handler; and a real daemon
and a real `kgd hook` process run with a `git` on their PATH that logs each call. Each test first
shows its wrapper sees git when the stale-marks pass runs it, so an empty list proves something."""

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from kg.agents import loop as hooks
from kg.api import tools
from kg.memory import git_runner
from kg.memory.store import Settings, Store

from helpers import clean_env, run_kgd, start

REAL_GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(REAL_GIT is None, reason="git is not installed")


def git(cwd, *args):
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
                    GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_NOSYSTEM="1")
    subprocess.run([REAL_GIT] + list(args), cwd=str(cwd), env=env, check=True, capture_output=True)


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "pool.py").write_text("def acquire():\n    return 1\n")
    (repo / "src" / "cache.py").write_text("def get():\n    return 2\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    return repo


def change_pool(repo):
    (repo / "src" / "pool.py").write_text("def acquire(timeout):\n    return 1\n")
    git(repo, "commit", "-qam", "acquire takes a timeout")


def text_of(result):
    assert not result.get("isError"), result
    return result["content"][0]["text"]


def test_no_git_in_a_tool_call_or_a_hook(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    store = Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9)).open()
    try:
        sid = text_of(tools.call(store, "kg_read", {"cwd": str(repo)})).split("\n", 1)[0].split(": ")[1]
        call = lambda name, **a: text_of(tools.call(store, name, dict(a, session_id=sid)))  # noqa: E731
        call("kg_put_node", level="project", id="pool-acquire", gist="the pool blocks on acquire",
             touches=["src/pool.py#acquire"])
        call("kg_put_edge", level="project", **{"from": "pool-acquire", "to": "src/pool.py", "rel": "lives-in"})
        change_pool(repo)
        calls = []
        real_run, real_popen = git_runner.run, subprocess.Popen

        def run(args, *a, **kw):
            calls.append(("runner", threading.current_thread().name, args[0]))
            return real_run(args, *a, **kw)

        class Popen(real_popen):
            def __init__(self, argv, *a, **kw):
                words = [argv] if isinstance(argv, str) else list(argv)
                if words and "git" in os.path.basename(str(words[0])):
                    calls.append(("process", threading.current_thread().name, " ".join(map(str, words[1:3]))))
                super().__init__(argv, *a, **kw)
        monkeypatch.setattr(git_runner, "run", run)
        monkeypatch.setattr(subprocess, "Popen", Popen)
        store.staleness.refresh()
        assert {c[0] for c in calls} == {"runner", "process"}, "the pass runs git: the wrappers must see it"
        calls.clear()

        full = call("kg_read")
        assert "pool-acquire [stale: acquire in src/pool.py changed, 1 commit ago]" in full
        assert "pool-acquire -[lives-in]-> src/pool.py [stale: src/pool.py changed" in full
        assert "stale: acquire in src/pool.py changed" in call("kg_read", id="pool-acquire")
        assert "[stale: acquire in src/pool.py changed" in call("kg_search", query="pool acquire")
        call("kg_sync")
        call("kg_put_node", level="project", id="cache-get", gist="the cache fills lazily", touches=["src/cache.py"])
        call("kg_put_edge", level="project", **{"from": "cache-get", "to": "src/cache.py", "rel": "lives-in"})
        handle = hooks.handler(store, env={})
        base = {"session_id": "claude-1", "cwd": str(repo), "transcript_path": "/t"}
        out = handle(dict(base, hook_event_name="PostToolUse", tool_name="Read",
                          tool_input={"file_path": str(repo / "src" / "pool.py")}, tool_response={}))
        assert "pool-acquire (stale: acquire in src/pool.py changed" in out["hookSpecificOutput"]["additionalContext"]
        handle(dict(base, hook_event_name="UserPromptSubmit", prompt="connection pool acquire"))
        out = handle(dict(base, session_id="claude-2", hook_event_name="SessionStart", source="startup"))
        assert "stale: acquire in src/pool.py changed" in out["hookSpecificOutput"]["additionalContext"]
        assert calls == []
    finally:
        store.close()


def logging_git(tmp_path):
    """A folder holding a `git` that appends its arguments to a log, then runs the real one."""
    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "git-calls.log"
    script = shim / "git"
    script.write_text('#!/bin/sh\necho "$*" >> "%s"\nexec "%s" "$@"\n' % (log, REAL_GIT))
    script.chmod(0o755)
    return str(shim), log


def calls_in(log):
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.e2e
@pytest.mark.skipif(os.name != "posix", reason="the logging git is a shell script")
def test_no_git_in_a_daemon_request_or_a_kgd_hook(tmp_path, make_daemon):
    repo = make_repo(tmp_path)
    shim, log = logging_git(tmp_path)
    path = shim + os.pathsep + os.environ.get("PATH", "")
    daemon = make_daemon(env={"PATH": path, "KG_STRUCTURED_OUTPUT": "0"})
    sid = start(daemon, repo)["session_id"]

    def call(name, **a):
        return text_of(daemon.call(name, dict(a, session_id=sid)))
    call("kg_put_node", level="project", id="pool-acquire", gist="the pool blocks on acquire",
         touches=["src/pool.py#acquire"])
    change_pool(repo)
    deadline = time.monotonic() + 30
    while "[stale:" not in call("kg_read") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "pool-acquire [stale: acquire in src/pool.py changed, 1 commit ago]" in call("kg_read")
    assert any(c.startswith(("diff", "log")) or " diff " in c or " log " in c for c in calls_in(log)), \
        "the daemon's pass asked git through the logging one: %s" % calls_in(log)
    time.sleep(1.0)  # a pass under way ends; nothing changes in the repository from here on
    before = calls_in(log)

    call("kg_read")
    call("kg_read", id="pool-acquire")
    call("kg_search", query="pool acquire")
    call("kg_sync")
    call("kg_put_node", level="project", id="cache-get", gist="the cache fills lazily", touches=["src/cache.py"])
    payload = {"hook_event_name": "PostToolUse", "session_id": "claude-1", "cwd": str(repo), "tool_name": "Read",
               "tool_input": {"file_path": str(repo / "src" / "pool.py")}, "tool_response": {},
               "transcript_path": "/t"}
    code, out, err, _ = run_kgd("hook", "--port", daemon.port, "--root", daemon.root,
                                env={"PATH": path}, stdin=json.dumps(payload).encode())
    assert code == 0, err
    assert "stale: acquire in src/pool.py changed" in out, out
    status, _, _ = daemon.request("POST", "/api/hooks", dict(payload, hook_event_name="UserPromptSubmit",
                                                             prompt="pool acquire"))
    assert status == 200
    assert calls_in(log) == before
