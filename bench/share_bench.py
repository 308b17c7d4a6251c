#!/usr/bin/env python3
"""Memory that lives with git (contract section 9, "Living with git"): what sharing a project
through its repository's `.kg/` costs, in the layout kgd writes (kg/travel/team_folder.py: the
committed `nodes.jsonl` / `edges.jsonl`, and each clone's knowledge not yet committed in its own
untracked `.kg/changes/CLONE-N.*.jsonl`).

    python3 bench/share_bench.py            # 10,000 puts, a pull changing 1,000 of 10,000 nodes
    python3 bench/share_bench.py --quick    # a smaller team's graph, under a minute
    python3 bench/share_bench.py --tree DIR # the same with another checkout's kgd (before / after a fix)

One run, real everything: a bare remote, two clones (alice, bob), one real daemon per person
(`kgd --port 0`, own storage root), agents writing over HTTP (MCP), people using real git:
1. alice shares the project and her agent makes `--nodes` puts (one new node each), committed
   and pushed every `--commit-every`; `.kg/` bytes and files then, and after `kgd fold` (the
   committed changes files folded into the base files) and its commit: figure 5.
2. bob clones it. His daemon holds it twice: shared (`app`) and, in a second clone whose sharing
   is off, private (`private`). His agent puts `--puts` nodes to each, alternated (half new,
   half changed), one keep-alive connection: median round trips and their ratio: figure 1.
3. `git status` in bob's clone once those `--puts` changes are written under `.kg/changes/`
   (not committed), and clean after his commit: figure 2 (also: no tracked file modified).
4. alice's agent changes `--changed` of the nodes; she commits and pushes; bob runs `git pull`
   while his session is open: from the pull's start until his session's kg_sync reports every
   one of them (the daemon's beat looks every 0.5 s), `--rounds` times: figure 3.
5. `kgd diff A..B` over that pull (as a person or CI runs it: `python3 kgd.py diff A..B`, no
   daemon), text and --json: figure 4.
Beside the wall times of 3 and 4, the CPU spent (bob's daemon's, kgd diff's): on a loaded
machine the wall time is the CPU times how many others want the cores, and the CPU is the part
a change to kgd moves.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import REPO, Client, Kgd  # noqa: E402

TARGETS = {"ratio": 1.2, "status_ms": 50.0, "pickup_s": 1.0, "diff_s": 1.0}


# ---------------------------------------------------------------- git and files

def bench_env(home):
    """The environment of every child (git, kgd): the host's PATH and locale only, its own HOME,
    no system git config, never a prompt; none of the host's KG_* settings."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR") or k.startswith("LC_")}
    env.update(HOME=home, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    return env


def git(cwd, *args, env=None):
    p = subprocess.run(["git", *args], cwd=cwd, env=env or os.environ, capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise RuntimeError("git %s in %s exited %d: %s%s" % (" ".join(args), cwd, p.returncode, p.stdout, p.stderr))
    return p.stdout


def kg_files(repo):
    """{relative path: bytes} of every file under `.kg/` but the one kgd may be writing (`.tmp-*`,
    renamed into place once whole: a marker seen there is not written yet)."""
    out, top = {}, os.path.join(repo, ".kg")
    for d, _, names in os.walk(top):
        for name in [n for n in names if not n.startswith(".tmp-")]:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = f.read()
    return out


def kg_size(repo):
    files = kg_files(repo)
    data = {k: v for k, v in files.items() if k.endswith(".jsonl")}
    return {"bytes": sum(map(len, files.values())), "files": len(files), "data_bytes": sum(map(len, data.values())),
            "data_files": len(data), "changes_files": sum(1 for k in data if k.startswith("changes" + os.sep)),
            "changes_bytes": sum(len(v) for k, v in data.items() if k.startswith("changes" + os.sep))}


def wait_for(cond, timeout=60.0, step=0.01, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise RuntimeError("timed out waiting for %s" % what)


def wait_written(repo, marker):
    """Until `.kg/` holds `marker` (the last put's gist): the export after writes pause is done."""
    marker = json.dumps(marker)[1:-1].encode()
    wait_for(lambda: any(marker in v for v in kg_files(repo).values()), step=0.05, what="the export of " + repo)


def modified_tracked(repo):
    """Tracked files under `.kg/` git reports changed (kgd must never leave one)."""
    out = git(repo, "status", "--porcelain", "--untracked-files=all")
    return [ln for ln in out.splitlines() if not ln.startswith("??") and ".kg/" in ln]


def timed_status(repo, n):
    """Median ms of `git status` (what a person types) and of `git status --porcelain`."""
    time.sleep(1.1)  # past git's racy-timestamp second, as a person's next `git status` would be
    git(repo, "status")  # the index refreshed once, as the first status after a change does
    out = {}
    for args in (["status"], ["status", "--porcelain"]):
        xs = []
        for _ in range(n):
            t = time.perf_counter()
            git(repo, *args)
            xs.append(time.perf_counter() - t)
        out[" ".join(args)] = statistics.median(xs) * 1000
    return out


def commit(repo, msg, push=True):
    git(repo, "add", ".kg")
    git(repo, "commit", "-q", "-m", msg)
    if push:
        git(repo, "push", "-q", "origin", "HEAD:main")
    return git(repo, "rev-parse", "HEAD").strip()


# ---------------------------------------------------------------- agents

def node_args(i, version=0):
    return {"id": "insight-%05d" % i,
            "gist": "insight %d about module %d and its caching layer (v%d)" % (i, i % 97, version),
            "notes": ["the retry path of module %d uses exponential backoff with jitter" % (i % 97),
                      "measured %d ms at p99 under load; see the dashboard" % (i % 500)],
            "touches": ["src/mod%d/cache.py" % (i % 97)]}


def put(c, sid, args):
    t = time.perf_counter()
    c.tool("kg_put_node", dict(args, session_id=sid, level="project"))
    return time.perf_counter() - t


def cpu_s(pid):
    """CPU seconds (user + system) a process has used: what a loaded machine does not inflate."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def synced_ids(c, sid):
    return {n["id"] for n in c.get("/api/sync?session_id=" + sid)["nodes"]}


# ---------------------------------------------------------------- the phases

def alice_writes(opts, alice, c, sid):
    """Figure 5: `--nodes` puts (new nodes), a commit and push every `--commit-every`, then fold."""
    c.post("/api/share", {"project_path": alice})
    commit(alice, "kgd share")
    t = time.perf_counter()
    for i in range(opts.nodes):
        put(c, sid, node_args(i))
        if (i + 1) % opts.commit_every == 0 or i + 1 == opts.nodes:
            wait_written(alice, node_args(i)["gist"])
            commit(alice, "memory: %d puts" % (i + 1), push=False)
    puts_s = time.perf_counter() - t
    before = kg_size(alice)
    p = subprocess.run([sys.executable, opts.kgd, "fold", alice], cwd=alice, capture_output=True, text=True,
                       env=os.environ, timeout=300)
    if p.returncode:
        raise RuntimeError("kgd fold exited %d: %s%s" % (p.returncode, p.stdout, p.stderr))
    git(alice, "add", "-A", ".kg")
    git(alice, "commit", "-q", "-m", "kgd fold")
    git(alice, "push", "-q", "origin", "HEAD:main")
    after = kg_size(alice)
    return {"puts_s": puts_s, "before": before, "after": after, "git_bytes": du(os.path.join(alice, ".git"))}


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def bob_puts(opts, bob, private, c, sid_shared, sid_private):
    """Figure 1: puts to the shared and the private project alternated (half change a node alice
    wrote, half add one); then figure 2 on the shared clone."""
    t_shared, t_private = [], []
    for i in range(opts.puts):
        args = node_args(i, version=1) if i % 2 == 0 else node_args(opts.nodes + i)
        args["gist"] = "bob's put %d: %s" % (i, args["gist"])
        for sid, out in ((sid_shared, t_shared), (sid_private, t_private)):
            out.append(put(c, sid, args))
    wait_written(bob, "bob's put %d: " % (opts.puts - 1))
    changes = kg_size(bob)
    dirty = timed_status(bob, opts.status_runs)
    touched = modified_tracked(bob)
    commit(bob, "bob's memory")
    clean = timed_status(bob, opts.status_runs)
    return {"shared": t_shared, "private": t_private, "dirty": dirty, "clean": clean, "touched": touched,
            "changes": changes}


def pickups(opts, alice, bob, ca, sid_a, cb, sid_b, pid_b):
    """Figure 3: alice changes `--changed` nodes bob has not touched, commits, pushes; bob pulls.
    Also the CPU bob's daemon spent from the pull's start until kg_sync reported it (its sync,
    and the bench's kg_sync calls every 25 ms)."""
    git(alice, "pull", "-q", "--no-rebase", "origin", "main")
    cb.get("/api/sync?session_id=" + sid_b)  # the session's mark: what it has seen
    out, ranges = [], []
    first = opts.puts  # nodes bob changed are below
    for rnd in range(1, opts.rounds + 1):
        ids = list(range(first + (rnd - 1) * opts.changed, first + rnd * opts.changed))
        for i in ids:
            put(ca, sid_a, node_args(i, version=1 + rnd))
        wait_written(alice, node_args(ids[-1], version=1 + rnd)["gist"])
        a_rev = git(bob, "rev-parse", "HEAD").strip()
        commit(alice, "alice: %d nodes changed" % len(ids))
        time.sleep(1.5)  # alice's daemon quiet, bob's beat idle: the pull meets a machine at rest
        want = {"insight-%05d" % i for i in ids}
        seen = set()
        c0, t0 = cpu_s(pid_b), time.perf_counter()
        git(bob, "pull", "-q", "--no-rebase", "origin", "main")
        t1 = time.perf_counter()
        wait_for(lambda: seen.update(synced_ids(cb, sid_b) & want) or seen >= want, timeout=60, step=0.025,
                 what="kg_sync to report the pull")
        t2 = time.perf_counter()
        out.append((t1 - t0, t2 - t0, cpu_s(pid_b) - c0))
        ranges.append((a_rev, git(bob, "rev-parse", "HEAD").strip()))
    return {"pickups": out, "range": ranges[-1], "touched": modified_tracked(bob)}


def kgd_diff(opts, bob, rng):
    """Figure 4: `python3 kgd.py diff A..B` in bob's clone, text and --json (median wall time)."""
    out = {}
    for extra in ([], ["--json"]):
        xs, cpu = [], []
        for _ in range(opts.diff_runs):
            c, t = children_cpu_s(), time.perf_counter()
            p = subprocess.run([sys.executable, opts.kgd, "diff", "%s..%s" % rng] + extra, cwd=bob, capture_output=True,
                               text=True, env=os.environ, timeout=300)
            xs.append(time.perf_counter() - t)
            cpu.append(children_cpu_s() - c)  # kgd's and the git it ran
            if p.returncode:
                raise RuntimeError("kgd diff exited %d: %s" % (p.returncode, p.stderr))
        out["json" if extra else "text"] = statistics.median(xs)
        out[("json" if extra else "text") + "_cpu"] = statistics.median(cpu)
        if extra:
            d = json.loads(p.stdout)
            out["counts"] = {k: len(v) for k, v in d.items()}
        else:
            out["text_bytes"] = len(p.stdout)
    c, t = children_cpu_s(), time.perf_counter()
    subprocess.run([sys.executable, opts.kgd, "--version"], capture_output=True, env=os.environ, timeout=60)
    out["startup"], out["startup_cpu"] = time.perf_counter() - t, children_cpu_s() - c
    return out


def run(opts, tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    os.environ.clear()
    os.environ.update(bench_env(home))
    remote = os.path.join(tmp, "remote.git")
    git(tmp, "init", "-q", "--bare", "-b", "main", remote)
    clones = {}
    for name in ("alice", "bob", "private"):
        path = os.path.join(tmp, name, "app")
        os.makedirs(os.path.dirname(path))
        git(tmp, "clone", "-q", remote, path)
        git(path, "checkout", "-q", "-B", "main")
        git(path, "config", "user.name", "bob" if name == "private" else name)
        git(path, "config", "user.email", "%s@example.com" % name)
        clones[name] = path
    alice, bob, private = clones["alice"], clones["bob"], clones["private"]
    with open(os.path.join(alice, "README.md"), "w") as f:
        f.write("the app\n")
    git(alice, "add", "README.md")
    git(alice, "commit", "-q", "-m", "the app")
    git(alice, "push", "-q", "origin", "HEAD:main")
    flags = ["--max-tokens", "100000000"]
    ka = Kgd(os.path.join(tmp, "alice", "root"), flags, repo=opts.tree)
    kb = None
    try:
        ca = Client(ka.port)
        sid_a = ca.session(alice)
        r = {"fold": alice_writes(opts, alice, ca, sid_a)}
        for path in (bob, private):
            git(path, "pull", "-q", "origin", "main")
        kb = Kgd(os.path.join(tmp, "bob", "root"), flags, repo=opts.tree)
        cb = Client(kb.port)
        t = time.perf_counter()
        sid_b = cb.session(bob)
        r["load_s"] = time.perf_counter() - t
        sid_p = cb.session(private)
        cb.post("/api/share", {"project_path": private, "off": True})  # the same graph, not shared
        r["puts"] = bob_puts(opts, bob, private, cb, sid_b, sid_p)
        ca = Client(ka.port)  # the daemon closes a keep-alive connection left idle (alice's, while bob put)
        r["pull"] = pickups(opts, alice, bob, ca, sid_a, cb, sid_b, kb.proc.pid)
        r["diff"] = kgd_diff(opts, bob, r["pull"]["range"])
        return r
    finally:
        ka.stop()
        if kb is not None:
            kb.stop()


# ---------------------------------------------------------------- the table

def verdict(value, target):
    return "ok" if value <= target else "MISSED"


def report(opts, r):
    f, p, pl, d = r["fold"], r["puts"], r["pull"], r["diff"]
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    ratio = ms(p["shared"]) / ms(p["private"])
    rows = []
    rows.append(("1. put, shared / private (median of %d each, alternated)" % opts.puts,
                 "%.2f ms / %.2f ms = %.2f" % (ms(p["shared"]), ms(p["private"]), ratio),
                 "<= %.1f" % TARGETS["ratio"], verdict(ratio, TARGETS["ratio"])))
    st_dirty, st_clean = p["dirty"]["status"], p["clean"]["status"]
    rows.append(("2. git status, %d uncommitted changes (porcelain)" % opts.puts,
                 "%.1f ms (%.1f ms)" % (st_dirty, p["dirty"]["status --porcelain"]),
                 "< %.0f ms" % TARGETS["status_ms"], verdict(st_dirty, TARGETS["status_ms"])))
    rows.append(("   git status, clean (porcelain)", "%.1f ms (%.1f ms)" % (st_clean, p["clean"]["status --porcelain"]),
                 "< %.0f ms" % TARGETS["status_ms"], verdict(st_clean, TARGETS["status_ms"])))
    starts = [b for _, b, _ in pl["pickups"]]
    after = [b - a for a, b, _ in pl["pickups"]]
    rows.append(("3. git pull changing %d of %d nodes -> kg_sync reports them" % (opts.changed, opts.nodes),
                 "median %.0f ms, max %.0f ms" % (statistics.median(starts) * 1000, max(starts) * 1000),
                 "< %.0f ms" % (TARGETS["pickup_s"] * 1000), verdict(max(starts), TARGETS["pickup_s"])))
    rows.append(("   rounds; git pull itself / after it returned (medians)",
                 "%s; %.0f / %.0f ms" % (" ".join("%.0f" % (x * 1000) for x in starts),
                                         statistics.median([a for a, _, _ in pl["pickups"]]) * 1000,
                                         statistics.median(after) * 1000), "", ""))
    rows.append(("   bob's daemon's CPU meanwhile (median)", "%.0f ms" % (
        statistics.median([c for _, _, c in pl["pickups"]]) * 1000), "", ""))
    rows.append(("4. kgd diff A..B over %d changed nodes: text / --json" % d["counts"].get("changed", 0),
                 "%.0f ms / %.0f ms" % (d["text"] * 1000, d["json"] * 1000),
                 "< %.0f ms" % (TARGETS["diff_s"] * 1000), verdict(max(d["text"], d["json"]), TARGETS["diff_s"])))
    rows.append(("   their CPU (kgd's and git's)", "%.0f ms / %.0f ms" % (d["text_cpu"] * 1000, d["json_cpu"] * 1000),
                 "", ""))
    rows.append(("   kgd --version alone (Python's start): wall, CPU", "%.0f ms, %.0f ms" % (
        d["startup"] * 1000, d["startup_cpu"] * 1000), "", ""))
    for label, s in (("5. .kg/ after %d puts (%d commits)" % (opts.nodes, -(-opts.nodes // opts.commit_every)),
                      f["before"]), ("   .kg/ after kgd fold and its commit", f["after"])):
        rows.append((label, "%s bytes, %d files" % (format(s["bytes"], ","), s["files"]), "", ""))
        rows.append(("     of them data (.jsonl) / under changes/", "%s bytes, %d files / %d files" % (
            format(s["data_bytes"], ","), s["data_files"], s["changes_files"]), "", ""))
    w = max(len(x[0]) for x in rows)
    w2 = max(len(x[1]) for x in rows)
    print("kgd share bench (%s): %d nodes (alice's puts), bob's %d puts per project, pulls of %d changes" % (
        opts.tree, opts.nodes, opts.puts, opts.changed))
    for label, value, target, v in rows:
        print("%-*s  %-*s  %-9s %s" % (w, label, w2, value, target, v))
    print("notes: alice's %d puts took %.1f s with their commits; bob's first session loaded the %d nodes in %.0f ms;"
          % (opts.nodes, f["puts_s"], opts.nodes, r["load_s"] * 1000))
    print("  tracked files under .kg/ modified by kgd: %d after the puts, %d after the pulls; bob's changes "
          "file: %s bytes; kgd diff's text %s bytes, counts %s; alice's .git %s bytes"
          % (len(p["touched"]), len(pl["touched"]), format(p["changes"]["changes_bytes"], ","),
             format(d["text_bytes"], ","), d["counts"], format(f["git_bytes"], ",")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small graph: under a minute")
    ap.add_argument("--nodes", type=int, help="alice's puts, one new node each (default 10000)")
    ap.add_argument("--commit-every", type=int, dest="commit_every", help="alice commits every N puts (1000)")
    ap.add_argument("--puts", type=int, help="bob's puts to each project, alternated (1000)")
    ap.add_argument("--changed", type=int, help="nodes alice changes per pull (1000)")
    ap.add_argument("--rounds", type=int, help="pulls (5)")
    ap.add_argument("--tree", default=REPO, help="the checkout whose kgd runs (both daemons, fold, diff): an "
                    "older commit or a proposed fix, for before/after figures (default: this one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    opts = ap.parse_args()
    quick = {"nodes": 1000, "commit_every": 250, "puts": 100, "changed": 100, "rounds": 2}
    full = {"nodes": 10000, "commit_every": 1000, "puts": 1000, "changed": 1000, "rounds": 5}
    for k, v in (quick if opts.quick else full).items():
        if getattr(opts, k) is None:
            setattr(opts, k, v)
    opts.tree = os.path.abspath(opts.tree)
    opts.kgd = os.path.join(opts.tree, "kgd.py")
    opts.status_runs, opts.diff_runs = (3, 1) if opts.quick else (9, 3)
    if opts.puts + opts.rounds * opts.changed > opts.nodes:
        ap.error("--puts + --rounds * --changed must not exceed --nodes (each pull changes nodes nobody else did)")
    tmp = tempfile.mkdtemp(prefix="kgd-share-")
    try:
        r = run(opts, tmp)
    finally:
        if opts.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report(opts, r)


if __name__ == "__main__":
    main()
