"""A real repository's history as bench/memory_history.py replays it: the last N non-merge commits,
each with the Python functions and classes it changed. Pure reading of a git directory (a mirror
the `fetch` tool brought, or any clone); no network.

Rules owned here:
- Commits are the last N non-merge ones in git's topological order, oldest first, diffed against
  their parent with no context lines (-U0), renames followed.
- A part is a top-level function or class, or a method (`Class.method`), found with `ast` in the
  file as the commit left it; a changed line inside a nested function belongs to the function
  around it, one in a class body outside its methods to the class. A hunk that only deletes lines
  touches the part around the place it deleted from. Module-level lines belong to no part.
- A file that does not parse (or is not Python) has no parts; its edit is still replayed.
- The working tree before the window (every .py file at the first commit's parent) is given, so
  that a replay can hold real file contents on disk.
- The extraction is cached as JSON under bench/results/ keyed by the repository's HEAD and N.
"""

import ast
import json
import os
import re
import subprocess

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
SEP = "\x1e"


def git(gitdir, *args, data=None):
    return subprocess.run(["git", "--git-dir", gitdir] + list(args), input=data, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=True).stdout


def parts_of(source):
    """[(qualname, first line, last line)] of a Python source's functions, classes and methods."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, _first(node), node.end_lineno))
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out.append(("%s.%s" % (node.name, sub.name), _first(sub), sub.end_lineno))
    return out


def parses(source):
    """Whether a source is Python that `ast` reads."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _first(node):
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


def changed_parts(parts, lines):
    """The qualnames whose lines hold one of `lines`, innermost first (a method, not its class)."""
    out = []
    for ln in sorted(lines):
        inner = [p for p in parts if p[1] <= ln <= p[2]]
        if not inner:
            continue
        best = min(inner, key=lambda p: p[2] - p[1])
        if best[0] not in out:
            out.append(best[0])
    return out


def _hunk_of(parts, name, hunks):
    """[removed lines, added lines] of the first hunk inside the part `name`: what an Edit of it
    would replace (old_string) and write (new_string)."""
    span = next(((a, b) for q, a, b in parts if q == name), None)
    for _, _, start, count, removed, added in hunks:
        if span and span[0] <= start <= span[1]:
            return ["\n".join(removed[:20]), "\n".join(added[:20])]
    return ["", ""]


def _blobs(gitdir, specs):
    """{spec: text} for "commit:path" specs through one `git cat-file --batch`."""
    if not specs:
        return {}
    raw = git(gitdir, "cat-file", "--batch", data=("\n".join(specs) + "\n").encode())
    out, pos = {}, 0
    for spec in specs:
        end = raw.index(b"\n", pos)
        head = raw[pos:end].decode()
        pos = end + 1
        if head.endswith("missing"):
            continue
        size = int(head.split()[2])
        out[spec] = raw[pos:pos + size].decode("utf-8", "replace")
        pos += size + 1
    return out


def _parse_log(text):
    commits = []
    for chunk in text.split(SEP)[1:]:
        head, _, diff = chunk.partition("\n\n\x1f\n")
        sha, ts, subject, body = (head.split("\x1f") + ["", "", "", ""])[:4]
        files, cur = [], None
        for line in diff.split("\n"):
            if line.startswith("diff --git "):
                cur = {"path": None, "old": None, "hunks": []}
                files.append(cur)
            elif cur is None:
                continue
            elif line.startswith("--- "):
                cur["old"] = None if line[4:] == "/dev/null" else line[6:]
            elif line.startswith("+++ "):
                cur["path"] = None if line[4:] == "/dev/null" else line[6:]
            else:
                m = _HUNK.match(line)
                if m:
                    a, b, c, d = m.group(1), m.group(2), m.group(3), m.group(4)
                    cur["hunks"].append([int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d),
                                         [], []])
                elif cur["hunks"] and line[:1] in ("+", "-"):
                    cur["hunks"][-1][4 if line[0] == "-" else 5].append(line[1:])
        commits.append({"sha": sha.strip(), "t": int(ts), "subject": subject.strip(), "body": body.strip(),
                        "files": [f for f in files if f["path"] and f["path"].endswith(".py")]})
    return commits


def extract(gitdir, n=1000):
    """The replayable history: {"head", "n", "commits": [...], "tree": {path: text}} (oldest first).
    Each commit: sha, t (committer time), subject, body, files: [{path, old (None when added), hunks:
    [[old start, old len, new start, new len, removed lines, added lines]], parts: [qualname],
    edits: [[old_string, new_string]] per part, text: the file as the commit left it}]."""
    fmt = SEP + "%H\x1f%ct\x1f%s\x1f%b\n\n\x1f"
    log = git(gitdir, "log", "--no-merges", "--topo-order", "-n", str(n), "-M", "-p", "-U0", "--no-color",
              "--format=" + fmt, "HEAD").decode("utf-8", "replace")
    commits = list(reversed(_parse_log(log)))
    specs = ["%s:%s" % (c["sha"], f["path"]) for c in commits for f in c["files"]]
    blobs = _blobs(gitdir, specs)
    for c in commits:
        for f in c["files"]:
            text = blobs.get("%s:%s" % (c["sha"], f["path"]), "")
            lines = set()
            for a, b, start, count, _, _ in f["hunks"]:
                lines.update(range(start, start + count) if count else (start, start + 1))
            found = parts_of(text)
            f["parts"] = changed_parts(found, lines)
            f["edits"] = [_hunk_of(found, name, f["hunks"]) for name in f["parts"]]
            f["text"] = text
    tree = {}
    if commits:
        first = commits[0]["sha"]
        try:
            names = git(gitdir, "ls-tree", "-r", "--name-only", first + "^").decode().split("\n")
            py = [p for p in names if p.endswith(".py")]
            got = _blobs(gitdir, ["%s^:%s" % (first, p) for p in py])
            tree = {p: got["%s^:%s" % (first, p)] for p in py if "%s^:%s" % (first, p) in got}
        except subprocess.CalledProcessError:
            tree = {}  # the window starts at the root commit
    head = git(gitdir, "rev-parse", "HEAD").decode().strip()
    shallow = git(gitdir, "rev-parse", "--is-shallow-repository").decode().strip() == "true"
    return {"head": head, "n": len(commits), "shallow": shallow, "commits": commits, "tree": tree}


def load(gitdir, n=1000, cache_dir=None):
    """extract(), cached as JSON in cache_dir (keyed by HEAD and N)."""
    head = git(gitdir, "rev-parse", "HEAD").decode().strip()
    path = None
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        path = os.path.join(cache_dir, "history-%s-%d.json" % (head[:12], n))
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    doc = extract(gitdir, n)
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f)
        os.replace(path + ".tmp", path)
    return doc
