"""Contract section 12 through the store, on real git repositories and a plain folder: the states a
put records, the pass that judges them, the marks on every read surface, and a re-put clearing one."""

import os
import subprocess
import threading

import pytest

from kg.core import staleness
from kg.memory import file_states, git_runner
from kg.memory.store import Store

from helpers import clean_env

AUTH = '''def refresh(token):
    return token + 1


def login(user):
    return user
'''


def git(cwd, *args):
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git"] + list(args), cwd=str(cwd), env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def write(repo, rel, text):
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    write(r, "src/auth.py", AUTH)
    write(r, "src/db.py", "".join("line %d\n" % i for i in range(400)))
    write(r, "src/old.py", "x = 1\n")
    write(r, "src/gone.py", "y = 2\n")
    write(r, "README.md", "hello\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "first")
    return r


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "root")).open()
    yield s
    s.close()


def put(store, session, nid, touches, level="project"):
    return store.put_node(session, level, nid, "gist of %s" % nid, touches=touches)


def marks(store, session):
    """{id: mark} of the project graph, as a full kg_read gives them."""
    got = store.read_graphs(session)
    return {n["id"]: n["stale"]["mark"] for lv in ("user", "project") for n in got[lv]["nodes"] if "stale" in n}


def test_a_put_records_the_touched_files_states(repo, store):
    s = store.start_session(str(repo))
    put(store, s, "n", ["src/auth.py", "src/auth.py#refresh", "src/db.py:10-12", "nope.py", "https://x.org"])
    node = store.project_graph(s.project_path).nodes["n"]
    rec = node["_files"]
    assert rec["commit"] == git(repo, "rev-parse", "HEAD")
    assert set(rec["files"]) == {"src/auth.py", "src/auth.py#refresh", "src/db.py:10-12"}  # what exists
    assert rec["files"]["src/auth.py"] == {"id": git(repo, "hash-object", "src/auth.py"), "lines": 6}
    assert rec["files"]["src/auth.py#refresh"]["lines"] == 2
    assert rec["files"]["src/db.py:10-12"]["lines"] == 3
    put(store, s, "bare", ["nope.py"])
    assert "_files" not in store.project_graph(s.project_path).nodes["bare"]


def test_head_is_read_without_git(repo, tmp_path):
    gdir = file_states.git_dir(str(repo))
    assert file_states.head_commit(gdir) == git(repo, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert file_states.head_commit(gdir) == git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach")
    assert file_states.head_commit(gdir) == git(repo, "rev-parse", "HEAD")
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "other", str(wt))
    assert file_states.head_commit(file_states.git_dir(str(wt))) == git(wt, "rev-parse", "HEAD")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert file_states.head_commit(file_states.git_dir(str(empty))) is None
    assert file_states.git_dir(str(tmp_path)) is None


def test_every_read_surface_marks_exactly_the_stale_nodes(repo, store):
    s = store.start_session(str(repo))
    other = store.start_session(str(repo))
    store.sync(s)
    put(store, other, "auth-whole", ["src/auth.py"])
    put(store, other, "auth-login", ["src/auth.py#login"])
    put(store, other, "auth-refresh", ["src/auth.py#refresh"])
    put(store, other, "db-lines", ["src/db.py"])
    put(store, other, "old", ["src/old.py"])
    put(store, other, "gone", ["src/gone.py"])
    put(store, other, "readme", ["README.md"])
    store.staleness.refresh()
    assert marks(store, s) == {}
    # one commit changes refresh (not login) and 14 lines of db.py; then a rename; a delete not committed
    write(repo, "src/auth.py", AUTH.replace("token + 1", "token + 2"))
    write(repo, "src/db.py", "".join("line %d%s\n" % (i, " changed" if i < 14 else "") for i in range(400)))
    git(repo, "commit", "-q", "-am", "second")
    git(repo, "mv", "src/old.py", "src/new.py")
    git(repo, "commit", "-q", "-m", "rename")
    os.remove(repo / "src/gone.py")
    store.staleness.refresh()
    got = marks(store, s)
    assert got == {
        "auth-whole": "stale: src/auth.py changed, 1 of 6 lines, 1 commit ago",
        "auth-refresh": "stale: refresh in src/auth.py changed, 1 commit ago",
        "db-lines": "stale: src/db.py changed, 14 of 400 lines, 1 commit ago",
        "old": "stale: src/old.py renamed to src/new.py, 1 commit ago",
        "gone": "stale: src/gone.py deleted, not committed",
    }
    # by id, with what changed
    by_id = store.read_nodes(s, ["old", "readme"])["nodes"]
    assert by_id[0]["stale"]["files"] == [{"touch": "src/old.py", "change": "renamed", "to": "src/new.py",
                                           "commits": 1}]
    assert "stale" not in by_id[1]
    # search, sync
    found = {r["id"]: r.get("stale", {}).get("mark") for r in store.search("gist", s, limit=50)["results"]}
    assert {k for k, v in found.items() if v} == set(got)
    synced = {n["id"]: n.get("stale", {}).get("mark") for n in store.sync(s)["nodes"]}
    assert {k for k, v in synced.items() if v} == set(got)
    # a put, with the same content, verifies: the mark is gone at once, before any pass
    put(store, s, "auth-whole", None)
    assert "auth-whole" not in marks(store, s)
    store.staleness.refresh()
    assert "auth-whole" not in marks(store, s)


def test_a_change_not_committed_and_a_part_that_vanished(repo, store):
    s = store.start_session(str(repo))
    put(store, s, "login", ["src/auth.py#login"])
    put(store, s, "lines", ["src/db.py:3-5"])
    write(repo, "src/auth.py", AUTH.replace("def login", "def sign_in"))
    write(repo, "src/db.py", "moved\n" * 7 + (repo / "src/db.py").read_text())
    store.staleness.refresh()
    assert marks(store, s) == {"login": "stale: login in src/auth.py removed, not committed"}


def test_a_plain_folder_judges_by_the_files_own_state(tmp_path, store):
    d = tmp_path / "plain"
    d.mkdir()
    write(d, "a.py", "a = 1\n")
    write(d, "b.py", "b = 1\n")
    s = store.start_session(str(d))
    put(store, s, "a", ["a.py"])
    put(store, s, "b", ["b.py"])
    assert "commit" not in store.project_graph(s.project_path).nodes["a"]["_files"]
    os.utime(d / "b.py", (1, 1))  # touched, same content: still current
    write(d, "a.py", "a = 2\n")
    store.staleness.refresh()
    assert marks(store, s) == {"a": "stale: a.py changed"}
    os.remove(d / "b.py")
    store.staleness.refresh()
    assert marks(store, s) == {"a": "stale: a.py changed", "b": "stale: b.py deleted"}


def test_the_user_graph_judges_absolute_touches(tmp_path, store):
    f = tmp_path / "notes.txt"
    f.write_text("one\n")
    s = store.start_session(str(tmp_path))
    put(store, s, "abs", [str(f)], level="user")
    put(store, s, "rel", ["notes.txt"], level="user")
    assert "_files" not in store.user.nodes["rel"]
    f.write_text("two\n")
    store.staleness.refresh()
    assert marks(store, s) == {"abs": "stale: %s changed" % str(f)[-64:] if len(str(f)) <= 64 else
                               "stale: …%s changed" % str(f)[-63:]}


def test_what_cannot_be_judged_is_not_marked(repo, store):
    s = store.start_session(str(repo))
    put(store, s, "secret", ["src/old.py"])
    os.chmod(repo / "src/old.py", 0)
    try:
        if os.access(repo / "src/old.py", os.R_OK):
            pytest.skip("running as root: every file is readable")
        write(repo, "README.md", "changed\n")
        store.staleness.refresh()
        assert marks(store, s) == {}
    finally:
        os.chmod(repo / "src/old.py", 0o644)


def test_git_missing_still_marks_without_commits(repo, store, monkeypatch):
    s = store.start_session(str(repo))
    put(store, s, "auth", ["src/auth.py"])
    write(repo, "src/auth.py", "changed\n")

    def missing(*a, **kw):
        raise git_runner.GitError("missing", "git is not installed")
    monkeypatch.setattr(git_runner, "run", missing)
    store.staleness.refresh()
    assert marks(store, s) == {"auth": "stale: src/auth.py changed"}
    assert "not installed" in store.staleness.problems[s.project_path]


def test_no_git_runs_on_a_read_or_a_put(repo, store, monkeypatch):
    s = store.start_session(str(repo))   # the project's identity: git, once, before any of this
    put(store, s, "auth", ["src/auth.py"])
    write(repo, "src/auth.py", "changed\n")
    git(repo, "commit", "-qam", "x")
    calls = []
    real = git_runner.run

    def run(args, *a, **kw):
        calls.append((threading.current_thread().name, args[0]))
        return real(args, *a, **kw)
    monkeypatch.setattr(git_runner, "run", run)
    store.staleness.refresh()
    assert calls, "the pass asks git: the test proves nothing otherwise"
    calls.clear()
    marks(store, s)
    store.read_nodes(s, ["auth"])
    store.search("auth", s)
    store.sync(s)
    put(store, s, "auth2", ["src/auth.py", "src/db.py#x"])
    assert calls == []


def test_the_pass_runs_on_its_own_thread_when_due(repo, store):
    s = store.start_session(str(repo))
    put(store, s, "auth", ["src/auth.py"])
    w = store.staleness
    w.tick()
    w.wait()
    assert w.last["nodes"] == 1 and w.last["stale"] == 0
    assert not w.due()
    write(repo, "src/auth.py", "changed\n")
    git(repo, "commit", "-qam", "x")
    assert w.due()  # a commit changed the checkout
    w.tick()
    w.wait()
    assert w.last["stale"] == 1


def test_stale_since_survives_passes_and_resets_with_a_put(repo, store):
    s = store.start_session(str(repo))
    put(store, s, "auth", ["src/auth.py"])
    write(repo, "src/auth.py", "changed\n")
    store.staleness.refresh()
    g = store.project_graph(s.project_path)
    first = store.staleness.marks.of(g, "auth").since
    write(repo, "src/auth.py", "changed again\n")
    store.staleness.refresh()
    assert store.staleness.marks.of(g, "auth").since == first
    put(store, s, "auth", None)
    assert store.staleness.marks.of(g, "auth") is None


def test_split_touch_and_record_agree_on_parts(repo):
    rec = file_states.record(str(repo), ["src/auth.py#refresh"])
    data = (repo / "src/auth.py").read_bytes()
    assert rec["files"]["src/auth.py#refresh"] == staleness.state_of(data, "src/auth.py", ("name", "refresh"))


def test_a_failing_git_call_is_not_hidden_by_a_later_one_that_works(repo, store, monkeypatch):
    """kgd doctor reads why marks say less (store.staleness.problems): a `git diff` that fails
    stays reported though the pass's `git log` then works."""
    s = store.start_session(str(repo))
    put(store, s, "auth", ["src/auth.py"])
    git(repo, "commit", "-qam", "x", "--allow-empty")
    write(repo, "src/auth.py", "changed\n")
    real = git_runner.run

    def diff_fails(args, cwd, **kw):
        if args[0] == "diff":
            return 128, "", "fatal: bad object"
        return real(args, cwd, **kw)
    monkeypatch.setattr(git_runner, "run", diff_fails)
    store.staleness.refresh()
    assert marks(store, s)  # still marked, by the file's own state
    assert "git diff: " in store.staleness.problems[s.project_path]
    monkeypatch.setattr(git_runner, "run", real)
    write(repo, "src/auth.py", "changed again\n")
    store.staleness.refresh()
    assert s.project_path not in store.staleness.problems  # a pass where every call worked clears it
