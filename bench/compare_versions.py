#!/usr/bin/env python3
"""This checkout against another, alternating runs, one table of ratios (this / other).

    git -C /work/main worktree add /work/wt-base 2e17ca4      # or: git archive REV | tar -x -C DIR
    python3 bench/compare_versions.py --base /work/wt-base [--also DIR] [--rounds 3] [--nodes 10000]

Each round runs the same suite on both checkouts, in alternating order (base first, then this
first), each on a fresh copy of one root written as files before the daemon starts: a user graph
of N/5 nodes, a project graph of N nodes and one of 100 (words from a Zipf law, as text is; a
third of the nodes carry a line of ordinary engineering prose from tests/secrets_corpus.py, so
the secrets gate sees the trigger words real notes hold). Rows (medians over the rounds of each
row's median):

- start-up to the start line on an empty root (and the daemon's CPU time by then), and its
  resident memory 1.5 s later;
- loading the N-node project graph file in a fresh interpreter (kg/disk/durable.py read_graph), CPU time;
- the first kg_read(cwd) of that project through the daemon (load + read);
- kg_put_node (new nodes) into the 100-node project and the N-node project, and their ratio;
- kg_read full, kg_read by id, kg_search on the N-node project;
- POST /api/hooks UserPromptSubmit, and `kgd hook` SessionStart end to end (a fresh process);
- resident memory holding those graphs.
Beside each request row, the daemon's own CPU time per call (its threads' schedstat): a loaded
machine inflates it less than wall time, so its ratio is the steadier one.

The machine is shared and noisy: compare the ratios of one run, not absolute figures across runs.
"""

import argparse
import compileall
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(REPO, "tests")]

from bench import Client, Kgd, rss_kb, timed  # noqa: E402

import secrets_corpus  # noqa: E402

VOCAB = ["w%d" % i for i in range(20000)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(VOCAB))]
PROSE = secrets_corpus.near_misses()


def words(rng, k):
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=k))


def graph_obj(rng, n, prefix, now, meta):
    nodes = {}
    for i in range(n):
        nid = "%s-%s-%d" % (prefix, rng.choice(VOCAB[:3000]), i)
        notes = [words(rng, 25)] + ([rng.choice(PROSE)] if rng.random() < 0.33 else [])
        nodes[nid] = {"id": nid, "gist": words(rng, 12), "notes": notes, "touches": [],
                      "_created_ts": now - 86400 * 30, "_write_ts": now - rng.random() * 86400 * 30}
    return {"nodes": nodes, "edges": {}, "_meta": meta}


def write_template(tmp, n):
    """root/ with user.json and two project graphs; returns (root, big project dir, small one, big graph file)."""
    rng = random.Random(7)
    now = time.time()
    root = os.path.join(tmp, "template")
    dirs = {}
    for name, size in (("big", n), ("small", 100)):
        proj = os.path.join(tmp, "proj-" + name)
        os.makedirs(os.path.join(proj, ".git"))
        dirs[name] = proj
        os.makedirs(os.path.join(root, "projects", "proj-" + name), mode=0o700)
        with open(os.path.join(root, "projects", "proj-" + name, "graph.json"), "w") as f:
            json.dump(graph_obj(rng, size, name[0], now, {"level": "project", "project_path": proj}), f)
    with open(os.path.join(root, "user.json"), "w") as f:
        json.dump(graph_obj(rng, max(1, n // 5), "u", now, {}), f)
    return root, dirs["big"], dirs["small"], os.path.join(root, "projects", "proj-big", "graph.json")


LOAD = ("import sys,time,importlib.util; sys.path.insert(0, sys.argv[1]); "  # kg/disk/durable.py before the packages
        "m = 'kg.disk.durable' if importlib.util.find_spec('kg.disk') else 'kg.durable'; "
        "read_graph = importlib.import_module(m).read_graph; "
        "t=time.process_time(); g,_=read_graph(sys.argv[2], 'project', sys.argv[3]); "
        "print(time.process_time()-t, len(g.nodes))")


def load_once(tree, path, project):
    out = subprocess.run([sys.executable, "-c", LOAD, tree, path, project], check=True,
                         stdout=subprocess.PIPE).stdout.decode().split()
    return float(out[0])


def cpu_s(pid):
    """CPU time the daemon's live threads have run (ns resolution, /proc/PID/task/*/schedstat):
    less inflated by a loaded machine than wall time. Linux only."""
    total = 0
    base = "/proc/%d/task" % pid
    for tid in os.listdir(base):
        try:
            with open(os.path.join(base, tid, "schedstat")) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def start_once(tree):
    """(seconds from exec to the start line, the daemon's CPU seconds by then, its VmRSS in KiB
    1.5 s later) on an empty root."""
    root = tempfile.mkdtemp(prefix="kgd-start-")
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, os.path.join(tree, "kgd.py"), "--port", "0", "--root", root],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        p.stderr.readline()
        took, cpu = time.perf_counter() - t0, cpu_s(p.pid)
        time.sleep(1.5)
        rss = rss_kb(p.pid)
        p.terminate()
        p.wait(15)
        return took, cpu, rss
    finally:
        shutil.rmtree(root, ignore_errors=True)


def hooks_post(conn, body):
    conn.request("POST", "/api/hooks", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.read()


def suite(tree, template, big, small, big_file, n, puts, out):
    """One checkout, one fresh root: every row's median appended to out[row]."""
    def add(row, seconds):
        out.setdefault(row, []).append(seconds * 1000.0)

    def batch(row, fn, n):
        """Median wall time of n calls (one row), and the daemon's CPU time per call (another)."""
        c0 = cpu_s(k.proc.pid)
        add(row, statistics.median(timed(fn, n)))
        add("  daemon CPU per call: " + row.split(" (")[0], (cpu_s(k.proc.pid) - c0) / n)

    took, cpu, rss = start_once(tree)
    add("start-up to start line, empty root (ms)", took)
    add("  daemon CPU to its start line", cpu)
    out.setdefault("idle RSS, empty root (MiB)", []).append(rss / 1024.0)
    add("load %d-node graph file, fresh interpreter, CPU (ms)" % n, load_once(tree, big_file, big))

    work = tempfile.mkdtemp(prefix="kgd-cmp-")
    try:
        root = os.path.join(work, "root")
        shutil.copytree(template, root)
        os.environ.pop("KG_GRACE_PERIOD_DAYS", None)
        k = Kgd(root, repo=tree)
        try:
            c = Client(k.port)
            t0, c0 = time.perf_counter(), cpu_s(k.proc.pid)
            sid = c.session(big)
            add("first kg_read(cwd) of the %d-node project (ms)" % n, time.perf_counter() - t0)
            add("  daemon CPU: first kg_read(cwd)", cpu_s(k.proc.pid) - c0)
            cs = Client(k.port)
            sid_small = cs.session(small)

            # Hooks first, while both graphs are as written.
            conn = http.client.HTTPConnection("127.0.0.1", k.port, timeout=60)
            base = {"session_id": "cmp-hooks", "transcript_path": "/tmp/t.jsonl", "cwd": big}
            hooks_post(conn, dict(base, hook_event_name="SessionStart", source="startup"))
            time.sleep(3.0)  # a big graph's recall index is built on a thread after session start
            rng = random.Random(11)
            prompts = ["please look at %s and %s in the code" % (words(rng, 2), rng.choice(VOCAB[:3000]))
                       for _ in range(150)]
            batch("POST /api/hooks UserPromptSubmit (ms)", lambda i: hooks_post(
                conn, dict(base, hook_event_name="UserPromptSubmit", prompt=prompts[i])), len(prompts))
            conn.close()
            hook = []
            payload = json.dumps(dict(base, session_id="cmp-hook-cmd", hook_event_name="SessionStart",
                                      source="startup")).encode()
            for _ in range(5):
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-S", os.path.join(tree, "kgd.py"), "hook", "--port",
                                    str(k.port), "--root", root], input=payload, stdout=subprocess.PIPE, timeout=30)
                hook.append(time.perf_counter() - t0)
                assert r.returncode == 0 and b"Session: " in r.stdout, r.stdout[:200]
            add("kgd hook SessionStart end to end (ms)", statistics.median(hook))

            def put(cl, s, prefix):
                return lambda i: cl.tool("kg_put_node", {"session_id": s, "level": "project",
                                                         "id": "%s-%d" % (prefix, i), "gist": "probe %d" % i,
                                                         "notes": ["the retry path uses backoff %d" % i]})
            timed(put(cs, sid_small, "warm"), 20)
            batch("kg_put_node into 100-node project (ms)", put(cs, sid_small, "p"), puts)
            batch("kg_put_node into %d-node project (ms)" % n, put(c, sid, "p"), puts)
            big_put = out["kg_put_node into %d-node project (ms)" % n]
            small_put = out["kg_put_node into 100-node project (ms)"]
            out.setdefault("  put cost ratio %d / 100 nodes (x)" % n, []).append(big_put[-1] / small_put[-1])

            batch("kg_read full, %d-node project (ms)" % n, lambda i: c.tool("kg_read", {"session_id": sid}), 30)
            with open(big_file) as f:
                ids = sorted(json.load(f)["nodes"])[::97]
            batch("kg_read by id (ms)", lambda i: c.tool("kg_read", {"session_id": sid, "id": ids[i % len(ids)]}), 100)
            qs = ["w12 w7", "w2999", "w40 w41 w42", "retry backoff", "w100"]
            batch("kg_search, %d-node project (ms)" % n,
                  lambda i: c.tool("kg_search", {"session_id": sid, "query": qs[i % len(qs)]}), 50)
            time.sleep(1.0)
            out.setdefault("RSS holding the graphs (MiB)", []).append(rss_kb(k.proc.pid) / 1024.0)
        finally:
            k.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other checkout (holding kgd.py and kg/)")
    ap.add_argument("--also", action="append", default=[], metavar="DIR",
                    help="a further checkout, measured in the same rounds (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--puts", type=int, default=200)
    a = ap.parse_args()
    trees = [("base", os.path.abspath(a.base))] + [
        (os.path.basename(os.path.abspath(d)), os.path.abspath(d)) for d in a.also] + [("this", REPO)]
    for _, tree in trees:
        compileall.compile_dir(os.path.join(tree, "kg"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="kgd-cmp-template-")
    res = {name: {} for name, _ in trees}
    try:
        template, big, small, big_file = write_template(tmp, a.nodes)
        for r in range(a.rounds):
            for name, tree in (trees if r % 2 == 0 else trees[::-1]):
                t0 = time.perf_counter()
                suite(tree, template, big, small, big_file, a.nodes, a.puts, res[name])
                print("round %d %s: %.0f s" % (r + 1, name, time.perf_counter() - t0), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n%s; %d rounds alternating; load average %.1f\n"
          % (", ".join("%s = %s" % t for t in trees), a.rounds, os.getloadavg()[0]))
    others = [name for name, _ in trees[1:]]
    print("| measure | base | %s | %s |" % (" | ".join(others), " | ".join("%s / base" % o for o in others)))
    print("|---|---:|%s" % ("---:|" * (2 * len(others))))
    for row in res["base"]:
        b = statistics.median(res["base"][row])
        vals = [statistics.median(res[o][row]) for o in others]
        print("| %s | %.2f | %s | %s |" % (row.strip(), b, " | ".join("%.2f" % v for v in vals),
                                          " | ".join("%.2f" % (v / b) if b else "-" for v in vals)))


if __name__ == "__main__":
    main()
