"""The personal remote's files (ROOT/sync/, contract section 9) as kgd last wrote or read them, so
that a pass costs what changed, not the size of the files (kg/travel/remote_bridge.py decides what goes in
them; this module reads and writes them).

Rules owned here:
- A file is parsed again only when its stat moved since kgd last wrote or read it, and then only
  its lines kgd has not seen: kgdir.Reader / personal.Reader, taught the lines kgd last rendered.
  Problems in a file (bad lines, markers) are handed to `report` and the rest is read.
- A file is rendered with only its changed lines serialised again (kg/travel/file_lines.py: the bytes
  kgdir.render gives) and written atomically, 0600, with no .prev copy.
- A file is "unclean" when its bytes are not the clean rendering of what it holds (a merge left
  duplicates or conflict markers): the pass writes it back.
"""

import os

from ..core import kg_format as kgdir
from ..core import personal
from ..disk.files import atomic_write, ensure_dir
from .file_lines import FileLines


class SyncFiles:
    def __init__(self, report):
        self.report = report  # report(rel, problems): once per problem, by the bridge
        self.files = {}  # path -> (stat, parsed records, their stamps) as kgd last wrote or read it
        self.lines = {}  # path -> FileLines: the file's lines as last rendered
        self.readers = {}  # path -> kgdir.Reader / personal.Reader: lines parsed before are not parsed again

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
            reader = self.readers[path] = personal.Reader() if kind == "personal" else kgdir.Reader(kind)
        self._teach(reader, path, kind, hit)
        stamps = None
        if kind == "personal":
            parsed, problems = reader.parse(data)
        else:
            parsed, problems, known = reader.parse(data)  # only lines not seen before are parsed
            stamps = {k: known.get(k) or kgdir.stamp(r) for k, r in parsed.items() if not kgdir.is_tombstone(r)}
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
        return {k: kgdir.stamp(r) for k, r in records.items() if not kgdir.is_tombstone(r)}

    def render(self, path, records, changed, now, previous):
        """The file's bytes (kgdir.render's), only the changed lines serialised again."""
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
        reader.learn((t.encode("utf-8"), lines.recs[k], stamps.get(k) or kgdir.stamp(lines.recs[k]))
                     for k, t in lines.text.items())


def stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(kgdir.MAX_FILE + 1)
    except FileNotFoundError:
        return None
