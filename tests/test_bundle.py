"""`kgd.py bundle`: one kgd.pyz that runs alone, anywhere Python 3.9+ is (locked-down machines get
one file to copy)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile

import pytest

from helpers import START_LINE, Daemon, clean_env

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def pyz(tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "kgd.pyz"
    r = subprocess.run([sys.executable, os.path.join(REPO, "kgd.py"), "bundle", "-o", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, env=clean_env())
    assert r.returncode == 0, r.stderr.decode()
    return out


@pytest.fixture
def alone(pyz, tmp_path):
    """The archive copied alone into an empty folder."""
    d = tmp_path / "empty"
    d.mkdir()
    shutil.copy(pyz, d / "kgd.pyz")
    return d / "kgd.pyz"


def run_pyz(path, *args, **kw):
    return subprocess.run([sys.executable, "-S", str(path)] + [str(a) for a in args], cwd=str(path.parent),
                          env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, **kw)


def start_pyz(path, root):
    """A Daemon (conftest's HTTP helpers) around `python3 kgd.pyz --port 0 --root ROOT`."""
    d = Daemon(root)
    d.proc = subprocess.Popen([sys.executable, str(path), "--port", "0", "--root", str(root), "--structured-output"],
                              cwd=str(path.parent),
                              env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = d.proc.stderr.readline().decode()
    m = START_LINE.search(line)
    assert m, line + d.proc.stderr.read().decode()
    d.port = int(m.group(3))
    return d


def test_archive_contents(pyz):
    with zipfile.ZipFile(pyz) as z:
        names = set(z.namelist())
    assert "__main__.py" in names
    assert {"kg/__init__.py", "kg/ops/cli.py", "kg/ops/commands.py", "kg/ops/stdio.py", "kg/serve/viewer.py",
            "kg/serve/http.py", "kg/ops/__init__.py", "kg/serve/ui/index.html", "kg/serve/ui/app.js",
            "kg/serve/ui/app.css"} <= names
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)
    with open(pyz, "rb") as f:
        assert f.readline() == b"#!/usr/bin/env python3\n"
    assert os.access(pyz, os.X_OK)
    assert os.path.getsize(pyz) < 1.25 * 1024 * 1024  # a drop-in file (docs/reference.md says its size)


def test_runs_alone_and_speaks_mcp(alone, tmp_path, project):
    d = start_pyz(alone, tmp_path / "root")
    try:
        tools = d.rpc("tools/list")["result"]["tools"]
        assert len(tools) == 8
        sid = d.call_tool("kg_read", {"cwd": str(project / "src")})["session_id"]
        put = d.call_tool("kg_put_node", {"session_id": sid, "level": "project", "id": "from-pyz",
                                          "gist": "the single-file build works"})
        assert put["created"] is True
        got = d.call_tool("kg_read", {"session_id": sid, "id": "from-pyz"})
        assert got["nodes"][0]["gist"] == "the single-file build works"
        status, page = d.request("GET", "/ui")[:3:2]
        assert status == 200 and b"<html" in page  # kg/serve/ui/ came along
        assert d.stop() == 0
    finally:
        d.stop()


def test_subcommands_work_from_the_archive(alone, tmp_path):
    root = tmp_path / "root"
    d = start_pyz(alone, root)
    try:
        d.json("PUT", "/api/nodes/user/n1", {"gist": "exported from a pyz"})
        r = run_pyz(alone, "status", "--json", "--root", root, "--port", d.port)
        assert r.returncode == 0 and json.loads(r.stdout)["running"] is True
        r = run_pyz(alone, "export", "--root", root)
        assert json.loads(r.stdout)["user"]["nodes"]["n1"]["gist"] == "exported from a pyz"
        r = run_pyz(alone, "stop", "--root", root)
        assert r.returncode == 0, r.stderr
        assert d.proc.wait(10) == 0
    finally:
        d.stop()
    r = run_pyz(alone, "hook", "--root", root, input=b"not json")  # the command hook's fast path
    assert r.returncode == 0 and r.stdout == b""
    again = tmp_path / "again.pyz"
    r = run_pyz(alone, "bundle", "-o", again)  # a pyz rebuilds itself
    assert r.returncode == 0, r.stderr
    assert run_pyz(again, "--version").stdout.startswith(b"kgd ")


def test_stdio_from_the_archive_starts_the_archive(alone, tmp_path):
    """The bridge spawns the daemon from the file it runs from: here the .pyz, not a kgd.py."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path / "root"
    env = clean_env(KG_HTTP_PORT=port, KG_STORAGE_ROOT=root)
    p = subprocess.Popen([sys.executable, "-S", str(alone), "stdio"], cwd=str(alone.parent), env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out, _ = p.communicate(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', timeout=30)
        assert json.loads(out) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        pid = int((root / "kgd.lock").read_text().split()[1])
        if not os.path.isdir("/proc/%d" % pid):
            pytest.skip("no /proc here to read the daemon's command line")
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        assert str(alone).encode() in argv and b"serve" in argv
    finally:
        if p.poll() is None:
            p.kill()
        r = subprocess.run([sys.executable, "-S", str(alone), "stop", "--root", str(root)], env=env,
                           stdout=subprocess.PIPE, timeout=30)
        assert r.returncode == 0


def test_sources_only_build(tmp_path):
    out = tmp_path / "src.pyz"
    subprocess.run([sys.executable, os.path.join(REPO, "kgd.py"), "bundle", "--no-bytecode", "-o", str(out)],
                   check=True, stdout=subprocess.DEVNULL, env=clean_env())
    with zipfile.ZipFile(out) as z:
        assert not any(n.endswith(".pyc") for n in z.namelist())
    assert run_pyz(out, "--version").stdout.startswith(b"kgd ")


def test_every_package_file_is_bundled(pyz):
    """Not only *.py: the viewer's kg/serve/ui/ files and any other package data come along (caches do not)."""
    src = os.path.join(REPO, "kg")
    want = set()
    for folder, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        want.update("kg/" + os.path.relpath(os.path.join(folder, f), src) for f in files if not f.endswith(".pyc"))
    with zipfile.ZipFile(pyz) as z:
        names = set(z.namelist())
    assert want <= names
    assert {n for n in names if n.startswith("kg/") and not n.endswith((".pyc", "/"))} == want


def test_package_data_is_readable_inside_the_archive(tmp_path):
    """A tree with kg/serve/ui/index.html (and a cache to leave out) bundles into a pyz where
    pkgutil.get_data finds the page."""
    tree = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "kg"), str(tree / "kg"), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(REPO, "kgd.py"), str(tree / "kgd.py"))
    (tree / "kg" / "serve" / "ui").mkdir(exist_ok=True)
    (tree / "kg" / "serve" / "ui" / "probe.html").write_text("<!doctype html><title>probe</title>")
    (tree / "kg" / "serve" / "ui" / "__pycache__").mkdir()
    (tree / "kg" / "serve" / "ui" / "__pycache__" / "junk.pyc").write_bytes(b"x")
    out = tmp_path / "k.pyz"
    r = subprocess.run([sys.executable, str(tree / "kgd.py"), "bundle", "-o", str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60, env=clean_env())
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
    assert "kg/serve/ui/probe.html" in names and not any("__pycache__" in n for n in names)
    probe = (
        "import sys, pkgutil; sys.path.insert(0, sys.argv[1]); "
        "print(pkgutil.get_data('kg.serve', 'ui/probe.html').decode())"
    )
    r = subprocess.run([sys.executable, "-S", "-c", probe, str(out)], stdout=subprocess.PIPE, env=clean_env(),
                       timeout=30, cwd=str(tmp_path))
    assert r.stdout.decode().strip() == "<!doctype html><title>probe</title>"
