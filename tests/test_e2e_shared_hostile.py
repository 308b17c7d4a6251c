"""An outside evaluator's attacks on a shared `.kg/` (contract sections 9 and 10): hostile content
committed by a teammate, odd file types where the files should be, and the user's own git
operations while the daemon runs. Real git, real daemons on --port 0."""

import json
import os
import random
import shutil
import stat
import string
import threading
import time
import urllib.parse

import pytest
from test_e2e_shared import Repo, put, read_ids, share, team, wait_for  # noqa: F401, F811 (a fixture)

from kg.core import kg_format

import kg_view
from helpers import git_env, http_request, run_kgd, start

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]


def line(**fields):
    rec = {"id": "x", "gist": "g", "notes": [], "touches": [], "created": 1.7e9, "changed": 1.7e9}
    rec.update(fields)
    return json.dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass")


def fake_token():
    return "ghp_" + "".join(random.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.fixture
def repo(tmp_path):
    env = git_env(tmp_path)
    p = tmp_path / "app"
    p.mkdir()
    r = Repo(p, env)
    r.git("init", "-q", "-b", "main")
    (p / "README").write_text("app\n")
    r.commit_all("init")
    return r


def doctor(d):
    _, out, err, _ = run_kgd("doctor", "--root", d.root, "--port", str(d.port), "--skip-service",
                                "--skip-client")
    return out + err


def no_traceback(d):
    text = "".join(d.stderr_lines)
    assert "Traceback" not in text, text[-3000:]
    return text


def test_hostile_lines_load_the_rest_and_hide_the_secret(make_daemon, repo, tmp_path):
    secret = fake_token()
    kg = repo.path / ".kg"
    kg.mkdir()
    (kg / ".gitattributes").write_text(kg_format.GITATTRIBUTES)
    lines = [b"\xef\xbb\xbf" + line(id="bom-first"),  # an editor saved it with a BOM
             line(id="crlf-a") + b"\r", line(id="crlf-b") + b"\r",
             line(id="big-gist", gist="a" * (1 << 20)),
             line(id="notes-dict", notes={"a": 1}),
             line(id="nul\x00id"), line(id="new\nline"), line(id="x" * 10240),
             line(id="../../etc/passwd", gist="an id is a name, never a path"),
             line(id="lone-\ud800-surrogate"),
             b'{"id":"esc-\\ud800","gist":"g","notes":[],"touches":[],"created":1,"changed":1}',
             b'{"id":"esc-gist","gist":"\\udfff","notes":["\\ud83d"],"touches":[],"created":1,"changed":1}',
             line(id="ok", gist="lone \udfff in a gist"),
             line(id="t-str", changed="1700000000"), line(id="t-neg", changed=-5), line(id="t-big", changed=1e300),
             b'{"id":"t-nan","gist":"g","notes":[],"touches":[],"created":1,"changed":NaN}',
             b'{"id":"deep","gist":' + b"[" * 100000 + b"]" * 100000 + b"}",
             b"[" * 100000,
             b'{"id":"bad-\xff\xfe","gist":"g","notes":[],"touches":[],"created":1,"changed":1}',
             line(id=secret, gist="a node whose id is a credential"),
             line(id="good", gist="fine")]
    (kg / "nodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    edges = [json.dumps({"from": "good", "to": "no-such-node", "rel": "refers", "notes": [], "changed": 1.7e9}),
             json.dumps({"from": "/etc/passwd", "to": "/root/.ssh/id_rsa", "rel": "abs", "notes": [],
                         "changed": 1.7e9}),
             json.dumps({"from": "good", "to": secret, "rel": "leaks", "notes": [], "changed": 1.7e9})]
    (kg / "edges.jsonl").write_text("\n".join(edges) + "\n")
    repo.commit_all("a teammate's hostile .kg/")
    d = make_daemon(tmp_path / "root")
    r = start(d, repo.path)
    sid = r["session_id"]
    ids = sorted(n["id"] for n in r["project"]["nodes"])
    assert {"bom-first", "crlf-a", "crlf-b", "good", "../../etc/passwd"} <= set(ids)
    assert secret not in ids and not any("\ud800" in i or "\x00" in i for i in ids)
    found = d.call_tool("kg_search", {"session_id": sid, "query": "credential"})
    assert all(secret not in json.dumps(x) for x in found["results"])
    assert secret not in json.dumps(r)
    out = doctor(d)
    assert "nodes.jsonl" in out and "problem(s), skipped" in out and secret not in out
    committed = (kg / "nodes.jsonl").read_bytes()
    put(d, sid, "after", "still serving")
    assert wait_for(lambda: "after" in kg_view.live(repo.path))
    d.stop()
    log = no_traceback(d)
    assert secret not in log
    # The teammate's line stays (a node leaves .kg/ only by a person's delete, contract section 9),
    # once; the file git tracks is as committed (contract 9: kgd never modifies a tracked file).
    assert kg_view.raw_count(repo.path, secret.encode(), "node") == 1 and "after" in kg_view.live(repo.path)
    assert (kg / "nodes.jsonl").read_bytes() == committed
    data = b"".join(data for name, data in kg_view.files(repo.path).items() if name.startswith("changes"))
    assert b'"after"' in data
    d = make_daemon(tmp_path / "root")
    start(d, repo.path)
    out = doctor(d)
    assert "its id is not printed" in out and secret not in out  # still held, still reported
    assert b"\xef\xbb\xbf" not in data and b"\r" not in data  # what kgd writes is clean


@pytest.mark.parametrize("attack", ["dir", "symlink-passwd", "symlink-outside", "fifo", "huge", "kg-symlink",
                                    "attributes"])
def test_odd_files_where_kg_files_should_be(make_daemon, repo, tmp_path, attack):
    kg = repo.path / ".kg"
    kg.mkdir()
    good = line(id="good", gist="fine") + b"\n"
    (kg / "edges.jsonl").write_bytes(b"")
    target = kg / "nodes.jsonl"
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(line(id="from-outside") + b"\n")
    if attack == "dir":
        target.mkdir()
        (kg / "edges.jsonl").write_bytes(b'{"from":"a","to":"b","rel":"r","notes":[],"changed":1}\n')
    elif attack == "symlink-passwd":
        os.symlink("/etc/passwd", str(target))
    elif attack == "symlink-outside":
        os.symlink(str(outside), str(target))
    elif attack == "fifo":
        os.mkfifo(str(target))
        (kg / "edges.jsonl").write_bytes(b'{"from":"a","to":"b","rel":"r","notes":[],"changed":1}\n')
    elif attack == "huge":
        with open(str(target), "wb") as f:
            f.write(good)
            f.truncate(70 * 1024 * 1024)
    elif attack == "kg-symlink":
        kg.rename(tmp_path / "elsewhere")
        (tmp_path / "elsewhere" / "nodes.jsonl").write_bytes(good)
        os.symlink(str(tmp_path / "elsewhere"), str(kg))
    elif attack == "attributes":
        target.write_bytes(good)
        (kg / ".gitattributes").write_text("*.jsonl filter=evil diff=evil merge=evil\n")
        repo.git("config", "filter.evil.clean", "touch %s" % (tmp_path / "ran"))
        repo.git("config", "merge.evil.driver", "touch %s" % (tmp_path / "ran"))
    d = make_daemon(tmp_path / "root")
    t0 = time.monotonic()
    r = start(d, repo.path)
    assert time.monotonic() - t0 < 10  # a FIFO never blocks the load
    sid = r["session_id"]
    ids = [n["id"] for n in r["project"]["nodes"]]
    assert "from-outside" not in ids and "root" not in " ".join(ids)
    put(d, sid, "mine", "still serving")
    assert d.json("GET", "/api/health")[0] == 200
    time.sleep(1.5)  # the export after the pause
    assert read_ids(d, sid, ["mine"])["missing"] == []
    out = doctor(d)
    if attack in ("dir", "symlink-passwd", "symlink-outside", "fifo", "huge"):
        assert "nodes.jsonl" in out, out
    if attack == "kg-symlink":
        assert not (tmp_path / "elsewhere" / "nodes.jsonl").read_bytes().count(b"mine")
    if attack == "symlink-outside":
        assert outside.read_bytes() == line(id="from-outside") + b"\n" and os.path.islink(str(target))
    if attack == "symlink-passwd":
        assert os.path.islink(str(target))
    if attack == "huge":  # what kgd could not read is never overwritten
        assert target.stat().st_size == 70 * 1024 * 1024
    if attack == "fifo":
        assert stat.S_ISFIFO(os.lstat(str(target)).st_mode)
    if attack == "dir":
        assert target.is_dir()
    if attack == "attributes":
        assert "good" in ids and "union driver" in out
        repo.commit_all("with the evil attributes")
    d.stop()
    no_traceback(d)
    assert not (tmp_path / "ran").exists() or attack == "attributes"


def test_a_file_turned_unreadable_keeps_the_view_and_writes_once_fixed(make_daemon, repo, tmp_path):
    kg = repo.path / ".kg"
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "known", "known before")
    share(d, repo)
    repo.commit_all("share")
    saved = (kg / "nodes.jsonl").read_bytes()
    (kg / "nodes.jsonl").unlink()
    os.mkfifo(str(kg / "nodes.jsonl"))  # a teammate's commit, or a checkout, puts a FIFO there
    time.sleep(1.5)
    put(d, sid, "while-broken", "written while the file was a FIFO")
    time.sleep(1.5)
    assert read_ids(d, sid, ["known", "while-broken"])["missing"] == []  # unknown is not empty
    assert stat.S_ISFIFO(os.lstat(str(kg / "nodes.jsonl")).st_mode)
    (kg / "nodes.jsonl").unlink()
    (kg / "nodes.jsonl").write_bytes(saved)
    assert wait_for(lambda: "while-broken" in kg_view.live(repo.path))
    assert read_ids(d, sid, ["known", "while-broken"])["missing"] == []
    d.stop()
    no_traceback(d)


# ---------------------------------------------------------------- the user's git operations

def settle(d, sid, repo, want_in_file=()):
    """Wait until the daemon's view and the working tree agree: a put goes through the export."""
    assert wait_for(lambda: set(want_in_file) <= set(kg_view.live(repo.path)), timeout=8)


def view(d, sid, ids):
    return set(ids) - set(read_ids(d, sid, list(ids))["missing"])


def clean_parse(repo):
    """The live node ids of every file under .kg/, which must all read with no problem."""
    assert kg_view.problems(repo.path) == []
    return set(kg_view.live(repo.path))


def test_stash_reset_rewrite_and_a_branch_without_kg(make_daemon, repo, tmp_path):
    bare_branch_base = repo.git("rev-parse", "HEAD").stdout.strip()
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    for i in range(3):
        put(d, sid, "base-%d" % i, "on main from the start")
    share(d, repo)
    repo.commit_all("share")
    base = {"base-0", "base-1", "base-2"}

    # git stash / stash pop: kgd's knowledge not yet committed is in a file git does not track,
    # so a stash leaves it where it is (contract 9, "Never in git's way"), and both exit 0.
    put(d, sid, "stashed", "exported, not committed")
    settle(d, sid, repo, ["stashed"])
    (repo.path / "README").write_text("app, changed\n")  # something for the stash to take
    repo.git("stash", "-q")
    time.sleep(1.5)
    assert view(d, sid, ["stashed"]) == {"stashed"} and "stashed" in kg_view.live(repo.path)
    repo.git("stash", "pop", "-q")
    # git stash -u takes the file; kgd writes the knowledge again under a new name, and the pop
    # brings the old file back beside it (never a name the stash holds).
    repo.git("stash", "-q", "-u")
    assert wait_for(lambda: "stashed" in kg_view.live(repo.path))
    assert view(d, sid, ["stashed"]) == {"stashed"}
    repo.git("stash", "pop", "-q")
    assert view(d, sid, ["stashed"]) == {"stashed"} and (repo.path / "README").read_text() == "app, changed\n"
    repo.commit_all("stashed")

    # git reset --hard HEAD~3: three commits' nodes leave the view, nothing is written back.
    for i in range(3):
        put(d, sid, "reset-%d" % i, "gone with the reset")
        settle(d, sid, repo, ["reset-%d" % i])
        repo.commit_all("reset %d" % i)
    repo.git("reset", "-q", "--hard", "HEAD~3")
    assert wait_for(lambda: view(d, sid, ["reset-0", "reset-1", "reset-2"]) == set())
    time.sleep(1.5)
    assert repo.git("status", "--porcelain").stdout == ""
    assert view(d, sid, base | {"stashed"}) == base | {"stashed"}

    # A history rewrite (rebase -i): reset, then cherry-pick in another order.
    for name in ("x", "y"):
        put(d, sid, "rw-" + name, "rewritten " + name)
        settle(d, sid, repo, ["rw-" + name])
        repo.commit_all("rw " + name)
    y, x = repo.git("rev-parse", "HEAD").stdout.strip(), repo.git("rev-parse", "HEAD~1").stdout.strip()
    repo.git("reset", "-q", "--hard", "HEAD~2")
    repo.git("-c", "user.name=t", "-c", "user.email=t@l", "cherry-pick", y)
    if repo.git("-c", "user.name=t", "-c", "user.email=t@l", "cherry-pick", x, check=False).returncode:
        repo.git("cherry-pick", "--skip")  # the union driver already kept x's line while picking y
    assert wait_for(lambda: view(d, sid, ["rw-x", "rw-y"]) == {"rw-x", "rw-y"})
    time.sleep(1.5)
    assert repo.git("status", "--porcelain").stdout == ""

    # A branch without .kg/: its view has no shared node, .kg/ is not recreated, a put there lands
    # in the branch checked out next.
    repo.git("checkout", "-q", "-b", "no-kg", bare_branch_base)
    assert wait_for(lambda: view(d, sid, base) == set())
    put(d, sid, "made-on-no-kg", "written while the branch had no .kg/")
    time.sleep(2)
    assert not (repo.path / ".kg").exists()
    repo.git("checkout", "-q", "main")
    everything = base | {"stashed", "rw-x", "rw-y", "made-on-no-kg"}
    assert wait_for(lambda: view(d, sid, everything) == everything)
    assert wait_for(lambda: clean_parse(repo) == everything)
    d.stop()
    no_traceback(d)


def test_a_merge_left_in_conflict_then_aborted(make_daemon, repo, tmp_path):
    """A merge git stops on (a code file both branches changed, and a nodes.jsonl edited on both
    by hand, as round 3's kgd did, in a clone without the union attribute): the view holds both
    branches' knowledge while it is conflicted, conflict markers included; `merge --abort` takes
    the other branch's knowledge away again; kgd's own files never conflict."""
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "shared-node", "the original")
    share(d, repo)
    repo.commit_all("share")
    nodes = repo.path / ".kg" / "nodes.jsonl"
    committed = kg_format.parse(nodes.read_bytes(), "node")[0]

    def by_hand(gist):  # a round 3 kgd's line, in the tracked file
        recs = dict(committed, hand={"id": "hand", "gist": gist, "notes": [], "touches": [], "created": 1.7e9,
                                      "changed": 1.7e9})
        nodes.write_bytes(kg_format.render(recs))
        (repo.path / "app.py").write_text(gist + "\n")
    repo.git("checkout", "-q", "-b", "other")
    put(d, sid, "shared-node", "changed on other")
    put(d, sid, "other-only", "only on other")
    settle(d, sid, repo, ["other-only"])
    by_hand("edited on other")
    repo.commit_all("other")
    repo.git("checkout", "-q", "main")
    assert wait_for(lambda: view(d, sid, ["other-only"]) == set())
    put(d, sid, "shared-node", "changed on main")
    put(d, sid, "main-only", "only on main")
    settle(d, sid, repo, ["main-only"])
    by_hand("edited on main")
    repo.commit_all("main")
    # A clone without the union attribute: git leaves conflict markers.
    (repo.path / ".git" / "info").mkdir(exist_ok=True)
    (repo.path / ".git" / "info" / "attributes").write_text("*.jsonl merge=text\n")
    p = repo.git("-c", "user.name=t", "-c", "user.email=t@l", "merge", "other", check=False)
    assert p.returncode != 0 and b"<<<<<<<" in nodes.read_bytes()
    status = repo.git("status", "--porcelain").stdout.splitlines()
    conflicted = [line[3:] for line in status if line[:2] in ("UU", "AA")]
    assert sorted(conflicted) == [".kg/nodes.jsonl", "app.py"]  # never a file kgd wrote
    assert wait_for(lambda: view(d, sid, ["other-only", "main-only", "hand"]) == {"other-only", "main-only", "hand"})
    got = read_ids(d, sid, ["shared-node"])["nodes"][0]["gist"]
    assert got == "changed on main"  # the later change wins
    repo.git("merge", "--abort")
    assert wait_for(lambda: view(d, sid, ["other-only"]) == set())
    assert view(d, sid, ["main-only", "shared-node"]) == {"main-only", "shared-node"}
    assert read_ids(d, sid, ["shared-node"])["nodes"][0]["gist"] == "changed on main"
    put(d, sid, "after-abort", "written after the abort")
    settle(d, sid, repo, ["after-abort"])
    assert clean_parse(repo) == {"shared-node", "main-only", "after-abort", "hand"}
    assert repo.git("diff", "--quiet", check=False).returncode == 0  # no tracked file modified
    d.stop()
    no_traceback(d)


def test_two_clones_write_one_node_concurrently_and_converge_to_identical_bytes(
        make_daemon, team, tmp_path):  # noqa: F811 (team: the fixture imported above)
    a_repo, b_repo = team
    a, b = make_daemon(tmp_path / "root-a"), make_daemon(tmp_path / "root-b")
    sa = start(a, a_repo.path)["session_id"]
    for nid in ("hot", "doomed", "kept"):
        put(a, sa, nid, "the original " + nid, ["original note"])
    share(a, a_repo)
    a_repo.commit_all("share")
    a_repo.git("push", "-q")
    b_repo.git("pull", "-q")
    sb = start(b, b_repo.path)["session_id"]
    errors = []

    def writer(d, sid, who):
        try:
            for i in range(10):
                put(d, sid, "hot", "%s's gist %d" % (who, i), ["original note", "%s note %d" % (who, i)])
                put(d, sid, "%s-%d" % (who, i), "only %s" % who)
        except Exception as exc:  # reported below
            errors.append(exc)
    ts = [threading.Thread(target=writer, args=(d, s, w)) for d, s, w in ((a, sa, "a"), (b, sb, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    a.call_tool("kg_delete_node", {"session_id": sa, "level": "project", "id": "doomed"})
    time.sleep(0.05)
    put(b, sb, "kept", "b changed it after a's delete of another node")
    settle(a, sa, a_repo, ["a-9"])
    settle(b, sb, b_repo, ["b-9"])
    time.sleep(1.5)
    a_repo.commit_all("a")
    b_repo.commit_all("b")
    a_repo.git("push", "-q")
    assert b_repo.git("pull", "-q", "--no-rebase", "--no-edit", check=False).returncode == 0
    b_repo.git("push", "-q")
    assert a_repo.git("pull", "-q", "--no-rebase", "--no-edit", check=False).returncode == 0
    every = {"hot", "kept"} | {"%s-%d" % (w, i) for w in "ab" for i in range(10)}
    for d, sid in ((a, sa), (b, sb)):
        assert wait_for(lambda d=d, sid=sid: view(d, sid, every | {"doomed"}) == every, timeout=10)
    # one more write on each side (to its own new file: the tracked ones are never rewritten);
    # commit and exchange once more
    put(a, sa, "final-a", "a's last write")
    put(b, sb, "final-b", "b's last write")
    settle(a, sa, a_repo, ["final-a"])
    settle(b, sb, b_repo, ["final-b"])
    time.sleep(1.5)
    a_repo.commit_all("a2")
    b_repo.commit_all("b2")
    a_repo.git("push", "-q")
    assert b_repo.git("pull", "-q", "--no-rebase", "--no-edit", check=False).returncode == 0
    b_repo.git("push", "-q")
    assert a_repo.git("pull", "-q", "--no-rebase", "--no-edit", check=False).returncode == 0
    every |= {"final-a", "final-b"}
    assert wait_for(lambda: read_ids(b, sb, ["hot"])["nodes"] == read_ids(a, sa, ["hot"])["nodes"], timeout=10)
    hot = read_ids(a, sa, ["hot"])["nodes"][0]
    assert hot["gist"] in ("a's gist 9", "b's gist 9")  # the later change wins
    assert {"a note 9", "b note 9"} <= set(hot["notes"])  # the union
    a.stop()
    b.stop()
    # The same commit on both: every file the same bytes, and one merged view.
    assert kg_view.files(a_repo.path) == kg_view.files(b_repo.path)
    na, nb = kg_view.records(a_repo.path), kg_view.records(b_repo.path)
    assert kg_format.render(na) == kg_format.render(nb)
    assert a_repo.git("status", "--porcelain").stdout == "" == b_repo.git("status", "--porcelain").stdout
    assert {k for k, r in na.items() if "deleted" not in r} == every
    no_traceback(a)
    no_traceback(b)


def test_git_clean_deletes_an_uncommitted_kg_while_writes_wait(make_daemon, repo, tmp_path):
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    for i in range(5):
        put(d, sid, "mine-%d" % i, "known before sharing")
    share(d, repo)  # .kg/ written, not committed yet
    put(d, sid, "unexported", "acknowledged, not yet in .kg/")
    repo.git("clean", "-q", "-fdx")
    assert not (repo.path / ".kg").exists()
    time.sleep(2.5)
    put(d, sid, "after-clean", "written after the clean")
    time.sleep(1.5)
    every = {"mine-%d" % i for i in range(5)} | {"unexported", "after-clean"}
    # The branch never held .kg/: nothing of the user's own knowledge may be lost to the clean.
    assert view(d, sid, every) == every
    assert not (repo.path / ".kg").exists()  # not recreated behind the user's back
    share(d, repo)
    assert clean_parse(repo) == every
    d.stop()
    no_traceback(d)


def test_a_checkout_during_an_export(make_daemon, repo, tmp_path):
    d = make_daemon(tmp_path / "root")
    sid = start(d, repo.path)["session_id"]
    put(d, sid, "main-node", "on main")
    share(d, repo)
    repo.commit_all("share")
    repo.git("checkout", "-q", "-b", "side")
    put(d, sid, "side-node", "on side")
    settle(d, sid, repo, ["side-node"])
    repo.commit_all("side")
    repo.git("checkout", "-q", "main")
    acked = []
    for round_ in range(6):  # puts pause -> export; a checkout lands in the middle of it
        for i in range(30):
            nid = "w-%d-%d" % (round_, i)
            put(d, sid, nid, "x" * 200)
            acked.append(nid)
        time.sleep(0.9 + 0.05 * round_)
        branch = "side" if round_ % 2 == 0 else "main"
        repo.git("add", "-A", ".kg")
        repo.git("-c", "user.name=t", "-c", "user.email=t@l", "commit", "-q", "-m", "r%d" % round_, check=False)
        repo.git("checkout", "-q", branch)
    time.sleep(2)
    assert kg_view.problems(repo.path) == []  # no file under .kg/ half-written
    d.stop()
    no_traceback(d)


def test_a_kg_over_the_line_bound_loads_its_first_lines_and_never_holds_the_lock(make_daemon, repo, tmp_path):
    """A committed nodes.jsonl of more lines than kg_format.MAX_RECORDS: the first load parses it
    outside the store's lock (/api/health answers at once), takes the first lines, reports the
    rest (log, `kgd doctor`) and never writes the file back, so the lines it skipped stay."""
    bound = kg_format.MAX_RECORDS["node"]
    kg = repo.path / ".kg"
    kg.mkdir()
    (kg / ".gitattributes").write_text(kg_format.GITATTRIBUTES)
    data = b"".join(b'{"changed":1,"created":1,"gist":"g","id":"n%06d","notes":[],"touches":[]}\n' % i
                    for i in range(5 * bound))  # the red team's: 200,000 froze kgd ~25 s
    (kg / "nodes.jsonl").write_bytes(data)
    repo.commit_all("a .kg/ of too many lines")
    d = make_daemon(tmp_path / "root")
    loaded, latencies = [], []
    t = threading.Thread(target=lambda: loaded.append(start(d, repo.path)))
    t.start()
    while t.is_alive():
        t0 = time.monotonic()
        status, _, _ = http_request(d.port, "GET", "/api/health", timeout=60)
        latencies.append(time.monotonic() - t0)
        assert status == 200
        time.sleep(0.05)
    t.join()
    assert loaded and len(latencies) >= 3  # health was asked while the project loaded
    assert max(latencies) < 2.0, latencies
    query = "/api/graph?project_path=" + urllib.parse.quote(str(repo.path))
    status, _, body = http_request(d.port, "GET", query, timeout=60)
    project = json.loads(body)["project"]
    ids = {n["id"] for n in project["nodes"]}
    assert len(ids) == bound and "n%06d" % (bound - 1) in ids and "n%06d" % bound not in ids
    assert any("more than %d lines" % bound in p for p in project["sharing"]["problems"])
    assert "more than %d lines" % bound in doctor(d)
    put(d, loaded[0]["session_id"], "after", "kept by kgd, not written to a file it cut")
    d.stop()
    assert "more than %d lines" % bound in no_traceback(d)
    assert (kg / "nodes.jsonl").read_bytes() == data
