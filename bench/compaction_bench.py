"""Time one compact() call on seeded graphs of 1,000 / 3,000 / 10,000 nodes, 3 edges per node.

Run from the repository root: python3 bench/compaction_bench.py
The budget (5 tokens per node) is far below each graph's estimate, so every run archives (pass 1),
tries resurrection (pass 1b, a tenth of the nodes start archived), orphans (pass 2) and checks
deletion (a few nodes start long orphaned).
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kg.core.compaction import DAY, Settings, compact  # noqa: E402
from kg.core.model import edge_key, estimate_tokens  # noqa: E402

NOW = 1000 * DAY


def build(n, seed):
    rnd = random.Random(seed)
    nodes = {}
    for i in range(n):
        nid = "n%05d" % i
        created = NOW - rnd.uniform(0, 1000) * DAY
        node = {"id": nid, "gist": "g" * rnd.randint(10, 120), "notes": ["x" * rnd.randint(0, 200)],
                "touches": [], "_created_ts": created,
                "_write_ts": created + rnd.uniform(0, NOW - created),
                "_read_ts": rnd.choice([None, NOW - rnd.uniform(0, 300) * DAY]),
                "_archived": False, "_orphaned_ts": None}
        r = rnd.random()
        if r < 0.10:
            node["_archived"] = True
        elif r < 0.12:
            node["_archived"] = True
            node["_orphaned_ts"] = NOW - rnd.uniform(0, 500) * DAY
            node["_write_ts"] = min(node["_write_ts"], node["_orphaned_ts"])
            node["_read_ts"] = None
        nodes[nid] = node
    ids = list(nodes)
    edges = {}
    while len(edges) < 3 * n:
        f = rnd.choice(ids)
        t = rnd.choice(ids) if rnd.random() < 0.98 else "src/file%d.py" % rnd.randint(0, 50)
        rel = rnd.choice(["uses", "refines", "contradicts"])
        edges[edge_key(f, t, rel)] = {"from": f, "to": t, "rel": rel, "notes": []}
    return nodes, edges


def main(repeats=5):
    for n in (1000, 3000, 10000):
        settings = Settings(max_tokens=5 * n)
        times = []
        for _ in range(repeats):
            nodes, edges = build(n, seed=n)      # compact() mutates: a fresh copy per run
            before = estimate_tokens(nodes, edges)
            t0 = time.perf_counter()
            res = compact(nodes, edges, NOW, settings)
            times.append(time.perf_counter() - t0)
        times.sort()
        print("%6d nodes %6d edges  estimate %7d -> %5d  archived %5d restored %4d orphaned %5d "
              "deleted %4d  median %6.1f ms  best %6.1f ms  (%d runs)"
              % (n, len(edges), before, res.estimate_after, len(res.archived), len(res.restored),
                 len(res.orphaned), len(res.deleted), times[len(times) // 2] * 1000, times[0] * 1000,
                 repeats))


if __name__ == "__main__":
    main()
