"""A shared project's sync state, kept in its graph's `_meta` (personal, never in `.kg/`). Pure.

`_meta.kg_shared` = {"base": {"node": {key: stamp}, "edge": {...}}, "dropped": {...same...},
"deleted": {"node": {key: ts}, "edge": {...}}, "off": true?}:
- base: what kgd last synced with `.kg/` (kg/core/reconcile.py), so it survives restarts;
- dropped: nodes and edges this person's compaction removed from the view: no tombstone is
  written for them, and a teammate's later change brings them back;
- deleted: explicit deletes (kg_delete_node, REST, viewer) not yet written as tombstones, with
  their time, so a teammate's change made after the delete survives it;
- off: `kgd share --off`: the repository's `.kg/` is neither read nor written any more.
Every change to it is one journal record ({"op": "shared", ...}, applied by apply()), so a crash
replays it with the node changes it came with, or drops both.
"""

from . import model

META = "kg_shared"
KINDS = ("node", "edge")
SECTIONS = ("base", "dropped", "deleted")


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


def note_deleted(g, node_id, edge_keys, ts):
    """An explicit delete in a shared graph: remember it until its tombstone is written."""
    deleted = state(g.meta)["deleted"]
    if node_id is not None:
        deleted["node"][node_id] = ts
    for key in edge_keys:
        deleted["edge"][key] = ts


def edge_keys(edges):
    return [model.edge_key(e["from"], e["to"], e["rel"]) for e in edges]
