"""What changed in the team's memory between two states of a `.kg/` folder (contract section 9,
"Review before it is published"). Pure: the files' bytes in, the diff out.

Rules owned here:
- A state of `.kg/` is every file of each kind read as one (kg_format's merge rule decides
  between their lines), exactly as a daemon reads it; a tombstone is no node.
- The diff lists nodes added, changed (before and after) and deleted; edges added and deleted
  by key; `withheld`: nodes of the new state the secrets scan would keep from agents, named by id,
  never by their text (they are left out of added / changed); `stale`: nodes of the new state
  whose code changed since they were written (section 12), by id, judged by kg/ops/review_stale.py
  and given here as {id: mark}; the text shows each mark.
- Order: ids in code-point order, so a diff pasted into a review is stable.
"""

from ..secrets import fields
from . import kg_format, staleness
from .text import clip


def view(files, now=None, parsed=None):
    """{kind: {key: record}} of one state: `files` maps kind ("node" / "edge") -> [bytes], one
    entry per file of that kind. Returns (view, problems). `parsed`: a dict shared by the two
    states of one diff, so a file the same on both sides (the base file, the changes files both
    commits hold) is parsed once."""
    out, problems = {}, []
    parsed = {} if parsed is None else parsed
    for kind in ("node", "edge"):
        versions = {}
        for data in files.get(kind, ()):
            if (kind, data) not in parsed:
                parsed[(kind, data)] = kg_format.parse(data, kind, now)
            records, found = parsed[(kind, data)]
            problems.extend(found)
            for key, rec in records.items():
                versions.setdefault(key, []).append(rec)
        merged = {k: v[0] if len(v) == 1 else kg_format.merge_versions(v, now) for k, v in versions.items()}
        out[kind] = {k: r for k, r in merged.items() if not kg_format.is_tombstone(r)}
    return out, problems


def _node(rec):
    out = {"id": rec["id"], "gist": rec["gist"], "notes": list(rec["notes"]), "touches": list(rec["touches"])}
    if rec.get("by"):
        out["by"] = rec["by"]
    return out


def _content(rec):
    return (rec["gist"], rec["notes"], rec["touches"]) if "id" in rec else tuple(rec["notes"])


def diff(before, after, stale=None):
    """The contract's diff object between two views (see the module docstring); `stale`: {id: mark}."""
    b, a = before.get("node", {}), after.get("node", {})
    withheld = sorted(k for k, r in a.items() if fields.scan_node(r) is not None)
    hidden = set(withheld)
    out = {"added": [_node(a[k]) for k in sorted(set(a) - set(b) - hidden)],
           "changed": [{"id": k, "before": _node(b[k]), "after": _node(a[k])} for k in sorted(set(a) & set(b))
                       if k not in hidden and _content(a[k]) != _content(b[k])],
           "deleted": sorted(set(b) - set(a)), "stale": sorted(set(stale or ()) - hidden), "withheld": withheld}
    be, ae = before.get("edge", {}), after.get("edge", {})
    out["edges"] = {"added": sorted(set(ae) - set(be)), "deleted": sorted(set(be) - set(ae)),
                    "changed": sorted(k for k in set(ae) & set(be) if _content(ae[k]) != _content(be[k]))}
    return out


def is_empty(d):
    return not (d["added"] or d["changed"] or d["deleted"] or d["withheld"] or d["stale"]
                or any(d["edges"].values()))


def render(d, title, marks=None):
    """The text a person reads (and pastes into a review); marks: {id: stale mark}."""
    lines = [title]
    for n in d["added"]:
        lines.append("+ %s: %s" % (n["id"], clip(n["gist"], 120)))
    for c in d["changed"]:
        was, now = c["before"], c["after"]
        what = ("%s -> %s" % (clip(was["gist"], 80), clip(now["gist"], 80)) if was["gist"] != now["gist"]
                else "gist unchanged; " + _what_else(was, now))
        lines.append("~ %s: %s" % (c["id"], what))
    for nid in d["deleted"]:
        lines.append("- %s" % nid)
    e = d["edges"]
    if any(e.values()):
        lines.append("edges: %d added, %d changed, %d deleted" % (len(e["added"]), len(e["changed"]),
                                                                  len(e["deleted"])))
        lines.extend("+ edge %s" % k for k in e["added"][:50])
        lines.extend("- edge %s" % k for k in e["deleted"][:50])
    for nid in d["stale"][:50]:
        lines.append("! %s: %s" % (nid, (marks or {}).get(nid, staleness.STALE)))
    if len(d["stale"]) > 50:
        lines.append("! ... %d more stale" % (len(d["stale"]) - 50))
    if d["withheld"]:
        lines.append("withheld (looks like a credential; agents never see it, kgd never writes it): "
                     + ", ".join(d["withheld"]))
    if is_empty(d):
        lines.append("no change to the team's memory")
    else:
        lines.append("%d added, %d changed, %d deleted" % (len(d["added"]), len(d["changed"]), len(d["deleted"]))
                     + (", %d stale (their code changed since)" % len(d["stale"]) if d["stale"] else ""))
    return "\n".join(lines) + "\n"


def _what_else(was, now):
    parts = []
    if was["notes"] != now["notes"]:
        parts.append("notes %d -> %d" % (len(was["notes"]), len(now["notes"])))
    if was["touches"] != now["touches"]:
        parts.append("touches %d -> %d" % (len(was["touches"]), len(now["touches"])))
    return ", ".join(parts) or "reordered"
