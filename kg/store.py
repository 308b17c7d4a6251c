"""MultiProjectGraphStore: the one place that holds graphs, sessions and the change sequence.

Rules owned here:
- The user graph is always loaded; a project graph is loaded on first use, keyed by its
  project root (nearest ancestor of cwd holding .git; a .git file of a linked worktree leads
  to the main worktree; else cwd itself; symlinks resolved).
- One RLock guards every graph and session. A mutation is appended to the graph's journal
  and applied under the lock; its fsync happens after the lock is released (group commit)
  and before the caller answers. Change events reach listeners after the lock is released.
- Every change gets the next number of one global sequence. kg_sync returns what other
  sessions (and compaction) changed after the caller's mark, then moves the mark to the
  sequence number read under the same lock, so no interleaving can hide a change.
- A session is created by kg_read(cwd) / POST /api/sessions, reused by id, expired after
  KG_SESSION_TTL idle. sessions.json is rewritten when a session starts or expires and on
  every maintenance pass (activity and sync marks are flushed lazily).
"""

import contextlib
import logging
import os
import threading
import time

from . import compaction, model, search
from .errors import BadInput, Conflict, KgError, NotFound, StorageError
from .graph import apply_record, graph_from_obj
from .storage import Journal, Layout, RootLock, atomic_write, dumps, ensure_dir, load_json, storage_error

log = logging.getLogger(__name__)

CHANGE_LOG_MAX = 200000


class Settings:
    def __init__(self, max_tokens=5000, grace_days=7.0, orphan_grace_days=365.0, save_interval=30.0,
                 session_ttl=86400.0, fold_delay=1.0, fold_records=20000):
        self.max_tokens = int(max_tokens)
        self.grace_s = float(grace_days) * 86400
        self.orphan_grace_s = float(orphan_grace_days) * 86400
        self.save_interval = float(save_interval)
        self.session_ttl = float(session_ttl)
        self.fold_delay = float(fold_delay)
        self.fold_records = int(fold_records)

    def compaction(self):
        return compaction.Settings(max_tokens=self.max_tokens, grace_s=self.grace_s,
                                   orphan_grace_s=self.orphan_grace_s)


class Session:
    __slots__ = ("id", "project_path", "started", "last_active", "sync_mark", "writes", "reads")

    def __init__(self, sid, project_path, started, sync_mark):
        self.id = sid
        self.project_path = project_path
        self.started = started
        self.last_active = started
        self.sync_mark = sync_mark
        self.writes = 0
        self.reads = 0

    def to_obj(self):
        return {"id": self.id, "project_path": self.project_path, "started": self.started,
                "last_active": self.last_active, "sync_mark": self.sync_mark,
                "writes": self.writes, "reads": self.reads}


def new_session_id():
    """A random UUID4 string (os.urandom directly: the uuid module costs start-up memory)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def resolve_project_root(cwd):
    """The project root for a cwd: nearest ancestor holding .git, else cwd (contract 3)."""
    if not isinstance(cwd, str) or not cwd.strip():
        raise BadInput("cwd must be the absolute path of the directory the agent works in.")
    if "\x00" in cwd or len(cwd) > model.MAX_PATH:
        raise BadInput("cwd is not a usable path (NUL byte or over %d characters)." % model.MAX_PATH)
    try:
        cwd.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("cwd is not a usable path (it holds a lone surrogate).") from None
    if not os.path.isabs(cwd):
        raise BadInput("cwd must be an absolute path, got %r." % cwd[:200])
    path = os.path.realpath(cwd)
    if not os.path.isdir(path):
        raise BadInput("cwd %r is not an existing directory on this machine." % cwd[:200])
    d = path
    while True:
        git = os.path.join(d, ".git")
        if os.path.isdir(git):
            return d
        if os.path.isfile(git):
            return _worktree_main_root(d, git)
        parent = os.path.dirname(d)
        if parent == d:
            return path
        d = parent


def _worktree_main_root(d, git_file):
    """A linked worktree's .git file says `gitdir: <main>/.git/worktrees/<name>`; its
    commondir leads to the main .git, whose parent is the main worktree's root."""
    try:
        with open(git_file, "r", encoding="utf-8") as f:
            first = f.readline().strip()
        if not first.startswith("gitdir:"):
            return d
        gitdir = first[len("gitdir:"):].strip()
        gitdir = os.path.realpath(os.path.join(d, gitdir))
        common = gitdir
        commondir_file = os.path.join(gitdir, "commondir")
        if os.path.isfile(commondir_file):
            with open(commondir_file, "r", encoding="utf-8") as f:
                common = os.path.realpath(os.path.join(gitdir, f.read().strip()))
        if os.path.basename(common) == ".git" and os.path.isdir(os.path.dirname(common)):
            return os.path.dirname(common)
    except (OSError, ValueError):  # unreadable, not UTF-8 (UnicodeDecodeError), NUL in the path
        pass
    return d


class Store:
    def __init__(self, root, settings=None, clock=time.time):
        self.layout = Layout(root)
        self.settings = settings or Settings()
        self.clock = clock
        self.lock = threading.RLock()
        self.root_lock = RootLock(self.layout)
        self.user = None
        self.projects = {}  # project_path -> Graph
        self.journals = {}  # id(graph) -> Journal
        self.sessions = {}
        self.seq = 0
        # (seq, session_id, graph, kind, payload); seqs are consecutive, so the change after a
        # mark is found by index, not by a scan from the oldest.
        self.changes = []
        self.log_floor = 0  # changes at or below this were not kept (restart or trim)
        self.listeners = []
        self.dirty = {}  # id(graph) -> graph with journal records not yet folded
        self.last_write = 0.0
        self.sessions_dirty = False
        self.started = clock()
        self.closed = False
        self.compaction_settings = self.settings.compaction()

    # ------------------------------------------------------------ life cycle

    def open(self, lock_info=""):
        if not os.path.isdir(self.layout.root):
            ensure_dir(self.layout.root)  # created 0700
        elif os.stat(self.layout.root).st_mode & 0o077:
            if self.layout.holds_only_kgd_files():
                os.chmod(self.layout.root, 0o700)  # e.g. made by an older tool with the umask's mode
            else:  # a shared folder (--root ~ ?): not ours to re-permission
                log.warning("storage root %s is readable by other users and holds other files; "
                            "use a folder of its own, or chmod 700 it", self.layout.root)
        if not os.access(self.layout.root, os.W_OK):
            raise BadInput("storage root %s is not writable." % self.layout.root)
        self.root_lock.acquire(lock_info)
        with self.lock:
            self.user = self._load_graph(self.layout.user_file, "user")
            obj = load_json(self.layout.sessions_file) or {}
            self.seq = int(obj.get("seq", 0)) if isinstance(obj.get("seq", 0), int) else 0
            if not obj.get("clean"):
                # sessions.json is saved lazily: after a crash, marks and seq may be stale, so
                # every restored session gets one full resync rather than a silent gap.
                self.seq += 1
            self.log_floor = self.seq
            now = self.clock()
            for raw in (obj.get("sessions") or {}).values() if isinstance(obj.get("sessions"), dict) else ():
                try:
                    s = Session(raw["id"], raw.get("project_path"), float(raw["started"]), int(raw.get("sync_mark", 0)))
                    s.last_active = float(raw.get("last_active", s.started))
                except (KeyError, TypeError, ValueError):
                    continue
                if now - s.last_active < self.settings.session_ttl:
                    self.sessions[s.id] = s
        return self

    def close(self):
        """Flush everything: fold every journal into its graph file, save sessions. On a bad
        disk the journals still hold every acknowledged change; the lock is released anyway."""
        try:
            with self.lock:
                self.closed = True  # a request still running past shutdown must not write
                for g in list(self.dirty.values()):
                    self._fold(g)
                try:
                    self._save_sessions(clean=True)
                except KgError as exc:
                    log.error("could not save sessions.json at shutdown: %s", exc.message)
                for j in self.journals.values():
                    j.close()
        finally:
            self.root_lock.release()

    def _graph_file(self, g):
        return self.layout.user_file if g.level == "user" else self.layout.graph_file(g.slug)

    def _journal_path(self, path):
        return path[:-len(".json")] + ".journal" if path.endswith(".json") else path + ".journal"

    def _load_graph(self, path, level, project_path=None, slug=None):
        obj = load_json(path, self.clock)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = self.clock()
        g = graph_from_obj(obj, level, project_path, slug, fallback_ts=mtime)
        if project_path is not None:
            g.project_path = project_path
        jpath = self._journal_path(path)
        records = Journal.replay(jpath)
        torn = not records and os.path.exists(jpath) and os.path.getsize(jpath) > 0
        for rec in records:
            try:
                apply_record(g, rec)
            except (KeyError, TypeError, ValueError, AttributeError):
                log.warning("%s: skipping a malformed journal record", jpath)
        self.journals[id(g)] = Journal(jpath)
        if records or torn:
            self.dirty[id(g)] = g
            self._fold(g)
        return g

    # ------------------------------------------------------------ graphs and sessions

    def project_graph(self, project_path):
        with self.lock:
            g = self.projects.get(project_path)
            if g is None:
                known = {p.slug: p.project_path for p in self.projects.values() if p.path_known}
                slug = self.layout.slug_for(project_path, known)
                path = self.layout.graph_file(slug)
                stray = next((p for p in self.projects.values() if p.slug == slug and not p.path_known), None)
                if stray is not None:
                    # A graph loaded for search before anyone claimed it (an old file that does not
                    # record its project): it is this project's; record the path from now on.
                    del self.projects[stray.project_path]
                    stray.project_path, stray.path_known = project_path, True
                    self.projects[project_path] = stray
                    self.dirty[id(stray)] = stray
                    self._fold(stray)
                    return stray
                g = self._load_graph(path, "project", project_path, slug)
                self.projects[project_path] = g
                if not os.path.exists(path):
                    # Claim the slug on disk (graph.json records project_path) before any record
                    # lands in its journal, so a crash cannot hand the journal to a namesake.
                    try:
                        atomic_write(path, dumps(g.to_obj()))
                    except OSError as exc:
                        del self.projects[project_path]
                        self.journals.pop(id(g), None)
                        raise storage_error(exc, "the project graph") from exc
            return g

    def existing_project_graph(self, project_path):
        """The project's graph if it is loaded or on disk, else None: creates nothing (for the
        read-only routes)."""
        with self.lock:
            g = self.projects.get(project_path)
            if g is not None:
                return g
            known = {p.slug: p.project_path for p in self.projects.values() if p.path_known}
            path = self.layout.graph_file(self.layout.slug_for(project_path, known))
            if not (os.path.exists(path) or os.path.exists(path + ".prev")):
                return None
            return self.project_graph(project_path)

    def graph(self, level, session=None, project_path=None):
        """The graph a call addresses: the user graph, or the project of the session / path."""
        level = model.check_level(level)
        if level == "user":
            return self.user
        path = session.project_path if session is not None else None
        if path is None and project_path is not None:
            path = resolve_project_root(project_path)
        if path is None:
            raise BadInput('level "project" needs a session (call kg_read with cwd first) or a project_path.')
        return self.project_graph(path)

    def graphs_for(self, session=None, project_path=None):
        """User graph first, then the addressed project graph if any."""
        out = [self.user]
        if session is not None and session.project_path:
            out.append(self.project_graph(session.project_path))
        elif project_path:
            out.append(self.project_graph(resolve_project_root(project_path)))
        return out

    def start_session(self, cwd=None):
        project_path = resolve_project_root(cwd) if cwd is not None else None
        with self.lock:
            if project_path is not None:
                self.project_graph(project_path)
            now = self.clock()
            s = Session(new_session_id(), project_path, now, self.seq)
            self.sessions[s.id] = s
            try:
                self._save_sessions()
            except KgError as exc:
                # A full disk must not keep an agent from its memory: the session lives in
                # memory and the next maintenance pass saves it.
                log.warning("session started but not saved yet: %s", exc.message)
                self.sessions_dirty = True
            return s

    def session(self, sid, required=True):
        """A live session by id (touching its activity), or None / NotFound."""
        if sid is None:
            if required:
                raise BadInput("session_id is required: call kg_read with cwd first; its answer gives one.")
            return None
        if not isinstance(sid, str):
            raise BadInput("session_id must be a string.")
        with self.lock:
            s = self.sessions.get(sid)
            now = self.clock()
            if s is not None and now - s.last_active >= self.settings.session_ttl:
                self._expire(s)
                s = None
            if s is None:
                raise NotFound("unknown or expired session_id %r: call kg_read with cwd to start a new session." % sid[:100])
            s.last_active = now
            self.sessions_dirty = True
            return s

    def _expire(self, s):
        self.sessions.pop(s.id, None)
        self.sessions_dirty = True

    def expire_sessions(self, now=None):
        now = self.clock() if now is None else now
        with self.lock:
            stale = [s for s in self.sessions.values() if now - s.last_active >= self.settings.session_ttl]
            for s in stale:
                self._expire(s)
            return len(stale)

    def _save_sessions(self, clean=False):
        obj = {"seq": self.seq, "clean": clean, "sessions": {s.id: s.to_obj() for s in self.sessions.values()}}
        try:
            atomic_write(self.layout.sessions_file, dumps(obj))
        except OSError as exc:
            raise storage_error(exc, "sessions.json") from exc
        self.sessions_dirty = False

    # ------------------------------------------------------------ change log

    def add_listener(self, fn):
        """fn(event_dict) is called after each change, outside the lock; it must not block."""
        self.listeners.append(fn)

    @staticmethod
    def _slim(kind, payload):
        """What kg_sync needs of a change: which node or edge it touched. sync() reads the
        current state, so the log keeps no contents (it may hold many changes)."""
        if kind == "node_put":
            return {"node": {"id": payload["node"]["id"]}}
        if kind == "node_deleted":
            return {"id": payload["id"], "edges_removed": [
                {"from": e["from"], "to": e["to"], "rel": e["rel"]} for e in payload["edges_removed"]]}
        if kind in ("edge_put", "edge_deleted"):
            e = payload["edge"]
            return {"edge": {"from": e["from"], "to": e["to"], "rel": e["rel"]}}
        return payload  # compacted: lists of ids

    def _change(self, sid, g, kind, payload, events):
        self.seq += 1
        self.changes.append((self.seq, sid, g, kind, self._slim(kind, payload)))
        if len(self.changes) > CHANGE_LOG_MAX:
            drop = len(self.changes) // 2  # in halves: amortised O(1) per change
            self.log_floor = self.changes[drop - 1][0]
            del self.changes[:drop]
        ev = {"type": kind, "level": g.level, "project_path": g.project_path}
        ev.update(payload)
        events.append(ev)

    def _publish(self, events):
        for ev in events:
            for fn in self.listeners:
                try:
                    fn(ev)
                except Exception:  # a listener must never break a write
                    log.exception("change listener failed")

    def _changes_after(self, mark):
        """Index in self.changes of the first change with seq > mark."""
        if not self.changes:
            return 0
        return min(len(self.changes), max(0, mark + 1 - self.changes[0][0]))

    def _trim_changes(self):
        marks = [s.sync_mark for s in self.sessions.values()]
        floor = min(marks) if marks else self.seq
        drop = self._changes_after(floor)
        if drop:
            self.log_floor = self.changes[drop - 1][0]
            del self.changes[:drop]
        if not self.changes:
            self.log_floor = max(self.log_floor, floor)

    # ------------------------------------------------------------ durability

    def _append(self, g, rec):
        if self.closed:
            raise StorageError("kgd is shutting down and no longer saves changes; retry once it is back.")
        journal = self.journals[id(g)]
        ticket = journal.append(rec)
        self.dirty[id(g)] = g
        self.last_write = self.clock()
        return journal, ticket

    def _commit(self, tickets):
        """Wait for the records to be durable (outside the lock). When an fsync fails, the
        graph is put back to what is on disk and the caller gets the StorageError."""
        failure = None
        for journal, ticket in tickets:
            try:
                journal.commit(ticket)
            except KgError as exc:
                failure = failure or exc
                self._recover(journal)
        if failure is not None:
            raise failure

    def _recover(self, journal):
        with self.lock:
            if not journal.failed:
                return
            g = next((x for x in [self.user] + list(self.projects.values()) if self.journals.get(id(x)) is journal), None)
            try:
                journal.rollback()
            except OSError:
                log.exception("could not cut back %s after a failed fsync", journal.path)
            if g is None:
                return
            log.error("a write to %s failed to reach the disk; reloading that graph from disk", journal.path)
            self._reload(g)

    def _reload(self, g):
        """Put graph g (same object: sessions and the change log refer to it) back to what its
        files hold (lock held)."""
        journal = self.journals[id(g)]
        journal.close()  # reopened on next use; pending tickets of this journal stay valid
        fresh = self._load_graph(self._graph_file(g), g.level, g.project_path, g.slug)
        self.journals.pop(id(fresh)).close()
        self.dirty.pop(id(fresh), None)
        if os.path.exists(journal.path) and os.path.getsize(journal.path):
            self.dirty[id(g)] = g
        g.__dict__.update(fresh.__dict__)

    @contextlib.contextmanager
    def _mutation(self, g):
        """Around one mutation's journal appends and in-memory changes (lock held): if anything
        fails once a record was written, the records are cut off and g reloaded, so neither the
        journal nor memory keeps a change the caller is told failed."""
        journal = self.journals[id(g)]
        mark = journal.mark()
        try:
            yield
        except Exception:
            if self.journals.get(id(g)) is journal and journal.mark()[1] != mark[1]:
                self._undo(g, mark)
            raise

    def _undo(self, g, mark):
        """An operation failed after changing g in memory (lock held): cut its records off the
        journal and reload g from disk, so memory never runs ahead of the disk."""
        try:
            self.journals[id(g)].undo(mark)
        except OSError:
            log.exception("could not cut back %s", self.journals[id(g)].path)
        self._reload(g)

    def _fold(self, g):
        """Write the graph file whole from memory, then empty its journal (lock held)."""
        path = self._graph_file(g)
        try:
            atomic_write(path, dumps(g.to_obj()))
            self.journals[id(g)].reset()
        except OSError as exc:
            if not getattr(g, "fold_failing", False):  # log once per failure streak, not every beat
                log.error("could not fold the journal into %s (%s); the changes stay in the journal",
                          path, exc.strerror or exc)
            g.fold_failing = True
            return False
        if getattr(g, "fold_failing", False):
            log.info("folding %s works again", path)
            g.fold_failing = False
        self.dirty.pop(id(g), None)
        return True

    def fold_idle(self, now=None, force=False):
        """Fold journals once writes have paused (or a journal grew long), one graph per lock
        hold so writers to other graphs wait for one graph's fold at most."""
        now = self.clock() if now is None else now
        with self.lock:
            quiet = force or now - self.last_write >= self.settings.fold_delay
            graphs = list(self.dirty.values())
        for g in graphs:
            with self.lock:
                if id(g) in self.dirty and (quiet or self.journals[id(g)].records >= self.settings.fold_records):
                    self._fold(g)

    # ------------------------------------------------------------ compaction

    def _compact(self, g, now, events, tickets, full=False):
        """Run the passes when the figures say so (after a write) or always (maintenance).

        A pass that could change nothing (every active node still in grace) is not retried
        after each write until the first of those nodes leaves grace, or a node past grace
        becomes active again: otherwise a graph flooded with new nodes would pay a whole
        pass per write."""
        needed = compaction.needs_compaction(g.tokens, g.archived_count, self.compaction_settings)
        if not full:
            if not needed:
                return
            if now < g.compact_idle_until:
                return
        index = None
        if not full:
            candidates = g.by_state[model.ACTIVE] | g.by_state[model.ARCHIVED]
            index = (sorted(candidates), g.adj, g.tokens)
        mark = self.journals[id(g)].mark()
        result = compaction.compact(g.nodes, g.edges, now, self.compaction_settings, index)
        if not result.changed:
            if not needed:
                return  # nothing was over budget: no reason to hold back later passes
            grace = self.compaction_settings.grace_s
            waits = [(n.get("_created_ts") or 0) + grace for n in g.nodes.values()
                     if model.is_active(n) and now - (n.get("_created_ts") or 0) < grace]
            # A node created later leaves grace later than now + grace.
            g.compact_idle_until = min(waits) if waits else now + grace
            return
        g.compact_idle_until = 0.0
        if result.deleted:
            g.recount()
        else:
            for nid in result.changed_ids:
                g.refresh(nid)
        mine = []
        try:
            for nid in sorted(result.changed_ids):
                node = g.nodes.get(nid)
                if node is None:
                    mine.append(self._append(g, {"op": "del_node", "id": nid}))
                else:
                    mine.append(self._append(g, {"op": "node", "node": node}))
            for key in result.deleted_edges:
                mine.append(self._append(g, {"op": "del_edge", "key": key}))
            tickets.extend(mine)
        except StorageError as exc:
            # Compaction is redone by a later pass; the write that triggered it stands.
            log.warning("compaction of the %s graph not saved (%s); it will be retried", g.level, exc.message)
            self._undo(g, mark)
            return
        self._change(None, g, "compacted", {"archived": list(result.archived), "restored": list(result.restored),
                                            "orphaned": list(result.orphaned), "deleted": list(result.deleted)}, events)

    def maintenance(self, now=None):
        """One maintenance pass: compaction (with deletion) for every loaded graph, one graph
        per lock hold; expire idle sessions; save sessions.json; fold quiet journals."""
        now = self.clock() if now is None else now
        with self.lock:
            graphs = [self.user] + list(self.projects.values())
        for g in graphs:
            events, tickets = [], []
            with self.lock:
                self._compact(g, now, events, tickets, full=True)
            try:
                self._commit(tickets)
            except KgError:
                log.exception("maintenance could not save a compaction")
            self._publish(events)
        with self.lock:
            self.expire_sessions(now)
            self._trim_changes()
            if self.sessions_dirty:
                try:
                    self._save_sessions()
                except KgError:
                    log.exception("could not save sessions.json")
        self.fold_idle(now)

    # ------------------------------------------------------------ tools' operations

    def put_node(self, session, level, node_id, gist=None, notes=None, touches=None, project_path=None):
        node_id = model.check_id(node_id)
        if gist is not None:
            gist = model.check_text(gist, "gist", model.MAX_GIST)
        notes = model.check_notes(notes)
        touches = model.check_touches(touches)
        events, tickets = [], []
        with self.lock:
            g = self.graph(level, session, project_path)
            now = self.clock()
            old = g.nodes.get(node_id)
            if old is None:
                if gist is None:
                    raise BadInput("gist is required for a new node %r: one line saying the insight." % node_id)
                node = {"id": node_id, "gist": gist, "notes": notes or [], "touches": touches or [],
                        "_created_ts": now, "_write_ts": now, "_read_ts": None,
                        "_archived": False, "_orphaned_ts": None}
            else:
                node = dict(old)
                if gist is not None:
                    node["gist"] = gist
                if notes is not None:
                    node["notes"] = notes
                if touches is not None:
                    node["touches"] = touches
                node["_write_ts"] = now
                if compaction.revive_on_put(node):
                    g.compact_idle_until = 0.0
            with self._mutation(g):
                tickets.append(self._append(g, {"op": "node", "node": node}))
                g.put_node(node)
                sid = session.id if session else None
                if session:
                    session.writes += 1
                self._change(sid, g, "node_put", {"node": model.public_node(node)}, events)
                self._compact(g, now, events, tickets)
            result = {"level": g.level, "created": old is None, "node": model.public_node(g.nodes.get(node_id, node))}
        self._commit(tickets)
        self._publish(events)
        return result

    def _edge_end_ok(self, g, end):
        if end in g.nodes or "/" in end or "." in end or "\\" in end:
            return True
        other = [self.user] if g.level == "project" else list(self.projects.values())
        return any(end in o.nodes for o in other)

    def put_edge(self, session, level, frm, to, rel, notes=None, project_path=None):
        frm = model.check_end(frm, "from")
        to = model.check_end(to, "to")
        rel = model.check_rel(rel)
        notes = model.check_notes(notes)
        events, tickets = [], []
        with self.lock:
            g = self.graph(level, session, project_path)
            for name, end in (("from", frm), ("to", to)):
                if not self._edge_end_ok(g, end):
                    raise NotFound("%s %r is neither a node of the %s graph nor a file path: put the node first "
                                   "(kg_put_node) or give a path like src/app.py." % (name, end[:200], g.level))
            key = model.edge_key(frm, to, rel)
            old = g.edges.get(key)
            edge = {"from": frm, "to": to, "rel": rel, "notes": notes if notes is not None else (old or {}).get("notes", [])}
            if old is not None:
                edge = dict(old, **edge)
            with self._mutation(g):
                tickets.append(self._append(g, {"op": "edge", "edge": edge}))
                g.put_edge(edge)
                if session:
                    session.writes += 1
                self._change(session.id if session else None, g, "edge_put", {"edge": model.public_edge(edge)}, events)
                self._compact(g, self.clock(), events, tickets)
            result = {"level": g.level, "created": old is None, "edge": model.public_edge(edge)}
        self._commit(tickets)
        self._publish(events)
        return result

    def _find_level(self, session, node_id, level, project_path, what="node"):
        """The graph holding node_id: the given level, else the one level that has it."""
        if level is not None:
            g = self.graph(level, session, project_path)
            if node_id not in g.nodes:
                raise NotFound("no %s %r in the %s graph; kg_search finds ids." % (what, node_id[:200], g.level))
            return g
        found = [g for g in self.graphs_for(session, project_path) if node_id in g.nodes]
        if not found:
            raise NotFound("no node %r in the user or project graph; kg_search finds ids." % node_id[:200])
        if len(found) > 1:
            raise Conflict("node %r exists in both the user and the project graph: say which with level." % node_id[:200])
        return found[0]

    def delete_node(self, session, node_id, level=None, project_path=None):
        node_id = model.check_id(node_id)
        events, tickets = [], []
        with self.lock:
            g = self._find_level(session, node_id, level, project_path)
            with self._mutation(g):
                tickets.append(self._append(g, {"op": "del_node", "id": node_id}))
                removed = g.delete_node(node_id)
                if session:
                    session.writes += 1
                self._change(session.id if session else None, g, "node_deleted",
                             {"id": node_id, "edges_removed": [model.public_edge(e) for e in removed]}, events)
                self._compact(g, self.clock(), events, tickets)
        self._commit(tickets)
        self._publish(events)
        return {"level": g.level, "id": node_id, "edges_removed": len(removed)}

    def delete_edge(self, session, frm, to, rel, level=None, project_path=None):
        frm = model.check_end(frm, "from")
        to = model.check_end(to, "to")
        rel = model.check_rel(rel)
        key = model.edge_key(frm, to, rel)
        events, tickets = [], []
        with self.lock:
            if level is not None:
                graphs = [self.graph(level, session, project_path)]
            else:
                graphs = self.graphs_for(session, project_path)
            found = [g for g in graphs if key in g.edges]
            if not found:
                raise NotFound("no edge %s -[%s]-> %s; kg_read shows the edges." % (frm[:200], rel[:100], to[:200]))
            if len(found) > 1:
                raise Conflict("that edge exists in both graphs: say which with level.")
            g = found[0]
            with self._mutation(g):
                tickets.append(self._append(g, {"op": "del_edge", "key": key}))
                edge = g.delete_edge(key)
                if session:
                    session.writes += 1
                self._change(session.id if session else None, g, "edge_deleted", {"edge": model.public_edge(edge)}, events)
                self._compact(g, self.clock(), events, tickets)
        self._commit(tickets)
        self._publish(events)
        return {"level": g.level, "edge": model.public_edge(edge)}

    def read_graphs(self, session):
        """Snapshot of the active graph of both levels for a full kg_read (refreshes nothing)."""
        with self.lock:
            session.reads += 1
            out = {}
            for g in self.graphs_for(session):
                out[g.level] = self._graph_view(g)
            if "project" not in out:
                out["project"] = {"nodes": [], "archived": [], "edges": [], "tokens": 0}
            return out

    def _graph_view(self, g):
        nodes = [g.nodes[nid] for nid in g.by_state[model.ACTIVE]]
        nodes.sort(key=lambda n: n["id"])
        return {"nodes": [model.public_node(n) for n in nodes],
                "recency": {n["id"]: model.recency(n) for n in nodes},
                "archived": sorted(g.by_state[model.ARCHIVED]),
                "edges": [model.public_edge(g.edges[k]) for k in sorted(g.counted_edges)],
                "tokens": g.tokens}

    def read_nodes(self, session, ids, level=None, project_path=None):
        """Full content of each node; promotes archived / orphaned ones (contract 3)."""
        if not isinstance(ids, list) or not ids:
            raise BadInput("give id (a string) or ids (a non-empty list of strings).")
        if len(ids) > 200:
            raise BadInput("at most 200 ids per kg_read.")
        ids = [model.check_id(i, "each id") for i in ids]
        events, tickets, out, missing = [], [], [], []
        with self.lock:
            graphs = [self.graph(level, session, project_path)] if level is not None else self.graphs_for(session, project_path)
            now = self.clock()
            sid = session.id if session else None
            for nid in dict.fromkeys(ids):
                hit = False
                for g in graphs:
                    node = g.nodes.get(nid)
                    if node is None:
                        continue
                    hit = True
                    neighbours = {e["to"] if e["from"] == nid else e["from"] for e in g.edges_of(nid)}
                    before = {c: dict(g.nodes[c]) for c in neighbours | {nid} if c in g.nodes}
                    changed = compaction.promote_on_read(g.nodes, g.edges, nid, now, neighbours)
                    mark = self.journals[id(g)].mark()
                    try:
                        mine = [self._append(g, {"op": "node", "node": g.nodes[c]}) for c in sorted(set(changed) | {nid})]
                    except StorageError as exc:
                        # Recency and promotion are best effort: on a bad disk the read still answers.
                        log.warning("read of %r not recorded (%s)", nid[:100], exc.message)
                        self.journals[id(g)].undo(mark)
                        for c, old in before.items():
                            g.nodes[c].clear()
                            g.nodes[c].update(old)
                        changed, mine = [], []
                    tickets.extend(mine)
                    if changed:
                        g.compact_idle_until = 0.0
                    for c in set(changed) | {nid}:
                        g.refresh(c)
                    for c in sorted(changed):
                        self._change(sid, g, "node_put", {"node": model.public_node(g.nodes[c])}, events)
                    item = model.public_node(node)
                    item["level"] = g.level
                    item["edges"] = [model.public_edge(e) for e in g.edges_of(nid)]
                    out.append(item)
                if not hit:
                    missing.append(nid)
            # No compaction here: a read is not a write (contract 5), and compacting now would
            # archive again the node the agent just recalled. The next write or pass does it.
            if session:
                session.reads += 1
        try:
            self._commit(tickets)
        except KgError as exc:
            log.warning("a read's recency was not saved (%s)", exc.message)
        self._publish(events)
        return {"session_id": sid, "nodes": out, "missing": missing}

    def search(self, query, session=None, limit=20, project_path=None):
        if not isinstance(query, str) or not query.strip():
            raise BadInput("query must be a non-empty string of words to look for.")
        if len(query) > 1000:
            raise BadInput("query is over 1000 characters; use a few words.")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 200:
            raise BadInput("limit must be an integer from 1 to 200.")
        with self.lock:
            if session is not None or project_path:
                graphs = self.graphs_for(session, project_path)
            else:
                graphs = [self.user] + self.all_project_graphs()
            ranked = self._rank(query, graphs, limit)
            results = []
            for score, g, node in ranked:
                item = model.public_node(node)
                item.update({"level": g.level, "score": score})
                if g.level == "project":
                    item["project_path"] = g.project_path
                results.append(item)
            return {"results": results}

    @staticmethod
    def _rank(query, graphs, limit):
        """search.rank over the graphs, with one search.Corpus per graph kept until it changes
        (and each node's lower-cased text kept until that node changes)."""
        corpora = []
        for g in graphs:
            if g.corpus is None:
                cache = g.search_cache

                def text_of(n, cache=cache):
                    t = cache.get(n["id"])
                    if t is None:
                        t = cache[n["id"]] = search.node_text(n)
                    return t
                g.corpus = search.Corpus(((g, n) for n in g.nodes.values()), text_of)
            corpora.append(g.corpus)
        return search.rank_corpora(query, corpora, limit)

    def all_project_graphs(self):
        """Every project graph on disk (loads those not loaded yet)."""
        with self.lock:
            for slug in self.layout.project_slugs():
                if any(g.slug == slug for g in self.projects.values()):
                    continue
                path = self.layout.recorded_project_path(slug)
                known = path is not None
                path = path or "(unknown project: projects/%s)" % slug
                if path not in self.projects:
                    g = self._load_graph(self.layout.graph_file(slug), "project", path, slug)
                    g.path_known = known
                    self.projects[path] = g
            return list(self.projects.values())

    def sync(self, session):
        """Changes by other sessions (and compaction) since the session's mark (contract 3)."""
        with self.lock:
            graphs = self.graphs_for(session)
            wanted = {id(g) for g in graphs}
            mark = session.sync_mark
            node_keys, edge_keys = {}, {}
            resync = mark < self.log_floor
            if resync:
                for g in graphs:
                    for nid in g.nodes:
                        node_keys[(g.level, nid)] = g
                    for key in g.edges:
                        edge_keys[(g.level, key)] = (g, g.edges[key])
            for i in range(self._changes_after(mark), len(self.changes)):
                seq, sid, g, kind, payload = self.changes[i]
                if id(g) not in wanted or (sid is not None and sid == session.id):
                    continue
                if kind == "node_put":
                    node_keys[(g.level, payload["node"]["id"])] = g
                elif kind == "node_deleted":
                    node_keys[(g.level, payload["id"])] = g
                    for e in payload["edges_removed"]:
                        edge_keys[(g.level, model.edge_key(e["from"], e["to"], e["rel"]))] = (g, e)
                elif kind in ("edge_put", "edge_deleted"):
                    e = payload["edge"]
                    edge_keys[(g.level, model.edge_key(e["from"], e["to"], e["rel"]))] = (g, e)
                elif kind == "compacted":
                    for nid in payload["archived"] + payload["restored"] + payload["orphaned"] + payload["deleted"]:
                        node_keys[(g.level, nid)] = g
            nodes, deleted_nodes, edges, deleted_edges = [], [], [], []
            for (level, nid), g in sorted(node_keys.items(), key=lambda kv: kv[0]):
                node = g.nodes.get(nid)
                if node is None:
                    deleted_nodes.append({"level": level, "id": nid})
                elif model.node_state(node) != model.ORPHANED:
                    item = model.public_node(node)
                    item["level"] = level
                    nodes.append(item)
            for (level, key), (g, e) in sorted(edge_keys.items(), key=lambda kv: kv[0]):
                cur = g.edges.get(key)
                if cur is None:
                    deleted_edges.append({"level": level, "from": e["from"], "to": e["to"], "rel": e["rel"]})
                else:
                    item = model.public_edge(cur)
                    item["level"] = level
                    edges.append(item)
            session.sync_mark = self.seq
            self.sessions_dirty = True
            return {"session_id": session.id, "nodes": nodes, "edges": edges, "deleted_nodes": deleted_nodes,
                    "deleted_edges": deleted_edges, "full_resync": resync}

    def progress(self, session, task_id, state=None, level=None, has_state=False, project_path=None):
        task_id = model.check_id(task_id, "task_id")
        level = model.check_level(level, default="user")
        if has_state and state is not None and not isinstance(state, dict):
            raise BadInput("state must be a JSON object (or omit it to read the stored state).")
        if has_state and state is not None and len(dumps(state)) > 64 * 1024:
            raise BadInput("state is over 64 KiB; keep progress notes short.")
        tickets = []
        with self.lock:
            g = self.graph(level, session, project_path)
            progress = g.meta.setdefault("progress", {})
            if has_state:
                with self._mutation(g):
                    tickets.append(self._append(g, {"op": "progress", "task_id": task_id, "state": state}))
                    if state is None:
                        progress.pop(task_id, None)
                    else:
                        progress[task_id] = state
            current = progress.get(task_id)
        self._commit(tickets)
        return {"task_id": task_id, "level": level, "state": current}

    # ------------------------------------------------------------ views for REST / health

    def health(self):
        with self.lock:
            return {"sessions": len(self.sessions), "graphs_loaded": 1 + len(self.projects)}

    def session_stats(self, session):
        with self.lock:
            d = session.to_obj()
            d["pending_changes"] = sum(1 for c in self.changes[self._changes_after(session.sync_mark):]
                                       if c[1] != session.id)
            return d

    def full_graph(self, g):
        """Every node in every state, with its times (REST /api/graph)."""
        with self.lock:
            nodes = []
            for n in g.nodes.values():
                item = model.public_node(n)
                item["created_ts"] = n.get("_created_ts")
                item["updated_ts"] = model.recency(n)
                nodes.append(item)
            return {"nodes": nodes, "edges": [model.public_edge(e) for e in g.edges.values()],
                    "tokens": g.tokens, "max_tokens": self.settings.max_tokens}

    def projects_summary(self):
        with self.lock:
            graphs = self.all_project_graphs()
            return [{"slug": g.slug, "project_path": g.project_path, "nodes": len(g.nodes), "edges": len(g.edges),
                     "active": g.state_counts[model.ACTIVE], "archived": g.state_counts[model.ARCHIVED],
                     "orphaned": g.state_counts[model.ORPHANED]} for g in sorted(graphs, key=lambda g: g.slug or "")]
