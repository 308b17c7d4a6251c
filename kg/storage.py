"""Files on disk (contract section 4): paths, slugs, atomic writes, the journal, healing, the lock.

Rules owned here:
- ROOT/user.json, ROOT/sessions.json, ROOT/projects/<slug>/graph.json, ROOT/kgd.lock
  ("pid N port P", flocked by the running daemon); files 0600, folders 0700.
- <slug> is the project root's base name, or base name + "-" + 8 hex digits of a hash of the
  resolved path when that slug already holds another project's graph.
- A graph file is only ever written whole: temp file in the same folder, flush, fsync,
  os.replace, fsync the folder; the previous good file is kept as <file>.prev.
- A mutation is made durable by appending one JSON line to the graph's journal
  (<file minus .json>.journal) and fdatasyncing it; concurrent writers share one sync
  (group commit). The journal is folded into the graph file by the atomic writer, then emptied.
  Replay at start drops a torn last record (it was never acknowledged).
- A file that fails to parse is moved aside to <file>.corrupt-<timestamp> and .prev is used.
"""

import errno
import fcntl
import json
import logging
import os
import re
import threading
import time

from .errors import BadInput, Conflict, StorageError
from .text import compact_json

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path):
    """Create path and any missing parents with mode 0700 (makedirs gives parents the umask's mode)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        ensure_dir(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass


def sync_appended(fd):
    """Make appended records durable: fdatasync flushes the data and the file size needed to
    read it back, without waiting for timestamps as fsync does (about 20 % cheaper here).
    macOS has no fdatasync: fsync there."""
    sync = getattr(os, "fdatasync", None) or os.fsync
    sync(fd)


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def storage_error(exc, what):
    reason = os.strerror(exc.errno) if getattr(exc, "errno", None) else str(exc)
    hint = " (the disk is full)" if getattr(exc, "errno", None) == errno.ENOSPC else ""
    return StorageError("Could not save %s: %s%s. Nothing was changed; free space or fix permissions "
                        "under the storage root and retry." % (what, reason, hint))


def atomic_write(path, data, keep_prev=True, mode=None):
    """Write bytes to path so that a crash leaves either the old or the new file, never a mix.
    keep_prev: the replaced file stays as <path>.prev (the graph files' rolling good copy; not
    wanted beside a person's own files or an export). mode: a file meant for others (a
    repository's), created with that mode less the umask; by default 0600 whatever the umask."""
    folder = os.path.dirname(path) or "."
    ensure_dir(folder)
    tmp = os.path.join(folder, ".tmp-%s.part" % os.urandom(6).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE if mode is None else mode)
    try:
        try:
            if mode is None:
                os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_prev and os.path.exists(path):
            # Keep the previous good state without ever leaving `path` missing.
            prev_tmp = tmp + ".prev"
            os.link(path, prev_tmp)
            os.replace(prev_tmp, path + ".prev")
        os.replace(tmp, path)
        fsync_dir(folder)
    except BaseException:
        for p in (tmp, tmp + ".prev"):
            try:
                os.unlink(p)
            except OSError:
                pass
        raise


def exists_or_prev(path):
    """The file or its .prev copy exists: what load_json can read (it falls back to .prev)."""
    return os.path.exists(path) or os.path.exists(path + ".prev")


def dumps(obj):
    return compact_json(obj).encode("utf-8")


def _parse_file(path):
    with open(path, "rb") as f:
        data = f.read()
    obj = json.loads(data.decode("utf-8"))
    if not isinstance(obj, dict):
        raise ValueError("top level is not a JSON object")
    return obj


def load_json(path, clock=time.time):
    """Load a JSON object file, healing from .prev; None when neither exists.

    A file that does not parse is quarantined as <file>.corrupt-<timestamp>, never deleted."""
    prev = path + ".prev"
    for candidate in (path, prev):
        if not os.path.exists(candidate):
            continue
        try:
            obj = _parse_file(candidate)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            aside = base = "%s.corrupt-%d" % (candidate, int(clock()))
            n = 1
            while os.path.exists(aside):
                aside = "%s-%d" % (base, n)
                n += 1
            log.warning("%s does not parse (%s); moved aside to %s", candidate, exc, aside)
            try:
                os.replace(candidate, aside)
            except OSError:
                log.exception("could not move %s aside", candidate)
            continue
        if candidate == prev:
            log.warning("using %s: the main file was missing or corrupt", prev)
            try:
                atomic_write(path, _read_bytes(prev))
            except OSError:
                log.exception("could not restore %s from .prev", path)
        return obj
    return None


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- slugs and paths

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def journal_path(graph_path):
    """The journal beside a graph file: <file minus .json>.journal."""
    if graph_path.endswith(".json"):
        return graph_path[:-len(".json")] + ".journal"
    return graph_path + ".journal"


def base_slug(project_path):
    name = os.path.basename(os.path.normpath(project_path)) or "root"
    slug = _SLUG_BAD.sub("-", name).strip(".-") or "project"
    return slug[:80]


def hashed_slug(project_path):
    import hashlib  # only on a slug collision: hashlib costs start-up memory

    digest = hashlib.sha256(project_path.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return "%s-%s" % (base_slug(project_path), digest)


class Layout:
    """Where everything lives under the storage root."""

    def __init__(self, root):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.user_file = os.path.join(self.root, "user.json")
        self.sessions_file = os.path.join(self.root, "sessions.json")
        self.projects_dir = os.path.join(self.root, "projects")
        self.lock_file = os.path.join(self.root, "kgd.lock")

    KGD_NAMES = ("user.json", "user.journal", "sessions.json", "projects", "kgd.lock", "kgd.log", "identities.json",
                 "sync", "sync.json", "sync-status.json")

    def holds_only_kgd_files(self):
        """True when every entry of the root is one kgd writes (or a .prev / .corrupt / temp
        copy of one): then tightening the root's mode touches nothing else."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return False
        return all(n in self.KGD_NAMES or n.startswith(".tmp-")
                   or any(n.startswith(k + ".") for k in self.KGD_NAMES) for n in names)

    def prepare_root(self):
        """Create the root 0700, or tighten a root holding only kgd's files; refuse one kgd
        cannot write."""
        if not os.path.isdir(self.root):
            ensure_dir(self.root)
        elif os.stat(self.root).st_mode & 0o077:
            if self.holds_only_kgd_files():
                os.chmod(self.root, 0o700)  # e.g. made by an older tool with the umask's mode
            else:  # a shared folder (--root ~ ?): not ours to re-permission
                log.warning("storage root %s is readable by other users and holds other files; "
                            "use a folder of its own, or chmod 700 it", self.root)
        if not os.access(self.root, os.W_OK):
            raise BadInput("storage root %s is not writable." % self.root)

    def graph_file(self, slug):
        return os.path.join(self.projects_dir, slug, "graph.json")

    def journal_file(self, slug):
        return journal_path(self.graph_file(slug))

    def project_slugs(self, with_journals=False):
        """Slugs holding a graph file (or its .prev); with_journals also those holding only a
        non-empty journal (the daemon never loads those: no file records their project, so
        the tools that read files report them instead)."""
        try:
            names = sorted(os.listdir(self.projects_dir))
        except OSError:
            return []
        out = []
        for n in names:
            f = self.graph_file(n)
            if exists_or_prev(f):
                out.append(n)
            elif with_journals:
                j = journal_path(f)
                if os.path.exists(j) and os.path.getsize(j) > 0:
                    out.append(n)
        return out

    def recorded_project_path(self, slug):
        """The project_path a slug's graph file records, without loading the whole graph twice."""
        obj = load_json(self.graph_file(slug))
        if obj is None:
            return None
        meta = obj.get("_meta") if isinstance(obj.get("_meta"), dict) else {}
        return meta.get("project_path")

    def slug_for(self, project_path, known=None):
        """The slug rule: base name, unless it holds another project's graph; then base-hash.

        `known` maps slug -> project_path for graphs already loaded (saves reading files)."""
        known = known or {}
        for slug in (base_slug(project_path), hashed_slug(project_path)):
            owner = known.get(slug)
            if owner is None and exists_or_prev(self.graph_file(slug)):
                owner = self.recorded_project_path(slug)
                if owner is None:
                    # A graph without a recorded path (an old plugin file): claim it for the first
                    # project whose base name matches.
                    return slug
            if owner is None or owner == project_path:
                return slug
        return hashed_slug(project_path)


# ---------------------------------------------------------------- journal

class Journal:
    """Append-only record log beside a graph file; group-committed fsyncs.

    append() is called under the store's lock (so records are ordered) and only writes;
    commit(ticket) is called outside it and returns once that record is on disk. Whoever
    fsyncs covers every record appended before the fsync started."""

    def __init__(self, path):
        self.path = path
        self._fd = None
        self._appended = 0
        self._synced = 0
        self._size = 0
        self._tail = (0, 0)  # (last ticket, size after it), read together by commit()
        self._durable_size = 0
        self._lost = 0  # tickets up to this one were in a batch whose fsync failed
        self._undone = set()  # tickets cut off by undo()
        self.failed = False
        self._sync_lock = threading.Lock()
        self.records = 0  # records since the last fold

    def _open(self):
        if self._fd is None:
            ensure_dir(os.path.dirname(self.path))
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            size = os.fstat(self._fd).st_size
            if size:
                # A torn last record (crash mid-append) must not have the next record glued to it.
                with open(self.path, "rb") as f:
                    data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep != size:
                    os.ftruncate(self._fd, keep)
                    os.fsync(self._fd)
                    size = keep
            self._size = self._durable_size = size
            self._tail = (self._appended, self._size)
        return self._fd

    def append(self, record):
        """Write one record; returns a ticket for commit(). Raises StorageError and leaves the
        journal as it was when the disk refuses."""
        line = dumps(record) + b"\n"
        if self.failed:
            raise StorageError("the disk failed to save an earlier change; kgd is restoring the last saved "
                               "state of this graph. Retry in a moment.")
        try:
            fd = self._open()
            start = self._size
            view = memoryview(line)
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        except OSError as exc:
            raise storage_error(exc, "the change") from exc
        self._size += len(line)
        self._appended += 1
        self.records += 1
        self._tail = (self._appended, self._size)
        return self._appended

    def commit(self, ticket):
        """Block until the record `ticket` is durable; one fsync serves every waiter."""
        if self._synced >= ticket:
            return
        with self._sync_lock:
            if self._synced >= ticket:
                return
            if self.failed or ticket <= self._lost or ticket in self._undone:
                raise StorageError("the disk failed to save this change; it was not kept. Retry in a moment.")
            target, size = self._tail
            try:
                if self._fd is not None:
                    sync_appended(self._fd)
                else:  # closed by a reload under the store lock: sync the file through a fresh fd
                    fd = os.open(self.path, os.O_WRONLY)
                    try:
                        sync_appended(fd)
                    finally:
                        os.close(fd)
            except OSError as exc:
                # Records after the last good fsync may or may not be on disk: none of them
                # is acknowledged, and rollback() cuts them off before anything else is written.
                self._lost = target
                self.failed = True
                raise storage_error(exc, "the change") from exc
            self._synced = max(self._synced, target)
            self._durable_size = max(self._durable_size, size)

    def rollback(self):
        """After a failed fsync (caller holds the store lock): cut the journal back to what was
        durable, so the file again holds exactly the acknowledged records."""
        with self._sync_lock:
            fd = self._open()
            os.ftruncate(fd, self._durable_size)
            try:
                os.fsync(fd)
            except OSError:
                pass  # the disk is still failing: the next commit will say so
            self._size = self._durable_size
            # Every record appended so far and not yet durable is gone: its commit must fail.
            self._lost = max(self._lost, self._appended)
            self._tail = (self._appended, self._size)
            self.failed = False

    def mark(self):
        """Where the journal is now (caller holds the store lock): undo() cuts back to it."""
        try:
            self._open()
        except OSError as exc:
            raise storage_error(exc, "the change") from exc
        return self._size, self._appended

    def undo(self, mark):
        """Cut off the records appended after mark() by an operation that then failed under
        the same lock hold (none of them was acknowledged; their commits will fail)."""
        size, appended = mark
        with self._sync_lock:
            if self._fd is not None and self._size > size:
                os.ftruncate(self._fd, size)
                self._size = size
            self._undone.update(range(appended + 1, self._appended + 1))
            self._tail = (self._appended, self._size)

    def reset(self):
        """Empty the journal after a fold (caller holds the store lock)."""
        with self._sync_lock:  # not while a commit's sync is running: it would record a stale size
            fd = self._open()
            os.ftruncate(fd, 0)
            os.fsync(fd)
            self._reset_counters()

    def _reset_counters(self):
        self._size = self._durable_size = 0
        self._undone.clear()
        self._tail = (self._appended, 0)
        self.records = 0
        self._synced = self._appended

    def close(self):
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    @staticmethod
    def replay(path):
        """Records in order; a torn or unparseable last record is dropped (never acknowledged)."""
        try:
            data = _read_bytes(path)
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        torn = lines.pop()  # after the final newline: empty unless the last append was torn
        if torn:
            log.warning("%s: dropping a torn last record (%d bytes)", path, len(torn))
        out = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("%s: skipping unreadable record %d (%s)", path, i + 1, exc)
                continue
            out.append(rec)
        return out


# ---------------------------------------------------------------- lock file

_LOCK_LINE = re.compile(r"pid (\d+)(?: port (\d+))?")


def lock_state(layout):
    """(held, pid, port, line) from ROOT/kgd.lock; held = a running daemon holds its flock. Only
    reads: a shared, non-blocking probe never makes a starting daemon fail (unless it starts
    in the same microsecond)."""
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


class RootLock:
    """One daemon per storage root: an exclusive flock on ROOT/kgd.lock, whose one line reads
    "pid N port P" (lock_state reads it back)."""

    def __init__(self, layout):
        self.layout = layout
        self._fd = None

    def acquire(self, info=""):
        ensure_dir(self.layout.root)
        fd = os.open(self.layout.lock_file, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                other = os.read(fd, 200).decode("utf-8", "replace").strip()
            except OSError:
                other = ""
            os.close(fd)
            raise Conflict("another kgd is already running on storage root %s%s; stop it first "
                           "(kgd stop) or use another --root." % (self.layout.root, " (%s)" % other if other else ""))
        os.ftruncate(fd, 0)
        os.write(fd, ("pid %d %s\n" % (os.getpid(), info)).encode())
        self._fd = fd

    def update(self, info):
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, ("pid %d %s\n" % (os.getpid(), info)).encode(), 0)

    def release(self):
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None
