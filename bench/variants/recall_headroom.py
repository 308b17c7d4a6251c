"""How much file recall's order could buy on the real-history world, and a signal tried for it
(bench/README.md, "File recall: the parts the prompt names"). Each registers one policy, a
`kgd-hooks-nostale` with one rule of kg/agents/ patched for the whole process, so run one at a time:

    python3 bench/memory_eval.py --world history --repo GITDIR --max-tokens 5000 \\
        --plugin bench/variants/recall_headroom.py --policy kgd-hooks-NAME

NAME and the rule:
- `fileoracle` file recall puts first the nodes this session will need (the bench's truth, which no
               memory has): the ceiling of any order, with the same 3 nodes and 1,500 characters.
- `cowrite`    knowledge written together is recalled together: at each session start the nodes
               written since the last (at most 12: one session's work) count one more time written
               with each other; file recall puts, after the prompt's nodes and the edited part, the
               nodes most often written with the parts this session edited (after the rest of
               loop._file_key's order but the newest written).
"""

import itertools

import memory_eval
import memory_history
import memory_stale

from kg.agents import loop, value

CO_GROUP_MAX = 12
_file_key, _prompt, _observe = loop._file_key, loop._EVENTS[loop.dialects.PROMPT], value.observe
_session = memory_history.HistoryRun.session
STATE = {"need": set(), "worked": set()}


def _session_with_needs(self, mem, sess):
    """The bench's own session, noting the ids of the nodes it will need (for the oracle only)."""
    STATE["need"] = {nid for need in sess.needs for nid in self.nodes_of.get(need.fid, ())}
    return _session(self, mem, sess)


def _prompt_seen(mem, call, targets, env):
    STATE["worked"] = set()  # a new task (one commit a session): nothing edited yet
    return _prompt(mem, call, targets, env)


def _part_names(node):
    for t in node.get("touches", ()):
        if isinstance(t, str) and "#" in t:
            yield t.rpartition("#")[2]


def _observe_cowrites(g, now):
    last_scan = g.meta.get("use_scan")
    if isinstance(last_scan, (int, float)):
        written = [nid for nid, n in g.nodes.items() if (n.get("_write_ts") or 0) > last_scan]
        if 2 <= len(written) <= CO_GROUP_MAX:
            table = g.meta.setdefault("co_written", {})
            for a, b in itertools.permutations(written, 2):
                row = table.setdefault(a, {})
                row[b] = row.get(b, 0) + 1
    return _observe(g, now)


def _key(rule):
    def key_of(mem, session, focus, hits):
        base = _file_key(mem, session, focus, hits)
        graphs = {g.level: g for g in mem.graphs(session)}
        if rule == "cowrite" and focus:
            for h in hits:
                if any(n in focus for n in _part_names(graphs[h.level].nodes.get(h.id) or {})):
                    STATE["worked"].add((h.level, h.id))

        def co(h):
            table = graphs[h.level].meta.get("co_written") or {}
            return sum((table.get(w) or {}).get(h.id, 0) for lv, w in STATE["worked"] if lv == h.level)

        def key(h):
            b = tuple(base(h))
            if rule == "fileoracle":
                return (h.id not in STATE["need"],) + b
            return b[:4] + (-co(h),) + b[4:]  # after linked, named, near and the edited part
        return key
    return key_of


def _policy(rule):
    class Variant(memory_stale.KgdHooksNoStale):
        name = "kgd-hooks-" + rule

        def __init__(self, *a, **kw):
            loop._file_key = _key(rule)
            if rule == "fileoracle":
                memory_history.HistoryRun.session = _session_with_needs
            else:
                loop._EVENTS[loop.dialects.PROMPT] = _prompt_seen
            if rule == "cowrite":
                value.observe = _observe_cowrites
            memory_stale.KgdHooksNoStale.__init__(self, *a, **kw)
    return Variant


for _rule in ("fileoracle", "cowrite"):
    memory_history.MEMORIES["kgd-hooks-" + _rule] = memory_eval.MEMORIES["kgd-hooks-" + _rule] = _policy(_rule)
