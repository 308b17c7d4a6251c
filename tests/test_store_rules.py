"""Store rules kgd chose where the contract is silent (docs/behaviour.md): a node's text is
bounded; kgd's graph files read right by the reference plugin (state by key presence);
edge ends that name a file without a dot."""

import json
import os

import pytest

from kg.core import model
from kg.core.errors import BadInput, NotFound
from kg.memory.store import Settings, Store
from kg.travel import team

T0 = 1_700_000_000.0
DAY = 86400.0


@pytest.fixture
def env(tmp_path):
    t = [T0]
    opened = []

    class E:
        root = str(tmp_path / "root")
        clock = staticmethod(lambda: t[0])

        @staticmethod
        def advance(s):
            t[0] += s

        @staticmethod
        def open(**kw):
            kw.setdefault("max_tokens", 10 ** 9)
            st = team.install(Store(E.root, Settings(**kw), clock=E.clock)).open()
            opened.append(st)
            return st

        @staticmethod
        def project(name="app"):
            d = tmp_path / "work" / name
            (d / ".git").mkdir(parents=True, exist_ok=True)
            return str(d)
    yield E
    for st in opened:
        if not st.closed:
            st.close()


# ---------------------------------------------------------------- MAX_NODE_TEXT: one node cannot flood the memory

def test_node_text_limit_is_16000():
    assert model.MAX_NODE_TEXT == 16000


def test_a_node_over_the_text_limit_is_refused(env):
    st = env.open()
    s = st.start_session(None)
    with pytest.raises(BadInput) as e:
        st.put_node(s, "user", "big", "g", notes=["x" * 10000, "y" * 6000])
    msg = e.value.message
    assert "16000" in msg and "split it into several nodes joined by edges" in msg.lower()
    assert "big" not in st.user.nodes
    st.put_node(s, "user", "fits", "g" * 1000, notes=["x" * 10000, "y" * 5000])  # exactly 16000
    assert "fits" in st.user.nodes


def test_a_merge_counts_the_notes_it_keeps(env):
    st = env.open()
    s = st.start_session(None)
    st.put_node(s, "user", "n", "short", notes=["x" * 10000, "y" * 5000])
    with pytest.raises(BadInput):
        st.put_node(s, "user", "n", "g" * 1001)        # notes omitted: the old ones stay and count
    assert st.user.nodes["n"]["gist"] == "short"
    st.put_node(s, "user", "n", "g" * 1001, notes=["z"])  # notes replaced: fits
    assert st.user.nodes["n"]["notes"] == ["z"]


def test_a_refused_node_leaves_no_trace_on_disk(env):
    st = env.open()
    s = st.start_session(None)
    with pytest.raises(BadInput):
        st.put_node(s, "user", "big", "g", notes=["x" * 10000] * 2)
    st.close()
    st = env.open()
    assert "big" not in st.user.nodes


# ------------------------------------------------ state keys only when set (the reference plugin reads presence)


def plugin_state(node):
    """How the reference plugin (v0.9.6) decides a node's state: by key presence."""
    if "_orphaned_ts" in node:
        return model.ORPHANED
    if node.get("_archived"):
        return model.ARCHIVED
    return model.ACTIVE


def test_the_reference_plugin_reads_every_state_of_a_kgd_file(env):
    """A graph taken through every transition kgd makes (put, compaction archive and orphan,
    read promotion with chain rescue, revive by put, restore by resurrection) and written to
    disk: the plugin's key-presence reading agrees with kgd's state for every node."""
    st = env.open(max_tokens=200, grace_days=1)
    s = st.start_session(None)
    for i in range(30):
        st.put_node(s, "user", "n%02d" % i, "g" * 80)
        if i:
            st.put_edge(s, "user", "n%02d" % i, "n%02d" % (i - 1), "follows")
        env.advance(3600)
    env.advance(2 * DAY)
    st.put_node(s, "user", "trigger", "g" * 80)
    st.maintenance()
    states = {model.node_state(n) for n in st.user.nodes.values()}
    assert states == {model.ACTIVE, model.ARCHIVED, model.ORPHANED}, states
    archived = sorted(st.user.by_state[model.ARCHIVED])
    orphaned = sorted(st.user.by_state[model.ORPHANED])
    st.read_nodes(s, [archived[0]])                        # promotion + chain rescue
    st.put_node(s, "user", orphaned[-1], "revived by a put")
    st.fold_idle(force=True)
    expected = {nid: model.node_state(n) for nid, n in st.user.nodes.items()}
    assert set(expected.values()) == {model.ACTIVE, model.ARCHIVED, model.ORPHANED}
    with open(os.path.join(env.root, "user.json")) as f:
        on_disk = json.load(f)["nodes"]
    assert {nid: plugin_state(n) for nid, n in on_disk.items()} == expected
    for n in on_disk.values():
        assert n.get("_archived", True) is True          # never written as false
        assert n.get("_orphaned_ts", 0) is not None      # never written as null


def test_journal_records_carry_no_unset_state_keys(env):
    st = env.open()
    s = st.start_session(None)
    st.put_node(s, "user", "a", "g")
    with open(os.path.join(env.root, "user.journal")) as f:
        rec = json.loads(f.readline())
    assert "_archived" not in rec["node"] and "_orphaned_ts" not in rec["node"]


def test_both_forms_load(env, tmp_path):
    os.makedirs(env.root, mode=0o700)
    nodes = {
        "old-active": {"id": "old-active", "gist": "g", "_archived": False, "_orphaned_ts": None},
        "old-archived": {"id": "old-archived", "gist": "g", "_archived": True, "_orphaned_ts": None},
        "old-orphan": {"id": "old-orphan", "gist": "g", "_archived": True, "_orphaned_ts": 5.0},
        "new-active": {"id": "new-active", "gist": "g"},
        "new-archived": {"id": "new-archived", "gist": "g", "_archived": True},
    }
    with open(os.path.join(env.root, "user.json"), "w") as f:
        json.dump({"nodes": nodes, "edges": {}, "_meta": {}}, f)
    with open(os.path.join(env.root, "user.journal"), "w") as f:
        f.write(json.dumps({"op": "node", "node": {"id": "journal-active", "gist": "g", "notes": [], "touches": [],
                                                   "_archived": False, "_orphaned_ts": None}}) + "\n")
    st = env.open()
    got = {nid: model.node_state(n) for nid, n in st.user.nodes.items()}
    assert got == {"old-active": "active", "old-archived": "archived", "old-orphan": "orphaned",
                   "new-active": "active", "new-archived": "archived", "journal-active": "active"}
    with open(os.path.join(env.root, "user.json")) as f:
        on_disk = json.load(f)["nodes"]
    assert {nid: plugin_state(n) for nid, n in on_disk.items()} == got


# ---------------------------------------------------------------- file ends without a dot (Makefile, bin/)

def make_project(env):
    p = env.project()
    with open(os.path.join(p, "Makefile"), "w") as f:
        f.write("all:\n")
    os.mkdir(os.path.join(p, "bin"))
    return p


def test_an_end_naming_a_file_or_folder_under_the_root_is_accepted(env):
    p = make_project(env)
    st = env.open()
    s = st.start_session(p)
    st.put_node(s, "project", "build", "uses make")
    assert st.put_edge(s, "project", "build", "Makefile", "defined-in")["created"]
    assert st.put_edge(s, "project", "build", "bin", "writes-to")["created"]


def test_an_end_named_in_some_touches_is_accepted(env):
    st = env.open()
    s = st.start_session(env.project())
    st.put_node(s, "project", "lic", "licence terms", touches=["LICENSE"])
    st.put_node(s, "project", "other", "g")
    assert st.put_edge(s, "project", "other", "LICENSE", "cites")["created"]
    u = st.start_session(None)
    st.put_node(u, "user", "taste", "g", touches=["Dockerfile"])
    assert st.put_edge(u, "user", "taste", "Dockerfile", "about")["created"]


@pytest.mark.parametrize("end", ["Dockerfile", "nothing-here", "Makefile2", "bin2"])
def test_other_bare_names_are_still_refused(env, end):
    p = make_project(env)
    st = env.open()
    s = st.start_session(p)
    st.put_node(s, "project", "build", "g")
    with pytest.raises(NotFound) as e:
        st.put_edge(s, "project", "build", end, "rel")
    assert "neither a node" in e.value.message and "src/app.py" in e.value.message


def test_user_level_does_not_look_at_project_files(env):
    p = make_project(env)
    st = env.open()
    s = st.start_session(p)
    st.put_node(s, "user", "u", "g")
    with pytest.raises(NotFound):
        st.put_edge(s, "user", "u", "Makefile", "rel")


def test_a_symlink_leading_out_of_the_root_does_not_count(env, tmp_path):
    p = env.project()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret").write_text("x")
    os.symlink(str(outside / "secret"), os.path.join(p, "Secretfile"))
    os.symlink(str(outside / "missing"), os.path.join(p, "Dangling"))
    os.symlink(os.path.join(p, ".git"), os.path.join(p, "Inside"))
    st = env.open()
    s = st.start_session(p)
    st.put_node(s, "project", "n", "g")
    for end in ("Secretfile", "Dangling"):
        with pytest.raises(NotFound):
            st.put_edge(s, "project", "n", end, "rel")
    assert st.put_edge(s, "project", "n", "Inside", "rel")["created"]


# ---------------------------------------------------------------- a compaction pass: one journal record

def test_a_compaction_pass_is_one_journal_record_that_replays_to_the_same_states(env):
    """kg/memory/write_path.py journals a pass as one record of the state keys it changed (a pass
    over a big graph, e.g. a teammate's .kg/ loaded, once took a record per node under the lock);
    replayed on the graph file, as after a crash before the fold, it gives every node its state."""
    from kg.core.graph import apply_record, graph_from_obj
    from kg.disk.journal import Journal
    from kg.disk.layout import journal_path

    st = env.open(max_tokens=300)
    s = st.start_session(None)
    path = st.registry.layout.user_file
    for i in range(40):
        st.put_node(s, "user", "n%02d" % i, "gist number %d about something" % i)
    st.registry.user.fold()  # the graph file holds them, the journal is empty
    with open(path) as fh:
        base = json.load(fh)
    assert Journal.replay(journal_path(path)) == []
    env.advance(8 * DAY)  # past grace: the next write's pass archives most of them
    st.put_node(s, "user", "trigger", "one more")
    recs = Journal.replay(journal_path(path))
    passes = [r for r in recs if r.get("op") == "compacted"]
    assert len(passes) == 1 and not [r for r in recs if r.get("op") == "node" and r["node"]["id"] != "trigger"]
    states = {nid: model.node_state(n) for nid, n in st.user.nodes.items()}
    assert sorted(set(states.values())) != [model.ACTIVE]  # the pass did archive
    g = graph_from_obj(base, "user")
    for r in recs:
        apply_record(g, r)
    assert {nid: model.node_state(n) for nid, n in g.nodes.items()} == states
