"""Reading a storage root from outside the daemon: never takes the root lock, never writes.

Rules owned here (on-disk rules kg/storage.py does not offer yet; see each function):
- A graph as the daemon would load it is its file (else its .prev) plus its journal replayed;
  re-read when a fold replaced the file while the journal was read.
- A project exists on disk when projects/<slug> holds a graph file, its .prev or a non-empty
  journal (a graph written once and never folded lives only in its journal).
- The lock file ROOT/kgd.lock reads "pid N port P ..." while a daemon holds its flock.
"""

import errno
import fcntl
import json
import os
import re
import time

from .console import warn
from .graph import apply_record, graph_from_obj
from .storage import Journal, base_slug

_LOCK_LINE = re.compile(r"pid (\d+)(?: port (\d+))?")


def journal_path(graph_file):
    """The journal beside a graph file (storage's rule: <file minus .json>.journal)."""
    return graph_file[:-len(".json")] + ".journal" if graph_file.endswith(".json") else graph_file + ".journal"


def lock_state(layout):
    """(held, pid, port, note) read from the lock file; held = a running process holds its flock.

    Probing with a shared, non-blocking flock never makes a starting daemon fail unless it
    starts in the same microsecond."""
    try:
        fd = os.open(layout.lock_file, os.O_RDONLY)
    except OSError:
        return False, None, None, ""
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
    return held, pid, port, text.strip()


def project_slugs(layout):
    """Every projects/<slug> holding a graph file, its .prev or a non-empty journal."""
    try:
        names = sorted(os.listdir(layout.projects_dir))
    except OSError:
        return []
    out = []
    for name in names:
        f = layout.graph_file(name)
        j = journal_path(f)
        if os.path.exists(f) or os.path.exists(f + ".prev") or (os.path.exists(j) and os.path.getsize(j) > 0):
            out.append(name)
    return out


def read_obj(path):
    """A JSON object file parsed read-only (main file, else its .prev): (obj or None, mtime)."""
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
        obj, mtime = read_obj(path)
        records = Journal.replay(journal_path(path))
        if _file_sig(path) == sig:  # no fold replaced the file while the journal was read
            break
        time.sleep(0.01)
    g = graph_from_obj(obj, level, project_path, slug, fallback_ts=mtime or time.time())
    for rec in records:
        try:
            apply_record(g, rec)
        except (KeyError, TypeError, ValueError, AttributeError):
            warn("%s: skipping a malformed journal record" % journal_path(path))
    if project_path is None and isinstance(g.meta.get("project_path"), str):
        g.project_path = g.meta["project_path"]
    return g


def sessions_paths(layout):
    """slug -> project_path guessed from sessions.json (for a graph never folded to its file)."""
    obj, _ = read_obj(layout.sessions_file)
    out = {}
    sessions = (obj or {}).get("sessions")
    for s in (sessions.values() if isinstance(sessions, dict) else ()):
        pp = s.get("project_path") if isinstance(s, dict) else None
        if isinstance(pp, str):
            out.setdefault(base_slug(pp), pp)
    return out


def project_graphs(layout, known=None):
    """[(slug, Graph)] of every project on disk; a graph that records no project path gets the
    one `known()` (slug -> path, asked only when needed) or sessions.json names."""
    out, guessed = [], None
    for slug in project_slugs(layout):
        g = snapshot_graph(layout.graph_file(slug), "project", slug=slug)
        if g.project_path is None:
            if guessed is None:
                guessed = dict(sessions_paths(layout), **(known() if known else {}))
            g.project_path = guessed.get(slug)
        out.append((slug, g))
    return out


def journal_problem(path):
    """Why a journal would not replay cleanly, or None."""
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
