"""Bounds on structuredContent (only sent with --structured-output). Pure.

Rules owned here (contract section 3): the serialized structuredContent of kg_read and kg_sync
is at most READ_LIMIT characters and of kg_search at most SEARCH_LIMIT, measured as a client
sees it (compact JSON, non-ASCII kept). Over the bound, the least valuable parts go first, in
the order the text drops them, and a `truncated` object in the result counts what was left out:
- full kg_read: edge notes, then notes and touches of the oldest active nodes (the text never
  shows them), then edges, then archived ids, then gists of the oldest nodes are shortened, then
  the oldest active nodes themselves (counted, an equal number kept per level);
- kg_read of ids: nodes whole in the order asked while they fit; the first that does not fit
  loses notes, then edges; the nodes after it are counted;
- kg_search: notes and touches from the worst result up, then the worst results;
- kg_sync: notes and touches, then deleted edges, deleted nodes, edges, nodes from the end.
"""

import json

from .render import READ_LIMIT, SEARCH_LIMIT

GIST_STEPS = (160, 120, 80, 40)


def size(obj):
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def _clip(s, n):
    return s if len(s) <= n else s[: n - 1] + "…"


def bound_read(result, recency, limit=READ_LIMIT):
    """result: the full kg_read object; recency: {level: {id: recency}} for newest-first order."""
    if size(result) <= limit:
        return result
    out = dict(result)
    levels = ("user", "project")
    graphs = {lv: dict(result[lv]) for lv in levels}
    cut = {lv: {} for lv in levels}
    out.update(graphs)
    out["truncated"] = {"user": cut["user"], "project": cut["project"],
                        "hint": "left out to fit {:,} characters; kg_read ids=[...] gives whole nodes, "
                                "kg_search finds the rest".format(limit)}

    def fits():
        return size(out) <= limit

    for lv in levels:  # edge notes
        g = graphs[lv]
        n = sum(len(e["notes"]) for e in g["edges"])
        if n:
            g["edges"] = [dict(e, notes=[]) for e in g["edges"]]
            cut[lv]["edge_notes"] = n
    if fits():
        return out
    order = {lv: sorted(range(len(graphs[lv]["nodes"])), key=lambda i, lv=lv: recency[lv].get(
        graphs[lv]["nodes"][i]["id"], 0)) for lv in levels}  # oldest first
    for lv in levels:
        graphs[lv]["nodes"] = list(graphs[lv]["nodes"])
    over = size(out) - limit
    for oldest in _round_robin([order[lv] for lv in levels]):  # notes and touches, oldest first
        lv, i = levels[oldest[0]], oldest[1]
        node = graphs[lv]["nodes"][i]
        if not node["notes"] and not node["touches"]:
            continue
        saved = _rough(node["notes"]) + _rough(node["touches"])  # checked exactly below
        graphs[lv]["nodes"][i] = dict(node, notes=[], touches=[])
        cut[lv]["notes_of_nodes"] = cut[lv].get("notes_of_nodes", 0) + 1
        over -= saved
        if over <= 0:
            over = size(out) - limit
            if over <= 0:
                return out
    for key, name in (("edges", "edges"), ("archived", "archived")):
        for lv in levels:
            if graphs[lv][key]:
                cut[lv][name] = len(graphs[lv][key])
                graphs[lv][key] = []
        if fits():
            return out
    full = {lv: graphs[lv]["nodes"] for lv in levels}
    for n in GIST_STEPS:
        for lv in levels:
            graphs[lv]["nodes"] = [dict(x, gist=_clip(x["gist"], n)) for x in full[lv]]
            if any(len(x["gist"]) > n for x in full[lv]):
                cut[lv]["gists_cut_to"] = n
        if fits():
            return out
    # Oldest nodes out: keep the newest, the same number per level, while they fit.
    for lv in levels:
        cut[lv]["nodes"] = len(graphs[lv]["nodes"])
    kept_nodes = {lv: [] for lv in levels}
    for lv in levels:
        graphs[lv]["nodes"] = []
    room = limit - size(out) - 20
    newest = [list(reversed(order[lv])) for lv in levels]
    for k, i in _round_robin(newest):
        lv = levels[k]
        node = _clip_node(full[lv][i], GIST_STEPS[-1])
        cost = size(node) + 1
        if cost > room:
            break
        room -= cost
        kept_nodes[lv].append(i)
        cut[lv]["nodes"] -= 1
    for lv in levels:
        graphs[lv]["nodes"] = [_clip_node(full[lv][i], GIST_STEPS[-1]) for i in sorted(kept_nodes[lv])]
        if not cut[lv]["nodes"]:
            del cut[lv]["nodes"]
    while not fits():  # the counters grew by a few digits: the oldest kept node goes
        lv = max(levels, key=lambda x: len(graphs[x]["nodes"]))
        if not graphs[lv]["nodes"]:
            break
        oldest = min(range(len(graphs[lv]["nodes"])), key=lambda i: recency[lv].get(graphs[lv]["nodes"][i]["id"], 0))
        graphs[lv]["nodes"].pop(oldest)
        cut[lv]["nodes"] = cut[lv].get("nodes", 0) + 1
    return out


def _rough(strings):
    """Characters a list of strings takes in JSON, escapes aside (never more than the truth)."""
    return sum(len(x) + 3 for x in strings) - 1 if strings else 0


def _clip_node(node, n):
    return dict(node, gist=_clip(node["gist"], n))


def _round_robin(lists):
    """(list index, item) taking one from each list in turn."""
    pos = [0] * len(lists)
    while True:
        moved = False
        for k, items in enumerate(lists):
            if pos[k] < len(items):
                yield k, items[pos[k]]
                pos[k] += 1
                moved = True
        if not moved:
            return


def bound_nodes(result, limit=READ_LIMIT):
    """kg_read of ids, like its text: nodes in the order asked, whole while they fit; the first
    that does not fit loses notes, then edges, from its end; the nodes after it are counted."""
    if size(result) <= limit:
        return result
    cut = {}
    out = dict(result, nodes=[], missing=list(result["missing"]), truncated=cut)
    base = size(dict(out, missing=[]))
    while out["missing"] and size(out) - base > limit // 8:  # ids not found: a few thousand characters at most
        out["missing"].pop()
        cut["missing"] = cut.get("missing", 0) + 1
    room = limit - size(out) - 600  # the truncated entries below: two ids and a count
    nodes = result["nodes"]
    for i, n in enumerate(nodes):
        cost = size(n) + 1
        if cost > room:
            n = dict(n, notes=list(n["notes"]), edges=list(n["edges"]))
            for key, name in (("notes", "notes_of"), ("edges", "edges_of")):
                while n[key] and cost > room:
                    cost -= size(n[key].pop()) + (1 if n[key] else 0)
                    cut[name] = [n["id"]]
            if cost > room:
                i -= 1
            else:
                out["nodes"].append(n)
            if len(nodes) - i - 1:
                cut["nodes"] = len(nodes) - i - 1
            break
        out["nodes"].append(n)
        room -= cost
    return out


def bound_search(result, limit=SEARCH_LIMIT):
    """Notes and touches from the worst result up, then the worst results."""
    if size(result) <= limit:
        return result
    rows = list(result["results"])
    out = dict(result, results=rows)
    cut = {}
    out["truncated"] = cut
    over = size(out) - limit
    for i in range(len(rows) - 1, -1, -1):
        if rows[i]["notes"] or rows[i]["touches"]:
            over -= _rough(rows[i]["notes"]) + _rough(rows[i]["touches"])
            rows[i] = dict(rows[i], notes=[], touches=[])
            cut["notes_of_results"] = cut.get("notes_of_results", 0) + 1
            if over <= 0:
                over = size(out) - limit
                if over <= 0:
                    return out
    while rows and size(out) > limit:
        over = size(out) - limit
        while rows and over > 0:
            over -= size(rows.pop()) + 1
            cut["results"] = cut.get("results", 0) + 1
    return out


def bound_sync(result, limit=READ_LIMIT):
    """Notes and touches first, then whole entries from the end of the list the text shows last."""
    if size(result) <= limit:
        return result
    out = dict(result, nodes=[dict(n, notes=[], touches=[]) for n in result["nodes"]],
               edges=[dict(e, notes=[]) for e in result["edges"]])
    cut = {}
    out["truncated"] = cut
    with_notes = sum(1 for x in result["nodes"] + result["edges"] if x["notes"] or x.get("touches"))
    if with_notes:
        cut["notes_of"] = with_notes
    for key in ("deleted_edges", "deleted_nodes", "edges", "nodes"):
        items = out[key] = list(out[key])
        over = size(out) - limit
        while items and over > 0:
            over -= size(items.pop()) + 1
            cut[key] = cut.get(key, 0) + 1
            if over <= 0:
                over = size(out) - limit
        if over <= 0:
            return out
    return out
