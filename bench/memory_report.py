"""The printed side of bench/memory_eval.py: the table of runs and the before/after comparison of
two JSON results. Output only: nothing here decides a figure."""

import json
import re

COLUMNS = [("policy", "policy", "%-9s"), ("M", "max_tokens", "%6s"), ("seed", "seed", "%4s"),
           ("needs", "needs", "%5d"), ("ctx%", "in_context", "%5.1f"), ("pre", "share_preload", "%5.1f"),
           ("rec", "share_recall", "%5.1f"), ("file", "share_file", "%5.1f"), ("id", "share_id", "%5.1f"),
           ("srch", "share_search", "%5.1f"), ("miss", "share_missed", "%5.1f"), ("lost", "lost", "%4d"),
           ("reach", "reachable", "%5.1f"), ("warm", "warm_in_context", "%5.1f"), ("cold", "cold_in_context", "%5.1f"),
           ("conv", "conventions_in_context", "%5.1f"),
           ("dups", "duplicates", "%4d"), ("ch/ses", "chars_per_session", "%6d"),
           ("ch/med", "chars_per_session_median", "%6d"), ("ch/p90", "chars_per_session_p90", "%6d"),
           ("maxread", "max_read_chars", "%7d"),
           ("calls", "calls_per_session", "%5.2f"), ("act u/p", None, "%7s")]


def table(runs):
    lines = [" ".join(_pad(name, fmt) for name, _, fmt in COLUMNS)]
    for r in runs:
        cells = []
        for name, key, fmt in COLUMNS:
            if key is None:
                end = r.get("end") or {}
                v = "%s/%s" % (end.get("user", {}).get("active", "-"), end.get("project", {}).get("active", "-"))
            elif key == "max_tokens" and not r[key]:
                v = "own"  # a memory with its own fixed budget (the reference)
            else:
                v = r.get(key, 0)
            cells.append(fmt % v)
        lines.append(" ".join(cells))
    return "\n".join(lines)


def _pad(name, fmt):
    width = int(re.match(r"%-?(\d+)", fmt).group(1))
    return ("%-" + str(width) + "s" if fmt.startswith("%-") else "%" + str(width) + "s") % name


def compare(a_path, b_path):
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    key = lambda r: (r["policy"], r["max_tokens"], r["seed"], r["days"], r.get("world", "classic"))  # noqa: E731
    old = {key(r): r for r in a["runs"]}
    keys = ["in_context", "reachable", "warm_in_context", "cold_in_context", "conventions_in_context",
            "share_missed", "duplicates", "lost", "chars_per_session", "chars_per_session_median",
            "chars_per_session_p90", "calls_per_session"]
    lines = ["%-9s %6s %4s " % ("policy", "M", "seed") + " ".join("%17s" % k[:17] for k in keys)]
    for r in b["runs"]:
        o = old.get(key(r))
        if o is None:
            continue
        cells = []
        for k in keys:
            cells.append("%17s" % ("%s→%s" % (o.get(k, "-"), r.get(k, "-"))))
        lines.append("%-9s %6s %4s " % (r["policy"], r["max_tokens"] or "own", r["seed"]) + " ".join(cells))
    return "\n".join(lines)
