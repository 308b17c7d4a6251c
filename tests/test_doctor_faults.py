"""`kgd doctor`, `kgd start` and `kgd import` on the two storage faults that matter most: a root kgd
cannot write to, and a graph that had to start empty because its file and .prev were both corrupt."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import KGD, REPO, clean_env, free_port, run_kgd

pytestmark = pytest.mark.e2e

RO_SCRIPT = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'


def run_read_only(root, *args):
    """kgd run with `root` read-only: a private read-only bind mount when root (chmod does not stop
    root), else the folder's write bits taken away. -> (code, stdout, stderr)."""
    argv = [sys.executable, "-S", KGD] + [str(a) for a in args]
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("running as root without unshare: cannot make a read-only root")
        argv = ["unshare", "-m", "sh", "-c", RO_SCRIPT, str(root)] + argv
    else:
        os.chmod(str(root), 0o500)
    try:
        r = subprocess.run(argv, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           cwd=REPO)
    finally:
        os.chmod(str(root), 0o700)
    if os.geteuid() == 0 and r.returncode != 0 and b"mount" in r.stderr and b"kgd" not in r.stderr:
        pytest.skip("cannot make a private read-only mount here: %s" % r.stderr.decode()[:200])
    return r.returncode, r.stdout.decode(), r.stderr.decode()


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir(mode=0o700)
    return r


def test_doctor_fails_a_read_only_root_with_the_fix(root):
    code, out, err = run_read_only(root, "doctor", "--root", root, "--port", free_port(), "--skip-service",
                                   "--skip-client")
    assert code == 1, (out, err)
    line = next(ln for ln in out.splitlines() if ln.startswith("FAIL  storage root %s" % root))
    assert "read-only" in line or "not writable" in line, out
    fix = out.splitlines()[out.splitlines().index(line) + 1]
    assert fix.strip().startswith("fix:") and "--root" in fix, out
    assert "ok    storage root" not in out


@pytest.mark.parametrize("argv", [["start", "--timeout", "5"], ["import", "EXPORT"]])
def test_start_and_import_on_a_read_only_root_say_one_clear_line(root, tmp_path, argv):
    export = tmp_path / "export.json"
    (tmp_path / "other").mkdir()
    code, _, err, _ = run_kgd("export", "--root", tmp_path / "other", "-o", export)
    assert code == 0, err
    argv = [str(export) if a == "EXPORT" else a for a in argv]
    code, out, err = run_read_only(root, *argv, "--root", root, "--port", free_port())
    assert code == 1 and out == "", (out, err)
    assert err.count("\n") == 1 and err.startswith("kgd: storage root %s is not usable:" % root), err
    assert "Errno" not in err and ("Read-only" in err or "ermission" in err), err


def test_doctor_fails_a_graph_that_started_empty(make_daemon, root):
    (root / "user.json").write_text("{ not json")
    (root / "user.json.prev").write_text("{ nor this")
    d = make_daemon(root=root)
    d.stop()
    names = os.listdir(str(root))
    assert any(n.startswith("user.json.prev.corrupt-") for n in names), names  # what the store did
    code, out, _, _ = run_kgd("doctor", "--root", root, "--port", free_port(), "--skip-service", "--skip-client")
    assert code == 1, out
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("FAIL  ") and "user.json had to start empty" in line)
    assert "kgd import" in lines[i + 1], out
    assert not any(line.startswith("warn  ") and "quarantined" in line for line in lines), out


def test_doctor_only_warns_a_graph_healed_from_its_prev(make_daemon, root):
    (root / "user.json").write_text("{ not json")
    (root / "user.json.prev").write_text('{"nodes": {}, "edges": {}}')
    d = make_daemon(root=root)
    d.stop()
    code, out, _, _ = run_kgd("doctor", "--root", root, "--port", free_port(), "--skip-service", "--skip-client")
    assert "had to start empty" not in out and "warn  1 quarantined file(s)" in out, out


def test_doctor_names_a_symlinked_kg_file_as_a_link(make_daemon, root, tmp_path):
    """A `.kg/nodes.jsonl` that is a symbolic link was reported as "Too many levels of symbolic links"
    with the advice to "fix or delete those lines"."""
    from kg.core import kg_format

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".kg").mkdir()
    real = tmp_path / "elsewhere.jsonl"
    real.write_bytes(kg_format.render({"n": kg_format.node_record({"id": "n", "gist": "g", "_created_ts": 1.7e9})}))
    os.symlink(str(real), str(repo / ".kg" / kg_format.NODES_FILE))
    d = make_daemon(root=root)
    d.call_tool("kg_read", {"cwd": str(repo)})  # the project is known to this root
    code, out, err, _ = run_kgd("doctor", "--root", root, "--port", d.port, "--skip-service", "--skip-client")
    assert ".kg/nodes.jsonl is a symbolic link; kgd reads only regular files under .kg/" in out, out
    assert "cp --remove-destination" in out
    assert "Too many levels" not in out and "fix or delete those lines" not in out, out


def test_doctor_fails_a_port_served_by_another_roots_kgd(make_daemon, root, tmp_path):
    """Every hook and agent of this user would reach the other root's memory: a problem (exit 1)."""
    other = make_daemon(root=tmp_path / "other-root")
    code, out, _, _ = run_kgd("doctor", "--root", root, "--port", other.port, "--skip-service", "--skip-client")
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if "does not hold root" in ln)
    assert line.startswith("FAIL  ") and str(tmp_path / "other-root") in line, out
    other.stop()
