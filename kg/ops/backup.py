"""`kgd export` and `kgd import`: the memory as one JSON document, and back.

Rules owned here:
- `export` reads the files (each graph file plus its journal, replayed; re-read when a fold lands
  mid-read). That is exact (every state, note, underscore time, _meta and task progress), needs no
  project folder to exist and works whether or not the daemon runs: every acknowledged write is in
  the graph file or its journal, and the graph file is only ever replaced whole.
- `import` merges (a shared project's clone name, `kg_shared.clone`, is never imported: each machine
  names its own `.kg/changes/` files). When a daemon holds the root it goes through the REST API so the daemon's
  memory and files stay one (content only: the daemon stamps times and revives states as for any
  put). Otherwise it writes the files itself while holding the root lock, exactly: a node absent
  here is added as it was, a node present in both keeps the copy written last (`_write_ts`; the
  imported one on a tie); edges and task progress from the file replace their namesakes.
- A node or edge holding a credential (kg/secrets/kinds.py) is refused on its own, named (never the
  secret) and counted in the summary; the rest is imported. KG_SECRET_SCAN=0 lets them in, for
  graphs not shared only; the daemon then keeps them hidden from agents (contract section 10).
"""

import contextlib
import http.client
import json
import os
import re
import sys
import time
from urllib.parse import quote

from .. import __version__
from ..core import model, team_state
from ..core.errors import KgError
from ..core.graph import graph_from_obj
from ..disk.files import DIR_MODE, RootLock, atomic_write, dumps, ensure_dir
from ..disk.layout import Layout, base_slug, journal_path
from ..secrets import fields
from .client import Api, connect_host, find_daemon, root_lock
from .console import CommandError, say, warn
from .disk_view import project_graphs, snapshot_graph

EXPORT_FORMAT = "kgd-export"
_SLUG_OK = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._-]{0,199}\Z")

def _daemon_paths(cfg):
    """slug -> project_path from the running daemon (knows graphs not yet folded to a file)."""
    found = find_daemon(cfg)
    if not found or not found["holds_root"]:
        return {}
    api = Api(connect_host(cfg), found["port"], cfg.get("token"), timeout=10)
    try:
        code, obj = api.json("GET", "/api/projects")
    except (OSError, ConnectionError, http.client.HTTPException):
        return {}
    finally:
        api.close()
    if code != 200 or not isinstance(obj, dict):
        return {}
    return {p["slug"]: p["project_path"] for p in obj.get("projects") or [] if p.get("slug") and p.get("project_path")}


def _matches_project(wanted, slug, project_path):
    if wanted == slug:
        return True
    if project_path is None:
        return False
    w = os.path.realpath(os.path.expanduser(wanted))
    return w == project_path or w.startswith(project_path.rstrip("/") + "/")


def _held_back(g, label, with_flagged):
    """The graph as exported: a node, edge or task progress holding a credential is left out
    (named by id and field, never the secret) unless the person asks for it (--with-flagged)."""
    flagged = dict(g.flagged)
    progress = g.meta.get("progress") if isinstance(g.meta.get("progress"), dict) else {}
    tasks = [(t, f) for t, f in ((t, fields.scan_state(s)) for t, s in sorted(progress.items())) if f]
    if not (flagged or g.flagged_edges or tasks) or with_flagged:
        return g.to_obj()
    for nid, (field, hit) in sorted(flagged.items()):
        warn("%s: %s left out: %s looks like %s (--with-flagged keeps it)" % (
            label, "a node" if field == "id" else "node %r" % nid, field, hit.label))
        g.delete_node(nid)
    for key, (field, hit) in sorted(g.flagged_edges.items()):
        warn("%s: an edge left out: %s looks like %s" % (label, field, hit.label))
        g.delete_edge(key)
    for task, (where, hit) in tasks:
        warn("%s: task progress left out: %s looks like %s" % (label, where, hit.label))
        del progress[task]
    return g.to_obj()


def export_doc(cfg, projects=None, include_user=True, with_flagged=False):
    layout = Layout(cfg["root"])
    if not os.path.isdir(layout.root):
        raise CommandError("storage root %s does not exist; nothing to export" % layout.root)
    doc = {"format": EXPORT_FORMAT, "format_version": 1, "kgd_version": __version__, "exported_at": time.time(),
           "root": layout.root, "user": None, "projects": []}
    if include_user:
        doc["user"] = _held_back(snapshot_graph(layout.user_file, "user"), "user graph", with_flagged)
    matched = set()
    for slug, g in project_graphs(layout, known=lambda: _daemon_paths(cfg)):
        if g.project_path is None:
            warn("project graph %s records no project path; exported with project_path null" % slug)
        if projects:
            hits = [w for w in projects if _matches_project(w, slug, g.project_path)]
            if not hits:
                continue
            matched.update(hits)
        doc["projects"].append({"slug": slug, "project_path": g.project_path,
                                "graph": _held_back(g, "project %s" % slug, with_flagged)})
    missing = [w for w in projects or () if w not in matched]
    if missing:
        have = ", ".join(layout.project_slugs(with_journals=True)) or "none"
        raise CommandError("no project graph matches %s (give a project folder or one of the slugs under "
                           "%s/projects: %s)" % (", ".join(missing), layout.root, have))
    return doc


def export(args, cfg):
    try:
        doc = export_doc(cfg, args.project, not args.no_user, getattr(args, "with_flagged", False))
    except CommandError as exc:
        warn(str(exc))
        return 1
    data = dumps(doc) + b"\n"
    if args.output and args.output != "-":
        atomic_write(os.path.abspath(args.output), data, keep_prev=False)  # 0600: the memory is private
        n = sum(len(p["graph"]["nodes"]) for p in doc["projects"]) + len((doc["user"] or {}).get("nodes", {}))
        warn("exported %d node(s) in %d graph(s) to %s" % (n, len(doc["projects"]) + bool(doc["user"]), args.output))
    else:
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    return 0


# ---------------------------------------------------------------- import

def load_export(path):
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
        doc = json.loads(data.decode("utf-8"))
    except OSError as exc:
        raise CommandError("cannot read %s: %s" % (path, exc.strerror or exc))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError("%s is not a JSON document (%s)" % (path, str(exc)[:200]))
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise CommandError("%s is not a kgd export (no \"format\": \"%s\"); make one with `kgd export`" % (
            path, EXPORT_FORMAT))
    if doc.get("user") is not None and not isinstance(doc["user"], dict):
        raise CommandError("%s: \"user\" must be a graph object" % path)
    projects = doc.get("projects") or []
    if not isinstance(projects, list) or not all(isinstance(p, dict) and isinstance(p.get("graph"), dict)
                                                  for p in projects):
        raise CommandError("%s: \"projects\" must be a list of {slug, project_path, graph}" % path)
    for p in projects:
        pp = p.get("project_path")
        if pp is not None and (not isinstance(pp, str) or not os.path.isabs(pp)):
            raise CommandError("%s: project_path %r is not an absolute path" % (path, pp))
    return doc


def _clean_graph(obj, level, label, tally=None, scan=True):
    """The imported graph normalized as the daemon loads files, minus entries it would refuse:
    unusable ids, and (with `scan`) nodes and edges holding a credential, each refused and
    counted on its own so the rest is imported (contract section 10)."""
    g = graph_from_obj(obj, level, fallback_ts=time.time())
    if scan:
        _refuse_credentials(g, label, tally)
    skipped = 0
    for nid in list(g.nodes):
        try:
            model.check_id(nid)
        except KgError:
            del g.nodes[nid]
            skipped += 1
    for key, e in list(g.edges.items()):
        try:
            model.check_end(e["from"], "from")
            model.check_end(e["to"], "to")
            model.check_rel(e["rel"])
        except KgError:
            del g.edges[key]
            skipped += 1
    if skipped:
        warn("%s: skipped %d node(s)/edge(s) with unusable ids" % (label, skipped))
    g.recount()
    return g


def _refuse_credentials(g, label, tally):
    """Drop from g each node or edge that looks like it holds a credential, and the edges of a
    dropped node; warn naming the field and kind, never the secret."""
    for nid, (field, hit) in sorted(g.flagged.items()):
        warn("%s: %s refused: %s looks like %s; %s" % (
            label, "a node" if field == "id" else "node %r" % nid, field, hit.label, fields.advice(hit.kind)))
        for _ in g.delete_node(nid):
            if tally is not None:
                tally.add("edges", "skipped")
        if tally is not None:
            tally.add("nodes", "refused")
    for key, (field, hit) in sorted(g.flagged_edges.items()):
        warn("%s: an edge refused: %s looks like %s" % (label, field, hit.label))
        g.delete_edge(key)
        if tally is not None:
            tally.add("edges", "refused")
    progress = g.meta.get("progress")
    for task, state in sorted(progress.items()) if isinstance(progress, dict) else ():
        found = fields.scan_state(state)
        if found is not None:
            warn("%s: task progress refused: %s looks like %s" % (label, found[0], found[1].label))
            del progress[task]
            if tally is not None:
                tally.add("progress", "refused")


class Tally:
    def __init__(self, label):
        self.label = label
        self.counts = {}

    def add(self, kind, what, n=1):
        self.counts[(kind, what)] = self.counts.get((kind, what), 0) + n

    def changed(self):
        return any(n for (kind, what), n in self.counts.items() if what in ("added", "updated"))

    def line(self):
        parts = []
        for kind in ("nodes", "edges", "progress"):
            bits = [
                "%d %s" % (self.counts[(kind, w)], w)
                for w in ("added", "updated", "unchanged", "kept newer", "skipped", "refused")
                if self.counts.get((kind, w))
            ]
            if bits:
                parts.append("%s: %s" % (kind, ", ".join(bits)))
        return "%s — %s" % (self.label, "; ".join(parts) or "empty")


def merge_graph(g, src, tally):
    """Merge src (a clean Graph) into g in place, by the rules in this module's docstring."""
    for nid, node in src.nodes.items():
        old = g.nodes.get(nid)
        if old is None:
            g.nodes[nid] = node
            tally.add("nodes", "added")
        elif old == node:
            tally.add("nodes", "unchanged")
        elif (node.get("_write_ts") or 0) >= (old.get("_write_ts") or 0):
            g.nodes[nid] = node
            tally.add("nodes", "updated")
        else:
            tally.add("nodes", "kept newer")
    for key, edge in src.edges.items():
        old = g.edges.get(key)
        if old is None:
            tally.add("edges", "added")
        elif old == edge:
            tally.add("edges", "unchanged")
            continue
        else:
            tally.add("edges", "updated")
        g.edges[key] = edge
    progress = src.meta.get("progress")
    if isinstance(progress, dict):
        mine = g.meta.setdefault("progress", {})
        for task, state in progress.items():
            if task not in mine:
                tally.add("progress", "added")
            elif mine[task] == state:
                tally.add("progress", "unchanged")
                continue
            else:
                tally.add("progress", "updated")
            mine[task] = state
            if (src.meta.get("progress_changed") or {}).get(task) is not None:  # its date: the later change wins
                g.meta.setdefault("progress_changed", {})[task] = src.meta["progress_changed"][task]
    for k, v in src.meta.items():
        if k == team_state.META and isinstance(v, dict):  # a clone's name for its .kg/changes/ files: its own
            v = {s: x for s, x in v.items() if s not in ("clone", "n")}
        if k not in ("progress", "level", "project_path"):
            g.meta.setdefault(k, v)
    g.recount()


def _write_graph(path, g):
    atomic_write(path, dumps(g.to_obj()))
    jpath = journal_path(path)
    if os.path.exists(jpath):  # its records are folded into what was just written
        os.truncate(jpath, 0)


def _import_files(doc, cfg, dry_run):
    """Merge doc into the graph files themselves (no daemon holds the root). -> a Tally per graph."""
    layout = Layout(cfg["root"])
    with _root_held(layout, dry_run):
        imp = _FileImport(layout, cfg.get("secret_scan", True), dry_run)  # KG_SECRET_SCAN=0: graphs not shared
        if doc.get("user") is not None:
            imp.merge(layout.user_file, snapshot_graph(layout.user_file, "user"), doc["user"], "user graph")
        for p in doc.get("projects") or []:
            imp.project(p)
    return imp.tallies


@contextlib.contextmanager
def _root_held(layout, dry_run):
    """The root made (mode 0700) and locked while the import writes; a dry run writes nothing and takes
    no lock. Raises KgError (Conflict) when a daemon got there first."""
    if dry_run:
        yield
        return
    ensure_dir(layout.root)
    os.chmod(layout.root, DIR_MODE)
    lock = RootLock(layout)
    lock.acquire("import")
    try:
        yield
    finally:
        lock.release()


class _FileImport:
    """One import into the files: each graph merged into its file's current state and written back
    only when something changed (never on a dry run); `owners` (slug -> project_path) is read once,
    under the lock, and grows as imported projects take slugs."""

    def __init__(self, layout, scan, dry_run):
        self.layout, self.scan, self.dry_run = layout, scan, dry_run
        self.tallies = []
        self.owners = {slug: snapshot_graph(layout.graph_file(slug), "project", slug=slug).project_path
                       for slug in layout.project_slugs(with_journals=True)}

    def merge(self, path, g, obj, label):
        t = Tally(label)
        merge_graph(g, _clean_graph(obj, g.level, label, t, self.scan or g.shared), t)
        if t.changed() and not self.dry_run:
            _write_graph(path, g)
        self.tallies.append(t)

    def project(self, p):
        pp = p.get("project_path") or (p["graph"].get("_meta") or {}).get("project_path")
        wanted = _wanted_slug(p.get("slug"), pp)
        if wanted is None:
            warn("skipping a project graph with neither a usable slug nor a project_path")
            return
        slug = _slug_for_import(self.layout, self.owners, wanted, pp)
        self.owners[slug] = pp
        path = self.layout.graph_file(slug)
        g = snapshot_graph(path, "project", pp, slug)
        g.project_path = pp
        self.merge(path, g, p["graph"], "project %s (%s)" % (pp or "?", slug))


def _wanted_slug(slug, pp):
    """The slug an exported project graph asks for: its own when usable, else its folder's, else None."""
    if isinstance(slug, str) and _SLUG_OK.match(slug):
        return slug
    return base_slug(pp) if pp else None


def _slug_for_import(layout, owners, wanted, pp):
    """The slug already holding project path pp; else `wanted` when free (or held by a graph with no
    path, for a graph with none); else a new one, as the daemon picks for a second folder."""
    held = next((s for s, owner in owners.items() if pp and owner == pp), None)
    if held is not None:
        return held
    if wanted not in owners or (pp is None and owners.get(wanted) is None):
        return wanted
    return layout.slug_for(pp, owners) if pp else wanted + "-imported"


def _public(node):
    return (node.get("gist"), list(node.get("notes") or []), list(node.get("touches") or []))


def _live_graph(api, level, pp, t, src):
    """The daemon's current graph of that level, or None (skipped, with a warning and a tally)."""
    if level == "user":
        code, live = api.json("GET", "/api/graph")
        if code != 200:
            raise CommandError("GET /api/graph failed: %s" % (live or {}).get("error"))
        return live["user"]
    code, live = api.json("GET", "/api/graph?project_path=" + quote(pp, safe=""))
    if code != 200 or (live or {}).get("project_path") != pp:
        why = (live or {}).get("error") if code != 200 else "that folder now belongs to project %s" % (
            (live or {}).get("project_path"))
        warn("%s: skipped (%s); to import it anyway stop the daemon (kgd stop) and import again" % (t.label, why))
        t.add("nodes", "skipped", len(src.nodes))
        return None
    return live["project"]


def _merge_live(api, level, pp, src, live_graph, t, dry_run):
    """Put what differs through the REST API. -> how many archived or orphaned nodes it revives."""
    extra = {"project_path": pp} if pp else {}
    revived = 0
    nodes = {n["id"]: n for n in live_graph["nodes"]}
    for nid, node in src.nodes.items():
        old = nodes.get(nid)
        if old is not None and _public(old) == _public(node):
            t.add("nodes", "unchanged")
            continue
        if not dry_run:
            body = dict(extra, gist=node["gist"], notes=node["notes"], touches=node["touches"])
            if not _put(api, "/api/nodes/%s/%s" % (level, quote(nid, safe="")), body, t):
                t.add("nodes", "refused")
                continue
        t.add("nodes", "added" if old is None else "updated")
        if model.node_state(node) != model.ACTIVE:
            revived += 1
    edges = {model.edge_key(e["from"], e["to"], e["rel"]): e for e in live_graph["edges"]}
    for key, e in src.edges.items():
        old = edges.get(key)
        if old is not None and list(old.get("notes") or []) == list(e.get("notes") or []):
            t.add("edges", "unchanged")
            continue
        if not dry_run and not _put(api, "/api/edges/%s" % level, dict(extra, **{
                "from": e["from"], "to": e["to"], "rel": e["rel"], "notes": e["notes"]}), t):
            t.add("edges", "refused")
            continue
        t.add("edges", "added" if old is None else "updated")
    for task, state in (src.meta.get("progress") or {}).items():
        q = "?level=%s%s" % (level, "&project_path=" + quote(pp, safe="") if pp else "")
        code, cur = api.json("GET", "/api/progress/%s%s" % (quote(task, safe=""), q))
        if code == 200 and cur.get("state") == state:
            t.add("progress", "unchanged")
            continue
        if not dry_run and not _put(api, "/api/progress/%s" % quote(task, safe=""),
                                    dict(extra, state=state, level=level), t):
            t.add("progress", "refused")
            continue
        t.add("progress", "updated" if code == 200 and cur.get("state") is not None else "added")
    return revived


def _import_live(doc, cfg, port, dry_run):
    api = Api(connect_host(cfg), port, cfg.get("token"), timeout=30)
    tallies, revived = [], 0
    graphs = [("user", None, doc["user"])] if doc.get("user") is not None else []
    graphs += [("project", p.get("project_path"), p["graph"]) for p in doc.get("projects") or []]
    try:
        for level, pp, obj in graphs:
            t = Tally("user graph" if level == "user" else "project %s" % pp)
            src = _clean_graph(obj, level, t.label, t, cfg.get("secret_scan", True))
            if level == "project" and pp is None:
                warn("%s: no project_path recorded; skipped (import it with the daemon stopped)" % t.label)
                continue
            live_graph = _live_graph(api, level, pp, t, src)
            if live_graph is not None:
                revived += _merge_live(api, level, pp, src, live_graph, t, dry_run)
            tallies.append(t)
    finally:
        api.close()
    if revived:
        warn("%d archived or orphaned node(s) were %s as active, with today's times: a running daemon "
             "stamps every put. For an exact restore: kgd stop, kgd import, then start kgd again."
             % (revived, "to be imported" if dry_run else "imported"))
    return tallies


def _put(api, path, body, tally=None):
    """-> False when the daemon refused the write as holding a credential (422, its own scan):
    counted by the caller, the import goes on. Any other failure stops the import."""
    code, obj = api.json("PUT", path, body)
    if code == 422 and tally is not None:
        warn("%s: refused by the daemon: %s" % (tally.label, (obj or {}).get("error")))
        return False
    if code != 200:
        raise CommandError("PUT %s failed (%d): %s" % (path[:120], code, (obj or {}).get("error")))
    return True


def import_(args, cfg):
    try:
        doc = load_export(args.file)
        held, _, port, _ = root_lock(cfg)
        mode = "files"
        if held:
            found = find_daemon(cfg)
            if not found or not found["holds_root"]:
                raise CommandError("a kgd holds root %s but does not answer on port %s; wait for it or stop it "
                                   "(kgd stop)" % (cfg["root"], port))
            tallies, mode = _import_live(doc, cfg, found["port"], args.dry_run), "the running daemon"
        else:
            try:
                tallies = _import_files(doc, cfg, args.dry_run)
            except KgError as exc:  # a daemon started meanwhile
                raise CommandError(exc.message)
    except CommandError as exc:
        warn(str(exc))
        return 1
    say("%s %s into %s (through %s):" % ("would import" if args.dry_run else "imported", args.file, cfg["root"],
                                         mode))
    for t in tallies:
        say("  " + t.line())
    if args.dry_run:
        say("dry run: nothing was changed")
    return 0
