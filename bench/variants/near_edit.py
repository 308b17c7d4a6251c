"""After an edit, is the next part the task edits in the same file near it? Offline, over a replayed
history (bench/README.md, "The preload's room and file recall near the edit"): for each part a commit
edits after another part of the same file, with knowledge of both, whether it is among the 3 parts
with knowledge nearest the one edited before it (by lines between their spans, either side:
kg/core/staleness.py `part_spans`, the rule file recall uses), against the 3 most recently changed.
No daemon.

    python3 bench/variants/near_edit.py GITDIR
"""

import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import memory_history  # noqa: E402
import memory_history_git  # noqa: E402

from kg.core import staleness  # noqa: E402


def main(gitdir):
    doc = memory_history_git.load(gitdir, 1000, os.path.join(HERE, "results"))
    tree, known = dict(doc["tree"]), {}  # (path, part) -> index of the last commit that changed it
    n = near = recent = 0
    for i, c in enumerate(doc["commits"]):
        mechanical = sum(len(f["parts"]) for f in c["files"]) > memory_history.MECHANICAL
        for f in c["files"]:
            old = tree.get(f["old"] or "", "")
            spans = staleness.part_spans(old, f["path"]) if old else {}
            prev = None
            for name in f["parts"]:
                if not mechanical and (f["path"], name) in known and prev in spans and name in spans:
                    cands = [q for p, q in known if p == f["path"] and q in spans and q != prev]
                    by_gap = sorted(cands, key=lambda q: (staleness.span_gap(spans[q], spans[prev]),
                                                          -known[(f["path"], q)]))
                    by_time = sorted(cands, key=lambda q: -known[(f["path"], q)])
                    n += 1
                    near += name in by_gap[:3]
                    recent += name in by_time[:3]
                prev = name
        for f in c["files"]:
            if f["old"] and f["old"] != f["path"]:
                tree.pop(f["old"], None)
            tree[f["path"]] = f["text"]
            if not mechanical:
                for name in f["parts"]:
                    known[(f["path"], name)] = i
    print("%s: %d needs after an edit of the same file; among the 3 nearest: %d (%.1f %%), among the 3 most "
          "recently changed: %d (%.1f %%)" % (doc["head"][:8], n, near, 100.0 * near / max(1, n), recent,
                                             100.0 * recent / max(1, n)))


if __name__ == "__main__":
    main(sys.argv[1])
