"""`kgd diff`'s `stale` (contract sections 9 and 12): the knowledge of the new state whose code
changed since it was written, judged from the states a node line carries in `.kg/` (`files`, the
same base for every clone) against the new state's tree, by kg/core/staleness.py's rule. Files and
git only, like the rest of `kgd diff`.

Rules owned here:
- What is judged is what the diff is about: every touch of a node the diff adds or changes, and the
  touches of any other node that name a file the change touches (`A..B`: the files that differ
  between A and B; this clone's diff: the files that differ between HEAD and the working tree). A
  node stale before the change and untouched by it is not listed again in every review.
- In a commit, a whole-file touch is judged by the blob id git lists (no content read); a part
  (`PATH#NAME`, `PATH:START-END`) by the part's text in that blob. In the working tree, by the file.
- A touched file missing from the new state is deleted, or renamed when git's rename detection
  between the recorded commit and the new state names the new path. What cannot be judged (no state
  recorded, a path outside the project, git cannot say) is not marked.
"""

import os

from ..core import staleness
from ..memory import git_runner

MAX_BLOB = 64 * 1024 * 1024  # bytes of all blobs read in one `git cat-file --batch`


def _git(root, args):
    try:
        return git_runner.run(args, root, timeout=60)[1]
    except git_runner.GitError:
        return None


def read_blobs(root, ids):
    """{blob id: bytes} for git blob ids, read by one `git cat-file --batch` (a process per file
    would cost a diff over many files seconds); an id git does not have is left out."""
    ids = sorted(set(ids))
    if not ids:
        return {}
    try:
        code, out, _ = git_runner.run(["cat-file", "--batch"], root, timeout=60, check=False,
                                      input=("\n".join(ids) + "\n").encode("ascii"), raw=True)
    except git_runner.GitError:
        return {}
    blobs, at = {}, 0
    while at < len(out):
        end = out.find(b"\n", at)
        if end < 0:
            break
        head = out[at:end].split()
        at = end + 1
        if len(head) != 3 or not head[2].isdigit():
            continue  # "<id> missing"
        size = int(head[2])
        blobs[head[0].decode("ascii", "replace")] = out[at:at + size]
        at += size + 1
    return blobs


def changed_paths(root, a, b):
    """Paths that differ between commits a and b, or (b None) between a and the working tree with
    files git does not track; None when git cannot say."""
    if b is None:
        out = _git(root, ["status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"])
        if out is None:
            return None
        return {entry[3:] for entry in out.split("\0") if len(entry) > 3}
    out = _git(root, ["diff", "--name-only", "-z", "--no-renames", a, b])
    return None if out is None else {p for p in out.split("\0") if p}


def _relative(root, path):
    """A touch's path relative to the project root, or None (outside it, or not a plain path)."""
    if os.path.isabs(path):
        path = os.path.relpath(path, root)
    path = os.path.normpath(path).replace(os.sep, "/")
    if path.startswith("../") or path in ("..", ".") or "\0" in path:
        return None
    return path


class _Tree:
    """The new state's files: a commit (`rev`) or the working tree (rev None)."""

    def __init__(self, root, rev):
        self.root, self.rev, self.blobs, self.contents = root, rev, None, {}

    def _listing(self, paths):
        out = _git(self.root, ["ls-tree", "-r", "-z", self.rev, "--"] + sorted(paths)) if paths else ""
        blobs = {}
        for entry in (out or "").split("\0"):
            meta, _, path = entry.partition("\t")
            bits = meta.split()
            if len(bits) == 3 and bits[1] == "blob":
                blobs[path] = bits[2]
        return blobs if out is not None else None

    def load(self, paths):
        if self.rev is not None:
            self.blobs = self._listing(paths)

    def exists(self, path):
        if self.rev is None:
            return os.path.isfile(os.path.join(self.root, path))
        return None if self.blobs is None else path in self.blobs

    def whole(self, path):
        """The state of the whole file, or None (not judged)."""
        if self.rev is not None:
            blob = (self.blobs or {}).get(path)
            return {"id": blob} if blob else None
        data = self.read(path)
        return None if data is None else staleness.state_of(data, path, None)

    def read(self, path):
        if self.rev is None:
            full = os.path.join(self.root, path)
            try:
                if os.path.getsize(full) > staleness.HASH_MAX:
                    return None
                with open(full, "rb") as f:
                    return f.read()
            except OSError:
                return None
        return self.contents.get((self.blobs or {}).get(path))

    def read_all(self, paths):
        """Read the blobs of `paths` at once (a commit), for part touches."""
        if self.rev is not None:
            want = [self.blobs[p] for p in paths if p in (self.blobs or {})]
            self.contents = read_blobs(self.root, want)


def _renames(root, commit, rev):
    """{old path: new path} git's rename detection finds between a recorded commit and the new state."""
    args = ["diff", "--name-status", "-z", "-M", commit] + ([rev] if rev else [])
    out = _git(root, args) or ""
    bits, out_map, i = out.split("\0"), {}, 0
    while i < len(bits):
        status = bits[i]
        if status.startswith("R") and i + 2 < len(bits):
            out_map[bits[i + 1]] = bits[i + 2]
            i += 3
        else:
            i += 2
    return out_map


def stale(root, nodes, in_diff, changed, rev=None):
    """{id: mark} of `nodes` ({id: .kg/ record}) judged as the module docstring says; `in_diff` the
    ids the diff adds or changes, `changed` the paths the change touches (None: unknown, judge all)."""
    wanted = {}  # id -> {touch: (path, part)}
    for nid, rec in nodes.items():
        files = (rec.get("files") or {}).get("files")
        if not isinstance(files, dict):
            continue
        for touch in files:
            path, part = staleness.split_touch(touch)
            rel = _relative(root, path) if path else None
            if rel and (nid in in_diff or changed is None or rel in changed):
                wanted.setdefault(nid, {})[touch] = (rel, part)
    if not wanted:
        return {}
    tree = _Tree(root, rev)
    tree.load({rel for touches in wanted.values() for rel, _ in touches.values()})
    tree.read_all({rel for touches in wanted.values() for rel, part in touches.values() if part is not None})
    contents, renames, out = {}, {}, {}
    for nid in sorted(wanted):
        recorded = nodes[nid]["files"]
        seen = {}
        for touch, (rel, part) in wanted[nid].items():
            here = tree.exists(rel)
            if here is None:
                continue
            if not here:
                commit = recorded.get("commit")
                if commit and commit not in renames:
                    renames[commit] = _renames(root, commit[:40], rev)
                seen[touch] = staleness.Seen(False, None, (renames.get(commit) or {}).get(rel))
                continue
            if part is None:
                state = tree.whole(rel)
            else:
                if rel not in contents:
                    contents[rel] = tree.read(rel)
                data = contents[rel]
                state = None if data is None else staleness.state_of(data, rel, part, recorded["files"][touch])
                if data is None:
                    continue
            seen[touch] = staleness.Seen(True, state, None) if state is not None or part else None
        changes = staleness.judge({"files": {t: recorded["files"][t] for t in seen}}, seen)
        if changes:
            out[nid] = staleness.mark(changes)
    return out
