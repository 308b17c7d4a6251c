"""A variant of kgd's stale mark measured without touching kg/ (bench/README.md, the stale
knowledge section): a node with one stale touch whose line already names it (the history world's
gists are `<part> in <path>: ...`) gets the mark without the touch's name: `stale: changed` /
`stale: removed` / `stale: deleted`, with the commits when known. Registers the policy
`kgd-hooks-shortmark`; it patches kg/core/staleness.py's `mark` for the whole process, so run it
alone: `--plugin bench/variants/short_stale_mark.py --policy kgd-hooks-shortmark`."""

import memory_eval
import memory_history

from kg.core import staleness

_full = staleness.mark


def short_mark(changes):
    if len(changes) != 1 or changes[0].kind == "renamed":
        return _full(changes)
    c = changes[0]
    words = {"deleted": "deleted", "vanished": "removed"}.get(c.kind, "changed")
    if c.commits:
        words += ", %d commit%s ago" % (c.commits, "" if c.commits == 1 else "s")
    return "%s: %s" % (staleness.STALE, words)


class ShortMark(memory_history.KgdHooksMarks):
    name = "kgd-hooks-shortmark"

    def __init__(self, *a, **kw):
        staleness.mark = short_mark
        memory_history.KgdHooksMarks.__init__(self, *a, **kw)


memory_history.MEMORIES["kgd-hooks-shortmark"] = ShortMark
memory_eval.MEMORIES["kgd-hooks-shortmark"] = ShortMark
