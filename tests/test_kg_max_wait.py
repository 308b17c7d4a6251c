"""An agent that never pauses still reaches `.kg/`: the team folder is written when writes pause,
and at least every KG_MAX_WAIT seconds while they go on (kg/memory/store.py fold_idle)."""

import os
import subprocess

from kg.memory import store as store_mod
from kg.memory.store import Settings, Store
from kg.travel import team

import kg_view
from helpers import git_env


def _shared(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    env = git_env(tmp_path)
    subprocess.run(["git", "init", "-q", str(proj)], env=env, check=True)
    st = team.install(Store(str(tmp_path / "root"), Settings(fold_delay=3600))).open()  # writes never pause
    s = st.start_session(str(proj))
    st.put_node(s, "project", "first", "shared at once")
    st.team.share(str(proj))
    for args in (["add", ".kg"], ["commit", "-qm", "kg"]):
        subprocess.run(["git", *args], cwd=str(proj), env=env, check=True, capture_output=True)
    return st, s, str(proj)


def test_writes_that_never_pause_reach_kg_within_the_max_wait(tmp_path, monkeypatch):
    st, s, proj = _shared(tmp_path)
    try:
        st.put_node(s, "project", "busy", "written by an agent that never pauses")
        monkeypatch.setattr(store_mod, "KG_MAX_WAIT", 3600.0)
        st.fold_idle()
        assert "busy" not in kg_view.live(proj)  # not quiet, not waited long enough
        monkeypatch.setattr(store_mod, "KG_MAX_WAIT", 0.0)
        st.fold_idle()
        assert kg_view.live(proj)["busy"]["gist"] == "written by an agent that never pauses"
        assert os.listdir(os.path.join(proj, ".kg", "changes"))  # to this clone's own untracked file
    finally:
        st.close()
