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

from ..core.text import clip, compact_json
from .render import READ_LIMIT, SEARCH_LIMIT

GIST_STEPS = (160, 120, 80, 40)
LEVELS = ("user", "project")


def size(obj):
    return len(compact_json(obj))


def bound_read(result, recency, limit=READ_LIMIT):
    """result: the full kg_read object; recency: {level: {id: recency}} for newest-first order."""
    if size(result) <= limit:
        return result
    read = _ReadCut(result, recency, limit)
    for step in (read.drop_edge_notes, read.drop_node_notes, read.drop_lists, read.shorten_gists):
        if step():
            return read.out
    read.keep_newest_nodes()
    return read.out


class _ReadCut:
    """A full kg_read being cut to `limit`, one step at a time, each step a little harsher; a step
    answers whether the result fits now. `out` is the result with its level graphs copied (the
    caller's object is left alone), `cut` what each level lost so far (out["truncated"])."""

    def __init__(self, result, recency, limit):
        self.limit, self.recency = limit, recency
        self.graphs = {lv: dict(result[lv], nodes=list(result[lv]["nodes"])) for lv in LEVELS}
        self.cut = {lv: {} for lv in LEVELS}
        self.out = dict(result, **self.graphs)
        self.out["truncated"] = dict(self.cut, hint="left out to fit {:,} characters; kg_read ids=[...] gives "
                                                    "whole nodes, kg_search finds the rest".format(limit))
        self.oldest_first = {lv: sorted(range(len(self.graphs[lv]["nodes"])), key=self._age_key(lv))
                             for lv in LEVELS}
        self.whole = None  # the nodes before their gists were shortened

    def _age_key(self, lv):
        nodes, recency = self.graphs[lv]["nodes"], self.recency[lv]
        return lambda i: recency.get(nodes[i]["id"], 0)

    def over(self):
        return size(self.out) - self.limit

    def drop_edge_notes(self):
        for lv, g in self.graphs.items():
            n = sum(len(e["notes"]) for e in g["edges"])
            if n:
                g["edges"] = [dict(e, notes=[]) for e in g["edges"]]
                self.cut[lv]["edge_notes"] = n
        return self.over() <= 0

    def drop_node_notes(self):
        """Notes and touches of active nodes, oldest first, one level then the other."""
        over = self.over()
        for k, i in _round_robin([self.oldest_first[lv] for lv in LEVELS]):
            lv = LEVELS[k]
            nodes = self.graphs[lv]["nodes"]
            if not nodes[i]["notes"] and not nodes[i]["touches"]:
                continue
            over -= _rough(nodes[i]["notes"]) + _rough(nodes[i]["touches"])  # checked exactly below
            nodes[i] = dict(nodes[i], notes=[], touches=[])
            self.cut[lv]["notes_of_nodes"] = self.cut[lv].get("notes_of_nodes", 0) + 1
            if over <= 0:
                over = self.over()
                if over <= 0:
                    return True
        return False

    def drop_lists(self):
        """Edges, then archived ids."""
        for key in ("edges", "archived"):
            for lv in LEVELS:
                if self.graphs[lv][key]:
                    self.cut[lv][key] = len(self.graphs[lv][key])
                    self.graphs[lv][key] = []
            if self.over() <= 0:
                return True
        return False

    def shorten_gists(self):
        self.whole = {lv: self.graphs[lv]["nodes"] for lv in LEVELS}
        for n in GIST_STEPS:
            for lv in LEVELS:
                self.graphs[lv]["nodes"] = [_clip_node(x, n) for x in self.whole[lv]]
                if any(len(x["gist"]) > n for x in self.whole[lv]):
                    self.cut[lv]["gists_cut_to"] = n
            if self.over() <= 0:
                return True
        return False

    def keep_newest_nodes(self):
        """The oldest nodes out: the newest kept, one per level in turn, while they fit."""
        shortest = GIST_STEPS[-1]
        for lv in LEVELS:
            self.cut[lv]["nodes"] = len(self.graphs[lv]["nodes"])
            self.graphs[lv]["nodes"] = []
        kept = {lv: [] for lv in LEVELS}
        room = self.limit - size(self.out) - 20
        for k, i in _round_robin([self.oldest_first[lv][::-1] for lv in LEVELS]):
            lv = LEVELS[k]
            cost = size(_clip_node(self.whole[lv][i], shortest)) + 1
            if cost > room:
                break
            room -= cost
            kept[lv].append(i)
            self.cut[lv]["nodes"] -= 1
        for lv in LEVELS:
            self.graphs[lv]["nodes"] = [_clip_node(self.whole[lv][i], shortest) for i in sorted(kept[lv])]
            if not self.cut[lv]["nodes"]:
                del self.cut[lv]["nodes"]
        self._drop_oldest_kept()

    def _drop_oldest_kept(self):
        """The counters grew by a few digits: the oldest kept node of the fuller level goes."""
        while self.over() > 0:
            lv = max(LEVELS, key=lambda x: len(self.graphs[x]["nodes"]))
            nodes = self.graphs[lv]["nodes"]
            if not nodes:
                break
            nodes.pop(min(range(len(nodes)), key=lambda i: self.recency[lv].get(nodes[i]["id"], 0)))
            self.cut[lv]["nodes"] = self.cut[lv].get("nodes", 0) + 1


def _rough(strings):
    """Characters a list of strings takes in JSON, escapes aside (never more than the truth)."""
    return sum(len(x) + 3 for x in strings) - 1 if strings else 0


def _clip_node(node, n):
    return dict(node, gist=clip(node["gist"], n, line=False))


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
