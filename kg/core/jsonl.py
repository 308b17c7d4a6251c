"""Reading a JSONL file kgd does not trust: one loop for the small line files that travel (the
personal remote's `personal.jsonl`, `progress.jsonl`), so each applies the same bounds. `.kg/`'s
nodes and edges keep their own loop in kg/core/kg_format.py (stamps, caps per kind). Pure.

Rules owned here:
- A file over kg_format.MAX_FILE is not loaded; a line over MAX_LINE, not JSON or not a record is
  reported ("FILE line N: ...", at most MAX_PROBLEMS lines, then a count) and skipped; blank lines,
  git's conflict markers and an editor's byte order mark are ignored. Never raises on content.
- Several lines of one key are merged by the file's own rule (`merge`), so order and repeats do
  not matter.
"""

import json

from . import kg_format
from .errors import BadInput


def records(data, name, check, key, merge, known=None, fresh=None):
    """({key: record}, [problem]) from `data`; `known` maps a line's bytes to its record (lines
    kgd wrote or parsed last time: not parsed again); `fresh` collects line -> record of this parse."""
    if not data:
        return {}, []
    if len(data) > kg_format.MAX_FILE:
        return {}, ["%s is %d bytes; the limit is %d: not loaded" % (name, len(data), kg_format.MAX_FILE)]
    if data.startswith(kg_format.BOM):
        data = data[len(kg_format.BOM):]
    out, problems, skipped = {}, [], 0
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        line = raw.rstrip(b"\r")
        if not line.strip() or line.startswith(kg_format.CONFLICT_MARKERS):
            continue
        rec = known.get(line) if known else None
        if rec is None:
            try:
                if len(line) > kg_format.MAX_LINE:
                    raise BadInput("line over %d bytes" % kg_format.MAX_LINE)
                rec = check(json.loads(line.decode("utf-8")))
            except (ValueError, RecursionError, BadInput) as exc:
                skipped += 1
                if len(problems) < kg_format.MAX_PROBLEMS:
                    problems.append("%s line %d: %s" % (name, lineno, getattr(exc, "message", None) or "not JSON"))
                continue
        if fresh is not None:
            fresh[line] = rec
        k = key(rec)
        out[k] = merge(out[k], rec) if k in out else rec
    if skipped > len(problems):
        problems.append("%s: %d more bad lines skipped" % (name, skipped - len(problems)))
    return out, problems
