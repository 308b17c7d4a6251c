"""kg_search ranking (contract section 3). Pure.

A node matches when its id, gist, notes or touches contain any query word (case-insensitive
substring). Score per matched word = idf x field weight, where idf = log(1 + N / df) over the
candidate nodes (rarer words count more) and the weight is 3 when the word is in the id or gist,
1 otherwise; the sum is multiplied by (1 + matched words / query words) so nodes matching more
of the words rank higher. An exact id match (case-insensitive) ranks first whatever else.
Ties: id ascending, then candidate order (user level first). Scores are rounded to 3 decimals.
"""

import math
import re

_WORD = re.compile(r"[^\s,;]+")
EXACT_ID_BONUS = 1000.0


def query_words(query):
    words = []
    for w in _WORD.findall(query.lower()):
        w = w.strip("\"'()[]{}<>!?")
        if w and w not in words:
            words.append(w)
    return words[:32]


def node_text(node):
    """(id + gist, notes + touches) lower-cased: the two fields that weigh differently."""
    head = (node["id"] + "\n" + node.get("gist", "")).lower()
    rest = "\n".join(list(node.get("notes", ())) + list(node.get("touches", ()))).lower()
    return head, rest


def rank(query, candidates, limit=20, text_of=node_text):
    """candidates: iterable of (level, node); level is passed through untouched. Returns [(score, level, node)] best first."""
    words = query_words(query)
    if not words:
        return []
    q_exact = query.strip().lower()
    hits = []
    df = [0] * len(words)
    total = 0
    for level, node in candidates:
        total += 1
        head, rest = text_of(node)
        found = []
        for i, w in enumerate(words):
            if w in head:
                found.append((i, 3.0))
            elif w in rest:
                found.append((i, 1.0))
        exact = node["id"].lower() == q_exact
        if found or exact:
            for i, _ in found:
                df[i] += 1
            hits.append((level, node, found, exact))
    if not hits:
        return []
    out = []
    for level, node, found, exact in hits:
        s = sum(math.log(1 + total / df[i]) * weight for i, weight in found)
        s *= 1 + len(found) / len(words)
        if exact:
            s += EXACT_ID_BONUS
        out.append((round(s, 3), level, node))
    out.sort(key=lambda t: (-t[0], t[2]["id"]))  # stable: earlier candidates (user level) first
    return out[:limit]
