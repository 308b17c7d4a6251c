"""A JSONL file's lines as kgd last rendered them, so that writing a big file again after a few
records changed costs the changed lines and one join, not a serialisation per record (the
personal remote rewrites a 10,000-node file for five changed nodes; kg/travel/remote_bridge.py).

Rule owned here: `FileLines.render(records, changed, now)` gives exactly the bytes of
kgdir.render(records, now) (every record's canonical line sorted by key, LF, a final newline;
tombstones past kgdir.TOMBSTONE_KEEP_S left out), for content and personal files alike.
`changed` names the keys that differ from the records of the previous render; it is trusted only
when `records` was built from that render's records (`follows`), else every line is checked (a
record object seen before keeps its line).
"""

from ..core import kg_format as kgdir


class FileLines:
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
        keep_after = None if now is None else now - kgdir.TOMBSTONE_KEEP_S
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
            text[k] = self.text[k] if self.recs.get(k) is rec else kgdir.canonical(rec)
        self.recs, self.text = recs, text
        self.order = sorted(records)
        self.tombs = {k for k, rec in records.items() if kgdir.is_tombstone(rec)}

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
            self.text[k] = kgdir.canonical(rec)
            if kgdir.is_tombstone(rec):
                self.tombs.add(k)
            else:
                self.tombs.discard(k)
        if reorder:
            self.order = sorted(self.text)
