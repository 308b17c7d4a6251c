"""Sessions: who is asking, since when, what they have seen. No graph access.

Rules owned here:
- A session is started by kg_read(cwd) / POST /api/sessions (or bound to a client, below),
  reused by id, and expires after KG_SESSION_TTL idle. A session bound to a client (Claude
  Code's session id) is kept at least CLIENT_TTL (30 days) idle: a resumed conversation
  finds its memory state again.
- One live session per client id; the binding survives a clean daemon restart.
- A kg_read(cwd) without a session id, within ADOPT_WINDOW of a session-start preload for the
  same project that no tool call has used yet, adopts that hook-bound session instead of
  starting a second one: the agent then gets only what the preload did not show (an agent
  that obeys the MCP instructions rather than the preload must not read its memory twice).
- `shown` holds "level:id" -> unix time of what the client session was shown, insertion
  ordered and bounded to MAX_SHOWN (oldest dropped); `hook` holds small JSON counters the
  hooks keep. Neither ever holds prompt text.
- sessions.json = {"seq", "clean", "sessions": {id: Session.to_obj()}}; it is written whole
  (storage.atomic_write) when a session starts or expires and on each maintenance pass.
  Files written before a field existed still load (missing fields take their defaults).
"""

import os

from ..core.errors import BadInput, NotFound
from ..disk.files import atomic_write, dumps, load_json, storage_error

CLIENT_TTL = 30 * 86400.0
ADOPT_WINDOW = 30 * 60.0
MAX_SHOWN = 2000
MAX_CLIENT_ID = 200


def new_session_id():
    """A random UUID4 string (os.urandom directly: the uuid module costs start-up memory)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def check_client_id(client_id):
    if not isinstance(client_id, str) or not client_id.strip():
        raise BadInput("client session id must be a non-empty string.")
    if len(client_id) > MAX_CLIENT_ID:
        raise BadInput("client session id is over %d characters." % MAX_CLIENT_ID)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in client_id):
        raise BadInput("client session id contains control characters.")
    return client_id


class Session:
    __slots__ = ("id", "project_path", "started", "last_active", "sync_mark", "writes", "reads",
                 "client_id", "shown", "hook", "claimed")

    def __init__(self, sid, project_path, started, sync_mark, client_id=None):
        self.id = sid
        self.project_path = project_path
        self.started = started
        self.last_active = started
        self.sync_mark = sync_mark
        self.writes = 0
        self.reads = 0
        self.client_id = client_id
        self.shown = {}
        self.hook = {}
        self.claimed = 0.0  # when a tool call last used this session by id (or adopted it)

    def to_obj(self):
        return {"id": self.id, "project_path": self.project_path, "started": self.started,
                "last_active": self.last_active, "sync_mark": self.sync_mark,
                "writes": self.writes, "reads": self.reads, "client_id": self.client_id,
                "shown": dict(self.shown), "hook": dict(self.hook), "claimed": self.claimed}

    @classmethod
    def from_obj(cls, raw):
        """A session from sessions.json; KeyError / TypeError / ValueError when unusable."""
        s = cls(raw["id"], raw.get("project_path"), float(raw["started"]), int(raw.get("sync_mark", 0)))
        s.last_active = float(raw.get("last_active", s.started))
        client = raw.get("client_id")
        s.client_id = client if isinstance(client, str) and client else None
        shown = raw.get("shown")
        if isinstance(shown, dict):
            s.shown = {k: float(v) for k, v in shown.items()
                       if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}
            _bound(s.shown)
        hook = raw.get("hook")
        s.hook = dict(hook) if isinstance(hook, dict) else {}
        claimed = raw.get("claimed", 0.0)
        s.claimed = float(claimed) if isinstance(claimed, (int, float)) and not isinstance(claimed, bool) else 0.0
        return s

    def mark_shown(self, keys, now):
        for k in keys:
            self.shown.pop(k, None)  # re-shown: moves to the newest end
            self.shown[k] = now
        _bound(self.shown)


def _bound(shown):
    extra = len(shown) - MAX_SHOWN
    if extra > 0:
        for k in list(shown)[:extra]:
            del shown[k]


class Sessions:
    """The live sessions by id and by client id, their expiry and their file."""

    def __init__(self, path, ttl):
        self.path = path
        self.ttl = float(ttl)
        self.by_id = {}
        self.by_client = {}
        self.dirty = False

    def ttl_of(self, s):
        return max(self.ttl, CLIENT_TTL) if s.client_id else self.ttl

    def expired(self, s, now):
        return now - s.last_active >= self.ttl_of(s)

    def load(self, now):
        """Restore live sessions; returns (seq, clean) as the file recorded them."""
        obj = load_json(self.path) or {}
        seq = obj.get("seq", 0)
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
        raw_sessions = obj.get("sessions")
        for raw in raw_sessions.values() if isinstance(raw_sessions, dict) else ():
            try:
                s = Session.from_obj(raw)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if not self.expired(s, now):
                self.add(s)
        return seq, bool(obj.get("clean"))

    def save(self, seq, clean=False):
        obj = {"seq": seq, "clean": clean, "sessions": {s.id: s.to_obj() for s in self.by_id.values()}}
        try:
            atomic_write(self.path, dumps(obj))
        except OSError as exc:
            raise storage_error(exc, "sessions.json") from exc
        self.dirty = False

    def add(self, s):
        self.by_id[s.id] = s
        if s.client_id:
            old = self.by_client.get(s.client_id)
            if old is not None and old is not s:
                old.client_id = None
            self.by_client[s.client_id] = s

    def start(self, project_path, now, sync_mark, client_id=None):
        s = Session(new_session_id(), project_path, now, sync_mark, client_id)
        self.add(s)
        return s

    def live(self, sid, now):
        """The live session `sid`, touched; NotFound when unknown or expired."""
        s = self.by_id.get(sid)
        if s is not None and self.expired(s, now):
            self.drop(s)
            s = None
        if s is None:
            raise NotFound(
                "unknown or expired session_id %r: call kg_read with cwd to start a new session." % sid[:100]
            )
        self.claim(s, now)
        return s

    def adoptable(self, project_path, now):
        """The hook-bound session whose preload for this project is the newest within
        ADOPT_WINDOW and that no tool call has used since, or None."""
        best = None
        for s in self.by_client.values():
            seen = s.hook.get("seen")
            if (s.project_path != project_path or not isinstance(seen, (int, float)) or isinstance(seen, bool)
                    or not now - ADOPT_WINDOW <= seen <= now or s.claimed >= seen or self.expired(s, now)):
                continue
            if best is None or seen > best.hook["seen"]:
                best = s
        return best

    def claim(self, s, now):
        """A tool call used s: it is no longer waiting to be adopted."""
        s.claimed = now
        self.touch(s, now)

    def for_client(self, client_id, now):
        """The live session bound to client_id (touched), or None."""
        s = self.by_client.get(client_id)
        if s is None:
            return None
        if self.expired(s, now) or self.by_id.get(s.id) is not s:
            self.drop(s)
            return None
        self.touch(s, now)
        return s

    def unbind(self, s):
        if s.client_id and self.by_client.get(s.client_id) is s:
            del self.by_client[s.client_id]
        s.client_id = None
        self.dirty = True

    def touch(self, s, now):
        s.last_active = now
        self.dirty = True

    def drop(self, s):
        self.by_id.pop(s.id, None)
        if s.client_id and self.by_client.get(s.client_id) is s:
            del self.by_client[s.client_id]
        self.dirty = True

    def expire(self, now):
        stale = [s for s in self.by_id.values() if self.expired(s, now)]
        for s in stale:
            self.drop(s)
        return len(stale)

    def marks(self):
        return [s.sync_mark for s in self.by_id.values()]
