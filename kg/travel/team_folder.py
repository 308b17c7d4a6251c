"""A repository's `.kg/` folder on disk (contract section 9): where its files are, how they are read and written.

Rules owned here:
- The files are untrusted: only regular files inside a real `.kg/` folder are read (no symlink,
  no FIFO), up to kg_format.MAX_FILE bytes. Nothing in them is run.
- A repository's files are written atomically with the repository's modes (0644 / 0755 less the
  umask), never the private root's; `kgd share` creates the layout (.gitattributes, README.md,
  .gitignore beside the data) and keeps what is there.
- What HEAD points at is read from git's own files, without running git: a checkout or a reset
  changes it, so a `.kg/` deleted in place is told apart from a branch without one.
"""

import os
import stat

from ..core import kg_format
from ..disk.files import atomic_write

KG_DIR = ".kg"
REPO_FILE_MODE = 0o644  # less the umask: a repository's file, not the private root's
REPO_DIR_MODE = 0o755
FILES = {"node": kg_format.NODES_FILE, "edge": kg_format.EDGES_FILE}
EXTRA_FILES = {".gitattributes": kg_format.GITATTRIBUTES, "README.md": kg_format.README,
               ".gitignore": kg_format.GITIGNORE}


def kg_dir(root):
    return os.path.join(root, KG_DIR)


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
    """A read-only Graph of what a repository's `.kg/` holds (`kgd show` with no daemon and no
    graph of that project yet)."""
    from ..core.graph import graph_from_obj

    obj = {"nodes": {}, "edges": {}}
    for kind, path in paths_of(root).items():
        records, _ = kg_format.parse(read_file(path)[0], kind)
        for key, r in records.items():
            if not kg_format.is_tombstone(r):
                obj[kind + "s"][key] = kg_format.node_fields(r) if kind == "node" else kg_format.edge_fields(r)
    g = graph_from_obj(obj, "project", root)
    g.shared = True
    return g
