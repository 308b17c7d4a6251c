"""The registry of loaded graphs: which Durable holds which graph, and which project owns a slug.

Rules owned here:
- The user graph is loaded at open; a project graph on first use, keyed by its project root
  (kg/memory/projects.py), one Durable (kg/disk/durable.py) per graph file. A journal found holding records
  at load is folded as soon as its Durable is registered.
- A project's slug is the slug rule's (kg/disk/layout.py, Layout.slug_for), told which slugs the
  loaded graphs with a known project already hold.
- A graph loaded for search before anyone claimed it (an old file that does not record its
  project) is adopted by the first project whose slug it holds, and records the path from then on.
- A new project graph claims its slug on disk (graph.json records project_path) before any
  record lands in its journal, so a crash cannot hand the journal to a namesake.
- The graph a call addresses: the user graph, or the project of the session, else of the
  project_path given; with no level, both, and a node id must then be in exactly one of them.
- An edge end that is not a node of its graph must look like a path (holds / . or \\), be a
  node of the other level, name an existing entry under the project root, or already be in
  some node's touches.
- A project is found by its identity first (kg/memory/identities.py: the same repository at another
  path is the same graph, reached through an alias; a graph indexed under an earlier form of the
  identity, made before remotes counted, is taken over and re-identified when identities.py says
  it is free), except a checkout whose own root holds `.kg/`, which is its own graph. A graph
  records its identity in `_meta.repo_id`.
- git never runs under the store's lock (contract section 9): the identity of the project a call
  addresses is computed by `warm` before the lock is taken; under it, only cached identities
  are read. Graphs made before identities are indexed at open, before the lock too. `warm` also
  lets a project about to load read its `.kg/` before the lock (kg/travel/team.py, Prepared).
"""

import logging
import os

from ..core import model
from ..core.errors import BadInput, Conflict, KgError, NotFound
from ..disk.durable import Durable
from ..disk.files import exists_or_prev
from . import identities
from .projects import names_entry, resolve_project_root

log = logging.getLogger(__name__)


class Registry:
    def __init__(self, layout, lock, clock):
        self.layout = layout
        self.lock = lock  # the store's one RLock
        self.clock = clock
        self.user = None  # Durable of the user graph
        self.projects = {}  # project_path -> Durable
        self.aliases = {}  # another checkout's path -> the Durable of its repository's graph
        self.identities = identities.Identities(layout)
        self.on_load = None  # called with a project's Durable once it is loaded (lock held)
        self.before_load = None  # called with a project root about to load (before the lock)

    def durables(self):
        """Every loaded Durable, the user graph's first."""
        return ([self.user] if self.user is not None else []) + list(self.projects.values())

    def open(self):
        """Load the user graph (lock held)."""
        self.user = self._load(self.layout.user_file, "user")
        _fold_replayed(self.user)

    def _load(self, path, level, project_path=None, slug=None):
        durable = Durable.load(path, level, project_path, slug, self.clock)
        _report_credentials(durable)
        return durable

    def _register(self, project_path, durable):
        self.projects[project_path] = durable
        _fold_replayed(durable)
        return durable

    # ---- projects by root

    def _slug(self, project_path):
        known = {d.graph.slug: d.project_path for d in self.projects.values() if d.graph.path_known}
        return self.layout.slug_for(project_path, known)

    def project(self, project_path):
        """The Durable of a project root, loading (or creating) it."""
        with self.lock:
            durable = self.projects.get(project_path) or self.aliases.get(project_path)
            if durable is None:
                durable = self._by_identity(project_path)
            if durable is None:
                durable = self._claim(project_path, self._slug(project_path))
                self._identify(durable)
            elif not durable.opened:
                self._opened(durable)  # loaded earlier for a search: now a session opens it
            return durable

    def existing(self, project_path):
        """The project's Durable if it is loaded or on disk, else None: creates nothing."""
        with self.lock:
            durable = self.projects.get(project_path) or self.aliases.get(project_path) \
                or self._by_identity(project_path)
            if durable is not None:
                return durable
            slug = self._slug(project_path)
            path = self.layout.graph_file(slug)
            if not exists_or_prev(path):
                return None
            return self._claim(project_path, slug)

    def _claim(self, project_path, slug):
        """Register the project's graph under its slug: adopt an unclaimed one, else load or
        create the file."""
        stray = next((d for d in self.projects.values() if d.graph.slug == slug and not d.graph.path_known), None)
        if stray is not None:
            return self._adopt(stray, project_path)
        path = self.layout.graph_file(slug)
        durable = self._register(project_path, self._load(path, "project", project_path, slug))
        if not os.path.exists(path):
            try:
                durable.write_file("the project graph")
            except KgError:
                del self.projects[project_path]
                raise
        self._opened(durable)
        return durable

    def _opened(self, durable):
        durable.opened = True
        if self.on_load is not None:
            self.on_load(durable)

    # ---- identities

    def warm(self, level=None, session=None, project_path=None):
        """Compute the identity of the project a call at `level` addresses, before the store's
        lock is taken (git runs once per path). A path refused as bad input is left for the
        call itself to refuse, as it would have."""
        if level == "user":
            return
        path = session.project_path if session is not None else None
        if path is None and project_path:
            try:
                path = resolve_project_root(project_path)
            except KgError:
                return
        if path:
            self.identities.warm(path)
            durable = self.projects.get(path)  # a look without the lock: a hint, checked at load
            if self.before_load is not None and path not in self.aliases and (durable is None or not durable.opened):
                self.before_load(path)

    def root_of(self, cwd):
        """cwd's project root (None without a cwd), its identity computed: call it before the lock."""
        root = resolve_project_root(cwd) if cwd is not None else None
        self.warm(project_path=root)
        return root

    def graph_path(self, root):
        """The project_path of the graph a project root resolves to, which its change events name
        (another checkout of a repository: that repository's graph); the root itself when no
        graph holds it yet. Loads and creates nothing; takes the lock (after git)."""
        self.warm(project_path=root)
        with self.lock:
            durable = self.projects.get(root) or self.aliases.get(root)
            if durable is not None:
                return durable.project_path
            _, slug, durable = self._of_identity(root)
            if durable is not None:
                return durable.project_path
            return (self.layout.recorded_project_path(slug) if slug else None) or root

    def _of_identity(self, project_path):
        """(identity, slug, loaded Durable) of the graph of project_path's repository, each None
        when unknown: a checkout holding its own `.kg/` has none."""
        if identities.own_kg(project_path):
            return None, None, None
        ident, slug = self.identities.resolve(project_path)
        durable = next((d for d in self.projects.values() if d.graph.slug == slug), None) if slug else None
        return ident, slug, durable

    def _by_identity(self, project_path):
        """The graph of the repository project_path is a checkout of, if one is on disk."""
        ident, slug, durable = self._of_identity(project_path)
        if slug is None:
            return None
        if durable is None:
            owner = self.layout.recorded_project_path(slug) or project_path
            durable = self.projects.get(owner)
            if durable is None:
                durable = self._register(owner, self._load(self.layout.graph_file(slug), "project", owner, slug))
                self._opened(durable)
        if durable.project_path != project_path:
            self.aliases[project_path] = durable
        was = durable.graph.meta.get("repo_id")
        if was != ident:
            if was is not None:
                log.info("projects/%s, the graph of %s, is identified %s (was %s)", slug, project_path, ident, was)
            self._identify(durable, ident)
        return durable

    def _identify(self, durable, ident=None):
        """Record a project graph's identity (known already, or its path's) in its _meta and in
        the index."""
        g = durable.graph
        if not g.path_known or g.project_path is None:
            return
        ident = ident or self.identities.of_path(g.project_path)
        if g.meta.get("repo_id") != ident:
            g.meta["repo_id"] = ident
            durable.dirty = True
            durable.fold()
        if not identities.own_kg(g.project_path):
            self.identities.record(ident, g.slug)

    def index_old_graphs(self):
        """Index the graphs made before identities (once per graph); merge two graphs of one
        repository into the first by slug. At open, before the lock and any request: git runs."""
        todo = self.identities.unindexed()
        for slug in todo:
            path = self.layout.recorded_project_path(slug)
            if path is None:
                continue  # an old plugin file: claimed by the first project of its base name
            ident = self.identities.of_path(path)
            into = self.identities.slug_of(ident)
            if into is None or into == slug or identities.own_kg(path):
                if not identities.own_kg(path):
                    self.identities.record(ident, slug)
                continue
            self._merge_old(slug, into)

    def _merge_old(self, slug, into):
        keep = self._load(self.layout.graph_file(into), "project", self.layout.recorded_project_path(into), into)
        other = self._load(self.layout.graph_file(slug), "project", self.layout.recorded_project_path(slug), slug)
        identities.merge_graph_into(keep.graph, other.graph)
        keep.graph.recount()
        keep.dirty = True
        if keep.fold():
            identities.retire(self.layout, slug, into)
            other.journal.reset()

    def _adopt(self, stray, project_path):
        del self.projects[stray.project_path]
        stray.graph.project_path, stray.graph.path_known = project_path, True
        self.projects[project_path] = stray
        stray.dirty = True
        stray.fold()
        return stray

    def load_all(self):
        """Every project graph on disk, loading those not loaded yet (one whose file records no
        project under a placeholder path, until a project adopts it)."""
        with self.lock:
            for slug in self.layout.project_slugs():
                if any(d.graph.slug == slug for d in self.projects.values()):
                    continue
                path = self.layout.recorded_project_path(slug)
                known = path is not None
                path = path or "(unknown project: projects/%s)" % slug
                if path not in self.projects:
                    durable = self._load(self.layout.graph_file(slug), "project", path, slug)
                    durable.graph.path_known = known
                    self._register(path, durable)
            return list(self.projects.values())

    # ---- the graphs a call addresses

    def durable_for(self, level, session=None, project_path=None):
        """The Durable of the graph a call addresses at `level`."""
        level = model.check_level(level)
        if level == "user":
            return self.user
        path = session.project_path if session is not None else None
        if path is None and project_path is not None:
            path = resolve_project_root(project_path)
        if path is None:
            raise BadInput('level "project" needs a session (call kg_read with cwd first) or a project_path.')
        return self.project(path)

    def durables_for(self, session=None, project_path=None):
        """The user graph's Durable, then the addressed project's if any."""
        out = [self.user]
        if session is not None and session.project_path:
            out.append(self.project(session.project_path))
        elif project_path:
            out.append(self.project(resolve_project_root(project_path)))
        return out

    def addressed(self, level, session=None, project_path=None):
        """The Durables a call may touch: the given level's, else both levels'."""
        if level is not None:
            return [self.durable_for(level, session, project_path)]
        return self.durables_for(session, project_path)

    def holding(self, node_id, level, session=None, project_path=None):
        """The Durable holding node_id: the given level, else the one level that has it."""
        durables = self.addressed(level, session, project_path)
        found = [d for d in durables if node_id in d.graph.nodes]
        if not found:
            where = "the %s graph" % durables[0].level if level is not None else "the user or project graph"
            raise NotFound("no node %r in %s; kg_search finds ids." % (node_id[:200], where))
        if len(found) > 1:
            raise Conflict("node %r exists in both the user and the project graph: say which with level."
                           % node_id[:200])
        return found[0]

    def edge_end_known(self, g, end):
        """True when `end` may be an end of an edge in Graph g (see the module's rules)."""
        if end in g.nodes or "/" in end or "." in end or "\\" in end:
            return True
        other = [self.user] if g.level == "project" else list(self.projects.values())
        if any(end in o.graph.nodes for o in other):
            return True
        if any(end in n.get("touches", ()) for n in g.nodes.values()):
            return True
        return g.level == "project" and g.path_known and names_entry(g.project_path, end)


def _report_credentials(durable):
    """A graph loaded holding nodes that look like credentials (contract section 10): a warning
    naming their ids (never the secret); they stay, hidden, until deleted."""
    g = durable.graph
    if not g.flagged and not g.flagged_edges:
        return
    named, count = g.withheld()
    log.warning("%s holds %d node(s) and %d edge(s) that look like credentials; kgd never shows them to an "
                "agent; delete them (kg_delete_node / kg_delete_edge; kgd doctor lists them): %s%s",
                durable.path, count, len(g.flagged_edges), ", ".join(named[:50]) or "-",
                " (%d more whose id itself looks like one)" % (count - len(named)) if count > len(named) else "")


def _fold_replayed(durable):
    """A journal found holding records at load is folded at once (lock held)."""
    if durable.dirty:
        durable.fold()
