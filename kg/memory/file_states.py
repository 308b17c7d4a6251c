"""The states of the files nodes touch: recorded at every put, read again off the request path
(contract section 12). The rule itself (what is stale, the mark) is kg/core/staleness.py's.

Rules owned here:
- A put of a node records, in its personal field `_files`, the state of each file it touches that
  exists (`{"commit"?: HEAD, "files": {touch: state}}`): the content id and line count (of the part, for
  `PATH#NAME` / `PATH:START-END`), or size and time for a file over staleness.HASH_MAX or past the
  put's RECORD_BYTES; the commit only in a git working tree. HEAD is read from `.git`'s files, never by
  running git: a put does not wait for git. Only regular files are read (never a FIFO or a device).
- A put of an edge records the same of its ends that are files (an end that is a node of the graph
  is not a file), in the edge's `_files`; the edge is judged as a node is.
- Relative touches are under the project root; the user graph judges absolute touches only.
- Nothing here runs on a read's or a hook's path but `Marks.annotate`, `Marks.of` and `Marks.of_edge`
  (dict look-ups under the store's lock): the current states are computed by
  kg/memory/stale_marks.py's pass, which hands each graph its read marks (joined into a full read's
  view by kg/core/graph.py as it is built: a read pays for the few marks only).
"""

import collections
import os
import re
import stat

from ..core import graph, model, staleness

RECORD_BYTES = 16 * 1024 * 1024  # bytes a put hashes at most; past it, files are recorded by size and time
_HEX = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


# ---- git's files, read without running git

def git_dir(root):
    """The git directory of a working tree root, or None (a plain folder)."""
    if not root:
        return None
    p = os.path.join(root, ".git")
    try:
        if os.path.isdir(p):
            return p
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                line = f.read(4096).strip()
            if line.startswith("gitdir:"):
                d = line[7:].strip()
                d = d if os.path.isabs(d) else os.path.join(root, d)
                return d if os.path.isdir(d) else None
    except OSError:
        return None
    return None


def _read(path, limit=4096):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit).strip()
    except OSError:
        return None


def _common_dir(gdir):
    common = _read(os.path.join(gdir, "commondir"))
    if common:
        return os.path.normpath(common if os.path.isabs(common) else os.path.join(gdir, common))
    return gdir


def head_commit(gdir):
    """The commit HEAD names (detached or through a branch, loose or packed), or None (no commit yet,
    an unreadable repository)."""
    if not gdir:
        return None
    head = _read(os.path.join(gdir, "HEAD"))
    if not head:
        return None
    if _HEX.match(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head[4:].strip()
    if ".." in ref.split("/"):
        return None
    common = _common_dir(gdir)
    for d in (gdir, common):
        sha = _read(os.path.join(d, ref))
        if sha and _HEX.match(sha):
            return sha
    try:
        with open(os.path.join(common, "packed-refs"), encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref and _HEX.match(parts[0]):
                    return parts[0]
    except OSError:
        pass
    return None


def checkout_key(gdir):
    """What changes when the checkout does (a commit, a pull, a checkout, a staged change): HEAD's
    commit and the index file's size and time. Two stats and two small reads."""
    if not gdir:
        return None
    try:
        st = os.stat(os.path.join(gdir, "index"))
        index = (st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        index = None
    return head_commit(gdir), index


# ---- one file

def stat_key(path):
    """(size, mtime_ns, inode, ctime_ns) of a regular file, False when there is none (deleted), None
    when it cannot be told (a permission error)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return False
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


def read_file(path, limit=staleness.HASH_MAX):
    """The bytes of a regular file of at most `limit` bytes, else None. O_NONBLOCK: a FIFO swapped in
    after the stat never blocks; fstat checks what was opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def resolve(root, path):
    """The absolute file of a touch's path: relative ones under the project root (none without one)."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    if not root:
        return None
    return os.path.normpath(os.path.join(root, path))


def touch_state(full, path, part, budget=None):
    """The state of one touch now (see kg/core/staleness.py state_of): None when the file is not a
    readable regular file or the part is not in it. budget: [bytes left] for a put."""
    key = stat_key(full)
    if not key:
        return None
    size, mtime_ns = key[0], key[1]
    if size > staleness.HASH_MAX or (budget is not None and size > budget[0]):
        return staleness.stat_state(size, mtime_ns / 1e9) if part is None else None
    data = read_file(full)
    if data is None:
        return None
    if budget is not None:
        budget[0] -= len(data)
    return staleness.state_of(data, path, part)


def record(root, touches, user_level=False):
    """A node's `_files` for its touches now, or None when none of them is a file that exists."""
    files, budget = {}, [RECORD_BYTES]
    for touch in dict.fromkeys(touches or ()):
        path, part = staleness.split_touch(touch)
        if path is None or (user_level and not os.path.isabs(path)):
            continue
        full = resolve(None if user_level else root, path)
        if full is None:
            continue
        state = touch_state(full, path, part, budget)
        if state is not None:
            files[touch] = state
    if not files:
        return None
    out = {"files": files}
    commit = None if user_level else head_commit(git_dir(root))
    if commit:
        out["commit"] = commit
    return out


def stamp(g, node):
    """Record the states of the files a node about to be put touches (a put makes it current)."""
    user = g.level == "user"
    files = record(None if user else g.project_path, node.get("touches"), user_level=user)
    if files:
        node["_files"] = files
    else:
        node.pop("_files", None)
    return node


def stamp_edge(g, edge):
    """Record the states of an edge's ends that are files (not nodes of g), as a node's touches:
    a put of the edge makes it current (contract 12: file-path edge ends are judged the same way)."""
    ends = [e for e in (edge.get("from"), edge.get("to")) if isinstance(e, str) and e not in g.nodes]
    user = g.level == "user"
    files = record(None if user else g.project_path, ends, user_level=user) if ends else None
    if files:
        edge["_files"] = files
    else:
        edge.pop("_files", None)
    return edge


# ---- the marks the pass computed, read by the request paths

Mark = collections.namedtuple("Mark", "version since text changes public")
"""A node's mark: judged at its version(), stale since `since`, the few words, the Changes, and
the "stale" a NODE carries (made once by the pass: a read only looks it up; never mutated)."""


def make_mark(version_, since, changes, said=None):
    """said: the node's gist at that version (the few words do not repeat what it names)."""
    text = staleness.mark(changes, said)
    m = Mark(version_, since, text, tuple(changes), None)
    return m._replace(public=public(m))


def version(item):
    """Which put of a node (or edge) a mark was judged at: every put raises `_v` and sets `_write_ts`."""
    return graph.version(item)


class Marks:
    """graph key -> {node id: Mark} (`by_graph`) and -> {edge key: Mark} (`edges`), swapped in whole
    by the pass (kg/memory/stale_marks.py) through `swap`, which also hands each graph its read
    marks (Graph.read_marks: a full read joins them as it builds its view). A mark holds only while
    the node or edge is at the version it was judged at: a put clears it at once."""

    def __init__(self):
        self.by_graph = {}
        self.edges = {}

    @staticmethod
    def key(g):
        return g.level, g.project_path

    def swap(self, by_graph, edges, graphs):
        """The pass's new marks, and each loaded graph's read marks (lock held)."""
        self.by_graph, self.edges = by_graph, edges
        for g in graphs:
            nodes, ends = by_graph.get(self.key(g)), edges.get(self.key(g))
            g.read_marks = None if not nodes and not ends else {
                "nodes": {nid: (m.version, {"stale": m.public}) for nid, m in (nodes or {}).items()},
                "edges": {k: (m.version, {"stale": m.public}) for k, m in (ends or {}).items()}}

    def valid(self, g):
        """{id: Mark} of g's nodes whose mark still holds (lock held)."""
        marks = self.by_graph.get(self.key(g))
        if not marks:
            return {}
        nodes = g.nodes
        out = {}
        for nid, m in marks.items():
            node = nodes.get(nid)
            if node is not None and version(node) == m.version:
                out[nid] = m
        return out

    def of(self, g, nid):
        m = self.by_graph.get(self.key(g), {}).get(nid)
        node = g.nodes.get(nid) if m is not None else None
        return m if node is not None and version(node) == m.version else None

    def valid_edges(self, g):
        """{edge key: Mark} of g's edges whose mark still holds (lock held)."""
        marks = self.edges.get(self.key(g)) or {}
        return {k: m for k, m in marks.items() if k in g.edges and version(g.edges[k]) == m.version}

    def of_edge(self, g, key):
        """The Mark of one edge of g (by its key) while it holds, or None (lock held)."""
        m = self.edges.get(self.key(g), {}).get(key)
        edge = g.edges.get(key) if m is not None else None
        return m if edge is not None and version(edge) == m.version else None

    def annotate(self, g, items, level=None):
        """Give the public node dicts of g in `items` that are stale their "stale" (what changed):
        copies, in place in the list (a dict may be the change log's own); lock held. level: only
        the items of that level (a kg_sync's list holds both). A full read's view has them joined
        already (a graph.Joined list): nothing to do."""
        marks = self.by_graph.get(self.key(g))
        if not marks or not items or isinstance(items, graph.Joined):
            return items
        nodes, get = g.nodes, marks.get
        for i, item in enumerate(items):
            m = get(item["id"])
            if m is None or (level is not None and item.get("level") != level):
                continue
            node = nodes.get(item["id"])
            if node is not None and version(node) == m.version:
                items[i] = dict(item, stale=m.public)
        return items

    def annotate_edges(self, g, items, level=None):
        """annotate for public edge dicts (a kg_sync's edges): copies carrying "stale" (lock held)."""
        marks = self.edges.get(self.key(g))
        if not marks or not items:
            return items
        for i, item in enumerate(items):
            if level is not None and item.get("level") != level:
                continue
            key = model.edge_key(item["from"], item["to"], item["rel"])
            m, edge = marks.get(key), g.edges.get(key)
            if m is not None and edge is not None and version(edge) == m.version:
                items[i] = dict(item, stale=m.public)
        return items


def public(m):
    """The "stale" of a NODE (REST, structuredContent): the mark and what changed, touch by touch."""
    files = []
    for c in m.changes[:5]:
        f = {"touch": c.touch, "change": c.kind}
        for name, value in (("to", c.to), ("commits", c.commits), ("lines_changed", c.changed),
                            ("lines", c.total)):
            if value is not None:
                f[name] = value
        files.append(f)
    return {"mark": m.text, "since": m.since, "files": files, "more": max(0, len(m.changes) - 5)}
