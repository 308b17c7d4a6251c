"""Both variants (short_stale_mark.py, overload_span.py) and a shorter request to confirm in file
recall (kg/agents/loop.py STALE_ASK, 153 characters: here 81). Registers `kgd-hooks-lean`; it
patches kg/ for the whole process, so run it alone:
`--plugin bench/variants/stale_lean.py --policy kgd-hooks-lean`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import memory_eval  # noqa: E402
import memory_history  # noqa: E402
import overload_span  # noqa: E402
import short_stale_mark  # noqa: E402

from kg.agents import loop  # noqa: E402
from kg.core import staleness  # noqa: E402

SHORT_ASK = "Stale: check them against the code, then kg_put_node each again (confirm or fix)."


class Lean(memory_history.KgdHooksMarks):
    name = "kgd-hooks-lean"

    def __init__(self, *a, **kw):
        staleness.mark = short_stale_mark.short_mark
        staleness._python_span = overload_span.overload_span
        loop.STALE_ASK = SHORT_ASK
        memory_history.KgdHooksMarks.__init__(self, *a, **kw)


memory_history.MEMORIES["kgd-hooks-lean"] = Lean
memory_eval.MEMORIES["kgd-hooks-lean"] = Lean
