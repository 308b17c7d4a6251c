"""The session-start preload (contract sections 8 and 11): what an agent's context holds of kg
memory before its first turn, laid out in a fixed room, neither level starved.

Rules owned here:
- The preload fits within PRELOAD_LIMIT characters. It gives gists of the most valuable active
  nodes: in each level's half of its room, recency first, and in value.SHARE of it the nodes that
  order leaves out but that were used on many occasions or across many parts of the project
  (kg/agents/value.py; up to value.LIFT_MAX archived ones are read back first); then, in the room
  the gists leave, ids only (crumbs) of the active nodes left out and of the archived ones. A gist
  line is knowledge in context, a crumb only a way to it: gists never give up room to crumbs
  (bench/README.md, "The preload's room": on real history and the synthetic worlds a tenth of the
  room kept for crumbs met fewer needs). It opens with the usage guide kgd's MCP instructions give
  (an agent may not show its model those).
- Stale knowledge (contract section 12) keeps its place but carries its mark on its gist line;
  at equal worth (the same rank in the order, the same worth in the reserve) current knowledge
  comes first.
- The continuity note of a resume kgd knows: the session id and the nodes changed since.
"""

from ..core import model
from . import recall, value

PRELOAD_LIMIT = 10000
PRELOAD_GIST = 200
CRUMB_HEAD = "Ids only (kg_read id=... gives one): "


def _usage(session_id):
    """The usage guide kgd's MCP instructions give, in short: some agents (Copilot CLI) do not show
    their model those instructions, so the preload carries them. Every character here is taken from
    the preload's room for knowledge (memory_eval --quick: a 900-character guide left 73 % of the
    conventions in context, this one of about 550 leaves 78 %)."""
    return ["Session: %s" % session_id,
            "kg memory (kgd) is loaded below: do not call kg_read with cwd; pass session_id=%s to every kg_* "
            "call. kg_read id=... gives a node in full, kg_search query=... finds more (archived too)." % session_id,
            "Save what a later session needs with kg_put_node: kebab-case id, one-line gist, notes, touches (its "
            "files); level project or user. To update, put the same id (kg_search first); delete what is wrong; "
            "link with kg_put_edge. kg_sync: other sessions' changes; kg_progress: a long task's state."]


def value_order(g, stale=()):
    """Active nodes of one graph, most valuable first: two thirds recency, one third
    connectedness (edges to active nodes or files), each as a rank; ties current first (`stale`:
    the ids marked stale), then by id. Recency leads:
    compaction already kept the well-connected nodes active, and a tenth of the
    room should show what is being worked on now; recall brings the rest when it is named."""
    active = g.visible(model.ACTIVE)  # never a node holding a credential
    nodes = g.nodes
    deg = {}
    for nid in active:
        d = 0
        for key in g.adj.get(nid, ()):
            e = g.edges.get(key)
            if e is None:
                continue
            other = e["to"] if e["from"] == nid else e["from"]
            o = nodes.get(other)
            if o is None or model.is_active(o):
                d += 1
        deg[nid] = d
    n = len(active)
    if not n:
        return []
    by_rec = sorted(active, key=lambda i: (model.recency(nodes[i]), i))
    rec_rank = {nid: k for k, nid in enumerate(by_rec)}
    by_deg = sorted(active, key=lambda i: deg[i])
    deg_rank, k = {}, 0
    while k < n:
        j = k
        while j < n and deg[by_deg[j]] == deg[by_deg[k]]:
            j += 1
        for x in by_deg[k:j]:
            deg_rank[x] = (k + j - 1) / 2.0
        k = j
    return sorted(active, key=lambda i: (-(2 * rec_rank[i] + deg_rank[i]), i in stale, i))


def _crumb_order(g, left):
    """Ids a preload shows without their gists: the active nodes it left out (most valuable
    first), then the archived ones, most recently used first (ties by id)."""
    archived = sorted(g.visible(model.ARCHIVED), key=lambda i: (-model.recency(g.nodes[i]), i))
    return list(left) + archived


def _share(room, ordered, cost, rooms):
    """Take items of both levels in order, each level within half the room first, then what the
    other left; `rooms` holds what each level already used. Returns how many of each were taken."""
    taken = {lv: 0 for lv in ordered}

    def fill(level, budget):
        items = ordered[level]
        while taken[level] < len(items):
            c = cost(level, items[taken[level]])
            if rooms[level] + c > budget:
                return
            rooms[level] += c
            taken[level] += 1

    start = dict(rooms)
    for lv in ordered:
        fill(lv, start[lv] + room // 2)
    for lv in ordered:
        spare = room - sum(rooms[x] - start[x] for x in ordered)
        fill(lv, rooms[lv] + spare)
    return taken


def gist_cost(g, nid):
    return len("- %s: %s" % (nid, recall.clip(g.nodes[nid].get("gist", ""), PRELOAD_GIST))) + 1


def level_room(session):
    """Characters of one level's half of the preload's gist room."""
    return (PRELOAD_LIMIT - sum(len(x) + 1 for x in _usage(session.id)) - 480) // 2


def preload(mem, session, orders=None):
    """The preload text, the keys it shows and counts. Gists of the most valuable active nodes
    take the room, each level half of it (what one leaves goes to the other); what they leave
    lists, ids only, the active nodes left out and the archived ones: a crumb costs a tenth of a
    gist line and one kg_read id=... brings its node back."""
    p = _Preload(mem, session, orders)
    p.keep_worth(mem.now())
    p.take_gists()
    p.take_crumbs()
    return p.text(), p.keys(), p.stats()


_LEVELS = ("user", "project")
_TITLES = (("user", "User knowledge (all projects)"), ("project", "Project knowledge"))


class _Preload:
    """A preload being laid out, one step at a time. ordered: level -> active ids, best first;
    taken: level -> how many of them get a gist line (used: the characters those cost);
    crumbs: level -> ids listed without gists, shown: how many of them fit."""

    __slots__ = ("session", "head", "graphs", "room", "ordered", "taken", "used", "crumbs", "shown", "stale")
    TAIL_ROOM = 400  # characters kept for the closing line (what was left out)

    def __init__(self, mem, session, orders):
        self.session = session
        self.head = _usage(session.id)
        self.graphs = {g.level: g for g in mem.graphs(session)}
        self.stale = {lv: mem.stale(g) if hasattr(mem, "stale") else {} for lv, g in self.graphs.items()}
        if orders is None or orders[0] != mem.store.log.seq or set(orders[1]) != set(self.graphs):
            orders = (None, {lv: value_order(g, self.stale[lv]) for lv, g in self.graphs.items()})
        self.ordered = {lv: list(orders[1].get(lv, ())) for lv in _LEVELS}
        self.room = PRELOAD_LIMIT - sum(len(x) + 1 for x in self.head) - self.TAIL_ROOM - 80

    def keep_worth(self, now):
        """Knowledge used on many occasions keeps a share of each level's room (kg/agents/value.py)."""
        for lv in _LEVELS:
            g = self.graphs.get(lv)
            if g is not None:
                self.ordered[lv] = value.reserve(g, self.ordered[lv], lambda nid, g=g: gist_cost(g, nid),
                                                 level_room(self.session), now, self.stale[lv])

    def gist_line(self, level, nid):
        m = self.stale[level].get(nid)
        return "- %s%s: %s" % (nid, " [%s]" % m.text if m is not None else "",
                               recall.clip(self.graphs[level].nodes[nid].get("gist", ""), PRELOAD_GIST))

    def take_gists(self):
        self.used = {lv: 0 for lv in _LEVELS}
        self.taken = _share(self.room, self.ordered,
                            lambda lv, nid: len(self.gist_line(lv, nid)) + 1, self.used)

    def gists(self, level):
        return self.ordered[level][:self.taken[level]]

    def take_crumbs(self):
        """Ids of what the gists left out, in the room they left (each level's list has a head)."""
        self.crumbs = {lv: _crumb_order(self.graphs[lv], self.ordered[lv][self.taken[lv]:])
                       if lv in self.graphs else [] for lv in _LEVELS}
        spent = sum(self.used[lv] + (len(CRUMB_HEAD) + 2 if self.crumbs[lv] else 0) for lv in _LEVELS)
        self.shown = _share(self.room - spent, self.crumbs, lambda lv, nid: len(nid) + 2, {lv: 0 for lv in _LEVELS})

    def body(self):
        body = []
        for lv, title in _TITLES:
            if lv == "project" and lv not in self.graphs:
                continue
            gists = [self.gist_line(lv, nid) for nid in self.gists(lv)]
            if gists:
                body.extend(["", "## %s, most valuable first:" % title] + gists)
            else:  # one line: a level with nothing to show costs every session little
                body.extend(["", "## %s:%s" % (title, "" if self.shown[lv] else " (nothing yet)")])
            if self.shown[lv]:
                body.append(CRUMB_HEAD + ", ".join(self.crumbs[lv][:self.shown[lv]]))
        return body

    def tail(self):
        left = {lv: len(self.ordered[lv]) - self.taken[lv] for lv in _LEVELS}
        graphs = self.graphs.values()
        archived = sum(len(g.by_state[model.ARCHIVED]) + len(g.by_state[model.ORPHANED]) for g in graphs)
        # short: every character here is paid by every session (the guide above says kg_search finds more)
        return "Left out here: %d more active user nodes, %d more active project nodes, %d archived or " \
               "orphaned, %d edges, all notes." % (
                   left["user"], left["project"], archived, sum(len(g.edges) for g in graphs))

    def text(self):
        text = "\n".join(self.head + self.body() + ["", self.tail()])
        if len(text) > PRELOAD_LIMIT:  # long ids can outgrow the estimate: never past the limit
            text = text[:PRELOAD_LIMIT - 60] + "\n… cut to fit; kg_read gives the rest."
        return text

    def keys(self):
        return ["%s:%s" % (lv, nid) for lv in _LEVELS for nid in self.gists(lv)]

    def stats(self):
        return {"shown": self.taken["user"] + self.taken["project"], "user": self.taken["user"],
                "project": self.taken["project"], "active": len(self.ordered["user"]) + len(self.ordered["project"])}


def continuity(mem, session, since):
    changed = []
    for g in mem.graphs(session):
        for nid, node in g.visible_nodes().items():
            w = node.get("_write_ts")
            if isinstance(w, (int, float)) and w > since:
                changed.append((w, g.level, nid))
    changed.sort(reverse=True)
    lines = ["Session: %s (resumed; the kg memory loaded earlier in this conversation still holds)." % session.id]
    if changed:
        ids = ", ".join("%s (%s)" % (nid, lv) for _, lv, nid in changed[:10])
        more = " and %d more" % (len(changed) - 10) if len(changed) > 10 else ""
        lines.append("Changed since: %d node(s): %s%s; kg_sync session_id=%s gives them." % (
            len(changed), ids, more, session.id))
    else:
        lines.append("Nothing in memory changed since.")
    return "\n".join(lines)
