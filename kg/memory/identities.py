"""Which project graph on disk belongs to which repository (contract section 9: a project is the
same graph whatever its folder).

Rules owned here:
- ROOT/identities.json maps a project identity (kg/memory/repo_id.py) to the slug of its graph;
  each graph also records its identity in `_meta.repo_id`.
- Graphs made before identities existed are indexed the first time the daemon opens the root
  (git runs then, before any request). Two graphs of one repository (the same repository opened
  at two paths) are merged into the first by slug with the one merge rule (kg/core/kg_format.py for
  content, kg/core/personal.py for read times and states); the other's file is kept beside it as
  `graph.json.merged-<time>`, nothing is lost.
- A path's identity is computed once per daemon (git runs), cached by path.
"""

import json
import logging
import os
import time

from ..core import kg_format, personal
from ..disk.files import atomic_write
from . import repo_id

log = logging.getLogger(__name__)

INDEX = "identities.json"


class Identities:
    def __init__(self, layout):
        self.layout = layout
        self.path = os.path.join(layout.root, INDEX)
        self.by_id = self._load()
        self.cache = {}  # project path -> identity

    def _load(self):
        try:
            with open(self.path, "r", encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(obj, dict):
            return {}
        return {k: v for k, v in obj.items() if repo_id.is_identity(k) and isinstance(v, str) and "/" not in v}

    def save(self):
        data = (json.dumps(self.by_id, sort_keys=True, indent=0) + "\n").encode("utf-8")
        try:
            atomic_write(self.path, data, keep_prev=False)
        except OSError as exc:
            log.warning("could not save %s (%s); it is rebuilt at the next start", self.path, exc.strerror or exc)

    def of_path(self, path):
        """The identity of a project root (git runs the first time per path)."""
        ident = self.cache.get(path)
        if ident is None:
            ident = repo_id.project_identity(path) if os.path.isdir(path) else repo_id.identity_of_path(path)
            self.cache[path] = ident
        return ident

    def slug_of(self, ident):
        """The slug of the graph of that identity, if its file is there."""
        slug = self.by_id.get(ident)
        if slug is None:
            return None
        f = self.layout.graph_file(slug)
        return slug if os.path.exists(f) or os.path.exists(f + ".prev") else None

    def record(self, ident, slug):
        if self.by_id.get(ident) != slug:
            self.by_id[ident] = slug
            self.save()

    def unindexed(self):
        indexed = set(self.by_id.values())
        return [s for s in self.layout.project_slugs() if s not in indexed]


def own_kg(path):
    """A checkout whose own root holds `.kg/` is its own graph (its branch's knowledge)."""
    return bool(path) and os.path.isdir(os.path.join(path, ".kg"))


def _merged(mine, theirs, record, fields):
    """`mine` with the content of both versions merged by the one merge rule (kg/core/kg_format.py)."""
    merged = dict(mine)
    merged.update(fields(kg_format.merge_versions([record(mine), record(theirs)])))
    return merged


def merge_graph_into(into, other):
    """Merge Graph `other` into Graph `into` (in memory) by the one merge rule; the number of
    nodes and edges that changed in `into`. A node's personal state merges by kg/core/personal.py."""
    changed = 0
    for nid, node in other.nodes.items():
        mine = into.nodes.get(nid)
        merged = dict(node)
        if mine is not None:
            merged = _merged(mine, node, kg_format.node_record, kg_format.node_fields)
            personal.apply(merged, personal.merge(personal.record(mine, None, mine.get("_write_ts") or 0),
                                                  personal.record(node, None, node.get("_write_ts") or 0)))
        if merged != mine:
            into.put_node(merged)
            changed += 1
    for key, edge in other.edges.items():
        mine = into.edges.get(key)
        merged = dict(edge) if mine is None else _merged(mine, edge, kg_format.edge_record, kg_format.edge_fields)
        if merged != mine:
            into.put_edge(merged)
            changed += 1
    progress = other.meta.get("progress")
    if isinstance(progress, dict):
        into.meta.setdefault("progress", {})
        for task, state in progress.items():
            into.meta["progress"].setdefault(task, state)
    return changed


def retire(layout, slug, into_slug, now=None):
    """Move a merged graph's files aside (kept, never deleted)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now or time.time()))
    f = layout.graph_file(slug)
    for src in (f, f + ".prev"):
        if os.path.exists(src):
            os.replace(src, "%s.merged-%s" % (src, stamp))
    log.info("project graph projects/%s merged into projects/%s (the same repository); its file is kept as "
             "graph.json.merged-%s", slug, into_slug, stamp)

