"""Operator subcommands beside `serve`: status, start, stop, stdio, export, import, bundle, doctor,
desktop. Registered on the argument parser by `register`, run by `run`.

Rules owned here:
- Which daemon serves a storage root: the process holding the flock on ROOT/kgd.lock, whose first
  line reads "pid N port P"; failing that, a kgd answering GET /health on the configured port.
- `export` reads the files (each graph file plus its journal, replayed; re-read when a fold lands
  mid-read). That is exact (every state, note, underscore time, _meta and task progress), needs no
  project folder to exist and works whether or not the daemon runs: every acknowledged write is in
  the graph file or its journal, and the graph file is only ever replaced whole.
- `import` merges. When a daemon holds the root it goes through the REST API so the daemon's
  memory and files stay one (content only: the daemon stamps times and revives states as for any
  put). Otherwise it writes the files itself while holding the root lock, exactly: a node absent
  here is added as it was, a node present in both keeps the copy written last (`_write_ts`; the
  imported one on a tie); edges and task progress from the file replace their namesakes.
- `bundle` writes one zipapp: kg/ plus kgd.py as __main__ (plus bytecode for the building
  Python, which other versions ignore).
- `desktop` merges an "mcpServers" entry into Claude Desktop's config, keeping a backup.
"""

import argparse
import errno
import fcntl
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import quote

from . import __version__, model
from .errors import KgError
from .graph import apply_record, graph_from_obj
from .storage import DIR_MODE, FILE_MODE, Journal, Layout, RootLock, atomic_write, base_slug, dumps, ensure_dir

DEFAULT_PORT = 8765
SERVER_NAME = "kg"
TOOL_NAMES = ("kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search",
              "kg_sync", "kg_progress")
EXPORT_FORMAT = "kgd-export"
LOG_NAME = "kgd.log"
LOG_ROTATE_BYTES = 5 * 1024 * 1024
_SLUG_OK = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._-]{0,199}\Z")
_LOCK_LINE = re.compile(r"pid (\d+)(?: port (\d+))?")


class CommandError(Exception):
    """One clear line for the operator; the command exits non-zero."""


def say(text="", stream=None):
    (stream or sys.stdout).write(text + "\n")


def warn(text):
    sys.stderr.write("kgd: %s\n" % text)


# ---------------------------------------------------------------- where things are

def running_from_archive():
    """True inside a zipapp: this file is /path/kgd.pyz/kg/commands.py."""
    return os.path.isfile(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def entry_point():
    """The file to run kgd again: kgd.py beside the kg package, or the .pyz holding it."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return top if running_from_archive() else os.path.join(top, "kgd.py")


def python_executable():
    return sys.executable or "python3"


def target_os():
    """darwin or linux; KGD_INSTALL_OS overrides (tests generate macOS files on Linux)."""
    forced = os.environ.get("KGD_INSTALL_OS", "").strip().lower()
    if forced in ("darwin", "macos", "mac"):
        return "darwin"
    if forced:
        return "linux"
    return "darwin" if sys.platform == "darwin" else "linux"


def connect_host(cfg):
    host = cfg["host"]
    return "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)


def lock_state(root):
    """(held, pid, port) read from ROOT/kgd.lock; held = a running daemon holds its flock.

    Only reads: probing with a shared, non-blocking flock never makes a starting daemon fail
    unless it starts in the same microsecond."""
    path = os.path.join(root, "kgd.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False, None, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            held = False
        except OSError as exc:
            held = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
        text = os.pread(fd, 200, 0).decode("utf-8", "replace")
    finally:
        os.close(fd)
    m = _LOCK_LINE.search(text)
    pid = int(m.group(1)) if m else None
    port = int(m.group(2)) if m and m.group(2) else None
    return held, pid, port


# ---------------------------------------------------------------- talking to the daemon

class Api:
    """JSON over one keep-alive HTTP connection to the daemon (reconnects once when stale)."""

    def __init__(self, host, port, token=None, timeout=30.0):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self.conn = None
        self.last_used = 0.0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None):
        """-> (status, headers dict with lower-case names, body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=False).encode("utf-8")
        hdrs = {"Accept": "application/json"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        hdrs.update(headers or {})
        if self.conn is not None and time.monotonic() - self.last_used > 20:
            self.close()  # the daemon drops idle keep-alive connections after 30 s
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError,
                    BrokenPipeError) as exc:
                self.close()
                if fresh or attempt:
                    raise ConnectionError("the connection to kgd on port %d broke: %s" % (self.port, exc))
                continue
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            self.last_used = time.monotonic()
            out_headers = {k.lower(): v for k, v in r.getheaders()}
            if out_headers.get("connection", "").lower() == "close":
                self.close()
            return r.status, out_headers, data
        raise ConnectionError("unreachable")

    def json(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        try:
            obj = json.loads(data.decode("utf-8")) if data else None
        except ValueError:
            obj = {"error": data[:200].decode("utf-8", "replace")}
        return status, obj


def health(host, port, timeout=2.0):
    """The /health answer of a kgd on host:port, or None (nothing there, or not kgd)."""
    if not port:
        return None
    api = Api(host, port, timeout=timeout)
    try:
        status, obj = api.json("GET", "/health")
    except (OSError, http.client.HTTPException, ConnectionError):
        return None
    finally:
        api.close()
    if status == 200 and isinstance(obj, dict) and obj.get("status") == "ok" and "version" in obj:
        return obj
    return None


def find_daemon(cfg, timeout=2.0):
    """The daemon serving cfg's root (or else listening on cfg's port), or None.

    -> {"port", "pid" (None when unknown), "health", "holds_root"}."""
    held, pid, lock_port = lock_state(cfg["root"])
    host = connect_host(cfg)
    tried = []
    for port in ((lock_port,) if held else ()) + (cfg["port"],):
        if not port or port in tried:
            continue
        tried.append(port)
        h = health(host, port, timeout)
        if h is not None:
            mine = held and port == lock_port
            return {"port": port, "pid": pid if mine else None, "health": h, "holds_root": mine}
    return None


def daemon_argv(cfg):
    return [python_executable(), entry_point(), "serve", "--host", cfg["host"], "--port", str(cfg["port"]),
            "--root", cfg["root"], "--max-tokens", str(cfg["max_tokens"]), "--log-level", cfg["log_level"]]


def spawn_daemon(cfg):
    """Start `kgd serve` detached (own session, stdio closed, stderr to ROOT/kgd.log)."""
    root = cfg["root"]
    ensure_dir(root)
    log_path = os.path.join(root, LOG_NAME)
    try:
        if os.path.getsize(log_path) > LOG_ROTATE_BYTES:
            os.replace(log_path, log_path + ".1")
    except OSError:
        pass
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    env = dict(os.environ)
    if cfg.get("token"):
        env["KG_TOKEN"] = cfg["token"]  # not on the command line, where ps would show it
    try:
        proc = subprocess.Popen(daemon_argv(cfg), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
                                start_new_session=True, close_fds=True, env=env, cwd="/")
    finally:
        os.close(fd)
    return proc, log_path


def _log_tail(path, lines=3):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def ensure_daemon(cfg, timeout=5.0):
    """The port of the daemon serving cfg's root, starting one in the background if none runs."""
    found = find_daemon(cfg)
    if found:
        return found["port"], None
    host = connect_host(cfg)
    held, _, _ = lock_state(cfg["root"])
    proc = log_path = None
    if not held:
        proc, log_path = spawn_daemon(cfg)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held, _, lock_port = lock_state(cfg["root"])
        port = lock_port if held and lock_port else cfg["port"]
        if port and health(host, port, 0.5) is not None:
            return port, proc
        if proc is not None and proc.poll() is not None:
            found = find_daemon(cfg)  # lost a start race to another bridge: use the winner
            if found:
                return found["port"], None
            raise CommandError("kgd could not start (exit %s): %s" % (proc.returncode, _log_tail(log_path)
                                                                      or "see " + log_path))
        time.sleep(0.05)
    raise CommandError("kgd did not answer on port %s within %.0f s%s" % (
        cfg["port"], timeout, "; see " + log_path if log_path else ""))


# ---------------------------------------------------------------- status, start, stop

def _age(seconds):
    seconds = int(seconds or 0)
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm" % (seconds // 60)
    if seconds < 172800:
        return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
    return "%dd" % (seconds // 86400)


def status(args, cfg):
    found = find_daemon(cfg)
    held, pid, lock_port = lock_state(cfg["root"])
    if not found:
        out = {"running": False, "root": cfg["root"], "port": cfg["port"]}
        if held:
            out.update(pid=pid, port=lock_port)
            text = "kgd (pid %s) holds root %s but does not answer on port %s" % (pid, cfg["root"], lock_port)
        else:
            text = "kgd is not running (root %s, port %s); start it with `kgd start` or `kgd`" % (
                cfg["root"], cfg["port"])
        say(json.dumps(out) if args.json else text)
        return 1
    port, h = found["port"], found["health"]
    projects, error = [], None
    api = Api(connect_host(cfg), port, cfg.get("token"), timeout=10)
    try:
        code, obj = api.json("GET", "/api/projects")
        if code == 200 and isinstance(obj, dict):
            projects = obj.get("projects") or []
        else:
            error = (obj or {}).get("error") if isinstance(obj, dict) else "HTTP %d" % code
    except (OSError, ConnectionError, http.client.HTTPException) as exc:
        error = str(exc)
    finally:
        api.close()
    out = {"running": True, "version": h.get("version"), "url": "http://%s:%d/" % (connect_host(cfg), port),
           "port": port, "pid": found["pid"], "root": cfg["root"] if found["holds_root"] else None,
           "uptime_s": h.get("uptime_s"), "sessions": h.get("sessions"), "graphs_loaded": h.get("graphs_loaded"),
           "projects": projects}
    if args.json:
        say(json.dumps(out))
        return 0
    say("kgd %s is running at %s%s, up %s" % (out["version"], out["url"],
                                               " (pid %s)" % found["pid"] if found["pid"] else "", _age(out["uptime_s"])))
    if found["holds_root"]:
        say("root:     %s" % cfg["root"])
    else:
        say("root:     not %s (that root is not locked by a running kgd); this daemon uses another" % cfg["root"])
    say("sessions: %s live" % out["sessions"])
    say("graphs:   %s loaded (user + projects in use); %d project graph(s) on disk%s" % (
        out["graphs_loaded"], len(projects), ":" if projects else ""))
    for p in projects:
        say("  %-24s %s  %d nodes (%d active, %d archived, %d orphaned), %d edges" % (
            p.get("slug"), p.get("project_path"), p.get("nodes", 0), p.get("active", 0), p.get("archived", 0),
            p.get("orphaned", 0), p.get("edges", 0)))
    if error:
        say("(could not list project graphs: %s)" % error)
    return 0


def start(args, cfg):
    try:
        port, proc = ensure_daemon(cfg, timeout=args.timeout)
    except (CommandError, OSError) as exc:
        warn(str(exc))
        return 1
    host = connect_host(cfg)
    if proc is None:
        say("kgd is already running at http://%s:%d/" % (host, port))
    else:
        say("kgd started at http://%s:%d/ (pid %d, log %s)" % (host, port, proc.pid,
                                                             os.path.join(cfg["root"], LOG_NAME)))
    return 0


def stop(args, cfg):
    held, pid, port = lock_state(cfg["root"])
    if not held:
        say("kgd is not running on root %s" % cfg["root"])
        return 0
    if pid is None:
        warn("%s/kgd.lock is held but names no pid; find the process with `fuser %s/kgd.lock`" % (
            cfg["root"], cfg["root"]))
        return 1
    try:
        with open(os.path.join(cfg["root"], "kgd.lock"), "r", encoding="utf-8", errors="replace") as f:
            note = f.read(200)
    except OSError:
        note = ""
    if " import" in note:
        warn("`kgd import` (pid %d) holds root %s, not a daemon; let it finish" % (pid, cfg["root"]))
        return 1
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        warn("the lock names pid %d but no such process is visible here (another container or PID "
             "namespace?); stop it where it runs" % pid)
        return 1
    except PermissionError:
        warn("not allowed to signal pid %d (another user's daemon?)" % pid)
        return 1
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not lock_state(cfg["root"])[0]:
            say("kgd (pid %d%s) stopped; root %s is flushed" % (pid, ", port %d" % port if port else "", cfg["root"]))
            return 0
        time.sleep(0.05)
    warn("kgd (pid %d) did not stop within %.0f s; it may still be flushing. `kill -9 %d` forces it "
         "(acknowledged writes are safe in the journal)" % (pid, args.timeout, pid))
    return 1


# ---------------------------------------------------------------- reading graphs from the files

def _journal_path(path):
    return path[:-len(".json")] + ".journal" if path.endswith(".json") else path + ".journal"


def _read_obj(path):
    """A graph file parsed read-only (main file, else its .prev): (obj or None, mtime)."""
    for candidate in (path, path + ".prev"):
        try:
            with open(candidate, "rb") as f:
                data = f.read()
            mtime = os.stat(candidate).st_mtime
        except FileNotFoundError:
            continue
        try:
            obj = json.loads(data.decode("utf-8"))
            if isinstance(obj, dict):
                if candidate != path:
                    warn("%s is missing or does not parse; using %s" % (path, candidate))
                return obj, mtime
        except (UnicodeDecodeError, ValueError):
            pass
        warn("%s does not parse; skipped" % candidate)
    return None, None


def _file_sig(path):
    try:
        st = os.stat(path)
        return st.st_ino, st.st_mtime_ns, st.st_size
    except OSError:
        return None


def snapshot_graph(path, level, project_path=None, slug=None):
    """A graph as the daemon would load it (file + journal), without changing any file."""
    records, obj, mtime = [], None, None
    for _ in range(20):
        sig = _file_sig(path)
        obj, mtime = _read_obj(path)
        records = Journal.replay(_journal_path(path))
        if _file_sig(path) == sig:  # no fold replaced the file while the journal was read
            break
        time.sleep(0.01)
    g = graph_from_obj(obj, level, project_path, slug, fallback_ts=mtime or time.time())
    for rec in records:
        try:
            apply_record(g, rec)
        except (KeyError, TypeError, ValueError, AttributeError):
            warn("%s: skipping a malformed journal record" % _journal_path(path))
    if project_path is None and isinstance(g.meta.get("project_path"), str):
        g.project_path = g.meta["project_path"]
    return g


def project_slugs_on_disk(layout):
    """Every projects/<slug> holding a graph file, its .prev or a journal."""
    try:
        names = sorted(os.listdir(layout.projects_dir))
    except OSError:
        return []
    out = []
    for name in names:
        f = layout.graph_file(name)
        j = _journal_path(f)
        if os.path.exists(f) or os.path.exists(f + ".prev") or (os.path.exists(j) and os.path.getsize(j) > 0):
            out.append(name)
    return out


def _sessions_paths(layout):
    """slug -> project_path guessed from sessions.json (for a graph never folded to its file)."""
    obj, _ = _read_obj(layout.sessions_file)
    out = {}
    sessions = (obj or {}).get("sessions")
    for s in (sessions.values() if isinstance(sessions, dict) else ()):
        pp = s.get("project_path") if isinstance(s, dict) else None
        if isinstance(pp, str):
            out.setdefault(base_slug(pp), pp)
    return out


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


def export_doc(cfg, projects=None, include_user=True):
    layout = Layout(cfg["root"])
    if not os.path.isdir(layout.root):
        raise CommandError("storage root %s does not exist; nothing to export" % layout.root)
    known = None
    doc = {"format": EXPORT_FORMAT, "format_version": 1, "kgd_version": __version__, "exported_at": time.time(),
           "root": layout.root, "user": None, "projects": []}
    if include_user:
        doc["user"] = snapshot_graph(layout.user_file, "user").to_obj()
    matched = set()
    for slug in project_slugs_on_disk(layout):
        g = snapshot_graph(layout.graph_file(slug), "project", slug=slug)
        if g.project_path is None:
            if known is None:
                known = dict(_sessions_paths(layout), **_daemon_paths(cfg))
            g.project_path = known.get(slug)
            if g.project_path is None:
                warn("project graph %s records no project path; exported with project_path null" % slug)
        if projects:
            hits = [w for w in projects if _matches_project(w, slug, g.project_path)]
            if not hits:
                continue
            matched.update(hits)
        doc["projects"].append({"slug": slug, "project_path": g.project_path, "graph": g.to_obj()})
    missing = [w for w in projects or () if w not in matched]
    if missing:
        have = ", ".join(project_slugs_on_disk(layout)) or "none"
        raise CommandError("no project graph matches %s (give a project folder or one of the slugs under "
                           "%s/projects: %s)" % (", ".join(missing), layout.root, have))
    return doc


def export(args, cfg):
    try:
        doc = export_doc(cfg, args.project, not args.no_user)
    except CommandError as exc:
        warn(str(exc))
        return 1
    data = dumps(doc) + b"\n"
    if args.output and args.output != "-":
        _write_private(os.path.abspath(args.output), data)
        n = sum(len(p["graph"]["nodes"]) for p in doc["projects"]) + len((doc["user"] or {}).get("nodes", {}))
        warn("exported %d node(s) in %d graph(s) to %s" % (n, len(doc["projects"]) + bool(doc["user"]), args.output))
    else:
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
    return 0


def _write_private(path, data):
    """Write a file readable by its owner only (the memory is private), replacing it whole."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


def _clean_graph(obj, level, label):
    """The imported graph normalized as the daemon loads files, minus entries it would refuse."""
    g = graph_from_obj(obj, level, fallback_ts=time.time())
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
            bits = ["%d %s" % (self.counts[(kind, w)], w) for w in ("added", "updated", "unchanged", "kept newer",
                                                                      "skipped") if self.counts.get((kind, w))]
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
    for k, v in src.meta.items():
        if k not in ("progress", "level", "project_path"):
            g.meta.setdefault(k, v)
    g.recount()


def _write_graph(path, g):
    atomic_write(path, dumps(g.to_obj()))
    jpath = _journal_path(path)
    if os.path.exists(jpath):  # its records are folded into what was just written
        os.truncate(jpath, 0)


def _import_files(doc, cfg, dry_run):
    layout = Layout(cfg["root"])
    lock = None
    if not dry_run:
        ensure_dir(layout.root)
        os.chmod(layout.root, DIR_MODE)
        lock = RootLock(layout)
        lock.acquire("import")  # KgError (Conflict) when a daemon got there first
    try:
        tallies = []
        if doc.get("user") is not None:
            t = Tally("user graph")
            g = snapshot_graph(layout.user_file, "user")
            merge_graph(g, _clean_graph(doc["user"], "user", "user graph"), t)
            if t.changed() and not dry_run:
                _write_graph(layout.user_file, g)
            tallies.append(t)
        owners = {}
        for slug in project_slugs_on_disk(layout):
            owners[slug] = snapshot_graph(layout.graph_file(slug), "project", slug=slug).project_path
        for p in doc.get("projects") or []:
            pp = p.get("project_path") or (p["graph"].get("_meta") or {}).get("project_path")
            wanted = p.get("slug") if isinstance(p.get("slug"), str) and _SLUG_OK.match(p["slug"]) else None
            wanted = wanted or (base_slug(pp) if pp else None)
            if wanted is None:
                warn("skipping a project graph with neither a usable slug nor a project_path")
                continue
            slug = next((s for s, owner in owners.items() if pp and owner == pp), None)
            if slug is None:
                if wanted not in owners or (pp is None and owners.get(wanted) is None):
                    slug = wanted
                else:
                    slug = layout.slug_for(pp, owners) if pp else wanted + "-imported"
            owners[slug] = pp
            t = Tally("project %s (%s)" % (pp or "?", slug))
            g = snapshot_graph(layout.graph_file(slug), "project", pp, slug)
            g.project_path = pp
            merge_graph(g, _clean_graph(p["graph"], "project", t.label), t)
            if t.changed() and not dry_run:
                _write_graph(layout.graph_file(slug), g)
            tallies.append(t)
    finally:
        if lock is not None:
            lock.release()
    return tallies


def _public(node):
    return (node.get("gist"), list(node.get("notes") or []), list(node.get("touches") or []))


def _import_live(doc, cfg, port, dry_run):
    api = Api(connect_host(cfg), port, cfg.get("token"), timeout=30)
    tallies, revived = [], 0
    try:
        graphs = []
        if doc.get("user") is not None:
            graphs.append(("user", None, doc["user"]))
        graphs += [("project", p.get("project_path"), p["graph"]) for p in doc.get("projects") or []]
        for level, pp, obj in graphs:
            t = Tally("user graph" if level == "user" else "project %s" % pp)
            src = _clean_graph(obj, level, t.label)
            if level == "project":
                if pp is None:
                    warn("%s: no project_path recorded; skipped (import it with the daemon stopped)" % t.label)
                    continue
                code, live = api.json("GET", "/api/graph?project_path=" + quote(pp, safe=""))
                if code != 200 or (live or {}).get("project_path") != pp:
                    why = (live or {}).get("error") if code != 200 else "that folder now belongs to project %s" % (
                        (live or {}).get("project_path"))
                    warn("%s: skipped (%s); to import it anyway stop the daemon (kgd stop) and import again"
                         % (t.label, why))
                    t.add("nodes", "skipped", len(src.nodes))
                    tallies.append(t)
                    continue
                live_graph = live["project"]
            else:
                code, live = api.json("GET", "/api/graph")
                if code != 200:
                    raise CommandError("GET /api/graph failed: %s" % (live or {}).get("error"))
                live_graph = live["user"]
            extra = {"project_path": pp} if pp else {}
            nodes = {n["id"]: n for n in live_graph["nodes"]}
            for nid, node in src.nodes.items():
                old = nodes.get(nid)
                if old is not None and _public(old) == _public(node):
                    t.add("nodes", "unchanged")
                    continue
                t.add("nodes", "added" if old is None else "updated")
                if model.node_state(node) != model.ACTIVE:
                    revived += 1
                if not dry_run:
                    body = dict(extra, gist=node["gist"], notes=node["notes"], touches=node["touches"])
                    _put(api, "/api/nodes/%s/%s" % (level, quote(nid, safe="")), body)
            edges = {model.edge_key(e["from"], e["to"], e["rel"]): e for e in live_graph["edges"]}
            for key, e in src.edges.items():
                old = edges.get(key)
                if old is not None and list(old.get("notes") or []) == list(e.get("notes") or []):
                    t.add("edges", "unchanged")
                    continue
                t.add("edges", "added" if old is None else "updated")
                if not dry_run:
                    _put(api, "/api/edges/%s" % level, dict(extra, **{"from": e["from"], "to": e["to"],
                                                                      "rel": e["rel"], "notes": e["notes"]}))
            for task, state in (src.meta.get("progress") or {}).items():
                q = "?level=%s%s" % (level, "&project_path=" + quote(pp, safe="") if pp else "")
                code, cur = api.json("GET", "/api/progress/%s%s" % (quote(task, safe=""), q))
                if code == 200 and cur.get("state") == state:
                    t.add("progress", "unchanged")
                    continue
                t.add("progress", "updated" if code == 200 and cur.get("state") is not None else "added")
                if not dry_run:
                    _put(api, "/api/progress/%s" % quote(task, safe=""), dict(extra, state=state, level=level))
            tallies.append(t)
    finally:
        api.close()
    if revived:
        warn("%d archived or orphaned node(s) were %s as active, with today's times: a running daemon "
             "stamps every put. For an exact restore: kgd stop, kgd import, then start kgd again."
             % (revived, "to be imported" if dry_run else "imported"))
    return tallies


def _put(api, path, body):
    code, obj = api.json("PUT", path, body)
    if code != 200:
        raise CommandError("PUT %s failed (%d): %s" % (path[:120], code, (obj or {}).get("error")))


def import_(args, cfg):
    try:
        doc = load_export(args.file)
        held, _, port = lock_state(cfg["root"])
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


# ---------------------------------------------------------------- bundle

def bundle(args, cfg):
    import py_compile
    import shutil
    import tempfile
    import zipapp

    out = os.path.abspath(args.output)
    here = entry_point()
    interpreter = args.python or "/usr/bin/env python3"
    tmp_out = out + ".part"
    if running_from_archive():
        if os.path.abspath(here) == out:
            warn("%s is the running archive; give another -o" % out)
            return 1
        zipapp.create_archive(here, tmp_out, interpreter=interpreter)
    else:
        src_pkg = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory(prefix="kgd-bundle-") as tmp:
            os.mkdir(os.path.join(tmp, "kg"))
            for name in sorted(os.listdir(src_pkg)):
                if name.endswith(".py"):
                    shutil.copy2(os.path.join(src_pkg, name), os.path.join(tmp, "kg", name))
            shutil.copy2(here, os.path.join(tmp, "__main__.py"))
            if not args.no_bytecode:
                # zipimport uses kg/x.pyc when its magic number is this Python's; other versions
                # fall back to the source. Unchecked hashes: no mtime comparison at import.
                for name in sorted(os.listdir(os.path.join(tmp, "kg"))):
                    src = os.path.join(tmp, "kg", name)
                    py_compile.compile(src, cfile=src + "c", dfile="kg/" + name, doraise=True,
                                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            zipapp.create_archive(tmp, tmp_out, interpreter=interpreter, compressed=True)
    os.chmod(tmp_out, 0o755)
    os.replace(tmp_out, out)
    say("wrote %s (%d bytes); run it with: python3 %s" % (out, os.path.getsize(out), args.output))
    return 0


# ---------------------------------------------------------------- Claude Desktop

def desktop_config_path():
    home = os.path.expanduser("~")
    if target_os() == "darwin":
        return os.path.join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json")
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "Claude", "claude_desktop_config.json")


def desktop_entry(args, cfg):
    kgd = os.path.abspath(args.kgd) if args.kgd else entry_point()
    entry_args = [kgd, "stdio"]
    if cfg["port"] != DEFAULT_PORT:
        entry_args += ["--port", str(cfg["port"])]
    if getattr(args, "root", None):
        entry_args += ["--root", cfg["root"]]
    python = args.python or python_executable()
    return {"command": os.path.abspath(python) if os.sep in python else python, "args": entry_args}


def desktop(args, cfg):
    path = os.path.abspath(args.config) if args.config else desktop_config_path()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        warn("cannot read %s: %s" % (path, exc.strerror))
        return 1
    try:
        conf = json.loads(raw.decode("utf-8")) if raw and raw.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        warn("%s is not valid JSON (%s); fix it or move it aside, then run this again" % (path, str(exc)[:120]))
        return 1
    if not isinstance(conf, dict) or not isinstance(conf.get("mcpServers", {}), dict):
        warn("%s: expected an object with an \"mcpServers\" object; fix it, then run this again" % path)
        return 1
    servers = conf.setdefault("mcpServers", {})
    name = args.name
    if args.remove:
        cur = servers.get(name)
        if cur is None:
            say("no %r entry in %s; nothing to remove" % (name, path))
            return 0
        cur_args = cur.get("args") if isinstance(cur, dict) else None
        if args.kgd and not (isinstance(cur_args, list) and cur_args and cur_args[0] == os.path.abspath(args.kgd)):
            say("the %r entry in %s runs something else (%s); left as it is" % (name, path, cur_args))
            return 0
        del servers[name]
        action = "removed the %r entry from" % name
        if conf == {"mcpServers": {}} and not args.dry_run:
            os.unlink(path)  # it held nothing but this entry (kgd desktop created it)
            say("%s %s, which is now empty: deleted it" % (action, path))
            return 0
    else:
        entry = desktop_entry(args, cfg)
        if servers.get(name) == entry:
            say("Claude Desktop already has the %r entry in %s; unchanged" % (name, path))
            return 0
        action = "%s the %r entry in" % ("updated" if name in servers else "added", name)
        servers[name] = entry
    data = (json.dumps(conf, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if args.dry_run:
        say("would have %s %s:" % (action, path))
        say(json.dumps({"mcpServers": {name: servers.get(name)}}, indent=2))
        return 0
    backup = None
    if raw is not None:
        backup = "%s.bak-%s" % (path, time.strftime("%Y%m%d-%H%M%S"))
        with open(backup, "wb") as f:
            f.write(raw)
        mode = os.stat(path).st_mode & 0o777
    else:
        mode = FILE_MODE
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    say("%s %s%s; restart Claude Desktop to pick it up" % (action, path, " (backup: %s)" % backup if backup else ""))
    return 0


# ---------------------------------------------------------------- doctor

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


def _port_free(host, port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _check_storage(rep, root):
    if not os.path.exists(root):
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
                bad = _journal_problem(p)
                if bad:
                    unparsable.append("%s (%s)" % (p, bad))
    rep.ok("storage root %s exists" % root)
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
    if corrupt:
        rep.warn("%d quarantined file(s) (.corrupt-*), e.g. %s" % (len(corrupt), corrupt[0]),
                 "look inside; delete them once you are sure nothing in them is missed")


def _quiet_parse(path):
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
        return (obj, None) if isinstance(obj, dict) else (None, "not an object")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, str(exc)


def _journal_problem(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return str(exc)
    lines = data.split(b"\n")
    if lines[-1]:
        return "a torn last record (dropped at the next start)"
    for i, line in enumerate(lines[:-1]):
        if not line.strip():
            continue
        try:
            if not isinstance(json.loads(line.decode("utf-8")), dict):
                raise ValueError
        except (UnicodeDecodeError, ValueError):
            return "record %d does not parse" % (i + 1)
    return None


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


def _run(argv, timeout=5):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.decode("utf-8", "replace").strip()


def _check_clients(rep, port):
    url = "http://127.0.0.1:%d/" % port
    home = os.path.expanduser("~")
    found = []
    for path in (os.path.join(home, ".claude.json"), os.path.join(os.getcwd(), ".mcp.json")):
        obj, _ = _quiet_parse(path) if os.path.exists(path) else (None, None)
        if not obj:
            continue
        scopes = [("user", obj.get("mcpServers"))]
        for proj, pconf in (obj.get("projects") or {}).items() if isinstance(obj.get("projects"), dict) else ():
            if isinstance(pconf, dict):
                scopes.append(("project " + proj, pconf.get("mcpServers")))
        for scope, servers in scopes:
            entry = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
            if isinstance(entry, dict):
                found.append(("%s (%s)" % (path, scope), entry))
    if not found:
        rep.warn("Claude Code has no %r MCP server in ~/.claude.json or ./.mcp.json" % SERVER_NAME,
                 "claude mcp add --transport http --scope user %s %s" % (SERVER_NAME, url))
    for where, entry in found:
        eurl = entry.get("url") or ""
        if entry.get("command") and not eurl:
            rep.ok("Claude Code entry %r in %s runs %s" % (SERVER_NAME, where, " ".join(
                [str(entry["command"])] + [str(a) for a in entry.get("args") or []])))
        elif "localhost" in eurl:
            rep.fail("%s: the %r entry uses localhost (%s), which can resolve to ::1 while kgd listens on "
                     "127.0.0.1" % (where, SERVER_NAME, eurl), "use %s" % url)
        elif entry.get("type") not in ("http", "streamable-http", None) or not eurl:
            rep.warn("%s: the %r entry is %s" % (where, SERVER_NAME, entry),
                     "claude mcp add --transport http --scope user %s %s" % (SERVER_NAME, url))
        elif eurl and eurl.rstrip("/").replace("/mcp", "") != url.rstrip("/"):
            rep.fail("%s: the %r entry points at %s, not this daemon (%s)" % (where, SERVER_NAME, eurl, url),
                     "claude mcp remove --scope user %s && claude mcp add --transport http --scope user %s %s"
                     % (SERVER_NAME, SERVER_NAME, url))
        else:
            rep.ok("Claude Code entry %r in %s -> %s" % (SERVER_NAME, where, eurl or entry.get("command")))
    dpath = desktop_config_path()
    obj, _ = _quiet_parse(dpath) if os.path.exists(dpath) else (None, None)
    entry = ((obj or {}).get("mcpServers") or {}).get(SERVER_NAME) if isinstance(obj, dict) else None
    if isinstance(entry, dict):
        paths = [entry.get("command")] + list(entry.get("args") or [])[:1]
        missing = [p for p in paths if isinstance(p, str) and os.path.isabs(p) and not os.path.exists(p)]
        if missing:
            rep.fail("Claude Desktop's %r entry runs %s, which does not exist" % (SERVER_NAME, missing[0]),
                     "kgd desktop (or ./install.sh --desktop) rewrites it")
        else:
            rep.ok("Claude Desktop entry %r in %s" % (SERVER_NAME, dpath))


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
            rep.warn("the kgd on port %d does not hold root %s: it serves another storage root" % (port, cfg["root"]),
                     "check --root / KG_STORAGE_ROOT, or stop it (kgd stop --root THAT_ROOT)")
        if h.get("version") != __version__:
            rep.warn("the running kgd is %s, this one is %s" % (h.get("version"), __version__),
                     "restart it (kgd stop, then start it again) to run this version")
    else:
        held, pid, lport = lock_state(cfg["root"])
        if held:
            rep.fail("kgd (pid %s) holds root %s but does not answer on port %s" % (pid, cfg["root"], lport),
                     "see %s/%s or the service log; kgd stop, then start it again" % (cfg["root"], LOG_NAME))
        elif port and _port_free(host, port):
            rep.warn("kgd is not running (port %d is free)" % port,
                     "start it: kgd start, or the service (systemctl --user start kgd / launchctl)")
        elif port:
            rep.fail("port %d on %s is taken by another program (not kgd)" % (port, host),
                     "find it with `lsof -i :%d` (or `ss -ltnp`); or run kgd on another port (--port / "
                     "KG_HTTP_PORT) and re-register the client with that port" % port)
    _check_storage(rep, cfg["root"])
    if not args.skip_service:
        _check_service(rep, port or DEFAULT_PORT)
    if not args.skip_client:
        _check_clients(rep, port or DEFAULT_PORT)
    say("%d problem(s), %d warning(s)" % (rep.problems, rep.warnings))
    return 1 if rep.problems else 0


# ---------------------------------------------------------------- stdio

def stdio(args, cfg):
    from . import stdio as bridge
    return bridge.main(cfg)


# ---------------------------------------------------------------- registration

def _common(p, add_common):
    """The shared flags, without defaults: `kgd --port 9000 status` keeps the 9000 given
    before the subcommand (a subparser's None default would overwrite it)."""
    before = len(p._actions)
    add_common(p)
    for action in p._actions[before:]:
        action.default = argparse.SUPPRESS
    return p


def register(sub, add_common):
    p = _common(sub.add_parser("status", help="is the daemon up: version, port, root, graphs, sessions"), add_common)
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p = _common(sub.add_parser("start", help="start the daemon in the background unless it runs"), add_common)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for it to answer (10)")
    p = _common(sub.add_parser("stop", help="stop the daemon serving the root (SIGTERM, then wait)"), add_common)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for it to exit (20)")
    _common(sub.add_parser("stdio", help="MCP over stdin/stdout, forwarded to the daemon (started if needed)"),
            add_common)
    p = _common(sub.add_parser("export", help="write the graphs (all states, all fields) as one JSON document"),
                add_common)
    p.add_argument("--project", action="append", metavar="P",
                   help="only this project (its folder or slug); repeatable")
    p.add_argument("--no-user", action="store_true", help="leave the user graph out")
    p.add_argument("-o", "--output", help="write to this file (mode 0600) instead of stdout")
    p = _common(sub.add_parser("import", help="merge an export into the graphs"), add_common)
    p.add_argument("file", help="a file written by `kgd export` (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p = _common(sub.add_parser("bundle", help="build a single-file kgd.pyz (stdlib zipapp)"), add_common)
    p.add_argument("-o", "--output", default="kgd.pyz", help="where to write it (kgd.pyz)")
    p.add_argument("--python", help="the #! interpreter line (/usr/bin/env python3)")
    p.add_argument("--no-bytecode", action="store_true", help="sources only (smaller, slower first start)")
    p = _common(sub.add_parser("doctor", help="check Python, port, storage, service and client setup"), add_common)
    p.add_argument("--skip-service", action="store_true", help="do not look at the systemd / launchd service")
    p.add_argument("--skip-client", action="store_true", help="do not look at the Claude configuration")
    p = _common(sub.add_parser("desktop", help="add kgd (via stdio) to Claude Desktop's config"), add_common)
    p.add_argument("--config", help="the config file (default: Claude Desktop's, per OS)")
    p.add_argument("--name", default=SERVER_NAME, help="the server's name in mcpServers (kg)")
    p.add_argument("--python", help="the python to run (default: this one)")
    p.add_argument("--kgd", help="the kgd.py or kgd.pyz to run (default: this one)")
    p.add_argument("--remove", action="store_true", help="remove the entry (only if it runs --kgd, when given)")
    p.add_argument("--dry-run", action="store_true", help="show the entry, change nothing")


COMMANDS = {"status": status, "start": start, "stop": stop, "stdio": stdio, "export": export, "import": import_,
            "bundle": bundle, "doctor": doctor, "desktop": desktop}


def run(command, args, cfg):
    try:
        return COMMANDS[command](args, cfg)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except (CommandError, OSError) as exc:
        warn(str(exc))
        return 1
