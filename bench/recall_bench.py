"""Time prompt recall on a seeded 10,000-node graph pair (2,000 user + 8,000 project nodes).

Run from the repository root: python3 bench/recall_bench.py
Words follow a Zipf law over a 20,000-word vocabulary, as text does. Rows:
- building the two recall indexes from nothing (once per daemon start; the SessionStart hook
  starts it on a thread) and rebuilding them after one node changed (after every write or recalled read);
- prompt_hits and file_hits alone (the pure part, indexes cached);
- the whole UserPromptSubmit hook through kg.agents.loop.handler on a real Store (in-process, no HTTP):
  prompts that recall nothing (silence, the common case) and prompts that recall (each recall is a
  read: journal append + fsync, and the next prompt rebuilds the index incrementally).
p50 / p99 over many prompts. Machines here are noisy: read the figures as orders of magnitude.
"""

import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kg.agents import (
    loop,  # noqa: E402
    recall,
)
from kg.memory.store import Settings, Store  # noqa: E402
from kg.travel import team

VOCAB = ["w%d" % i for i in range(20000)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(VOCAB))]
FILLER = "the a this is we should when how what why fix add please make sure that it works".split()


def text(rng, k):
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=k))


def seeded_nodes(rng, n, prefix):
    nodes = {}
    for i in range(n):
        nid = "%s-%s-%d" % (prefix, rng.choice(VOCAB[:2000]), i)
        notes = [text(rng, 30) for _ in range(rng.randint(0, 3))]
        touches = ["kg/m%d.py" % rng.randint(0, 300)] if rng.random() < 0.3 else []
        nodes[nid] = {"id": nid, "gist": text(rng, 12), "notes": notes, "touches": touches}
    return nodes


def prompt(rng):
    return " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 15))) + " " + text(rng, rng.randint(2, 12))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def row(name, xs):
    print("%-44s p50 %7.3f ms  p99 %7.3f ms" % (name, pct(xs, 0.5), pct(xs, 0.99)))


def pure(rng, user, project):
    t = time.perf_counter()
    ix = [("user", recall.Index(user, {})), ("project", recall.Index(project, {}))]
    print("%-44s %7.0f ms" % ("index build from nothing (10,000 nodes)", (time.perf_counter() - t) * 1000))
    times = []
    for k in range(20):
        nid = rng.choice(list(project))
        project[nid] = dict(project[nid], gist=text(rng, 12))
        t = time.perf_counter()
        ix[1] = ("project", recall.Index(project, {}, prev=ix[1][1]))
        times.append((time.perf_counter() - t) * 1000)
    row("index rebuild after one node changed", times)
    times, hits = [], 0
    for _ in range(1000):
        p = prompt(rng)
        t = time.perf_counter()
        h = recall.prompt_hits(ix, p, exclude={}, limit=5)
        times.append((time.perf_counter() - t) * 1000)
        hits += bool(h)
    row("prompt_hits (%d%% of prompts recall)" % (hits // 10), times)
    times = []
    for _ in range(1000):
        t = time.perf_counter()
        recall.file_hits(ix, "/repo/kg/m%d.py" % rng.randint(0, 300), "/repo", limit=3)
        times.append((time.perf_counter() - t) * 1000)
    row("file_hits", times)


def whole_hook(rng, user, project):
    tmp = tempfile.mkdtemp(prefix="kgd-recall-bench-")
    try:
        proj = os.path.join(tmp, "proj")
        os.makedirs(os.path.join(proj, ".git"))
        store = team.install(Store(os.path.join(tmp, "root"), Settings(max_tokens=10 ** 9))).open()
        s = store.start_session(proj)
        with store.lock:
            for level, nodes in (("user", user), ("project", project)):
                g = store.graph(level, s)
                for n in nodes.values():
                    node = dict(n, _created_ts=1.0, _write_ts=1.0, _read_ts=None, _archived=False, _orphaned_ts=None)
                    g.nodes[node["id"]] = node
                g.recount()
        handle = loop.handler(store, env={})
        base = {"session_id": "bench", "transcript_path": "/t", "cwd": proj}
        t = time.perf_counter()
        handle(dict(base, hook_event_name="SessionStart", source="startup"))
        print("%-44s %7.0f ms" % ("SessionStart hook (preload; index on a thread)", (time.perf_counter() - t) * 1000))
        t = time.perf_counter()
        for th in threading.enumerate():
            if th.name == "kgd-recall-index":
                th.join()
        print("%-44s %7.0f ms" % ("  then the index thread finishes within", (time.perf_counter() - t) * 1000))
        silent, spoke = [], []
        for _ in range(400):
            p = prompt(rng)
            t = time.perf_counter()
            out = handle(dict(base, hook_event_name="UserPromptSubmit", prompt=p))
            (spoke if out else silent).append((time.perf_counter() - t) * 1000)
        row("UserPromptSubmit hook, silent (%d)" % len(silent), silent)
        if spoke:
            row("UserPromptSubmit hook, recalled (%d, incl. fsync)" % len(spoke), spoke)
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    rng = random.Random(7)
    user, project = seeded_nodes(rng, 2000, "u"), seeded_nodes(rng, 8000, "p")
    print("nodes: 10,000 (2,000 user + 8,000 project), Zipf words over a 20,000-word vocabulary")
    pure(rng, user, project)
    whole_hook(rng, user, project)


if __name__ == "__main__":
    main()
