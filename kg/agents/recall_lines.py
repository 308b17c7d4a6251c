"""The recall lines the hooks show, within a budget (contract section 8). Pure.

Rules owned here:
- One compact line per node: level, id, state when not active, gist, a clipped first note.
- Budgets: at most N lines and C characters; a line that does not fit is tried shorter (without
  its note, then with its gist clipped) before the list stops.
"""

from ..core.text import clip


def node_line(level, node, state, gist_len=240, note_len=160):
    """One compact line: level, id, state when not active, gist, a clipped first note. note_len
    None leaves the note out. How to get the whole node (kg_read id=...) is not repeated on every
    line: the preload's usage guide says it once, and the id leads the line."""
    head = "- [%s] %s%s: " % (level, node["id"], "" if state == "active" else " (%s)" % state)
    body = clip(node.get("gist", ""), gist_len or 60)
    notes = node.get("notes") or ()
    if note_len and notes:
        body += " | note: " + clip(notes[0], note_len)
    return head + body


def fit_lines(items, max_items, max_chars, render=node_line):
    """Lines for items [(level, node, state)] best first, at most max_items and max_chars in all
    (newlines counted). A line over the rest of the budget is tried without its note, then with a
    shorter gist; when even that does not fit, the list stops. Returns (lines, items used)."""
    lines, used, size = [], [], 0
    for item in items:
        if len(lines) >= max_items:
            break
        room = max_chars - size - (1 if lines else 0)
        for gist_len, note_len in ((240, 160), (240, None), (120, None), (60, None)):
            line = render(item[0], item[1], item[2], gist_len, note_len)
            if len(line) <= room:
                break
        else:
            break
        lines.append(line)
        used.append(item)
        size += len(line) + (1 if len(lines) > 1 else 0)
    return lines, used
