"""A variant of kgd's part finder measured without touching kg/ (bench/README.md, the stale knowledge
section): a name defined more than once in one body (typing.overload stubs, then the body) is one
part, from its first definition to the end of its last, instead of its first definition only.
Registers `kgd-hooks-overloads`; it patches kg/core/staleness.py's `_python_span` for the whole
process, so run it alone: `--plugin bench/variants/overload_span.py --policy kgd-hooks-overloads`."""

import ast

import memory_eval
import memory_history

from kg.core import staleness

_KINDS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _first_line(n):
    return min([n.lineno] + [d.lineno for d in n.decorator_list])


def overload_span(text, name):
    try:
        tree = staleness.ast.parse(text)  # the bench's parse cache when installed
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "syntax"
    parts = name.split(".")
    bodies = [tree.body]
    if len(parts) == 1:  # breadth first, as kgd looks for an unqualified name
        queue, found = [tree], None
        while queue and found is None:
            node = queue.pop(0)
            body = getattr(node, "body", None)
            if isinstance(body, list) and any(isinstance(c, _KINDS) and c.name == name for c in body):
                found = body
            queue.extend(c for c in ast.iter_child_nodes(node))
        if found is None:
            return None
        bodies = [found]
    else:
        body = tree.body
        for p in parts[:-1]:
            cls = next((n for n in body if isinstance(n, _KINDS) and n.name == p), None)
            if cls is None:
                return None
            body = cls.body
        bodies = [body]
    same = [n for n in bodies[0] if isinstance(n, _KINDS) and n.name == parts[-1]]
    if not same or getattr(same[-1], "end_lineno", None) is None:
        return None
    return min(_first_line(n) for n in same), max(n.end_lineno for n in same)


class Overloads(memory_history.KgdHooksMarks):
    name = "kgd-hooks-overloads"

    def __init__(self, *a, **kw):
        staleness._python_span = overload_span
        memory_history.KgdHooksMarks.__init__(self, *a, **kw)


memory_history.MEMORIES["kgd-hooks-overloads"] = Overloads
memory_eval.MEMORIES["kgd-hooks-overloads"] = Overloads
