"""kg/memory/store.py search(): a search reads. A project_path whose folder has no project graph on
disk searches the user graph alone and creates nothing (`kgd search foo` in a folder that is
no project used to make an empty project graph there, which then showed in `kgd status` and `kgd export`)."""

import os

import pytest

from helpers import StoreEnv


@pytest.fixture
def env(tmp_path):
    e = StoreEnv(tmp_path, max_tokens=10 ** 9)
    yield e
    e.close_all()


def project_files(root):
    folder = os.path.join(root, "projects")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_search_in_a_folder_with_no_graph_creates_none(env, tmp_path):
    s = env.open()
    s.put_node(None, "user", "closing-lid", "closing the lid suspends the laptop")
    plain = tmp_path / "plain"
    plain.mkdir()
    out = s.search("lid", project_path=str(plain))
    assert [r["id"] for r in out["results"]] == ["closing-lid"]
    assert project_files(env.root) == []
    assert s.registry.projects == {}
    env.close(s)
    assert project_files(env.root) == []  # nor at close


def test_search_in_a_project_with_a_graph_searches_it(env):
    s = env.open()
    proj = env.project("app")
    s.put_node(None, "project", "build", "the build runs make", project_path=proj)
    s.put_node(None, "user", "prefs", "make uses tabs")
    before = project_files(env.root)
    assert len(before) == 1
    found = {(r["level"], r["id"]) for r in s.search("make", project_path=proj + "/src")["results"]}
    assert found == {("project", "build"), ("user", "prefs")}
    assert project_files(env.root) == before
    env.close(s)
    s = env.open()  # after a restart: the graph on disk is loaded for the search
    found = {(r["level"], r["id"]) for r in s.search("make", project_path=proj)["results"]}
    assert found == {("project", "build"), ("user", "prefs")}


def test_a_session_search_still_reads_its_project(env):
    s = env.open()
    proj = env.project("app")
    sess = s.start_session(proj)
    s.put_node(sess, "project", "build", "the build runs make")
    assert [r["id"] for r in s.search("make", session=sess)["results"]] == ["build"]
