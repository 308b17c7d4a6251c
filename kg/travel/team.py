"""The team's `.kg/` folder plugged into the store (contract section 9): load, pickup, export, share.

The store knows nothing of `.kg/`: the wiring (kg/serve/app.py, and `kgd share` run without a
daemon) calls install(store), which hooks a TeamFolder into the store's load and close steps as
the personal remote is hooked into its change listeners. Rules owned here:
- A loaded project whose root holds `.kg/nodes.jsonl` or `.kg/edges.jsonl` is shared, unless its
  personal setting says `kgd share --off`; Graph.shared then says so. Its files are read and
  parsed before the store's lock (kg/travel/team_prepared.py, from the registry's warm step):
  under it a load only reconciles and applies, as a pickup does. A hostile `.kg/` never keeps
  the project from loading.
- Pickup: a cheap stat (mtime_ns, size, inode) of both files on the maintenance beat; a change
  by anything but kgd (pull, merge, checkout, an editor) is synced at the next beat, and a
  loaded project whose repository gained a `.kg/` (a pull brought it) becomes shared.
- Knowledge a person had in a project's graph before its `.kg/` first arrived (a pull, a clone)
  stays personal (`_unpublished`, never written there) until that person runs `kgd share`, which
  publishes it and says how many nodes; a pull never publishes anything.
- At shutdown every shared project's pending changes are written, unless git is busy there.
- Knowledge not yet committed (contract 9: `kgd show`, the viewer and `kgd status` mark or count
  it): what this clone wrote to files under `.kg/` (team_state's `own`) that HEAD does not hold.
  Which files HEAD holds is asked of git (`git ls-tree`) on the beat, only when HEAD moved, never
  on a read: a read looks the answer up (pending()).
- Never called with the store's lock held, except at load (a fresh Shared nobody else holds).
"""

import logging
import os
import time

from ..core import team_state
from ..core.errors import BadInput
from ..memory.projects import resolve_project_root
from .team_folder import GIT_TIMEOUT, KG_DIR, ensure_layout, head_signature, holds_kg, kg_dir, own_file_path
from .team_prepared import Prepared
from .team_sync import Shared

log = logging.getLogger(__name__)

ASK_AGAIN_S = 60.0  # seconds before git, once failing, is asked again which files HEAD holds


def install(store):
    """Plug the team folder into a store not opened yet; returns the store."""
    team = TeamFolder(store)
    store.registry.before_load = team.prepared.warm
    store.registry.on_load = team.attach
    store.closing.append(team.export)
    store.team = team
    return store


class TeamFolder:
    """The `.kg/` side of every project one store loads (see the module docstring)."""

    def __init__(self, store):
        self.store = store
        self.prepared = Prepared()  # a project's .kg/ is parsed before the lock, at its first load
        self.committed = {}  # root -> (HEAD's signature, the layout files HEAD holds or None: unknown, when)

    def attach(self, durable):
        """At a project's load (lock held): its repository holds `.kg/` -> it is shared and loaded
        from there, unless this person turned sharing off for it. Never fails the load."""
        g = durable.graph
        if durable.shared is not None or g.level != "project" or not g.path_known:
            return
        if team_state.is_off(g.meta) or not holds_kg(durable.project_path):
            return
        durable.shared = self.prepared.take(durable) or Shared(durable)
        g.shared = True
        try:
            state = team_state.state(g.meta)
            if not state.get("joined"):
                synced = any(state[s][k] for s in ("base", "own") for k in ("node", "edge"))  # round 3's
                self._keep_personal(durable, joined=True, mark=not synced)
            durable.shared.sync(self.store)
        except Exception:  # a hostile .kg/ must never keep the project from loading
            log.exception("could not load %s; the project is served from kgd's own copy", durable.shared.dir)

    def _keep_personal(self, durable, publish=False, joined=False, mark=True):
        """Mark (or, publishing, unmark) the graph's nodes as not published, and with `joined`
        record that the graph is shared here from now on (so a restart never marks what was
        written since); returns the count changed."""
        g = durable.graph
        nodes = [dict(n) for n in g.nodes.values() if bool(n.get("_unpublished")) == publish] if mark else []
        for n in nodes:
            if publish:
                n.pop("_unpublished", None)
            else:
                n["_unpublished"] = True
        if nodes or joined:
            rec = {"op": "shared", "nodes": nodes, "meta": {"joined": True} if joined else {}}
            with self.store.writes.writing(None, lenient=(logging.ERROR, "could not mark knowledge personal")) as w:
                self.store.writes.change(w, durable, [rec], lambda g: team_state.apply(g, rec), counted=False,
                                         compact=False)
            if not publish:
                log.info("%s: %d node(s) you had before .kg/ arrived stay personal until `kgd share`",
                         durable.project_path, len(nodes))
        return len(nodes)

    def poll(self):
        """The beat: sync a shared project whose files changed; share a loaded project whose
        repository gained a `.kg/` (a pull brought it)."""
        store = self.store
        with store.lock:
            durables = list(store.registry.projects.values())
        for d in durables:
            try:
                if d.shared is None:
                    if d.graph.path_known and not team_state.is_off(d.graph.meta) and holds_kg(d.project_path):
                        self.prepared.warm(d.project_path)  # read and parsed before the lock
                        with store.lock:
                            self.attach(d)
                else:
                    if d.shared.unwritten or d.shared.changed_on_disk():
                        d.shared.sync(store, blocking=False)
                    self.refresh_committed(d.project_path)
            except Exception:
                log.exception("sync of %s failed; retrying at the next beat", d.project_path)

    def export(self):
        """Write every shared project's pending changes (at shutdown)."""
        with self.store.lock:
            durables = [d for d in self.store.registry.projects.values() if d.shared is not None]
        for d in durables:
            try:
                if d.shared.busy(time.time()) is None:  # git is working there: the next start writes it
                    log.info("%s not written at shutdown: git is busy in that checkout", d.shared.dir)
                    continue
                d.shared.sync(self.store)
            except Exception:
                log.exception("could not write %s at shutdown; kgd's own copy keeps every change", d.shared.dir)

    def share(self, project_path, off=False):
        """`kgd share [--off]` in the daemon: write the graph under `<root>/.kg/` now (layout files
        included), or stop reading and writing there (the graph keeps what it had)."""
        store = self.store
        root = resolve_project_root(project_path)
        if not os.path.exists(os.path.join(root, ".git")):
            raise BadInput("%s is not inside a git working tree; `kgd share` needs one (git init first)." % root)
        store.registry.warm(project_path=root)  # git (the project's identity) never runs under the lock
        durable = store.registry.project(root)
        g = durable.graph
        with store.writes.writing(None) as w:
            if off != team_state.is_off(g.meta):
                rec = {"op": "shared", "meta": {"off": bool(off)}}
                store.writes.change(w, durable, [rec], lambda g: team_state.apply(g, rec), counted=False,
                                    compact=False)
            if off:
                durable.shared, g.shared = None, False
            elif durable.shared is None:
                durable.shared, g.shared = Shared(durable), True
        published = 0
        if not off:
            published = self._keep_personal(durable, publish=True, joined=True)
            try:
                ensure_layout(root)
            except OSError as exc:
                raise BadInput("could not create %s: %s" % (kg_dir(root), exc.strerror or exc)) from None
            durable.shared.sync(store, force=True)
            self.refresh_committed(root)
            if durable.shared.last_error:
                raise BadInput(durable.shared.last_error)
        with store.lock:
            out = describe(durable, self)
        out["project_path"] = root
        out["published"] = published  # nodes kept personal since .kg/ arrived, published now
        return out


    def refresh_committed(self, root):
        """Which layout files HEAD holds, asked of git only when HEAD moved (never under the lock);
        git failing (missing, slow) is asked again after ASK_AGAIN_S, so the beat never waits on it
        each time."""
        head = head_signature(root)
        got = self.committed.get(root)
        now = time.monotonic()
        if got is None or got[0] != head or (got[1] is None and now - got[2] >= ASK_AGAIN_S):
            self.committed[root] = (head, committed_files(root), now)

    def pending(self, durable):
        """uncommitted() of a shared project from the last answer of git, or None (not shared,
        or git not asked yet / could not say). Lock held: dict look-ups only."""
        if durable.shared is None:
            return None
        got = self.committed.get(durable.project_path)
        if got is None or got[1] is None:
            return None
        return uncommitted(durable.graph, got[1], durable.project_path)

    def node_pending(self, durable, nid):
        """Is node `nid` of a shared project changed here and not yet committed (a look-up; None: unknown)."""
        if durable.shared is None:
            return None
        got = self.committed.get(durable.project_path)
        if got is None or got[1] is None:
            return None
        return nid in uncommitted(durable.graph, got[1], durable.project_path, only=nid)["node"]


def committed_files(root):
    """The absolute paths of the files under `.kg/` that HEAD holds: an empty set before the first
    commit, None when git cannot say (no git, a timeout, not a repository)."""
    from ..memory import git_runner  # subprocess: on the beat or in a command, never on a read

    try:
        code, out, _ = git_runner.run(["ls-tree", "-r", "-z", "--name-only", "HEAD", "--", KG_DIR], root,
                                      timeout=GIT_TIMEOUT, check=False)
        if code != 0:
            code, _, _ = git_runner.run(["rev-parse", "--verify", "-q", "HEAD"], root, timeout=GIT_TIMEOUT,
                                        check=False)
            return set() if code == 1 else None  # no commit yet: nothing is committed
    except git_runner.GitError:
        return None
    return {os.path.join(root, p) for p in out.split("\0") if p}


def uncommitted(g, committed, root, only=None):
    """{"node": ids, "deleted": ids, "edge": keys}: what this clone wrote to files under `.kg/`
    that HEAD does not hold (`git add .kg && git commit` publishes it), sorted. Private and
    not-yet-published nodes are personal, never listed (they are not in `.kg/` at all). Reads
    the sync state without changing it. `only`: that node id alone (a look-up)."""
    s = g.meta.get(team_state.META)
    own = s.get("own") if isinstance(s, dict) else None
    out, in_head = {"node": [], "deleted": [], "edge": []}, {}  # in_head: file name -> HEAD holds it
    if not isinstance(own, dict):
        return out
    for kind in team_state.KINDS if only is None else ("node",):
        entries = own.get(kind)
        if not isinstance(entries, dict):
            continue
        if only is not None:
            entries = {only: entries[only]} if only in entries else {}
        for key, value in entries.items():
            name, tomb = team_state.own_file(value)
            if name is None:
                continue
            done = in_head.get(name)
            if done is None:
                done = in_head[name] = own_file_path(root, name) in committed
            if done:
                continue
            if kind == "edge":
                out["edge"].append(key)
                continue
            node = g.nodes.get(key)
            if node is None:
                if tomb is not None:
                    out["deleted"].append(key)
            elif not (node.get("_private") or node.get("_unpublished")):
                out["node"].append(key)
    for v in out.values():
        v.sort()
    return out


def describe(durable, team=None):
    """What `kgd show`, the viewer and /api/graph say about sharing (lock held): with `team`, also
    how much of this clone's knowledge is not yet committed (counts; None while unknown)."""
    g = durable.graph
    if durable.shared is None:
        return {"shared": False, "off": team_state.is_off(g.meta)}
    s = durable.shared
    base = team_state.state(g.meta)["base"]
    out = {"shared": True, "kg_dir": s.dir, "nodes": len(base["node"]), "edges": len(base["edge"]),
           "problems": list(s.problems), "error": s.last_error}
    pend = team.pending(durable) if team is not None else None
    if pend is not None:
        out["uncommitted"] = counts(pend)
    return out


def counts(pend):
    """{"nodes", "deleted", "edges"} counts of an uncommitted() answer."""
    return {"nodes": len(pend["node"]), "deleted": len(pend["deleted"]), "edges": len(pend["edge"])}
