"""kg_search ranking (contract section 3). Pure.

A node matches when its id, gist, notes or touches contain any query word (case-insensitive
substring). Score per matched word = idf x field weight, where idf = log(1 + N / df) over the
candidate nodes (rarer words count more) and the weight is 3 when the word is in the id or gist,
1 otherwise; the sum is multiplied by (1 + matched words / query words) so nodes matching more
of the words rank higher. An exact id match (case-insensitive) ranks first whatever else.
Ties: id ascending, then candidate order (user level first). Scores are rounded to 3 decimals.

Stop words (English function words: "the", "of", "is", ...) are no query words: matched as
substrings they hit nearly every node ("the" is in "other" and "theme"), so "closing the lid"
would return a node through "the" alone. A query of stop words only matches an exact id, nothing
else. Negations ("no", "not") are kept: they change what a note means.
"""

import heapq
import itertools
import math
import operator
import re

from .errors import BadInput

_WORD = re.compile(r"[^\s,;]+")
EXACT_ID_BONUS = 1000.0
STOP_WORDS = frozenset("""
a about above after again all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he
her here hers him his how i if in into is it its itself just me more most my of off on once only or
other our ours out over own same she should so some such than that the their theirs them then there
these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours
""".split())


def check_query(query, limit):
    """kg_search's arguments: a query of words (at most 1000 characters), a limit from 1 to 200."""
    if not isinstance(query, str) or not query.strip():
        raise BadInput("query must be a non-empty string of words to look for.")
    if len(query) > 1000:
        raise BadInput("query is over 1000 characters; use a few words.")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 200:
        raise BadInput("limit must be an integer from 1 to 200.")


def query_words(query):
    words = []
    for w in _WORD.findall(query.lower()):
        w = w.strip("\"'()[]{}<>!?")
        if w and w not in words and w not in STOP_WORDS:
            words.append(w)
    return words[:32]


def node_text(node):
    """(id + gist, notes + touches) lower-cased: the two fields that weigh differently."""
    head = (node["id"] + "\n" + node.get("gist", "")).lower()
    rest = "\n".join(list(node.get("notes", ())) + list(node.get("touches", ()))).lower()
    return head, rest


class Corpus:
    """The lower-cased texts of many nodes held side by side, so that a query is answered with a
    few list-wide operations per word (membership tests, element-wise sums) that run at C speed,
    instead of Python-level work per node and word. Built once per graph and reused until the
    graph changes."""

    def __init__(self, items, text_of=node_text):
        self.items = list(items)  # (tag, node), in candidate order
        self.heads, self.rests, self.ids = [], [], []
        for _, node in self.items:
            head, rest = text_of(node)
            self.heads.append(head)
            self.rests.append(rest)
            self.ids.append(node["id"])
        self.by_id = {}
        for k, nid in enumerate(self.ids):
            self.by_id.setdefault(nid.lower(), []).append(k)

    def weights(self, word):
        """Per node: 3 when the word is in the id or gist, 1 when only in notes or touches, else 0."""
        return [3.0 if word in h else 1.0 if word in r else 0.0 for h, r in zip(self.heads, self.rests)]


def rank_corpora(query, corpora, limit=20):
    """Rank the nodes of several corpora together. Returns [(score, tag, node)] best first."""
    words = query_words(query)
    q_exact = query.strip().lower()
    if not words:  # stop words only (or nothing): an exact id is the one match
        hits = [(ci, k) for ci, c in enumerate(corpora) for k in c.by_id.get(q_exact, ())] if q_exact else []
        return [(EXACT_ID_BONUS, corpora[ci].items[k][0], corpora[ci].items[k][1]) for ci, k in hits][:limit]
    total = sum(len(c.items) for c in corpora)
    columns = [[c.weights(w) for w in words] for c in corpora]
    df = [sum(len(cols[i]) - cols[i].count(0.0) for cols in columns) for i in range(len(words))]
    idf = [math.log(1 + total / d) if d else 0.0 for d in df]
    n_words = len(words)
    scored = []
    repeat = itertools.repeat
    for ci, (c, cols) in enumerate(zip(corpora, columns)):
        n = len(c.items)
        acc, matched = [0.0] * n, [0] * n
        for f, col in zip(idf, cols):
            acc = list(map(operator.add, acc, map(operator.mul, col, repeat(f))))
            matched = list(map(operator.add, matched, map(bool, col)))
        # score = sum x (1 + matched / words), element-wise at C speed (no per-node Python code)
        final = list(map(operator.mul, acc, map(operator.add, repeat(1.0),
                                                 map(operator.truediv, matched, repeat(n_words)))))
        for k in c.by_id.get(q_exact, ()):
            final[k] += EXACT_ID_BONUS
        rounded = list(map(round, final, repeat(3)))
        # keep the nodes that matched (every score of a match is well above 0.001)
        scored.append(itertools.compress(zip(map(operator.neg, rounded), c.ids, repeat(ci), range(n)), rounded))
    best = heapq.nsmallest(limit, itertools.chain.from_iterable(scored))  # ties: id ascending, then candidate order
    return [(-neg, corpora[ci].items[k][0], corpora[ci].items[k][1]) for neg, _, ci, k in best]


def rank_graphs(query, graphs, limit=20):
    """rank_corpora over graphs, each graph's Corpus kept on it (g.corpus) until the graph changes
    and each node's lower-cased text (g.search_cache) until that node changes. Returns
    [(score, graph, node)] best first."""
    corpora = []
    for g in graphs:
        if g.corpus is None:
            cache = g.search_cache

            def text_of(n, cache=cache):
                t = cache.get(n["id"])
                if t is None:
                    t = cache[n["id"]] = node_text(n)
                return t
            g.corpus = Corpus(((g, n) for n in g.visible_nodes().values()), text_of)  # no credential
        corpora.append(g.corpus)
    return rank_corpora(query, corpora, limit)


def rank(query, candidates, limit=20, text_of=node_text):
    """candidates: iterable of (level, node); level is passed through untouched.
    Returns [(score, level, node)] best first."""
    return rank_corpora(query, [Corpus(candidates, text_of)], limit)
