"""A graph's journal (contract section 4): how a mutation is made durable before it is acknowledged.

Rules owned here:
- A mutation is made durable by appending one JSON line to the graph's journal
  (<file minus .json>.journal) and fdatasyncing it; concurrent writers share one sync
  (group commit). The journal is folded into the graph file by the atomic writer, then emptied.
- Replay at start drops a torn last record (it was never acknowledged) and skips unreadable ones.
"""

import json
import logging
import os
import threading

from ..core.errors import StorageError
from .files import FILE_MODE, dumps, ensure_dir, read_bytes, storage_error, sync_appended

log = logging.getLogger(__name__)


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
            data = read_bytes(path)
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
