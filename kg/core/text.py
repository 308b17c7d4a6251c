"""Text forms written in several places, defined once. Pure.

- Compact JSON (no spaces, non-ASCII kept) is the one form kgd writes: graph files, journals,
  HTTP and stdio bodies, live-feed frames; the bounds on structuredContent measure it, because
  it is what a client receives.
- A clipped string ends in "…" where it was cut; clipped as a line, runs of whitespace (new
  lines included) first become one space.
"""

import json


def compact_json(obj, sort_keys=False):
    """JSON without spaces, non-ASCII kept; sort_keys for a canonical form (the .kg/ lines)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)


def clip(s, n, line=True):
    """s in at most n characters; line=False keeps its whitespace as it is (a value, not a line)."""
    if line:
        s = " ".join(s.split())
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"
