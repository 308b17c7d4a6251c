"""Contract 8: a kg_read with the session the SessionStart hook bound does not repeat the
preloaded gists (it names them); a compact (the summary dropped them) renders them again."""

import re

from kg.agents import loop
from kg.api import tools
from kg.memory.store import Settings, Store
from kg.travel import team


def test_kg_read_after_the_preload_names_instead_of_repeating(tmp_path):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    store = team.install(Store(str(tmp_path / "root"), Settings())).open()
    try:
        s = store.start_session(str(project))
        store.put_node(s, "project", "build-uses-make", "The build runs through make, never setup.py directly")
        store.put_node(s, "user", "prefer-small-commits", "Commit in small steps with honest messages")
        handle = loop.handler(store)
        payload = {"session_id": "claude-1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                   "hook_event_name": "SessionStart", "source": "startup"}
        pre = handle(payload)["hookSpecificOutput"]["additionalContext"]
        assert "The build runs through make" in pre
        sid = re.search(r"Session: (\S+)", pre).group(1)
        text = tools.call(store, "kg_read", {"session_id": sid})["content"][0]["text"]
        assert "The build runs through make" not in text and "Commit in small steps" not in text
        assert "build-uses-make" in text and "prefer-small-commits" in text and "not repeated" in text
        # A compact drops the preload from the conversation: kgd forgets what it showed and
        # renders it again (so the same gists come back, and are again not repeated by kg_read).
        post = handle(dict(payload, source="compact"))["hookSpecificOutput"]["additionalContext"]
        assert "The build runs through make" in post and "Session: %s" % sid in post
    finally:
        store.close()
