"""The registry of loaded graphs: which Durable holds which graph, and which project owns a slug.

Rules owned here:
- The user graph is loaded at open; a project graph on first use, keyed by its project root
  (kg/projects.py), one Durable (kg/durable.py) per graph file. A journal found holding records
  at load is folded as soon as its Durable is registered.
- A project's slug is the slug rule's (kg/storage.py, Layout.slug_for), told which slugs the
  loaded graphs with a known project already hold.
- A graph loaded for search before anyone claimed it (an old file that does not record its
  project) is adopted by the first project whose slug it holds, and records the path from then on.
- A new project graph claims its slug on disk (graph.json records project_path) before any
  record lands in its journal, so a crash cannot hand the journal to a namesake.
- The graph a call addresses: the user graph, or the project of the session, else of the
  project_path given.
"""

import os

from . import model
from .durable import Durable
from .errors import BadInput, KgError
from .projects import resolve_project_root


class Registry:
    def __init__(self, layout, lock, clock):
        self.layout = layout
        self.lock = lock  # the store's one RLock
        self.clock = clock
        self.user = None  # Durable of the user graph
        self.projects = {}  # project_path -> Durable

    def durables(self):
        """Every loaded Durable, the user graph's first."""
        return ([self.user] if self.user is not None else []) + list(self.projects.values())

    def open(self):
        """Load the user graph (lock held)."""
        self.user = self._load(self.layout.user_file, "user")
        _fold_replayed(self.user)

    def _load(self, path, level, project_path=None, slug=None):
        return Durable.load(path, level, project_path, slug, self.clock)

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
            durable = self.projects.get(project_path)
            return durable if durable is not None else self._claim(project_path, self._slug(project_path))

    def existing(self, project_path):
        """The project's Durable if it is loaded or on disk, else None: creates nothing."""
        with self.lock:
            durable = self.projects.get(project_path)
            if durable is not None:
                return durable
            slug = self._slug(project_path)
            path = self.layout.graph_file(slug)
            if not (os.path.exists(path) or os.path.exists(path + ".prev")):
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
        return durable

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


def _fold_replayed(durable):
    """A journal found holding records at load is folded at once (lock held)."""
    if durable.dirty:
        durable.fold()
