"""A project shared through its repository's .kg/, in-process: load, export at a pause, pickup,
personal state, deletes and tombstones, compaction staying personal, hostile files, crashes."""

import json
import os
import stat
import time

import pytest

from kg.core import kg_format, team_state
from kg.travel.team import holds_kg

import kg_view
from helpers import StoreEnv

AUTHOR = "Alice Example"


@pytest.fixture
def env(tmp_path, monkeypatch):
    # git's user.name is who a node is by (contract 9, "Who and when"): one known name, whatever
    # this machine's own configuration says.
    (tmp_path / "gitconfig").write_text("[user]\n\tname = %s\n" % AUTHOR)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    e = StoreEnv(tmp_path)
    yield e
    e.close_all()


def kg_lines(root, name="nodes.jsonl"):
    p = os.path.join(root, ".kg", name)
    if not os.path.exists(p):
        return []
    return [json.loads(x) for x in open(p, "rb").read().decode("utf-8").splitlines() if x.strip()]


def write_kg(root, nodes=(), edges=()):
    d = os.path.join(root, ".kg")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "nodes.jsonl"), "wb") as f:
        f.write(kg_format.render({n["id"]: n for n in nodes}))
    with open(os.path.join(d, "edges.jsonl"), "wb") as f:
        f.write(kg_format.render({"%s->%s:%s" % (e["from"], e["to"], e["rel"]): e for e in edges}))
    # A write that ended a moment ago (a pickup waits for files still being written).
    past = time.time_ns() - 10**9
    for name in ("nodes.jsonl", "edges.jsonl"):
        os.utime(os.path.join(d, name), ns=(past, past))


def N(nid, gist="g", notes=(), changed=1_600_000_000.0, v=0, by=None):
    """A node line; `v` its logical version (0: none, as round 3 wrote), written by clone `by`
    (its version vector {by: v})."""
    rec = {"id": nid, "gist": gist, "notes": list(notes), "touches": [], "created": changed, "changed": changed}
    if v:
        rec["v"] = v
        rec["vv"] = {by or "bob": v}
    return rec


def clone_of(store, root):
    """This clone's name in the version vectors it writes (kg/core/team_state.py)."""
    return team_state.state(store.project_graph(os.path.realpath(root)).meta)["clone"]


def pause(env, store):
    env.advance(5)
    store.fold_idle()


def share(env, store, root):
    return store.team.share(root)


def test_share_writes_the_graph_and_the_layout(env):
    root = env.project()
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "cache", "the cache is per user", notes=["n1"], touches=["src/c.py"])
    s.put_node(sess, "project", "Cache", "another node, differing in case")
    s.put_edge(sess, "project", "cache", "src/c.py", "lives-in", notes=["e"])
    out = share(env, s, root)
    assert out["shared"] and out["nodes"] == 2 and out["edges"] == 1
    d = os.path.join(root, ".kg")
    assert sorted(os.listdir(d)) == [".gitattributes", ".gitignore", "README.md", "edges.jsonl", "nodes.jsonl"]
    assert open(os.path.join(d, ".gitattributes")).read() == "*.jsonl merge=union text eol=lf\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(os.path.join(d, "nodes.jsonl")).st_mode) == 0o644 & ~umask
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755 & ~umask
    lines = kg_lines(root)
    assert [n["id"] for n in lines] == ["Cache", "cache"]
    assert lines[1] == {"id": "cache", "gist": "the cache is per user", "notes": ["n1"], "touches": ["src/c.py"],
                        "created": env.T0, "changed": env.T0, "v": 1, "vv": {clone_of(s, root): 1}, "by": AUTHOR}
    assert kg_lines(root, "edges.jsonl")[0]["notes"] == ["e"]
    assert not any(k.startswith("_") for n in lines for k in n)
    assert s.project_graph(os.path.realpath(root)).shared


def test_a_put_journals_only_and_the_pause_writes_one_line(env):
    root = env.project()
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "a", "first")
    s.put_node(sess, "project", "b", "second")
    share(env, s, root)
    before = open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read()
    env.advance(1)
    s.put_node(sess, "project", "a", "first, changed")
    assert open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read() == before  # not per put
    pause(env, s)
    after = open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read()
    diff = [(x, y) for x, y in zip(before.splitlines(), after.splitlines()) if x != y]
    assert len(diff) == 1 and b"first, changed" in diff[0][1]


def test_reading_never_changes_the_files(env):
    root = env.project()
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "a", "first")
    share(env, s, root)
    pause(env, s)
    state = os.stat(os.path.join(root, ".kg", "nodes.jsonl"))
    env.advance(10)
    s.read_nodes(sess, ["a"])
    s.read_graphs(sess)
    pause(env, s)
    s.maintenance()
    st2 = os.stat(os.path.join(root, ".kg", "nodes.jsonl"))
    assert (st2.st_mtime_ns, st2.st_ino) == (state.st_mtime_ns, state.st_ino)


def test_a_repository_holding_kg_is_loaded_by_the_first_session(env):
    root = env.project()
    write_kg(root, [N("shared-one", "from a teammate", ["n"])],
             [{"from": "shared-one", "to": "src/x.py", "rel": "in", "notes": [], "changed": 5.0}])
    s = env.open()
    sess = s.start_session(root)
    view = s.read_graphs(sess)["project"]
    assert [n["id"] for n in view["nodes"]] == ["shared-one"]
    g = s.project_graph(os.path.realpath(root))
    assert g.shared and g.nodes["shared-one"]["_created_ts"] == 1_600_000_000.0
    assert len(g.edges) == 1
    assert open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read() == kg_format.render(
        {"shared-one": N("shared-one", "from a teammate", ["n"])})  # loading wrote nothing


def test_pickup_reaches_other_sessions_sync_and_keeps_personal_state(env):
    root = env.project()
    write_kg(root, [N("a", "v1"), N("b", "v1")])
    s = env.open()
    sess = s.start_session(root)
    s.read_nodes(sess, ["a"])  # personal: last read
    g = s.project_graph(os.path.realpath(root))
    read_ts = g.nodes["a"]["_read_ts"]
    s.sync(sess)
    write_kg(root, [N("a", "v2", ["new"], changed=1_600_000_100.0), N("c", "new node")])
    s.team.poll()
    assert g.nodes["a"]["gist"] == "v2" and g.nodes["a"]["_read_ts"] == read_ts
    assert "b" not in g.nodes and "c" in g.nodes
    diff = s.sync(sess)
    assert {n["id"] for n in diff["nodes"]} == {"a", "c"}
    # b left the view because the files lost it (no tombstone: no one deleted it): kg_sync says it
    # left, never that it was deleted (contract 9), and no tombstone is written for it
    assert diff["deleted_nodes"] == [] and diff["left_nodes"] == [{"level": "project", "id": "b"}]
    assert all("deleted" not in n for n in kg_lines(root))
    s.team.poll()  # unchanged files: nothing
    assert s.sync(sess)["nodes"] == []


def test_explicit_delete_writes_a_tombstone_and_compaction_drop_does_not(env):
    root = env.project()
    write_kg(root, [N("a"), N("b"), N("c")])
    s = env.open()
    sess = s.start_session(root)
    s.delete_node(sess, "a")
    pause(env, s)
    lines = {n["id"]: n for n in kg_lines(root)}
    # after seeing a's version 0 (a round 3 line, no vector)
    assert lines["a"] == {"id": "a", "deleted": env.t[0] - 5, "v": 1, "vv": {clone_of(s, root): 1}}
    # Compaction's deletion (orphan grace) removes b from this person's view only.
    g = s.project_graph(os.path.realpath(root))
    with s.writes.writing(None) as w:
        s.writes.change(w, s.registry.project(os.path.realpath(root)), [{"op": "del_node", "id": "b"}],
                        lambda g: g.delete_node("b"))
    pause(env, s)
    lines = {n["id"]: n for n in kg_lines(root)}
    assert "deleted" not in lines["b"] and "b" not in g.nodes
    assert "b" in team_state.state(g.meta)["dropped"]["node"]
    s.team.poll()
    assert "b" not in g.nodes  # stays out while nobody changes it
    write_kg(root, [N("b", "a teammate changed it", changed=1_700_000_500.0), N("c")])
    s.team.poll()
    assert g.nodes["b"]["gist"] == "a teammate changed it"


def test_a_teammates_change_after_my_delete_survives_it(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    sess = s.start_session(root)
    s.delete_node(sess, "a")  # at T0, not yet written: a tombstone of version 1
    # The teammate changed the version both had seen (0), without seeing the delete: the two are
    # concurrent (neither vector covers the other), so time decides, and the change came later.
    write_kg(root, [N("a", "changed later", changed=env.T0 + 1, v=1)])
    s.team.poll()
    g = s.project_graph(os.path.realpath(root))
    assert g.nodes["a"]["gist"] == "changed later"
    pause(env, s)
    assert kg_lines(root)[0]["gist"] == "changed later"


def test_state_survives_a_restart_and_a_fresh_store_writes_nothing(env):
    root = env.project()
    write_kg(root, [N("a"), N("b")])
    s = env.open()
    s.start_session(root)
    env.close(s)
    data = open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read()
    write_kg(root, [N("a")])  # b deleted by a checkout while kgd was down
    s = env.open()
    s.start_session(root)
    g = s.project_graph(os.path.realpath(root))
    assert set(g.nodes) == {"a"}
    assert b'"b"' in data and kg_lines(root) == [N("a")]


def test_hostile_files_load_the_rest(env, caplog):
    root = env.project()
    d = os.path.join(root, ".kg")
    os.makedirs(d)
    good = kg_format.canonical(N("ok")).encode()
    dup = b"\n".join(kg_format.canonical(N("dup", "v%d" % i, changed=i + 1.0)).encode() for i in range(10000))
    junk = b'{"id":"x","gist":' + b'"y' * 10 + b"\n" + b"x" * (kg_format.MAX_LINE + 5) + b"\n<<<<<<< HEAD\n"
    case = kg_format.canonical(N("Case")).encode() + b"\n" + kg_format.canonical(N("case")).encode()
    with open(os.path.join(d, "nodes.jsonl"), "wb") as f:
        f.write(good + b"\n" + dup + b"\n" + junk + case + b"\n>>>>>>> x\n")
    os.symlink("/dev/zero", os.path.join(d, "edges.jsonl"))
    s = env.open()
    sess = s.start_session(root)
    g = s.project_graph(os.path.realpath(root))
    assert set(g.nodes) == {"ok", "dup", "Case", "case"} and g.nodes["dup"]["gist"] == "v9999"
    durable = s.registry.project(os.path.realpath(root))
    assert any("not JSON" in p for p in durable.shared.problems)
    assert any("edges.jsonl" in p for p in durable.shared.problems)
    assert "problem" in caplog.text
    s.put_node(sess, "project", "new", "still serving")
    pause(env, s)
    data = open(os.path.join(d, "nodes.jsonl"), "rb").read()
    assert not kg_format.needs_rewrite(data, kg_format.parse(data, "node")[0])  # written back clean
    assert os.path.islink(os.path.join(d, "edges.jsonl"))


def test_share_off_stops_reading_and_writing_and_keeps_the_graph(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    sess = s.start_session(root)
    s.team.share(root, off=True)
    g = s.project_graph(os.path.realpath(root))
    s.put_node(sess, "project", "b", "private now")
    pause(env, s)
    write_kg(root, [N("a"), N("z")])
    s.team.poll()
    assert set(g.nodes) == {"a", "b"} and not g.shared
    env.close(s)
    s = env.open()
    s.start_session(root)
    assert not s.project_graph(os.path.realpath(root)).shared
    assert s.team.share(root)["shared"]
    assert {n["id"] for n in kg_lines(root)} == {"a", "b", "z"}


def test_share_outside_git_is_refused(env):
    root = env.project(git=False)
    s = env.open()
    with pytest.raises(Exception, match="git"):
        s.team.share(root)
    assert not holds_kg(root)


def test_a_crash_after_the_pickup_record_replays_it(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    s.start_session(root)
    write_kg(root, [N("a", "v2", changed=1_600_000_100.0)])
    s.team.poll()
    s.crashed = True
    for d in s.registry.durables():
        d.journal.close()
    s.root_lock.release()
    s2 = env.open()
    s2.start_session(root)
    g = s2.project_graph(os.path.realpath(root))
    assert g.nodes["a"]["gist"] == "v2"
    assert team_state.state(g.meta)["base"]["node"]["a"] == kg_format.stamp(N("a", "v2", changed=1_600_000_100.0))


def test_a_linked_worktree_holding_kg_is_its_own_project(tmp_path):
    from kg.memory.projects import resolve_project_root
    main = tmp_path / "main"
    gitdir = main / ".git" / "worktrees" / "wt1"
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    wt = tmp_path / "wt1"
    wt.mkdir()
    (wt / ".git").write_text("gitdir: %s\n" % gitdir)
    assert resolve_project_root(str(wt)) == os.path.realpath(str(main))
    (wt / ".kg").mkdir()
    assert resolve_project_root(str(wt)) == os.path.realpath(str(wt))


def test_a_project_loaded_first_by_a_search_is_shared_when_a_session_opens_it(env):
    root = env.project()
    s = env.open()
    s.start_session(root)
    env.close(s)
    write_kg(root, [N("from-the-repo")])
    s = env.open()
    s.search("anything")  # loads every project graph on disk, no session
    sess = s.start_session(root)
    assert [n["id"] for n in s.read_graphs(sess)["project"]["nodes"]] == ["from-the-repo"]


# ---------------------------------------------------------------- credentials (contract section 10)

def _credential():
    import secrets_corpus
    return next(t for k, t in secrets_corpus.credentials() if k == "github")


def test_a_credential_pulled_in_kg_is_loaded_hidden(env):
    root = env.project()
    write_kg(root, [N("ok", "fine"), N("leak", "the deploy token", [_credential()])])
    s = env.open()
    sess = s.start_session(root)
    g = s.project_graph(os.path.realpath(root))
    assert "leak" in g.nodes and "leak" in g.flagged
    assert [n["id"] for n in s.read_graphs(sess)["project"]["nodes"]] == ["ok"]
    s.put_node(sess, "project", "ok", "fine, changed")
    pause(env, s)
    assert {n["id"] for n in kg_lines(root)} == {"ok", "leak"}  # the teammate's line stays as it was


def test_kgd_never_writes_a_credential_to_kg(env, caplog):
    root = env.project()
    s = env.open(secret_scan=False)  # the scan off lets a private graph hold one
    sess = s.start_session(root)
    s.put_node(sess, "project", "leak", "the deploy token", notes=[_credential()])
    s.put_node(sess, "project", "ok", "fine")
    s.put_edge(sess, "project", "ok", "leak", "see")
    s.put_edge(sess, "project", "ok", "src/x.py", "in")
    s.team.share(root)
    data = open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read() + open(
        os.path.join(root, ".kg", "edges.jsonl"), "rb").read()
    assert [n["id"] for n in kg_lines(root)] == ["ok"]
    assert [e["to"] for e in kg_lines(root, "edges.jsonl")] == ["src/x.py"]
    assert _credential().encode() not in data and b"leak" not in data
    assert "holding a credential are never written" in caplog.text


def test_a_pickup_waits_while_git_works_in_the_checkout(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    s.start_session(root)
    g = s.project_graph(os.path.realpath(root))
    lock = os.path.join(root, ".git", "index.lock")
    open(lock, "w").close()
    with open(os.path.join(root, ".kg", "nodes.jsonl"), "wb") as f:
        f.write(b"")  # what a checkout may leave for a moment: the file half-written
    old = os.stat(os.path.join(root, ".kg", "nodes.jsonl")).st_mtime_ns - 10**9
    os.utime(os.path.join(root, ".kg", "nodes.jsonl"), ns=(old, old))
    s.team.poll()
    assert "a" in g.nodes  # not emptied while git holds its lock
    os.unlink(lock)
    write_kg(root, [N("a"), N("b")])
    os.utime(os.path.join(root, ".kg", "nodes.jsonl"), ns=(old, old))
    s.team.poll()
    assert set(g.nodes) == {"a", "b"}


def test_a_credential_changed_on_both_sides_is_merged_in_memory_and_never_written(env):
    root = env.project()
    write_kg(root, [N("ok")])
    s = env.open(secret_scan=False)
    sess = s.start_session(root)
    g = s.project_graph(os.path.realpath(root))
    g.shared = False  # the scan is off for private graphs only: let one in, as an older kgd might have
    s.put_node(sess, "project", "leak", "token", notes=[_credential()])
    g.shared = True
    write_kg(root, [N("ok"), N("leak", "a teammate's version", ["theirs"], changed=env.T0 + 50, v=1)])
    s.team.poll()
    assert g.nodes["leak"]["gist"] == "a teammate's version" and _credential() in g.nodes["leak"]["notes"]
    pause(env, s)
    data = open(os.path.join(root, ".kg", "nodes.jsonl"), "rb").read()
    assert _credential().encode() not in data


def test_a_file_from_the_future_does_not_stall_the_beat(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    s.start_session(root)
    write_kg(root, [N("a"), N("b")])
    future = time.time_ns() + 3600 * 10**9
    os.utime(os.path.join(root, ".kg", "nodes.jsonl"), ns=(future, future))
    t = time.monotonic()
    s.team.poll()
    assert time.monotonic() - t < 1 and "b" in s.project_graph(os.path.realpath(root)).nodes


def test_a_file_written_a_moment_ago_is_picked_up_after_it_settles(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    s.start_session(root)
    with open(os.path.join(root, ".kg", "nodes.jsonl"), "ab") as f:
        f.write(kg_format.render({"b": N("b")}))
    s.team.poll()  # the same beat waits the moment out, then picks it up
    assert "b" in s.project_graph(os.path.realpath(root)).nodes


def test_shutdown_while_git_works_leaves_kg_alone_and_the_next_start_writes_it(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "late", "written just before shutdown")
    lock = os.path.join(root, ".git", "index.lock")
    open(lock, "w").close()
    env.close(s)
    assert [n["id"] for n in kg_lines(root)] == ["a"]
    os.unlink(lock)
    s = env.open()
    s.start_session(root)
    assert [n["id"] for n in kg_lines(root)] == ["a", "late"]


def test_a_pickup_reaches_the_live_feed_like_any_change(env):
    root = env.project()
    write_kg(root, [N("a")])
    s = env.open()
    s.start_session(root)
    seen = []
    s.add_listener(seen.append)
    write_kg(root, [N("a", "changed by a pull", changed=1_600_000_050.0)])
    s.team.poll()
    puts = [e for e in seen if e["type"] == "node_put"]
    assert [e["node"]["gist"] for e in puts] == ["changed by a pull"]
    assert puts[0]["level"] == "project" and puts[0]["project_path"] == os.path.realpath(root)


def test_a_first_load_parses_kg_outside_the_store_lock(env, monkeypatch):
    """A large committed .kg/ must not hold the lock every request waits for while it is parsed."""
    root = env.project()
    write_kg(root, nodes=[N("a"), N("b")], edges=[{"from": "a", "to": "b", "rel": "r", "notes": [],
                                                   "changed": 1_600_000_000.0}])
    s = env.open()
    owned, parse = [], kg_format.Reader.parse
    monkeypatch.setattr(kg_format.Reader, "parse",
                        lambda self, *a, **k: owned.append(s.lock._is_owned()) or parse(self, *a, **k))
    s.start_session(root)
    assert owned == [False, False]
    assert sorted(s.project_graph(root).nodes) == ["a", "b"]


def test_a_kg_file_cut_at_the_line_bound_loads_its_first_lines_and_is_never_written(env, monkeypatch):
    monkeypatch.setitem(kg_format.MAX_RECORDS, "node", 3)
    root = env.project()
    write_kg(root, nodes=[N("n%d" % i) for i in range(5)])
    path = os.path.join(root, ".kg", "nodes.jsonl")
    before = open(path, "rb").read()
    s = env.open()
    sess = s.start_session(root)
    assert sorted(s.project_graph(root).nodes) == ["n0", "n1", "n2"]
    d = s.registry.project(root)
    assert any("more than 3 lines" in p for p in d.shared.problems)
    s.put_node(sess, "project", "mine", "kept by kgd")
    s.put_node(sess, "project", "n1", "changed here")
    pause(env, s)
    env.close(s)
    assert open(path, "rb").read() == before  # the two lines it skipped stay in the repository
    s = env.open()
    s.start_session(root)
    assert {"mine", "n1"} <= set(s.project_graph(root).nodes)
    assert s.project_graph(root).nodes["n1"]["gist"] == "changed here"


def test_knowledge_had_before_kg_arrived_stays_personal_until_kgd_share_publishes_it(env):
    """Contract 9, "Personal until published": a pull never publishes anything."""
    from kg.api import render

    root = env.project()
    s = env.open()
    sess = s.start_session(root)
    s.put_node(sess, "project", "my-note", "my manager thinks this code is a mess")
    s.put_node(sess, "project", "mine-too", "another thought of mine")
    write_kg(root, [N("team-fact", "what the team knows")])  # a pull brought .kg/
    s.team.poll()
    g = s.project_graph(os.path.realpath(root))
    assert g.shared and "team-fact" in g.nodes
    s.put_node(sess, "project", "after", "written once the project was shared")
    pause(env, s)
    ids = {n["id"] for n in kg_lines(root)}
    assert ids == {"team-fact", "after"}, ids  # the two old ones stayed personal
    shown = s.read_nodes(sess, ["my-note"])
    assert shown["nodes"][0]["unpublished"] is True and "not published yet" in render.render_nodes(shown)
    out = s.team.share(root)
    assert out["published"] == 2
    assert {n["id"] for n in kg_lines(root)} == {"team-fact", "after", "my-note", "mine-too"}
    assert "unpublished" not in s.read_nodes(sess, ["my-note"])["nodes"][0]


def test_compaction_with_no_orphan_grace_never_removes_anything_from_kg(env):
    """Contract 9: compaction is personal, also when KG_ORPHAN_GRACE_DAYS=0 deletes at once and when
    a node is deleted before its first export."""
    root = env.project()
    write_kg(root, [N("team-%02d" % i, "what the team knows %d" % i, notes=["x" * 400]) for i in range(20)])
    s = env.open(max_tokens=300, grace_days=0, orphan_grace_days=0)
    sess = s.start_session(root)
    s.put_node(sess, "project", "fresh", "put here and compacted away before any export", notes=["y" * 400])
    for _ in range(4):  # archive, orphan, delete: each pass a day later, nothing read meanwhile
        env.advance(2 * 86400)
        s.maintenance()
    g = s.project_graph(os.path.realpath(root))
    gone = {"team-%02d" % i for i in range(20)} - set(g.nodes)
    assert gone, "compaction deleted no team node: the test proves nothing"
    pause(env, s)
    view = kg_view.live(root)
    assert {"team-%02d" % i for i in range(20)} <= set(view), sorted(view)
    assert all("deleted" not in r for r in kg_view.records(root).values())
