"""Reading a storage root from outside the daemon: never takes the root lock, never writes.

Rules owned here (the on-disk rules themselves are kg/disk/'s):
- A graph as the daemon would load it is its file (else its .prev) plus its journal replayed;
  re-read when a fold replaced the file while the journal was read.
- A project exists on disk when projects/<slug> holds a graph file, its .prev or a non-empty
  journal (a graph written once and never folded lives only in its journal).
"""

import json
import os
import time

from ..core.graph import apply_record, graph_from_obj
from ..disk.journal import Journal
from ..disk.layout import base_slug, journal_path
from .console import warn

_said = set()  # each problem is said once per command, however often the file is read


def _say_once(text):
    if text not in _said:
        _said.add(text)
        warn(text)


def read_obj(path):
    """A JSON object file parsed read-only (main file, else its .prev): (obj or None, mtime).
    What was wrong is said in one line: which file, and what was read instead."""
    states = []
    for candidate in (path, path + ".prev"):
        try:
            with open(candidate, "rb") as f:
                data = f.read()
            mtime = os.stat(candidate).st_mtime
        except FileNotFoundError:
            states.append("is missing")
            continue
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            obj = None
        if isinstance(obj, dict):
            if candidate != path:
                _say_once("%s %s; read its .prev copy instead" % (path, "does not parse" if states[0] != "is missing"
                                                                  else "is missing"))
            return obj, mtime
        states.append("does not parse")
    if states != ["is missing", "is missing"]:
        main, prev = states
        what = ("%s and its .prev copy do not parse" % path if main == prev else
                "%s %s" % (path, main) + ("" if prev == "is missing" else " and its .prev copy %s" % prev))
        _say_once("%s; read as empty (the daemon moves a bad file aside, as .corrupt-*, when it starts)" % what)
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
    for slug in layout.project_slugs(with_journals=True):
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
