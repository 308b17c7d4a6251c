"""What stale marks cost (contract section 12), on a real git repository: 5,000 Python files, a
project graph of 10,000 nodes touching them (half through a part, `PATH#NAME`).

Run from the repository root: python3 bench/stale_bench.py [--files 5000 --nodes 10000 --changed 500]
Rows, all measured in this one run (the machine is noisy: read ratios, not milliseconds):
- recording: a put's cost with and without recording its touched files' states;
- the pass: cold (every file read), warm with nothing changed (stat only);
- after a pull that changes CHANGED files (modified, some renamed, some deleted) in an upstream
  clone: seconds from the end of `git pull` until every mark is current, with the daemon's own
  maintenance loop (a beat every 0.5 s) starting the pass;
- a full kg_read (store.read_graphs + the text render_read gives the model), with the marks of
  that pull, against the same read with staleness off (no marks, no look-ups): ROUNDS rounds, on and
  off in turn (the order swapped each round, so a drifting machine weighs on both alike), each
  read timed in CPU seconds of this process (others' load on a shared machine stays out) and on
  the wall clock; medians and their ratio, and the median of the rounds' own ratios.
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kg.api import render  # noqa: E402
from kg.memory import file_states  # noqa: E402
from kg.memory.maintenance import Loop  # noqa: E402
from kg.memory.store import Settings, Store  # noqa: E402

WORDS = ("pool cache token retry queue lock index shard batch flush parse route session socket "
         "buffer limit sweep fold merge journal graph node edge touch recall preload").split()


def git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null"] + list(args), cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout


def source(i, variant=0):
    out = ["\"\"\"module %d\"\"\"" % i, ""]
    for k in range(3):
        out += ["", "def f%d(x):" % k, "    y = x * %d + %d" % (k + 1, variant if k == 0 else 0)]
        out += ["    y += %d" % j for j in range(6)]
        out += ["    return y", ""]
    return "\n".join(out) + "\n"


def rel(i):
    return "pkg%02d/mod%04d.py" % (i % 100, i)


def make_repo(base, files):
    repo = os.path.join(base, "repo")
    for i in range(files):
        p = os.path.join(repo, rel(i))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(source(i))
    git(base, "init", "-q", "-b", "main", repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    upstream = os.path.join(base, "upstream")
    git(base, "clone", "-q", repo, upstream)
    git(repo, "remote", "add", "up", upstream)
    return repo, upstream


def fill(store, session, files, nodes, rng):
    """nodes in the project graph, each touching one file (every other one through f0, its first
    function), their states recorded as a put records them; returns the seconds recording took."""
    g = store.project_graph(session.project_path)
    spent = 0.0
    with store.lock:
        for n in range(nodes):
            i = n % files
            touches = [rel(i)] if n % 2 == 0 else [rel(i) + "#f%d" % (n // files % 3)]
            node = {"id": "n%05d-%s" % (n, rng.choice(WORDS)), "gist": " ".join(rng.choices(WORDS, k=12)),
                    "notes": [], "touches": touches, "_created_ts": 1.0, "_write_ts": 1.0 + n, "_read_ts": None,
                    "_v": 1}
            t = time.perf_counter()
            file_states.stamp(g, node)
            spent += time.perf_counter() - t
            g.nodes[node["id"]] = node
            g.refresh(node["id"])
    return spent


def pull_changes(repo, upstream, files, changed, rng):
    """In upstream: CHANGED files changed (f0's body in a third, f2's in the rest), 5 % renamed and
    5 % deleted; committed; then `git pull` in repo. Returns (paths changed, renamed, deleted)."""
    picked = rng.sample(range(files), changed)
    renamed, deleted, modified = picked[:changed // 20], picked[changed // 20:changed // 10], picked[changed // 10:]
    for i in modified:
        text = source(i, 1) if i % 3 == 0 else "y += 55".join(source(i).rsplit("y += 5", 1))  # f0, or f2 only
        with open(os.path.join(upstream, rel(i)), "w") as f:
            f.write(text)
    for i in renamed:
        git(upstream, "mv", rel(i), rel(i).replace(".py", "_moved.py"))
    for i in deleted:
        git(upstream, "rm", "-q", rel(i))
    git(upstream, "commit", "-qam", "change %d files" % changed)
    git(repo, "pull", "-q", "--ff-only", "up", "main")
    return modified, renamed, deleted


def expected_stale(files, nodes, modified, renamed, deleted):
    """The ids the marks must name after the pull: a whole-file touch of any changed file; a part
    touch f0 of a file whose f0 changed, any part of a renamed or deleted file."""
    mod, gone = set(modified), set(renamed) | set(deleted)
    out = 0
    for n in range(nodes):
        i = n % files
        if n % 2 == 0:
            out += i in mod or i in gone
        else:
            part = n // files % 3
            out += i in gone or (i in mod and ((i % 3 == 0 and part == 0) or (i % 3 and part == 2)))
    return out


def stale_count(store):
    with store.lock:
        return sum(len(store.staleness.marks.valid(d.graph)) for d in store.registry.durables())


def full_read(store, session):
    graphs = store.read_graphs(session)
    result = {"session_id": session.id, "project_path": session.project_path, "user": graphs["user"],
              "project": graphs["project"]}
    return render.render_read(result, store.settings.max_tokens)


def timed(fn, reps):
    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def paired(fn, on, off, reps):
    """Median seconds of fn with on() and with off() in force, the two alternating rep by rep (a
    noisy machine drifts: alternating keeps the drift out of the ratio)."""
    a, b = [], []
    for _ in range(reps):
        for setup, xs in ((on, a), (off, b)):
            setup()
            t = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - t)
    on()
    return statistics.median(a), statistics.median(b)


def set_marks(store, marks):
    """Put the pass's marks (by_graph, edges) in force, or none ({}, {}): staleness on or off."""
    w = store.staleness
    with store.lock:
        if hasattr(w.marks, "swap"):
            w.marks.swap(marks[0], marks[1], [d.graph for d in store.registry.durables()])
        else:  # an older checkout (bench/README's before figures): the marks only
            w.marks.by_graph = marks[0]


def read_ratio(store, session, w, marked, text, rounds):
    """A full kg_read with the marks and with staleness off, in turn, ROUNDS rounds."""
    kept = (w.marks.by_graph, getattr(w.marks, "edges", {}))
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    ratios = []
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            set_marks(store, kept if on else ({}, {}))
            c, t = time.process_time(), time.perf_counter()
            full_read(store, session)
            cpu[on].append(time.process_time() - c)
            wall[on].append(time.perf_counter() - t)
        ratios.append(cpu[True][-1] / cpu[False][-1])
    set_marks(store, kept)
    med = {k: (statistics.median(cpu[k]), statistics.median(wall[k])) for k in cpu}
    print("full kg_read, %d rounds on/off in turn: CPU median %.1f ms with %d marks, %.1f ms with staleness off: "
          "x%.3f (median of the rounds' ratios x%.3f); wall median %.1f / %.1f ms: x%.3f; text %d characters, "
          "%d marked lines"
          % (rounds, med[True][0] * 1000, marked, med[False][0] * 1000, med[True][0] / med[False][0],
             statistics.median(ratios), med[True][1] * 1000, med[False][1] * 1000, med[True][1] / med[False][1],
             len(text), text.count("[stale: ")))


def put_cost(store, session, files, reps, rng):
    def puts():
        for _ in range(20):
            i = rng.randrange(files)
            store.put_node(session, "project", "put-bench", "a put", touches=[rel(i), rel(i) + "#f1"])
    real = file_states.stamp

    def on():
        file_states.stamp = real

    def off():
        file_states.stamp = lambda g, node: node
    with_states, without = paired(puts, on, off, reps)
    return with_states / 20, without / 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--changed", type=int, default=500)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=60)
    a = ap.parse_args()
    rng = random.Random(7)
    base = tempfile.mkdtemp(prefix="kgd-stale-bench-")
    try:
        t = time.perf_counter()
        repo, upstream = make_repo(base, a.files)
        print("repository: %d files, one commit, an upstream clone (%.1f s to make)"
              % (a.files, time.perf_counter() - t))
        store = Store(os.path.join(base, "root"), Settings(max_tokens=10 ** 9)).open()
        session = store.start_session(repo)
        spent = fill(store, session, a.files, a.nodes, rng)
        print("recording at put: %.3f ms per node (10,000 nodes: %.2f s in all)" % (spent / a.nodes * 1000, spent))
        with_states, without = put_cost(store, session, a.files, 5, rng)
        print("one kg_put_node (2 touches, fsync): %.2f ms with recording, %.2f ms without: x%.2f"
              % (with_states * 1000, without * 1000, with_states / without))
        w = store.staleness
        t = time.perf_counter()
        w.refresh()
        print("pass, cold (every file read): %.2f s, %d nodes, %d stale" % (time.perf_counter() - t,
                                                                            w.last["nodes"], w.last["stale"]))
        warm = timed(w.refresh, 3)
        print("pass, warm, nothing changed (stat only): %.3f s" % warm)

        loop = Loop(store, 3600, housekeeping=[w.tick]).start()  # the daemon's beat: 0.5 s
        try:
            t = time.perf_counter()
            modified, renamed, deleted = pull_changes(repo, upstream, a.files, a.changed, rng)
            pulled = time.perf_counter()
            want = expected_stale(a.files, a.nodes, modified, renamed, deleted)
            while stale_count(store) != want and time.perf_counter() - pulled < 30:
                time.sleep(0.01)
            done = time.perf_counter()
        finally:
            loop.stop()
            w.wait()
        got = stale_count(store)
        print("pull of %d changed files (%d modified, %d renamed, %d deleted) took %.2f s; marks current "
              "%.2f s after it (%d stale nodes, %d expected; the pass itself %.2f s, %d git calls)"
              % (a.changed, len(modified), len(renamed), len(deleted), pulled - t, done - pulled, got, want,
                 w.last["seconds"], w.last["git_calls"]))
        text = full_read(store, session)
        read_ratio(store, session, w, got, text, a.rounds)
        store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
