#!/usr/bin/env python3
"""What kg_progress's sync (kg/travel/remote_progress.py) adds to a personal-remote pass.

    python3 bench/remote_progress_bench.py            # 1,000 tasks of ~1 KB, 200 reps
    python3 bench/remote_progress_bench.py --tasks 100

In process (a store and its bridge over a temp root, no git): the CPU time of one
`Bridge.export(full=False)` on a user graph of 2,000 nodes with 5 changed nodes, (a) with no task,
(b) with T tasks none of which changed, (c) with T tasks of which one changed; the median over the
reps, the three kinds interleaved, and the ratios to (a), same run; and of that, the time spent in
the progress pass itself (the rest of the difference is the bigger graph file the pass folds:
progress lives in the graph's _meta).

One run (2 cores, load ~4, 100 reps, 1,000 tasks of ~1 KB, 2,000 nodes): no task 16.9 ms; 1,000
tasks none changed 26.2 ms (x1.55), of which the progress pass 0.23 ms; one changed 32.5 ms
(x1.93), of which the progress pass 5.4 ms (a 1 MB progress.jsonl rendered from cached lines).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from kg.memory.store import Settings, Store  # noqa: E402
from kg.travel.remote_bridge import Bridge  # noqa: E402


def timed(fn, into):
    def run(*a, **k):
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            into.append(time.thread_time() - t0)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kg-progress-bench-")
    try:
        stores, spent = {}, {}
        for kind in ("none", "still", "one"):
            s = Store(os.path.join(tmp, kind), Settings(max_tokens=10 ** 7, fold_delay=3600)).open()
            for i in range(args.nodes):
                s.put_node(None, "user", "n%d" % i, "node %d of the bench graph" % i, ["a note"])
            if kind != "none":
                for t in range(args.tasks):
                    s.progress(None, "task-%d" % t, {"step": t, "notes": ["x" * 60] * 15}, "user", has_state=True)
            b = Bridge(s, os.path.join(tmp, kind, "sync"))
            b.export(full=True)
            stores[kind] = (s, b)
            b.progress.sync = timed(b.progress.sync, spent.setdefault(kind, []))
        times = {k: [] for k in stores}
        for rep in range(args.reps):
            for kind, (s, b) in stores.items():
                for j in range(5):
                    s.put_node(None, "user", "n%d" % ((rep * 5 + j) % args.nodes), "changed %d" % rep)
                if kind == "one":
                    s.progress(None, "task-%d" % (rep % args.tasks), {"step": rep}, "user", has_state=True)
                del spent[kind][:]
                t0 = time.thread_time()
                b.export(full=False)
                times[kind].append((time.thread_time() - t0, sum(spent[kind])))
        med = {k: statistics.median(t for t, _ in v) * 1000 for k, v in times.items()}
        own = {k: statistics.median(p for _, p in v) * 1000 for k, v in times.items()}
        print("Bridge.export after 5 changed nodes, user graph of %d nodes, median CPU of %d reps:"
              % (args.nodes, args.reps))
        print("  no task:                 %6.2f ms (progress.jsonl's part %.2f ms)" % (med["none"], own["none"]))
        for kind, what in (("still", "none changed"), ("one", "one changed")):
            print("  %d tasks, %s: %6.2f ms (x%.2f; progress.jsonl's part %.2f ms)"
                  % (args.tasks, what, med[kind], med[kind] / med["none"], own[kind]))
        for s, _ in stores.values():
            s.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
