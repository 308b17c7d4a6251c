"""Contract section 12 end to end on a real daemon (`--port 0`) and a real git repository: the marks
come with the maintenance beat, with no call from the client; kg_read's text, kg_search's text and
REST carry them; a kg_put_node of the same content clears them; structuredContent stays valid."""

import subprocess
import time

import pytest

from helpers import Daemon, git_env, start


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = git_env(tmp_path)
    (repo / "auth.py").write_text("def refresh(token):\n    return token\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"]):
        subprocess.run(["git"] + args, cwd=str(repo), env=env, check=True)
    d = Daemon(tmp_path / "root", env={"KG_STRUCTURED_OUTPUT": "0"})
    d.start()
    yield d, repo, env
    d.stop()


def text(result):
    assert not result.get("isError"), result
    return result["content"][0]["text"]


def test_marks_reach_every_surface_and_a_put_clears_them(world):
    d, repo, env = world
    sid = start(d, repo)["session_id"]
    text(d.call("kg_put_node", {"session_id": sid, "level": "project", "id": "refresh-keeps-token",
                                "gist": "refresh returns the token unchanged", "touches": ["auth.py#refresh"]}))
    (repo / "auth.py").write_text("def refresh(token):\n    return token + '!'\n")
    subprocess.run(["git", "commit", "-qam", "refresh changes the token"], cwd=str(repo), env=env, check=True)
    mark = "stale: refresh in auth.py changed, 1 commit ago"
    deadline = time.time() + 10
    while mark not in text(d.call("kg_read", {"session_id": sid})) and time.time() < deadline:
        time.sleep(0.1)
    full = text(d.call("kg_read", {"session_id": sid}))
    assert "- refresh-keeps-token [%s]: refresh returns" % mark in full
    assert mark in text(d.call("kg_read", {"session_id": sid, "id": "refresh-keeps-token"}))
    assert mark in text(d.call("kg_search", {"session_id": sid, "query": "refresh token"}))
    status, node = d.json("GET", "/api/nodes/project/refresh-keeps-token?session_id=%s" % sid)
    assert status == 200, node
    got = node["nodes"][0]["stale"] if "nodes" in node else node["stale"]
    assert got["mark"] == mark and got["files"] == [{"touch": "auth.py#refresh", "change": "changed",
                                                      "commits": 1, "lines": 2}]
    # confirmed as it is: current at once
    text(d.call("kg_put_node", {"session_id": sid, "level": "project", "id": "refresh-keeps-token",
                                "gist": "refresh returns the token unchanged"}))
    assert "stale" not in text(d.call("kg_read", {"session_id": sid}))
