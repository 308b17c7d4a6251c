"""`kgd status`, `kgd start`, `kgd stop`: is the daemon serving a storage root, and starting or
stopping it. Rules owned here: `status` exits 0 only when the daemon answers and lets it list the
graphs (a missing or wrong token is one clear line and exit 1); `stop` signals the process named
by the lock file (SIGTERM: it finishes in-flight requests and flushes) and waits for the lock to
be released; it never signals a `kgd import` holding the root. `start` and `status` for a root
whose port is answered by a daemon serving another root refuse in one line (exit 1), naming that
root (when this user can see it) and `--port`. A port another program holds is named with its
program by `start` (kg/ops/client.py ensure_daemon) and `status`.
"""

import json
import os
import signal
import time

from . import sync
from .client import LOG_NAME, Api, connect_host, ensure_daemon, find_daemon, get_json, root_lock
from .console import CommandError, plural, say, warn


def _age(seconds):
    seconds = int(seconds or 0)
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm" % (seconds // 60)
    if seconds < 172800:
        return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
    return "%dd" % (seconds // 86400)


def _user_counts(graph):
    states = [n.get("state") for n in graph.get("nodes") or []]
    return {"nodes": len(states), "active": states.count("active"), "archived": states.count("archived"),
            "orphaned": states.count("orphaned"), "edges": len(graph.get("edges") or [])}


def _counts_line(c):
    return "%s (%d active, %d archived, %d orphaned), %s" % (
        plural(c.get("nodes", 0), "node"), c.get("active", 0), c.get("archived", 0), c.get("orphaned", 0),
        plural(c.get("edges", 0), "edge"))


def _marks(p):
    """", 2 stale" after a project's counts when the code some of its nodes touch changed (contract 12)."""
    return ", %d stale" % p["stale"] if p.get("stale") else ""


def uncommitted_line(p):
    """"shared project app: 3 changes not yet committed (2 nodes, 1 deleted) ..." for a shared
    project where this clone wrote knowledge to `.kg/` that HEAD does not hold (contract 9)."""
    c = p.get("uncommitted") or {}
    total = sum(c.get(k, 0) for k in ("nodes", "deleted", "edges"))
    if not total:
        return None
    parts = [plural(c[k], word) if k != "deleted" else "%d deleted" % c[k]
             for k, word in (("nodes", "node"), ("deleted", ""), ("edges", "edge")) if c.get(k)]
    return "shared project %s: %s not yet committed (%s); `kgd diff` lists them, `git add .kg && git commit` " \
        "publishes" % (p.get("slug"), plural(total, "change"), ", ".join(parts))


def _pending_on_disk(root):
    """With no daemon: the shared projects of the root's graphs where this clone wrote knowledge that
    HEAD does not hold ({slug, project_path, uncommitted}); git is asked once per project."""
    if not os.path.isdir(root):
        return []
    from ..core import team_state
    from ..disk.layout import Layout
    from ..travel import team
    from ..travel.team_folder import holds_kg
    from .disk_view import project_graphs

    out = []
    for slug, g in project_graphs(Layout(root)):
        if not g.project_path or team_state.is_off(g.meta) or not holds_kg(g.project_path):
            continue
        committed = team.committed_files(g.project_path)
        if committed is not None:
            counts = team.counts(team.uncommitted(g, committed, g.project_path))
            if any(counts.values()):
                out.append({"slug": g.slug or slug, "project_path": g.project_path, "uncommitted": counts})
    return out


def other_root(cfg, found):
    """The one line for a daemon on cfg's port that serves another storage root (None: it is ours)."""
    if found["holds_root"]:
        return None
    from .port_owner import kgd_root, owner

    who = owner(found["port"])
    theirs = kgd_root(who["pid"]) if who else None
    return ("the kgd on port %d serves another storage root%s, not %s; give this root its own port "
            "(kgd start --root %s --port N) or stop that daemon (kgd stop --root %s)" % (
                found["port"], " (%s)" % theirs if theirs else "", cfg["root"], cfg["root"], theirs or "THAT_ROOT"))


def status(args, cfg):
    found = find_daemon(cfg)
    refusal = other_root(cfg, found) if found else None
    if refusal:
        if args.json:
            say(json.dumps({"running": False, "root": cfg["root"], "port": found["port"], "error": refusal}))
            return 1
        raise CommandError(refusal)
    if not found:
        held, pid, lock_port, _ = root_lock(cfg)
        out = {"running": False, "root": cfg["root"], "port": cfg["port"]}
        if held:
            out.update(pid=pid, port=lock_port)
            text = "kgd (pid %s) holds root %s but does not answer on port %s" % (pid, cfg["root"], lock_port)
        else:
            text = "kgd is not running (root %s, port %s); start it with `kgd start` or `kgd`" % (
                cfg["root"], cfg["port"])
            if cfg["port"]:
                from .port_owner import port_free, taken_line

                if not port_free(cfg["host"], cfg["port"]):
                    out["port_taken"] = taken_line(connect_host(cfg), cfg["port"])
                    text = "kgd is not running (root %s); %s" % (cfg["root"], out["port_taken"])
        pending = _pending_on_disk(cfg["root"])
        if pending:
            out["projects"] = pending
            text = "\n".join([text] + [uncommitted_line(p) for p in pending])
        remote = sync.offline_status(cfg["root"])
        if remote:
            out["remote"] = remote
            text = "\n".join([text] + sync.describe(remote))
        say(json.dumps(out) if args.json else text)
        return 1
    port, h = found["port"], found["health"]
    api = Api(connect_host(cfg), port, cfg.get("token"), timeout=10)
    try:
        projects = get_json(api, "/api/projects").get("projects") or []
        user = _user_counts(get_json(api, "/api/graph").get("user") or {})
        remote = sync.live_status(api)
    finally:
        api.close()
    out = {"running": True, "version": h.get("version"), "url": "http://%s:%d/" % (connect_host(cfg), port),
           "port": port, "pid": found["pid"], "root": cfg["root"],
           "uptime_s": h.get("uptime_s"), "sessions": h.get("sessions"), "graphs_loaded": h.get("graphs_loaded"),
           "user": user, "projects": projects, "remote": remote}
    if args.json:
        say(json.dumps(out))
        return 0
    say(
        "kgd %s is running at %s%s, up %s"
        % (out["version"], out["url"], " (pid %s)" % found["pid"] if found["pid"] else "", _age(out["uptime_s"]))
    )
    say("root:     %s" % cfg["root"])
    say("sessions: %s live" % out["sessions"])
    say("graphs:   %s loaded (user + projects in use)" % out["graphs_loaded"])
    say("user:     %s" % _counts_line(user))
    say("projects: %s on disk%s" % (len(projects) or "none", ":" if projects else ""))
    for p in projects:
        say("  %-24s %s  %s%s" % (p.get("slug"), p.get("project_path"), _counts_line(p), _marks(p)))
    for p in projects:
        line = uncommitted_line(p)
        if line:
            say(line)
    for line in sync.describe(remote):
        say(line)
    return 0


def start(args, cfg):
    found = find_daemon(cfg)
    refusal = other_root(cfg, found) if found else None
    if refusal:
        raise CommandError(refusal)
    port, proc = ensure_daemon(cfg, timeout=args.timeout)
    host = connect_host(cfg)
    if proc is None:
        say("kgd is already running at http://%s:%d/" % (host, port))
    else:
        say("kgd started at http://%s:%d/ (pid %d, log %s)" % (host, port, proc.pid,
                                                             os.path.join(cfg["root"], LOG_NAME)))
    return 0


def stop(args, cfg):
    held, pid, port, note = root_lock(cfg)
    if not held:
        say("kgd is not running on root %s" % cfg["root"])
        return 0
    if pid is None:
        raise CommandError("%s/kgd.lock is held but names no pid; find the process with `fuser %s/kgd.lock`" % (
            cfg["root"], cfg["root"]))
    if " import" in note:
        raise CommandError("`kgd import` (pid %d) holds root %s, not a daemon; let it finish" % (pid, cfg["root"]))
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise CommandError("the lock names pid %d but no such process is visible here (another container or PID "
                           "namespace?); stop it where it runs" % pid)
    except PermissionError:
        raise CommandError("not allowed to signal pid %d (another user's daemon?)" % pid)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not root_lock(cfg)[0]:
            say("kgd (pid %d%s) stopped; root %s is flushed" % (pid, ", port %d" % port if port else "", cfg["root"]))
            return 0
        time.sleep(0.05)
    warn("kgd (pid %d) did not stop within %.0f s; it may still be flushing. `kill -9 %d` forces it "
         "(acknowledged writes are safe in the journal)" % (pid, args.timeout, pid))
    return 1
