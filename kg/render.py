"""The text an agent reads in each tool result (contract section 3). Pure.

Compact lines, no JSON dumps: this text is loaded into the agent's context. A full kg_read is
at most READ_LIMIT characters and a search at most SEARCH_LIMIT, whatever the graph holds.
When a read would be longer, the least valuable parts go first, and the text says what was left
out and how to get it: edge notes are never shown here, then archived ids are cut to a count,
then edges, then gists of the oldest active nodes are shortened, and as a last resort the oldest
active nodes are listed by id only (within a character budget), then counted; nothing is dropped without a line saying so.
"""

import json

READ_LIMIT = 40000
SEARCH_LIMIT = 10000
NODE_TEXT_LIMIT = 40000


def _clip(s, n):
    s = " ".join(s.split())
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def _edge_line(e):
    return "%s -[%s]-> %s" % (e["from"], e["rel"], e["to"])


# Per mode, strictest last: (gist length, active nodes listed with a gist, characters for the
# ids of the rest). Modes 0-2 also decide whether archived ids and edges are listed.
_MODES = [(None, None, None), (None, None, None), (None, None, None), (160, None, None),
          (120, 400, 15000), (100, 250, 12000), (80, 150, 10000), (60, 60, 6000), (40, 20, 2000)]


def _id_list(ids, budget):
    out, used = [], 0
    for i in ids:
        if budget is not None and used + len(i) + 2 > budget:
            break
        out.append(i)
        used += len(i) + 2
    return out


def _graph_lines(title, g, max_tokens, mode):
    """Lines of one level; mode grows stricter as the text must shrink (0..8)."""
    nodes = sorted(g["nodes"], key=lambda n: -g["recency"].get(n["id"], 0))
    lines = ["## %s graph: %d active, %d archived, ~%d/%d tokens" % (
        title, len(nodes), len(g["archived"]), g["tokens"], max_tokens)]
    if not nodes and not g["archived"]:
        lines.append("(empty)")
    gist_len, full, id_budget = _MODES[mode]
    full = len(nodes) if full is None else min(full, len(nodes))
    if gist_len is not None and any(len(n["gist"]) > gist_len for n in nodes[:full]):
        lines.append("(gists shortened to %d characters to fit the context; kg_read id=... gives a whole node)"
                     % gist_len)
    for n in nodes[:full]:
        gist = " ".join(n["gist"].split()) if gist_len is None else _clip(n["gist"], gist_len)
        lines.append("- %s: %s" % (n["id"], gist))
    rest = nodes[full:]
    if rest:
        shown = _id_list([n["id"] for n in rest], id_budget)
        if len(shown) == len(rest):
            lines.append("Older active nodes, ids only (kg_read ids=[...] for gists): " + ", ".join(shown))
        else:
            lines.append("%d older active nodes not listed in full to fit the context; the newest of them: %s …"
                         % (len(rest), ", ".join(shown)))
    if g["archived"]:
        if mode == 0:
            lines.append("Archived (kg_read id=... recalls one): " + ", ".join(g["archived"]))
        else:
            lines.append("%d archived nodes not listed to save space; kg_search finds them." % len(g["archived"]))
    if g["edges"]:
        if mode <= 1:
            lines.append("Edges:")
            lines.extend("- " + _edge_line(e) for e in g["edges"])
        else:
            lines.append("%d edges not listed to save space; kg_read id=... shows a node's edges." % len(g["edges"]))
    return lines


def render_read(result, max_tokens, limit=READ_LIMIT):
    head = ["Session: %s" % result["session_id"],
            "Project: %s" % (result.get("project_path") or "(none: user graph only)")]
    tail = ["", "Use: kg_read id=... for a node's notes and edges; kg_put_node / kg_put_edge to save insights "
                "(level user = cross-project, project = this codebase); kg_sync in long sessions."]
    text = ""
    for mode in range(len(_MODES)):
        body = head[:]
        for title, key in (("User", "user"), ("Project", "project")):
            body.append("")
            body.extend(_graph_lines(title, result[key], max_tokens, mode))
        text = "\n".join(body + tail)
        if len(text) <= limit:
            return text
    return text[: limit - 80] + "\n… output cut at %d characters; kg_search or kg_read ids=[...] for the rest." % limit


def render_nodes(result, limit=NODE_TEXT_LIMIT):
    out = []
    for n in result["nodes"]:
        out.append("## %s [%s, %s]" % (n["id"], n["level"], n["state"]))
        out.append(n["gist"])
        if n["touches"]:
            out.append("touches: " + ", ".join(n["touches"]))
        for e in n["edges"]:  # before the notes: if the text must be cut, notes go first
            line = "edge: " + _edge_line(e)
            if e["notes"]:
                line += " (" + "; ".join(e["notes"]) + ")"
            out.append(line)
        for note in n["notes"]:
            out.append("- note: " + note)
        out.append("")
    if result["missing"]:
        out.append("Not found: %s (kg_search finds ids)." % ", ".join(result["missing"]))
    text = "\n".join(out).strip() or "Nothing found."
    if len(text) > limit:
        text = text[: limit - 120] + ("\n… cut at %d characters: read fewer ids at once; the result's structured "
                                      "content holds every note in full." % limit)
    return text


def render_put_node(r):
    verb = "Created" if r["created"] else "Updated"
    return "%s %s node %s (%s): %s" % (verb, r["level"], r["node"]["id"], r["node"]["state"], _clip(r["node"]["gist"], 200))


def render_put_edge(r):
    verb = "Created" if r["created"] else "Updated"
    return "%s %s edge %s" % (verb, r["level"], _edge_line(r["edge"]))


def render_delete_node(r):
    return "Deleted %s node %s and %d edge(s) touching it." % (r["level"], r["id"], r["edges_removed"])


def render_delete_edge(r):
    return "Deleted %s edge %s" % (r["level"], _edge_line(r["edge"]))


def render_search(result, query, limit=SEARCH_LIMIT):
    rows = result["results"]
    if not rows:
        return "No node matches %r." % query
    out = ["%d result(s) for %r, best first:" % (len(rows), query)]
    for i, r in enumerate(rows):
        flag = "" if r["state"] == "active" else " [%s%s]" % (
            r["state"], ": kg_read id recalls it" if r["state"] == "orphaned" else "")
        line = "- %s (%s)%s: %s" % (r["id"], r["level"], flag, _clip(r["gist"], 300))
        if sum(len(x) + 1 for x in out) + len(line) > limit - 100:
            out.append("… %d more not shown; narrow the query." % (len(rows) - i))
            break
        out.append(line)
    return "\n".join(out)


def render_sync(r, limit=READ_LIMIT):
    if not (r["nodes"] or r["edges"] or r["deleted_nodes"] or r["deleted_edges"]):
        return "No changes from other sessions since your last sync."
    out = []
    if r.get("full_resync"):
        out.append("The change log did not reach back to your last sync (daemon restarted): this is the whole current graph.")
    for n in r["nodes"]:
        out.append("node %s (%s, %s): %s" % (n["id"], n["level"], n["state"], _clip(n["gist"], 300)))
    for e in r["edges"]:
        out.append("edge (%s): %s" % (e["level"], _edge_line(e)))
    for d in r["deleted_nodes"]:
        out.append("deleted node %s (%s)" % (d["id"], d["level"]))
    for d in r["deleted_edges"]:
        out.append("deleted edge (%s): %s" % (d["level"], _edge_line(d)))
    text = "Changes from other sessions:\n" + "\n".join(out)
    if len(text) > limit:
        text = text[: limit - 80] + "\n… cut at %d characters; kg_read gives the whole current graph." % limit
    return text


def render_progress(r):
    if r["state"] is None:
        return "No progress stored for task %s (%s level)." % (r["task_id"], r["level"])
    body = json.dumps(r["state"], ensure_ascii=False, separators=(", ", ": "))
    return "Progress of task %s (%s level): %s" % (r["task_id"], r["level"], _clip(body, 20000))
