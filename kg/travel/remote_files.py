"""The personal remote's files (ROOT/sync/, contract section 9) as kgd last wrote or read them, so
that a pass costs what changed, not the size of the files (kg/travel/remote_bridge.py decides what goes in
them; this module reads and writes them). SyncFiles holds each file's stat and records; FileLines its
lines as last rendered, so that writing a big file again after a few records changed costs the
changed lines and one join, not a serialisation per record (the personal remote rewrites a
10,000-node file for five changed nodes).

Rules owned here:
- A file is parsed again only when its stat moved since kgd last wrote or read it, and then only
  its lines kgd has not seen: kg_format.Reader / personal.Reader, taught the lines kgd last rendered.
  Problems in a file (bad lines, markers) are handed to `report` and the rest is read.
- A file is rendered with only its changed lines serialised again (FileLines) and written
  atomically, 0600, with no .prev copy.
- `FileLines.render(records, changed, now)` gives exactly the bytes of kg_format.render(records, now)
  (every record's canonical line sorted by key, LF, a final newline; tombstones past
  kg_format.TOMBSTONE_KEEP_S left out), for content and personal files alike. `changed` names the keys
  that differ from the records of the previous render; it is trusted only when `records` was built
  from that render's records (`follows`), else every line is checked (a record object seen before
  keeps its line).
- A file is "unclean" when its bytes are not the clean rendering of what it holds (a merge left
  duplicates or conflict markers): the pass writes it back.
"""

import os

from ..core import kg_format, personal
from ..disk.files import atomic_write, ensure_dir


class SyncFiles:
    def __init__(self, report):
        self.report = report  # report(rel, problems): once per problem, by the bridge
        self.files = {}  # path -> (stat, parsed records, their stamps) as kgd last wrote or read it
        self.lines = {}  # path -> FileLines: the file's lines as last rendered
        self.readers = {}  # path -> kg_format.Reader / personal.Reader: lines parsed before are not parsed again

    def known(self, path):
        """(stat, records, stamps) as kgd last wrote or read the file, or None."""
        return self.files.get(path)

    def read(self, path, rel, kind):
        """(records, unclean, reread): the file's records (kind "node", "edge" or "personal"),
        whether its bytes are not the clean rendering, and whether it was read again because it
        changed since kgd last wrote or read it (a file still missing is no news)."""
        st = stat(path)
        hit = self.files.get(path)
        if hit is not None and st is not None and hit[0] == st:
            return hit[1], False, False
        data = _read(path)
        reader = self.readers.get(path)
        if reader is None:
            reader = self.readers[path] = personal.Reader() if kind == "personal" else kg_format.Reader(kind)
        self._teach(reader, path, kind, hit)
        stamps = None
        if kind == "personal":
            parsed, problems = reader.parse(data)
        else:
            parsed, problems, known = reader.parse(data)  # only lines not seen before are parsed
            stamps = {k: known.get(k) or kg_format.stamp(r) for k, r in parsed.items() if not kg_format.is_tombstone(r)}
        self.report(rel, problems)
        self.files[path] = (st, parsed, stamps)
        # the records of lines seen before are the objects last rendered: their lines are reused
        clean = self.render(path, parsed, None, None, None)
        return parsed, data is not None and data != clean, hit is None or hit[0] != st

    def stamps(self, path, records):
        """The stamps of a file's live records as last read or written."""
        hit = self.files.get(path)
        if hit is not None and hit[2] is not None:
            return hit[2]
        return {k: kg_format.stamp(r) for k, r in records.items() if not kg_format.is_tombstone(r)}

    def render(self, path, records, changed, now, previous):
        """The file's bytes (kg_format.render's), only the changed lines serialised again."""
        lines = self.lines.get(path)
        if lines is None:
            lines = self.lines[path] = FileLines()
        return lines.render(records, changed, now, previous)

    def write(self, path, data, records, stamps):
        ensure_dir(os.path.dirname(path))
        atomic_write(path, data, keep_prev=False)
        self.files[path] = (stat(path), records, stamps)

    def forget(self, folder=None):
        """Drop what is known of the files in `folder` (None: of every file)."""
        for cache in (self.files, self.lines, self.readers):
            for path in [p for p in cache if folder is None or os.path.dirname(p) == folder]:
                del cache[path]

    def _teach(self, reader, path, kind, hit):
        """The lines kgd last rendered for this file, with their records, so that reading it again
        after a pull parses only the lines the pull changed."""
        lines = self.lines.get(path)
        if lines is None or hit is None or not lines.follows(hit[1]):
            return
        if kind == "personal":
            reader.learn((t.encode("utf-8"), lines.recs[k]) for k, t in lines.text.items())
            return
        stamps = hit[2] or {}
        reader.learn((t.encode("utf-8"), lines.recs[k], stamps.get(k) or kg_format.stamp(lines.recs[k]))
                     for k, t in lines.text.items())


class FileLines:
    """One file's lines as kgd last rendered them: a few changed records cost their lines and one join."""

    def __init__(self):
        self.rendered = None  # the records dict of the last render (its identity says what `changed` is about)
        self.recs = {}  # key -> the record object last rendered
        self.text = {}  # key -> its canonical line
        self.order = []  # keys, sorted
        self.tombs = set()  # keys whose record is a tombstone

    def follows(self, previous):
        """True when `previous` is the records dict of the last render."""
        return previous is not None and previous is self.rendered

    def render(self, records, changed=None, now=None, previous=None):
        """The file's bytes. `changed` (keys added, changed or removed since the render of
        `previous`) is used only when self.follows(previous)."""
        if changed is None or not self.follows(previous):
            self._all(records)
        else:
            self._some(records, changed)
        self.rendered = records
        keep_after = None if now is None else now - kg_format.TOMBSTONE_KEEP_S
        expired = () if keep_after is None else {k for k in self.tombs if records[k]["deleted"] < keep_after}
        if expired:
            lines = [self.text[k] for k in self.order if k not in expired]
        else:
            lines = list(map(self.text.__getitem__, self.order))
        return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""

    def _all(self, records):
        recs, text = {}, {}
        for k, rec in records.items():
            recs[k] = rec
            text[k] = self.text[k] if self.recs.get(k) is rec else kg_format.canonical(rec)
        self.recs, self.text = recs, text
        self.order = sorted(records)
        self.tombs = {k for k, rec in records.items() if kg_format.is_tombstone(rec)}

    def _some(self, records, changed):
        reorder = False
        for k in changed:
            rec = records.get(k)
            if rec is None:
                if self.text.pop(k, None) is not None:
                    reorder = True
                self.recs.pop(k, None)
                self.tombs.discard(k)
                continue
            if k not in self.text:
                reorder = True
            self.recs[k] = rec
            self.text[k] = kg_format.canonical(rec)
            if kg_format.is_tombstone(rec):
                self.tombs.add(k)
            else:
                self.tombs.discard(k)
        if reorder:
            self.order = sorted(self.text)


def stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(kg_format.MAX_FILE + 1)
    except FileNotFoundError:
        return None
