"""File recall's order: which of a file's nodes a PostToolUse shows first (contract section 8; the
order is kgd's choice, measured on real history: bench/README.md). Pure over the graphs and the
session's hook state (no lock taken, no file read: the caller holds the lock and has read the file).

Rules owned here: the key below, after the nodes whose touches name the file (kg/agents/recall.py
`order_file_hits`).
"""

import collections
import os

from ..core import model, staleness

NEAR_MAX = 40          # nodes the last prompt pointed to, kept to order file recall
GAP_NONE = 10 ** 9     # a node with no part in the edited file: after every part that is


def file_key(graphs, hook, focus, hits, path=None, spans=None):
    """File recall's order after the file's own nodes (lock held): after an Edit, the knowledge
    linked by an edge to the knowledge about the part it changed (what was learnt together, e.g. a
    change that went with it, comes up while the work is there); then the parts the work points to,
    best first: the words of the last prompt in a part's name (a touch `PATH#NAME`) and in its code,
    plus the last Edit's words in its code (since the prompt: kg/agents/part_code.py); then
    the nodes the prompt pointed to; then, after an Edit, the parts nearest the edited one in the
    file (`spans`: the next edit of a task is mostly close to the last: bench/README.md, "File
    recall: near the edit"), the edited part itself first; then the most recently written."""
    near_rank = {k: i for i, k in enumerate(hook.get("near") or ()) if isinstance(k, str)}
    named = collections.Counter()
    for field in ("named", "edited"):  # the prompt's words, the last edit's: in a part's name and code
        for k in hook.get(field) or ():
            if isinstance(k, list) and len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], (int, float)):
                named[k[0]] += k[1]
    here = (spans or {}).get(focus[0]) if focus else None
    base = os.path.basename(path) if isinstance(path, str) else None

    def parts_here(node):
        """The part names of the node's touches on this file (by base name: the hits are about it)."""
        for t in node.get("touches", ()):
            tpath, part = staleness.split_touch(t)
            if part is not None and part[0] == "name" and (base is None or os.path.basename(tpath) == base):
                yield part[1]

    def about_focus(node):
        return any(name in focus for name in parts_here(node))


    def gap(node):
        if here is None:
            return 0
        return min((staleness.span_gap(spans[name], here) for name in parts_here(node) if name in spans),
                   default=GAP_NONE)

    focused, linked = set(), set()
    if focus:
        for h in hits:
            g = graphs.get(h.level)
            node = g.nodes.get(h.id) if g is not None else None
            if node is None or not about_focus(node):
                continue
            focused.add((h.level, h.id))
            for e in g.edges_of(h.id):
                other = e["to"] if e["from"] == h.id else e["from"]
                if other != h.id and other in g.nodes:
                    linked.add((h.level, other))

    def key(hit):
        node = graphs[hit.level].nodes.get(hit.id) or {}
        w = node.get("_write_ts")
        k, nkey = (hit.level, hit.id), model.node_key(hit.level, hit.id)
        return (k not in linked, -named.get(nkey, 0), near_rank.get(nkey, NEAR_MAX), gap(node),
                k not in focused, -w if isinstance(w, (int, float)) else 0)
    return key
