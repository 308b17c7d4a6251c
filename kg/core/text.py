"""Text forms written in several places, defined once. Pure.

- Compact JSON (no spaces, non-ASCII kept) is the one form kgd writes: graph files, journals,
  HTTP and stdio bodies, live-feed frames; the bounds on structuredContent measure it, because
  it is what a client receives.
- A clipped string ends in "…" where it was cut; clipped as a line, runs of whitespace (new
  lines included) first become one space.
- JSON kgd reads from outside (a request body, a person's settings file) is RFC 8259 JSON only
  (strict_loads): no NaN / Infinity / 1e999, no lone surrogates, and too deep is a ValueError.
"""

import json


def compact_json(obj, sort_keys=False):
    """JSON without spaces, non-ASCII kept; sort_keys for a canonical form (the .kg/ lines)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)


def clip_left(s, n):
    """s in at most n characters, its end kept: "…" where the start was cut (a path's file name
    says most)."""
    return s if len(s) <= n else "…" + s[-(n - 1):]


def clip(s, n, line=True):
    """s in at most n characters; line=False keeps its whitespace as it is (a value, not a line)."""
    if line:
        s = " ".join(s.split())
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def _finite(text):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number %s is out of range" % text[:40])
    return value


def strict_loads(body):
    """RFC 8259 JSON only: UTF-8, no NaN / Infinity / 1e999, no lone surrogates; too deep is a ValueError."""
    text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if "\\u" in text:
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff)") from None
        except RecursionError:
            raise ValueError("nested too deeply") from None
    return obj
