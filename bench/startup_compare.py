"""Start-up time and idle memory of the daemon, this checkout against another, alternating runs.

Run from the repository root: python3 bench/startup_compare.py --base /path/to/other/checkout [--runs 7]
(an older version: `git archive <rev> | tar -x -C /tmp/base`). Both trees are byte-compiled first
so that neither pays for compiling. Rows: median time from exec to the start line, and the
daemon's resident memory 1.5 s after it (VmRSS; Linux only).
"""

import argparse
import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(tree):
    root = tempfile.mkdtemp(prefix="kgd-start-")
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, os.path.join(tree, "kgd.py"), "--port", "0", "--root", root],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        p.stderr.readline()
        took = (time.perf_counter() - t0) * 1000
        time.sleep(1.5)
        with open("/proc/%d/status" % p.pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        p.terminate()
        p.wait(15)
        return took, rss
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other checkout (holding kgd.py and kg/)")
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    trees = (("base", os.path.abspath(a.base)), ("this", HERE))
    for _, tree in trees:
        compileall.compile_dir(os.path.join(tree, "kg"), quiet=1)
    res = {name: [] for name, _ in trees}
    for _ in range(a.runs):
        for name, tree in trees:
            res[name].append(one(tree))
    for name, xs in res.items():
        print("%-5s start line median %.0f ms (min %.0f); idle RSS median %d KiB"
              % (name, statistics.median(x[0] for x in xs), min(x[0] for x in xs), statistics.median(x[1] for x in xs)))


if __name__ == "__main__":
    main()
