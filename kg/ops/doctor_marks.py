"""`kgd doctor`'s look at the stale marks (contract section 12): where they could not be judged, and why.

Rules owned here: marks are best effort, so nothing here is a problem (exit 1), only a warning with
its fix: git missing, refusing (a repository owned by someone else), slow or timing out where a
project's nodes record a commit (the marks then name no renames and no commits); a touched file
that cannot be read again (permission, over the size limit), whose nodes are not judged at all; what
the running daemon's pass recorded (its /api/projects `stale_problem`). A project in a plain folder is
fine: its marks are judged by the files themselves. It reads and probes, never changes anything.
"""

import os
import shutil

from ..core import staleness
from ..memory import file_states

GIT_PROBE_S = 5.0  # the pass gives git 10 s a call; a probe slower than this is worth saying
NAMED = 3          # files named per warning


def _unreadable(root, user, rec):
    """[(touch path, why)] of the recorded touches of one node that cannot be read again."""
    out = []
    for touch, state in (rec.get("files") or {}).items():
        path, _ = staleness.split_touch(touch)
        if path is None or not isinstance(state, dict) or (user and not os.path.isabs(path)):
            continue
        full = file_states.resolve(None if user else root, path)
        key = file_states.stat_key(full) if full else False
        if key is None:
            out.append((path, "cannot be read (permission?)"))
        elif key and "id" in state and key[0] > staleness.HASH_MAX:
            out.append((path, "over %d MiB, too large to read again" % (staleness.HASH_MAX >> 20)))
        elif key and "id" in state and not os.access(full, os.R_OK):
            out.append((path, "not readable by this user"))
    return out


def _probe_git(rep, root):
    """Can git answer in this checkout, and fast? Warns otherwise; True when it can."""
    from ..memory import git_runner

    try:
        code, _, err = git_runner.run(["rev-parse", "--verify", "-q", "HEAD"], root, timeout=GIT_PROBE_S, check=False)
    except git_runner.GitError as exc:
        rep.warn("%s: git did not answer for the stale marks (%s): they name no renames and no commits" % (
            root, exc.message), "make `git -C %s status` work (it must answer within %.0f s)" % (root, GIT_PROBE_S))
        return False
    if code not in (0, 1):
        why = git_runner.summary(err)
        fix = ("trust it: git config --global --add safe.directory %s" % root if "safe.directory" in err
               else "make `git -C %s rev-parse HEAD` work" % root)
        rep.warn("%s: git refuses to run there (%s): stale marks name no renames and no commits" % (root, why), fix)
        return False
    return True


def check(rep, graphs, live_projects=None):
    """graphs: [(label, Graph)] read from the storage root; live_projects: the daemon's /api/projects
    list when one answers."""
    said = 0
    for p in live_projects or ():
        if p.get("stale_problem"):
            said += 1
            where = p.get("project_path") or p.get("slug")
            rep.warn("project %s: the stale marks cannot say what git knows (renames, commits since): %s" % (
                where, p["stale_problem"]), "make `git -C %s log -1` work; the marks say it again once git answers"
                % where)
    git = shutil.which("git")
    for label, g in graphs:
        user = g.level == "user"
        root = None if user else g.project_path
        recs = [n["_files"] for n in g.nodes.values() if isinstance(n.get("_files"), dict)]
        if not recs:
            continue
        if root and not os.path.isdir(root):
            said += 1
            rep.warn("%s: the folder is not here, so the stale marks of its %d nodes are not judged" % (
                label, len(recs)), "open the project where it lives, or delete the graph if the project is gone")
            continue
        with_commit = [r for r in recs if isinstance(r.get("commit"), str)]
        gdir = file_states.git_dir(root) if root else None
        if with_commit and gdir:
            if git is None:
                said += 1
                rep.warn("%s: git is not on PATH, so the stale marks name no renames and no commits" % label,
                         "install git (the marks still tell a changed or deleted file)")
            elif not _probe_git(rep, root):
                said += 1
            elif os.path.exists(os.path.join(gdir, "shallow")):
                said += 1
                rep.warn("%s: a shallow clone: a mark may not say how many commits ago its file changed" % label,
                         "git fetch --unshallow (optional)")
        files, nodes = {}, 0
        for rec in recs:
            found = _unreadable(root, user, rec)
            nodes += bool(found)
            files.update(found)
        if files:
            said += 1
            names = sorted(files)
            rep.warn("%s: %d touched file(s) cannot be read, so %d node(s) are not judged for staleness: %s" % (
                label, len(names), nodes, "; ".join("%s %s" % (n, files[n]) for n in names[:NAMED])
                + (" and %d more" % (len(names) - NAMED) if len(names) > NAMED else "")),
                "let this user read them (chmod u+r FILE), or drop them from those nodes' touches")
    if not said:
        rep.ok("stale marks: every touched file can be judged")


def check_root(rep, cfg, found):
    """check() over the graphs of cfg's storage root, with what the daemon (`found`) recorded."""
    from ..disk.layout import Layout
    from .disk_view import project_graphs, snapshot_graph

    if not os.path.isdir(cfg["root"]):
        return
    layout = Layout(cfg["root"])
    graphs = [("user graph", snapshot_graph(layout.user_file, "user"))]
    graphs += [("project %s" % (g.project_path or slug), g) for slug, g in project_graphs(layout)]
    check(rep, graphs, _live_projects(cfg, found))


def _live_projects(cfg, found):
    """The running daemon's /api/projects (what its stale-marks pass recorded), or None."""
    if not found or not found["holds_root"]:
        return None
    from .client import Api, connect_host

    api = Api(connect_host(cfg), found["port"], cfg.get("token"), timeout=10)
    try:
        code, obj = api.json("GET", "/api/projects")
    except Exception:  # a doctor never fails on a daemon that answers badly: its other checks say so
        return None
    finally:
        api.close()
    return obj.get("projects") if code == 200 and isinstance(obj, dict) else None
