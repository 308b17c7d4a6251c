#!/usr/bin/env python3
"""The personal remote (`kgd sync --remote`): what a sync costs.

    python3 bench/remote_bench.py            # 10,000 nodes, 1,000 puts, 600 calls per latency kind
    python3 bench/remote_bench.py --quick    # 2,000 nodes, 200 puts, 160 calls

1. One sync round on a user graph of N nodes with a handful of changes (a real daemon, a bare
   remote in a temp folder; POST /api/remote waits for the round): the first round (everything
   exported), then rounds after 5 changed nodes, median of several.
2. A round that brings another machine's 5 changed nodes (two stores in process, one remote):
   its time and the daemon's CPU, the pickup into memory included.
3. The sync repository's size after P puts: in-process (the store, the bridge and the git round
   of the daemon, without HTTP), a local commit after every put (the worst case: the daemon
   commits once writes pause) or every 10, a full round every 50 puts (with the daemon's
   periodic `git gc --auto`); `.git` of ROOT/sync and the bare remote, before and after `git gc`.
4. Tool-call latency (kg_put_node over MCP on one keep-alive connection, 5 ms apart) while idle,
   while sync rounds run back to back in another thread (each exporting the puts made
   meanwhile), and, as a control, while another program does the same git work with no kgd
   code in it (rewrite 5 lines of a copy of the 3 MB nodes.jsonl with fsync, git add, commit,
   push to its own bare remote, at git's nice 10, back to back): what git itself costs this
   machine. The three kinds of block alternate eight times; p50 / p95 and ratios, same run.
   On a shared machine the ratio moves with the load: the round's CPU time (1.) is the steadier figure.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import REPO, Client, Kgd  # noqa: E402

sys.path.insert(0, REPO)
from kg.memory.store import Settings, Store  # noqa: E402
from kg.travel import team
from kg.travel.remote_bridge import Bridge  # noqa: E402
from kg.travel.remote_repo import SyncRepo, write_config  # noqa: E402


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


def user_graph(n, now):
    nodes = {}
    for i in range(n):
        nid = "node-%05d" % i
        nodes[nid] = {"id": nid, "gist": "insight %d about the build, the tests and the deploy" % i,
                      "notes": ["why: measured on the bench machine %d" % i, "see src/mod%d.py" % (i % 97)],
                      "touches": ["src/mod%d.py" % (i % 97)], "_created_ts": now - 86400, "_write_ts": now - 86400,
                      "_read_ts": None}
    return {"nodes": nodes, "edges": {}, "_meta": {"level": "user"}}


def post_sync(port, wait=300):
    c = Client(port)
    out = c.post("/api/remote", {"wait": wait})
    c.conn.close()
    return out


def synced_root(tmp, name, n):
    """ROOT with a user graph of n nodes and `kgd sync --remote` set to a fresh bare repository:
    (root, remote)."""
    root = os.path.join(tmp, name + "-root")
    os.makedirs(root, mode=0o700)
    with open(os.path.join(root, "user.json"), "w") as f:
        json.dump(user_graph(n, time.time()), f)
    remote = os.path.join(tmp, name + "-remote.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    write_config(root, {"remote": remote, "enabled": True})
    return root, remote


def round_figures(tmp, n, rounds=5):
    root, remote = synced_root(tmp, "round", n)
    k = Kgd(root)
    try:
        c = Client(k.port)
        sid = c.session(tmp)
        t = time.perf_counter()
        first = post_sync(k.port)  # the start-up round may be running: this waits for a fresh one
        first_s = time.perf_counter() - t
        times, cpu = [], []
        for r in range(rounds):
            for j in range(5):
                c.tool("kg_put_node", {"session_id": sid, "level": "user", "id": "node-%05d" % (r * 37 + j * 11),
                                       "gist": "changed in round %d" % r})
            t = time.perf_counter()
            out = post_sync(k.port)
            times.append(time.perf_counter() - t)
            assert out["completed"] and not out["failing"], out
            cpu.append(out["last_round"]["cpu_seconds"])
        idle = []
        for _ in range(3):
            t = time.perf_counter()
            post_sync(k.port)
            idle.append(time.perf_counter() - t)
        c.conn.close()
    finally:
        k.stop()
    return {"first_round_s": first_s, "first_ok": first.get("completed"), "round_5_changes_s": statistics.median(times),
            "rounds": times, "round_cpu_s": statistics.median(cpu), "round_nothing_changed_s": statistics.median(idle),
            "sync_git_bytes": du(os.path.join(root, "sync", ".git")),
            "sync_files_bytes": du(os.path.join(root, "sync")) - du(os.path.join(root, "sync", ".git"))}


def pickup_figures(tmp, n, rounds=5):
    """Two machines in process on one bare remote, a user graph of n nodes: after machine A
    changed 5 nodes and synced, machine B's round (fetch, merge, the pickup into memory): its
    wall time and its thread's CPU time (git apart), median of `rounds`."""
    remote = os.path.join(tmp, "pickup-remote.git")
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    machines = []
    for name in ("a", "b"):
        root = os.path.join(tmp, "pickup-" + name)
        os.makedirs(root, mode=0o700)
        if name == "a":
            with open(os.path.join(root, "user.json"), "w") as f:
                json.dump(user_graph(n, time.time()), f)
        store = team.install(Store(root, Settings(max_tokens=10 ** 7))).open()
        folder = os.path.join(root, "sync")
        bridge = Bridge(store, folder)
        machines.append((store, SyncRepo(folder, remote), bridge))

    def sync(m):
        return m[1].round(export=lambda: m[2].export(full=True), pickup=m[2].pickup)
    try:
        a, b = machines
        sync(a)
        sync(b)  # b takes all of a's graph
        walls, cpus = [], []
        for r in range(rounds):
            for j in range(5):
                a[0].put_node(None, "user", "node-%05d" % (r * 37 + j * 11), "changed on a in round %d" % r)
            sync(a)
            t, c = time.perf_counter(), time.thread_time()
            out = sync(b)
            walls.append(time.perf_counter() - t)
            cpus.append(time.thread_time() - c)
            assert out["changed"], out
        assert b[0].graph("user").nodes["node-00011"]["gist"].startswith("changed on a")
    finally:
        for m in machines:
            m[0].close()
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}


def size_figures(tmp, puts, every):
    """P puts, a local commit every `every` puts, a round (pull, push, and the daemon's periodic
    `git gc --auto`) every 50 puts."""
    remote = os.path.join(tmp, "size-remote-%d.git" % every)
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    root = os.path.join(tmp, "size-root-%d" % every)
    store = team.install(Store(root, Settings(max_tokens=10 ** 7))).open()
    try:
        folder = os.path.join(root, "sync")
        bridge = Bridge(store, folder)
        repo = SyncRepo(folder, remote)
        repo.ensure()
        t = time.perf_counter()
        for i in range(puts):
            store.put_node(None, "user", "put-%04d" % i, "insight number %d, one line like an agent writes" % i,
                           ["a note that says why, about eighty characters long, number %d" % i])
            if i % 50 == 49:
                repo.round(export=lambda: bridge.export(full=True), pickup=bridge.pickup)
            elif i % every == every - 1:
                bridge.export()
                repo.commit()
        repo.round(export=lambda: bridge.export(full=True), pickup=bridge.pickup)
        elapsed = time.perf_counter() - t
    finally:
        store.close()
    out = {"puts": puts, "every": every, "seconds": elapsed,
           "commits": int(subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=folder, capture_output=True,
                                         text=True).stdout),
           "local_git_bytes": du(os.path.join(folder, ".git")), "remote_bytes": du(remote)}
    subprocess.run(["git", "gc", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "gc", "-q"], cwd=remote, check=True)
    out["local_git_bytes_after_gc"] = du(os.path.join(folder, ".git"))
    out["remote_bytes_after_gc"] = du(remote)
    out["nodes_file_bytes"] = os.path.getsize(os.path.join(folder, "user", "nodes.jsonl"))
    return out


GIT_ALONE = r"""
import os, random, subprocess, sys
folder = sys.argv[1]
path = os.path.join(folder, "user", "nodes.jsonl")
git = ["nice", "-n", "10", "git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
while True:
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for _ in range(5):
        i = random.randrange(len(lines) - 1)
        lines[i] = lines[i][:-1] + b',"x":%d}' % random.randrange(10 ** 9) if lines[i].endswith(b"}") else lines[i]
    with open(path + ".tmp", "wb") as f:
        f.write(b"\n".join(lines))
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    for args in (["add", "-A"], ["commit", "-q", "-m", "r"], ["push", "-q", "origin", "HEAD:main"]):
        subprocess.run(git + args, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


def git_alone(tmp, remote):
    """A clone of the sync repository pushing to its own bare remote: the control's folder."""
    folder = os.path.join(tmp, "control")
    subprocess.run(["git", "clone", "-q", "-b", "main", remote, folder], check=True)
    subprocess.run(["git", "init", "-q", "--bare", folder + "-remote.git"], check=True)
    subprocess.run(["git", "remote", "set-url", "origin", folder + "-remote.git"], cwd=folder, check=True)
    return folder


def latency_figures(tmp, n, calls):
    root, remote = synced_root(tmp, "lat", n)
    k = Kgd(root)
    try:
        post_sync(k.port)
        c = Client(k.port)
        sid = c.session(tmp)

        def run(tag, n):
            out = []
            for i in range(n):
                t = time.perf_counter()
                c.tool("kg_put_node", {"session_id": sid, "level": "user", "id": "lat-%s-%d" % (tag, i),
                                       "gist": "latency probe %d" % i})
                out.append(time.perf_counter() - t)
                time.sleep(0.005)  # an agent's pace, so the calls spread over many rounds
            return out
        run("warm", 20)
        control = git_alone(tmp, remote)
        idle, busy, alone, rounds = [], [], [], [0]
        for block in range(8):  # the three kinds of block alternate: the machine's noise hits all
            idle.extend(run("idle%d" % block, calls // 8))
            stop = threading.Event()

            def syncing():
                while not stop.is_set():
                    post_sync(k.port)
                    rounds[0] += 1
            th = threading.Thread(target=syncing)
            th.start()
            busy.extend(run("busy%d" % block, calls // 8))
            stop.set()
            th.join(300)
            other = subprocess.Popen([sys.executable, "-c", GIT_ALONE, control], start_new_session=True)
            try:
                alone.extend(run("alone%d" % block, calls // 8))
            finally:
                os.killpg(other.pid, 9)
                other.wait()
        c.conn.close()
    finally:
        k.stop()

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000

    return {"calls": calls, "rounds_during": rounds[0], "idle_p50_ms": pct(idle, 0.5), "idle_p95_ms": pct(idle, 0.95),
            "sync_p50_ms": pct(busy, 0.5), "sync_p95_ms": pct(busy, 0.95),
            "alone_p50_ms": pct(alone, 0.5), "alone_p95_ms": pct(alone, 0.95),
            "ratio_p50": pct(busy, 0.5) / pct(idle, 0.5), "ratio_p95": pct(busy, 0.95) / pct(idle, 0.95),
            "alone_ratio_p50": pct(alone, 0.5) / pct(idle, 0.5), "alone_ratio_p95": pct(alone, 0.95) / pct(idle, 0.95)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--puts", type=int)
    ap.add_argument("--calls", type=int)
    args = ap.parse_args()
    n = args.nodes or (2000 if args.quick else 10000)
    puts = args.puts or (200 if args.quick else 1000)
    calls = args.calls or (160 if args.quick else 600)
    os.environ["KG_SYNC_INTERVAL"] = "3600"  # rounds only when the bench asks
    tmp = tempfile.mkdtemp(prefix="kgd-remote-bench-")
    try:
        r = round_figures(tmp, n)
        print("one sync round, user graph of %d nodes:" % n)
        print("  first round (all exported, pushed): %.2f s" % r["first_round_s"])
        print("  round after 5 changed nodes: %.3f s median (%s)" % (
            r["round_5_changes_s"], ", ".join("%.3f" % x for x in r["rounds"])))
        print("  the daemon's own CPU time in such a round (the worker thread; git runs apart): %.3f s median"
              % r["round_cpu_s"])
        print("  round with nothing changed: %.3f s" % r["round_nothing_changed_s"])
        print("  ROOT/sync files %.1f MB, its .git %.1f MB" % (r["sync_files_bytes"] / 1e6, r["sync_git_bytes"] / 1e6))
        p = pickup_figures(tmp, n)
        print("a round that brings another machine's 5 changes into a %d-node user graph: %.3f s, "
              "the daemon's own CPU %.3f s (median of 5)" % (n, p["wall_s"], p["cpu_s"]))
        for every in (1, 10):
            s = size_figures(tmp, puts, every)
            print("sync repository after %d puts, a commit every %d put(s) and a round every 50 (%d commits; %.1f s):"
                  % (puts, every, s["commits"], s["seconds"]))
            print("  ROOT/sync/.git %.2f MB (after git gc %.2f MB); the bare remote %.2f MB (after gc %.2f MB); "
                  "nodes.jsonl %.0f KB" % (s["local_git_bytes"] / 1e6, s["local_git_bytes_after_gc"] / 1e6,
                                           s["remote_bytes"] / 1e6, s["remote_bytes_after_gc"] / 1e6,
                                           s["nodes_file_bytes"] / 1e3))
        lat = latency_figures(tmp, n, calls)
        print("kg_put_node latency, %d calls each, user graph of %d nodes:" % (calls, n))
        print("  idle:          p50 %.2f ms, p95 %.2f ms" % (lat["idle_p50_ms"], lat["idle_p95_ms"]))
        print("  while syncing: p50 %.2f ms, p95 %.2f ms (%d rounds ran meanwhile)" % (
            lat["sync_p50_ms"], lat["sync_p95_ms"], lat["rounds_during"]))
        print("  while git alone does the same work (no kgd code): p50 %.2f ms, p95 %.2f ms" % (
            lat["alone_p50_ms"], lat["alone_p95_ms"]))
        print("  ratio to idle: syncing p50 x%.2f, p95 x%.2f; git alone p50 x%.2f, p95 x%.2f "
              "(load average %.1f on %d CPUs)" % (lat["ratio_p50"], lat["ratio_p95"], lat["alone_ratio_p50"],
                                                  lat["alone_ratio_p95"], os.getloadavg()[0], os.cpu_count() or 1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
