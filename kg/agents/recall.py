"""Matching text (a prompt, a file path) to nodes for the hooks (contract section 8). Pure.

Rules owned here:
- Words, not substrings: text is cut into alphanumeric runs; identifiers are split further
  (snake_case, kebab-case, camelCase, paths), lower-cased, stopwords (English and coding filler)
  and one-letter parts dropped, digits kept only from 3 long; a light stemmer folds plurals and a
  final e ("caches", "cache" -> "cach"), the same on both sides, so "test" never matches "latest".
- IDF over every graph given together (user and project), idf = log(1 + N / df), so scores of the
  two levels compare. A word in the id weighs 1.25, in the gist 1, in notes or touches 0.5, times
  its rarity idf / log(1 + N). A word held by more than 2 % of the nodes (and more than 20) counts nothing.
- The bar (silence beats filler): a node is recalled when its score is at least MIN_SCORE with a
  word in its id or gist (or at least STRONG_SCORE from the notes alone) and two words matched; or
  one word of its id that is rare in absolute terms (idf >= SINGLE_IDF); or the prompt names the
  node's id itself.
- Harness prompts (task notifications, system notifications and reminders, slash-command echoes,
  image placeholders alone, empty or slash-command prompts) are not the user's words: skipped.
- Files: a node is about a file when one of its touches, or an end of one of its edges, names it:
  the same relative path, or one path a suffix of the other on whole components. A part touch
  (`PATH#NAME`, `PATH:START-END`: contract section 12) names PATH. File recall shows the nodes
  whose touches name the file before those only linked to it, then as the caller orders them.
- Parts a prompt names (`named_hits`): the words of a part touch's NAME that the prompt holds, its
  last component's twice (`Environment.get_template`: "templat" 2, "environment" 1); no bar.
- The lines that show the hits, within a budget, are kg/agents/recall_lines.py's.
"""

import collections
import math
import os
import re

from ..core.model import node_key
from ..core.staleness import split_touch
from ..core.text import clip  # noqa: F401 (the hooks clip with recall.clip)
from .recall_paths import add_target, drop_target, file_of, norm_url, path_parts, relative_path  # noqa: F401 (recall.X)

STOPWORDS = frozenset("""
a about above after again against all almost also am an and any are aren as at be because been
before being below between both but by can cannot could couldn did didn do does doesn doing don
done down during each either else etc even ever every few for from further get gets getting got
had hadn has hasn have haven having he her here hers herself him himself his how however i if in
into is isn it its itself just let lets like ll me might more most much must mustn my myself need
needs no nor not now of off on once only or other our ours ourselves out over own per please
quite rather re really same shall she should shouldn since so some still such than that the
their theirs them themselves then there these they this those though through thus to too under
until up upon us ve very via was wasn way we were weren what when where whether which while who
whom whose why will with within without won would wouldn yes yet you your yours yourself
yourselves ok okay hi hello thanks thank sure
code codes file files function functions method thing things stuff something anything everything
make makes making use used uses using want wants try trying look looking see seem seems work
works working help fix fixes add adds added create change changes update updates new old good
bad better best right wrong way well first last next one two three many lot lots bit little
currently current actually basically simply maybe probably think know go going give take put
tell show find write run running call called line lines part latest
""".split())

ID_WEIGHT, HEAD_WEIGHT, REST_WEIGHT = 1.25, 1.0, 0.5
MIN_SCORE = 1.0
STRONG_SCORE = 1.5
SINGLE_IDF = 3.5
ID_BONUS = 2.0
COMMON_SHARE, COMMON_MIN = 0.02, 20

_RUN = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_IDENT = re.compile(r"[^\s`'\"()\[\]{}<>,;:!?]+")


def stem(w):
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


def words(text):
    """The words of a text, in order, repeats kept."""
    out = []
    for run in _RUN.findall(text):
        if run.islower() or run.isdigit() or not run.isascii():
            parts = (run.lower(),)
        else:
            parts = [p.lower() for p in _CAMEL.findall(run)]
        for p in parts:
            if len(p) < 2 or p in STOPWORDS or (p.isdigit() and len(p) < 3):
                continue
            out.append(stem(p))
    return out


# ---- harness prompts

_HARNESS_MARKS = ("<task-notification", "[system notification", "<command-name>", "<command-message>",
                  "<command-args>", "<local-command-stdout>", "<local-command-stderr>", "<system-reminder>",
                  "<bash-input>", "<bash-stdout>", "<bash-stderr>", "<user-prompt-submit-hook>",
                  "caveat: the messages below were generated by the user while running local commands")
_IMAGE = re.compile(r"\[(?:image|pasted text|file)\s*#?\d*[^\]\n]{0,200}\]", re.IGNORECASE)
PROMPT_SCAN = 20000  # characters of a prompt looked at: recall keeps its first 64 words anyway


def user_text(prompt):
    """The user's own words in a prompt, or None when the harness wrote it (or nothing is left)."""
    if not isinstance(prompt, str):
        return None
    text = prompt.strip()
    if not text or text.startswith("/"):
        return None
    head = text[:4000].lower()
    if any(m in head for m in _HARNESS_MARKS):
        return None
    text = _IMAGE.sub(" ", text[:PROMPT_SCAN]).strip()
    return text or None


# ---- the index of one graph

_MEMO = {}          # alphanumeric run -> its words: the vocabulary repeats, tokenising does not
_MEMO_MAX = 200000


def _run_words(run):
    got = _MEMO.get(run)
    if got is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        got = _MEMO[run] = tuple(words(run))
    return got


def _words_of(text):
    runs = set(_RUN.findall(text))
    got = list(map(_MEMO.get, runs))
    if None in got:
        got = [g if g is not None else _run_words(r) for g, r in zip(got, runs)]
    return set().union(*got)


def _node_weights(node):
    """word -> weight for one node: ID_WEIGHT from the id, HEAD_WEIGHT from the gist, else REST_WEIGHT."""
    texts = list(node.get("notes", ())) + list(node.get("touches", ()))
    weights = dict.fromkeys(_words_of("\n".join(texts)), REST_WEIGHT) if texts else {}
    weights.update(dict.fromkeys(_words_of(node.get("gist", "")), HEAD_WEIGHT))
    weights.update(dict.fromkeys(_words_of(node["id"]), ID_WEIGHT))
    return weights


class _Sig(collections.namedtuple("_Sig", "gist notes touches weights")):
    """The text one node was indexed from, and the word -> weight it gave."""
    __slots__ = ()

    def same_text(self, node):
        return (self.gist == node.get("gist", "") and self.notes == node.get("notes", ())
                and self.touches == node.get("touches", ()))


class Index:
    """Words and file names of one graph's nodes (every state). post: word -> {id: weight}
    (df = its length); files: last path component -> {(components, id)} from touches, efiles the
    same from edge ends; urls / eurls: normalised url -> ids; ids: lower-cased id -> id; sig:
    id -> _Sig (what the node was indexed from).
    Given `prev` (an older index of the same graph, which this one takes over), only nodes whose
    gist, notes or touches changed are tokenised again, so a rebuild after a write is cheap, and
    one after a read (the store's reset after recency or a promotion) cheaper still. The store
    never edits a node's text in place: a put makes a new dict."""

    __slots__ = ("n", "post", "files", "urls", "efiles", "eurls", "ids", "sig", "snap", "esnap", "parts", "named")

    def __init__(self, nodes, edges, prev=None):
        snap, esnap = dict(nodes), dict(edges)
        self.n = len(nodes)
        if prev is not None:  # taken over: the old index is left empty
            (self.post, self.sig, self.ids, self.files, self.urls, self.efiles, self.eurls, old, eold) = (
                prev.post, prev.sig, prev.ids, prev.files, prev.urls, prev.efiles, prev.eurls, prev.snap, prev.esnap)
            self.parts, prev.parts, self.named, prev.named = prev.parts, {}, prev.named, {}
            prev.post, prev.sig, prev.ids, prev.files, prev.urls, prev.snap = {}, {}, {}, {}, {}, {}
        else:
            self.post, self.sig, self.ids, self.files, self.urls, self.efiles, self.eurls = {}, {}, {}, {}, {}, {}, {}
            self.parts, self.named = {}, {}
            old, eold = None, None
        self.snap, self.esnap = snap, esnap
        # A put replaces the node's dict, a read changes it in place (never its text): when every
        # id still maps to the same dict (or an equal one), no text changed.
        nodes_same = old is not None and old == snap
        if not nodes_same:
            self._nodes(nodes, old or {})
        if not nodes_same or eold != esnap:
            self._edges(nodes, edges)

    def _nodes(self, nodes, old):
        for nid in [i for i in self.sig if i not in nodes]:
            self._drop(nid)
        get = self.sig.get
        for nid, node in nodes.items():
            if old.get(nid) is node:
                continue
            prev = get(nid)
            if prev is not None:
                if prev.same_text(node):
                    continue  # same text in a new dict (a put of other fields, a reload)
                self._drop(nid)
            self._add(nid, node)

    def _add(self, nid, node):
        post = self.post
        weights = _node_weights(node)
        for w, wt in weights.items():
            p = post.get(w)
            if p is None:
                post[w] = {nid: wt}
            else:
                p[nid] = wt
        touches = node.get("touches", ())
        self.sig[nid] = _Sig(node.get("gist", ""), node.get("notes", ()), touches, weights)
        self.ids.setdefault(nid.lower(), nid)
        for t in touches:
            add_target(self.files, self.urls, t, nid)
        for w, wt in _part_weights(touches).items():
            self.parts.setdefault(w, {})[nid] = wt
        named = _part_touches(touches)
        if named:
            self.named[nid] = named

    def _edges(self, nodes, edges):
        efiles, eurls = {}, {}
        for e in edges.values():
            frm, to = e.get("from"), e.get("to")
            if frm in nodes:
                if to not in nodes:
                    add_target(efiles, eurls, to, frm)
            elif to in nodes:
                add_target(efiles, eurls, frm, to)
        self.efiles, self.eurls = efiles, eurls

    def _drop(self, nid):
        s = self.sig.pop(nid)
        for w in s.weights:
            p = self.post.get(w)
            if p is not None:
                p.pop(nid, None)
                if not p:
                    del self.post[w]
        if self.ids.get(nid.lower()) == nid:
            del self.ids[nid.lower()]
        for t in s.touches:
            drop_target(self.files, self.urls, t, nid)
        self.named.pop(nid, None)
        for w in _part_weights(s.touches):
            p = self.parts.get(w)
            if p is not None and p.pop(nid, None) is not None and not p:
                del self.parts[w]

    def df(self, word):
        p = self.post.get(word)
        return len(p) if p else 0

    def file_entries(self, name):
        return list(self.files.get(name, ())) + list(self.efiles.get(name, ()))

    def url_ids(self, key):
        return set(self.urls.get(key, ())) | set(self.eurls.get(key, ()))


def _part_touches(touches):
    """((PATH, NAME), ...) of a node's part touches (`PATH#NAME`)."""
    out = []
    for t in touches:
        path, part = split_touch(t)
        if part is not None and part[0] == "name":
            out.append((path, part[1]))
    return tuple(out)


def _part_weights(touches):
    """word -> weight of the parts a node's touches name (`PATH#NAME`): NAME's last component 2."""
    out = {}
    for t in touches:
        _, part = split_touch(t)  # contract section 12's grammar, in one place
        if part is not None and part[0] == "name":
            head, _, last = part[1].rpartition(".")
            for wt, text in ((1, head), (2, last)):
                for w in _words_of(text):
                    out[w] = max(out.get(w, 0), wt)
    return out


def prompt_words(text):
    """The set of words of a prompt that matching looks at."""
    return _words_of(text[:PROMPT_SCAN])


def part_touches(indexes, level="project"):
    """[(level, {id: ((PATH, NAME), ...)})] of one level's nodes with part touches: a copy, taken
    under the store's lock, for part_files outside it."""
    return [(lv, dict(ix.named)) for lv, ix in indexes if lv == level]


def part_files(touches, root):
    """{absolute path: [(node key, NAME)]} of part touches (`PATH#NAME`: part_touches), PATH taken
    from the project root: what kg/agents/part_code.py reads to score the parts' code."""
    out = {}
    if not isinstance(root, str) or not os.path.isabs(root):
        return out
    top = os.path.join(os.path.normpath(root), "")
    full_of = {}  # touch path -> absolute path inside the project, or None: many nodes share a file
    for lv, named_of in touches:
        for nid, named in named_of.items():
            for path, name in named:
                full = full_of.get(path, False)
                if full is False:
                    full = os.path.normpath(os.path.join(root, path))
                    full = full_of[path] = full if full.startswith(top) else None  # never outside the project
                if full is not None:
                    out.setdefault(full, []).append((node_key(lv, nid), name))
    return out


def named_hits(indexes, text, limit=40):
    """The nodes about parts the text names, most named first: [Hit] (no bar: an order's hint)."""
    qwords = prompt_words(text)
    out = []
    for level, ix in indexes:
        score = collections.Counter()
        for w in qwords:
            for nid, wt in ix.parts.get(w, {}).items():
                score[nid] += wt
        out.extend(Hit(float(s), level, nid, 0) for nid, s in score.items())
    out.sort(key=lambda h: (-h.score, h.level != "project", h.id))
    return out[:limit]


# ---- queries over several indexes (user first)

class Hit:
    __slots__ = ("score", "level", "id", "matched")

    def __init__(self, score, level, nid, matched):
        self.score, self.level, self.id, self.matched = score, level, nid, matched

    def __repr__(self):
        return "Hit(%.3f, %s, %s)" % (self.score, self.level, self.id)


class _Word(collections.namedtuple("_Word", "word rarity rare")):
    """A prompt word that counts: its rarity (idf / idf_max) and whether it is rare alone."""
    __slots__ = ()


class _Tally:
    """What the nodes of one index gathered from a prompt: score and words matched per node, the
    nodes that matched a word of their id or gist (head), and those that clear the bar alone
    (strong: a rare word of their id, or their id named)."""
    __slots__ = ("score", "matched", "head", "strong")

    def __init__(self):
        self.score, self.matched, self.head, self.strong = {}, {}, set(), set()

    def add_words(self, ix, qwords):
        score, matched, head, strong, post = self.score, self.matched, self.head, self.strong, ix.post
        for word, rarity, rare in qwords:
            for nid, wt in post.get(word, {}).items():
                score[nid] = score.get(nid, 0.0) + rarity * wt
                matched[nid] = matched.get(nid, 0) + 1
                if wt >= HEAD_WEIGHT:
                    head.add(nid)
                    if rare and wt == ID_WEIGHT:
                        strong.add(nid)

    def add_names(self, ix, named):
        """A node whose id the prompt names (3 characters or more) clears the bar."""
        for name in named:
            nid = ix.ids.get(name)
            if nid is not None and len(name) >= 3:
                self.score[nid] = self.score.get(nid, 0.0) + ID_BONUS
                self.matched.setdefault(nid, 0)
                self.strong.add(nid)

    def clearing(self):
        """(id, score, words matched) of the nodes over the bar, in the order they first matched."""
        matches, head, strong = self.matched, self.head, self.strong
        return [(nid, score, matches[nid]) for nid, score in self.score.items()
                if nid in strong or (matches[nid] >= 2 and score >= MIN_SCORE
                                     and (nid in head or score >= STRONG_SCORE))]


def prompt_hits(indexes, text, exclude=(), limit=5, near=False):
    """Nodes that clear the bar for a prompt, best first: [Hit]. indexes: [(level, Index)];
    exclude: "level:id" keys already shown. Words held by more than COMMON_SHARE of the nodes
    (and more than COMMON_MIN) are too weak to count, and skipping them keeps a prompt cheap.
    near: every node a word of whose id or gist matched, below the bar too (for file recall)."""
    total = sum(ix.n for _, ix in indexes)
    if not total:
        return []
    qwords = _counted_words(indexes, text, total)
    named = {m.lower().strip(".") for m in _IDENT.findall(text)}
    out = []
    for level, ix in indexes:
        tally = _Tally()
        tally.add_words(ix, qwords)
        tally.add_names(ix, named)
        got = ([(i, s, tally.matched[i]) for i, s in tally.score.items() if i in tally.head or i in tally.strong]
               if near else tally.clearing())
        out.extend(Hit(round(score, 4), level, nid, matched) for nid, score, matched in got
                   if node_key(level, nid) not in exclude)
    out.sort(key=lambda h: (-h.score, h.level != "project", h.id))
    return out[:limit]


def _counted_words(indexes, text, total):
    """The prompt's first 64 distinct words that count, with their rarity over every index."""
    idf_max = math.log(1 + total)
    common = max(COMMON_MIN, COMMON_SHARE * total)
    out = []
    for w in list(dict.fromkeys(words(text)))[:64]:
        df = sum(ix.df(w) for _, ix in indexes)
        if not df or df > common:
            continue
        idf = math.log(1 + total / df)
        out.append(_Word(w, idf / idf_max, idf >= SINGLE_IDF))
    return out


def file_hits(indexes, path, root=None, exclude=(), limit=3, key=None):
    """Nodes whose touches or edge ends name this file: [Hit], those whose touches name it first,
    then by key(hit) when given (else the more specific path first), the project before the user
    level, then id. path: absolute or relative; root: the project root (to make an absolute path
    relative)."""
    if not isinstance(path, str) or not path.strip():
        return []
    rel = relative_path(path.strip(), root)
    parts = path_parts(rel)
    if not parts:
        return []
    out, seen = [], set()
    for level, ix in indexes:
        own = ix.files.get(parts[-1], ())
        for tparts, nid in ix.file_entries(parts[-1]):
            if not _suffix_match(parts, tparts, root):
                continue
            k = node_key(level, nid)
            if k in exclude or k in seen:
                continue
            seen.add(k)
            # matched: 1 when a touch names the file, 0 when only an edge end does
            out.append(Hit(len(tparts), level, nid, 1 if (tparts, nid) in own else 0))
    return order_file_hits(out, key)[:limit]


def order_file_hits(hits, key=None):
    """File recall's order, in place: those whose touches name the file first, then by key(hit)
    when given (else the more specific path first), the project before the user level, then id."""
    hits.sort(key=lambda h: (-h.matched, key(h) if key else -h.score, h.level != "project", h.id))
    return hits


def _suffix_match(parts, tparts, root):
    """Same path, or one a suffix of the other on whole components; a touch that is an absolute
    path must also lie under the root when a root is known."""
    n = min(len(parts), len(tparts))
    if parts[-n:] != tparts[-n:]:
        return False
    if n == len(tparts) or not root:
        return True
    rparts = path_parts(root)
    return tparts[:len(rparts)] == rparts  # an absolute touch inside this project


def url_hits(indexes, url, exclude=(), limit=3):
    key = norm_url(url) if isinstance(url, str) else ""
    if not key:
        return []
    out = []
    for level, ix in indexes:
        for nid in sorted(ix.url_ids(key)):
            k = node_key(level, nid)
            if k not in exclude:
                out.append(Hit(1.0, level, nid, 1))
    return out[:limit]

