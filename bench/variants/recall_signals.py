"""Which signal predicts the parts a commit edits, offline (bench/README.md, "File recall: the parts
the prompt names"): over a replayed history, at the first Read of each changed file, the top 3 of the
file's parts that have knowledge under each order, against the parts the commit edits. No daemon.

    python3 bench/variants/recall_signals.py GITDIR
"""

import collections
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import memory_history  # noqa: E402
import memory_history_git  # noqa: E402

_WORD = re.compile(r"[A-Za-z][a-z0-9]+|[A-Z]+(?![a-z])")


def words(text):
    return {t.lower() for t in _WORD.findall(text) if len(t) > 2}


def main(gitdir):
    doc = memory_history_git.load(gitdir, 1000, os.path.join(HERE, "results"))
    last, count, times = {}, collections.Counter(), collections.defaultdict(list)
    hits, total = collections.Counter(), 0
    for i, c in enumerate(doc["commits"]):
        mechanical = sum(len(f["parts"]) for f in c["files"]) > memory_history.MECHANICAL
        prompt = words(c["subject"] + " " + c["body"][:300])
        for f in c["files"]:
            cands = [k for k in last if k[0] == f["path"]]
            needed = {(f["path"], n) for n in f["parts"] if (f["path"], n) in last}
            if f["old"] is None or not needed or mechanical:
                continue
            total += len(needed)

            def decay(k, scale):
                return sum(math.exp(-(i - t) / scale) for t in times[k])
            orders = {
                "most recently changed": lambda k: -last[k],
                "most often changed": lambda k: (-count[k], -last[k]),
                "decayed count (50 commits)": lambda k: -decay(k, 50.0),
                "the prompt's words in the part's name, then recency": lambda k: (-len(prompt & words(k[1])), -last[k]),
            }
            for name, key in orders.items():
                hits[name] += len(needed & set(sorted(cands, key=key)[:3]))
            hits["(at most 3 a file: the ceiling)"] += min(3, len(needed))
        if not mechanical:
            for f in c["files"]:
                for n in f["parts"]:
                    k = (f["path"], n)
                    last[k], count[k] = i, count[k] + 1
                    times[k].append(i)
    print("%s: %d needs at a file's first Read" % (doc["head"][:12], total))
    for name, v in hits.most_common():
        print("  %5.1f %%  %s" % (100.0 * v / total, name))


if __name__ == "__main__":
    main(sys.argv[1])
