"""Temp files a killed write leaves (kg/disk/files.py atomic_write's `.tmp-*.part`) are removed
under the storage root when the store opens (it holds the root's lock: no other write runs there),
and in a shared project's `.kg/` once old, when kgd first reads it (a young one is left: another
root's daemon may be writing in that checkout). Nothing else is touched."""

import os
import subprocess
import time

import pytest

from kg.disk import files
from kg.memory.store import Settings, Store
from kg.travel import team, team_folder

from helpers import git_env


def _touch(path, age):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"half a graph")
    t = time.time() - age
    os.utime(path, (t, t))
    return path


@pytest.mark.parametrize("name, age, goes", [
    (".tmp-0a1b2c3d4e5f.part", 2 * files.TEMP_AGE, True),
    (".tmp-0a1b2c3d4e5f.part.prev", 2 * files.TEMP_AGE, True),
    (".tmp-0a1b2c3d4e5f.part", 60, False),  # young: a write may still be running
    ("graph.json", 2 * files.TEMP_AGE, False),
    (".tmp-notes.txt", 2 * files.TEMP_AGE, False),  # not a name atomic_write draws
    ("x.tmp-1.part", 2 * files.TEMP_AGE, False),
])
def test_sweep_temp(tmp_path, name, age, goes):
    p = _touch(str(tmp_path / name), age)
    assert files.sweep_temp(str(tmp_path)) == (1 if goes else 0)
    assert os.path.exists(p) is not goes


def test_a_folder_or_link_of_that_name_is_left(tmp_path):
    os.mkdir(str(tmp_path / ".tmp-aa.part"))
    os.symlink("/etc/passwd", str(tmp_path / ".tmp-bb.part"))
    old = time.time() - 2 * files.TEMP_AGE
    os.utime(str(tmp_path / ".tmp-aa.part"), (old, old))
    assert files.sweep_temp(str(tmp_path)) == 0
    assert files.sweep_temp(str(tmp_path / "missing")) == 0


def test_the_store_sweeps_its_root_and_a_shared_projects_kg(tmp_path):
    root, proj = tmp_path / "root", tmp_path / "proj"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], env=git_env(tmp_path), check=True)
    store = team.install(Store(str(root), Settings())).open()
    try:
        s = store.start_session(str(proj))
        store.put_node(s, "project", "n", "a node")
        store.team.share(str(proj))
    finally:
        store.close()
    (slug,) = os.listdir(str(root / "projects"))
    left = [_touch(str(root / ".tmp-111111111111.part"), 2 * files.TEMP_AGE),
            _touch(str(root / "projects" / slug / ".tmp-222222222222.part"), 2 * files.TEMP_AGE),
            _touch(str(root / "sync" / "projects" / "x" / ".tmp-333333333333.part"), 2 * files.TEMP_AGE),
            _touch(os.path.join(team_folder.kg_dir(str(proj)), ".tmp-444444444444.part"), 2 * files.TEMP_AGE),
            _touch(os.path.join(team_folder.changes_dir(str(proj)), ".tmp-555555555555.part"), 2 * files.TEMP_AGE)]
    young = _touch(str(proj / ".kg" / ".tmp-666666666666.part"), 5)  # in a checkout: another root's may write
    store = team.install(Store(str(root), Settings())).open()
    try:
        s = store.start_session(str(proj))
        assert "n" in store.project_graph(str(proj)).nodes
    finally:
        store.close()
    assert [p for p in left if os.path.exists(p)] == []
    assert os.path.exists(young)
