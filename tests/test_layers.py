"""kg/ stays layered: no import circle between its modules (counting imports inside functions,
which only hide a circle from start-up), and no module over 600 lines (the project's rule)."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KG = os.path.join(ROOT, "kg")
MAX_LINES = 600


def _modules():
    """kg's module names ("kg" for its __init__) -> file path."""
    out = {}
    for path in sorted(glob.glob(os.path.join(KG, "*.py"))):
        name = os.path.basename(path)[:-3]
        out["kg" if name == "__init__" else "kg." + name] = path
    return out


def _imported(node, modules):
    """The kg modules one import statement names (`import kg.x`, `from kg import x`, `from . import x`,
    `from .x import y`); a name that is not a module counts as an import of its package."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level > 1 or (node.level == 0 and not (node.module or "").startswith("kg")):
        return []
    base = "kg" + ("." + node.module if node.level == 1 and node.module else "") if node.level else node.module
    if base != "kg":
        return [base] if base in modules else []
    return ["kg." + a.name if "kg." + a.name in modules else "kg" for a in node.names]


def import_graph(modules):
    """module -> the kg modules it imports anywhere in its source (at module level or in a function)."""
    graph = {}
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        graph[name] = {m for node in ast.walk(tree) for m in _imported(node, modules) if m != name}
    return graph


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
    modules = {"kg": "", "kg.a": "", "kg.b": "", "kg.c": "", "kg.d": "", "kg.e": ""}
    src = ("import os\nimport kg.a\nfrom kg import b, __version__\nfrom . import c\nfrom .d import thing\n"
           "from ..other import x\nfrom kgx import y\ndef f():\n    from .e import z\n")
    found = {m for node in ast.walk(ast.parse(src)) for m in _imported(node, modules)}
    assert found == {"kg", "kg.a", "kg.b", "kg.c", "kg.d", "kg.e"}


def test_a_circle_is_found_and_named():
    assert find_cycle({"kg.a": {"kg.b"}, "kg.b": {"kg.c"}, "kg.c": {"kg.a"}}) == ["kg.a", "kg.b", "kg.c", "kg.a"]
    assert find_cycle({"kg.a": {"kg.b", "kg.c"}, "kg.b": {"kg.c"}, "kg.c": set()}) is None


def test_no_import_circle_in_kg():
    graph = import_graph(_modules())
    assert len(graph) > 20 and graph["kg.store"], "the import graph came out empty"
    cycle = find_cycle(graph)
    assert cycle is None, "import circle in kg/: " + " -> ".join(cycle)


def test_no_module_over_600_lines():
    sizes = {}
    for path in _modules().values():
        with open(path, encoding="utf-8") as f:
            sizes[os.path.relpath(path, ROOT)] = sum(1 for _ in f)
    over = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert over == {}, "over %d lines (split them by job): %s" % (MAX_LINES, over)
