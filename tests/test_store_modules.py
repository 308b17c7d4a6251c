"""The store's rooms import one way: projects, sessions, changelog, durable, the registry and
the write path never import the store, each imports alone in a fresh interpreter, and the
store re-exports nothing: a name is imported from the module that defines it."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from helpers import clean_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOMS = ["kg.memory.projects", "kg.memory.sessions", "kg.core.changelog", "kg.disk.durable", "kg.core.graph",
         "kg.disk.files", "kg.disk.layout", "kg.disk.journal", "kg.core.model", "kg.memory.registry",
         "kg.memory.write_path"]


@pytest.mark.parametrize("module", ROOMS + ["kg.memory.store"])
def test_imports_alone_and_never_the_store(module):
    code = ("import sys, %s; bad = [m for m in ('kg.memory.store', 'kg.api.tools', 'kg.serve.http', 'kg.api.rest') "
            "if m in sys.modules]; print(','.join(bad))" % module)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=clean_env())
    assert out.returncode == 0, out.stderr
    loaded = [m for m in out.stdout.strip().split(",") if m]
    assert loaded == (["kg.memory.store"] if module == "kg.memory.store" else []), loaded


def _defined_at_top(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_nothing_is_imported_from_the_store_that_it_does_not_define():
    with open(os.path.join(ROOT, "kg", "memory", "store.py")) as f:
        tree = ast.parse(f.read())
    own = _defined_at_top(tree)
    assert "__all__" not in own
    borrowed = []
    ours = [os.path.join(ROOT, "kgd.py")] + [p for top in ("kg", "tests", "bench")  # not .venv or node_modules
                                              for p in glob.glob(os.path.join(ROOT, top, "**", "*.py"), recursive=True)
                                              if "node_modules" not in p]
    for path in ours:
        with open(path) as f:
            for node in ast.walk(ast.parse(f.read())):
                if isinstance(node, ast.ImportFrom) and (node.module, node.level) in (
                        ("kg.memory.store", 0), ("store", 1), ("memory.store", 2)):
                    borrowed += ["%s: %s" % (os.path.relpath(path, ROOT), a.name) for a in node.names
                                 if a.name not in own]
    assert borrowed == [], borrowed
