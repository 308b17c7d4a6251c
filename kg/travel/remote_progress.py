"""kg_progress task state across one person's machines: each graph's `progress.jsonl` in its
folder under ROOT/sync/ (contract section 9, personal remote; kg/travel/remote_bridge.py runs it
after each graph's pass).

Rules owned here:
- One line per task, canonical JSON sorted by task: {"task", "state": the stored object or null
  (a tombstone: the task was cleared), "changed": when, Unix seconds to the millisecond}. Memory
  keeps the dates in the graph's `_meta.progress_changed` (kg/core/graph.py apply_record); a
  task stored before dates were kept counts as changed at 0.
- The merge rule: the later `changed` wins (ties: the larger canonical line, so every machine
  picks the same). It is a join (order and repeats do not matter), so no base is needed and a
  crash between memory and the file loses nothing: the next pass joins them again. A change made
  after seeing a version is dated after it (kg/memory/store.py progress), whatever the clocks.
- Tombstones older than kg_format.TOMBSTONE_KEEP_S leave the file.
- The secrets gate's scan of progress (kg/memory/gate.py refuse_progress, always on here) applies
  to what is written and what is taken: a task whose id or state it would refuse is neither
  written to the file nor taken from it, and is logged once.
- What the file brings goes through the store's write path ({"op": "progress"} records); its
  event reaches the listeners, never kg_sync (it is no graph change).
- A pass costs the graph's task count (no JSON, no scan) when neither memory's tasks nor the
  file moved; the file is untrusted (kgdir's size bounds, bad lines reported and skipped,
  conflict markers skipped).
"""

import logging
import math
import os

from ..core import jsonl, kg_format, model
from ..core.errors import BadInput, KgError
from ..disk.files import atomic_write, ensure_dir
from ..memory import foreground, gate
from .remote_files import stat

log = logging.getLogger(__name__)

FILE = "progress.jsonl"
DATES = "progress_changed"  # _meta key: task -> when it last changed


# ------------------------------------------------------------ lines (pure)

def record(task, state, changed):
    return {"task": task, "state": state, "changed": kg_format.ts(changed)}


def merge(a, b):
    """The later change wins; ties: the larger canonical line."""
    if a == b:
        return a
    return max(a, b, key=lambda r: (r["changed"], kg_format.canonical(r)))


def check(obj):
    """A line's record, or BadInput saying what is wrong with it."""
    if not isinstance(obj, dict):
        raise BadInput("not a JSON object")
    task = model.check_id(obj.get("task"), "task")
    state = model.check_state(obj.get("state"))
    t = obj.get("changed")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(float(t)) \
            or not 0 <= float(t) <= kg_format.MAX_TS:
        raise BadInput("changed must be a number of Unix seconds")
    return record(task, state, t)


def parse(data):
    """({task: record}, [problem]) from the file's bytes; never raises on bad content."""
    return jsonl.records(data, FILE, check, _task, merge)


def _task(rec):
    return rec["task"]


def kept(records, now=None):
    """The tasks the file holds: expired tombstones left out."""
    if now is None:
        return sorted(records)
    keep_after = now - kg_format.TOMBSTONE_KEEP_S
    return [t for t in sorted(records) if records[t]["state"] is not None or records[t]["changed"] >= keep_after]


def render(records, now=None, cache=None):
    """The file's bytes: canonical lines sorted by task, LF; expired tombstones left out. `cache`
    ({task: (record, line)}, updated) keeps the line of a record object rendered before."""
    lines, fresh = [], {}
    for t in kept(records, now):
        r = records[t]
        hit = cache.get(t) if cache is not None else None
        line = hit[1] if hit is not None and hit[0] is r else kg_format.canonical(r)
        fresh[t] = (r, line)
        lines.append(line)
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def memory_records(states, dates, cache=None):
    """Memory's lines: every stored task, and every cleared one that has a date (a tombstone).
    `cache` ({task: (state, changed, record)}, updated) keeps the record of an unchanged task."""
    out, fresh = {}, {}
    for t in set(states) | set(dates):
        state, changed = states.get(t), dates.get(t) or 0
        hit = cache.get(t) if cache is not None else None
        if hit is None or hit[0] is not state or hit[1] != changed:
            hit = (state, changed, record(t, state, changed))
        fresh[t] = hit
        out[t] = hit[2]
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return out


def join(mine, disk, mine_refused=(), disk_refused=()):
    """(merged lines for the file, {task: record} memory must take). A task whose memory version
    the gate refuses keeps the file's line and takes nothing; a file line the gate refuses is
    neither taken nor written again."""
    merged, to_memory = {}, {}
    for t in set(mine) | set(disk):
        m = mine.get(t)
        d = None if t in disk_refused else disk.get(t)
        if t in mine_refused:
            if d is not None:
                merged[t] = d
            continue
        r = merge(m, d) if m is not None and d is not None else (m or d)
        if r is None:
            continue
        merged[t] = r
        if r != m:
            to_memory[t] = r
    return merged, to_memory


def _refused(task, state):
    try:
        gate.refuse_progress(True, None, task, state)  # scanned whatever KG_SECRET_SCAN says
    except KgError as exc:
        return exc.message
    return None


# ------------------------------------------------------------ the pass

class Seen:
    """One graph's progress as its last pass left it."""

    def __init__(self, durable, graph):
        self.durable = durable
        self.graph = graph
        self.stat = False  # the file's stat (None: missing; False: never looked)
        self.states = None  # memory's {task: state} (the same objects)
        self.dates = None  # memory's {task: changed}
        self.disk = {}  # the file's records as last read or written
        self.disk_refused = set()  # its tasks the gate refuses
        self.bytes = None  # the file's bytes when its stat was `stat`
        self.mine = {}  # memory_records' cache
        self.lines = {}  # render's cache
        self.verdicts = {}  # task -> (state object, reason the gate refuses it or None)


class ProgressSync:
    def __init__(self, store, sync_root, clock):
        self.store = store
        self.sync_root = sync_root
        self.clock = clock
        self.seen = {}  # id(durable) -> Seen
        self.logged = set()

    def keep(self, durables):
        """Forget the graphs the store let go of."""
        live = {id(d) for d in durables}
        for k in [k for k in self.seen if k not in live]:
            del self.seen[k]

    def close(self):
        self.seen.clear()

    def sync(self, durable, rel, force=False):
        """One graph's tasks with its folder's progress.jsonl, both ways. -> tasks taken into memory."""
        if rel is None:
            return 0
        path = os.path.join(self.sync_root, *rel.split("/"), FILE)
        with self.store.lock:
            g = durable.graph
            states = g.meta.get("progress")
            dates = g.meta.get(DATES)
            states = dict(states) if isinstance(states, dict) else {}
            dates = dict(dates) if isinstance(dates, dict) else {}
        s = self.seen.get(id(durable))
        if s is None or s.durable is not durable or s.graph is not g:
            s = self.seen[id(durable)] = Seen(durable, g)
        st = stat(path)
        same_memory = s.states is not None and s.dates == dates and s.states.keys() == states.keys() \
            and all(states[t] is s.states[t] for t in states)
        if same_memory and st == s.stat and not force:
            return 0
        foreground.give_way()  # like each step of the graph's pass: a request being served goes first
        if st != s.stat or force:
            s.bytes = _read(path)
            s.disk, problems = parse(s.bytes)
            self._report(rel, problems)
            s.disk_refused = {t for t, r in s.disk.items() if _refused(t, r["state"]) is not None}
            if s.disk_refused:
                self._report(rel, ["%d task(s) of %s not taken: the secrets gate refuses them"
                                   % (len(s.disk_refused), FILE)])
        mine_refused = set()
        for t, state in states.items():
            hit = s.verdicts.get(t)
            if hit is None or hit[0] is not state:
                hit = s.verdicts[t] = (state, _refused(t, state))
            if hit[1] is not None:
                mine_refused.add(t)
                self._report(rel, ["a task is not synced: %s" % hit[1]])  # its id may be the credential
        for t in [t for t in s.verdicts if t not in states]:
            del s.verdicts[t]
        merged, to_memory = join(memory_records(states, dates, s.mine), s.disk, mine_refused, s.disk_refused)
        applied = self._apply(durable, g, states, dates, to_memory)
        if applied is None:
            s.states = None  # reloaded meanwhile: the next pass looks again
            return 0
        now = self.clock()
        out = render(merged, now, s.lines)
        if out != (s.bytes or b""):
            ensure_dir(os.path.dirname(path))
            atomic_write(path, out, keep_prev=False)
        s.disk, s.disk_refused, s.bytes, s.stat = {t: merged[t] for t in kept(merged, now)}, set(), out, stat(path)
        # what this pass joined: a task written in memory meanwhile differs from it, so the next pass sees it
        for r in applied:
            if r["state"] is None:
                states.pop(r["task_id"], None)
            else:
                states[r["task_id"]] = r["state"]
            dates[r["task_id"]] = r["changed"]
        s.states, s.dates = states, dates
        return len(applied)

    def _apply(self, durable, g, states, dates, to_memory):
        """The file's tasks through the store's write path; a task changed in memory since the
        snapshot is left for the next pass. -> the records applied, None when the graph was reloaded."""
        if not to_memory:
            return []
        store = self.store
        with store.writes.writing(None) as w:
            if durable.graph is not g:
                return None
            held = g.meta.get("progress") or {}
            held_dates = g.meta.get(DATES) or {}
            records = [{"op": "progress", "task_id": t, "state": r["state"], "changed": r["changed"]}
                       for t, r in sorted(to_memory.items())
                       if held.get(t) is states.get(t) and held_dates.get(t) == dates.get(t)]
            if not records:
                return []

            def apply(graph):
                from ..core.graph import apply_record

                for r in records:
                    apply_record(graph, r)
            store.writes.change(w, durable, records, apply, counted=False, compact=False)
            for r in records:
                store.writes.told(w, durable, "progress", {"task_id": r["task_id"]})
            durable.dirty = True
        return records

    def _report(self, rel, problems):
        for p in problems:
            if (rel, p) not in self.logged:
                self.logged.add((rel, p))
                log.warning("remote sync: %s/%s", rel, p)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(kg_format.MAX_FILE + 1)
    except FileNotFoundError:
        return None
