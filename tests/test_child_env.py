"""One environment policy for every child process the tests start (helpers.clean_env), and short
test ids: a child's exec fails with E2BIG once an inherited variable (PYTEST_CURRENT_TEST holds the
test id, which pytest builds from the parameters) is large, and a host's KG_* or HOME must not
steer a test."""

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from helpers import HOST_VARS, REPO, Daemon, clean_env, run_kgd, short_id

HUGE = "x" * (1024 * 1024)
HOST = {"PYTEST_CURRENT_TEST": HUGE, "PYTEST_XDIST_WORKER": "gw0", "KG_TOKEN": "from-the-host",
        "KGD_INSTALL_OS": "darwin", "XDG_CONFIG_HOME": "/host/config", "PYTHONPATH": "/host/lib",
        "SOMETHING_ELSE": "1", "HOME": "/host/home", "LC_ALL": "C.UTF-8"}


@pytest.fixture
def host(monkeypatch):
    for k, v in HOST.items():
        monkeypatch.setenv(k, v)


def test_clean_env_takes_only_the_allowlist_from_the_host(host, tmp_path_factory):
    env = clean_env(KG_HTTP_PORT=8765)
    assert set(env) <= set(HOST_VARS) | {"HOME", "LC_ALL", "KG_HTTP_PORT"}, sorted(env)
    assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8" and env["KG_HTTP_PORT"] == "8765"
    assert env["HOME"].startswith(str(tmp_path_factory.getbasetemp())) and os.path.isdir(env["HOME"])
    assert clean_env()["HOME"] == env["HOME"], "one HOME per test"
    assert clean_env("/the/test/home")["HOME"] == "/the/test/home"
    assert clean_env(HOME="/given")["HOME"] == "/given"


def test_a_child_sees_only_the_policy(host):
    code = "import json, os; print(json.dumps(sorted(os.environ)))"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=30,
                         env=clean_env())
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout)) <= set(HOST_VARS) | {"HOME", "LC_ALL", "LC_CTYPE"}


@pytest.mark.e2e
def test_kgd_and_a_daemon_start_under_a_huge_test_id(host, tmp_path):
    code, out, err, _ = run_kgd("--version")
    assert code == 0 and out.startswith("kgd "), err
    d = Daemon(tmp_path / "root").start()
    try:
        assert d.json("GET", "/health")[0] == 200
    finally:
        d.stop()


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess" \
                and node.func.attr in ("run", "Popen", "call", "check_call", "check_output"):
            yield node


def test_every_child_process_of_the_tests_gets_an_env_and_only_helpers_builds_one():
    missing, borrowed = [], []
    for path in sorted(glob.glob(os.path.join(REPO, "tests", "*.py"))):
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        missing += ["%s:%d" % (name, c.lineno) for c in _calls(ast.parse(source))
                    if not any(k.arg == "env" for k in c.keywords)]
        if name not in ("helpers.py", os.path.basename(__file__)):
            borrowed += ["%s: %s" % (name, pat) for pat in ("dict(os.environ", "os.environ.items()",
                                                            "os.environ.copy()") if pat in source]
    assert missing == [], "subprocess calls without env=clean_env(...): %s" % missing
    assert borrowed == [], "build child environments with helpers.clean_env: %s" % borrowed


def test_short_id():
    assert short_id("small") is None and short_id(5) is None and short_id([HUGE]) is None
    assert len(short_id(HUGE)) < 40 and short_id(HUGE).endswith("...%dch" % len(HUGE))
    assert short_id(b"\xff" * 100).endswith("...100B")


@pytest.mark.parametrize("value", [HUGE, HUGE.encode(), "\U0001F600" * 100000])
def test_a_huge_parameter_gets_a_short_id(request, value):
    assert len(request.node.nodeid) < 200
