"""The `.kg/` folder's text format and its merge rule (contract section 9). Pure: bytes and dicts.

Rules owned here (format 1):
- `.kg/nodes.jsonl`: one line per node or node tombstone, sorted by id in code-point order.
  Node line: {"id","gist","notes","touches","created","changed","files"?}; tombstone: {"id","deleted"}.
- `.kg/edges.jsonl`: one line per edge or edge tombstone, sorted by the key "FROM->TO:REL".
  Edge line: {"from","to","rel","notes","changed","files"?}; tombstone: {"from","to","rel","deleted"}.
- Lines are canonical JSON (sorted keys, no spaces, UTF-8 not escaped), LF, final newline; times
  are Unix seconds rounded to milliseconds. Same records, same bytes: one put is a one-line diff.
- A record's stamp is a short hash of its canonical line (what reconcile compares).
- The files are untrusted: a file over MAX_FILE bytes, a line over MAX_LINE bytes, a line that is
  not JSON, or a record outside contract 3's bounds (kg/core/model.py) is reported and skipped. At most
  MAX_RECORDS[kind] lines of a file are read (a real project is far below); the lines past it are
  reported and skipped, and a file so cut is never written back by kgd (kg/travel/team.py).
  Lines of git conflict markers are skipped and the versions between them are all read; a
  leading UTF-8 byte order mark (an editor's) is ignored, and CR before LF too.
- Every record may carry `v`, its logical version (a write sets it to one more than the version it
  replaced; a merge keeps the highest), `vv`, its version vector ({clone: v}: the version each
  clone that wrote this key had reached, the writer's own entry being this record's `v`), and
  `by`, who wrote it (a node's author, from git's user.name). Round 3's lines have none (v 0, an
  empty vector) and read as before.
- ONE merge rule (merge_versions), used whenever one key has several lines, in whatever files:
  a version whose vector another's covers (every entry at most the other's, the vectors not
  equal) was seen by that other's writer, and loses to it outright, whatever the clocks say.
  Among the versions left (edits made without seeing each other) the latest `changed` wins the
  gist (ties: the larger
  canonical line, so every clone picks the same); notes and touches are the union (winner's order
  first, then the others' new items, most recent first); created = the earliest; a tombstone
  wins only over versions changed strictly before it; a time later than `now` (the moment kgd
  reads the files) counts as `now`, so a line dated in the future wins nothing extra; the merge of
  several carries the highest `v` and the entry-wise highest vector (it has seen them all); the
  result is clipped to contract 3's node bounds keeping the winner's notes first.
- Tombstones older than TOMBSTONE_KEEP_S are pruned when the files are written.
"""

import hashlib
import json
import math

from . import model, staleness
from .errors import BadInput
from .text import compact_json

FORMAT = 1
NODES_FILE = "nodes.jsonl"
EDGES_FILE = "edges.jsonl"
MAX_FILE = 64 * 1024 * 1024
MAX_LINE = 1024 * 1024
MAX_RECORDS = {"node": 15000, "edge": 30000}  # lines read per file: taking them holds the store lock ~1 s
MAX_TS = 1e11  # year 5138: a later time is a hostile line that would win every merge
MAX_V = 2 ** 53
MAX_BY = 100
MAX_VV = 64  # entries of a version vector (clones that wrote one key); past it the lowest go
MAX_CLONE = 32  # characters of a clone's name in a vector
MAX_FRONT = 16  # versions no other covers, compared with each other in one merge
TOMBSTONE_KEEP_S = 365 * 86400.0
MAX_PROBLEMS = 20  # problems listed per file; the rest are counted
BOM = b"\xef\xbb\xbf"
CONFLICT_MARKERS = (b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>")

GITATTRIBUTES = "*.jsonl merge=union text eol=lf\n"
GITIGNORE = ".tmp-*\n"
README = """# kgd project memory (format %d)

This folder holds the knowledge that coding agents using kgd saved about this project: one line per
node in `nodes.jsonl`, one line per edge in `edges.jsonl`. Commit it with the code and merge it with
git as usual: `.gitattributes` makes git keep both sides of a concurrent change, and kgd resolves
them (the later change wins the gist, notes are the union, a delete wins only over older changes).
If git ever leaves conflict markers here, commit the file as it is; kgd reads it and writes it back
clean. Personal state (what each person read, archived or orphaned) never lands here.
""" % FORMAT


# ---- records

def ts(value):
    """Unix seconds rounded to milliseconds (the precision written to .kg/)."""
    return round(float(value or 0), 3)


def canonical(rec):
    return compact_json(rec, sort_keys=True)


def stamp(rec):
    """A short hash of the record's canonical line: equal stamps, equal lines."""
    return hashlib.sha256(canonical(rec).encode("utf-8")).hexdigest()[:16]


def is_edge(rec):
    return "from" in rec


def key_of(rec):
    return model.edge_key(rec["from"], rec["to"], rec["rel"]) if is_edge(rec) else rec["id"]


def is_tombstone(rec):
    return "deleted" in rec


def tombstone(rec_or_key, deleted, edge=None, v=0):
    """A tombstone for a record (or for an edge given as its (from, to, rel) dict); `v` is the
    delete's logical version (one more than the version it deletes)."""
    src = edge if edge is not None else rec_or_key
    if isinstance(src, dict) and is_edge(src):
        out = {"from": src["from"], "to": src["to"], "rel": src["rel"], "deleted": ts(deleted)}
    else:
        out = {"id": src if isinstance(src, str) else src["id"], "deleted": ts(deleted)}
    if v:
        out["v"] = int(v)
    return out


def version(rec):
    return rec.get("v", 0)


def vector(rec):
    return rec.get("vv") or {}


def covers(a, b):
    """True when vector a has seen everything vector b has, and more (a strictly after b)."""
    return a != b and all(a.get(k, 0) >= n for k, n in b.items())


def join(vectors):
    """The entry-wise highest of vectors, at most MAX_VV entries (the highest kept)."""
    out = {}
    for vec in vectors:
        out.update({k: n for k, n in vec.items() if n > out.get(k, 0)})
    return out if len(out) <= MAX_VV else dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_VV])


def _versioned(rec, obj, with_by=False, clone=None):
    """v, vv (and by) of a record from its object's _v, _vv (and _by). With `clone` (this clone
    wrote it), the vector gains this clone's entry at the object's version."""
    v, vv = int(obj.get("_v") or 0), dict(obj.get("_vv") or {})
    if clone is not None:
        v = max(v, 1)
        vv = join([vv, {clone: v}])
    rec.update({k: x for k, x in (("v", v), ("vv", vv)) if x})
    if with_by and obj.get("_by"):
        rec["by"] = obj["_by"]
    return rec


def node_record(node, author=None, clone=None):
    """The shared half of a node held in memory (personal fields stay behind). A node this
    person wrote (no `_by` yet) is written as `author`'s, and with `clone` its vector gains this
    clone's entry (kg/travel/team_sync.py passes both for a node changed here)."""
    created, changed = node.get("_created_ts"), node.get("_write_ts")
    created = created if created is not None else (changed or 0)
    rec = {"id": node["id"], "gist": node.get("gist", ""), "notes": list(node.get("notes", [])),
           "touches": list(node.get("touches", [])), "created": ts(created),
           "changed": ts(changed if changed is not None else created)}
    if author and not node.get("_by"):
        rec["by"] = author
    rec.update(staleness.files_field(node))  # the touched files' states: teammates judge the same base (contract 12)
    return _versioned(rec, node, with_by=True, clone=clone)


def edge_record(edge, clone=None):
    rec = {"from": edge["from"], "to": edge["to"], "rel": edge["rel"], "notes": list(edge.get("notes", [])),
           "changed": ts(edge.get("_write_ts") or 0), **staleness.files_field(edge)}  # file ends' states
    return _versioned(rec, edge, clone=clone)


def memory_version(rec):
    """The _v / _vv fields a record gives its object in memory."""
    return {k: (dict(x) if k == "_vv" else x) for k, x in (("_v", rec.get("v")), ("_vv", rec.get("vv"))) if x}


def node_fields(rec):
    """The content a node record gives a node in memory (its personal fields are the caller's)."""
    out = {"id": rec["id"], "gist": rec["gist"], "notes": list(rec["notes"]), "touches": list(rec["touches"]),
           "_created_ts": rec["created"], "_write_ts": rec["changed"]}
    out.update(memory_version(rec), **staleness.memory_files(rec))
    if rec.get("by"):
        out["_by"] = rec["by"]
    return out


def edge_fields(rec):
    out = {"from": rec["from"], "to": rec["to"], "rel": rec["rel"], "notes": list(rec["notes"]),
           "_write_ts": rec["changed"]}
    out.update(memory_version(rec), **staleness.memory_files(rec))
    return out


# ---- validation of untrusted lines

def _time(obj, name):
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput("%s must be a number of Unix seconds" % name)
    try:
        v = float(v)
    except OverflowError:
        raise BadInput("%s is out of range" % name) from None
    if not math.isfinite(v) or v < 0 or v > MAX_TS:
        raise BadInput("%s is out of range" % name)
    return ts(v)


def _version(obj):
    v = obj.get("v", 0)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_V:
        raise BadInput("v must be a whole number from 0 to 2**53")
    return v


def _vector(obj):
    vv = obj.get("vv")
    if not isinstance(vv, dict) or len(vv) > MAX_VV:
        raise BadInput("vv must be an object of at most %d clones" % MAX_VV)
    for k, n in vv.items():
        if not (0 < len(k) <= MAX_CLONE and k.isalnum() and k.isascii()):
            raise BadInput("vv: a clone's name is 1 to %d letters or digits" % MAX_CLONE)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_V:
            raise BadInput("vv: a version is a whole number from 1 to 2**53")
    return dict(vv)


def _author(obj):
    by = obj.get("by")
    if not isinstance(by, str) or not by.strip() or len(by) > MAX_BY or not by.isprintable():
        raise BadInput("by must be a name of at most %d printable characters" % MAX_BY)
    return by


def check_record(obj, kind):
    """A clean record from one parsed line of `kind` ("node" or "edge"), or BadInput."""
    if not isinstance(obj, dict):
        raise BadInput("not a JSON object")
    if kind == "edge":
        out = {"from": model.check_end(obj.get("from"), "from"), "to": model.check_end(obj.get("to"), "to"),
               "rel": model.check_rel(obj.get("rel"))}
    else:
        out = {"id": model.check_id(obj.get("id"))}
    if obj.get("v"):
        out["v"] = _version(obj)
    if obj.get("vv"):
        out["vv"] = _vector(obj)
    if "deleted" in obj:
        out["deleted"] = _time(obj, "deleted")
        return out
    if kind == "node" and "by" in obj:
        out["by"] = _author(obj)
    out.update(staleness.check_files(obj))  # touched files' (an edge: its file ends') states; ill-formed: dropped
    if kind == "node":
        out["gist"] = model.check_text(obj.get("gist"), "gist", model.MAX_GIST)
        out["touches"] = model.check_touches(obj.get("touches", [])) or []
        out["created"] = _time(obj, "created")
    out["notes"] = model.check_notes(obj.get("notes", [])) or []
    out["changed"] = _time(obj, "changed")
    if kind == "node":
        model.check_node_text(out)
    return out


def _encodable(rec, line):
    """A lone surrogate can only come from a \\udXXX escape (UTF-8 bytes never decode to one),
    and no UTF-8 file can hold it: such a record is not text."""
    if b"\\ud" in line or b"\\uD" in line:
        try:
            canonical(rec).encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput("holds a lone surrogate (\\ud800-\\udfff), not text") from None
    return rec


# ---- the merge rule

def _clamp(t, now):
    return t if now is None or t <= now else now


def _when(rec, now):
    return _clamp(rec.get("changed", rec.get("deleted", 0)), now)


def _union(lists):
    seen, out = set(), []
    for items in lists:
        for x in items:
            if x not in seen:
                seen.add(x)
                out.append(x)
    return out


def _within_bounds(rec):
    """Keep a merged node within contract 3's bounds: the winner's notes come first, so the
    others' extra notes are the ones dropped."""
    notes = rec["notes"][:model.MAX_NOTES]
    if not is_edge(rec):
        room = model.MAX_NODE_TEXT - len(rec["gist"])
        kept = []
        for n in notes:
            if len(n) > room:
                break
            kept.append(n)
            room -= len(n)
        notes = kept
        rec["touches"] = rec["touches"][:model.MAX_TOUCHES]
    rec["notes"] = notes
    return rec


def merge_versions(records, now=None):
    """One record from several versions of one node (or one edge), by the rule in the module
    docstring (`now`: the moment the files were read; None leaves times as they are). The result
    does not depend on the order of `records`."""
    lines = {canonical(r): r for r in records}  # identical lines count once
    records, line_of = list(lines.values()), {id(r): line for line, r in lines.items()}
    if len(records) == 1:
        return records[0]
    records = _not_seen(records)
    if len(records) == 1:
        return records[0]

    def order(rec):
        return (_when(rec, now), line_of[id(rec)])

    tombs = [r for r in records if is_tombstone(r)]
    deleted = max((_clamp(r["deleted"], now) for r in tombs), default=None)
    live = [r for r in records
            if not is_tombstone(r) and (deleted is None or _clamp(r["changed"], now) >= deleted)]
    top, vv = max(version(r) for r in records), join(vector(r) for r in records)
    if not live:
        return _seen_all(dict(max(tombs, key=order)), top, vv)
    live.sort(key=order, reverse=True)
    winner = live[0]
    out = _seen_all(dict(winner), top, vv)
    out["notes"] = _union(r["notes"] for r in live)
    if not is_edge(winner):
        out["touches"] = _union(r["touches"] for r in live)
        out["created"] = min(r["created"] for r in live)
    return _within_bounds(out)


def merge_files(views, now=None):
    """One view ({key: record}) of several files' views: a key in more than one file is merged
    by merge_versions (every file of a kind is one view, contract 9)."""
    out, versions = {}, {}
    for view in views:
        for key, rec in view.items():
            if key in out:
                versions.setdefault(key, [out[key]]).append(rec)
            else:
                out[key] = rec
    for key, recs in versions.items():
        out[key] = merge_versions(recs, now)
    return out


def _not_seen(records):
    """The versions no other version's vector covers (the others were seen and replaced). Distinct
    vectors are taken by decreasing sum (a coverer's sum is larger) and each is compared with at
    most MAX_FRONT of the uncovered ones found before it: a hostile file of many vectors costs
    that much, and what is past it counts as concurrent."""
    keys = [tuple(sorted(vector(r).items())) for r in records]  # a vector's entries, in order
    vecs = {k: dict(k) for k in keys}
    if len(vecs) == 1:
        return records
    front, kept = [], set()
    for key, vec in sorted(vecs.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        if not any(covers(m, vec) for m in front[:MAX_FRONT]):
            front.append(vec)
            kept.add(key)
    return [r for r, k in zip(records, keys) if k in kept]


def _seen_all(rec, top, vv):
    """A merge's result has seen every version it merged: the highest v, the joined vector."""
    rec.update({k: x for k, x in (("v", top), ("vv", vv)) if x})
    return rec


# ---- files

def _problem(problems, name, lineno, what):
    problems.append("%s line %d: %s" % (name, lineno, what))


def parse(data, kind, now=None):
    """({key: record}, [problem]) from the bytes of nodes.jsonl (kind "node") or edges.jsonl
    ("edge"), or of every file of that kind joined. Never raises on bad content: what cannot be
    read is reported and skipped; several lines of one key are merged by merge_versions."""
    records, problems, _, _ = _parse(data, kind, {}, None, now)
    return records, problems


class Reader:
    """Parses one file again and again, reading only the lines it has not seen (a pull changes
    a few lines of a large file). parse() also gives each record's stamp: key -> stamp. `cut`
    says the last file parsed held more than MAX_RECORDS lines (only the first were read)."""

    def __init__(self, kind):
        self.kind = kind
        self.lines = {}  # line -> (record, stamp), for the lines of the last parse
        self.cut = False

    def learn(self, known):
        """(line, record, stamp) triples known without parsing (the lines kgd itself last wrote),
        used by the next parse."""
        for line, rec, st in known:
            self.lines.setdefault(line, (rec, st))

    def parse(self, data, now=None):
        fresh = {}
        records, problems, stamps, self.cut = _parse(data, self.kind, self.lines, fresh, now)
        self.lines = fresh
        return records, problems, stamps


def _parse(data, kind, known, fresh, now=None):
    name = NODES_FILE if kind == "node" else EDGES_FILE
    problems, stamps = [], {}
    if data is None:
        return {}, problems, stamps, False
    if len(data) > MAX_FILE:
        return {}, ["%s is %d bytes; the limit is %d: not loaded" % (name, len(data), MAX_FILE)], stamps, False
    if data.startswith(BOM):  # an editor's byte order mark: the first line is still a record
        data = data[len(BOM):]
    versions = {}
    skipped, count, cut = 0, 0, None
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\r")
        if not line.strip() or line.startswith(CONFLICT_MARKERS):
            continue
        count += 1
        if count > MAX_RECORDS[kind]:
            cut = lineno
            break
        hit = known.get(line)
        if hit is not None:
            if fresh is not None:
                fresh[line] = hit
            key = key_of(hit[0])
            versions.setdefault(key, []).append(hit[0])
            stamps[key] = hit[1]
            continue
        what = None
        if len(line) > MAX_LINE:
            what = "line of %d bytes (limit %d)" % (len(line), MAX_LINE)
        else:
            try:
                rec = _encodable(check_record(json.loads(line.decode("utf-8")), kind), line)
            except UnicodeDecodeError:
                what = "not UTF-8"
            except (ValueError, RecursionError, OverflowError):
                what = "not JSON"
            except BadInput as exc:
                what = "not a valid %s: %s" % (kind, exc.message)
        if what is not None:
            skipped += 1
            if len(problems) < MAX_PROBLEMS:
                _problem(problems, name, lineno, what)
            continue
        key = key_of(rec)
        versions.setdefault(key, []).append(rec)
        if fresh is not None:
            fresh[line] = (rec, stamp(rec))
            stamps[key] = fresh[line][1]
    if skipped > len(problems):
        problems.append("%s: %d more bad lines skipped" % (name, skipped - len(problems)))
    if cut is not None:
        rest = sum(1 for raw in lines[cut - 1:] if raw.strip() and not raw.startswith(CONFLICT_MARKERS))
        problems.append("%s: more than %d lines; the %d lines from line %d on are skipped, and kgd does not "
                        "write this file until it is back under the limit" % (name, MAX_RECORDS[kind], rest, cut))
    records = {}
    for k, v in versions.items():
        records[k] = v[0] if len(v) == 1 else merge_versions(v, now)
        if len(v) > 1 and records[k] is not v[0]:
            stamps.pop(k, None)  # merged: its stamp is computed when needed
    return records, problems, stamps, cut is not None


def needs_rewrite(data, records):
    """True when the file's bytes are not exactly what render() gives for what it holds
    (duplicates, conflict markers, bad lines, unsorted or non-canonical lines)."""
    return data != render(records)


def render(records, now=None, line=None):
    """The bytes of one file: every record's canonical line sorted by key, LF, final newline.
    With `now`, tombstones older than TOMBSTONE_KEEP_S are left out. `line(key, rec)` may give
    a record's canonical line from a cache (a big file rewritten for a few changed records)."""
    keep_after = None if now is None else now - TOMBSTONE_KEEP_S
    lines = []
    for key in sorted(records):
        rec = records[key]
        if keep_after is not None and is_tombstone(rec) and rec["deleted"] < keep_after:
            continue
        lines.append(canonical(rec) if line is None else line(key, rec))
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
