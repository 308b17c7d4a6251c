"""Stale knowledge in the real-history world (bench/memory_history.py): which knowledge the model
was shown while it was wrong, and whether it carried a stale mark (contract section 12).

Rules owned here (bench/README.md says why):
- The truth is the bench's, not kgd's: knowledge about a part is wrong while the part's own text in
  the file on disk (found with bench/memory_history_git.parts_of, decorators included, trailing
  spaces aside) differs from what it was when the node was last put, or the part is no longer
  defined there. Judged from the files, not from the commits' changed parts: the replay follows git's
  topological order, so a file can go back to an older state when the next commit is on another
  branch (a part a commit removed comes back). A commit's files are on disk from the end of its
  session. A file that does not parse judges nothing.
- Knowledge is shown when a text the model receives has a node's line (the preload's `- ID...:`,
  recall's `- [level] ID...:`, search's `- ID (...)`, a read's `## ID [...]` block; the reference's
  `  ID: gist` and `\u25b8 ID (...)` blocks); it is marked when that line (or, for a read, its block)
  says `stale:`. An id alone (the crumbs, an edge) shows no knowledge.
- kgd's marks are computed by its own pass (`store.staleness.refresh()`), run before each session:
  the daemon runs it on its maintenance beat, seconds apart, and commits are minutes apart. With
  staleness off (policy `kgd-hooks-nostale`) the pass never runs: the store has no switch for it, so
  the bench sets the watcher's `enabled` to False and never calls it.
"""

import hashlib
import re

import memory_history_git
from memory_eval import KgdHooks

_LINE = re.compile(r"^(- \[\w+\] |- |## |\u25b8 |  )([^\s:\[\]()]+)")
_SHOWN = ("preload", "recall", "file", "read", "search", "stop")


class KgdHooksNoStale(KgdHooks):
    """kgd's hooks with the stale marks off: the watcher's pass never runs."""

    name = "kgd-hooks-nostale"
    stale_marks = False

    def __init__(self, *a, **kw):
        KgdHooks.__init__(self, *a, **kw)
        self.store.staleness.enabled = False


class _ParseCache:
    """kg/core/staleness.py's `ast`, with `parse` remembering the last few sources: its part finder
    parses the whole file once per part touch (a pass over 300 nodes about click's core.py parsed
    it 300 times, 0.3 s each on this machine), so a 1,000-commit replay took hours. The trees are
    only read, so the marks and states are the same as without it; only the bench's wall time
    changes."""

    KEEP = 16

    def __init__(self, real):
        self._real, self._trees = real, {}

    def __getattr__(self, name):
        return getattr(self._real, name)

    def parse(self, source, *a, **kw):
        if a or kw or not isinstance(source, str):
            return self._real.parse(source, *a, **kw)
        tree = self._trees.get(source)
        if tree is None:
            tree = self._real.parse(source)  # a SyntaxError is raised each time, as before
            if len(self._trees) >= self.KEEP:
                self._trees.pop(next(iter(self._trees)))
            self._trees[source] = tree
        return tree


def cache_parses():
    """Install the parse cache in kg/core/staleness.py (idempotent)."""
    from kg.core import staleness
    if not isinstance(staleness.ast, _ParseCache):
        staleness.ast = _ParseCache(staleness.ast)


def refresh_marks(mem):
    """The daemon's pass before a session (kgd with marks on only): its wall seconds, else None."""
    if getattr(mem, "stale_marks", False):
        mem.store.staleness.refresh()
        return (mem.store.staleness.last or {}).get("seconds")
    return None


def shown(text, known):
    """[(node id, marked)] of the nodes whose knowledge a text shows (ids in `known`)."""
    out, block = [], None
    for line in text.split("\n"):
        m = _LINE.match(line)
        nid = m.group(2) if m else None
        if m and m.group(1) in ("## ", "\u25b8 "):  # a node read in full (kgd's, the reference's): a block
            block = None
            if nid in known:
                block = len(out)
                out.append([nid, False])
            continue
        if nid in known and (line[m.end():m.end() + 1] == ":" if m.group(1) == "  " else ":" in line):
            block = None
            out.append([nid, "stale:" in line])
            continue
        if block is not None and line.startswith("stale:"):
            out[block][1] = True
    return [tuple(x) for x in out]


class Truth:
    """What the files on disk say of each part now: its own text's hash, None when it is not defined
    in its file, missing (not judged) when the file does not parse or is not there."""

    NOT_JUDGED = object()

    def __init__(self):
        self.text = {}    # path -> the file's text on disk
        self.parts = {}   # path -> {qualname: hash of its lines}, or None (does not parse); lazily

    def land(self, path, text):
        self.text[path] = text
        self.parts.pop(path, None)

    def state(self, path, qual):
        if path not in self.parts:
            self.parts[path] = _part_hashes(self.text[path]) if path in self.text else None
        got = self.parts[path]
        if got is None:
            return self.NOT_JUDGED
        return got.get(qual)

    def wrong(self, recorded, now):
        """Whether knowledge written when its part was `recorded` is wrong with the part `now`."""
        if recorded is self.NOT_JUDGED or now is self.NOT_JUDGED:
            return False
        return recorded != now


def _part_hashes(text):
    """{qualname: hash} of a source's parts (bench/memory_history_git.parts_of: decorators included),
    each part's lines with trailing spaces aside, every definition of the name (overloads and the
    implementation are one part); None when it does not parse."""
    found = memory_history_git.parts_of(text)
    if not found and not memory_history_git.parses(text):
        return None
    lines, texts = text.split("\n"), {}
    for q, first, last in found:  # a name defined more than once (typing.overload stubs, then the body): all
        texts.setdefault(q, []).extend(x.rstrip() for x in lines[first - 1:last])
    return {q: hashlib.sha1("\n".join(x).encode()).hexdigest() for q, x in texts.items()}


class Tally:
    """Counts, per run, of knowledge shown while wrong (marked or not) and marked while right."""

    KEYS = ("shown", "stale_unmarked", "stale_marked", "marked_current", "stale_sessions")

    def __init__(self, truth, facts):
        self.truth, self.facts = truth, facts
        self.n = dict.fromkeys(self.KEYS, 0)
        self.recorded = {}  # node id -> its part's state when it was last put
        self._session_hit = False
        self.pass_seconds = []  # wall time of kgd's stale-marks passes (printed, not in the JSON)

    def put(self, nid, fid):
        f = self.facts[fid]
        self.recorded[nid] = self.truth.state(f.path, f.qual)

    def begin(self):
        if self._session_hit:
            self.n["stale_sessions"] += 1
        self._session_hit = False

    def see(self, texts, run):
        """Count the nodes shown in `texts` [(source, text)] against the files on disk now."""
        for src, text in texts:
            if src not in _SHOWN or not text:
                continue
            for nid, marked in shown(text, run.fact_of):
                f = self.facts[run.fact_of[nid]]
                wrong = nid in self.recorded and self.truth.wrong(self.recorded[nid],
                                                                   self.truth.state(f.path, f.qual))
                self.n["shown"] += 1
                if wrong:
                    self.n["stale_marked" if marked else "stale_unmarked"] += 1
                    self._session_hit = True
                elif marked:
                    self.n["marked_current"] += 1

    def summary(self):
        self.begin()
        return dict(self.n)


COLUMNS = (("policy", "policy", "%-17s"), ("seed", "seed", "%4s"), ("needs%", "in_context", "%6.1f"),
           ("shown", "shown", "%7d"), ("stale unmarked", "stale_unmarked", "%14d"),
           ("stale marked", "stale_marked", "%12d"), ("marked, current", "marked_current", "%15d"),
           ("sessions w/ stale", "stale_sessions", "%17d"), ("ch/med", "chars_per_session_median", "%6d"),
           ("ch/p90", "chars_per_session_p90", "%6d"))


def table(runs):
    """The stale columns of the history world's runs (knowledge shown, counted per line)."""
    rows = [r for r in runs if "stale" in r]
    if not rows:
        return ""
    out = ["stale knowledge shown (the world's truth; kgd's marks):",
           " ".join(_pad(name, f) for name, _, f in COLUMNS)]
    for r in rows:
        vals = dict(r, **r["stale"])
        out.append(" ".join(f % vals.get(k, 0) for _, k, f in COLUMNS))
    return "\n".join(out)


def _pad(name, fmt):
    width = re.match(r"%-?(\d+)", fmt).group(1)
    return (("%-" if fmt.startswith("%-") else "%") + width + "s") % name
