"""The store's rooms import one way: projects, sessions, changelog and durable never import
the store, each imports alone in a fresh interpreter, and the store re-exports the names
other modules import from it."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOMS = ["kg.projects", "kg.sessions", "kg.changelog", "kg.durable", "kg.graph", "kg.storage", "kg.model"]


@pytest.mark.parametrize("module", ROOMS + ["kg.store"])
def test_imports_alone_and_never_the_store(module):
    code = ("import sys, %s; bad = [m for m in ('kg.store', 'kg.tools', 'kg.http', 'kg.rest') if m in sys.modules]; "
            "print(','.join(bad))" % module)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = [m for m in out.stdout.strip().split(",") if m]
    assert loaded == (["kg.store"] if module == "kg.store" else []), loaded


def test_store_reexports():
    from kg import projects, sessions, store
    assert store.Session is sessions.Session
    assert store.new_session_id is sessions.new_session_id
    assert store.resolve_project_root is projects.resolve_project_root
    for name in ("Store", "Settings", "Session", "resolve_project_root", "new_session_id"):
        assert name in store.__all__
