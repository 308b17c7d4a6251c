"""kg/agents/value.py and its use by the preload: uses counted once per occasion, the hook's own reads not
counted, breadth across parts of the project, and knowledge used on many occasions or linked from
many parts kept in the preload (read back when archived) while the day's work fills the rest."""

import pytest

from kg.agents import loop, value
from kg.core import model
from kg.memory.store import Settings, Store
from kg.travel import team

T0 = 1_700_000_000.0
DAY = 86400.0


class Env:
    def __init__(self, tmp_path):
        self.t = [T0]
        self.proj = tmp_path / "work" / "proj"
        (self.proj / ".git").mkdir(parents=True)
        self.cwd = str(self.proj)
        store = Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9), clock=lambda: self.t[0])
        self.store = team.install(store).open()
        self.handle = loop.handler(self.store, env={})
        self.writer = self.store.start_session(self.cwd)
        self.n = 0

    def put(self, nid, gist, touches=None, level="project"):
        self.store.put_node(self.writer, level, nid, gist, touches=touches)

    def edge(self, frm, to, level="project"):
        self.store.put_edge(self.writer, level, frm, to, "relates-to")

    def read(self, nid):
        self.store.read_nodes(self.writer, [nid])

    def graph(self, level="project"):
        return self.store.graph(level, self.writer)

    def start(self):
        self.n += 1
        out = self.handle({"session_id": "claude-%d" % self.n, "transcript_path": "/tmp/t.jsonl", "cwd": self.cwd,
                           "hook_event_name": "SessionStart", "source": "startup"})
        return out["hookSpecificOutput"]["additionalContext"]

    def archive(self, nid):
        with self.store.lock:
            g = self.graph()
            g.nodes[nid]["_archived"] = True
            g.refresh(nid)


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.store.close()


def test_a_use_counts_once_per_occasion(env):
    env.put("rule", "run the linter before every commit")
    with env.store.lock:
        value.observe(env.graph(), env.t[0])  # the first scan counts its creation once
        assert value.score(env.graph(), "rule", env.t[0]) == 1.0
    for day in range(6):  # two reads a day: one occasion per SPACING
        env.t[0] += DAY
        env.read("rule")
        env.t[0] += 60
        env.read("rule")
        with env.store.lock:
            value.observe(env.graph(), env.t[0])
    s = value.score(env.graph(), "rule", env.t[0])
    assert 3.5 < s < 4.0  # created, then days 2, 4, 6 (each a bit decayed)


def test_the_hooks_own_read_is_not_a_use(env):
    env.put("rule", "run the linter before every commit")
    with env.store.lock:
        value.observe(env.graph(), env.t[0])
    env.t[0] += 10 * DAY
    created = value.score(env.graph(), "rule", env.t[0])
    env.read("rule")
    with env.store.lock:
        value.own(env.graph(), ["rule"])
        value.observe(env.graph(), env.t[0])
    assert value.score(env.graph(), "rule", env.t[0]) == created
    env.t[0] += 10 * DAY
    env.read("rule")  # a later read is the agent's: counted
    with env.store.lock:
        value.observe(env.graph(), env.t[0])
    assert value.score(env.graph(), "rule", env.t[0]) > created + 0.9


def _broad_world(env):
    """`rule` is linked from knowledge of three folders; `db-1` only from its own."""
    env.put("rule", "migrations need make migrate, never alembic directly", touches=["Makefile"])
    for area in ("db", "billing", "auth"):
        env.put("%s-1" % area, "%s fact one" % area, touches=["src/%s/core.py" % area])
        env.put("%s-2" % area, "%s fact two" % area, touches=["tests/%s/test_core.py" % area])
        env.edge("%s-1" % area, "%s-2" % area)
        env.edge("%s-1" % area, "rule")


def test_breadth_counts_other_parts_of_the_project(env):
    _broad_world(env)
    with env.store.lock:
        g = env.graph()
        assert value.breadth(g, "rule") == 3
        assert value.breadth(g, "db-1") == 1  # the rule, about the whole project (Makefile)
        assert value.breadth(g, "db-2") == 0  # src/db and tests/db are both db
        assert value.worth(g, "rule", env.t[0]) > 0 and value.worth(g, "db-2", env.t[0]) == 0


def test_broad_knowledge_keeps_a_place_in_a_full_preload(env):
    _broad_world(env)
    for i in range(120):  # the day's work: newer, and enough to fill the preload many times
        env.t[0] += 1
        env.put("ui-%03d" % i, "ui knowledge number %d " % i + "y" * 120, touches=["src/ui/x.py"])
    text = env.start()
    assert "- rule: migrations need make migrate" in text


def test_an_archived_node_of_worth_is_read_back_and_preloaded(env):
    _broad_world(env)
    env.archive("rule")
    for i in range(120):
        env.t[0] += 1
        env.put("ui-%03d" % i, "ui knowledge number %d " % i + "y" * 120, touches=["src/ui/x.py"])
    text = env.start()
    assert "- rule: migrations need make migrate" in text
    with env.store.lock:
        assert model.is_active(env.graph().nodes["rule"])
    before = value.score(env.graph(), "rule", env.t[0])
    env.t[0] += DAY
    env.start()  # the lift's read was the hook's own: not an occasion of use
    assert value.score(env.graph(), "rule", env.t[0]) <= before


def test_without_uses_or_breadth_recency_still_leads(env):
    """Nothing earns a reserved place in a graph with no history: the order is the old one."""
    env.put("old", "old and alone")
    env.t[0] += 100
    env.put("new", "written last")
    text = env.start()
    assert text.index("- new:") < text.index("- old:")


def test_knowledge_used_alongside_many_parts_is_broad(env):
    """A rule used in sessions on db, then billing, then auth work is about the whole project; a
    db fact used only in db sessions is not."""
    env.put("rule", "every public function gets a docstring")
    for area in ("db", "billing", "auth"):
        env.put("%s-1" % area, "%s fact" % area, touches=["src/%s/core.py" % area])
    with env.store.lock:
        value.observe(env.graph(), env.t[0])
    for area in ("db", "billing", "auth", "db"):
        env.t[0] += 3 * DAY
        env.read("rule")
        env.read("%s-1" % area)
        with env.store.lock:
            value.observe(env.graph(), env.t[0])
    with env.store.lock:
        g = env.graph()
        assert value.breadth(g, "rule") == 3
        assert value.breadth(g, "db-1") == 0
        assert value.worth(g, "rule", env.t[0]) > value.worth(g, "db-1", env.t[0])
