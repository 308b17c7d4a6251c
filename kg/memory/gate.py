"""What the secrets gate asks of a write, and of what leaves kgd (contract section 10).

Rules owned here:
- A put whose node, edge or progress state holds a credential (kg/secrets/kinds.py finds them) is
  refused before anything is written, naming the field and the kind, never the secret, unless
  KG_SECRET_SCAN=0 and the graph is not shared.
- A node holding one that arrived otherwise (an old file, a scan-off write) is never read,
  searched nor synced (kg/core/graph.py keeps `flagged`); the live feed sends it with its texts
  withheld and marked `flagged`, or not at all when its id (or an edge's end) is the credential.
"""

from ..core import model
from ..core.errors import SecretRefused
from ..secrets import fields, kinds


def checks(scan_on, g):
    """True when a write to Graph g is scanned: always for a shared graph, else unless
    KG_SECRET_SCAN=0."""
    return scan_on or g.shared


def refuse_node(scan_on, g, node):
    """SecretRefused naming the field and the kind when the node about to be written to g (or
    what was sent for it) holds a credential."""
    _refuse(scan_on, g, fields.scan_node, node)


def refuse_edge(scan_on, g, edge):
    """Likewise for an edge."""
    _refuse(scan_on, g, fields.scan_edge, edge)


def _refuse(scan_on, g, scan, item):
    if checks(scan_on, g):
        found = scan(item)
        if found is not None:
            raise SecretRefused(fields.refusal(*found))


def refuse_progress(scan_on, g, task_id, state):
    """Likewise for a progress record: its task id first, then its state (None clears it)."""
    if checks(scan_on, g):
        found = fields.scan_state(state) if state is not None else None
        hit = kinds.find(task_id)
        found = ("task_id", hit) if hit is not None else found
        if found is not None:
            raise SecretRefused(fields.refusal(*found))


def node_event(g, node):
    """The live feed's node_put for a node of Graph g."""
    found = g.flagged.get(node["id"])
    if found is None:
        return [("node_put", {"node": model.public_node(node)})]
    if found[0] == "id":
        return []
    return [("node_put", {"node": fields.redact_item(model.public_node(node)),
                          "flagged": {"field": found[0], "kind": found[1].kind}})]


def edge_event(g, edge):
    """The live feed's edge_put for an edge of Graph g, likewise."""
    found = g.flagged_edges.get(model.edge_key(edge["from"], edge["to"], edge["rel"]))
    if found is None:
        return [("edge_put", {"edge": model.public_edge(edge)})]
    if found[0] in ("from", "to", "rel"):
        return []
    return [("edge_put", {"edge": fields.redact_item(model.public_edge(edge)),
                          "flagged": {"field": found[0], "kind": found[1].kind}})]
