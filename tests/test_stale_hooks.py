"""Contract section 12 in what the hooks and the tools' text give the model: the preload, prompt and
file recall (with one request to confirm or update), kg_read's text, a node that became stale after
it was shown shown again; a real git repository and a real store."""

import subprocess

import pytest

from kg.agents import loop as hooks
from kg.api import render
from kg.memory import git_runner
from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import clean_env


def git(cwd, *args):
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git"] + list(args), cwd=str(cwd), env=env, check=True, capture_output=True)


class World:
    def __init__(self, tmp_path):
        self.t = [1_700_000_000.0]
        self.repo = tmp_path / "repo"
        (self.repo / "src").mkdir(parents=True)
        (self.repo / "src" / "pool.py").write_text("def acquire():\n    return 1\n")
        (self.repo / "src" / "cache.py").write_text("def get():\n    return 2\n")
        git(self.repo, "init", "-q")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", "first")
        store = Store(str(tmp_path / "root"), Settings(max_tokens=10 ** 9), clock=lambda: self.t[0])
        self.store = team.install(store).open()
        self.handle = hooks.handler(self.store, env={})
        self.writer = self.store.start_session(str(self.repo))
        self.store.put_node(self.writer, "project", "pool-acquire-blocks", "the connection pool blocks on acquire",
                            touches=["src/pool.py#acquire"])
        self.store.put_node(self.writer, "project", "cache-get-is-lazy", "the cache fills lazily on get",
                            touches=["src/cache.py"])

    def advance(self, s):
        self.t[0] += s

    def payload(self, event, **kw):
        p = {"session_id": "claude-1", "cwd": str(self.repo), "hook_event_name": event, "transcript_path": "/t"}
        p.update(kw)
        return p

    def context(self, out):
        return out["hookSpecificOutput"]["additionalContext"] if out else ""

    def start(self):
        return self.context(self.handle(self.payload("SessionStart", source="startup")))

    def prompt(self, text):
        return self.context(self.handle(self.payload("UserPromptSubmit", prompt=text)))

    def read(self, rel):
        return self.context(self.handle(self.payload("PostToolUse", tool_name="Read",
                                                     tool_input={"file_path": str(self.repo / rel)},
                                                     tool_response={})))

    def change_pool(self):
        (self.repo / "src" / "pool.py").write_text("def acquire(timeout):\n    return 1\n")
        git(self.repo, "commit", "-qam", "acquire takes a timeout")
        self.store.staleness.refresh()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.store.close()


def test_the_preload_marks_stale_knowledge(world):
    world.change_pool()
    text = world.start()
    assert "- pool-acquire-blocks [stale: acquire in src/pool.py changed, 1 commit ago]: the connection pool" in text
    assert "- cache-get-is-lazy: the cache fills lazily" in text


def test_file_recall_marks_and_asks_once(world):
    world.change_pool()
    world.start()
    world.store.forget_shown(world.store.bind_client("claude-1", str(world.repo))[0])
    text = world.read("src/pool.py")
    assert "pool-acquire-blocks (stale: acquire in src/pool.py changed, 1 commit ago)" in text
    assert text.count(hooks.STALE_ASK) == 1
    assert len(text) <= hooks.FILE_CHARS
    fresh = world.read("src/cache.py")
    assert "cache-get-is-lazy" in fresh and hooks.STALE_ASK not in fresh and "stale" not in fresh


def test_the_request_to_confirm_is_made_once_a_context(world):
    (world.repo / "src" / "cache.py").write_text("def get():\n    return 3\n")
    world.change_pool()  # both nodes stale, about two files
    world.start()
    world.store.forget_shown(world.store.bind_client("claude-1", str(world.repo))[0])
    first, second = world.read("src/pool.py"), world.read("src/cache.py")
    assert "pool-acquire-blocks (stale:" in first and first.count(hooks.STALE_ASK) == 1
    assert "cache-get-is-lazy (stale: src/cache.py changed" in second and hooks.STALE_ASK not in second
    world.handle(world.payload("SessionStart", source="clear"))  # a new context asks again
    world.store.forget_shown(world.store.bind_client("claude-1", str(world.repo))[0])
    assert world.read("src/cache.py").count(hooks.STALE_ASK) == 1


def test_a_line_whose_gist_names_the_part_is_not_told_it_again(world):
    s = world.writer
    world.store.put_node(s, "project", "acquire-note", "acquire in src/pool.py: blocks until a slot frees",
                         touches=["src/pool.py#acquire"])
    world.change_pool()
    text = world.start()
    assert "- acquire-note [stale: changed, 1 commit ago]: acquire in src/pool.py: blocks" in text
    assert "- pool-acquire-blocks [stale: acquire in src/pool.py changed, 1 commit ago]" in text
    found = render.render_search(world.store.search("acquire", s), "acquire", project_path=s.project_path)
    assert "acquire-note (project) [stale: changed, 1 commit ago]: acquire in src/pool.py" in found
    one = world.store.read_nodes(s, ["acquire-note"])["nodes"][0]
    assert one["stale"]["mark"] == "stale: changed, 1 commit ago"  # REST and structuredContent
    assert one["stale"]["files"][0]["touch"] == "src/pool.py#acquire"  # what changed, still named


def test_a_node_that_went_stale_after_it_was_shown_is_shown_again(world):
    world.start()  # the preload shows both nodes
    assert world.read("src/pool.py") == ""  # already in context: nothing again
    world.advance(60)
    world.change_pool()
    text = world.read("src/pool.py")
    assert "pool-acquire-blocks (stale:" in text and hooks.STALE_ASK in text
    world.advance(60)
    assert world.read("src/pool.py") == ""  # shown with its mark: not again


def test_prompt_recall_marks_without_asking(world):
    world.change_pool()
    text = world.prompt("why does the connection pool block on acquire?")
    assert "pool-acquire-blocks (stale: acquire in src/pool.py changed, 1 commit ago)" in text
    assert hooks.STALE_ASK not in text


def test_a_put_after_the_request_clears_the_mark_everywhere(world):
    world.change_pool()
    s = world.writer
    world.store.put_node(s, "project", "pool-acquire-blocks", None)  # confirmed as it is
    assert "stale" not in world.start()
    graphs = world.store.read_graphs(s)
    result = {"session_id": s.id, "project_path": s.project_path, "user": graphs["user"],
              "project": graphs["project"]}
    assert "stale" not in render.render_read(result, 10 ** 9)


def test_kg_read_text_marks_full_and_by_id(world):
    world.change_pool()
    s = world.writer
    graphs = world.store.read_graphs(s)
    result = {"session_id": s.id, "project_path": s.project_path, "user": graphs["user"],
              "project": graphs["project"]}
    text = render.render_read(result, 10 ** 9)
    assert "- pool-acquire-blocks [stale: acquire in src/pool.py changed, 1 commit ago]: the connection" in text
    assert "- cache-get-is-lazy: the cache" in text
    one = render.render_nodes(world.store.read_nodes(s, ["pool-acquire-blocks"]))
    assert "stale: acquire in src/pool.py changed, 1 commit ago (the code changed since" in one
    found = render.render_search(world.store.search("pool cache", s), "pool cache", project_path=s.project_path)
    assert "pool-acquire-blocks (project) [stale: acquire in src/pool.py changed, 1 commit ago]:" in found
    assert "cache-get-is-lazy (project): " in found


def test_no_git_runs_on_a_hook(world, monkeypatch):
    world.change_pool()
    calls = []
    real = git_runner.run

    def run(args, *a, **kw):
        calls.append(args[0])
        return real(args, *a, **kw)
    monkeypatch.setattr(git_runner, "run", run)
    world.start()
    world.prompt("connection pool acquire")
    world.read("src/pool.py")
    assert calls == []
    world.store.staleness.refresh()  # the pass may: the wrapper sees git when it runs
    (world.repo / "src" / "cache.py").write_text("changed\n")
    world.store.staleness.refresh()
    assert calls
