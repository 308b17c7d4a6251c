"""The store: the lock, the loaded graphs, sessions, and the operations the tools call.

Rules owned here:
- One RLock guards every graph and session. The registry (kg/memory/registry.py) holds the loaded
  graphs; every mutation takes the one write path (kg/memory/write_path.py).
- A read by id is a write of recency (and promotion): best effort, never failing the read.
- Sessions (kg/memory/sessions.py) are started by kg_read(cwd) / POST /api/sessions or bound to a
  client's session id; sessions.json is rewritten when a session starts or expires and on
  every maintenance pass (activity, sync marks and hook state are flushed lazily).
- kg_sync reads the diff and moves the caller's mark to the sequence number under one lock
  hold, so no interleaving can hide a change.
- Every put passes the secrets gate (kg/memory/gate.py) before anything is written; a node withheld
  by it is named as withheld and can be deleted.
"""

import logging
import threading
import time

from ..core import compaction, kg_format, model, search
from ..core.changelog import ChangeLog
from ..core.errors import BadInput, Conflict, KgError, NotFound, StorageError
from ..core.graph import apply_record
from ..disk.files import RootLock
from ..disk.layout import Layout
from . import file_states, gate
from .registry import Registry
from .sessions import Sessions, check_client_id
from .stale_marks import Watcher
from .write_path import WritePath

log = logging.getLogger(__name__)

CHANGE_LOG_MAX = 200000
KG_MAX_WAIT = 5.0  # seconds an agent that never pauses waits at most for its writes to reach .kg/


class Settings:
    def __init__(self, max_tokens=model.DEFAULT_MAX_TOKENS, grace_days=model.DEFAULT_GRACE_DAYS,
                 orphan_grace_days=model.DEFAULT_ORPHAN_GRACE_DAYS, save_interval=model.DEFAULT_SAVE_INTERVAL,
                 session_ttl=model.DEFAULT_SESSION_TTL, fold_delay=1.0, fold_records=20000, secret_scan=True):
        self.max_tokens = int(max_tokens)
        self.secret_scan = bool(secret_scan)  # KG_SECRET_SCAN=0: off, for graphs not shared only
        self.grace_s = float(grace_days) * 86400
        self.orphan_grace_s = float(orphan_grace_days) * 86400
        self.save_interval = float(save_interval)
        self.session_ttl = float(session_ttl)
        self.fold_delay = float(fold_delay)
        self.fold_records = int(fold_records)

    def compaction(self):
        return compaction.Settings(max_tokens=self.max_tokens, grace_s=self.grace_s,
                                   orphan_grace_s=self.orphan_grace_s)


class Store:
    def __init__(self, root, settings=None, clock=time.time):
        self.layout = Layout(root)
        self.settings = settings or Settings()
        self.clock = clock
        self.lock = threading.RLock()
        self.root_lock = RootLock(self.layout)
        self.registry = Registry(self.layout, self.lock, clock)
        self._sessions = Sessions(self.layout.sessions_file, self.settings.session_ttl)
        self.log = ChangeLog(CHANGE_LOG_MAX)
        self.started = clock()
        self.compaction_settings = self.settings.compaction()
        self.writes = WritePath(self.lock, self.log, clock, self.compaction_settings, self.registry.durables)
        self.team = None  # the team's .kg/ folder: installed by the wiring (kg/travel/team.py install)
        self.closing = []  # fn() each, first thing at close, outside the lock (the team folder's export)
        self.staleness = Watcher(self)  # stale marks (contract 12), kept current by its pass off the request path
        self._kg_since = {}  # durable id -> when writes began waiting for its .kg/ (agents that never pause)

    # ------------------------------------------------------------ views

    @property
    def user(self):
        return self.registry.user.graph

    @property
    def projects(self):
        """project_path -> Graph of every loaded project."""
        return {p: d.graph for p, d in self.registry.projects.items()}

    @property
    def journals(self):
        return {d.path: d.journal for d in self.registry.durables()}

    @property
    def dirty(self):
        """Graphs with journal records not yet folded, by file."""
        return {d.path: d.graph for d in self.registry.durables() if d.dirty}

    @property
    def sessions(self):
        return self._sessions.by_id

    @property
    def closed(self):
        return self.writes.closed

    # ------------------------------------------------------------ life cycle

    def open(self, lock_info=""):
        self.layout.prepare_root()
        self.root_lock.acquire(lock_info)
        self.layout.sweep_temp()  # what writes killed mid-way left: only this root's holder may
        self.registry.index_old_graphs()  # git runs here: before the lock, before any request
        with self.lock:
            self.registry.open()
            seq, clean = self._sessions.load(self.clock())
            # sessions.json is saved lazily: after a crash, marks and seq may be stale, so every
            # restored session gets one full resync rather than a silent gap.
            self.log.restart(seq if clean else seq + 1)
            restored = list(self._sessions.by_id.values())
        for s in restored:  # so that no request with a restored session runs git under the lock
            self.registry.warm(session=s)
        return self

    def close(self):
        """Flush everything: fold every journal into its graph file, save sessions. On a bad
        disk the journals still hold every acknowledged change; the lock is released anyway."""
        try:
            for fn in self.closing:  # before the lock: a sync takes it itself
                fn()
            with self.lock:
                self.writes.closed = True  # a request still running past shutdown must not write
                for d in self.registry.durables():
                    if d.dirty:
                        d.fold()
                try:
                    self._sessions.save(self.log.seq, clean=True)
                except KgError as exc:
                    log.error("could not save sessions.json at shutdown: %s", exc.message)
                for d in self.registry.durables():
                    d.journal.close()
        finally:
            self.root_lock.release()

    # ------------------------------------------------------------ graphs

    def project_graph(self, project_path):
        self.registry.warm(project_path=project_path)
        return self.registry.project(project_path).graph

    def graph(self, level, session=None, project_path=None):
        """The graph a call addresses: the user graph, or the project of the session / path."""
        self.registry.warm(level, session, project_path)
        return self.registry.durable_for(level, session, project_path).graph

    def graphs_for(self, session=None, project_path=None):
        """User graph first, then the addressed project graph if any."""
        self.registry.warm(None, session, project_path)
        return [d.graph for d in self.registry.durables_for(session, project_path)]

    def all_project_graphs(self):
        """Every project graph on disk (loads those not loaded yet)."""
        return [d.graph for d in self.registry.load_all()]

    # ------------------------------------------------------------ sessions

    def start_session(self, cwd=None, adopt=False):
        """A new session for cwd's project; with adopt (a kg_read(cwd) without a usable session id)
        the hook-bound session whose preload for this project is fresh and unused, if any."""
        project_path = self.registry.root_of(cwd)  # git, if it must run, runs outside the lock
        with self.lock:
            s = self._sessions.adoptable(project_path, self.clock()) if adopt else None
            if s is None:
                return self._start(project_path)
            self._sessions.claim(s, self.clock())
            return s

    def _start(self, project_path, client_id=None):
        if project_path is not None:
            self.registry.project(project_path)
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
        project_path = self.registry.root_of(cwd)  # git, if it must run, runs outside the lock
        with self.lock:
            s = self._sessions.for_client(client_id, self.clock())
            if s is not None and not fresh:
                return s, True
            if s is not None:
                self._sessions.unbind(s)
            return self._start(project_path, client_id), False

    def client_session(self, client_id):
        """The live session bound to a client's session id, or None: never starts one."""
        try:
            client_id = check_client_id(client_id)
        except BadInput:
            return None
        with self.lock:
            return self._sessions.for_client(client_id, self.clock())

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

    # ------------------------------------------------------------ upkeep

    def add_listener(self, fn):
        """fn(event_dict) is called after each change, outside the lock; it must not block."""
        self.writes.listeners.append(fn)

    def fold_idle(self, now=None, force=False):
        """Fold journals once writes have paused (or a journal grew long), one graph per lock
        hold so writers to other graphs wait for one graph's fold at most."""
        now = self.clock() if now is None else now
        with self.lock:
            quiet = force or now - self.writes.last_write >= self.settings.fold_delay
            durables = [d for d in self.registry.durables() if d.dirty]
        for d in durables:
            if d.shared is not None:  # .kg/ is written when writes pause, and every KG_MAX_WAIT while they go on
                since = self._kg_since.setdefault(id(d), now)
                if quiet or now - since >= KG_MAX_WAIT:
                    self._kg_since[id(d)] = now
                    d.shared.sync(self, blocking=False)
            with self.lock:
                if d.dirty and (quiet or d.journal.records >= self.settings.fold_records):
                    d.fold()
                    self._kg_since.pop(id(d), None)

    def maintenance(self, now=None):
        """One maintenance pass: compaction (with deletion) for every loaded graph, one graph
        per lock hold; expire idle sessions; save sessions.json; fold quiet journals."""
        now = self.clock() if now is None else now
        with self.lock:
            durables = self.registry.durables()
        for d in durables:
            with self.writes.writing(lenient=(logging.ERROR, "maintenance could not save a compaction")) as w:
                self.writes.compact_after(d, now, w, full=True)
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

    def _writing(self, level, session, project_path, **lenient):
        """The write path's lock hold, once the identity of the project the call addresses is
        known: git never runs under the lock (contract section 9)."""
        self.registry.warm(level, session, project_path)
        return self.writes.writing(session, **lenient)

    def put_node(self, session, level, node_id, gist=None, notes=None, touches=None, project_path=None,
                 private=None):
        """private: True keeps the node personal in a shared project (never under .kg/), False
        publishes it, None leaves it as it was (contract 9)."""
        node_id = model.check_id(node_id)
        private = model.check_private(private)
        gist = model.check_text(gist, "gist", model.MAX_GIST) if gist is not None else None
        notes, touches = model.check_notes(notes), model.check_touches(touches)
        with self._writing(level, session, project_path) as w:
            durable = self.registry.durable_for(level, session, project_path)
            # what was sent, first: no later error message may quote a secret sent as the id
            gate.refuse_node(self.settings.secret_scan, durable.graph,
                            {"id": node_id, "gist": gist, "notes": notes, "touches": touches})
            old = durable.graph.nodes.get(node_id)
            node = model.check_node_text(model.put_result(old, node_id, gist, notes, touches, self.clock()))
            if private:
                node["_private"] = True
            elif private is False:
                node.pop("_private", None)
            file_states.stamp(durable.graph, node)  # the touched files' states now: a put verifies (contract 12)
            gate.refuse_node(self.settings.secret_scan, durable.graph, node)
            if old is not None and compaction.revive_on_put(node):
                durable.graph.compact_idle_until = 0.0
            self.writes.change(w, durable, [{"op": "node", "node": node}], lambda g: g.put_node(node),
                               lambda _: gate.node_event(durable.graph, node))
            return {"level": durable.level, "created": old is None,
                    "node": model.public_node(durable.graph.nodes.get(node_id, node))}

    def put_edge(self, session, level, frm, to, rel, notes=None, project_path=None):
        frm, to = model.check_end(frm, "from"), model.check_end(to, "to")
        rel, notes = model.check_rel(rel), model.check_notes(notes)
        with self._writing(level, session, project_path) as w:
            durable = self.registry.durable_for(level, session, project_path)
            g = durable.graph
            gate.refuse_edge(self.settings.secret_scan, g, {"from": frm, "to": to, "rel": rel, "notes": notes})
            for name, end in (("from", frm), ("to", to)):
                if not self.registry.edge_end_known(g, end):
                    raise NotFound("%s %r is neither a node of the %s graph nor a file path: put the node first "
                                   "(kg_put_node) or give a path like src/app.py." % (name, end[:200], g.level))
            old = g.edges.get(model.edge_key(frm, to, rel))
            edge = model.put_edge_result(old, frm, to, rel, notes, self.clock())
            gate.refuse_edge(self.settings.secret_scan, g, edge)
            self.writes.change(w, durable, [{"op": "edge", "edge": edge}], lambda g: g.put_edge(edge),
                               lambda _: gate.edge_event(g, edge))
            return {"level": durable.level, "created": old is None, "edge": model.public_edge(edge)}

    def delete_node(self, session, node_id, level=None, project_path=None):
        node_id = model.check_id(node_id)
        with self._writing(level, session, project_path) as w:
            durable = self.registry.holding(node_id, level, session, project_path)
            rec = self._delete_record(durable, {"op": "del_node", "id": node_id})
            removed = self.writes.change(
                w, durable, [rec], lambda g: apply_record(g, rec),
                lambda removed: [("node_deleted", {"id": node_id,
                                                   "edges_removed": [model.public_edge(e) for e in removed]})])
            return {"level": durable.level, "id": node_id, "edges_removed": len(removed)}

    def delete_edge(self, session, frm, to, rel, level=None, project_path=None):
        frm, to, rel = model.check_end(frm, "from"), model.check_end(to, "to"), model.check_rel(rel)
        key = model.edge_key(frm, to, rel)
        with self._writing(level, session, project_path) as w:
            found = [d for d in self.registry.addressed(level, session, project_path) if key in d.graph.edges]
            if not found:
                raise NotFound("no edge %s -[%s]-> %s; kg_read shows the edges." % (frm[:200], rel[:100], to[:200]))
            if len(found) > 1:
                raise Conflict("that edge exists in both graphs: say which with level.")
            rec = self._delete_record(found[0], {"op": "del_edge", "key": key})
            edge = self.writes.change(w, found[0], [rec], lambda g: apply_record(g, rec),
                                      lambda edge: [("edge_deleted", {"edge": model.public_edge(edge)})])
            return {"level": found[0].level, "edge": model.public_edge(edge)}

    def _delete_record(self, durable, rec):
        """An explicit delete's journal record: in a shared graph it carries the time its tombstone
        will say (compaction's deletes do not: they stay personal)."""
        if durable.shared is not None:
            rec = dict(rec, tomb=kg_format.ts(self.clock()))
            node = durable.graph.nodes.get(rec.get("id"))
            if node is not None:
                rec["tomb_v"] = (node.get("_v") or 0) + 1  # deleted after seeing that version
        return rec

    def read_graphs(self, session):
        """Snapshot of the active graph of both levels for a full kg_read (refreshes nothing)."""
        with self.lock:
            session.reads += 1
            out = {}
            for g in self.graphs_for(session):
                out[g.level] = g.active_view()
                self.staleness.marks.annotate(g, out[g.level]["nodes"])
            if "project" not in out:
                out["project"] = {"nodes": [], "archived": [], "edges": [], "tokens": 0, "withheld": ([], 0)}
            return out

    def read_nodes(self, session, ids, level=None, project_path=None):
        """Full content of each node; promotes archived / orphaned ones (contract 3)."""
        ids = model.check_ids(ids)
        out, missing, withheld = [], [], []
        with self._writing(
            level, session, project_path, lenient=(logging.WARNING, "a read's recency was not saved")
        ) as w:
            durables = self.registry.addressed(level, session, project_path)
            now = self.clock()
            for nid in dict.fromkeys(ids):
                holding = [d for d in durables if nid in d.graph.nodes]
                if any(not d.graph.shown(nid) for d in holding):
                    withheld.append(nid)  # it holds a credential: neither shown nor promoted
                    holding = [d for d in holding if d.graph.shown(nid)]
                    if not holding:
                        continue
                for durable in holding:
                    self._promote(w, durable, nid, now)
                    out.extend(self.staleness.marks.annotate(durable.graph, [durable.graph.node_in_full(nid)]))
                if not holding:
                    missing.append(nid)
            # No compaction here: a read is not a write (contract 5), and compacting now would
            # archive again the node the agent just recalled. The next write or pass does it.
            if session:
                session.reads += 1
        result = {"session_id": w.sid, "nodes": out, "missing": missing}
        if withheld:
            result["withheld"] = withheld
        return result

    def _promote(self, w, durable, nid, now):
        """A read of nid: refresh its recency and promote it (and rescued neighbours), through
        the write path; best effort, a bad disk leaves the graph as it was."""
        g = durable.graph
        neighbours = {e["to"] if e["from"] == nid else e["from"] for e in g.edges_of(nid)}
        view = {c: dict(g.nodes[c]) for c in neighbours | {nid} if c in g.nodes}
        changed = compaction.promote_on_read(view, None, nid, now, neighbours)
        touched = sorted(set(changed) | {nid})
        try:
            self.writes.change(w, durable, [{"op": "node", "node": view[c]} for c in touched],
                               lambda g: [g.put_node(view[c]) for c in touched],
                               lambda _: [ev for c in sorted(changed) for ev in gate.node_event(g, view[c])],
                               counted=False, compact=False)
            if changed:
                g.compact_idle_until = 0.0
        except StorageError as exc:
            log.warning("read of %r not recorded (%s)", nid[:100], exc.message)

    def search(self, query, session=None, limit=20, project_path=None):
        search.check_query(query, limit)
        self.registry.warm(None, session, project_path)
        root = self.registry.root_of(project_path) if session is None and project_path else None
        with self.lock:
            if session is not None:
                graphs = self.graphs_for(session)
            elif root:
                # a search reads: a folder with no project graph on disk gets none
                durable = self.registry.existing(root)
                graphs = [self.user] + ([durable.graph] if durable is not None else [])
            else:
                graphs = [self.user] + self.all_project_graphs()
            results = []
            for score, g, node in search.rank_graphs(query, graphs, limit):
                item = model.public_node(node)
                item.update({"level": g.level, "score": score})
                mark = self.staleness.marks.of(g, node["id"])
                if mark is not None:
                    item["stale"] = mark.public
                if g.level == "project":
                    item["project_path"] = g.project_path
                results.append(item)
            return {"results": results}

    def sync(self, session):
        """Changes by other sessions (and compaction) since the session's mark (contract 3)."""
        with self.lock:
            sources = self.registry.durables_for(session)
            diff = self.log.diff(sources, session.id, session.sync_mark)
            for d in sources:
                self.staleness.marks.annotate(d.graph, diff["nodes"], level=d.level)
                self.staleness.marks.annotate_edges(d.graph, diff["edges"], level=d.level)
            session.sync_mark = self.log.seq
            self._sessions.dirty = True
            out = {"session_id": session.id}
            out.update(diff)
            return out

    def progress(self, session, task_id, state=None, level=None, has_state=False, project_path=None):
        task_id = model.check_id(task_id, "task_id")
        level = model.check_level(level, default="user")
        state = model.check_state(state) if has_state else state
        with self._writing(level, session, project_path) as w:
            durable = self.registry.durable_for(level, session, project_path)
            if has_state:
                gate.refuse_progress(self.settings.secret_scan, durable.graph, task_id, state)
                # dated after the version it replaces, whatever the clocks (the personal remote's
                # rule: the later change wins, kg/travel/remote_progress.py)
                seen = (durable.graph.meta.get("progress_changed") or {}).get(task_id) or 0
                record = {"op": "progress", "task_id": task_id, "state": state,
                          "changed": round(max(float(self.clock()), float(seen) + 0.001), 3)}
                self.writes.change(w, durable, [record], lambda g: apply_record(g, record),
                                   counted=False, compact=False)
                self.writes.told(w, durable, "progress", {"task_id": task_id})  # no graph change: not kg_sync's
            current = durable.graph.meta.setdefault("progress", {}).get(task_id)
        return {"task_id": task_id, "level": level, "state": current}

    # ------------------------------------------------------------ health

    def health(self):
        with self.lock:
            return {"sessions": len(self._sessions.by_id), "graphs_loaded": 1 + len(self.registry.projects)}

