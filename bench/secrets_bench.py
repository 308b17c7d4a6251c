"""The secrets gate's figures (contract section 10): detection, false alarms, time.

    python bench/secrets_bench.py [--seeds N]

- detection: every generated credential (tests/secrets_corpus.py, seeds 0..N-1) found as its kind;
- false alarms: near-miss lines (engineering notes, hashes, UUIDs, placeholders, code) refused;
  and, for scale, every line of this repository's own source and docs;
- time: each 1 MB adversarial text (best of 3), and a node-sized text.
"""

import argparse
import glob
import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, os.path.join(REPO, "tests")]

from kg.secrets import fields  # noqa: E402
from kg.secrets import kinds as secrets  # noqa: E402

import secrets_corpus  # noqa: E402
import secrets_hostile  # noqa: E402


def best_of(fn, n=3, clock=time.perf_counter):
    runs = []
    for _ in range(n):
        t0 = clock()
        fn()
        runs.append(clock() - t0)
    return min(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=100)
    args = ap.parse_args()

    found, total, wrong = Counter(), Counter(), []
    lines = alarms = 0
    for seed in range(args.seeds):
        for kind, text in secrets_corpus.credentials(seed):
            total[kind] += 1
            hit = secrets.find(text)
            if hit is not None and hit.kind == kind:
                found[kind] += 1
            else:
                wrong.append((seed, kind, hit and hit.kind))
        for line in secrets_corpus.near_misses(seed + 1000):
            lines += 1
            alarms += secrets.find(line) is not None
    print("credentials corpus (%d seeds): detected %d of %d, %d of %d kinds complete"
          % (args.seeds, sum(found.values()), sum(total.values()),
             sum(1 for k in total if found[k] == total[k]), len(total)))
    for kind in sorted(total):
        print("  %-18s %6d of %d" % (kind, found[kind], total[kind]))
    for w in wrong[:10]:
        print("  missed: seed %s %s -> %s" % w)
    print("near-miss corpus (%d seeds): false alarms %d of %d lines (%d distinct templates)"
          % (args.seeds, alarms, lines, len(secrets_corpus.near_misses())))

    h_found, h_total, h_kind, h_missed = Counter(), Counter(), 0, []
    h_lines = h_alarms = 0
    for seed in range(args.seeds):
        for kind, text, how in secrets_hostile.hostile_credentials(seed):
            h_total[how] += 1
            hit = secrets.find(text)
            h_found[how] += hit is not None
            h_kind += hit is not None and hit.kind == kind
            if hit is None:
                h_missed.append((seed, kind, how))
        for line in secrets_hostile.hostile_near_misses(seed + 1000):
            h_lines += 1
            h_alarms += secrets.find(line) is not None
    print("hostile corpus (%d seeds): refused %d of %d (%d named as their own kind)"
          % (args.seeds, sum(h_found.values()), sum(h_total.values()), h_kind))
    for how in sorted(h_total):
        print("  %-18s %6d of %d" % (how, h_found[how], h_total[how]))
    for w in h_missed[:10]:
        print("  missed: seed %s %s %s" % w)
    print("hostile near misses (%d seeds): false alarms %d of %d lines (%d distinct templates)"
          % (args.seeds, h_alarms, h_lines, len(secrets_hostile.hostile_near_misses())))

    repo_lines, repo_hits = 0, []
    for path in sorted(glob.glob(os.path.join(REPO, "**", "*"), recursive=True)):
        if (
            not path.endswith((".py", ".md", ".js", ".html", ".css", ".json", ".toml", ".sh", ".txt"))
            or "secrets_corpus" in path
            or "secrets_hostile" in path
            or "node_modules" in path
            or not os.path.isfile(path)
        ):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                repo_lines += 1
                hit = secrets.find(line)
                if hit is not None:
                    repo_hits.append("%s:%d %s" % (os.path.relpath(path, REPO), n, hit.kind))
    print("this repository's own text: %d of %d lines refused" % (len(repo_hits), repo_lines))
    for h in repo_hits:
        print("  " + h)

    walls, cpus = {}, {}
    print("1 MB adversarial texts (best of 3; wall clock, and CPU time, which a loaded machine inflates less):")
    for name, text in sorted(secrets_corpus.adversarial().items()):
        dt = best_of(lambda t=text: secrets.find(t))
        cpu = best_of(lambda t=text: secrets.find(t), clock=time.process_time)
        hit = secrets.find(text)
        walls[name], cpus[name] = dt, cpu
        print("  %-28s %7.1f ms wall %7.1f ms cpu  %s" % (name, dt * 1000, cpu * 1000, hit.kind if hit else "none"))
    w, c = max(walls, key=walls.get), max(cpus, key=cpus.get)
    print("worst 1 MB adversarial: %.1f ms wall (%s), %.1f ms cpu (%s); load average %.1f"
          % (walls[w] * 1000, w, cpus[c] * 1000, c, os.getloadavg()[0]))
    node = {"id": "n", "gist": secrets_corpus.near_misses()[0], "notes": secrets_corpus.near_misses()[:60],
            "touches": ["kg/app.py"]}
    print("one clean node of %d chars: %.3f ms" % (sum(len(x) for x in node["notes"]),
                                                   best_of(lambda: fields.scan_node(fresh(node)), 20) * 1000))


_ids = iter(range(1 << 30))


def fresh(node):
    """The node under a new id: the scan remembers the last text it searched."""
    return dict(node, id="n%d" % next(_ids))


if __name__ == "__main__":
    main()
