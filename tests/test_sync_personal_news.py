"""What a personal-remote pickup tells an open session (contract sections 3 and 9): a change of
personal state (what another machine read, archived or let go of) is no news for this session's
context, so kg_sync does not list the node again; a change of knowledge still is. Two storage
roots in one process, a real bare git remote, the round run by hand (tests/test_sync_bridge.py)."""

import pytest

from kg.core import personal
from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import team
from kg.travel.remote_bridge import Bridge
from kg.travel.remote_repo import SyncRepo

T = 2000000000.0


class Machine:
    def __init__(self, root, remote):
        self.store = team.install(Store(str(root), Settings(max_tokens=10 ** 6))).open()
        self.bridge = Bridge(self.store, str(root / "sync"))
        self.repo = SyncRepo(str(root / "sync"), remote)
        self.events = []
        self.store.add_listener(self.events.append)

    def sync(self):
        return self.repo.round(export=lambda: self.bridge.export(full=True), pickup=self.bridge.pickup)

    def node(self, nid):
        with self.store.lock:
            return dict(self.store.graph("user").nodes[nid])


@pytest.fixture
def pair(tmp_path):
    remote = str(tmp_path / "remote.git")
    git_runner.run(["init", "-q", "--bare", remote], str(tmp_path))
    a, b = Machine(tmp_path / "a", remote), Machine(tmp_path / "b", remote)
    yield a, b
    a.store.close()
    b.store.close()


def _listed(diff):
    return sorted(n["id"] for n in diff["nodes"])


@pytest.mark.parametrize("node, rec, changed", [
    # the machine's own read, rounded up to the millisecond in personal.jsonl, is no later read
    ({"id": "n", "_read_ts": T + 0.0006}, {"id": "n", "read": T + 0.001, "state": "active", "since": T}, False),
    ({"id": "n", "_read_ts": T + 0.0004}, {"id": "n", "read": T, "state": "active", "since": T}, False),
    ({"id": "n", "_read_ts": T + 0.0006}, {"id": "n", "read": T + 0.002, "state": "active", "since": T}, True),
    ({"id": "n", "_read_ts": None}, {"id": "n", "read": T, "state": "active", "since": T}, True),
    ({"id": "n", "_read_ts": T}, {"id": "n", "read": None, "state": "active", "since": T}, False),
    ({"id": "n", "_read_ts": T + 5}, {"id": "n", "read": T, "state": "active", "since": T}, False),
])
def test_apply_takes_only_a_later_read(node, rec, changed):
    before = dict(node)
    after = personal.apply(dict(node), rec)
    assert (after != before) is changed
    if changed:
        assert after["_read_ts"] == rec["read"]


def test_a_nodes_own_read_rounded_in_the_file_is_not_listed_again(pair):
    """b's session read n at a time the file rounds up; a's line for n only dates its state later:
    the pickup changes nothing of n on b, and kg_sync lists nothing."""
    a, b = pair
    a.store.put_node(None, "user", "n", "a node")
    a.sync()
    b.sync()
    s = b.store.start_session(None)
    b.store.clock = lambda: T + 0.0006  # rounds up to T + 0.001 in personal.jsonl
    b.store.read_nodes(s, ["n"], "user")
    b.sync()
    b.store.sync(s)
    assert _listed(b.store.sync(s)) == []
    # a: archived, then read back at an earlier time than b's read: active again, dated later
    node = a.node("n")
    node["_archived"] = True
    with a.store.writes.writing(None) as w:
        a.store.writes.change(w, a.store.registry.user, [{"op": "node", "node": node}],
                              lambda g: g.put_node(node), compact=False)
    a.sync()
    a.store.clock = lambda: T - 100
    a.store.read_nodes(None, ["n"], "user")
    a.sync()
    before = b.node("n")
    b.sync()
    assert b.node("n")["_read_ts"] == before["_read_ts"] == T + 0.0006
    assert _listed(b.store.sync(s)) == []


def test_what_another_machine_read_is_no_news_but_knowledge_is(pair):
    a, b = pair
    a.store.put_node(None, "user", "n", "a node")
    a.store.put_node(None, "user", "m", "another")
    a.sync()
    b.sync()
    s = b.store.start_session(None)
    b.store.read_nodes(s, ["n"], "user")
    b.store.sync(s)
    a.store.clock = lambda: T
    a.store.read_nodes(None, ["n", "m"], "user")  # a later read on a: personal state only
    a.store.put_node(None, "user", "k", "new knowledge")
    a.sync()
    del b.events[:]
    b.sync()
    assert b.node("n")["_read_ts"] == b.node("m")["_read_ts"] == T  # the later read travelled
    assert _listed(b.store.sync(s)) == ["k"]
    # the live feed still hears the personal change (the viewer shows states), kg_sync does not
    heard = {e["node"]["id"] for e in b.events if e["type"] == "node_put"}
    assert heard >= {"k", "n", "m"}


def test_a_state_another_machine_changed_travels_without_a_kg_sync_entry(pair):
    a, b = pair
    a.store.put_node(None, "user", "n", "a node")
    a.sync()
    b.sync()
    s = b.store.start_session(None)
    b.store.sync(s)
    node = a.node("n")
    node["_archived"] = True
    with a.store.writes.writing(None) as w:
        a.store.writes.change(w, a.store.registry.user, [{"op": "node", "node": node}],
                              lambda g: g.put_node(node), compact=False)
    a.sync()
    b.sync()
    assert b.node("n").get("_archived") is True
    assert _listed(b.store.sync(s)) == []
