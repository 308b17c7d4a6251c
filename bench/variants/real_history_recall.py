"""Variants of what kgd's hooks show, measured on the real-history world without touching kg/
(bench/README.md, "What the hooks show on real history"). Each registers one policy, a
`kgd-hooks-nostale` (marks off, so a run takes minutes) with one rule of kg/agents/ patched for the
whole process, so run one at a time:

    python3 bench/memory_eval.py --world history --repo GITDIR --max-tokens 5000 \\
        --plugin bench/variants/real_history_recall.py --policy kgd-hooks-NAME

NAME and the rule it tries:
- `use`        file recall after the file's own nodes by recency of use (the later of write and
               read; a recall counts as a read) instead of recency of write: what LRU does.
- `nofocus`    the part an Edit changed gets no place of its own in file recall's order.
- `rotate`     file recall's last slot goes to the file's knowledge longest unseen (oldest write or
               read), so what is never near the top is still shown now and then.
- `editnarrow` an Edit's recall shows only what the work points to (linked to the edited part, the
               part itself, the prompt's nodes), never the file's newest knowledge as filler.
- `cap6000`    past 6,000 characters of file recall in a session, only what the work points to.
- `nocrumbs`   the preload's tenth for ids without gists goes to gists.
- `preload7000` the preload's room is 7,000 characters, not 10,000.
- `defer`      the preload puts last the knowledge file recall will bring anyway (the 3 newest
               written of each file it touches).
"""

import memory_eval
import memory_history
import memory_stale

from kg.agents import loop, nudges, preload, recall

_file_key, _about, _value_order = loop._file_key, loop._about_target, preload.value_order


def _seen(node):
    return max(node.get("_write_ts") or 0, node.get("_read_ts") or 0)


def _use_key(mem, session, focus, hits):
    graphs = {g.level: g.nodes for g in mem.graphs(session)}
    base = _file_key(mem, session, focus, hits)

    def key(hit):
        k = base(hit)
        return k[:-1] + (-_seen(graphs[hit.level].get(hit.id) or {}),)
    return key


def _pointed(mem, session, focus, hits):
    """(level, id) of the hits the work points to: linked to the edited part, the part, the prompt's."""
    key = _file_key(mem, session, focus, hits)
    return {(h.level, h.id) for h in hits if tuple(key(h)[:4]) != (True, 0, loop.NEAR_MAX, True)}


def _about_target(rule):
    def about(mem, session, payload, target, targets, env, max_nodes=loop.FILE_NODES, max_chars=loop.FILE_CHARS,
              focus=()):
        kind, value = target
        if kind != "file":
            return _about(mem, session, payload, target, targets, env, max_nodes, max_chars, focus)
        indexes, root = mem.indexes(session), session.project_path
        covered = recall.file_hits(indexes, value, root, limit=1000)
        recall.order_file_hits(covered, loop._file_key(mem, session, focus, covered))
        shown = mem.shown_keys(session)
        fresh = [c for c in covered if "%s:%s" % (c.level, c.id) not in shown]
        spent = session.hook.get("_variant_chars", 0)
        if (rule == "editnarrow" and focus) or (rule == "cap6000" and spent >= 6000):
            pointed = _pointed(mem, session, focus, covered)
            fresh = [c for c in fresh if (c.level, c.id) in pointed]
        n = max(0, max_nodes)
        if rule == "rotate" and len(fresh) > n >= 2:
            graphs = {g.level: g.nodes for g in mem.graphs(session)}
            old = min(fresh[n - 1:], key=lambda c: _seen(graphs[c.level].get(c.id) or {}))
            fresh = fresh[:n - 1] + [old]
        fresh = fresh[:n]
        parts, used = [], []
        if fresh:
            head = "kg memory that may be relevant to %s:" % recall.clip(recall.relative_path(value, root), 200)
            stale, marks = [], {g.level: mem.stale(g) for g in mem.graphs(session)}
            ask = len(loop.STALE_ASK) + 1 if not session.hook.get("stale_asked") and any(
                c.id in marks.get(c.level, ()) for c in fresh) else 0
            lines, used = loop._lines(mem, session, fresh, max_nodes, max_chars - len(head) - 1 - ask, stale)
            if lines:
                parts.extend([head] + lines)
                if stale and ask:
                    parts.append(loop.STALE_ASK)
                    session.hook["stale_asked"] = True
        session.hook["_variant_chars"] = spent + sum(len(x) + 1 for x in parts)
        nudge = nudges.nudge(mem, session, payload, kind, value, bool(covered), targets, env)
        if nudge:
            parts.append(nudge)
        return parts, used
    return about


def _defer_order(g, stale=()):
    order = _value_order(g, stale)
    by_file = {}
    for nid, n in g.nodes.items():
        for t in n.get("touches", ()):
            if isinstance(t, str):
                by_file.setdefault(t.split("#", 1)[0], []).append(nid)
    reach = set()
    for ids in by_file.values():
        ids.sort(key=lambda i: -(g.nodes[i].get("_write_ts") or 0))
        reach.update(ids[:loop.FILE_NODES])
    return [i for i in order if i not in reach] + [i for i in order if i in reach]


def _patch(rule):
    if rule == "use":
        loop._file_key = _use_key
    elif rule == "nofocus":
        loop._file_key = lambda mem, session, focus, hits: _file_key(mem, session, (), hits)
    elif rule in ("rotate", "editnarrow", "cap6000"):
        loop._about_target = _about_target(rule)
    elif rule == "nocrumbs":
        preload.CRUMB_SHARE = (0, 10)
    elif rule == "preload7000":
        preload.PRELOAD_LIMIT = 7000
    elif rule == "defer":
        preload.value_order = _defer_order
    else:
        raise ValueError(rule)


def _policy(rule):
    class Variant(memory_stale.KgdHooksNoStale):
        name = "kgd-hooks-" + rule

        def __init__(self, *a, **kw):
            _patch(rule)
            memory_stale.KgdHooksNoStale.__init__(self, *a, **kw)
    return Variant


for _rule in ("use", "nofocus", "rotate", "editnarrow", "cap6000", "nocrumbs", "preload7000", "defer"):
    memory_history.MEMORIES["kgd-hooks-" + _rule] = memory_eval.MEMORIES["kgd-hooks-" + _rule] = _policy(_rule)
