"""The three-way merge of a graph's shared content with `.kg/` (contract section 9). Pure.

`reconcile(memory, disk, base, now)` compares, key by key (a node id or an edge key), what kgd
holds in memory, what the files hold, and what the two last agreed on (`base`: key -> stamp of
the record both held), like git's three-way merge:

- memory changed, disk not: memory's version is written to disk;
- disk changed, memory not: disk's version is taken into memory;
- both changed: kgdir.merge_versions of the two, taken by both sides;
- memory lacks a based key, disk unchanged: the user deleted it: a tombstone is written;
- disk lacks a based key (or holds a tombstone), memory unchanged: it leaves this view and
  nothing is written (a branch switch, a teammate's delete);
- a key never based: disk's version is added to memory, memory's version is written to disk
  (both present: merged).

`memory` maps key -> live record, or a tombstone for a delete whose time is known (an explicit
delete not yet written). `dropped` maps key -> stamp of nodes this person's compaction removed
from the view: they stay out (no tombstone) until the disk's version changes (new knowledge).
`frozen` keys are never written (a node holding a credential): their base stays as it was.

Returns a Result: `memory` (key -> record to hold, or None to leave the view), `disk` (key ->
record to write, live or tombstone), `base` and `dropped` (the new ones).
"""

from collections import namedtuple

from .kg_format import covers, is_tombstone, join, merge_versions, parse, render, stamp, tombstone, vector, version
from .team_state import deleted_at

Result = namedtuple("Result", "memory disk base dropped")


def _live(rec):
    return rec is not None and not is_tombstone(rec)


def reconcile(memory, disk, base, now, dropped=None, frozen=(), memory_stamps=None, disk_stamps=None):
    """`memory_stamps` / `disk_stamps` (key -> stamp of that side's record) spare recomputing
    the stamps of records a caller has seen before (large graphs, small changes)."""
    mem_out, disk_out, new_base = {}, {}, {}
    dropped = dict(dropped or {})
    memory_stamps, disk_stamps = memory_stamps or {}, disk_stamps or {}
    for key in set(memory) | set(disk) | set(base) | set(dropped):
        m, d, b = memory.get(key), disk.get(key), base.get(key)
        sm = (memory_stamps.get(key) or stamp(m)) if _live(m) else None
        sd = (disk_stamps.get(key) or stamp(d)) if _live(d) else None
        if key in dropped and m is not None:
            del dropped[key]  # put again by this person: no longer dropped
        elif key in dropped:
            if sd is None or sd == dropped[key]:
                if sd is None:
                    del dropped[key]
                continue
            del dropped[key]  # a teammate changed it: new knowledge comes back
            b = None
        if sm is not None and sm == sd:
            new_base[key] = sm
            continue
        m_changed = sm != b if _live(m) else (b is not None or m is not None)
        d_changed = sd != b or (b is None and d is not None)  # a tombstone never based is news
        if not m_changed and not d_changed:
            if sm is not None:
                new_base[key] = sm
            continue
        if m_changed and not d_changed:
            _take(key, m, sm, mem_out, disk_out, new_base, now, memory_side=True)
        elif d_changed and not m_changed:
            _take(key, d, sd, mem_out, disk_out, new_base, now, memory_side=False, held=_live(m))
        else:
            _both(key, m, d, mem_out, disk_out, new_base, now)
    for key in frozen:
        if key in disk_out:
            del disk_out[key]
            if key in base:
                new_base[key] = base[key]
            else:
                new_base.pop(key, None)
    return Result(mem_out, disk_out, new_base, dropped)


def _take(key, rec, st, mem_out, disk_out, new_base, now, memory_side, held=False):
    """One side changed: the other side follows it (`st`: the stamp of rec when live)."""
    if memory_side:
        if _live(rec):
            disk_out[key] = rec
            new_base[key] = st
        else:  # deleted here: a tombstone at the time of the delete (now if unknown)
            disk_out[key] = rec if rec is not None else _tomb(key, now)
    else:
        if _live(rec):
            mem_out[key] = rec
            new_base[key] = st
        elif held:
            mem_out[key] = None


def _both(key, m, d, mem_out, disk_out, new_base, now):
    versions = [r for r in (m, d) if r is not None]
    if not versions:
        return
    if m is None and _live(d):
        # Deleted here after the disk's version changed: the delete's time is unknown, so the
        # disk's version stands (nothing is lost; the user can delete it again).
        mem_out[key] = d
        new_base[key] = stamp(d)
        return
    if _live(m) and d is None:
        # Changed here, gone from the disk (another branch, or an editor removed the line):
        # the acknowledged change is kept and written.
        disk_out[key] = m
        new_base[key] = stamp(m)
        return
    r = merge_versions(versions)
    if _live(r):
        new_base[key] = stamp(r)
        if not _live(m) or stamp(m) != new_base[key]:
            mem_out[key] = r
        if not _live(d) or stamp(d) != new_base[key]:
            disk_out[key] = r
    else:
        if _live(m):
            mem_out[key] = None
        if d is None or d != r:
            disk_out[key] = r


def _tomb(key, when):
    """A tombstone for key; `when` is a time, or a `deleted` entry ([ts, v])."""
    when, v = deleted_at(when)
    if "->" in key:
        frm, rest = key.split("->", 1)
        to, rel = rest.rsplit(":", 1)
        return tombstone(None, when, edge={"from": frm, "to": to, "rel": rel}, v=v)
    return tombstone(key, when, v=v)


def plan(memory, data, base, now, kind, dropped=None, frozen=(), force=False):
    """One file's sync: parse its bytes, reconcile, and the bytes to write back (None when
    nothing needs writing). Returns (Result, new bytes or None, problems)."""
    disk, problems = parse(data, kind)
    r = reconcile(memory, disk, base, now, dropped, frozen)
    return r, written(disk, r, data, now, force), problems


def written(disk, result, data, now, force=False):
    """The file's new bytes after a reconcile, or None. The file is rewritten clean only when
    something is written to it (or with `force`): a pull that merely brings duplicates leaves
    the working tree as git left it."""
    if not result.disk and not force:
        return None
    merged = dict(disk)
    merged.update(result.disk)
    out = render(merged, now)
    return out if out != (data or b"") else None


def memory_view(live, deleted, base, dropped):
    """What reconcile is given as memory, from what a graph holds: its live records, tombstones
    for explicit deletes not yet written (`deleted`: key -> time), and, for a based key that is
    neither (compaction removed it from this person's view), a move from base to dropped: the
    repository keeps it. Returns (memory, base, dropped)."""
    memory = {k: _tomb(k, t) for k, t in deleted.items() if k not in live}
    memory.update(live)
    base, dropped = dict(base), dict(dropped)
    for key in [k for k in base if k not in memory]:
        dropped[key] = base.pop(key)
    return memory, base, dropped


def past_seen(obj, d, mine):
    """A change made here (its object `obj`, its record's vector `mine`) whose vector the files'
    version `d` already covers or equals was made after seeing d (a node put again after its
    delete: its version restarted at 1), or a node made anew (no vector yet) where the files
    hold a delete (it left this view, then was put again): a copy of obj with a version past d's,
    its vector joined with d's. Else obj itself (a change made without seeing d is concurrent)."""
    theirs = vector(d) if d is not None else {}
    anew = d is not None and is_tombstone(d) and not obj.get("_vv")
    if not theirs or not (anew or covers(theirs, mine) or theirs == mine):
        return obj
    v = max(version(d), obj.get("_v") or 0) + 1
    return dict(obj, _v=v, _vv=join([theirs, obj.get("_vv") or {}]))


def seen_tomb(tomb, d, base_stamp, clone):
    """An explicit delete's tombstone written by `clone`: its vector covers the version this clone
    had seen (the files' version d, while it is still the base), its version is past it."""
    seen = vector(d) if d is not None and stamp(d) == base_stamp else {}
    v = max(version(tomb), version(d) + 1 if seen else 0, 1)
    out = dict(tomb, v=v)
    out["vv"] = join([seen, {clone: v}])
    return out
