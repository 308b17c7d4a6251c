"""The store: the lock, the registry of loaded graphs, and the operations the tools call.

Rules owned here:
- The user graph is always loaded; a project graph is loaded on first use, keyed by its
  project root (kg/projects.py), one Durable (kg/durable.py) per graph file.
- One RLock guards every graph and session. Every mutation takes the one write path,
  `_writing` + `_changing`: under the lock each record is journalled before it is applied in
  memory and logged as a change (kg/changelog.py); compaction runs after each write when
  the figures call for it; a failure after a record was written cuts the records off and
  reloads the graph. After the lock is released the records' fsync is awaited (group
  commit), then the change events reach listeners, before the caller gets its answer.
- A read by id is a write of recency (and promotion): best effort, never failing the read.
- Sessions (kg/sessions.py) are started by kg_read(cwd) / POST /api/sessions or bound to a
  client's session id; sessions.json is rewritten when a session starts or expires and on
  every maintenance pass (activity, sync marks and hook state are flushed lazily).
- kg_sync reads the diff and moves the caller's mark to the sequence number under one lock
  hold, so no interleaving can hide a change.
- An edge end that is not a node of its graph must look like a path (holds / . or \\), be a
  node of the other level, name an existing entry under the project root, or already be in
  some node's touches.
"""

import contextlib
import logging
import os
import threading
import time

from . import compaction, model, projects, search
from .changelog import ChangeLog
from .durable import Durable
from .errors import BadInput, Conflict, KgError, NotFound, StorageError
from .projects import resolve_project_root
from .sessions import Session, Sessions, check_client_id, new_session_id
from .storage import Layout, RootLock, dumps, ensure_dir

__all__ = ["Store", "Settings", "Session", "resolve_project_root", "new_session_id", "CHANGE_LOG_MAX"]

log = logging.getLogger(__name__)

CHANGE_LOG_MAX = 200000


class Settings:
    def __init__(self, max_tokens=model.DEFAULT_MAX_TOKENS, grace_days=model.DEFAULT_GRACE_DAYS,
                 orphan_grace_days=model.DEFAULT_ORPHAN_GRACE_DAYS, save_interval=model.DEFAULT_SAVE_INTERVAL,
                 session_ttl=model.DEFAULT_SESSION_TTL, fold_delay=1.0, fold_records=20000):
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


class _Write:
    """What one write collects under the lock: commit tickets and change events."""

    __slots__ = ("session", "sid", "tickets", "events")

    def __init__(self, session):
        self.session = session
        self.sid = session.id if session is not None else None
        self.tickets = []
        self.events = []


def _put_result(old, node_id, gist, notes, touches, now):
    """The node a put leaves: a new node, or the old one with the given fields replaced
    (omitted ones kept) and its write time refreshed."""
    if old is None:
        if gist is None:
            raise BadInput("gist is required for a new node %r: one line saying the insight." % node_id)
        return {"id": node_id, "gist": gist, "notes": notes or [], "touches": touches or [],
                "_created_ts": now, "_write_ts": now, "_read_ts": None}
    node = dict(old)
    for field, value in (("gist", gist), ("notes", notes), ("touches", touches)):
        if value is not None:
            node[field] = value
    node["_write_ts"] = now
    return node


class Store:
    def __init__(self, root, settings=None, clock=time.time):
        self.layout = Layout(root)
        self.settings = settings or Settings()
        self.clock = clock
        self.lock = threading.RLock()
        self.root_lock = RootLock(self.layout)
        self._user = None  # Durable of the user graph
        self._projects = {}  # project_path -> Durable
        self._sessions = Sessions(self.layout.sessions_file, self.settings.session_ttl)
        self.log = ChangeLog(CHANGE_LOG_MAX)
        self.listeners = []
        self.last_write = 0.0
        self.started = clock()
        self.closed = False
        self.compaction_settings = self.settings.compaction()

    # ------------------------------------------------------------ views of the registry

    @property
    def user(self):
        return self._user.graph

    @property
    def projects(self):
        """project_path -> Graph of every loaded project."""
        return {p: u.graph for p, u in self._projects.items()}

    @property
    def journals(self):
        return {u.path: u.journal for u in self._units()}

    @property
    def dirty(self):
        """Graphs with journal records not yet folded, by file."""
        return {u.path: u.graph for u in self._units() if u.dirty}

    @property
    def sessions(self):
        return self._sessions.by_id

    def _units(self):
        return ([self._user] if self._user is not None else []) + list(self._projects.values())

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
            self._user = self._load(self.layout.user_file, "user")
            self._fold_replayed(self._user)
            seq, clean = self._sessions.load(self.clock())
            # sessions.json is saved lazily: after a crash, marks and seq may be stale, so every
            # restored session gets one full resync rather than a silent gap.
            self.log.restart(seq if clean else seq + 1)
        return self

    def close(self):
        """Flush everything: fold every journal into its graph file, save sessions. On a bad
        disk the journals still hold every acknowledged change; the lock is released anyway."""
        try:
            with self.lock:
                self.closed = True  # a request still running past shutdown must not write
                for u in self._units():
                    if u.dirty:
                        u.fold()
                try:
                    self._sessions.save(self.log.seq, clean=True)
                except KgError as exc:
                    log.error("could not save sessions.json at shutdown: %s", exc.message)
                for u in self._units():
                    u.journal.close()
        finally:
            self.root_lock.release()

    def _load(self, path, level, project_path=None, slug=None):
        return Durable.load(path, level, project_path, slug, self.clock)

    @staticmethod
    def _fold_replayed(unit):
        """A journal found holding records at load is folded at once (lock held)."""
        if unit.dirty:
            unit.fold()

    # ------------------------------------------------------------ graphs

    def _project(self, project_path):
        """The Durable of a project root, loading (or creating) it."""
        with self.lock:
            u = self._projects.get(project_path)
            if u is not None:
                return u
            known = {p.graph.slug: p.project_path for p in self._projects.values() if p.graph.path_known}
            slug = self.layout.slug_for(project_path, known)
            stray = next((p for p in self._projects.values() if p.graph.slug == slug and not p.graph.path_known), None)
            if stray is not None:
                # A graph loaded for search before anyone claimed it (an old file that does not
                # record its project): it is this project's; record the path from now on.
                del self._projects[stray.project_path]
                stray.graph.project_path, stray.graph.path_known = project_path, True
                self._projects[project_path] = stray
                stray.dirty = True
                stray.fold()
                return stray
            path = self.layout.graph_file(slug)
            u = self._projects[project_path] = self._load(path, "project", project_path, slug)
            self._fold_replayed(u)
            if not os.path.exists(path):
                # Claim the slug on disk (graph.json records project_path) before any record
                # lands in its journal, so a crash cannot hand the journal to a namesake.
                try:
                    u.write_file("the project graph")
                except KgError:
                    del self._projects[project_path]
                    raise
            return u

    def project_graph(self, project_path):
        return self._project(project_path).graph

    def existing_project_graph(self, project_path):
        """The project's graph if it is loaded or on disk, else None: creates nothing (for the
        read-only routes)."""
        with self.lock:
            u = self._projects.get(project_path)
            if u is not None:
                return u.graph
            known = {p.graph.slug: p.project_path for p in self._projects.values() if p.graph.path_known}
            path = self.layout.graph_file(self.layout.slug_for(project_path, known))
            if not (os.path.exists(path) or os.path.exists(path + ".prev")):
                return None
            return self.project_graph(project_path)

    def _unit(self, level, session=None, project_path=None):
        level = model.check_level(level)
        if level == "user":
            return self._user
        path = session.project_path if session is not None else None
        if path is None and project_path is not None:
            path = resolve_project_root(project_path)
        if path is None:
            raise BadInput('level "project" needs a session (call kg_read with cwd first) or a project_path.')
        return self._project(path)

    def graph(self, level, session=None, project_path=None):
        """The graph a call addresses: the user graph, or the project of the session / path."""
        return self._unit(level, session, project_path).graph

    def _units_for(self, session=None, project_path=None):
        out = [self._user]
        if session is not None and session.project_path:
            out.append(self._project(session.project_path))
        elif project_path:
            out.append(self._project(resolve_project_root(project_path)))
        return out

    def graphs_for(self, session=None, project_path=None):
        """User graph first, then the addressed project graph if any."""
        return [u.graph for u in self._units_for(session, project_path)]

    def all_project_graphs(self):
        """Every project graph on disk (loads those not loaded yet)."""
        with self.lock:
            for slug in self.layout.project_slugs():
                if any(u.graph.slug == slug for u in self._projects.values()):
                    continue
                path = self.layout.recorded_project_path(slug)
                known = path is not None
                path = path or "(unknown project: projects/%s)" % slug
                if path not in self._projects:
                    u = self._load(self.layout.graph_file(slug), "project", path, slug)
                    u.graph.path_known = known
                    self._projects[path] = u
                    self._fold_replayed(u)
            return [u.graph for u in self._projects.values()]

    # ------------------------------------------------------------ sessions

    def start_session(self, cwd=None):
        project_path = resolve_project_root(cwd) if cwd is not None else None
        with self.lock:
            return self._start(project_path)

    def read_session(self, cwd):
        """The session a kg_read(cwd) without a usable session id gets: the hook-bound one whose
        preload for this project is fresh and unused (Sessions.adoptable), else a new one."""
        project_path = resolve_project_root(cwd)
        with self.lock:
            now = self.clock()
            s = self._sessions.adoptable(project_path, now)
            if s is None:
                return self._start(project_path)
            self._sessions.claim(s, now)
            return s

    def _start(self, project_path, client_id=None):
        if project_path is not None:
            self._project(project_path)
        s = self._sessions.start(project_path, self.clock(), self.log.seq, client_id)
        try:
            self._sessions.save(self.log.seq)
        except KgError as exc:
            # A full disk must not keep an agent from its memory: the session lives in
            # memory and the next maintenance pass saves it.
            log.warning("session started but not saved yet: %s", exc.message)
            self._sessions.dirty = True
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
            return self._sessions.live(sid, self.clock())

    def bind_client(self, client_id, cwd, fresh=False):
        """(session, known): the live session bound to a client's session id (Claude Code's
        session_id), or a new one started for cwd's project (None: user level only) and bound
        to it. fresh=True always starts a new one (the old session stays, unbound). Bound
        sessions are kept at least sessions.CLIENT_TTL idle."""
        client_id = check_client_id(client_id)
        project_path = resolve_project_root(cwd) if cwd is not None else None
        with self.lock:
            s = self._sessions.for_client(client_id, self.clock())
            if s is not None and not fresh:
                return s, True
            if s is not None:
                self._sessions.unbind(s)
            return self._start(project_path, client_id), False

    def mark_shown(self, session, keys, now=None):
        """Record that this client session was shown the "level:id" keys (bounded, oldest dropped)."""
        with self.lock:
            session.mark_shown(keys, self.clock() if now is None else now)
            self._sessions.dirty = True

    def forget_shown(self, session):
        """Forget what was shown (after a compact or clear, the context no longer holds it)."""
        with self.lock:
            session.shown.clear()
            self._sessions.dirty = True

    def save_hook_state(self, session):
        """session.hook changed: the next maintenance pass (or shutdown) saves it."""
        with self.lock:
            self._sessions.dirty = True

    def expire_sessions(self, now=None):
        now = self.clock() if now is None else now
        with self.lock:
            return self._sessions.expire(now)

    # ------------------------------------------------------------ the write path

    def add_listener(self, fn):
        """fn(event_dict) is called after each change, outside the lock; it must not block."""
        self.listeners.append(fn)

    def _publish(self, events):
        for ev in events:
            for fn in self.listeners:
                try:
                    fn(ev)
                except Exception:  # a listener must never break a write
                    log.exception("change listener failed")

    @contextlib.contextmanager
    def _writing(self, session=None, lenient=None):
        """The one write path: the body runs under the lock with a _Write to collect into;
        then, outside the lock, the records are awaited and the events published. With
        `lenient` = (log level, message) a failed commit is logged instead of raised."""
        w = _Write(session)
        with self.lock:
            yield w
        try:
            self._commit(w.tickets)
        except KgError as exc:
            if lenient is None:
                raise
            log.log(lenient[0], "%s (%s)", lenient[1], exc.message)
        self._publish(w.events)

    @contextlib.contextmanager
    def _changing(self, w, unit, compact=True):
        """One graph's part of a write (lock held): if the body (or the compaction after it)
        fails once a record was written, the records are cut off and the graph reloaded, so
        neither the journal nor memory keeps a change the caller is told failed."""
        mark = unit.mark()
        n_tickets, n_events = len(w.tickets), len(w.events)
        try:
            yield unit.graph
            if compact:
                self._compact_after(unit, self.clock(), w)
        except Exception:
            del w.tickets[n_tickets:]
            del w.events[n_events:]
            if unit.written_since(mark):
                self._undo(unit, mark)
            raise

    def _record(self, w, unit, rec):
        if self.closed:
            raise StorageError("kgd is shutting down and no longer saves changes; retry once it is back.")
        w.tickets.append(unit.append(rec))
        self.last_write = self.clock()

    def _logged(self, w, unit, kind, payload, sid=False):
        """Log a change by the writing session (or by `sid`, None for compaction)."""
        w.events.append(self.log.record(w.sid if sid is False else sid, unit, kind, payload))

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
            unit = next((u for u in self._units() if u.journal is journal), None)
            try:
                journal.rollback()
            except OSError:
                log.exception("could not cut back %s after a failed fsync", journal.path)
            if unit is None:
                return
            log.error("a write to %s failed to reach the disk; reloading that graph from disk", journal.path)
            unit.reload()

    def _undo(self, unit, mark):
        unit.undo(mark)

    def fold_idle(self, now=None, force=False):
        """Fold journals once writes have paused (or a journal grew long), one graph per lock
        hold so writers to other graphs wait for one graph's fold at most."""
        now = self.clock() if now is None else now
        with self.lock:
            quiet = force or now - self.last_write >= self.settings.fold_delay
            units = [u for u in self._units() if u.dirty]
        for u in units:
            with self.lock:
                if u.dirty and (quiet or u.journal.records >= self.settings.fold_records):
                    u.fold()

    # ------------------------------------------------------------ compaction

    def _compact_after(self, unit, now, w, full=False):
        """Run the passes when the figures say so (after a write) or always (maintenance).

        A pass that could change nothing (every active node still in grace) is not retried
        after each write until the first of those nodes leaves grace, or a node past grace
        becomes active again: otherwise a graph flooded with new nodes would pay a whole
        pass per write."""
        g = unit.graph
        needed = compaction.needs_compaction(g.tokens, g.archived_count, self.compaction_settings)
        if not full and (not needed or now < g.compact_idle_until):
            return
        index = None
        if not full:
            candidates = g.by_state[model.ACTIVE] | g.by_state[model.ARCHIVED]
            index = (sorted(candidates), g.adj, g.tokens)
        mark = unit.mark()
        result = compaction.compact(g.nodes, g.edges, now, self.compaction_settings, index)
        if not result.changed:
            if needed:
                g.compact_idle_until = self._idle_until(g, now)
            return
        g.compact_idle_until = 0.0
        if result.deleted:
            g.recount()
        else:
            for nid in result.changed_ids:
                g.refresh(nid)
        self._record_compaction(w, unit, result, mark)

    def _record_compaction(self, w, unit, result, mark):
        """Journal and log what a pass changed (already applied in memory). On a bad disk the
        pass is undone: compaction is redone by a later pass, the write that triggered it stands."""
        g = unit.graph
        n_tickets = len(w.tickets)
        try:
            for nid in sorted(result.changed_ids):
                node = g.nodes.get(nid)
                self._record(w, unit, {"op": "del_node", "id": nid} if node is None else {"op": "node", "node": node})
            for key in result.deleted_edges:
                self._record(w, unit, {"op": "del_edge", "key": key})
        except StorageError as exc:
            log.warning("compaction of the %s graph not saved (%s); it will be retried", g.level, exc.message)
            del w.tickets[n_tickets:]
            self._undo(unit, mark)
            return
        self._logged(w, unit, "compacted", {"archived": list(result.archived), "restored": list(result.restored),
                                            "orphaned": list(result.orphaned), "deleted": list(result.deleted)}, None)

    def _idle_until(self, g, now):
        """When the first active node still in grace leaves it (a node created later leaves
        grace later than now + grace)."""
        grace = self.compaction_settings.grace_s
        waits = [(n.get("_created_ts") or 0) + grace for n in g.nodes.values()
                 if model.is_active(n) and now - (n.get("_created_ts") or 0) < grace]
        return min(waits) if waits else now + grace

    def maintenance(self, now=None):
        """One maintenance pass: compaction (with deletion) for every loaded graph, one graph
        per lock hold; expire idle sessions; save sessions.json; fold quiet journals."""
        now = self.clock() if now is None else now
        with self.lock:
            units = self._units()
        for u in units:
            with self._writing(lenient=(logging.ERROR, "maintenance could not save a compaction")) as w:
                self._compact_after(u, now, w, full=True)
        with self.lock:
            self._sessions.expire(now)
            self.log.trim(self._sessions.marks())
            if self._sessions.dirty:
                try:
                    self._sessions.save(self.log.seq)
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
        with self._writing(session) as w:
            unit = self._unit(level, session, project_path)
            g = unit.graph
            now = self.clock()
            old = g.nodes.get(node_id)
            node = model.check_node_text(_put_result(old, node_id, gist, notes, touches, now))
            if old is not None and compaction.revive_on_put(node):
                g.compact_idle_until = 0.0
            with self._changing(w, unit) as g:
                self._record(w, unit, {"op": "node", "node": node})
                g.put_node(node)
                if session:
                    session.writes += 1
                self._logged(w, unit, "node_put", {"node": model.public_node(node)})
            return {"level": unit.level, "created": old is None,
                    "node": model.public_node(unit.graph.nodes.get(node_id, node))}

    def _edge_end_ok(self, g, end):
        if end in g.nodes or "/" in end or "." in end or "\\" in end:
            return True
        other = [self._user] if g.level == "project" else list(self._projects.values())
        if any(end in o.graph.nodes for o in other):
            return True
        if any(end in n.get("touches", ()) for n in g.nodes.values()):
            return True
        return g.level == "project" and g.path_known and projects.names_entry(g.project_path, end)

    def put_edge(self, session, level, frm, to, rel, notes=None, project_path=None):
        frm = model.check_end(frm, "from")
        to = model.check_end(to, "to")
        rel = model.check_rel(rel)
        notes = model.check_notes(notes)
        with self._writing(session) as w:
            unit = self._unit(level, session, project_path)
            g = unit.graph
            for name, end in (("from", frm), ("to", to)):
                if not self._edge_end_ok(g, end):
                    raise NotFound("%s %r is neither a node of the %s graph nor a file path: put the node first "
                                   "(kg_put_node) or give a path like src/app.py." % (name, end[:200], g.level))
            key = model.edge_key(frm, to, rel)
            old = g.edges.get(key)
            edge = {"from": frm, "to": to, "rel": rel, "notes": notes if notes is not None else (old or {}).get("notes", [])}
            if old is not None:
                edge = dict(old, **edge)
            with self._changing(w, unit) as g:
                self._record(w, unit, {"op": "edge", "edge": edge})
                g.put_edge(edge)
                if session:
                    session.writes += 1
                self._logged(w, unit, "edge_put", {"edge": model.public_edge(edge)})
            return {"level": unit.level, "created": old is None, "edge": model.public_edge(edge)}

    def _find_level(self, session, node_id, level, project_path, what="node"):
        """The unit holding node_id: the given level, else the one level that has it."""
        if level is not None:
            u = self._unit(level, session, project_path)
            if node_id not in u.graph.nodes:
                raise NotFound("no %s %r in the %s graph; kg_search finds ids." % (what, node_id[:200], u.level))
            return u
        found = [u for u in self._units_for(session, project_path) if node_id in u.graph.nodes]
        if not found:
            raise NotFound("no node %r in the user or project graph; kg_search finds ids." % node_id[:200])
        if len(found) > 1:
            raise Conflict("node %r exists in both the user and the project graph: say which with level." % node_id[:200])
        return found[0]

    def delete_node(self, session, node_id, level=None, project_path=None):
        node_id = model.check_id(node_id)
        with self._writing(session) as w:
            unit = self._find_level(session, node_id, level, project_path)
            with self._changing(w, unit) as g:
                self._record(w, unit, {"op": "del_node", "id": node_id})
                removed = g.delete_node(node_id)
                if session:
                    session.writes += 1
                self._logged(w, unit, "node_deleted",
                             {"id": node_id, "edges_removed": [model.public_edge(e) for e in removed]})
            return {"level": unit.level, "id": node_id, "edges_removed": len(removed)}

    def delete_edge(self, session, frm, to, rel, level=None, project_path=None):
        frm = model.check_end(frm, "from")
        to = model.check_end(to, "to")
        rel = model.check_rel(rel)
        key = model.edge_key(frm, to, rel)
        with self._writing(session) as w:
            if level is not None:
                units = [self._unit(level, session, project_path)]
            else:
                units = self._units_for(session, project_path)
            found = [u for u in units if key in u.graph.edges]
            if not found:
                raise NotFound("no edge %s -[%s]-> %s; kg_read shows the edges." % (frm[:200], rel[:100], to[:200]))
            if len(found) > 1:
                raise Conflict("that edge exists in both graphs: say which with level.")
            unit = found[0]
            with self._changing(w, unit) as g:
                self._record(w, unit, {"op": "del_edge", "key": key})
                edge = g.delete_edge(key)
                if session:
                    session.writes += 1
                self._logged(w, unit, "edge_deleted", {"edge": model.public_edge(edge)})
            return {"level": unit.level, "edge": model.public_edge(edge)}

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
        out, missing = [], []
        with self._writing(session, lenient=(logging.WARNING, "a read's recency was not saved")) as w:
            if level is not None:
                units = [self._unit(level, session, project_path)]
            else:
                units = self._units_for(session, project_path)
            now = self.clock()
            for nid in dict.fromkeys(ids):
                hit = False
                for unit in units:
                    if nid not in unit.graph.nodes:
                        continue
                    hit = True
                    self._promote(w, unit, nid, now)
                    out.append(unit.graph.node_in_full(nid))
                if not hit:
                    missing.append(nid)
            # No compaction here: a read is not a write (contract 5), and compacting now would
            # archive again the node the agent just recalled. The next write or pass does it.
            if session:
                session.reads += 1
        return {"session_id": w.sid, "nodes": out, "missing": missing}

    def _promote(self, w, unit, nid, now):
        """A read of nid: refresh its recency and promote it (and rescued neighbours), through
        the write path; best effort, a bad disk leaves the graph as it was."""
        g = unit.graph
        neighbours = {e["to"] if e["from"] == nid else e["from"] for e in g.edges_of(nid)}
        view = {c: dict(g.nodes[c]) for c in neighbours | {nid} if c in g.nodes}
        changed = compaction.promote_on_read(view, None, nid, now, neighbours)
        touched = sorted(set(changed) | {nid})
        try:
            with self._changing(w, unit, compact=False) as g:
                for c in touched:
                    self._record(w, unit, {"op": "node", "node": view[c]})
                for c in touched:
                    g.nodes[c] = view[c]
                    g.refresh(c)
                if changed:
                    g.compact_idle_until = 0.0
                for c in sorted(changed):
                    self._logged(w, unit, "node_put", {"node": model.public_node(view[c])})
        except StorageError as exc:
            log.warning("read of %r not recorded (%s)", nid[:100], exc.message)

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
            results = []
            for score, g, node in search.rank_graphs(query, graphs, limit):
                item = model.public_node(node)
                item.update({"level": g.level, "score": score})
                if g.level == "project":
                    item["project_path"] = g.project_path
                results.append(item)
            return {"results": results}

    def sync(self, session):
        """Changes by other sessions (and compaction) since the session's mark (contract 3)."""
        with self.lock:
            diff = self.log.diff(self._units_for(session), session.id, session.sync_mark)
            session.sync_mark = self.log.seq
            self._sessions.dirty = True
            out = {"session_id": session.id}
            out.update(diff)
            return out

    def progress(self, session, task_id, state=None, level=None, has_state=False, project_path=None):
        task_id = model.check_id(task_id, "task_id")
        level = model.check_level(level, default="user")
        if has_state and state is not None and not isinstance(state, dict):
            raise BadInput("state must be a JSON object (or omit it to read the stored state).")
        if has_state and state is not None and len(dumps(state)) > 64 * 1024:
            raise BadInput("state is over 64 KiB; keep progress notes short.")
        with self._writing(session) as w:
            unit = self._unit(level, session, project_path)
            if has_state:
                with self._changing(w, unit, compact=False) as g:
                    self._record(w, unit, {"op": "progress", "task_id": task_id, "state": state})
                    progress = g.meta.setdefault("progress", {})
                    if state is None:
                        progress.pop(task_id, None)
                    else:
                        progress[task_id] = state
            current = unit.graph.meta.setdefault("progress", {}).get(task_id)
        return {"task_id": task_id, "level": level, "state": current}

    # ------------------------------------------------------------ health

    def health(self):
        with self.lock:
            return {"sessions": len(self._sessions.by_id), "graphs_loaded": 1 + len(self._projects)}
