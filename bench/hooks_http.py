"""The hooks as Claude Code calls them, against a real daemon process: what a hook adds to each
prompt's latency.

Run from the repository root: python3 bench/hooks_http.py [--nodes 10000] [--prompts 300]
A project graph of N nodes (and a user graph of N/5) is written as files before the daemon
starts (words drawn from a Zipf law over 20,000 words, as text is). Rows:
- POST /api/hooks UserPromptSubmit over one keep-alive connection: p50 / p99 (most prompts recall
  nothing: silence is the common case; those that recall also pay the read's fsync);
- `kgd hook` for SessionStart end to end (a fresh `python3 -S kgd.py hook` process: interpreter
  start, forwarding, the preload, printing), on the big graph and on a small one (200 nodes);
- bare `python3 -S -c pass` in the same run, for scale.
Machines here are noisy: compare rows of one run, not absolute figures across runs.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")
VOCAB = ["w%d" % i for i in range(20000)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(VOCAB))]


def words(rng, k):
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=k))


def graph(rng, n, prefix, now):
    nodes = {}
    for i in range(n):
        nid = "%s-%s-%d" % (prefix, rng.choice(VOCAB[:3000]), i)
        nodes[nid] = {"id": nid, "gist": words(rng, 12), "notes": [words(rng, 25)], "touches": [],
                      "_created_ts": now - 86400 * 30, "_write_ts": now - rng.random() * 86400 * 30}
    return {"nodes": nodes, "edges": {}, "_meta": {}}


def write_root(root, project, n, seed=7):
    rng = random.Random(seed)
    now = time.time()
    os.makedirs(os.path.join(root, "projects", "proj"), mode=0o700)
    g = graph(rng, n, "p", now)
    g["_meta"] = {"level": "project", "project_path": project}
    with open(os.path.join(root, "projects", "proj", "graph.json"), "w") as f:
        json.dump(g, f)
    with open(os.path.join(root, "user.json"), "w") as f:
        json.dump(graph(rng, max(1, n // 5), "u", now), f)
    return rng


def start(root):
    p = subprocess.Popen([sys.executable, KGD, "--port", "0", "--root", root, "--log-level", "WARNING"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = p.stderr.readline().decode()
    port = int(re.search(r":(\d+)/", line).group(1))
    return p, port


def post(conn, body):
    conn.request("POST", "/api/hooks", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def hook_process(port, root, payload, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-S", KGD, "hook", "--port", str(port), "--root", root],
                           input=json.dumps(payload).encode(), stdout=subprocess.PIPE, timeout=10)
        times.append((time.perf_counter() - t0) * 1000)
        assert r.returncode == 0 and b"Session: " in r.stdout, r.stdout[:200]
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--prompts", type=int, default=300)
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kgd-hooks-bench-")
    rows = []
    try:
        for n in (a.nodes, 200):
            project = os.path.join(tmp, "proj-%d" % n)
            os.makedirs(os.path.join(project, ".git"))
            root = os.path.join(tmp, "root-%d" % n)
            rng = write_root(root, project, n)
            proc, port = start(root)
            try:
                base = {"session_id": "bench-%d" % n, "transcript_path": "/tmp/t.jsonl", "cwd": project}
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                post(conn, dict(base, hook_event_name="SessionStart", source="startup"))
                time.sleep(3.0)  # the big graph's word index is built on a thread after session start
                if n == a.nodes:
                    lat, said = [], 0
                    for i in range(a.prompts):
                        prompt = "please look at %s and %s in the code" % (words(rng, 2), rng.choice(VOCAB[:3000]))
                        t0 = time.perf_counter()
                        status, body = post(conn, dict(base, hook_event_name="UserPromptSubmit", prompt=prompt))
                        lat.append((time.perf_counter() - t0) * 1000)
                        said += bool(body)
                    rows.append(("POST /api/hooks UserPromptSubmit, %d nodes (%d of %d prompts recalled)"
                                 % (n + n // 5, said, a.prompts), pct(lat, 0.5), pct(lat, 0.99)))
                conn.close()
                t = hook_process(port, root, dict(base, hook_event_name="SessionStart", source="startup"), a.runs)
                rows.append(("kgd hook SessionStart end to end, %d nodes" % (n + n // 5), statistics.median(t),
                             pct(t, 0.99)))
            finally:
                proc.terminate()
                proc.wait(15)
        bare = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
            bare.append((time.perf_counter() - t0) * 1000)
        rows.append(("python3 -S -c pass (interpreter start, for scale)", statistics.median(bare), pct(bare, 0.99)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%-78s %9s %9s" % ("row", "p50 ms", "p99 ms"))
    for name, p50, p99 in rows:
        print("%-78s %9.1f %9.1f" % (name, p50, p99))


if __name__ == "__main__":
    main()
