"""A shared project's sync state, kept in its graph's `_meta` (personal, never in `.kg/`). Pure.

`_meta.kg_shared` = {"base": {"node": {key: stamp}, "edge": {...}}, "dropped": {...same...},
"deleted": {"node": {key: ts}, "edge": {...}}, "off": true?}:
- base: what kgd last synced with `.kg/` (kg/core/reconcile.py), so it survives restarts;
- dropped: nodes and edges this person's compaction removed from the view: no tombstone is
  written for them, and a teammate's later change brings them back;
- deleted: explicit deletes (kg_delete_node, REST, viewer) not yet written as tombstones, with
  their time and logical version ([ts, v]; a bare ts from round 3), so a teammate's change made
  after the delete survives it;
- own: what this clone wrote into `.kg/` files git did not track then (key -> the file's name, or
  [name, deleted, v] for a tombstone): if such a file vanishes and no branch of git holds it
  (`git clean`, `git stash -u`, removed by hand), the knowledge is written again, not dropped; a
  file that left with a branch (committed, then another checkout) is git's, and forgotten here;
- clone: this clone's name for the files it writes under `.kg/changes/` (random, never shared),
  and n: {kind: the number of its last file}, which only grows, so a name is never used twice (a
  file `git stash -u` took comes back with `git stash pop` beside the one written meanwhile);
- off: `kgd share --off`: the repository's `.kg/` is neither read nor written any more.
Every change to it is one journal record ({"op": "shared", ...}, applied by apply()), so a crash
replays it with the node changes it came with, or drops both.
"""

from . import model

META = "kg_shared"
KINDS = ("node", "edge")
SECTIONS = ("base", "dropped", "deleted", "own")


def state(meta):
    """The sync state held in a graph's meta (a fresh, empty one when there is none)."""
    s = meta.get(META)
    if not isinstance(s, dict):
        s = meta[META] = {}
    for section in SECTIONS:
        part = s.get(section)
        if not isinstance(part, dict):
            part = s[section] = {}
        for kind in KINDS:
            if not isinstance(part.get(kind), dict):
                part[kind] = {}
    return s


def is_off(meta):
    s = meta.get(META)
    return isinstance(s, dict) and bool(s.get("off"))


def patch(meta, changes):
    """Apply {"base": {"node": {key: value or None}}, ..., "off": bool?} (None removes a key)."""
    s = state(meta)
    for section in SECTIONS:
        for kind, values in (changes.get(section) or {}).items():
            if kind not in KINDS or not isinstance(values, dict):
                continue
            part = s[section][kind]
            for key, value in values.items():
                if value is None:
                    part.pop(key, None)
                else:
                    part[key] = value
    if changes.get("clone"):
        s["clone"] = changes["clone"]
    if changes.get("joined"):
        s["joined"] = True  # this graph has been shared here: what it holds is no longer only personal
    for kind, n in (changes.get("n") or {}).items():
        if kind in KINDS and isinstance(n, int) and not isinstance(n, bool):
            s.setdefault("n", {})[kind] = max(n, number(meta, kind))
    if "off" in changes:
        if changes["off"]:
            s["off"] = True
        else:
            s.pop("off", None)


def apply(g, rec):
    """A "shared" journal record: content taken from `.kg/` and the sync state that goes with it.
    A node leaving the view leaves its edges alone (they are reconciled on their own)."""
    for node in rec.get("nodes", ()):
        g.nodes[node["id"]] = node
        g.refresh(node["id"])
    for nid in rec.get("drop_nodes", ()):
        if g.nodes.pop(nid, None) is not None:
            g.refresh(nid)
    for edge in rec.get("edges", ()):
        g.put_edge(edge)
    for key in rec.get("drop_edges", ()):
        g.delete_edge(key)
    if rec.get("meta"):
        patch(g.meta, rec["meta"])


def note_deleted(g, node_id, edges, ts, node_v=0):
    """An explicit delete in a shared graph: remember it, with the version its tombstone takes
    (one more than the version deleted), until the tombstone is written."""
    deleted = state(g.meta)["deleted"]
    if node_id is not None:
        deleted["node"][node_id] = [ts, node_v] if node_v else ts
    for e in edges:
        deleted["edge"][model.edge_key(e["from"], e["to"], e["rel"])] = [ts, (e.get("_v") or 0) + 1]


def number(meta, kind):
    """The number of this clone's last file of `kind` under changes/ (0: none yet)."""
    ns = state(meta).get("n")
    n = ns.get(kind) if isinstance(ns, dict) else 0
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def own_entry(name, rec):
    """What `own` keeps of a record written to the file `name` (a tombstone keeps its time and v)."""
    if "deleted" in rec:
        return [name, rec["deleted"], rec.get("v", 0)]
    return name


def own_file(value):
    """(file name, tombstone entry [ts, v] or None) of an `own` value; (None, None) if unreadable."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str):
        return value[0], [value[1], value[2]]
    return None, None


def deleted_at(value):
    """(ts, v) of a `deleted` entry ([ts, v], or a bare ts from round 3)."""
    if isinstance(value, list) and len(value) == 2:
        return value[0], value[1] or 0
    return value, 0


def edge_keys(edges):
    return [model.edge_key(e["from"], e["to"], e["rel"]) for e in edges]
