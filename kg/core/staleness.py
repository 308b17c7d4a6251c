"""Is a node's knowledge still true of the code it touches, and the mark that says what changed
(contract section 12). Pure: the caller reads the files and asks git.

Rules owned here:
- A touch names a file (`PATH`), a part of one (`PATH#NAME`: a function, class or method, `Class.method`
  inside a class) or lines (`PATH:START-END`); a url or an empty touch names no file.
- A file's state is its content id (git's blob id: the same content gives the same id in every clone)
  and its line count; a file over HASH_MAX bytes is judged by size and time only. A part's state is
  the id of that part's own text (line ends and trailing spaces aside), so a node about one function
  goes stale only when that function changes or vanishes. Python parts are found through `ast`,
  others by their definition keyword (`def`, `class`, `function`, `func`, `fn`, `struct`, ...) and
  their extent by braces or indentation. Lines are found where they were, or anywhere their text
  moved to; else they changed.
- A touch is stale when its file is gone (renamed when git names the new path, else deleted), its
  content differs, or its part changed or vanished. What could not be judged (no state recorded, the
  file unreadable) is not marked.
- In `.kg/` a node line carries its recorded states as `files` (check_files: an ill-formed field
  is dropped, the node still loads, only not judged), so teammates judge against the same base.
- The mark is a few words: the first change, how much (`14 of 400 lines`, from git) and when
  (`4 commits ago`, `not committed`), and how many other touches changed; at most MARK_MAX characters.
"""

import ast
import collections
import functools
import hashlib
import math
import re

from .text import clip_left

MAX_STATES = 100  # recorded states per node (a node has at most model.MAX_TOUCHES touches)
HASH_MAX = 32 * 1024 * 1024  # bytes: a bigger file is judged by size and modification time
MARK_MAX = 160
STALE = "stale"

_PART = re.compile(r"(?:#([A-Za-z_$][\w$.]*)|:(\d+)(?:-(\d+))?)$")
_DEF = re.compile(r"^([ \t]*)(?:export\s+|default\s+|async\s+|pub(?:\([\w:]+\))?\s+|static\s+|public\s+|private\s+"
                  r"|protected\s+|abstract\s+|final\s+|override\s+|inline\s+|unsafe\s+|const\s+|extern\s+)*"
                  r"(?:def|class|function\*?|func|fn|interface|struct|impl|trait|module|enum|type|object|sub"
                  r"|record|protocol|extension|union)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")


def split_touch(touch):
    """(path, part) of a touch: part None (the whole file), ("name", NAME) or ("lines", START, END)
    (1-based, inclusive); (None, None) for a touch that names no file (a url, an empty string)."""
    if not isinstance(touch, str) or not touch.strip() or "://" in touch:
        return None, None
    m = _PART.search(touch)
    if not m or not m.start():
        return touch, None
    path = touch[:m.start()]
    if m.group(1):
        return path, ("name", m.group(1).strip("."))
    start = int(m.group(2))
    end = int(m.group(3)) if m.group(3) else start
    if start < 1 or end < start:
        return touch, None
    return path, ("lines", start, end)


def blob_id(data):
    """git's id of a file's content (`git hash-object`): the same in every clone."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _text_id(lines):
    h = hashlib.sha1("\n".join(ln.rstrip() for ln in lines).encode("utf-8", "surrogatepass"))
    return "p" + h.hexdigest()[:24]


def line_count(data):
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _lines(data):
    return data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")


# ---- parts of a file

@functools.lru_cache(maxsize=16)
def _parsed(text):
    """The module's tree, remembered for the last few sources: a file's part touches (several nodes,
    each put and each pass) parse it once."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _python_span(text, name):
    """(first, last) 1-based lines of the def or class NAME (Class.method qualified) in Python
    source, decorators included; None when not found; "syntax" when the text does not parse. A
    name defined more than once in one body (`typing.overload` stubs, then the real one) is one
    part, from its first definition to the end of its last: a change to the body is seen."""
    tree = _parsed(text)
    if tree is None:
        return "syntax"
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    parts = name.split(".")
    body = None
    if len(parts) > 1:
        body = tree.body
        for p in parts[:-1]:
            found = next((n for n in body if isinstance(n, kinds) and n.name == p), None)
            body = found.body if found is not None else None
            if body is None:
                break
    else:
        queue = collections.deque([tree])
        while queue and body is None:
            node = queue.popleft()
            for field in ("body", "orelse", "finalbody"):  # a def under an `if` or a `try` too
                children = getattr(node, field, None)
                if body is None and isinstance(children, list) and \
                        any(isinstance(c, kinds) and c.name == name for c in children):
                    body = children
            queue.extend(ast.iter_child_nodes(node))
    same = [n for n in body or () if isinstance(n, kinds) and n.name == parts[-1]]
    if not same or any(getattr(n, "end_lineno", None) is None for n in same):
        return None
    first = min(min([n.lineno] + [d.lineno for d in n.decorator_list]) for n in same)
    return first, max(n.end_lineno for n in same)


def _extent(lines, k):
    """The last line (0-based) of the definition starting at line k: where its braces close, or
    (no brace near its head) the last line indented more than it."""
    depth, opened = 0, False
    for j in range(k, len(lines)):
        line = lines[j]
        if not opened and j > k + 2:
            break
        for ch in line:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return j
        if not opened and line.rstrip().endswith(";"):  # a declaration without a body
            return j
    if opened:
        return len(lines) - 1
    head = lines[k].expandtabs()
    indent = len(head) - len(head.lstrip())
    last = k
    for j in range(k + 1, len(lines)):
        line = lines[j].expandtabs()
        if not line.strip():
            continue
        if len(line) - len(line.lstrip()) <= indent:
            if line.strip() in ("end", "end;", "}", ")", "]"):  # Ruby, Lua, closing brackets
                last = j
            break
        last = j
    return last


def _keyword_span(lines, name, lo=0, hi=None):
    """(first, last) 0-based of the definition NAME (Class.method: inside Class's extent) found
    by its keyword, or None."""
    hi = len(lines) - 1 if hi is None else hi
    head, _, rest = name.partition(".")
    for k in range(lo, hi + 1):
        m = _DEF.match(lines[k])
        if m and m.group(2) == head:
            end = min(_extent(lines, k), hi)
            if not rest:
                return k, end
            inner = _keyword_span(lines, rest, k + 1, end)
            if inner is not None:
                return inner
    return None


def part_span(lines, path, name):
    """(first, last) 0-based lines of the part NAME of a file, or None when it is not there."""
    if path.endswith((".py", ".pyi", ".pyw")):
        span = _python_span("\n".join(lines), name)
        if span != "syntax":
            return None if span is None else (span[0] - 1, span[1] - 1)
    return _keyword_span(lines, name)



SPANS_AST_MAX = 128 * 1024  # characters: a bigger Python file is scanned by keywords (ast costs ~0.3 s there)


def part_spans(text, path):
    """{NAME: (first, last)} 0-based lines of every part of a file as part_span finds them (Python
    through `ast`: top-level definitions and those in classes, `Class.method`; others by keyword,
    nested ones `Outer.inner`). A name defined twice spans both. For ordering by nearness (file
    recall after an Edit), where one pass over the file must give them all. A method is also
    found by its name alone, as part_span finds it."""
    out = {}

    def put(name, first, last):
        a, b = out.get(name, (first, last))
        out[name] = (min(a, first), max(b, last))

    tree = None
    if path.endswith((".py", ".pyi", ".pyw")) and len(text) <= SPANS_AST_MAX:
        try:  # not _parsed: an edited file's tree is not worth keeping in memory
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            todo, bare = collections.deque([(tree.body, "")]), {}
            while todo:
                body, prefix = todo.popleft()
                for n in body:
                    if isinstance(n, kinds) and getattr(n, "end_lineno", None) is not None:
                        span = (min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1, n.end_lineno - 1)
                        put(prefix + n.name, *span)
                        if prefix:  # `method` alone, as part_span finds it: in the first class that has it
                            seen = bare.setdefault(n.name, [prefix, span[0], span[1]])
                            if seen[0] == prefix:
                                seen[1], seen[2] = min(seen[1], span[0]), max(seen[2], span[1])
                        if isinstance(n, ast.ClassDef):
                            todo.append((n.body, prefix + n.name + "."))
            for name, (_, first, last) in bare.items():
                out.setdefault(name, (first, last))
            return out
    lines = text.split("\n")
    stack = []  # (name, last line) of the definitions around the line
    for k, line in enumerate(lines):
        m = _DEF.match(line)
        if not m:
            continue
        while stack and stack[-1][1] < k:
            stack.pop()
        end = _extent(lines, k)
        put(".".join([x[0] for x in stack] + [m.group(2)]), k, end)
        stack.append((m.group(2), end))
    return out


def span_gap(a, b):
    """Lines between two spans (first, last): 0 when they overlap."""
    if a[0] <= b[1] and b[0] <= a[1]:
        return 0
    return min(abs(a[0] - b[1]), abs(b[0] - a[1]))


# ---- states

def state_of(data, path, part, recorded=None):
    """The state of one touch in a file's content: {"id", "lines"}, or None when its part is not
    there. For lines, `recorded` (the state written before) lets moved text be found again."""
    if part is None:
        return {"id": blob_id(data), "lines": line_count(data)}
    lines = _lines(data)
    if part[0] == "name":
        span = part_span(lines, path, part[1])
        if span is None:
            return None
        return {"id": _text_id(lines[span[0]:span[1] + 1]), "lines": span[1] - span[0] + 1}
    start, end = part[1] - 1, part[2] - 1
    n = end - start + 1
    if start >= len(lines):
        here = None
    else:
        here = {"id": _text_id(lines[start:end + 1]), "lines": len(lines[start:end + 1])}
    want = (recorded or {}).get("id")
    if here is not None and (want is None or here["id"] == want):
        return here
    if want and n <= 2000 and len(lines) <= 200000:
        for k in range(0, max(0, len(lines) - n) + 1):  # the same lines, moved
            if _text_id(lines[k:k + n]) == want:
                return {"id": want, "lines": n}
    return here if here is not None else None


def stat_state(size, mtime):
    """The state of a file too big to hash: its size and modification time."""
    return {"size": int(size), "mtime": round(float(mtime), 3)}


# ---- judging

Seen = collections.namedtuple("Seen", "exists state to")
"""What is there now of one touch: exists False (gone; `to` the new path git names, or None),
True with `state` (None: the part is not in the file), or None (could not be judged)."""

Change = collections.namedtuple("Change", "touch path part kind to commits changed total")
"""kind: changed, deleted, renamed, vanished (the part is gone from the file)."""


def judge_touch(touch, recorded, seen, detail=None):
    """The Change of one touch, or None when it is current or cannot be judged. detail: (commits
    since the record that changed the file or None, lines changed or None, lines now or None)."""
    if not isinstance(recorded, dict) or seen is None or seen.exists is None:
        return None
    path, part = split_touch(touch)
    if path is None:
        return None
    commits, changed, total = detail or (None, None, None)
    if not seen.exists:
        kind = "renamed" if seen.to else "deleted"
        return Change(touch, path, part, kind, seen.to, commits, None, None)
    now = seen.state
    if now is None:
        return Change(touch, path, part, "vanished", None, commits, None, None)
    if "id" in recorded:
        if now.get("id") is None or now["id"] == recorded["id"]:
            return None
    elif "size" in recorded:
        if (now.get("size"), now.get("mtime")) == (recorded.get("size"), recorded.get("mtime")):
            return None
        if now.get("size") is None:
            return None
    else:
        return None
    if part is not None:
        changed, total = None, now.get("lines")
    return Change(touch, path, part, "changed", None, commits, changed, total)


def judge(recorded, seen, details=None):
    """The Changes of a node: recorded is its `_files` ({"commit"?, "files": {touch: state}}),
    seen {touch: Seen}, details {path: (commits, changed, total)} from git when known."""
    files = recorded.get("files") if isinstance(recorded, dict) else None
    if not isinstance(files, dict):
        return []
    details = details or {}
    out = []
    for touch in sorted(files):
        path, _ = split_touch(touch)
        c = judge_touch(touch, files[touch], seen.get(touch), details.get(path))
        if c is not None:
            out.append(c)
    order = {"deleted": 0, "renamed": 0, "vanished": 1, "changed": 2}
    out.sort(key=lambda c: (order[c.kind], c.part is None, c.touch))
    return out


def _what(c):
    if c.part is None:
        return c.path
    if c.part[0] == "name":
        return "%s in %s" % (c.part[1], c.path)
    return "lines %d-%d of %s" % (c.part[1], c.part[2], c.path)


def mark(changes, said=None):
    """The few words: `stale: src/x.py changed, 14 of 400 lines, 4 commits ago` / `stale: src/x.py
    deleted` / `stale: refresh in src/auth.py changed, 2 commits ago`; a change no commit made since
    (commits 0) is `not committed`. "" when nothing changed. said: the text the mark's line already
    holds (a gist): one change whose part or file it names verbatim is not named again (`stale:
    changed, 2 commits ago`), so a listing of gists pays for the news, not for a repeat."""
    if not changes:
        return ""
    c = changes[0]
    what = clip_left(_what(c), 64)
    if said and len(changes) == 1 and c.kind != "renamed" and _what(c) in said:
        what = ""
    if c.kind == "renamed":
        words = "%s renamed to %s" % (what, clip_left(c.to, 48))
    elif c.kind == "deleted":
        words = ("%s deleted" % what).lstrip()
    elif c.kind == "vanished":
        words = ("%s removed" % what).lstrip()
    else:
        words = ("%s changed" % what).lstrip()
        if c.changed is not None and c.total:
            words += ", %d of %d lines" % (min(c.changed, c.total), c.total)
    if c.commits:
        words += ", %d commit%s ago" % (c.commits, "" if c.commits == 1 else "s")
    elif c.commits == 0 and c.kind != "renamed":
        words += ", not committed"
    if len(changes) > 1:
        words += " (+%d more)" % (len(changes) - 1)
    return ("%s: %s" % (STALE, words))[:MARK_MAX]


# ---- the recorded states in a `.kg/` node line (kg/core/kg_format.py)

_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def files_field(node):
    """{"files": ...} for the `.kg/` line of a node that recorded states, else {}."""
    rec = node.get("_files")
    return {"files": rec} if isinstance(rec, dict) and rec.get("files") else {}


def memory_files(rec):
    """{"_files": ...} a checked `.kg/` record gives its node in memory (a copy), else {}."""
    f = rec.get("files")
    if not f:
        return {}
    out = {"files": {t: dict(s) for t, s in f["files"].items()}}
    if f.get("commit"):
        out["commit"] = f["commit"]
    return {"_files": out}


def _state_ok(st):
    if not isinstance(st, dict) or not st or not ("id" in st or "size" in st):
        return False
    for k, v in st.items():
        if k == "id":
            ok = isinstance(v, str) and 0 < len(v) <= 64 and v.isascii() and v.isalnum()
        elif k in ("lines", "size"):
            ok = type(v) is int and 0 <= v <= 2 ** 53
        elif k == "mtime":
            ok = type(v) in (int, float) and math.isfinite(v) and 0 <= v <= 1e11
        else:
            ok = False
        if not ok:
            return False
    return True


def check_files(obj):
    """{"files": clean} of an untrusted node line's `files`, or {} when it is absent or ill-formed."""
    f = obj.get("files")
    if not isinstance(f, dict) or set(f) - {"commit", "files"}:
        return {}
    files, commit = f.get("files"), f.get("commit")
    if not isinstance(files, dict) or not 0 < len(files) <= MAX_STATES:
        return {}
    if commit is not None and not (isinstance(commit, str) and _COMMIT.match(commit)):
        return {}
    for touch, st in files.items():
        if not (0 < len(touch) <= 1000 and touch.isprintable()) or not _state_ok(st):
            return {}
    out = {"files": {t: dict(st) for t, st in files.items()}}
    if commit is not None:
        out["commit"] = commit
    return {"files": out}
