"""The secrets gate's figures (contract section 10): detection, false alarms, time.

    python bench/secrets_bench.py [--seeds N] [--base DIR] [--held-back]

- calibration (tests/secrets_calibration.py, seeds 0..N-1 or, with --held-back, only the
  held-back seeds HELD_BACK..HELD_BACK+9, never used while tuning): recall per credential category and false
  alarms per near-miss category, for kgd, detect-secrets and gitleaks on the same lines
  (bench/secrets_anchors.py; an anchor that cannot be run says so);
- against another checkout (--base DIR, e.g. a worktree of main before the change): a clean
  node's scan and loading a 10,000-node graph, alternating rounds in one run, as ratios; and the
  clean nodes' scans once more with both checkouts' kg/secrets in one interpreter, interleaved
  batches (a burst of the machine's other load then falls on both);

- detection: every generated credential (tests/secrets_corpus.py, seeds 0..N-1) found as its kind;
- false alarms: near-miss lines (engineering notes, hashes, UUIDs, placeholders, code) refused;
  and, for scale, every line of this repository's own source and docs;
- time: each 1 MB adversarial text (best of 3), and a node-sized text.
"""

import argparse
import glob
import json
import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE, os.path.join(REPO, "tests")]

from kg.secrets import fields  # noqa: E402
from kg.secrets import kinds as secrets  # noqa: E402

import secrets_anchors  # noqa: E402
import secrets_calibration  # noqa: E402
import secrets_corpus  # noqa: E402
import secrets_hostile  # noqa: E402

HELD_BACK = 310_031  # the held-back seeds HELD_BACK..+9: never run while tuning, reported at the end


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
    ap.add_argument("--calibration-seeds", type=int, default=10)
    ap.add_argument("--held-back", action="store_true", help="the calibration table on the held-back seed only")
    ap.add_argument("--only-calibration", action="store_true")
    ap.add_argument("--base", help="another checkout: clean-node scan and 10,000-node load as ratios")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    seeds = list(range(HELD_BACK, HELD_BACK + 10)) if args.held_back else list(range(args.calibration_seeds))
    calibration(seeds, "held-back seeds %d..%d" % (seeds[0], seeds[-1]) if args.held_back
                else "seeds 0..%d" % (seeds[-1]))
    if args.base:
        against(args.base, args.rounds)
    if args.only_calibration or args.held_back:
        return

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


def calibration(seeds, what):
    """Recall per credential category, false alarms per near-miss category: kgd and the anchors."""
    rows = [line for seed in seeds for line in secrets_calibration.lines(seed)]
    texts = [t for _, _, t in rows]
    found = {"kgd": [secrets.find(t) is not None for t in texts]}
    for name, flagged in secrets_anchors.run_all(texts).items():
        found[name] = flagged
    tools = list(found)
    print("calibration corpus (%s): %d lines" % (what, len(rows)))
    print("  %-24s %6s  %s" % ("category", "lines", "  ".join("%16s" % t for t in tools)))
    for secret, cats, word in ((True, secrets_calibration.SECRET_CATEGORIES, "refused"),
                               (False, secrets_calibration.NEAR_CATEGORIES, "false alarms")):
        print("  %s (%s):" % ("credentials" if secret else "near misses", word))
        every = [i for i, r in enumerate(rows) if r[1] == secret]
        for cat in list(cats) + ["all"]:
            idx = every if cat == "all" else [i for i in every if rows[i][0] == cat]
            cells = []
            for t in tools:
                if found[t] is None:
                    cells.append("%16s" % "unavailable")
                else:
                    n = sum(found[t][i] for i in idx)
                    cells.append("%16s" % ("%d (%.1f %%)" % (n, 100.0 * n / max(len(idx), 1))))
            print("  %-24s %6d  %s" % (cat, len(idx), "  ".join(cells)))
    misses = [(rows[i][0], rows[i][2]) for i in range(len(rows)) if rows[i][1] != found["kgd"][i]]
    for cat, text in misses[:40]:
        print("  kgd wrong: %-22s %r" % (cat, text[:110]))


def against(base, rounds):
    """This checkout and `base`, alternating: a clean node's scan, a 10,000-node graph's load."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="kgd-secrets-bench-")
    try:
        graph_nodes = _against(base, rounds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the 10,000-node graph written for the load
    interleaved(base, rounds, graph_nodes)


def _against(base, rounds, tmp):
    import statistics
    import subprocess

    import compare_versions

    _, big, _, big_file = compare_versions.write_template(tmp, 10000)
    notes = os.path.join(tmp, "notes.json")
    with open(notes, "w") as f:
        json.dump([secrets_corpus.near_misses()[:60],
                   [t for _, s, t in secrets_calibration.lines(1) if not s][:60]], f)
    scan = ("import sys, json, time; sys.path.insert(0, sys.argv[1]); from kg.secrets import fields; "
            "nodes = json.load(open(sys.argv[2])); out = []\n"
            "for notes in nodes:\n"
            "    best = 1e9\n"
            "    for r in range(30):\n"
            "        node = {'id': 'n%d' % r, 'gist': notes[0], 'notes': notes, 'touches': ['kg/app.py']}\n"
            "        t = time.process_time(); fields.scan_node(node); best = min(best, time.process_time() - t)\n"
            "    out.append(best)\n"
            "print(' '.join(map(str, out)))")
    rows = {}
    for r in range(rounds):
        for tree in ((base, REPO) if r % 2 == 0 else (REPO, base)):
            key = "base" if tree == base else "this"
            rows.setdefault(("load 10000-node graph, CPU ms", key), []).append(
                compare_versions.load_once(tree, big_file, big) * 1000)
            got = subprocess.run([sys.executable, "-c", scan, tree, notes], check=True,
                                 stdout=subprocess.PIPE).stdout.decode().split()
            rows.setdefault(("clean node of 60 corpus notes, scan CPU ms", key), []).append(float(got[0]) * 1000)
            rows.setdefault(("clean node of 60 calibration near misses, scan CPU ms", key), []).append(
                float(got[1]) * 1000)
    print("against %s (%d rounds, alternating; medians; load average %.1f):" % (base, rounds, os.getloadavg()[0]))
    for what in dict.fromkeys(w for w, _ in rows):
        b, t = statistics.median(rows[(what, "base")]), statistics.median(rows[(what, "this")])
        print("  %-52s base %8.3f  this %8.3f  this/base %.2f" % (what, b, t, t / b))
    with open(big_file) as f:
        graph_nodes = json.load(f)["nodes"]
    return list(graph_nodes.values()) if isinstance(graph_nodes, dict) else graph_nodes


def _secrets_of(tree, name):
    """kg/secrets/fields.py of a checkout, imported as `name` beside this one's (kg/secrets imports
    nothing else of kg), so both scan in one interpreter."""
    import importlib
    import importlib.util
    path = os.path.join(tree, "kg", "secrets")
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    return importlib.import_module(name + ".fields")


def interleaved(base, rounds, graph_nodes=(), batch=20):
    """The clean nodes' scans of both checkouts in one interpreter, a batch of each in turn: a burst
    of the machine's other load falls on both, which separate processes a second apart do not share."""
    import statistics
    trees = {"base": _secrets_of(base, "_base_secrets"), "this": fields}
    near = [t for _, s, t in secrets_calibration.lines(1) if not s][:60]
    nodes = (("clean node of 60 corpus notes", secrets_corpus.near_misses()[:60]),
             ("clean node of 60 calibration near misses", near))
    print("the same, in one interpreter (%d rounds of %d scans each, alternating; median batch; load average %.1f):"
          % (rounds * 20, batch, os.getloadavg()[0]))
    for what, notes in nodes:
        times = {"base": [], "this": []}
        for r in range(rounds * 20 + 1):
            for key in (("base", "this") if r % 2 == 0 else ("this", "base")):
                scan = trees[key].scan_node
                made = [{"id": "n%d" % next(_ids), "gist": notes[0], "notes": notes, "touches": ["kg/app.py"]}
                        for _ in range(batch)]
                t0 = time.process_time()
                for node in made:
                    scan(node)
                if r:  # the first round warms both (the pre-filter's table, the name cache)
                    times[key].append((time.process_time() - t0) / batch * 1000)
        b, t = statistics.median(times["base"]), statistics.median(times["this"])
        print("  %-52s base %8.3f  this %8.3f  this/base %.2f" % (what + ", scan CPU ms", b, t, t / b))
    if graph_nodes:  # the secrets' part of the load: each of its nodes scanned, in turn, as many rounds
        times = {"base": [], "this": []}
        for r in range(rounds + 1):
            for key in (("base", "this") if r % 2 == 0 else ("this", "base")):
                scan = trees[key].scan_node
                t0 = time.process_time()
                for node in graph_nodes:
                    scan(node)
                if r:
                    times[key].append((time.process_time() - t0) * 1000)
        b, t = statistics.median(times["base"]), statistics.median(times["this"])
        print("  %-52s base %8.3f  this %8.3f  this/base %.2f" % (
            "scan of the %d nodes of the graph loaded, CPU ms" % len(graph_nodes), b, t, t / b))


_ids = iter(range(1 << 30))


def fresh(node):
    """The node under a new id: the scan remembers the last text it searched."""
    return dict(node, id="n%d" % next(_ids))


if __name__ == "__main__":
    main()
