"""kg/memory/sessions.py and the store's client binding (contract section 8): a Claude Code session id finds
its kgd session again, across a clean restart, for at least 30 days; what it was shown is
bounded and persisted; old sessions.json files still load."""

import json
import os

import pytest

from kg.api import rest
from kg.core.errors import BadInput, NotFound
from kg.core.graph import Graph
from kg.memory import sessions
from kg.memory.sessions import MAX_SHOWN, Session

from helpers import StoreEnv

T0 = StoreEnv.T0
DAY = 86400.0


@pytest.fixture
def env(tmp_path):
    e = StoreEnv(tmp_path)
    yield e
    for st in list(e.stores):
        st.close()


def test_bind_client_starts_then_finds_the_same_session(env):
    st = env.open()
    s, known = st.bind_client("claude-1", env.project())
    assert known is False
    assert s.client_id == "claude-1"
    assert s.project_path == os.path.realpath(env.project())
    again, known = st.bind_client("claude-1", env.project())
    assert known is True and again is s
    other, known = st.bind_client("claude-2", env.project())
    assert known is False and other.id != s.id
    assert st.session(s.id) is s  # an ordinary kgd session as well


def test_bind_client_without_cwd_is_user_level_only(env):
    st = env.open()
    s, known = st.bind_client("c", None)
    assert not known and s.project_path is None


@pytest.mark.parametrize("bad", [None, "", "   ", 7, "x" * 201, "a\x00b", "a\nb", "a\x85b"])
def test_bind_client_validates_the_id(env, bad):
    st = env.open()
    with pytest.raises(BadInput):
        st.bind_client(bad, env.project())
    assert st.sessions == {}


def test_client_id_of_200_characters_is_accepted(env):
    st = env.open()
    s, _ = st.bind_client("x" * 200, None)
    assert s.client_id == "x" * 200


def test_bound_session_survives_a_clean_restart_with_its_state(env):
    st = env.open()
    s, _ = st.bind_client("claude-1", env.project())
    st.mark_shown(s, ["user:a", "project:b"], now=T0 + 5)
    s.hook["prompts"] = 3
    st.save_hook_state(s)
    env.close(st)
    st = env.open()
    again, known = st.bind_client("claude-1", env.project())
    assert known is True and again.id == s.id
    assert again.shown == {"user:a": T0 + 5, "project:b": T0 + 5}
    assert list(again.shown) == ["user:a", "project:b"]
    assert again.hook == {"prompts": 3}


def test_bound_session_is_kept_30_days_others_keep_the_ttl(env):
    st = env.open(session_ttl=3600)
    bound, _ = st.bind_client("claude-1", None)
    plain = st.start_session(None)
    env.t[0] += 2 * 3600
    with pytest.raises(NotFound):
        st.session(plain.id)
    assert st.session(bound.id) is bound
    env.t[0] += 29 * DAY
    assert st.bind_client("claude-1", None) == (bound, True)
    st.maintenance()
    assert bound.id in st.sessions
    env.t[0] += 30 * DAY + 1
    st.maintenance()
    assert bound.id not in st.sessions
    fresh, known = st.bind_client("claude-1", None)
    assert not known and fresh.id != bound.id


def test_a_longer_ttl_than_30_days_applies_to_bound_sessions_too(env):
    st = env.open(session_ttl=40 * DAY)
    bound, _ = st.bind_client("c", None)
    env.t[0] += 35 * DAY
    assert st.bind_client("c", None) == (bound, True)


def test_bound_session_expired_while_down_is_not_restored(env):
    st = env.open(session_ttl=3600)
    s, _ = st.bind_client("claude-1", None)
    env.close(st)
    env.t[0] += 31 * DAY
    st = env.open(session_ttl=3600)
    assert s.id not in st.sessions
    assert st.bind_client("claude-1", None)[1] is False


def test_shown_is_bounded_oldest_dropped_and_reshown_moves_to_the_end(env):
    st = env.open()
    s, _ = st.bind_client("c", None)
    st.mark_shown(s, ["user:n%d" % i for i in range(MAX_SHOWN)], now=T0)
    st.mark_shown(s, ["user:n0"], now=T0 + 1)            # re-shown: now the newest
    st.mark_shown(s, ["project:x", "project:y"], now=T0 + 2)
    assert len(s.shown) == MAX_SHOWN
    assert "user:n1" not in s.shown and "user:n2" not in s.shown
    assert "user:n0" in s.shown and list(s.shown)[-3:] == ["user:n0", "project:x", "project:y"]
    st.forget_shown(s)
    assert s.shown == {}


def test_mark_shown_uses_the_store_clock_by_default(env):
    st = env.open()
    s, _ = st.bind_client("c", None)
    st.mark_shown(s, ["user:a"])
    assert s.shown == {"user:a": T0}


def test_hook_state_is_saved_by_the_next_maintenance_pass(env):
    st = env.open()
    s, _ = st.bind_client("c", None)
    s.hook["nudges"] = 1
    st.save_hook_state(s)
    assert st._sessions.dirty
    st.maintenance()
    with open(os.path.join(env.root, "sessions.json")) as f:
        saved = json.load(f)["sessions"][s.id]
    assert saved["hook"] == {"nudges": 1} and saved["client_id"] == "c"


def test_old_sessions_file_without_the_new_fields_loads(env, tmp_path):
    os.makedirs(env.root, mode=0o700)
    old = {"seq": 4, "clean": True, "sessions": {"s1": {
        "id": "s1", "project_path": None, "started": T0 - 10, "last_active": T0 - 5,
        "sync_mark": 4, "writes": 0, "reads": 0}}}
    with open(os.path.join(env.root, "sessions.json"), "w") as f:
        json.dump(old, f)
    st = env.open()
    s = st.session("s1")
    assert s.client_id is None and s.shown == {} and s.hook == {}
    assert st.bind_client("c", None)[0] is not s


def test_garbled_new_fields_load_as_defaults():
    s = Session.from_obj({"id": "s", "started": 1.0, "client_id": 5, "shown": {"a": "x", "b": 2, 3: 4},
                          "hook": ["no"]})
    assert s.client_id is None and s.shown == {"b": 2.0} and s.hook == {}


def test_only_one_session_per_client_in_a_file():
    table = sessions.Sessions("/nonexistent/sessions.json", 100)
    a = Session("a", None, 1.0, 0, client_id="c")
    b = Session("b", None, 2.0, 0, client_id="c")
    table.add(a)
    table.add(b)
    assert table.by_client["c"] is b and a.client_id is None


def test_session_stats_keep_their_fields(env):
    st = env.open()
    s, _ = st.bind_client("c", None)
    st.mark_shown(s, ["user:a"])
    assert set(rest.session_stats(st, s)) == {"id", "project_path", "started", "last_active", "sync_mark",
                                        "writes", "reads", "pending_changes"}


def test_recall_index_is_dropped_with_the_corpus(env):
    st = env.open()
    s = st.start_session(None)
    st.put_node(s, "user", "a", "alpha")
    g = st.user
    assert isinstance(Graph("user"), Graph) and Graph("user").recall_index is None
    g.recall_index = object()
    st.put_node(s, "user", "b", "beta")
    assert st.user.recall_index is None
    st.user.recall_index = object()
    st.put_edge(s, "user", "a", "b", "relates-to")
    assert st.user.recall_index is None
    st.user.recall_index = object()
    st.read_nodes(s, ["a"])
    assert st.user.recall_index is None
    st.user.recall_index = object()
    st.user.recount()
    assert st.user.recall_index is None


def test_bind_client_fresh_starts_a_new_session_and_unbinds_the_old(env):
    st = env.open()
    old, _ = st.bind_client("c", None)
    new, known = st.bind_client("c", env.project(), fresh=True)
    assert not known and new.id != old.id and new.client_id == "c"
    assert old.client_id is None and st.session(old.id) is old
    assert st.bind_client("c", None) == (new, True)
    env.close(st)
    st = env.open()
    assert st.bind_client("c", None)[0].id == new.id


# ---- adoption: kg_read(cwd) right after a session-start preload reuses that session

def _bound_session(table, client, project, seen, claimed=0.0):
    s = table.start(project, seen - 5, 0, client)
    if seen is not None:
        s.hook["seen"] = seen
    s.claimed = claimed
    return s


@pytest.mark.parametrize("case, seen_ago, claimed_ago, project, adopted", [
    ("fresh preload, unused", 60, None, "/p", True),
    ("preload at the window's edge", sessions.ADOPT_WINDOW, None, "/p", True),
    ("preload older than the window", sessions.ADOPT_WINDOW + 1, None, "/p", False),
    ("used by id after the preload", 60, 30, "/p", False),
    ("used before the preload (compact re-preloaded)", 60, 90, "/p", True),
    ("another project", 60, None, "/q", False),
])
def test_adoptable_session(case, seen_ago, claimed_ago, project, adopted):
    now = T0 + 10 * DAY
    table = sessions.Sessions("/nonexistent/sessions.json", 86400)
    s = _bound_session(table, "claude-1", "/p", now - seen_ago,
                       0.0 if claimed_ago is None else now - claimed_ago)
    assert (table.adoptable(project, now) is s) is adopted, case


def test_adoptable_picks_the_newest_preload_and_ignores_unbound_sessions():
    now = T0
    table = sessions.Sessions("/nonexistent/sessions.json", 86400)
    table.start("/p", now - 10, 0)  # kg_read(cwd) session: no client, never adopted
    older = _bound_session(table, "claude-1", "/p", now - 300)
    newer = _bound_session(table, "claude-2", "/p", now - 100)
    assert table.adoptable("/p", now) is newer
    table.claim(newer, now)
    assert table.adoptable("/p", now) is older


def test_a_call_by_id_claims_the_session(env):
    st = env.open()
    s, _ = st.bind_client("claude-1", env.project())
    s.hook["seen"] = st.clock()
    assert st._sessions.adoptable(s.project_path, st.clock()) is s
    st.session(s.id)
    assert st._sessions.adoptable(s.project_path, st.clock()) is None


def test_claimed_survives_a_restart(env):
    st = env.open()
    s, _ = st.bind_client("claude-1", env.project())
    st.session(s.id)
    claimed = s.claimed
    st.close()
    again = env.open().session(s.id)
    assert again.claimed >= claimed > 0
