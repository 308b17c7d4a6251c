"""Time prompt recall on a seeded 10,000-node graph pair (2,000 user + 8,000 project nodes).

Run from the repository root: python3 bench/recall_bench.py
Rows: building the two recall indexes (once per graph version), prompt_hits alone (the pure
part, indexes cached), and file_hits alone; p50 / p99 over many prompts of realistic length,
some matching nothing (the common case: silence), some matching a few nodes.
"""

import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kg import recall  # noqa: E402

VOCAB = ["websocket", "journal", "compaction", "archive", "session", "token", "budget", "render", "search",
         "index", "graph", "node", "edge", "store", "lock", "fsync", "replay", "frame", "socket", "handler",
         "origin", "host", "guard", "schema", "openapi", "pytest", "fixture", "daemon", "backup", "restore",
         "migration", "cache", "latency", "thread", "queue", "retry", "timeout", "parser", "encoder", "slug",
         "worktree", "commit", "branch", "install", "settings", "hook", "prompt", "recall", "stopword", "idf"]
FILLER = "the a this is we should when how what why fix add please make sure that it works".split()


def seeded_nodes(rng, n, prefix):
    words = VOCAB + ["w%d" % i for i in range(3000)]
    nodes = {}
    for i in range(n):
        nid = "%s-%s-%d" % (prefix, rng.choice(VOCAB), i)
        gist = " ".join(rng.choice(words) for _ in range(12))
        notes = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(rng.randint(0, 3))]
        touches = ["kg/%s.py" % rng.choice(VOCAB)] if rng.random() < 0.3 else []
        nodes[nid] = {"id": nid, "gist": gist, "notes": notes, "touches": touches}
    return nodes


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    rng = random.Random(7)
    user, project = seeded_nodes(rng, 2000, "u"), seeded_nodes(rng, 8000, "p")
    t = time.perf_counter()
    ix = [("user", recall.Index(user, {})), ("project", recall.Index(project, {}))]
    build_ms = (time.perf_counter() - t) * 1000
    prompts = []
    for _ in range(500):
        k = rng.randint(5, 40)
        prompts.append(" ".join(rng.choice(FILLER + VOCAB + ["zz%d" % i for i in range(50)]) for _ in range(k)))
    times, hits = [], 0
    for p in prompts:
        t = time.perf_counter()
        h = recall.prompt_hits(ix, p, exclude={}, limit=5)
        times.append((time.perf_counter() - t) * 1000)
        hits += bool(h)
    ftimes = []
    for _ in range(500):
        t = time.perf_counter()
        recall.file_hits(ix, "/repo/kg/%s.py" % rng.choice(VOCAB), "/repo", limit=3)
        ftimes.append((time.perf_counter() - t) * 1000)
    print("nodes: 10,000 (2,000 user + 8,000 project)")
    print("index build (both graphs):   %.0f ms" % build_ms)
    print("prompt_hits p50 %.2f ms  p99 %.2f ms  mean %.2f ms  (%d of %d prompts recalled something)" % (
        pct(times, 0.5), pct(times, 0.99), statistics.mean(times), hits, len(prompts)))
    print("file_hits   p50 %.3f ms  p99 %.3f ms" % (pct(ftimes, 0.5), pct(ftimes, 0.99)))


if __name__ == "__main__":
    main()
