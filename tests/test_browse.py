"""`kgd show` and `kgd search` (a person sees what the agent sees): the agent's view from a terminal, through the
running daemon or read-only from the files."""

import hashlib
import os

import pytest

from helpers import run_kgd

pytestmark = pytest.mark.e2e


def fill(d, project):
    pp = str(project)
    d.json("PUT", "/api/nodes/user/editor-prefs", {"gist": "the user prefers tabs in makefiles",
                                                   "notes": ["said twice"]})
    d.json("PUT", "/api/nodes/project/build-uses-make", {"gist": "the build runs through make; see Makefile",
                                                         "touches": ["Makefile"], "notes": ["make -j4"],
                                                         "project_path": pp})
    d.json("PUT", "/api/nodes/project/tests-slow", {"gist": "the tests take three minutes", "project_path": pp})
    d.json("PUT", "/api/edges/project", {"from": "build-uses-make", "to": "tests-slow", "rel": "explains",
                                         "notes": ["make test"], "project_path": pp})


def tree(root):
    """Every file under root with its bytes' hash and mode: proves nothing was written."""
    out = {}
    for folder, dirs, files in os.walk(str(root)):
        for name in files:
            p = os.path.join(folder, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, str(root))] = (hashlib.sha256(f.read()).hexdigest(), os.stat(p).st_mode)
    return out


def tool_texts(d, project):
    """The tools' texts; the read by id first (it refreshes recency, which orders the full read)."""
    sid = d.call("kg_read", {"cwd": str(project / "src")})["structuredContent"]["session_id"]
    node = d.call("kg_read", {"session_id": sid, "ids": ["build-uses-make", "editor-prefs"]})
    read = d.call("kg_read", {"session_id": sid})
    search = d.call("kg_search", {"session_id": sid, "query": "make tabs"})
    return read["content"][0]["text"], search["content"][0]["text"], node["content"][0]["text"]


def without_session_line(text):
    lines = text.splitlines()
    assert lines[0].startswith("Session: ")
    return lines[1:]


def test_show_and_search_through_the_daemon_and_from_the_files(make_daemon, tmp_path, project):
    root = tmp_path / "r"
    d = make_daemon(root=root, env={"KG_SAVE_INTERVAL": "3600"})
    fill(d, project)
    read_text, search_text, nodes_text = tool_texts(d, project)
    sessions = d.json("GET", "/health")[1]["sessions"]
    for where in ("daemon", "files"):
        if where == "files":
            assert d.stop() == 0
            before = tree(root)
        code, out, err, _ = run_kgd("show", "--root", root, cwd=project / "src")
        assert code == 0, err
        assert without_session_line(out.rstrip("\n")) == without_session_line(read_text), where
        assert "kgd show" in out.splitlines()[0]
        code, out, err, _ = run_kgd("search", "make", "tabs", "--root", root, cwd=project)
        assert code == 0 and out.rstrip("\n") == search_text, (where, out, err)
        code, out, err, _ = run_kgd("show", "build-uses-make", "editor-prefs", "--root", root, cwd=project)
        assert code == 0 and out.rstrip("\n").splitlines() == without_session_line(nodes_text), (where, out, err)
        assert "- note: make -j4" in out and "edge: build-uses-make -[explains]-> tests-slow (make test)" in out
        if where == "daemon":
            assert d.json("GET", "/health")[1]["sessions"] == sessions  # no session started
        else:
            assert tree(root) == before  # read-only: nothing written, no lock taken


def test_show_names_what_it_did_not_find(make_daemon, tmp_path, project):
    d = make_daemon(root=tmp_path / "r")
    fill(d, project)
    code, out, _, _ = run_kgd("show", "nope", "--root", tmp_path / "r", cwd=project)
    assert code == 1 and "Not found: nope" in out
    code, out, _, _ = run_kgd("show", "tests-slow", "nope", "--root", tmp_path / "r", cwd=project)
    assert code == 0 and "## tests-slow [project, active]" in out and "Not found: nope" in out


def test_show_outside_any_project_and_on_an_empty_root(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    code, out, err, _ = run_kgd("show", "--root", tmp_path / "none", "--port", "1", cwd=folder)
    assert code == 0, err
    assert "## User graph: 0 active" in out and "(empty)" in out
    assert not (tmp_path / "none").exists()  # nothing created
    code, out, _, _ = run_kgd("search", "anything", "--root", tmp_path / "none", "--port", "1", cwd=folder)
    assert code == 0 and "No node matches 'anything'" in out


def test_search_from_the_files_sees_a_graph_never_folded(make_daemon, tmp_path, project):
    """A node acknowledged a moment ago lives only in the journal: the files' view replays it."""
    root = tmp_path / "r"
    d = make_daemon(root=root, env={"KG_SAVE_INTERVAL": "3600"})
    d.json("PUT", "/api/nodes/user/fresh", {"gist": "written a moment ago"})
    d.kill()
    code, out, _, _ = run_kgd("search", "moment", "--root", root, cwd=project)
    assert code == 0 and "- fresh (user): written a moment ago" in out


def test_show_with_a_wrong_token_fails_in_one_line(make_daemon, tmp_path, project):
    make_daemon(root=tmp_path / "r", args=["--token", "t0k"])
    code, out, err, _ = run_kgd("show", "--root", tmp_path / "r", "--token", "bad", cwd=project)
    assert code == 1 and out == "" and err.count("\n") == 1 and "token" in err


def test_search_in_a_plain_folder_creates_no_project_graph(make_daemon, tmp_path):
    """`kgd search foo` in a folder that is no project once made an empty project graph there,
    which then showed in `kgd status` and `kgd export`."""
    root = tmp_path / "r"
    d = make_daemon(root=root)
    d.json("PUT", "/api/nodes/user/closing-lid", {"gist": "closing the lid suspends the laptop"})
    plain = tmp_path / "plain"
    plain.mkdir()
    code, out, err, _ = run_kgd("search", "lid", "--root", root, "--port", d.port, cwd=plain)
    assert code == 0 and "- closing-lid (user): closing the lid suspends the laptop" in out, (out, err)
    assert d.json("GET", "/api/projects")[1]["projects"] == []
    assert not (root / "projects").exists() or os.listdir(str(root / "projects")) == []
    code, out, _, _ = run_kgd("status", "--root", root, "--port", d.port)
    assert code == 0 and "projects: none on disk" in out


def test_search_in_a_clone_whose_kg_no_session_opened(make_daemon, tmp_path):
    """A repository holding `.kg/` is searched as the session that opens it will see it."""
    from kg.core import kg_format

    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    (clone / ".kg").mkdir()
    rec = kg_format.node_record({"id": "deploy-steps", "gist": "deploy through the staging branch",
                                 "_created_ts": 1.7e9, "_write_ts": 1.7e9})
    (clone / ".kg" / kg_format.NODES_FILE).write_bytes(kg_format.render({"deploy-steps": rec}))
    root = tmp_path / "r"
    d = make_daemon(root=root)
    code, out, err, _ = run_kgd("search", "staging", "--root", root, "--port", d.port, cwd=clone)
    assert code == 0 and "deploy-steps (project)" in out, (out, err)
