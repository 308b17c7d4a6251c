"""Where everything lives under the storage root (contract section 4), and a project's slug.

Rules owned here:
- ROOT/user.json, ROOT/sessions.json, ROOT/projects/<slug>/graph.json, ROOT/kgd.lock; files
  0600, folders 0700.
- <slug> is the project root's base name, or base name + "-" + 8 hex digits of a hash of the
  resolved path when that slug already holds another project's graph.
- A graph's journal is <file minus .json>.journal, beside it.
"""

import logging
import os
import re

from ..core.errors import BadInput
from .files import ensure_dir, exists_or_prev, load_json

log = logging.getLogger(__name__)


_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def journal_path(graph_path):
    """The journal beside a graph file: <file minus .json>.journal."""
    if graph_path.endswith(".json"):
        return graph_path[:-len(".json")] + ".journal"
    return graph_path + ".journal"


def base_slug(project_path):
    name = os.path.basename(os.path.normpath(project_path)) or "root"
    slug = _SLUG_BAD.sub("-", name).strip(".-") or "project"
    return slug[:80]


def hashed_slug(project_path):
    import hashlib  # only on a slug collision: hashlib costs start-up memory

    digest = hashlib.sha256(project_path.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return "%s-%s" % (base_slug(project_path), digest)


class Layout:
    """Where everything lives under the storage root."""

    def __init__(self, root):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.user_file = os.path.join(self.root, "user.json")
        self.sessions_file = os.path.join(self.root, "sessions.json")
        self.projects_dir = os.path.join(self.root, "projects")
        self.lock_file = os.path.join(self.root, "kgd.lock")

    KGD_NAMES = ("user.json", "user.journal", "sessions.json", "projects", "kgd.lock", "kgd.log", "identities.json",
                 "sync", "sync.json", "sync-status.json")

    def holds_only_kgd_files(self):
        """True when every entry of the root is one kgd writes (or a .prev / .corrupt / temp
        copy of one): then tightening the root's mode touches nothing else."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return False
        return all(n in self.KGD_NAMES or n.startswith(".tmp-")
                   or any(n.startswith(k + ".") for k in self.KGD_NAMES) for n in names)

    def prepare_root(self):
        """Create the root 0700, or tighten a root holding only kgd's files; refuse one kgd
        cannot write."""
        if not os.path.isdir(self.root):
            ensure_dir(self.root)
        elif os.stat(self.root).st_mode & 0o077:
            if self.holds_only_kgd_files():
                os.chmod(self.root, 0o700)  # e.g. made by an older tool with the umask's mode
            else:  # a shared folder (--root ~ ?): not ours to re-permission
                log.warning("storage root %s is readable by other users and holds other files; "
                            "use a folder of its own, or chmod 700 it", self.root)
        if not os.access(self.root, os.W_OK):
            raise BadInput("storage root %s is not writable." % self.root)

    def sweep_temp(self):
        """Temp files that killed writes left under the root (the root, each project's folder,
        the personal remote's working tree but its .git), whatever their age: called by the
        root lock's holder, the one process that writes here (kg/disk/files.py)."""
        from .files import sweep_temp
        folders = [self.root] + [os.path.join(self.projects_dir, s) for s in self.project_slugs()]
        for top, dirs, _ in os.walk(os.path.join(self.root, "sync")):
            dirs[:] = [d for d in dirs if d != ".git"]
            folders.append(top)
        return sum(sweep_temp(f, min_age=0) for f in folders)

    def graph_file(self, slug):
        return os.path.join(self.projects_dir, slug, "graph.json")

    def journal_file(self, slug):
        return journal_path(self.graph_file(slug))

    def project_slugs(self, with_journals=False):
        """Slugs holding a graph file (or its .prev); with_journals also those holding only a
        non-empty journal (the daemon never loads those: no file records their project, so
        the tools that read files report them instead)."""
        try:
            names = sorted(os.listdir(self.projects_dir))
        except OSError:
            return []
        out = []
        for n in names:
            f = self.graph_file(n)
            if exists_or_prev(f):
                out.append(n)
            elif with_journals:
                j = journal_path(f)
                if os.path.exists(j) and os.path.getsize(j) > 0:
                    out.append(n)
        return out

    def recorded_project_path(self, slug):
        """The project_path a slug's graph file records, without loading the whole graph twice."""
        obj = load_json(self.graph_file(slug))
        if obj is None:
            return None
        meta = obj.get("_meta") if isinstance(obj.get("_meta"), dict) else {}
        return meta.get("project_path")

    def slug_for(self, project_path, known=None):
        """The slug rule: base name, unless it holds another project's graph; then base-hash.

        `known` maps slug -> project_path for graphs already loaded (saves reading files)."""
        known = known or {}
        for slug in (base_slug(project_path), hashed_slug(project_path)):
            owner = known.get(slug)
            if owner is None and exists_or_prev(self.graph_file(slug)):
                owner = self.recorded_project_path(slug)
                if owner is None:
                    # A graph without a recorded path (an old plugin file): claim it for the first
                    # project whose base name matches.
                    return slug
            if owner is None or owner == project_path:
                return slug
        return hashed_slug(project_path)
