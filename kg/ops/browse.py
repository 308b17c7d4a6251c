"""`kgd show` and `kgd search`: the memory as an agent sees it, from a terminal.

Rules owned here:
- `show` without ids prints what a full kg_read by an agent working in the folder would read
  (render.render_read over the active nodes of both levels); with ids, the nodes in full
  (render.render_nodes). `search` prints kg_search's ranking and text (search.rank_corpora,
  render.render_search) over the user graph and the folder's project graph.
- Through the daemon that holds the root when one answers (REST: GET /api/graph, /api/nodes,
  /api/search; no session is started, and a node shown by id counts as read, as kg_read id=).
  Otherwise from the files, read-only: no root lock taken, nothing written, nothing promoted.
  Neither creates a project graph for a folder that has none (`kgd search` in a plain folder
  searches the user graph), except that a repository holding `.kg/` is loaded as a session would.
- `show` also says, on stderr (stdout stays exactly what the agent reads), whether the project's
  knowledge is shared in its repository's `.kg/` (contract 9) or personal, and names the nodes
  this clone changed there that are not yet committed (`git add .kg && git commit` publishes them).
- Stale marks (contract 12) are the agent's: through the daemon they are its marks; from the files,
  one pass of kg/memory/stale_marks.py judges the graphs read (git may run: this is a command).
"""

import os
import threading
import time
from types import SimpleNamespace
from urllib.parse import quote

from ..api import render
from ..core import model, team_state
from ..core import search as ranking
from ..core.errors import KgError
from ..core.graph import graph_from_obj
from ..disk.layout import Layout
from ..memory.projects import resolve_project_root
from .client import Api, connect_host, find_daemon, get_json
from .console import CommandError, plural, say, warn
from .disk_view import project_graphs, snapshot_graph

NO_SESSION = "(none: kgd show reads without starting a session)"


def _project_root(folder):
    try:
        return resolve_project_root(folder)
    except KgError as exc:
        raise CommandError(exc.message)


def _live(cfg):
    """An Api to the daemon holding cfg's root, or None (then the files are read)."""
    found = find_daemon(cfg)
    if not found or not found["holds_root"]:
        return None
    return Api(connect_host(cfg), found["port"], cfg.get("token"), timeout=30)


def _graph_from_rest(view, level, project_path=None):
    """A REST graph view (public nodes with state and times) as a Graph, for the same figures;
    its stale marks and the ids not yet committed ride along (g.stale, g.uncommitted)."""
    nodes, stale, pending = {}, {}, set()
    for n in view.get("nodes") or []:
        if n.get("stale"):
            stale[n["id"]] = n["stale"]
        if n.get("uncommitted"):
            pending.add(n["id"])
        ts = n.get("updated_ts")
        nodes[n["id"]] = {"id": n["id"], "gist": n.get("gist", ""), "notes": n.get("notes") or [],
                          "touches": n.get("touches") or [], "_created_ts": n.get("created_ts"), "_write_ts": ts,
                          "_archived": n.get("state") != model.ACTIVE,
                          "_orphaned_ts": (ts or 1.0) if n.get("state") == model.ORPHANED else None}
    g = graph_from_obj({"nodes": nodes, "edges": view.get("edges") or []}, level, project_path)
    g.sharing = view.get("sharing")
    g.stale = stale
    g.uncommitted = pending if (g.sharing or {}).get("uncommitted") is not None else None
    return g


class _FilesStore:
    """As much of a store as the stale-marks pass needs, over graphs read from the files."""

    def __init__(self, graphs):
        self.lock = threading.RLock()
        self.log = SimpleNamespace(seq=0)
        self.clock = time.time
        self.registry = SimpleNamespace(durables=lambda: [SimpleNamespace(graph=g) for g in graphs])


def judge_files(graphs):
    """Give graphs read from the files (no daemon) their stale marks, {id: "stale"} as g.stale;
    returns {root: why some marks say less} (git missing, slow, ...)."""
    from ..memory.stale_marks import Watcher

    graphs = [g for g in graphs if g is not None]
    watcher = Watcher(_FilesStore(graphs))
    watcher.refresh()
    for g in graphs:
        g.stale = {nid: m.public for nid, m in watcher.marks.valid(g).items()}
    return dict(watcher.problems)


def pending_files(project, root):
    """The ids of a shared project (read from the files) this clone changed in `.kg/` and has not
    committed: project.uncommitted (None when not shared or git cannot say)."""
    from ..travel import team
    from ..travel.team_folder import holds_kg

    if project is None:
        return
    project.uncommitted = None
    if team_state.is_off(project.meta) or not holds_kg(root):
        return
    committed = team.committed_files(root)
    if committed is not None:
        pend = team.uncommitted(project, committed, root)
        project.uncommitted = set(pend["node"])
        project.uncommitted_counts = team.counts(pend)


def sharing_line(project, root):
    """One line: is this project's knowledge shared in the repository, or personal."""
    from ..travel.team_folder import holds_kg, kg_dir

    info = getattr(project, "sharing", None)
    if info is None:  # from the files: the daemon is not running
        meta = project.meta if project is not None else {}
        nodes = len(project.nodes) if getattr(project, "shared", False) else len(
            team_state.state(dict(meta))["base"]["node"])
        info = {"shared": not team_state.is_off(meta) and holds_kg(root), "off": team_state.is_off(meta),
                "kg_dir": kg_dir(root), "nodes": nodes}
    if info.get("shared"):
        return ("project graph: shared in %s (%s); what you read and archive stays personal"
                % (info.get("kg_dir") or kg_dir(root), plural(info.get("nodes", 0), "node")))
    if info.get("off"):
        return "project graph: personal (sharing turned off here with `kgd share --off`)"
    if not os.path.exists(os.path.join(root, ".git")):
        return None  # not a repository: nothing to share through
    return "project graph: personal (`kgd share` shares it with the team through the repository)"


def uncommitted_line(ids, counts=None, limit=10):
    """One line naming this clone's knowledge not yet committed, or None when there is none."""
    counts = counts or {"nodes": len(ids), "deleted": 0, "edges": 0}
    parts = [plural(counts["nodes"], "node")] if counts["nodes"] else []
    if counts.get("deleted"):
        parts.append("%d deleted" % counts["deleted"])
    if counts.get("edges"):
        parts.append(plural(counts["edges"], "edge"))
    if not parts:
        return None
    names = sorted(ids)
    shown = ": " + ", ".join(names[:limit]) + (" and %d more" % (len(names) - limit) if len(names) > limit else "") \
        if names else ""
    return "not yet committed: %s%s (`kgd diff` lists them; `git add .kg && git commit` publishes)" % (
        ", ".join(parts), shown)


def _graphs(cfg, api, root):
    """(user Graph, project Graph or None, max_tokens) for the project rooted at root."""
    if api is not None:
        view = get_json(api, "/api/graph?project_path=" + quote(root, safe=""))
        project = view.get("project")
        return (_graph_from_rest(view["user"], "user"),
                _graph_from_rest(project, "project", root) if project else None,
                view["user"].get("max_tokens") or cfg["max_tokens"])
    layout = Layout(cfg["root"])
    user = snapshot_graph(layout.user_file, "user")
    project = next((g for _, g in project_graphs(layout) if g.project_path == root), None)
    if project is None:
        from ..travel.team_folder import holds_kg, snapshot

        if holds_kg(root):  # a clone whose .kg/ no session has opened yet: what the first one will read
            project = snapshot(root)
    else:
        pending_files(project, root)
    judge_files([user, project])
    return user, project, cfg["max_tokens"]


def _read_view(g):
    """One level as kg_read shows it: active nodes (stale ones marked), their recency, archived ids,
    counted edges."""
    if g is None:
        return {"nodes": [], "recency": {}, "archived": [], "edges": [], "tokens": 0}
    nodes = sorted((g.nodes[nid] for nid in g.visible(model.ACTIVE)), key=lambda n: n["id"])
    stale = getattr(g, "stale", None) or {}
    public = [model.public_node(n) for n in nodes]
    for item in public:
        if item["id"] in stale:
            item["stale"] = stale[item["id"]]
    return {"nodes": public, "recency": {n["id"]: model.recency(n) for n in nodes},
            "archived": sorted(g.by_state[model.ARCHIVED]),
            "edges": [model.public_edge(g.edges[k]) for k in sorted(g.counted_edges) if g.edge_shown(k, g.edges[k])],
            "tokens": g.tokens}


def _node_items(graphs, ids):
    out, missing = [], []
    for nid in dict.fromkeys(ids):
        hits = [g for g in graphs if g is not None and nid in g.nodes and g.shown(nid)]  # no credential
        for g in hits:
            item = g.node_in_full(nid)
            if nid in (getattr(g, "stale", None) or {}):
                item["stale"] = g.stale[nid]
            if nid in (getattr(g, "uncommitted", None) or ()):
                item["uncommitted"] = True
            out.append(item)
        if not hits:
            missing.append(nid)
    return {"nodes": out, "missing": missing}


def _live_nodes(api, root, ids):
    out, missing = [], []
    for nid in dict.fromkeys(ids):
        hit = False
        for level in ("user", "project"):
            path = "/api/nodes/%s/%s?project_path=%s" % (level, quote(nid, safe=""), quote(root, safe=""))
            code, obj = api.json("GET", path)
            if code == 200 and isinstance(obj, dict):
                obj.setdefault("level", level)
                out.append(obj)
                hit = True
            elif code != 404:
                get_json(api, path)  # raises with the daemon's reason
        if not hit:
            missing.append(nid)
    return {"nodes": out, "missing": missing}


def show(args, cfg):
    root = _project_root(os.path.abspath(args.cwd or os.getcwd()))
    api = _live(cfg)
    try:
        if args.ids:
            for nid in args.ids:
                try:
                    model.check_id(nid, "each id")
                except KgError as exc:
                    raise CommandError(exc.message)
            if api is not None:
                result = _live_nodes(api, root, args.ids)
            else:
                user, project, _ = _graphs(cfg, None, root)
                result = _node_items([user, project], args.ids)
            line = uncommitted_line([n["id"] for n in result["nodes"] if n.get("uncommitted")])
            if line:
                warn(line)
            say(render.render_nodes(result))
            return 0 if result["nodes"] else 1
        user, project, max_tokens = _graphs(cfg, api, root)
    finally:
        if api is not None:
            api.close()
    result = {"session_id": NO_SESSION, "project_path": root, "user": _read_view(user), "project": _read_view(project)}
    for line in (sharing_line(project, root), _pending_line(project)):
        if line:
            warn(line)
    say(render.render_read(result, max_tokens))
    return 0


def _pending_line(project):
    pending = getattr(project, "uncommitted", None)
    if pending is None:
        return None
    counts = getattr(project, "uncommitted_counts", None) or (getattr(project, "sharing", None) or {}).get(
        "uncommitted")
    return uncommitted_line(pending, counts)


def search(args, cfg):
    query = " ".join(args.words).strip()
    if not query or len(query) > 1000:
        raise CommandError("give a few words to look for (at most 1000 characters)")
    if not 1 <= args.limit <= 200:
        raise CommandError("--limit must be from 1 to 200")
    root = _project_root(os.path.abspath(args.cwd or os.getcwd()))
    api = _live(cfg)
    if api is not None:
        try:
            from ..travel.team_folder import holds_kg

            if holds_kg(root):  # a clone whose .kg/ no session opened yet: the graph view loads it
                get_json(api, "/api/graph?project_path=" + quote(root, safe=""))
            result = get_json(api, "/api/search?q=%s&project_path=%s&limit=%d" % (
                quote(query, safe=""), quote(root, safe=""), args.limit))
        finally:
            api.close()
    else:
        user, project, _ = _graphs(cfg, None, root)
        graphs = [g for g in (user, project) if g is not None]
        corpora = [ranking.Corpus((g, n) for n in g.visible_nodes().values()) for g in graphs]  # no credential
        rows = []
        for score, g, node in ranking.rank_corpora(query, corpora, args.limit):
            item = model.public_node(node)
            item.update({"level": g.level, "score": score})
            if node["id"] in (getattr(g, "stale", None) or {}):
                item["stale"] = g.stale[node["id"]]
            if g.level == "project":
                item["project_path"] = g.project_path
            rows.append(item)
        result = {"results": rows}
    say(render.render_search(result, query, project_path=root, asked=args.limit))
    return 0
