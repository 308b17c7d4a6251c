"""The sync working tree's git round against a real bare remote (contract section 9): two machines
that wrote while apart converge, a conflict never stops the sync, a missing remote fails cleanly
and local commits are kept until it is back."""

import os
import shutil

import pytest

from kg.memory import git_runner as gitrun
from kg.travel.remote_repo import ATTRIBUTES, SyncRepo, read_config, write_config


def lines(path):
    with open(path, encoding="utf-8") as f:
        return sorted(ln for ln in f.read().splitlines() if ln)


@pytest.fixture
def remote(tmp_path):
    r = tmp_path / "remote.git"
    gitrun.run(["init", "-q", "--bare", str(r)], str(tmp_path))
    return str(r)


def machine(tmp_path, name, remote):
    return SyncRepo(str(tmp_path / name / "sync"), remote)


def write(repo, rel, text, mode="a"):
    p = os.path.join(repo.folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, mode, encoding="utf-8") as f:
        f.write(text)


def test_first_round_on_an_empty_remote_pushes(tmp_path, remote):
    a = machine(tmp_path, "a", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"x"}\n')
    out = a.round()
    assert out["pushed"] and out["changed"] == []
    assert gitrun.output(["rev-parse", "refs/heads/main"], remote) == a.head()
    with open(os.path.join(a.folder, ".gitattributes")) as f:
        assert f.read() == ATTRIBUTES
    assert oct(os.stat(a.folder).st_mode & 0o777) == "0o700"


def test_two_machines_that_wrote_apart_converge(tmp_path, remote):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    for m in (a, b):
        m.ensure()
    write(a, "user/n.jsonl", '{"id":"from-a"}\n')
    write(b, "user/n.jsonl", '{"id":"from-b"}\n')
    write(b, "projects/git-1/n.jsonl", '{"id":"only-b"}\n')
    a.round()
    picked = []
    out = b.round(pickup=picked.append)  # unrelated histories: the first round joins them
    assert "user/n.jsonl" in out["changed"] and picked
    a.round()
    assert a.head() == b.head()
    for m in (a, b):
        assert lines(os.path.join(m.folder, "user/n.jsonl")) == ['{"id":"from-a"}', '{"id":"from-b"}']
        assert lines(os.path.join(m.folder, "projects/git-1/n.jsonl")) == ['{"id":"only-b"}']


def test_same_line_region_edited_on_both_sides_keeps_both(tmp_path, remote):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"x","v":0}\n')
    a.round()
    b.round()
    write(a, "user/n.jsonl", '{"id":"x","v":"a"}\n', mode="w")
    write(b, "user/n.jsonl", '{"id":"x","v":"b"}\n', mode="w")
    a.round()
    out = b.round()
    assert not out["conflicted"]
    a.round()
    for m in (a, b):
        assert lines(os.path.join(m.folder, "user/n.jsonl")) == ['{"id":"x","v":"a"}', '{"id":"x","v":"b"}']


def test_a_conflict_never_stops_the_sync(tmp_path, remote):
    """A file without the union driver edited on both sides: git leaves markers, the round commits
    them as they are and pushes; the reader resolves them later."""
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "note.txt", "base\n")
    a.round()
    b.round()
    write(a, "note.txt", "from a\n", mode="w")
    write(b, "note.txt", "from b\n", mode="w")
    a.round()
    out = b.round()
    assert out["conflicted"] and out["pushed"]
    assert not os.path.exists(os.path.join(b.folder, ".git", "MERGE_HEAD"))
    text = open(os.path.join(b.folder, "note.txt")).read()
    assert "from a" in text and "from b" in text
    a.round()
    assert a.head() == b.head()


def test_missing_remote_fails_keeps_local_commits_and_recovers(tmp_path, remote):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"1"}\n')
    a.round()
    moved = remote + ".away"
    os.rename(remote, moved)
    write(a, "user/n.jsonl", '{"id":"2"}\n')
    with pytest.raises(gitrun.GitError) as e:
        a.round()
    assert e.value.kind == "no_remote"
    assert gitrun.output(["log", "--format=%s", "-1"], a.folder).startswith("kgd: changes")  # kept locally
    write(a, "user/n.jsonl", '{"id":"3"}\n')
    with pytest.raises(gitrun.GitError):
        a.round()
    os.rename(moved, remote)
    a.round()
    b.round()
    assert lines(os.path.join(b.folder, "user/n.jsonl")) == ['{"id":"1"}', '{"id":"2"}', '{"id":"3"}']


def test_push_refused_because_the_remote_moved_is_retried_in_the_round(tmp_path, remote):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"base"}\n')
    a.round()
    b.round()
    write(a, "user/n.jsonl", '{"id":"a"}\n')
    write(b, "user/n.jsonl", '{"id":"b"}\n')
    pushed_meanwhile = []

    def export_then_race():  # b pushes between a's fetch and a's push, once
        if not pushed_meanwhile:
            pushed_meanwhile.append(1)
            b.round()
    real_fetch = a.fetch

    def fetch():
        got = real_fetch()
        export_then_race()
        return got
    a.fetch = fetch
    real_push, pushes = a.push, []

    def push():
        pushes.append(1)
        real_push()
    a.push = push
    a.round()
    assert len(pushes) == 2  # refused once, then merged and pushed in the same round
    b.round()
    for m in (a, b):
        assert lines(os.path.join(m.folder, "user/n.jsonl")) == ['{"id":"a"}', '{"id":"b"}', '{"id":"base"}']


def test_an_interrupted_merge_and_a_stale_lock_are_finished(tmp_path, remote):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "note.txt", "base\n")
    a.round()
    b.round()
    write(a, "note.txt", "a\n", mode="w")
    a.round()
    write(b, "note.txt", "b\n", mode="w")
    b.commit()
    b.fetch()
    rc, _, _ = b.git("merge", "--no-edit", "refs/remotes/origin/main", check=False)
    assert rc != 0 and os.path.exists(os.path.join(b.folder, ".git", "MERGE_HEAD"))
    open(os.path.join(b.folder, ".git", "index.lock"), "w").close()  # as a SIGKILLed git leaves it
    b.clear_stale_lock()
    b.round()
    a.round()
    assert a.head() == b.head()


def test_remote_url_changed_is_followed(tmp_path, remote):
    a = machine(tmp_path, "a", remote)
    a.ensure()
    a.round()
    other = str(tmp_path / "other.git")
    gitrun.run(["init", "-q", "--bare", other], str(tmp_path))
    a2 = SyncRepo(a.folder, other)
    a2.round()
    assert gitrun.output(["rev-parse", "refs/heads/main"], other) == a.head()


def test_a_remote_emptied_at_the_same_url_gets_everything_again(tmp_path, remote):
    a = machine(tmp_path, "a", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"1"}\n')
    a.round()
    shutil.rmtree(remote)
    gitrun.run(["init", "-q", "--bare", remote], str(tmp_path))  # re-made empty: origin/main is stale
    out = a.round()
    assert out["pushed"] and gitrun.output(["rev-parse", "refs/heads/main"], remote) == a.head()


def test_a_round_where_nothing_changed_is_four_git_calls_and_no_push(tmp_path, remote, monkeypatch):
    a, b = machine(tmp_path, "a", remote), machine(tmp_path, "b", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"1"}\n')
    a.round()
    b.round()
    a.round()
    calls = []
    real = gitrun.run
    monkeypatch.setattr(gitrun, "run", lambda args, *x, **kw: calls.append(args) or real(args, *x, **kw))
    out = a.round()
    assert [c[0] for c in calls] == ["add", "diff", "fetch", "for-each-ref"] and not out["pushed"]
    calls.clear()
    write(a, "user/n.jsonl", '{"id":"2"}\n')
    out = a.round()
    assert out["pushed"] and len(calls) <= 8, [c[0] for c in calls]  # add diff commit fetch refs ... push
    calls.clear()
    b.round()  # a fast-forward: nothing of b's own to push back
    assert "push" not in [c[0] for c in calls]


def test_head_moved_off_main_by_hand_still_reaches_the_remotes_main(tmp_path, remote):
    a = machine(tmp_path, "a", remote)
    a.ensure()
    write(a, "user/n.jsonl", '{"id":"1"}\n')
    a.round()
    gitrun.run(["checkout", "-q", "-b", "elsewhere"], a.folder)
    write(a, "user/n.jsonl", '{"id":"2"}\n')
    out = a.round()
    assert out["pushed"] and gitrun.output(["rev-parse", "refs/heads/main"], remote) == a.head()


def test_config_file_round_trip_and_mode(tmp_path):
    assert read_config(str(tmp_path)) == {}
    write_config(str(tmp_path), {"remote": "/r", "enabled": True})
    assert read_config(str(tmp_path)) == {"remote": "/r", "enabled": True}
    assert oct(os.stat(str(tmp_path / "sync.json")).st_mode & 0o777) == "0o600"
    (tmp_path / "sync.json").write_text("{not json")
    assert read_config(str(tmp_path)) == {}


def test_a_temp_file_left_by_a_crash_is_never_committed(tmp_path, remote):
    a = machine(tmp_path, "a", remote)
    a.ensure()
    write(a, "user/.tmp-0123abcd.part", "half a file\n")
    write(a, "user/nodes.jsonl", '{"id":"x"}\n')
    a.round()
    tracked = gitrun.output(["ls-files"], a.folder).splitlines()
    assert "user/nodes.jsonl" in tracked and not any(".tmp-" in p for p in tracked)


def test_periodic_gc_runs_in_the_foreground_and_packs(tmp_path, remote, monkeypatch):
    import kg.travel.remote_repo as syncrepo

    monkeypatch.setattr(syncrepo, "GC_EVERY", 2)
    monkeypatch.setattr(syncrepo, "GC_AUTO", 10)  # git estimates loose objects from objects/17/
    a = machine(tmp_path, "a", remote)
    a.ensure()
    for i in range(2):
        for j in range(1500):
            write(a, "user/f%d.jsonl" % j, '{"id":"%d-%d"}\n' % (i, j), mode="w")
        a.round()
    packs = os.listdir(os.path.join(a.folder, ".git", "objects", "pack"))
    assert any(p.endswith(".pack") for p in packs)  # packed by the round itself, not by a detached gc
    assert not os.path.exists(os.path.join(a.folder, ".git", "gc.pid"))
    assert not os.path.isdir(os.path.join(a.folder, ".git", "objects", "17")) or \
        len(os.listdir(os.path.join(a.folder, ".git", "objects", "17"))) < 3


def test_periodic_gc_packs_heavy_loose_objects_before_their_number_counts(tmp_path, remote, monkeypatch):
    import kg.travel.remote_repo as syncrepo

    monkeypatch.setattr(syncrepo, "GC_EVERY", 2)
    monkeypatch.setattr(syncrepo, "GC_AUTO", 100000)  # the count alone would never pack these
    monkeypatch.setattr(syncrepo, "LOOSE_MAX_KIB", 256)
    a = machine(tmp_path, "a", remote)
    a.ensure()
    for i in range(2):  # a big file that does not compress, changed and committed twice
        write(a, "user/nodes.jsonl", os.urandom(400 * 1024).hex()[: 400 * 1024] + "\n", mode="w")
        a.round()
    assert a.loose_kib() < 100
    packs = os.listdir(os.path.join(a.folder, ".git", "objects", "pack"))
    assert any(p.endswith(".pack") for p in packs)


def test_a_password_or_token_in_the_remote_url_is_redacted_wherever_it_is_shown():
    from kg.travel.remote_repo import redact_url, scrub

    pw = "pw" + "x" * 20  # made at run time: no credential-shaped literal
    assert redact_url("https://me:%s@host/a.git" % pw) == "https://me:***@host/a.git"
    assert redact_url("https://%s@host/a.git" % pw) == "https://***@host/a.git"  # a token as the user
    assert redact_url("ssh://git@host/a.git") == "ssh://git@host/a.git"
    assert redact_url("git@host:a/b.git") == "git@host:a/b.git"
    assert redact_url("/mnt/usb/kg.git") == "/mnt/usb/kg.git"
    url = "https://me:%s@host/a.git" % pw
    assert pw not in scrub("fatal: could not read from %s (password %s)" % (url, pw), url)
