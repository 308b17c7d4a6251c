"""kg/'s packages import one way (docs/architecture.md): every import of every module is read with
`ast` (at module level, inside functions, and the command table's `importlib` names), and an
arrow between two packages that the table below does not allow fails, naming the arrow. Inside a
package any import is allowed, but no circle anywhere; no module over 500 lines; each package
says in its `__init__.py` docstring what lives there and what it may import, and defines nothing
(importing a package costs nothing: `kgd hook` stays tiny)."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KG = os.path.join(ROOT, "kg")
MAX_LINES = 500

# bottom to top; agents is a side room over core: hook events in, context out, the store handed in
BELOW = {
    "secrets": set(),
    "core": {"secrets"},
    "disk": {"secrets", "core"},
    "memory": {"secrets", "core", "disk"},
    "travel": {"secrets", "core", "disk", "memory"},
    "agents": {"secrets", "core"},
    "api": {"secrets", "core", "disk", "memory", "travel", "agents"},
    "serve": {"secrets", "core", "disk", "memory", "travel", "agents", "api"},
    "ops": {"secrets", "core", "disk", "memory", "travel", "agents", "api", "serve"},
}
COMMAND_TABLE = "kg.ops.commands"  # its COMMANDS name modules that importlib loads


def _modules(root=KG):
    """kg's module names -> file path ("kg.memory" for kg/memory/__init__.py)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        parts = ["kg"] + os.path.relpath(path, root)[:-3].split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _package_of(name, modules):
    """The package a module's relative imports start from."""
    path = modules.get(name, "")
    return name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]


def _imported(node, name, modules):
    """The kg modules one import statement of module `name` names: `import kg.x.y`, `from kg.x import
    y`, `from . import y`, `from ..x.y import z`; a name that is not a module counts as an import of
    the package or module it comes from."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = _package_of(name, modules).split(".")
        base = base[:len(base) - (node.level - 1)]
        if not base:
            return []
        base = ".".join(base + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base not in modules:
        return []
    return [base + "." + a.name if base + "." + a.name in modules else base for a in node.names]


def _command_modules(tree, modules):
    """The modules the command table names ("lifecycle:status" -> kg.ops.lifecycle)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMMANDS" for t in node.targets):
            for value in node.value.values:
                out.append("kg.ops." + value.value.split(":")[0])
    assert out and all(m in modules for m in out), "the command table names no module, or a missing one: %s" % out
    return out


def import_graph(modules):
    """module -> the kg modules it imports anywhere in its source."""
    graph = {}
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        found = {m for node in ast.walk(tree) for m in _imported(node, name, modules)}
        if name == COMMAND_TABLE:
            found.update(_command_modules(tree, modules))
        graph[name] = found - {name}
    return graph


def layer_of(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None  # None: kg itself (its __version__), allowed to all


def violations(graph):
    """Every arrow between packages that BELOW does not allow, as "kg.a.x -> kg.b.y (a may not import b)"."""
    out = []
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            a, b = layer_of(src), layer_of(dst)
            if b is None or a == b:
                continue
            if a is None or b not in BELOW[a]:
                out.append("%s -> %s (%s may not import %s)" % (src, dst, a or "kg", b))
    return out


def find_cycle(graph):
    """One import circle as [a, b, ..., a], or None (depth-first search, modules in sorted order)."""
    state, stack = {}, []  # state: 1 on the current path, 2 done

    def visit(m):
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_import_graph_sees_every_kind_of_import():
    modules = {n: "" for n in ("kg", "kg.a", "kg.a.x", "kg.a.y", "kg.b", "kg.b.z", "kg.c", "kg.c.w")}
    modules.update({"kg.a": "kg/a/__init__.py", "kg.b": "kg/b/__init__.py", "kg.c": "kg/c/__init__.py"})
    src = ("import os\nimport kg.b.z as z\nfrom kg import __version__\nfrom . import y\nfrom ..c.w import thing\n"
           "from ...other import x\nfrom kgx import q\ndef f():\n    from ..d.v import u\n    from .. import c\n")
    found = {m for node in ast.walk(ast.parse(src)) for m in _imported(node, "kg.a.x", modules)}
    assert found == {"kg.b.z", "kg", "kg.a.y", "kg.c.w", "kg.c"}  # kg.d.v is no module here


def test_the_command_table_counts_as_imports():
    graph = import_graph(_modules())
    assert {"kg.ops.hook", "kg.ops.setup.claude_hooks", "kg.ops.lifecycle"} <= graph[COMMAND_TABLE]


def test_a_bad_arrow_is_named():
    graph = {"kg.core.model": {"kg.memory.store", "kg.core.text"}, "kg.agents.loop": {"kg.memory.store"},
             "kg.memory.store": {"kg.core.model", "kg"}, "kg.ops.cli": {"kg.serve.app"}}
    assert violations(graph) == ["kg.agents.loop -> kg.memory.store (agents may not import memory)",
                                 "kg.core.model -> kg.memory.store (core may not import memory)"]


def test_a_planted_bad_import_fails_the_check(tmp_path):
    files = {"__init__.py": "", "core/__init__.py": "", "core/model.py": "def f():\n    from ..memory import store\n",
             "memory/__init__.py": "", "memory/store.py": "from ..core import model\n"}
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    assert violations(import_graph(_modules(str(tmp_path)))) == [
        "kg.core.model -> kg.memory.store (core may not import memory)"]


def test_a_circle_is_found_and_named():
    assert find_cycle({"kg.a": {"kg.b"}, "kg.b": {"kg.c"}, "kg.c": {"kg.a"}}) == ["kg.a", "kg.b", "kg.c", "kg.a"]
    assert find_cycle({"kg.a": {"kg.b", "kg.c"}, "kg.b": {"kg.c"}, "kg.c": set()}) is None


def test_kg_imports_one_way():
    modules = _modules()
    assert set(BELOW) == {layer_of(m) for m in modules if layer_of(m)}, "a package is missing from the table"
    graph = import_graph(modules)
    assert len(graph) > 60 and graph["kg.memory.store"], "the import graph came out empty"
    bad = violations(graph)
    assert bad == [], "imports against the layering (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_circle_in_kg():
    cycle = find_cycle(import_graph(_modules()))
    assert cycle is None, "import circle in kg/: " + " -> ".join(cycle)


def test_no_module_over_500_lines():
    sizes = {}
    for path in _modules().values():
        with open(path, encoding="utf-8") as f:
            sizes[os.path.relpath(path, ROOT)] = sum(1 for _ in f)
    over = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert over == {}, "over %d lines (split them by job): %s" % (MAX_LINES, over)


def test_each_package_says_what_it_holds_and_may_import():
    for name, path in _modules().items():
        if not path.endswith("__init__.py") or name == "kg":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        doc = ast.get_docstring(tree) or ""
        assert len(doc) > 80 and "import" in doc, "%s: say what lives here and what it may import" % path
        assert len(tree.body) == 1, "%s defines or imports something: a package's face stays empty" % path


def test_kgd_hook_imports_only_its_few_modules():
    """`kgd hook` runs in a fresh Python once per agent event: its import path stays tiny (no store,
    no HTTP server, no http.client)."""
    import subprocess
    import sys

    from helpers import clean_env

    probe = "import sys, kg.ops.hook; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-S", "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=clean_env())
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert {m for m in loaded if m == "kg" or m.startswith("kg.")} == {
        "kg", "kg.agents", "kg.agents.dialects", "kg.core", "kg.core.errors", "kg.core.text", "kg.disk",
        "kg.disk.files", "kg.disk.layout", "kg.ops", "kg.ops.config", "kg.ops.hook"}
    assert loaded & {"http.client", "subprocess", "hashlib", "http.server"} == set()


def test_the_architecture_page_names_every_package_and_real_modules():
    import re

    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        page = f.read()
    for package in BELOW:
        assert "`kg/%s/`" % package in page, "docs/architecture.md does not describe kg/%s/" % package
    named = set(re.findall(r"`((?:secrets|core|disk|memory|travel|agents|api|serve|ops)/[\w/]+\.py)", page))
    assert len(named) > 30
    missing = sorted(p for p in named if not os.path.exists(os.path.join(KG, p)))
    assert missing == [], "docs/architecture.md names modules that do not exist: %s" % missing
