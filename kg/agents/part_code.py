"""Which parts' code holds a prompt's words, or an edit's: the hint that puts first, in file recall,
the knowledge about the functions a task is about to edit (contract section 8's file recall, section
12's part touches `PATH#NAME`).

Rules owned here:
- A part's words are recall's words (kg/agents/recall.py `words`: identifiers split, stemmed,
  stopwords dropped) of its lines as kg/core/staleness.py `part_spans` finds them (a class holds its
  methods' lines too).
- A part's score for a prompt: the sum, over the prompt's words its code holds, of log(1 + n / df),
  where n counts the file's parts and df those holding the word. A word every part of the file holds
  says nothing about which part the task is in (it counts 0), one that few parts hold says much. Measured on
  real history (bench/README.md, "The prompt's words in the parts' code"), this predicts the parts
  a commit edits better than the words of their names alone.
- After an Edit, parts are scored the same way by the words the edit replaced and wrote: code that
  shares the edit's identifiers is where the task goes next, in that file and others. The scores
  lead file recall until the next Edit or prompt; the edit's words are kept nowhere (an edit may
  hold anything).
- Files are read outside the store's lock, by the prompt and edit hooks, and kept by path with their size and
  modification time (CACHE_FILES): a prompt re-reads only files that changed. A prompt reads at most
  SCAN_BYTES of files not yet kept (the ones most knowledge is about first) and no file over
  FILE_MAX bytes, so its cost is bounded however big the project. Only the scores leave this module
  (as node keys in the session): never the prompt's or the edit's words.
"""

import collections
import logging
import math
import os
import threading

from ..core import staleness
from . import recall

log = logging.getLogger(__name__)

FILE_MAX = 1024 * 1024        # bytes: a bigger file is not read for this hint
SCAN_BYTES = 8 * 1024 * 1024  # bytes of files not yet kept that one prompt may read
CACHE_FILES = 512             # files whose parts' words are kept
SCORES_MAX = 200              # node keys kept per session (the best scores)
EDITS_MAX = 20                # edits of one MultiEdit looked at
EDIT_CHARS = 2000             # characters of each of an edit's strings looked at


def part_words(text, path):
    """{NAME: frozenset of recall words} of every part of a source text."""
    lines = text.split("\n")
    out = {}
    for name, (first, last) in staleness.part_spans(text, path).items():
        out[name] = frozenset(recall.words("\n".join(lines[first:last + 1])))
    return out


def inverted(parts):
    """(n, {word: (NAME, ...)}) of a file's parts (NAME -> words): what scoring looks words up in."""
    inv = collections.defaultdict(list)
    for name, ws in parts.items():
        for w in ws:
            inv[w].append(name)
    return len(parts), {w: tuple(names) for w, names in inv.items()}


def scores(parts, qwords, inv=None):
    """{NAME: score} of the parts (NAME -> words) whose code holds some of `qwords` (module doc);
    inv: inverted(parts), when already made."""
    n, inv = inv if inv is not None else inverted(parts)
    out = {}
    for w in qwords:
        names = inv.get(w)
        if names and len(names) < n:  # a word every part holds tells none apart
            v = math.log(1.0 + n / len(names))
            for name in names:
                out[name] = out.get(name, 0.0) + v
    return out


class Cache:
    """Path -> ((size, mtime_ns), inverted part words), the CACHE_FILES least recently used dropped."""

    def __init__(self, max_files=CACHE_FILES):
        self.max_files = max_files
        self.files = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, path, budget):
        """(inverted(part words) of the file or None, bytes read): None for a file gone, unreadable,
        too big, or not kept and bigger than what is left of `budget`."""
        try:
            st = os.stat(path)
        except OSError:
            return None, 0
        key = (st.st_size, st.st_mtime_ns)
        with self.lock:
            got = self.files.get(path)
            if got is not None and got[0] == key:
                self.files.move_to_end(path)
                return got[1], 0
        if st.st_size > FILE_MAX or st.st_size > budget or not os.path.isfile(path):
            return None, 0
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(FILE_MAX + 1)
        except OSError:
            return None, 0
        words = inverted(part_words(text, path))
        with self.lock:
            self.files[path] = (key, words)
            self.files.move_to_end(path)
            while len(self.files) > self.max_files:
                self.files.popitem(last=False)
        return words, st.st_size


CACHE = Cache()


def edit_text(edits):
    """The text Edit / MultiEdit inputs (old_string, new_string) replaced and wrote: EDITS_MAX edits,
    EDIT_CHARS of each string, so a huge old_string cannot hide the new_string after it."""
    return "\n".join(e.get(k)[:EDIT_CHARS] for e in edits[:EDITS_MAX] for k in ("old_string", "new_string")
                     if isinstance(e.get(k), str))


def best(score):
    """The SCORES_MAX best (node key, score) pairs, best first (ties by key)."""
    return sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:SCORES_MAX]


def _most_known_first(wanted):
    """The paths of `wanted`, those most knowledge is about first: what a bounded read takes first."""
    return sorted(wanted, key=lambda p: (-len(wanted[p]), p))


def warm(wanted, cache=CACHE):
    """Read the files of `wanted` ({absolute path: [...]}) into the cache, most knowledge first,
    within SCAN_BYTES: run on a thread at a session's start, so that its first prompt finds them."""
    budget = SCAN_BYTES
    try:
        for path in _most_known_first(wanted):
            budget -= cache.get(path, budget)[1]
    except Exception:  # a thread of its own: say what went wrong, never die loudly on stderr
        log.exception("reading the files of part touches failed")


def node_scores(wanted, text, cache=CACHE):
    """{node key: score} for `wanted` ({absolute path: [(node key, NAME)]}) and a prompt's text: a
    node about several parts takes its best. Reads files (outside the store's lock)."""
    qwords = recall.prompt_words(text)
    if not qwords or not wanted:
        return {}
    out, budget = {}, SCAN_BYTES
    for path in _most_known_first(wanted):
        inv, cost = cache.get(path, budget)
        budget -= cost
        if not inv or not inv[0]:
            continue
        got = scores(None, qwords, inv)
        for key, name in wanted[path]:
            s = got.get(name)
            if s is not None and s > out.get(key, 0.0):
                out[key] = s
    return out
