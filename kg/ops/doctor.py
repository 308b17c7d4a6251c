"""`kgd doctor`: checks Python, the daemon and its port, the storage root, the service and the
client set-up, and prints a fix for every problem. Rules owned here: what counts as a problem
(exit 1) and what only as a warning; it reads and probes, never changes anything.
"""

import json
import os
import re
import subprocess
import sys
from collections import namedtuple

from .. import __version__
from ..disk.files import DIR_MODE, FILE_MODE
from . import doctor_marks, sync
from .client import LOG_NAME, connect_host, find_daemon, python_executable, root_lock
from .config import DEFAULT_PORT
from .console import CommandError, say
from .disk_view import journal_problem
from .port_owner import named, port_free
from .setup import claude_hooks, settings_file
from .setup.desktop import SERVER_NAME, desktop_config_path, target_os


class Report:
    def __init__(self):
        self.problems = 0
        self.warnings = 0

    def ok(self, what):
        say("ok    %s" % what)

    def warn(self, what, fix=None):
        self.warnings += 1
        say("warn  %s" % what)
        if fix:
            say("      fix: %s" % fix)

    def fail(self, what, fix=None):
        self.problems += 1
        say("FAIL  %s" % what)
        if fix:
            say("      fix: %s" % fix)


def _writable(rep, root):
    """A root (or the folder it will be made in) kgd cannot write to is a problem: every save fails."""
    where = root
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    if os.access(where, os.W_OK):
        return True
    try:
        read_only_fs = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        read_only_fs = False
    what = "storage root %s" % root if where == root else "the folder %s (where kgd would create %s)" % (where, root)
    if read_only_fs:
        rep.fail("%s is on a read-only file system: kgd can save nothing" % what,
                 "mount it read-write, or run kgd with a writable root (--root DIR or KG_STORAGE_ROOT)")
    else:
        rep.fail("%s is not writable by this user: kgd can save nothing" % what,
                 "chmod u+w %s (or chown it to %s), or run kgd with another root (--root DIR or "
                 "KG_STORAGE_ROOT)" % (where, os.environ.get("USER") or os.getuid()))
    return False


def _started_empty(corrupt):
    """Graph files whose main file and .prev were both quarantined: kgd had to start them empty.
    (.prev is read only when the main file is missing or corrupt, so a quarantined .prev means both.)"""
    out = []
    for p in corrupt:
        head = p.split(".corrupt-", 1)[0]
        if head.endswith(".json.prev") and os.path.basename(head)[:-len(".prev")] in ("user.json", "graph.json"):
            out.append(head[:-len(".prev")])
    return sorted(set(out))


def _check_storage(rep, root):
    writable = _writable(rep, root)
    if not os.path.exists(root):
        if writable:
            rep.ok("storage root %s does not exist yet (kgd creates it, mode 0700, on first start)" % root)
        return
    uid = os.getuid()
    bad_modes, foreign, unparsable, corrupt = [], [], [], []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in [None] + files:
            p = folder if name is None else os.path.join(folder, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if st.st_uid != uid:
                foreign.append(p)
            want = DIR_MODE if name is None else FILE_MODE
            if name is not None and os.path.islink(p):
                continue
            if st.st_mode & 0o777 & ~want:
                bad_modes.append((p, st.st_mode & 0o777, want))
            if name is None:
                continue
            if ".corrupt-" in name:
                corrupt.append(p)
            elif name.endswith(".json"):
                obj, _ = _quiet_parse(p)
                if obj is None:
                    unparsable.append(p)
            elif name.endswith(".journal"):
                bad = journal_problem(p)
                if bad:
                    unparsable.append("%s (%s)" % (p, bad))
    if writable:
        rep.ok("storage root %s exists and is writable" % root)
    if foreign:
        rep.fail("%d path(s) under the root belong to another user, e.g. %s" % (len(foreign), foreign[0]),
                 "chown -R %s %s" % (os.environ.get("USER") or uid, root))
    if bad_modes:
        p, mode, want = bad_modes[0]
        rep.fail("%d path(s) readable by others, e.g. %s is %o (want %o)" % (len(bad_modes), p, mode, want),
                 "chmod 700 %s; find %s -type d -exec chmod 700 {} +; find %s -type f -exec chmod 600 {} +"
                 % (root, root, root))
    else:
        rep.ok("modes: folders 0700, files 0600")
    if unparsable:
        rep.fail("%d file(s) do not parse, e.g. %s" % (len(unparsable), unparsable[0]),
                 "kgd moves a bad graph file aside at start and uses its .prev copy; restart kgd, or restore "
                 "from an export with `kgd import`")
    else:
        rep.ok("graph files and journals parse")
    lost = _started_empty(corrupt)
    if lost:
        rep.fail("%s had to start empty: it and its .prev copy were both corrupt (kept as %s.corrupt-* and "
                 ".prev.corrupt-*)%s" % (lost[0], os.path.basename(lost[0]),
                                        " (and %d more graph(s))" % (len(lost) - 1) if len(lost) > 1 else ""),
                 "restore it from your latest export (kgd import FILE), or recover what you can by hand from "
                 "the .corrupt-* files; delete them afterwards (this check looks for them)")
    rest = [p for p in corrupt if p.split(".corrupt-", 1)[0].replace(".prev", "") not in lost]
    if rest:
        rep.warn("%d quarantined file(s) (.corrupt-*), e.g. %s" % (len(rest), rest[0]),
                 "look inside; delete them once you are sure nothing in them is missed")


def _quiet_parse(path):
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
        return (obj, None) if isinstance(obj, dict) else (None, "not an object")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, str(exc)


def _service_file():
    """The user service file kgd's installer writes on this OS, when it exists."""
    home = os.path.expanduser("~")
    if target_os() == "darwin":
        path = os.path.join(home, "Library", "LaunchAgents", "local.kgd.plist")
    else:
        path = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "systemd", "user",
                            "kgd.service")
    return path if os.path.exists(path) else None


def _check_service(rep, port):
    home = os.path.expanduser("~")
    if target_os() == "darwin":
        plist = os.path.join(home, "Library", "LaunchAgents", "local.kgd.plist")
        if not os.path.exists(plist):
            rep.warn("no launchd agent (%s)" % plist, "./install.sh installs one; or start kgd yourself")
            return
        import plistlib
        try:
            with open(plist, "rb") as f:
                p = plistlib.load(f)
            prog = p.get("ProgramArguments") or []
        except Exception as exc:  # plistlib raises several kinds
            rep.fail("%s does not parse: %s" % (plist, exc), "run ./install.sh again")
            return
        missing = [a for a in prog[:2] if os.path.isabs(a) and not os.path.exists(a)]
        if missing:
            rep.fail("the launchd agent runs %s, which does not exist" % missing[0], "run ./install.sh again")
        else:
            rep.ok("launchd agent %s" % plist)
        return
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    unit = os.path.join(base, "systemd", "user", "kgd.service")
    if not os.path.exists(unit):
        if not _user_bus():
            # the installer cannot put a service here either: say what starts kgd instead
            rep.ok("no systemd user service, and no user session here to run one: kgd starts with Claude Code's "
                   "SessionStart hook (kgd hook) or `kgd start`")
            return
        rep.warn("no systemd user service (%s)" % unit, "./install.sh installs one; or start kgd yourself (kgd start)")
        return
    with open(unit, "r", encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = re.search(r"^ExecStart=(.*)$", text, re.M)
    words = m.group(1).split() if m else []
    missing = [w for w in words[:2] if w.startswith("/") and not os.path.exists(w.strip('"'))]
    if missing:
        rep.fail("the service runs %s, which does not exist" % missing[0], "run ./install.sh again")
        return
    if "--port %d" % port not in text:
        rep.warn("the service's ExecStart does not use port %d: %s" % (port, words[2:]),
                 "run ./install.sh --port %d" % port)
    state = _run(["systemctl", "--user", "is-active", "kgd.service"])
    if state is None:
        rep.ok("systemd user unit %s (systemctl unavailable here to check it runs)" % unit)
    elif state == "active":
        rep.ok("systemd user service kgd.service is active")
    else:
        rep.fail("systemd user service kgd.service is %s" % (state or "not active"),
                 "systemctl --user enable --now kgd.service; journalctl --user -u kgd shows why it stopped")


def _user_bus():
    """Can systemctl reach a user instance (a container or a plain SSH session has none)?"""
    try:
        return subprocess.run(["systemctl", "--user", "show-environment"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=5).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _run(argv, timeout=5):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.decode("utf-8", "replace").strip()


McpEntry = namedtuple("McpEntry", "where conf")  # kgd's entry in a client file: "file (scope)", its object


def _check_clients(rep, port):
    """Claude Code's entries for kgd point at this daemon; Claude Desktop's runs programs that exist."""
    url = "http://127.0.0.1:%d/" % port
    found = _claude_code_entries()
    if not found:
        rep.warn("Claude Code has no %r MCP server in ~/.claude.json or ./.mcp.json" % SERVER_NAME,
                 "claude mcp add --transport http --scope user %s %s" % (SERVER_NAME, url))
    for entry in found:
        _tell(rep, *_claude_code_verdict(entry, url))
    _check_desktop(rep)


def _tell(rep, level, what, fix=None):
    """One finding (level "ok", "warn" or "fail") on the report."""
    if level == "ok":
        rep.ok(what)
    else:
        getattr(rep, level)(what, fix)


def _parsed(path):
    """The JSON object in path, or None (missing, unreadable or not an object: kgd reads nothing there)."""
    return _quiet_parse(path)[0] if os.path.exists(path) else None


def _server_entry(servers):
    """kgd's entry in an `mcpServers` object, when both are objects."""
    entry = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def _claude_code_scopes(obj):
    """(scope, mcpServers) of a Claude Code file: the user scope, then each project's."""
    yield "user", obj.get("mcpServers")
    projects = obj.get("projects")
    for proj, pconf in projects.items() if isinstance(projects, dict) else ():
        if isinstance(pconf, dict):
            yield "project " + proj, pconf.get("mcpServers")


def _claude_code_entries():
    """Every kgd entry in ~/.claude.json (user and project scopes) and ./.mcp.json."""
    found = []
    for path in (os.path.join(os.path.expanduser("~"), ".claude.json"), os.path.join(os.getcwd(), ".mcp.json")):
        for scope, servers in _claude_code_scopes(_parsed(path) or {}):
            conf = _server_entry(servers)
            if conf is not None:
                found.append(McpEntry("%s (%s)" % (path, scope), conf))
    return found


def _claude_code_verdict(entry, url):
    """(level, what, fix) for one Claude Code entry: the first rule that matches decides."""
    where, conf = entry
    eurl = conf.get("url") or ""
    add = "claude mcp add --transport http --scope user %s %s" % (SERVER_NAME, url)
    if conf.get("command") and not eurl:
        argv = [str(conf["command"])] + [str(a) for a in conf.get("args") or []]
        return "ok", "Claude Code entry %r in %s runs %s" % (SERVER_NAME, where, " ".join(argv)), None
    if "localhost" in eurl:
        return ("fail", "%s: the %r entry uses localhost (%s), which can resolve to ::1 while kgd listens on "
                "127.0.0.1" % (where, SERVER_NAME, eurl), "use %s" % url)
    if conf.get("type") not in ("http", "streamable-http", None) or not eurl:
        return "warn", "%s: the %r entry is %s" % (where, SERVER_NAME, conf), add
    if eurl.rstrip("/").replace("/mcp", "") != url.rstrip("/"):
        return ("fail", "%s: the %r entry points at %s, not this daemon (%s)" % (where, SERVER_NAME, eurl, url),
                "claude mcp remove --scope user %s && %s" % (SERVER_NAME, add))
    return "ok", "Claude Code entry %r in %s -> %s" % (SERVER_NAME, where, eurl), None


def _check_desktop(rep):
    """Claude Desktop runs kgd by absolute paths: each must still exist (a moved install breaks it)."""
    dpath = desktop_config_path()
    entry = _server_entry((_parsed(dpath) or {}).get("mcpServers"))
    if entry is None:
        return
    paths = [entry.get("command")] + list(entry.get("args") or [])[:1]
    missing = [p for p in paths if isinstance(p, str) and os.path.isabs(p) and not os.path.exists(p)]
    if missing:
        rep.fail("Claude Desktop's %r entry runs %s, which does not exist" % (SERVER_NAME, missing[0]),
                 "kgd desktop (or ./install.sh --desktop) rewrites it")
    else:
        rep.ok("Claude Desktop entry %r in %s" % (SERVER_NAME, dpath))


def _check_hooks(rep, port):
    path = claude_hooks.settings_path()
    try:
        conf = settings_file.load(path)[0]
        missing, wrong = claude_hooks.check(conf, port)
    except CommandError as exc:
        rep.fail(str(exc), "fix %s, then: kgd hooks install" % path)
        return
    fix = "kgd hooks install%s" % (" --port %d" % port if port != DEFAULT_PORT else "")
    if wrong:
        rep.fail("Claude Code hooks in %s: %s" % (path, "; ".join(wrong)), fix)
    elif len(missing) == 1 + len(claude_hooks.HTTP_EVENTS):
        rep.warn("no kgd hooks in %s: Claude Code sessions get memory only when the agent asks" % path, fix)
    elif missing:
        rep.warn("kgd's Claude Code hooks lack %s in %s" % (", ".join(missing), path), fix)
    else:
        rep.ok("Claude Code hooks in %s -> port %d" % (path, port))


def _check_agents(rep, port):
    """Each other agent found here (Codex CLI, Gemini CLI, Copilot CLI): its MCP entry and hooks."""
    from .setup import agent_config

    for name in agent_config.NAMES:
        if not agent_config.present(name):
            continue
        for level, what, fix in agent_config.check(name, port):
            _tell(rep, level, what, fix)


def _check_credentials(rep, root):
    """Nodes and edges that look like credentials (contract section 10): kgd hides them from
    agents; a person deletes them. Names ids, fields and kinds, never the secret."""
    from ..disk.layout import Layout
    from .disk_view import project_graphs, snapshot_graph
    if not os.path.isdir(root):
        return
    layout = Layout(root)
    graphs = [("user graph", snapshot_graph(layout.user_file, "user"))]
    graphs += [("project %s" % (g.project_path or slug), g) for slug, g in project_graphs(layout)]
    found = 0
    for label, g in graphs:
        level = "user" if g.level == "user" else "project"
        for nid, (field, hit) in sorted(g.flagged.items()):
            found += 1
            what = "a node (its id is not printed)" if field == "id" else "node %r" % nid
            rep.warn("%s: %s: %s looks like %s; kgd never shows it to an agent" % (label, what, field, hit.label),
                     "delete it: kg_delete_node id=... level=%s, or in the viewer (/ui)" % level)
        for _, (field, hit) in sorted(g.flagged_edges.items()):
            found += 1
            rep.warn("%s: an edge's %s looks like %s" % (label, field, hit.label),
                     "delete it: kg_delete_edge (from, to, rel) level=%s, or in the viewer (/ui)" % level)
    if not found:
        rep.ok("no stored node or edge looks like a credential")


def _file_problem(rep, where, path, problem):
    """A file under .kg/ kgd would not read: a symbolic link (a link could point anywhere, so kgd
    reads only regular files there), a folder, a fifo, one too large."""
    name = os.path.relpath(path, os.path.dirname(where))
    if os.path.islink(path):
        rep.warn("%s is a symbolic link; kgd reads only regular files under .kg/ (a link could point anywhere), "
                 "so it is skipped" % name,
                 "replace the link with the file itself: cp --remove-destination \"$(readlink -f %s)\" %s, then "
                 "commit it" % (path, path))
    else:
        rep.warn("%s/%s" % (where, problem),
                 "make %s a regular file kgd can read (`git checkout -- %s` gives back the committed one)" % (
                     name, name))


def _check_shared(rep, root):
    """Contract 9: every project shared through its repository's .kg/ loads cleanly (kgd skips
    what it cannot read; this says what and where)."""
    from ..core import kg_format, team_state
    from ..disk.layout import Layout
    from ..travel import team_folder
    from .disk_view import project_graphs

    for _, g in project_graphs(Layout(root)) if os.path.isdir(root) else ():
        if not g.project_path or team_state.is_off(g.meta) or not team_folder.holds_kg(g.project_path):
            continue
        problems, counts = [], {}
        where = team_folder.kg_dir(g.project_path)
        for kind, path in team_folder.paths_of(g.project_path).items():
            data, problem = team_folder.read_file(path)
            if problem:  # the file, not its lines: its own line and its own fix
                _file_problem(rep, where, path, problem)
            records, found = kg_format.parse(data, kind)
            problems += found
            counts[kind] = sum(1 for r in records.values() if "deleted" not in r)
        attrs = team_folder.read_file(os.path.join(where, ".gitattributes"))[0] or b""
        if b"merge=union" not in attrs:
            rep.warn("%s/.gitattributes does not name git's union driver: a merge may stop with conflict "
                     "markers there (kgd still reads them)" % where,
                     "restore it: echo '%s' > %s/.gitattributes" % (kg_format.GITATTRIBUTES.strip(), where))
        if problems:
            rep.warn("%s: %d problem(s), skipped by kgd: %s" % (where, len(problems), "; ".join(problems[:5])),
                     "fix or delete those lines (`git log -p -- .kg` shows who added them); the rest loads")
        else:
            rep.ok("%s shares %d nodes and %d edges" % (where, counts["node"], counts["edge"]))


def doctor(args, cfg):
    rep = Report()
    py = sys.version_info
    if py >= (3, 9):
        rep.ok("Python %d.%d.%d at %s" % (py[0], py[1], py[2], python_executable()))
    else:
        rep.fail("Python %d.%d is too old" % py[:2], "install Python 3.9 or newer")
    host = connect_host(cfg)
    found = find_daemon(cfg)
    port = found["port"] if found else cfg["port"]
    if found:
        h = found["health"]
        rep.ok("kgd %s answers on http://%s:%d/ (%s sessions, %s graphs loaded)" % (
            h.get("version"), host, port, h.get("sessions"), h.get("graphs_loaded")))
        if not found["holds_root"]:
            from .port_owner import kgd_root, owner

            who = owner(port)
            theirs = kgd_root(who["pid"]) if who else None
            # a problem, not a warning: every hook and agent of this user reaches that other memory
            rep.fail("the kgd on port %d does not hold root %s: it serves another storage root%s" % (
                port, cfg["root"], " (%s)" % theirs if theirs else ""),
                "check --root / KG_STORAGE_ROOT, give this root its own port (--port N), or stop that daemon "
                "(kgd stop --root %s)" % (theirs or "THAT_ROOT"))
        if h.get("version") != __version__:
            rep.warn("the running kgd is %s, this one is %s" % (h.get("version"), __version__),
                     "restart it (kgd stop, then start it again) to run this version")
    else:
        held, pid, lport, _ = root_lock(cfg)
        if held:
            rep.fail("kgd (pid %s) holds root %s but does not answer on port %s" % (pid, cfg["root"], lport),
                     "see %s/%s or the service log; kgd stop, then start it again" % (cfg["root"], LOG_NAME))
        elif port and port_free(cfg["host"], port):
            rep.warn(
                "kgd is not running (port %d is free)" % port,
                "start it: kgd start (a new Claude Code session starts it too, through kgd's SessionStart "
                "hook)%s" % (", or the service (systemctl --user start kgd / launchctl)" if _service_file() else ""),
            )
        elif port:
            who = named(port)
            rep.fail("port %d on %s is taken by another program (%s), not kgd" % (
                port, host, who or "`lsof -i :%d` or `ss -ltnp` names it" % port),
                "run kgd on another port: ./install.sh --port N (the service, the launcher and the clients "
                "follow), or kgd start --port N with KG_HTTP_PORT=N for the clients")
    _check_storage(rep, cfg["root"])
    _check_credentials(rep, cfg["root"])
    sync.check(rep, cfg)
    _check_shared(rep, cfg["root"])
    doctor_marks.check_root(rep, cfg, found)
    if not args.skip_service:
        _check_service(rep, port or DEFAULT_PORT)
    if not args.skip_client:
        _check_clients(rep, port or DEFAULT_PORT)
        _check_hooks(rep, port or DEFAULT_PORT)
        _check_agents(rep, port or DEFAULT_PORT)
    say("%d problem(s), %d warning(s)" % (rep.problems, rep.warnings))
    return 1 if rep.problems else 0


