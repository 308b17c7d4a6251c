"""The storage root's files (contract section 4): atomic writes, loading and healing, the lock.

Rules owned here:
- A graph file is only ever written whole: temp file in the same folder, flush, fsync,
  os.replace, fsync the folder; the previous good file is kept as <file>.prev.
- A file that fails to parse is moved aside to <file>.corrupt-<timestamp> and .prev is used.
- ROOT/kgd.lock ("pid N port P") is flocked by the running daemon: one daemon per root; others
  only probe it, never blocking.
"""

import errno
import fcntl
import json
import logging
import os
import re
import stat
import time

from ..core.errors import Conflict, StorageError
from ..core.text import compact_json

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


TEMP_AGE = 3600.0  # seconds: a temp file this old belongs to no write still running


def sweep_temp(folder, min_age=TEMP_AGE, now=None):
    """Remove the temp files a write killed mid-way left in `folder` (`.tmp-*.part`, and its
    `.prev` link), once they are older than min_age: no running write is that slow, and a file
    so named is never anything else. Returns how many went; never raises."""
    now = time.time() if now is None else now
    gone = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not (name.startswith(".tmp-") and (name.endswith(".part") or name.endswith(".part.prev"))):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= min_age:
                os.unlink(path)
                gone += 1
        except OSError:
            pass
    return gone


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
                atomic_write(path, read_bytes(prev))
            except OSError:
                log.exception("could not restore %s from .prev", path)
        return obj
    return None


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


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
