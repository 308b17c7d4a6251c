"""The pass that keeps the stale marks current, off every request's path (contract section 12).

Rules owned here:
- The maintenance beat calls `tick`: a pass runs on its own thread when the store changed, a
  checkout changed (HEAD or the index: a commit, a pull, a checkout), or SWEEP_S went by (edits not
  yet staged); never two at once. A pass snapshots each loaded graph's recorded states under the
  store's lock, judges them outside it, and swaps the marks in under it.
- Files are stat-ed each pass and read again only when their stat changed (size, time, inode).
- git runs only here, and only for nodes already judged stale in a git working tree: renames and
  lines changed (`git diff -M` of the recorded commit against the working tree, per commit, cached
  per checkout and file states) and commits since (`git log --name-only` back LOG_MAX commits, per
  HEAD); each call with a timeout and a low priority, at most GIT_CALLS a pass. What git cannot
  tell (git missing or slow, a shallow clone, a commit not here) is left out of the mark; what
  could not be judged at all is not marked; `problems` says why, for `kgd doctor`.
"""

import bisect
import logging
import os
import threading
import time

from ..core import staleness
from . import file_states

log = logging.getLogger(__name__)

SWEEP_S = 5.0      # seconds between passes when nothing seems to have changed
LOG_MAX = 2000     # commits looked back for "N commits ago"
GIT_CALLS = 40     # git calls per pass at most
GIT_TIMEOUT = 10.0
GIT_NICE = 10
EDGE = "edge"     # an edge's entry in a pass is (EDGE, its key): node ids are strings


class _File:
    __slots__ = ("key", "whole", "parts")

    def __init__(self, key):
        self.key, self.whole, self.parts = key, None, {}


class Watcher:
    """The marks (`marks`, a file_states.Marks read by the request paths) and the pass behind them."""

    def __init__(self, store, clock=None):
        self.store = store
        self.clock = clock or store.clock  # `since` compares with the times a session was shown nodes
        self.marks = file_states.Marks()
        self.enabled = True
        self.problems = {}      # root -> why some marks say less than they could
        self.last = None        # {"seconds", "at", "nodes", "stale", "stale_edges", "git_calls"} of the last pass
        self._files = {}        # absolute path -> _File
        self._logs = {}         # root -> (head, {commit: position}, {path: [positions]})
        self._diffs = {}        # (root, commit) -> (checkout key, generation, renames, numstat)
        self._gen = {}          # root -> generation: grows whenever a file under it changed
        self._seen_keys = {}    # root -> checkout key at the last pass
        self._seq = None
        self._at = 0.0
        self._pass_lock = threading.Lock()
        self._failed = set()
        self._thread = None
        self._calls = 0

    # ---- when

    def tick(self):
        """On the maintenance beat: start a pass on a thread when one is due (never blocks)."""
        if not self.enabled or (self._thread is not None and self._thread.is_alive()):
            return
        if not self.due():
            return
        self._thread = threading.Thread(target=self.refresh, name="kgd-stale-marks", daemon=True)
        self._thread.start()

    def due(self):
        if self._seq != self.store.log.seq or time.monotonic() - self._at >= SWEEP_S:
            return True
        with self.store.lock:
            roots = [d.graph.project_path for d in self.store.registry.durables() if d.graph.level == "project"]
        return any(file_states.checkout_key(file_states.git_dir(r)) != self._seen_keys.get(r) for r in roots)

    def wait(self, timeout=30.0):
        t = self._thread
        if t is not None:
            t.join(timeout)

    # ---- one pass

    def refresh(self):
        """One pass over every loaded graph (tests call it directly)."""
        with self._pass_lock:
            try:
                self._refresh()
            except Exception:  # a pass must never take the daemon down; the next one retries
                log.exception("the stale-marks pass failed")

    def _refresh(self):
        started = time.monotonic()
        self._calls, self._failed = 0, set()  # roots where a git call of this pass failed
        store = self.store
        with store.lock:
            seq = store.log.seq
            jobs = []
            for d in store.registry.durables():
                g = d.graph
                entries = [(nid, file_states.version(n), n["_files"]) for nid, n in g.nodes.items()
                           if isinstance(n.get("_files"), dict)]
                entries += [((EDGE, k), file_states.version(e), e["_files"]) for k, e in g.edges.items()
                            if isinstance(e.get("_files"), dict)]  # file-path edge ends, judged alike
                gists = {e[0]: g.nodes[e[0]].get("gist") for e in entries if type(e[0]) is not tuple}
                jobs.append((file_states.Marks.key(g), g.project_path if g.level == "project" else None,
                             g.level == "user", entries, gists))
        old_nodes, old_edges = self.marks.by_graph, self.marks.edges
        new, new_edges, nodes, stale = {}, {}, 0, 0
        for key, root, user, entries, gists in jobs:
            old = dict(old_nodes.get(key) or {})
            old.update(((EDGE, k), m) for k, m in (old_edges.get(key) or {}).items())
            found = self._judge_graph(root, user, entries, old, gists)
            new[key] = {nid: m for nid, m in found.items() if type(nid) is not tuple}
            new_edges[key] = {nid[1]: m for nid, m in found.items() if type(nid) is tuple}
            nodes += sum(1 for e in entries if type(e[0]) is not tuple)
            stale += len(new[key])
        with store.lock:
            self.marks.swap(new, new_edges, [d.graph for d in store.registry.durables()])
        self._seq, self._at = seq, time.monotonic()
        self.last = {"seconds": round(self._at - started, 3), "at": self.clock(), "nodes": nodes, "stale": stale,
                     "stale_edges": sum(len(m) for m in new_edges.values()), "git_calls": self._calls}

    def _judge_graph(self, root, user, entries, old, gists=None):
        """{id or (EDGE, key): Mark} of the entries found stale. gists: id -> the gist of the version
        judged (a mark does not repeat what its gist names: staleness.mark)."""
        gdir = None if user else file_states.git_dir(root)
        ckey = file_states.checkout_key(gdir) if gdir else None
        if root:
            self._seen_keys[root] = ckey
        touched = self._sweep(root, user, entries)
        found = []
        for nid, wts, rec in entries:
            seen = {t: touched.get(t) for t in (rec.get("files") or {}) if isinstance(t, str)}
            changes = staleness.judge(rec, seen)
            if changes:
                found.append((nid, wts, rec, seen))
        marks, now = {}, self.clock()
        for nid, wts, rec, seen in found:
            details = {}
            if gdir and isinstance(rec.get("commit"), str):
                details = self._details(root, gdir, ckey, rec["commit"], seen, touched)
            changes = staleness.judge(rec, seen, details)
            if not changes:
                continue
            prev = old.get(nid)
            since = prev.since if prev is not None and prev.version == wts else now
            marks[nid] = file_states.make_mark(wts, since, changes, (gists or {}).get(nid))
        return marks

    def _sweep(self, root, user, entries):
        """{touch: Seen} of every touch the entries record, from each file's stat, reading a file
        again only when its stat changed (or a part not asked for before is needed)."""
        wanted = {}   # full path -> {touch: (path, part, recorded)}
        for _, _, rec in entries:
            files = rec.get("files")
            if not isinstance(files, dict):
                continue
            for touch, state in files.items():
                path, part = staleness.split_touch(touch)
                if path is None or not isinstance(state, dict) or (user and not os.path.isabs(path)):
                    continue
                full = file_states.resolve(None if user else root, path)
                if full is not None:
                    wanted.setdefault(full, {})[touch] = (path, part, state)
        out, changed = {}, False
        for full, touches in wanted.items():
            key = file_states.stat_key(full)
            f = self._files.get(full)
            if f is None or f.key != key:
                f = self._files[full] = _File(key)
                changed = changed or key is not None
            for touch, (path, part, state) in touches.items():
                out[touch] = self._seen(f, full, path, part, state)
        if changed and root:
            self._gen[root] = self._gen.get(root, 0) + 1
        return out

    def _seen(self, f, full, path, part, recorded):
        if f.key is None:
            return staleness.Seen(None, None, None)   # cannot be told (permission): not judged
        if f.key is False:
            return staleness.Seen(False, None, None)  # gone: git may name where it went
        size, mtime_ns = f.key[0], f.key[1]
        if "size" in recorded and "id" not in recorded:
            return staleness.Seen(True, staleness.stat_state(size, mtime_ns / 1e9), None)
        want = (part, recorded.get("id") if part and part[0] == "lines" else None)
        if want in f.parts:
            return staleness.Seen(True, f.parts[want], None)
        if size > staleness.HASH_MAX:
            return staleness.Seen(None, None, None)
        data = file_states.read_file(full)
        if data is None:
            return staleness.Seen(None, None, None)
        if f.whole is None:
            f.whole = staleness.state_of(data, path, None)
        state = f.whole if part is None else staleness.state_of(data, path, part, recorded)
        f.parts[want] = state
        return staleness.Seen(True, state, None)

    # ---- what git adds

    def _details(self, root, gdir, ckey, commit, seen, touched):
        """{path: (commits since, lines changed, lines now)} for the stale touches of a node recorded at
        `commit`; fills in the new path of a renamed file in `seen`."""
        diff = self._diff(root, commit, ckey)
        logd = self._log(root, ckey[0] if ckey else None)
        out = {}
        for touch, s in list(seen.items()):
            if s is None:
                continue
            path, part = staleness.split_touch(touch)
            rel = _relative(path, root)
            if rel is None:
                continue
            if diff is not None and s.exists is False and rel in diff[0]:
                seen[touch] = staleness.Seen(False, None, _shown_path(diff[0][rel], path, root))
            commits = _commits_since(logd, commit, rel) if logd is not None else None
            changed = total = None
            if diff is not None and part is None and s.exists:
                stat = diff[1].get(rel)
                changed = max(stat) if stat else None
                total = (s.state or {}).get("lines")
                if stat is None and commits == 0:
                    commits = None  # the diff does not see it (untracked): say nothing of commits
            out[path] = (commits, changed, total)
        return out

    def _git(self, args, root):
        if self._calls >= GIT_CALLS:
            return None
        self._calls += 1
        from . import git_runner  # subprocess: only once a node is stale, never at start-up

        try:
            code, outp, err = git_runner.run(args, root, timeout=GIT_TIMEOUT, check=False, nice=GIT_NICE)
        except git_runner.GitError as exc:
            self.problems[root] = "marks name no renames or commits: %s" % exc.message
            self._failed.add(root)
            return None
        if code != 0:
            self.problems[root] = "git %s: %s" % (args[0], git_runner.summary(err))
            self._failed.add(root)
            return None
        if root not in self._failed:  # a later call that worked does not hide an earlier one's failure
            self.problems.pop(root, None)
        return outp

    def _diff(self, root, commit, ckey):
        """(renames {old: new}, numstat {path: (added, deleted)}) of the working tree against a
        commit, cached until the checkout or a file under the root changes."""
        gen = self._gen.get(root, 0)
        got = self._diffs.get((root, commit))
        if got is not None and got[0] == ckey and got[1] == gen:
            return got[2]
        names = self._git(["diff", "-M", "-z", "--no-ext-diff", "--name-status", commit, "--"], root)
        nums = self._git(["diff", "-M", "-z", "--no-ext-diff", "--numstat", commit, "--"], root) \
            if names is not None else None
        value = None if names is None or nums is None else (_renames(names), _numstat(nums))
        if len(self._diffs) > 500:
            self._diffs.clear()
        self._diffs[(root, commit)] = (ckey, gen, value)
        return value

    def _log(self, root, head):
        if not head:
            return None
        got = self._logs.get(root)
        if got is not None and got[0] == head:
            return got
        out = self._git(["log", "--no-renames", "--format=%x01%H", "--name-only", "-n", str(LOG_MAX), head, "--"],
                        root)
        if out is None:
            return None
        pos, touched = {}, {}
        for line in out.split("\n"):
            if line.startswith("\x01"):
                pos[line[1:].strip()] = len(pos)
            elif line and pos:
                touched.setdefault(line, []).append(len(pos) - 1)
        got = self._logs[root] = (head, pos, touched)
        return got


def _relative(path, root):
    """A touch's path as git names it (relative to the repository's top), or None outside it."""
    if not os.path.isabs(path):
        return os.path.normpath(path).replace(os.sep, "/")
    rel = os.path.relpath(path, root)
    return None if rel.startswith("..") else rel.replace(os.sep, "/")


def _shown_path(new_rel, path, root):
    return os.path.join(root, new_rel) if os.path.isabs(path) else new_rel


def _commits_since(logd, commit, rel):
    """Commits after `commit` (within the log) that changed the file, or None when the commit is not
    in the log (older than LOG_MAX, not fetched, beyond a shallow clone's edge)."""
    _, pos, touched = logd
    at = pos.get(commit)
    if at is None:
        return None
    return bisect.bisect_left(touched.get(rel, []), at)


def _renames(out):
    """{old: new} of `git diff -M -z --name-status`."""
    parts = out.split("\0")
    renames, i = {}, 0
    while i < len(parts):
        status = parts[i]
        if not status:
            i += 1
            continue
        if status[0] in "RC" and i + 2 < len(parts):
            if status[0] == "R":
                renames[parts[i + 1]] = parts[i + 2]
            i += 3
        else:
            i += 2
    return renames


def _numstat(out):
    """{path: (added, deleted)} of `git diff -M -z --numstat` (a rename under its old path; binary
    files left out)."""
    parts = out.split("\0")
    stats, i = {}, 0
    while i < len(parts):
        head = parts[i]
        if not head:
            i += 1
            continue
        fields = head.split("\t")
        if len(fields) == 3 and fields[2] == "" and i + 2 < len(parts):
            path, i = parts[i + 1], i + 3   # a rename: old and new path follow
        elif len(fields) == 3:
            path, i = fields[2], i + 1
        else:
            i += 1
            continue
        if fields[0].isdigit() and fields[1].isdigit():
            stats[path] = (int(fields[0]), int(fields[1]))
    return stats
