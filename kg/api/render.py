"""The text an agent reads in each tool result (contract section 3). Pure.

By default this text is all a client gets (no structuredContent), so it carries everything an
agent needs from a result: created or updated, the level and state of each node, every active id
of a full read, and counts of whatever it leaves out. Compact lines, no JSON dumps.
A full kg_read and a kg_sync are at most READ_LIMIT characters (or the smaller bound of the agent
that asks, kg/agents/dialects.py), a search at most SEARCH_LIMIT and a read of ids at most NODE_TEXT_LIMIT,
whatever the graph holds. When a full read would be
longer, the least valuable parts go first and the text says what was left out and how to get
it: notes and touches are never shown there, edge lines go first (counted), then archived ids
are cut to a count (they are the crumbs that lead back to archived knowledge, so they outlive the
edges), then gists of the oldest active nodes are shortened, then the oldest active nodes are
listed by id only (within a character budget), then counted; nothing is dropped without a line
saying so.
"""

import json
import time

from ..core.text import clip

READ_LIMIT = 40000
SEARCH_LIMIT = 10000
NODE_TEXT_LIMIT = 40000


def _edge_line(e):
    """`from -[rel]-> to`, and the stale mark of an edge whose file end changed (contract 12)."""
    line = "%s -[%s]-> %s" % (e["from"], e["rel"], e["to"])
    return line + " [%s]" % e["stale"]["mark"] if e.get("stale") else line


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


# Per mode, strictest last: (gist length, active nodes listed with a gist, characters for the
# ids of the rest). Mode 0 lists everything, mode 1 counts the edges, mode 2 and later also
# count the archived ids.
_MODES = [(None, None, None), (None, None, None), (None, None, None), (160, None, None),
          (120, 400, 15000), (100, 350, 14000), (100, 300, 13000), (100, 250, 12000), (80, 200, 10000),
          (80, 150, 9000), (60, 120, 8000), (60, 90, 7000), (60, 60, 6000), (40, 40, 4000), (40, 20, 2000),
          (40, 10, 1000), (30, 5, 400)]  # the last two for the smaller bounds of some agents (kg/agents/dialects.py)


def _id_list(ids, budget):
    out, used = [], 0
    for i in ids:
        if budget is not None and used + len(i) + 2 > budget:
            break
        out.append(i)
        used += len(i) + 2
    return out


def _prepare(g, preloaded=()):
    """Newest first, with the lengths the mode estimate needs: the modes below only slice this.
    Gists are flattened only when shown. Nodes whose gist the session was already given by the
    session-start preload (`preloaded` ids) are named, not repeated. A stale node's id length
    counts its tag (contract 12): one test per node in the pass that is made anyway."""
    recency = g.get("recency") or {}
    nodes = sorted((n for n in g["nodes"] if n["id"] not in preloaded), key=lambda n: -recency.get(n["id"], 0))
    pairs = [(n["id"], n["gist"]) for n in nodes]
    again = sorted(n["id"] + stale_tag(n) for n in g["nodes"] if n["id"] in preloaded)
    id_lens = [len(n["id"]) + (7 + len(n["stale"]["mark"]) if "stale" in n else 4) for n in nodes]
    return pairs, id_lens, [len(x) for _, x in pairs], again, nodes


def stale_tag(n):
    """" [stale: src/x.py changed, 4 commits ago]" for a node whose touched code changed since it
    was written (contract section 12), else ""."""
    s = n.get("stale")
    return " [%s]" % s["mark"] if s else ""


def _flat(gist, n=None):
    gist = " ".join(gist.split())
    return gist if n is None or len(gist) <= n else gist[: n - 1] + "…"


def _graph_lines(title, g, prepared, max_tokens, mode):
    """Lines of one level; mode grows stricter as the text must shrink (0 .. len(_MODES) - 1)."""
    nodes, again = prepared[0], prepared[3]
    tokens = g.get("tokens", 0)
    lines = ["## %s graph: %d active, %d archived, ~%d of %d budget tokens%s" % (
        title, len(nodes) + len(again), len(g["archived"]), tokens, max_tokens,
        " (over: recent nodes stay active for a grace period)" if tokens > max_tokens else "")]
    if not nodes and not again and not g["archived"]:
        lines.append("(empty)")
    lines.extend(_withheld_lines(g.get("withheld")))
    if again:
        lines.append("Already in your context (kgd's hooks showed them in this session), gists not repeated: "
                     + ", ".join(again))
    gist_len, full, id_budget = _MODES[mode]
    full = len(nodes) if full is None else min(full, len(nodes))
    if gist_len is not None and any(n > gist_len for n in prepared[2][:full]):
        lines.append("(gists shortened to %d characters to fit the context; kg_read id=... gives a whole node)"
                     % gist_len)
    lines.extend("- %s%s: %s" % (nid, " [%s]" % n["stale"]["mark"] if "stale" in n else "", _flat(gist, gist_len))
                 for n, (nid, gist) in zip(prepared[4][:full], nodes[:full]))
    rest = nodes[full:]
    if rest:
        shown = _id_list([nid for nid, _ in rest], id_budget)
        if len(shown) == len(rest):
            lines.append("Older active nodes, ids only (kg_read ids=[...] for gists): " + ", ".join(shown))
        else:
            lines.append("%d older active nodes not listed in full to fit the context (%d of them named here, "
                         "newest first; kg_search finds the rest): %s …" % (len(rest), len(shown), ", ".join(shown)))
    if g["archived"]:
        if mode <= 1:
            lines.append("Archived (kg_read id=... recalls one): " + ", ".join(g["archived"]))
        else:
            lines.append("%d archived nodes not listed to fit the context; kg_search finds them." % len(g["archived"]))
    if g["edges"]:
        if mode == 0:
            lines.append("Edges:")
            lines.extend("- " + _edge_line(e) for e in g["edges"])
        else:
            lines.append("%d edges not listed to fit the context; kg_read id=... shows a node's edges."
                         % len(g["edges"]))
    return lines


def _withheld_lines(withheld):
    """Contract section 10: nodes holding a credential are never shown, and the read says so."""
    named, count = withheld or ((), 0)
    if not count:
        return []
    line = "%s withheld because %s; delete %s with kg_delete_node" % (
        _plural(count, "node"), "it looks like a credential" if count == 1 else "they look like credentials",
        "it" if count == 1 else "them")
    if named:
        line += ": " + ", ".join(_id_list(named, 1000))
    if count > len(named):
        line += " (%d whose id itself looks like one: kgd doctor lists where)" % (count - len(named))
    return [line]


def _node_lines_estimate(prepared, mode):
    """Characters of the node lines of a mode and of the ids-only list after them, gists counted
    before flattening (never less than the text, but for a gist with runs of spaces)."""
    gist_len, full, id_budget = _MODES[mode]
    _, id_lens, gist_lens, again, _ = prepared
    rest = 0
    if full is not None:
        rest = sum(id_lens[full:]) - 2 * len(id_lens[full:])  # each "- " + ": " less ", "
        id_lens, gist_lens = id_lens[:full], gist_lens[:full]
        rest = min(rest, id_budget)
    rest += sum(len(i) + 2 for i in again)
    if gist_len is None:
        return sum(id_lens) + sum(gist_lens) + rest
    return sum(id_lens) + sum(n if n < gist_len else gist_len for n in gist_lens) + rest


def render_read(result, max_tokens, limit=READ_LIMIT, preloaded=None):
    """A full kg_read. `preloaded`: "level:id" keys whose gists kgd's hooks (the session-start
    preload, recall) already put in this session's context: a kg_read names them without
    repeating their gists (contract 8)."""
    head = ["Session: %s" % result["session_id"],
            "Project: %s" % (result.get("project_path") or "(none: user graph only)")]
    tail = ["", "Use: kg_read id=... for a node's notes and edges; kg_put_node / kg_put_edge to save insights "
                "(level user = cross-project, project = this codebase); kg_sync in long sessions."]
    levels = [("User", result["user"]), ("Project", result["project"])]
    preloaded = preloaded or ()
    prepared = [_prepare(g, {k.split(":", 1)[1] for k in preloaded if k.startswith(title.lower() + ":")})
                for title, g in levels]
    text = ""
    last = len(_MODES) - 1
    for mode in range(len(_MODES)):
        # A mode whose node lines alone are over the limit is skipped unbuilt. (Only a gist with
        # runs of spaces is shorter once flattened: at worst a stricter mode than needed.)
        if mode < last and sum(_node_lines_estimate(p, mode) for p in prepared) > limit:
            continue
        body = head[:]
        for (title, g), p in zip(levels, prepared):
            body.append("")
            body.extend(_graph_lines(title, g, p, max_tokens, mode))
        text = "\n".join(body + tail)
        if len(text) <= limit:
            return text
    return text[: limit - 80] + "\n… output cut at %d characters; kg_search or kg_read ids=[...] for the rest." % limit


def age(ts, now=None):
    """How long ago, in one short word: "5m ago", "3h ago", "2d ago"."""
    s = max(0.0, (time.time() if now is None else now) - (ts or 0))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return "%d%s ago" % (s // size, unit)
    return "just now"


def _who(n):
    """" (bob, 3d ago)" for a teammate's knowledge (it came from the repository), else ""."""
    return " (%s, %s)" % (clip(n["by"], 40), age(n.get("changed"))) if n.get("by") else ""


def _node_lines(n):
    """One node read in full: its edges before its notes, so a cut takes notes first."""
    personal = ", private" if n.get("private") else ", not published yet" if n.get("unpublished") else ""
    head = ["## %s [%s, %s%s]%s" % (n["id"], n["level"], n["state"], personal, _who(n)), n["gist"]]
    if n.get("stale"):
        head.append("%s (the code changed since this was written: check it; a kg_put_node of it, even unchanged, "
                    "marks it current)" % n["stale"]["mark"])
    if n["touches"]:
        head.append("touches: " + ", ".join(n["touches"]))
    edges = []
    for e in n["edges"]:
        line = "edge: " + _edge_line(e)
        if e["notes"]:
            line += " (" + "; ".join(e["notes"]) + ")"
        edges.append(line)
    return head, edges, ["- note: " + note for note in n["notes"]]


def render_nodes(result, limit=NODE_TEXT_LIMIT):
    out = ["Session: %s" % result["session_id"]] if result.get("session_id") else []
    budget = limit - 400  # room for the closing lines
    used = sum(len(x) + 1 for x in out)
    not_shown = []
    for n in result["nodes"]:
        if not_shown or used >= budget:
            not_shown.append(n["id"])
            continue
        head, edges, notes = _node_lines(n)
        kept, cut_edges, cut_notes = [], 0, 0
        for part, kind in ((head, "head"), (edges, "edge"), (notes, "note")):
            for line in part:
                if kind != "head" and used + len(line) + 1 > budget - 200:
                    if kind == "edge":
                        cut_edges += 1
                    else:
                        cut_notes += 1
                    continue
                if kind == "head" and used + len(line) + 1 > budget - 200:
                    line = clip(line, max(40, budget - 200 - used))
                kept.append(line)
                used += len(line) + 1
        if cut_edges or cut_notes:
            line = "(… %s and %s of this node left out to fit the context; kg_read id=%s alone shows them)" % (
                _plural(cut_notes, "note"), _plural(cut_edges, "edge"), n["id"])
            kept.append(line)
            used += len(line) + 1
        out.extend(kept)
        out.append("")
        used += 1
    if not_shown:
        named = _id_list(not_shown, 2000)
        out.append("%s read but not shown to fit the context (read fewer ids at once): %s%s" % (
            _plural(len(not_shown), "more node"), ", ".join(named), " …" if len(named) < len(not_shown) else ""))
    if result.get("withheld"):
        which = "this node" if len(result["withheld"]) == 1 else "these nodes"
        out.append("Withheld, %s looks like a credential (kgd never shows one; kg_delete_node removes it): %s" % (
            which, ", ".join(_id_list(result["withheld"], 2000))))
    if result["missing"]:
        named = _id_list(result["missing"], 2000)
        more = len(result["missing"]) - len(named)
        out.append("Not found: %s%s (kg_search finds ids)." % (", ".join(named), " and %d more" % more if more else ""))
    if not result["nodes"] and not result["missing"] and not result.get("withheld"):
        out.append("Nothing found.")
    text = "\n".join(out).strip()
    if len(text) > limit:
        text = text[: limit - 80] + "\n… cut at %d characters: read fewer ids at once." % limit
    return text


def _counts(r):
    n, t = len(r.get("notes") or []), len(r.get("touches") or [])
    return "%s, %s" % (_plural(n, "note"), _plural(t, "touch").replace("touchs", "touches"))


def render_put_node(r):
    verb = "Created" if r["created"] else "Updated"
    n = r["node"]
    private = "private: never written to the repository's .kg/; " if n.get("private") else ""
    return "%s %s node %s (%s; %s%s): %s" % (verb, r["level"], n["id"], n["state"], private, _counts(n),
                                             clip(n["gist"], 200))


def render_put_edge(r):
    verb = "Created" if r["created"] else "Updated"
    notes = len(r["edge"].get("notes") or [])
    return "%s %s edge %s (%s)" % (verb, r["level"], _edge_line(r["edge"]), _plural(notes, "note"))


def render_delete_node(r):
    return "Deleted %s node %s and %d edge(s) touching it." % (r["level"], r["id"], r["edges_removed"])


def render_delete_edge(r):
    return "Deleted %s edge %s" % (r["level"], _edge_line(r["edge"]))


def render_search(result, query, limit=SEARCH_LIMIT, project_path=None, asked=None):
    """project_path: the session's project; results from other projects name theirs."""
    rows = result["results"]
    if not rows:
        return "No node matches %r." % clip(query, 200)
    head = "%d result(s) for %r, best first" % (len(rows), clip(query, 200))
    if asked is not None and len(rows) >= asked:
        head += " (limit %d reached; a higher limit= gives more)" % asked
    out = [head + ":"]
    used = len(out[0]) + 1
    for i, r in enumerate(rows):
        where = r["level"]
        if r["level"] == "project" and r.get("project_path") and r.get("project_path") != project_path:
            where = "project %s" % r["project_path"]
        flag = "" if r["state"] == "active" else " [%s%s]" % (
            r["state"], ": kg_read id recalls it" if r["state"] == "orphaned" else "")
        line = "- %s (%s)%s%s: %s" % (r["id"], where, flag, stale_tag(r), clip(r["gist"], 300))
        if used + len(line) + 1 > limit - 100:
            out.append("… %d more not shown to fit the context; narrow the query." % (len(rows) - i))
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _left_lines(left_nodes, per_line=20):
    """The nodes a checkout took out of the view, a line per level and up to per_line ids."""
    out = []
    for level in ("user", "project"):
        ids = [d["id"] for d in left_nodes if d["level"] == level]
        out.extend({"level": level, "ids": ids[i:i + per_line]} for i in range(0, len(ids), per_line))
    return out


def render_sync(r, limit=READ_LIMIT):
    left_nodes = r.get("left_nodes") or []
    if not (r["nodes"] or r["edges"] or r["deleted_nodes"] or r["deleted_edges"] or left_nodes):
        return "No changes from other sessions since your last sync."
    out = ["Changes from other sessions:"]
    pulled = r.get("from_repository")
    if pulled:
        authors = list(pulled["by"].items())
        by = (" by %s" % clip(authors[0][0], 40) if len(authors) == 1 else  # "8 nodes by alice"
              " (%s)" % ", ".join("%s %d" % (clip(name, 40), n) for name, n in authors[:5]) if authors else "")
        out.append("From the repository (a pull or checkout): %s%s." % (_plural(pulled["nodes"], "node"), by))
    if r.get("full_resync"):
        out.append("The change log did not reach back to your last sync (daemon restarted): "
                   "this is the whole current graph.")
    used = sum(len(x) + 1 for x in out)
    groups = [
        ("nodes", r["nodes"],
         lambda n: "node %s (%s, %s)%s%s: %s" % (n["id"], n["level"], n["state"], _who(n), stale_tag(n),
                                                 clip(n["gist"], 300))),
        ("edges", r["edges"], lambda e: "edge (%s): %s" % (e["level"], _edge_line(e))),
        ("deleted nodes", r["deleted_nodes"], lambda d: "deleted node %s (%s)" % (d["id"], d["level"])),
        ("nodes that left with the branch", _left_lines(left_nodes),
         lambda d: "left with the branch (the checkout changed; not deleted; %s): %s" % (d["level"],
                                                                                        ", ".join(d["ids"]))),
        ("deleted edges", r["deleted_edges"], lambda d: "deleted edge (%s): %s" % (d["level"], _edge_line(d)))]
    left = []
    for name, items, fmt in groups:
        for i, item in enumerate(items):
            line = fmt(item)
            if left or used + len(line) + 1 > limit - 300:
                left.append("%d %s" % (sum(len(x["ids"]) if "ids" in x else 1 for x in items[i:]), name))
                break
            out.append(line)
            used += len(line) + 1
    if left:
        out.append("… cut to fit the context, not shown: %s; kg_read gives the whole current graph." % ", ".join(left))
    return "\n".join(out)


def render_progress(r):
    if r["state"] is None:
        return "No progress stored for task %s (%s level)." % (r["task_id"], r["level"])
    body = json.dumps(r["state"], ensure_ascii=False, separators=(", ", ": "))
    return "Progress of task %s (%s level): %s" % (r["task_id"], r["level"], clip(body, 20000))
