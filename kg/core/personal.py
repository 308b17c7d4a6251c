"""One person's use of their knowledge as text for the personal remote: `personal.jsonl` (contract
section 9, "personal: last read, active / archived / orphaned"). Pure: bytes and dicts.

Rules owned here:
- One line per node, canonical JSON like `.kg/`'s (kg/core/kg_format.py), sorted by id:
  {"id", "read": last read or null, "state": "active" | "archived" | "orphaned", "since": when the
  node entered that state}. Times in Unix seconds to the millisecond.
- The merge rule: the later read wins; the later state change wins (the larger `since`; ties:
  the larger canonical line, so every machine picks the same). It is a join (order and repeats
  do not matter), so no base is needed to merge: the base only dates local changes.
- A local state change is dated by the node itself when it can be (orphaned: `_orphaned_ts`), else
  by the pass that first sees it; an active node never synced is active since its creation.
- The file is untrusted: kgdir's size bounds, lines that are not records are reported and skipped,
  conflict markers are skipped.
"""

import math

from . import jsonl, kg_format, model
from .errors import BadInput

FILE = "personal.jsonl"
STATES = (model.ACTIVE, model.ARCHIVED, model.ORPHANED)


def record(node, base_entry, now):
    """The personal line of a node in memory; base_entry = [state, since] of the last sync."""
    state = model.node_state(node)
    if base_entry and base_entry[0] == state:
        since = base_entry[1]
    elif state == model.ORPHANED:
        since = node.get("_orphaned_ts") or now
    elif state == model.ACTIVE and not base_entry:
        since = node.get("_created_ts") or now
    else:
        since = now
    read = node.get("_read_ts")
    return {"id": node["id"], "read": kg_format.ts(read) if read else None, "state": state,
            "since": kg_format.ts(since)}


def merge(a, b):
    """The rule of the module docstring, for two lines of one node."""
    if a == b:
        return a
    later = max(a, b, key=lambda r: (r["since"], kg_format.canonical(r)))
    reads = [r["read"] for r in (a, b) if r["read"] is not None]
    out = dict(later)
    out["read"] = max(reads) if reads else None
    return out


def _time(v, name, nullable=False):
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) \
            or not 0 <= float(v) <= kg_format.MAX_TS:
        raise BadInput("%s must be a number of Unix seconds" % name)
    return kg_format.ts(v)


def check(obj):
    if not isinstance(obj, dict):
        raise BadInput("not a JSON object")
    if obj.get("state") not in STATES:
        raise BadInput("state must be one of %s" % ", ".join(STATES))
    return {"id": model.check_id(obj.get("id")), "read": _time(obj.get("read"), "read", True),
            "state": obj["state"], "since": _time(obj.get("since"), "since")}


def parse(data):
    """({id: line}, [problem]) from the file's bytes; never raises on bad content."""
    return _parse(data, {}, None)


class Reader:
    """Parses one personal.jsonl again and again, reading only the lines the last parse did not
    see (a pull changes a few lines of a large file)."""

    def __init__(self):
        self.lines = {}  # line -> its record, for the lines of the last parse

    def learn(self, known):
        """(line, record) pairs known without parsing (the lines kgd itself last wrote)."""
        for line, rec in known:
            self.lines.setdefault(line, rec)

    def parse(self, data):
        fresh = {}
        out = _parse(data, self.lines, fresh)
        self.lines = fresh
        return out


def _parse(data, known, fresh):
    return jsonl.records(data, FILE, check, _id, merge, known, fresh)


def _id(rec):
    return rec["id"]


def render(records, line=None):
    """The file's bytes; `line(key, rec)` may give a record's line from a cache."""
    lines = [kg_format.canonical(records[k]) if line is None else line(k, records[k]) for k in sorted(records)]
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def reconcile(mine, disk, drop=()):
    """(merged lines to write, {id: line} memory must take, new base {id: [state, since]}).
    Lines of nodes in `drop` (deleted for good) leave the file."""
    merged, to_memory = {}, {}
    for nid in set(mine) | set(disk):
        if nid in drop and nid not in mine:
            continue
        m, d = mine.get(nid), disk.get(nid)
        r = merge(m, d) if m is not None and d is not None else (m or d)
        merged[nid] = r
        if r != m:
            to_memory[nid] = r
    base = {nid: [r["state"], r["since"]] for nid, r in merged.items()}
    return merged, to_memory, base


def update(disk, base, moved, gone):
    """reconcile() for a few lines when `disk` is the file as last written and `base` agrees with
    it: `moved` lines merged in, `gone` ids dropped; (merged lines, new base), both new dicts."""
    merged, new_base = dict(disk), dict(base)
    for nid, line in moved.items():
        d = disk.get(nid)
        r = merge(line, d) if d is not None else line
        merged[nid] = r
        new_base[nid] = [r["state"], r["since"]]
    for nid in gone:
        merged.pop(nid, None)
        new_base.pop(nid, None)
    return merged, new_base


def apply(node, rec):
    """The node with the line's read time (if later) and state. The node's read time is compared
    as the file writes it (to the millisecond): its own read, rounded up there, is no later read."""
    if rec["read"] is not None and rec["read"] > kg_format.ts(node.get("_read_ts") or 0):
        node["_read_ts"] = rec["read"]
    state = model.node_state(node)
    if rec["state"] != state or (state == model.ORPHANED and node.get("_orphaned_ts") != rec["since"]):
        if rec["state"] == model.ACTIVE:
            model.set_active(node)
        elif rec["state"] == model.ARCHIVED:
            model.set_archived(node)
        else:
            model.set_orphaned(node, rec["since"])
    return node
