"""A repository's `.kg/` folder on disk (contract section 9): where its files are, how they are read and written.

Rules owned here:
- The files are untrusted: only regular files inside a real `.kg/` folder are read (no symlink,
  no FIFO), up to kg_format.MAX_FILE bytes. Nothing in them is run.
- A repository's files are written atomically with the repository's modes (0644 / 0755 less the
  umask), never the private root's; `kgd share` creates the layout (.gitattributes, README.md,
  .gitignore beside the data) and keeps what is there.
- What HEAD points at is read from git's own files, without running git: a checkout or a reset
  changes it, so a `.kg/` deleted in place is told apart from a branch without one.
- The layout (format 1, round 4): `nodes.jsonl` and `edges.jsonl`, plus any number of
  `changes/NAME.nodes.jsonl` / `changes/NAME.edges.jsonl`; every file of a kind is read as one
  (the merge rule decides between their lines). kgd writes only files git does not track (not in
  the index): a clone's knowledge not yet committed goes to its own `changes/CLONE-N.*.jsonl`,
  named with a random clone id so two clones never pick the same name; once git tracks that file
  (`git add`), kgd moves on to N+1. So no tracked file under `.kg/` is ever left modified by kgd,
  and `git pull`, `checkout`, `rebase`, `stash` never refuse because of it. `kgd fold` (an explicit
  command) folds the committed files into the two base files.
- Which files git tracks is asked of git (`git ls-files`) only when the index file changed since
  the last answer, and never under the store's lock.
"""

import os
import stat

from ..core import kg_format, team_state
from ..disk import files
from ..disk.files import atomic_write

KG_DIR = ".kg"
REPO_FILE_MODE = 0o644  # less the umask: a repository's file, not the private root's
REPO_DIR_MODE = 0o755
FILES = {"node": kg_format.NODES_FILE, "edge": kg_format.EDGES_FILE}
EXTRA_FILES = {".gitattributes": kg_format.GITATTRIBUTES, "README.md": kg_format.README,
               ".gitignore": kg_format.GITIGNORE}


CHANGES_DIR = "changes"
SUFFIX = {"node": ".nodes.jsonl", "edge": ".edges.jsonl"}
MAX_CHANGE_FILES = 2000  # files of changes/ read; past it, `kgd fold` is due (reported)
GIT_TIMEOUT = 10.0


def kg_dir(root):
    return os.path.join(root, KG_DIR)


def changes_dir(root):
    return os.path.join(kg_dir(root), CHANGES_DIR)


def change_kind(name):
    """"node" / "edge" for a changes/ file name, else None (other files there are not read)."""
    for kind, suffix in SUFFIX.items():
        if name.endswith(suffix) and len(name) > len(suffix) and not name.startswith("."):
            return kind
    return None


def layout_files(root):
    """{kind: [path]}: the base file, then every changes/ file of that kind in name order."""
    out = {kind: [os.path.join(kg_dir(root), name)] for kind, name in FILES.items()}
    d = changes_dir(root)
    if real_dir(d):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            names = []
        for name in [n for n in names if change_kind(n)][:MAX_CHANGE_FILES]:
            out[change_kind(name)].append(os.path.join(d, name))
    return out


def sweep_temp(root):
    """The temp files a killed write left in `.kg/` and `.kg/changes/` (old ones only: another
    daemon of this checkout may be writing; git never sees them, .kg/.gitignore names them)."""
    return files.sweep_temp(kg_dir(root)) + files.sweep_temp(changes_dir(root))


def ensure_changes_dir(root):
    d = changes_dir(root)
    if not os.path.isdir(d):
        os.mkdir(d, REPO_DIR_MODE)
    if not real_dir(d):
        raise OSError("%s is not a folder of the repository (a symlink?)" % d)


def own_path(root, clone, n, kind):
    return os.path.join(changes_dir(root), "%s-%d%s" % (clone, n, SUFFIX[kind]))


def target(root, clone, n, kind, is_tracked):
    """(path, n) of this clone's file of `kind` under changes/ that memory's changes go to, once
    git tracks the base file: number n, or n + 1 once git tracks that one or it is gone (kgd
    never modifies a tracked file, and never reuses a name: a stash may bring the old one back)."""
    path = own_path(root, clone, n, kind) if n else None
    if path is None or is_tracked(path) or not os.path.lexists(path):
        n += 1
        path = own_path(root, clone, n, kind)
    return path, n


def own_file_path(root, name):
    """Where an `own` entry's file is: a base file, or one under changes/ (a name, never a path)."""
    name = os.path.basename(name)
    return os.path.join(kg_dir(root), name) if name in FILES.values() else os.path.join(changes_dir(root), name)


def lost(root, own, present, may_run, is_tracked):
    """(lost, forget, known) for `own` (kg/core/team_state.py: what this clone wrote to files git
    did not track): a key whose file is gone from the checkout (not in `present`) while git holds
    that file nowhere (in_history: `git clean`, `git stash -u`, removed by hand) is `lost`
    ({kind: {key: tombstone entry or None}}: written again from memory). A file gone that git
    holds (committed, then a checkout or a reset) left with it: its keys are forgotten
    (`forget`). known is False when git had to be asked but may not run (the store's lock):
    the keys are kept as lost and nothing is written until git can say."""
    out, forget, missing = {k: {} for k in FILES}, {k: {} for k in FILES}, {}
    for kind in FILES:
        for key, value in list(own[kind].items()):
            name, tomb = team_state.own_file(value)
            if name is None:
                forget[kind][key] = None
                continue
            path = own_file_path(root, name)
            if path not in present:
                missing.setdefault(path, []).append((kind, key, tomb))
    if not missing:
        return out, forget, True
    in_git = in_history(root, missing) or set() if may_run else set()
    for path, entries in missing.items():
        gone_with_git = may_run and (path in in_git or is_tracked(path))
        for kind, key, tomb in entries:
            if gone_with_git:
                forget[kind][key] = None
            else:
                out[kind][key] = tomb
    return out, forget, may_run


def index_state(root):
    """The git index file's stat: a `git add`, commit, checkout, stash or pull changes it."""
    return file_state(os.path.join(git_dir(root), "index"))


def tracked(root):
    """The paths under `.kg/` that git tracks (in its index), as absolute paths; None when git
    cannot say (no git, not a repository: then nothing there is tracked by git)."""
    from ..memory import git_runner  # subprocess: only once a shared project is synced, never at start-up

    try:
        _, out, _ = git_runner.run(["ls-files", "-z", "--", KG_DIR], root, timeout=GIT_TIMEOUT)
    except git_runner.GitError:
        return None
    return {os.path.join(root, p) for p in out.split("\0") if p}


def in_history(root, paths):
    """Which of `paths` (files under `.kg/` gone from the checkout) git holds in a commit that a
    branch, a tag, a remote branch, HEAD or HEAD's reflog reaches: such a file left with a
    checkout or a reset, it was not lost. The stash is not asked: a file `git stash -u` took is
    written again under a new name, and its pop brings it back beside. None when git cannot say."""
    from ..memory import git_runner

    rel = sorted({os.path.relpath(p, root) for p in paths})
    found = set()
    for revs in (["--branches", "--tags", "--remotes", "HEAD"], ["--walk-reflogs", "HEAD"]):
        left = [p for p in rel if os.path.join(root, p) not in found]
        if not left:
            break
        try:
            _, out, _ = git_runner.run(["log"] + revs + ["--format=", "--name-only", "-z", "--relative", "--"] + left,
                                       root, timeout=GIT_TIMEOUT)
        except git_runner.GitError:
            return None if not found else found
        found.update(os.path.join(root, p.strip("\n")) for p in out.split("\0") if p.strip("\n"))
    return found


def author(root):
    """Who this clone writes knowledge as: git's user.name there, clipped; None when it is not set
    (a node then carries no author)."""
    from ..memory import git_runner

    try:
        _, out, _ = git_runner.run(["config", "user.name"], root, timeout=GIT_TIMEOUT, check=False, identity=False)
    except git_runner.GitError:
        return None
    name = "".join(ch for ch in out.strip() if ch.isprintable()).strip()[:kg_format.MAX_BY]
    return name or None


def real_dir(path):
    """True for a directory that is not a symlink (a hostile repository may point .kg elsewhere)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def holds_kg(root):
    d = kg_dir(root)
    return real_dir(d) and any(os.path.isfile(os.path.join(d, f)) for f in FILES.values())


def git_dir(root):
    """The checkout's git folder: .git, or where a linked worktree's .git file points."""
    dot = os.path.join(root, ".git")
    try:
        with open(dot, "r", encoding="utf-8") as f:
            first = f.readline().strip()
    except (OSError, ValueError):
        return dot
    if first.startswith("gitdir:"):
        return os.path.join(root, first[len("gitdir:"):].strip())
    return dot


def head_signature(root):
    """What the checkout's HEAD points at, from git's own files (no git is run): HEAD's text and
    its branch's ref, loose or packed. None when unreadable. A checkout or a reset changes it."""
    gd = git_dir(root)
    try:
        with open(os.path.join(gd, "HEAD"), "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    out = [head]
    if head.startswith(b"ref: "):
        ref = head[5:].strip().decode("utf-8", "replace")
        common = gd
        try:
            with open(os.path.join(gd, "commondir"), "r", encoding="utf-8") as f:
                common = os.path.join(gd, f.read().strip())
        except (OSError, ValueError):
            pass
        for where in (gd, common):
            try:
                with open(os.path.join(where, ref), "rb") as f:
                    out.append(f.read(128))
                break
            except OSError:
                continue
        else:
            out.append(file_state(os.path.join(common, "packed-refs")))
    return tuple(out)


def file_state(path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_file(path):
    """(bytes or None, problem or None): a regular file only, never past kg_format.MAX_FILE."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if os.path.islink(path):
            return None, ("%s is a symbolic link; kgd reads only regular files under .kg/ (a link could point "
                          "anywhere): replace it with the file itself" % os.path.basename(path))
        return None, "%s: cannot be read (%s)" % (os.path.basename(path), exc.strerror or exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "%s: not a regular file; skipped" % os.path.basename(path)
        if st.st_size > kg_format.MAX_FILE:
            return None, "%s is %d bytes; the limit is %d: not loaded" % (os.path.basename(path), st.st_size,
                                                                       kg_format.MAX_FILE)
        chunks, left = [], kg_format.MAX_FILE + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), None
    except OSError as exc:
        return None, "%s: cannot be read (%s)" % (os.path.basename(path), exc.strerror or exc)
    finally:
        os.close(fd)


def write_repo_file(path, data):
    atomic_write(path, data, keep_prev=False, mode=REPO_FILE_MODE)


def ensure_layout(root):
    """Create `.kg/` with what git and teammates need beside the data (kept if present)."""
    d = kg_dir(root)
    if not os.path.isdir(d):
        os.mkdir(d, REPO_DIR_MODE)
    if not real_dir(d):
        raise OSError("%s is not a folder of the repository (a symlink?)" % d)
    for name, text in list(EXTRA_FILES.items()) + [(f, "") for f in FILES.values()]:
        path = os.path.join(d, name)
        if not os.path.lexists(path):
            write_repo_file(path, text.encode("utf-8"))


def paths_of(root):
    return {kind: os.path.join(kg_dir(root), name) for kind, name in FILES.items()}


def snapshot(root):
    """A read-only Graph of what a repository's `.kg/` holds, every file of it merged (`kgd show`
    with no daemon and no graph of that project yet)."""
    import time

    from ..core.graph import graph_from_obj

    obj, now = {"nodes": {}, "edges": {}}, time.time()
    for kind, paths in layout_files(root).items():
        views = [kg_format.parse(read_file(p)[0], kind, now)[0] for p in paths] if real_dir(kg_dir(root)) else []
        for key, r in kg_format.merge_files(views, now).items():
            if not kg_format.is_tombstone(r):
                obj[kind + "s"][key] = kg_format.node_fields(r) if kind == "node" else kg_format.edge_fields(r)
    g = graph_from_obj(obj, "project", root)
    g.shared = True
    return g
