"""kg_progress without a level uses the contract's default (user) and says so in its text."""

import pytest

from helpers import start

pytestmark = pytest.mark.e2e


def _text(result):
    return result["content"][0]["text"]


def test_the_default_level_is_said(daemon, project):
    sid = start(daemon, project)["session_id"]
    r = daemon.call("kg_progress", {"session_id": sid, "task_id": "t1", "state": {"step": 1}})
    assert r["structuredContent"]["level"] == "user"
    assert "No level given" in _text(r) and "user" in _text(r) and "level=project" in _text(r)
    r = daemon.call("kg_progress", {"session_id": sid, "task_id": "t1"})
    assert "No level given" in _text(r) and '"step": 1' in _text(r)
    r = daemon.call("kg_progress", {"session_id": sid, "task_id": "t1", "level": "project"})
    assert "No level given" not in _text(r) and "(project level)" in _text(r)
