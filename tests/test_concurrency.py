"""Concurrency (no acknowledged write lost, kg_sync exact): 16 sessions of one project write and
sync at once against a real kgd, 5,000 operations in all, over keep-alive connections, at both
levels.

Every session records what it was told (each acknowledged change with the times its request
was sent and answered) and what each of its kg_sync calls returned (with the times the sync
was sent and answered). Then, with only client-side clocks:

- coverage: a change by another session acknowledged before one of S's syncs began is
  reported by that sync or an earlier one of S (one that ended after the change was sent);
- own writes left out: an id only S ever touches never appears in S's syncs;
- content: what a sync reports for a node or edge (its content, or its deletion) was that
  key's current value at some instant while the sync ran (linearizable register check);
- no error result except the expected ones (an edge to, or a delete of, a shared node that
  another session just deleted), no exception;
- the daemon stops on SIGTERM with exit code 0 and every graph file parses and holds exactly
  the final state.
"""

import bisect
import glob
import json
import os
import random
import threading
import time
import traceback

import pytest

from helpers import ToolClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = int(os.environ.get("KG_CONCURRENCY_SEED", "4242"))
THREADS = 16
TOTAL_OPS = 5000
SHARED = 6                       # shared node ids per level, written by every session
FILES = ["src/a.py", "src/b.py", "lib/c.py", "docs/d.md"]
RELS = ["uses", "explains"]
LEVELS = ("user", "project")


def ekey(level, frm, to, rel):
    return ("e", level, "%s->%s:%s" % (frm, to, rel))


class Session:
    """One thread's session and everything it saw."""

    def __init__(self, k, seed):
        self.k = k
        self.rnd = random.Random(seed)
        self.prefix = "t%02d-" % k
        self.sid = None
        self.nodes = {}          # own live node id -> level
        self.edges = {}          # own edge key -> (level, from, to, rel); ends own or files
        self.changes = []        # (key, value, send, ack, track_value)
        self.syncs = []          # (start, end, {key: value})
        self.own_keys = set()    # keys only this session ever writes
        self.errors = []
        self.expected_errors = 0
        self.ops = 0
        self.counter = 0


def timed(c, tool, args):
    """-> (result, start, end): the interval the linearizability check places the call in."""
    t0 = time.monotonic()
    res = c.call(tool, args)
    return res, t0, time.monotonic()


def node_value(args):
    return (args["gist"], tuple(args["notes"]), tuple(args["touches"]))


def do_op(c, s):
    rnd = s.rnd
    r = rnd.random()
    sid = s.sid
    s.counter += 1
    live = sorted(s.nodes)
    if r < 0.30:
        return do_sync(c, s)
    if r < 0.50 or not live:
        if live and rnd.random() < 0.4:
            nid = rnd.choice(live)
            level = s.nodes[nid]
        else:
            nid = "%sn%d" % (s.prefix, s.counter)
            level = rnd.choice(LEVELS)
        args = {"session_id": sid, "level": level, "id": nid, "gist": "gist %s #%d" % (nid, s.counter),
                "notes": ["note %d" % s.counter] * rnd.randrange(3), "touches": rnd.sample(FILES, rnd.randrange(2))}
        res, t0, t1 = timed(c, "kg_put_node", args)
        if res.get("isError"):
            s.errors.append(("kg_put_node", args, res))
            return
        s.nodes[nid] = level
        key = ("n", level, nid)
        s.own_keys.add(key)
        s.changes.append((key, node_value(args), t0, t1, True))
        return
    if r < 0.60:
        level = rnd.choice(LEVELS)
        nid = "shared-%s%d" % (level[0], rnd.randrange(SHARED))
        args = {"session_id": sid, "level": level, "id": nid, "gist": "shared %s by %d #%d" % (nid, s.k, s.counter),
                "notes": ["by %d" % s.k], "touches": []}
        res, t0, t1 = timed(c, "kg_put_node", args)
        if res.get("isError"):
            s.errors.append(("kg_put_node", args, res))
            return
        s.changes.append((("n", level, nid), node_value(args), t0, t1, True))
        return
    if r < 0.75:
        frm = rnd.choice(live)
        level = s.nodes[frm]
        same = [i for i in live if s.nodes[i] == level and i != frm]
        x = rnd.random()
        if x < 0.5 and same:
            to, mixed = rnd.choice(same), False
        elif x < 0.8:
            to, mixed = rnd.choice(FILES), False
        else:
            to, mixed = "shared-%s%d" % (level[0], rnd.randrange(SHARED)), True
        rel = rnd.choice(RELS)
        args = {"session_id": sid, "level": level, "from": frm, "to": to, "rel": rel,
                "notes": ["edge note %d" % s.counter]}
        res, t0, t1 = timed(c, "kg_put_edge", args)
        key = ekey(level, frm, to, rel)
        if res.get("isError"):
            text = res["content"][0]["text"]
            if mixed and "neither a node" in text:
                s.expected_errors += 1            # the shared node was deleted by someone
            else:
                s.errors.append(("kg_put_edge", args, res))
            return
        if mixed:
            s.changes.append((key, ("notes", tuple(args["notes"])), t0, t1, False))
        else:
            s.edges[key] = (level, frm, to, rel)
            s.own_keys.add(key)
            s.changes.append((key, ("notes", tuple(args["notes"])), t0, t1, True))
        return
    if r < 0.83:
        nid = rnd.choice(live)
        level = s.nodes[nid]
        args = {"session_id": sid, "id": nid, "level": level}
        res, t0, t1 = timed(c, "kg_delete_node", args)
        if res.get("isError"):
            s.errors.append(("kg_delete_node", args, res))
            return
        del s.nodes[nid]
        s.changes.append((("n", level, nid), None, t0, t1, True))
        for key, (lv, frm, to, rel) in list(s.edges.items()):
            if lv == level and nid in (frm, to):
                del s.edges[key]
                s.changes.append((key, None, t0, t1, True))       # cascade: the edge is gone too
        return
    if r < 0.88:
        level = rnd.choice(LEVELS)
        nid = "shared-%s%d" % (level[0], rnd.randrange(SHARED))
        args = {"session_id": sid, "id": nid, "level": level}
        res, t0, t1 = timed(c, "kg_delete_node", args)
        if res.get("isError"):
            if "no node" in res["content"][0]["text"]:
                s.expected_errors += 1            # already deleted by someone
            else:
                s.errors.append(("kg_delete_node", args, res))
            return
        s.changes.append((("n", level, nid), None, t0, t1, True))
        return
    if r < 0.93 and s.edges:
        key = rnd.choice(sorted(s.edges))
        level, frm, to, rel = s.edges[key]
        args = {"session_id": sid, "from": frm, "to": to, "rel": rel, "level": level}
        res, t0, t1 = timed(c, "kg_delete_edge", args)
        if res.get("isError"):
            s.errors.append(("kg_delete_edge", args, res))
            return
        del s.edges[key]
        s.changes.append((key, None, t0, t1, True))
        return
    if r < 0.96:
        res = c.call("kg_read", {"session_id": sid})
    else:
        res = c.call("kg_search", {"query": "shared gist", "session_id": sid})
    if res.get("isError"):
        s.errors.append(("read", None, res))


def do_sync(c, s):
    res, t0, t1 = timed(c, "kg_sync", {"session_id": s.sid})
    if res.get("isError"):
        s.errors.append(("kg_sync", None, res))
        return
    sc = res["structuredContent"]
    rep = {}
    for n in sc["nodes"]:
        assert n["state"] == "active", n
        rep[("n", n["level"], n["id"])] = (n["gist"], tuple(n["notes"]), tuple(n["touches"]))
    for d in sc["deleted_nodes"]:
        rep[("n", d["level"], d["id"])] = None
    for e in sc["edges"]:
        rep[ekey(e["level"], e["from"], e["to"], e["rel"])] = ("notes", tuple(e["notes"]))
    for d in sc["deleted_edges"]:
        rep[ekey(d["level"], d["from"], d["to"], d["rel"])] = None
    s.syncs.append((t0, t1, rep))


def run_session(port, cwd, s, n_ops, started, checkpoint, problems):
    try:
        c = ToolClient(port)
        s.sid = c.call("kg_read", {"cwd": cwd})["structuredContent"]["session_id"]
        started.wait()
        for i in range(n_ops):
            if i == n_ops // 2:
                # Checkpoint: everyone stops writing, then every session syncs.
                checkpoint.wait()
                do_sync(c, s)
                checkpoint.wait()
            do_op(c, s)
            s.ops += 1
    except Exception:  # pragma: no cover - reported by the test
        problems.append("session %d: %s" % (s.k, traceback.format_exc()))
        try:
            checkpoint.abort()
        except Exception:
            pass


def valid_read(writes, value, rs, re):
    """Linearizable register: `value` was the key's current value at some instant of [rs, re].
    writes: (send, ack, value) of every acknowledged write of the key."""
    latest_done_start = max((w[0] for w in writes if w[1] < rs), default=float("-inf"))
    return any(v == value and s < re and a >= latest_done_start for s, a, v in writes)


def test_sixteen_sessions_writing_and_syncing(make_daemon, project):
    t_begin = time.monotonic()
    d = make_daemon(args=["--max-tokens", str(10 ** 6)], env={"KG_SAVE_INTERVAL": "0.5"})
    cwd = os.path.realpath(str(project / "src"))
    rnd = random.Random(SEED)
    sessions = [Session(k, rnd.random()) for k in range(THREADS)]
    per = [TOTAL_OPS // THREADS + (1 if k < TOTAL_OPS % THREADS else 0) for k in range(THREADS)]
    started = threading.Barrier(THREADS + 1)
    checkpoint = threading.Barrier(THREADS)
    problems = []

    def go(s, n):
        run_session(d.port, cwd, s, n, started, checkpoint, problems)

    threads = [threading.Thread(target=go, args=(s, n), daemon=True) for s, n in zip(sessions, per)]
    for t in threads:
        t.start()
    # Every session exists before the first change (run_session waits on `started`).
    started.wait(60)
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a session thread hung"
    assert not problems, problems[0]
    t_run = time.monotonic() - t_begin
    # A final sync per session, after every write.
    c = ToolClient(d.port)
    for s in sessions:
        do_sync(c, s)
    t_end = time.monotonic()

    errors = [e for s in sessions for e in s.errors]
    assert not errors, "unexpected error results: %r" % errors[:5]
    assert sum(s.ops for s in sessions) == TOTAL_OPS

    # ---- the history of every key: (send, ack, value) of each acknowledged write
    history, tracked = {}, {}
    for s in sessions:
        for key, value, t0, t1, track in s.changes:
            history.setdefault(key, []).append((t0, t1, value))
            tracked[key] = tracked.get(key, True) and track
    writers_of = {}
    for s in sessions:
        for key, *_ in s.changes:
            writers_of.setdefault(key, set()).add(s.k)

    # ---- own writes are left out
    for s in sessions:
        for j, (_, _, rep) in enumerate(s.syncs):
            leaked = [k for k in rep if k in s.own_keys and writers_of.get(k) == {s.k}]
            assert not leaked, "session %d's sync #%d reported its own changes: %r" % (s.k, j, leaked[:5])

    # ---- content: every reported value was current while the sync ran
    checked_values = 0
    for s in sessions:
        for j, (rs, re, rep) in enumerate(s.syncs):
            for key, value in rep.items():
                if not tracked.get(key, False):
                    continue       # edges to shared nodes: deleted by cascades nobody records
                assert valid_read(history[key], value, rs, re), (
                    "session %d sync #%d reported %r = %r, which was not its value while the sync ran; "
                    "writes: %r" % (s.k, j, key, value, sorted(history[key])[-6:]))
                checked_values += 1

    # ---- coverage: nothing by another session is missed
    checked_cover = 0
    for s in sessions:
        starts = [x[0] for x in s.syncs]
        seen = {}
        for j, (rs, re, rep) in enumerate(s.syncs):
            for key in rep:
                seen.setdefault(key, []).append((j, re))
        for other in sessions:
            if other is s:
                continue
            for key, value, t0, t1, _ in other.changes:
                k_idx = bisect.bisect_right(starts, t1)      # first sync that began after the ack
                if k_idx >= len(starts):
                    continue
                ok = any(j <= k_idx and re > t0 for j, re in seen.get(key, ()))
                assert ok, ("session %d missed %r (= %r) by session %d, acknowledged at %.4f before its sync #%d "
                            "began at %.4f" % (s.k, key, value, other.k, t1, k_idx, starts[k_idx]))
                checked_cover += 1

    # ---- files: a clean stop, every file parses and holds the final state
    assert d.stop() == 0, "kgd did not exit 0 on SIGTERM"
    root = d.root
    for path in glob.glob(os.path.join(root, "**", "*"), recursive=True):
        if os.path.isdir(path) or path.endswith("kgd.lock"):
            continue
        name = os.path.basename(path)
        assert ".corrupt-" not in name and not name.startswith(".tmp-"), path
        if name.endswith(".journal"):
            assert os.path.getsize(path) == 0, "%s not folded at shutdown" % path
        else:
            with open(path, "rb") as f:
                assert isinstance(json.loads(f.read().decode("utf-8")), dict), path
    user = json.load(open(os.path.join(root, "user.json"), encoding="utf-8"))
    projs = glob.glob(os.path.join(root, "projects", "*", "graph.json"))
    assert len(projs) == 1
    proj = json.load(open(projs[0], encoding="utf-8"))
    files = {"user": user, "project": proj}
    sessions_file = json.load(open(os.path.join(root, "sessions.json"), encoding="utf-8"))
    assert {s.sid for s in sessions} <= set(sessions_file["sessions"])
    final_nodes = {("n", lv, nid): (n["gist"], tuple(n["notes"]), tuple(n["touches"]))
                   for lv, g in files.items() for nid, n in g["nodes"].items()}
    final_edges = {("e", lv, k): ("notes", tuple(e["notes"])) for lv, g in files.items() for k, e in g["edges"].items()}
    # Own nodes and own edges: exactly the last acknowledged value.
    for s in sessions:
        for key in s.own_keys:
            last = max(history[key], key=lambda w: w[1])[2]
            got = final_nodes.get(key) if key[0] == "n" else final_edges.get(key)
            assert got == last, "final %r is %r, the last acknowledged write was %r" % (key, got, last)
    # Shared nodes: a value some write left last (concurrent last writes may land in any order).
    for key, writes in history.items():
        if key[0] == "n" and key[2].startswith("shared-"):
            assert valid_read(writes, final_nodes.get(key), t_end, t_end), (key, final_nodes.get(key))
    # Nothing else exists, and no edge hangs off a deleted node.
    for key in final_nodes:
        assert key in history, "a node nobody wrote: %r" % (key,)
    for lv, g in files.items():
        for k, e in g["edges"].items():
            assert ("e", lv, k) in history, "an edge nobody wrote: %r" % k
            for end in (e["from"], e["to"]):
                assert end in g["nodes"] or end in FILES, "edge %r hangs off a deleted node %r" % (k, end)
    elapsed = time.monotonic() - t_begin
    n_syncs = sum(len(s.syncs) for s in sessions)
    n_changes = sum(len(s.changes) for s in sessions)
    print("concurrency: %d sessions, %d operations (%d acknowledged changes, %d syncs, %d expected errors); "
          "%d sync values and %d coverage pairs checked; run %.1fs, total %.1fs"
          % (THREADS, TOTAL_OPS, n_changes, n_syncs, sum(s.expected_errors for s in sessions),
             checked_values, checked_cover, t_run, elapsed))
    assert elapsed < 90
