"""Which kinds of the secrets table can match a text at all (contract section 10). Pure.

Why it exists: every put and every graph at load runs the credential check, and most texts hold
none of the literals its regexes start with. Running twenty-odd regexes over such a text costs
more than the rest of a load; a single pass of one alternation of those literals answers "none
can match" for most texts, and names the few kinds to run for the others.

Rules this file owns:
- A kind's triggers are the literal strings one of which every match of its regex starts with,
  read from the parsed pattern (zero-width assertions skipped, small alternations and character
  sets expanded), lower-cased. A kind whose triggers cannot be read always runs.
- A text is tested on its ASCII-lower-cased copy (`lowered`: same offsets), so
  one test serves the kinds matched on the text and those matched on its lower-cased copy: a
  literal found in either is found, lower-cased, in the copy.
- A case-insensitive pattern is never pre-filtered (Unicode case folding matches characters whose
  lower case is not ASCII). Skipping a kind with no trigger in the text never changes the answer:
  its regex has no candidate there, and the bounds on candidates count only candidates.
- Two steps, each one pass: the first finds whether any trigger is there (a trigger starting with
  a space is found from its second character: the pass never stops at every space); the second,
  from the first trigger on, finds each place a trigger starts and the longest one there, whose
  prefixes are the triggers starting there, and runs exactly the kinds of every trigger the text
  holds. A text longer than MAX_NAMED holding a trigger runs every kind.
"""

import re
import string

try:
    from re import _parser as sre_parse  # Python 3.11+
except ImportError:  # Python 3.9, 3.10
    import sre_parse

_ZERO_WIDTH = frozenset(("ASSERT", "ASSERT_NOT", "AT"))
_MAX_PREFIXES = 32
_NO_CASE = re.IGNORECASE | re.LOCALE
# A text holding a trigger and longer than this runs every kind: the second step tests each
# trigger on its own, which on a long text holding many triggers costs more than it spares.
MAX_NAMED = 1024
# Longer texts (no node: under 8,000 characters in all) run every kind, as without the pre-filter:
# on a megabyte of hostile text even the first step would add to the bound it is held to.
MAX_FILTERED = 1 << 16


def _prefixes(items):
    """(literal strings one of which every match of the parsed `items` starts with, whether they
    cover all of `items`); [""] when nothing is known."""
    outs = [""]
    for op, av in items:
        name = str(op)
        if name in _ZERO_WIDTH:
            continue  # consumes nothing: what follows starts where the match does
        if name == "LITERAL":
            alts, whole = [chr(av)], True
        elif name == "IN" and all(str(o) == "LITERAL" for o, _ in av):
            alts, whole = [chr(c) for _, c in av], True
        elif name == "SUBPATTERN" and not (av[1] & _NO_CASE):
            alts, whole = _prefixes(av[-1])
        elif name == "BRANCH":
            parts = [_prefixes(alt) for alt in av[1]]
            alts, whole = [a for p, _ in parts for a in p], all(w for _, w in parts)
        else:
            return outs, False
        outs = [o + a for o in outs for a in alts]
        if len(outs) > _MAX_PREFIXES:
            return [""], False
        if not whole:
            return outs, False
    return outs, True


def triggers(regex):
    """The lower-cased literals one of which a text's lower-cased copy holds wherever `regex`
    matches the text or that copy; None when none can be read (at least two characters each)."""
    if regex.flags & _NO_CASE:
        return None
    outs, _ = _prefixes(sre_parse.parse(regex.pattern, regex.flags))
    if any(len(o) < 2 for o in outs):
        return None
    return frozenset(o.lower() for o in outs)


def _trie(words):
    """A regex matching where any of `words` starts, branching on one character at a time (the
    engine tries a handful of branches per position, not every word); a word that holds a
    shorter one is found by the shorter one."""
    first = {}
    for w in words:
        first.setdefault(w[0], []).append(w[1:])
    parts = []
    for ch, rests in sorted(first.items()):
        if "" in rests:
            parts.append(re.escape(ch))
        elif len(rests) == 1:
            parts.append(re.escape(ch) + re.escape(rests[0]))
        else:
            parts.append("%s(?:%s)" % (re.escape(ch), _trie(rests)))
    return "|".join(parts)


# The commonest character of text (a fifth of prose, more in a node of short words): the first step
# never stops at it. A trigger starting with it (" -p") is found from its second character, which
# looks back for it (-(?<= -)p).
BLANK = " "


def _first_step(words):
    """A regex matching where any of `words` is: the trie of those that do not start with BLANK,
    and one branch for each that does, anchored on its second character."""
    plain = [w for w in words if w[0] != BLANK]
    blank = ["%s(?<=%s)%s" % (re.escape(w[1]), re.escape(w[:2]), re.escape(w[2:])) for w in words if w[0] == BLANK]
    return re.compile("|".join(([_trie(plain)] if plain else []) + blank))


def _longest(words):
    """A regex matching the longest of `words` that starts here (an optional longer branch is
    tried first), one character at a time like _trie."""
    first = {}
    for w in words:
        first.setdefault(w[0], []).append(w[1:])
    parts = []
    for ch, rests in sorted(first.items()):
        longer = [r for r in rests if r]
        if not longer:
            parts.append(re.escape(ch))
        else:
            parts.append("%s(?:%s)%s" % (re.escape(ch), _longest(longer), "?" if "" in rests else ""))
    return "|".join(parts)


def _each_start(words):
    """A regex that consumes one character where any of `words` starts and captures the rest of the
    longest one starting there (one group per first character): every start is found, none
    hidden inside another word's match (ab and bc in "abc")."""
    first = {}
    for w in words:
        first.setdefault(w[0], []).append(w[1:])
    return re.compile("|".join("%s(?=(%s))" % (re.escape(ch), _longest(rests)) for ch, rests in sorted(first.items())))


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def lowered(text):
    """The text with ASCII letters lower-cased, same length (offsets stay valid): the copy the
    secrets table matches names on, and the one triggers are tested on."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


class Prefilter:
    """kinds_to_run(low): the kinds (objects with a compiled `regex`), in table order, whose regex
    may match the text whose lower-cased copy is `low`. Built on first use (parsing the table's
    patterns is not on the way to an empty daemon's start line)."""

    def __init__(self, kinds):
        self.kinds = tuple(kinds)
        self._built = None

    def _build(self):
        of_kind = tuple(triggers(k.regex) for k in self.kinds)
        always = frozenset(i for i, t in enumerate(of_kind) if t is None)
        every = sorted(frozenset().union(*(t for t in of_kind if t is not None)))
        by_trigger = {t: frozenset(i for i, ts in enumerate(of_kind) if ts is not None and t in ts) for t in every}
        plain = [t for t in every if t[0] != BLANK]
        # The longest trigger starting somewhere names every trigger starting there: its prefixes.
        by_longest = {t: frozenset().union(*(by_trigger[p] for p in plain if t.startswith(p))) for t in plain}
        blank = tuple((t, by_trigger[t]) for t in every if t[0] == BLANK)
        none_found = tuple(self.kinds[i] for i in sorted(always))
        found = _first_step(every) if every else None
        each = _each_start(plain) if plain else None
        self._built = (of_kind, always, every, by_longest, none_found, found, each, blank)
        return self._built

    @property
    def of_kind(self):
        return (self._built or self._build())[0]

    @property
    def all(self):
        return (self._built or self._build())[2]

    def kinds_to_run(self, low):
        _, always, _, by_longest, none_found, found, each, blank = self._built or self._build()
        if len(low) > MAX_FILTERED:
            return self.kinds
        first = None if found is None else found.search(low)  # one pass: most texts hold no trigger
        if first is None:
            return none_found
        if len(low) > MAX_NAMED:
            return self.kinds
        # The second step, from the first trigger on: each place a trigger starts, and the longest one
        # there (a node holds a few; testing each of the table's triggers on its own cost more).
        run = set(always)
        for m in each.finditer(low, first.start()) if each is not None else ():  # no trigger starts before
            run.update(by_longest[m.group(0) + m.group(m.lastindex)])
        for t, of in blank:  # " -p" and the like: a handful, each looked for on its own
            if t in low:
                run.update(of)
        return [self.kinds[i] for i in sorted(run)]
