"""`kgd diff [A..B]` and `kgd fold`: the team's memory reviewed like code (contract section 9,
"Living with git"). Both read files and git only: no daemon is started or asked.

Rules owned here:
- `kgd diff [PATH]`: the knowledge this clone's `.kg/` holds that HEAD's does not (what a commit
  would publish); `kgd diff A..B`: what changed between two commits (a pull request's base and
  head, in CI). Text for a person, `--json` for CI (kg/core/kg_diff.py's object); exit 0, or 1 with
  `--exit-code` when the diff lists something; `stale` (kg/ops/review_stale.py): knowledge whose code
  the change makes or leaves stale.
- `kgd fold [PATH]`: the files under `.kg/changes/` that HEAD holds as they are (committed, not
  modified since) are folded into `nodes.jsonl` / `edges.jsonl` and deleted; files not yet committed
  stay. It is the one command that changes files git tracks: commit what it did.
"""

import json
import os
import time

from ..core import kg_diff, kg_format
from ..core.errors import KgError
from ..memory import git_runner
from ..memory.projects import resolve_project_root
from ..travel import team_folder
from . import review_stale
from .console import CommandError, say

KINDS = ("node", "edge")


def _root(path):
    path = os.path.abspath(path or os.getcwd())
    try:
        root = resolve_project_root(path)
    except KgError as exc:
        raise CommandError(exc.message)
    try:
        git_runner.run(["rev-parse", "--git-dir"], root, timeout=10)
    except git_runner.GitError as exc:
        raise CommandError("%s is not inside a git working tree (%s)" % (root, exc))
    return root


def _kind_of(rel):
    """"node" / "edge" for a path of the layout under .kg/ (relative to the root), else None."""
    parts = rel.split("/")
    if parts[0] != team_folder.KG_DIR:
        return None
    if len(parts) == 2:
        return {v: k for k, v in team_folder.FILES.items()}.get(parts[1])
    if len(parts) == 3 and parts[1] == team_folder.CHANGES_DIR:
        return team_folder.change_kind(parts[2])
    return None


def _git(root, args, what):
    try:
        return git_runner.run(args, root, timeout=60)[1]
    except git_runner.GitError as exc:
        raise CommandError("%s: %s" % (what, exc))


def files_at(root, rev):
    """{rel path: bytes} of the layout's files in commit `rev` (one `git ls-tree`, one `git cat-file`)."""
    listing = _git(root, ["ls-tree", "-r", "-z", rev, "--", team_folder.KG_DIR], "no commit %s" % rev)
    ids = {}
    for entry in listing.split("\0"):
        meta, _, rel = entry.partition("\t")
        bits = meta.split()
        if len(bits) == 3 and bits[1] == "blob" and _kind_of(rel):
            ids[rel] = bits[2]
    blobs = review_stale.read_blobs(root, ids.values())
    return {rel: blobs[i] for rel, i in ids.items() if i in blobs}


def files_here(root):
    """{rel path: bytes} of the layout's files in the working tree (what kgd reads)."""
    out = {}
    for paths in team_folder.layout_files(root).values():
        for path in paths:
            data, _ = team_folder.read_file(path)
            if data is not None:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = data
    return out


def _by_kind(files):
    out = {k: [] for k in KINDS}
    for rel, data in sorted(files.items()):
        out[_kind_of(rel)].append(data)
    return out


def diff(args, cfg):
    root = _root(getattr(args, "path", None))
    now = time.time()
    if args.range:
        if ".." not in args.range:
            raise CommandError("give a range as A..B (for example origin/main..HEAD), or no range for this clone")
        a, b = args.range.split("..", 1)
        a, b = a or "HEAD", b or "HEAD"
        before, after = files_at(root, a), files_at(root, b)
        title = "kgd diff %s..%s: the team's memory in %s" % (a, b, root)
    else:
        code, _, _ = git_runner.run(["rev-parse", "--verify", "-q", "HEAD"], root, timeout=10, check=False)
        before = files_at(root, "HEAD") if code == 0 else {}
        a, b = ("HEAD" if code == 0 else None), None
        after = files_here(root)
        title = "kgd diff: what %s/.kg/ would publish (the working tree against HEAD)" % root
    parsed = {}  # a file both states hold is parsed once
    (vb, _), (va, problems) = kg_diff.view(_by_kind(before), now, parsed), kg_diff.view(_by_kind(after), now, parsed)
    d = kg_diff.diff(vb, va)
    in_diff = {n["id"] for n in d["added"]} | {c["id"] for c in d["changed"]}
    changed = review_stale.changed_paths(root, a, b) if a else None
    marks = review_stale.stale(root, va.get("node", {}), in_diff, changed, b)
    d["stale"] = sorted(set(marks) - set(d["withheld"]))  # as kg_diff.diff(vb, va, marks) gives it
    if args.json:
        print(json.dumps(d, ensure_ascii=False, sort_keys=True))
    else:
        text = kg_diff.render(d, title, marks)
        if problems:
            text += "%d line(s) could not be read and were skipped: %s\n" % (len(problems), "; ".join(problems[:3]))
        print(text, end="")
    return 1 if args.exit_code and not kg_diff.is_empty(d) else 0


def fold(args, cfg):
    root = _root(getattr(args, "path", None))
    now = time.time()
    committed = files_at(root, "HEAD")
    here = files_here(root)
    folded = {rel for rel in committed
              if rel.split("/")[1] == team_folder.CHANGES_DIR and here.get(rel) == committed[rel]}
    if not folded:
        say("nothing to fold: no committed file under %s/.kg/%s/" % (root, team_folder.CHANGES_DIR))
        return 0
    for kind, base in team_folder.FILES.items():
        rel_base = "%s/%s" % (team_folder.KG_DIR, base)
        datas = [here.get(rel_base) or b""] + [here[r] for r in sorted(folded) if _kind_of(r) == kind]
        records = {}
        for data in datas:
            parsed, _ = kg_format.parse(data, kind, now)
            for key, rec in parsed.items():
                records[key] = kg_format.merge_versions([records[key], rec], now) if key in records else rec
        data = kg_format.render(records, now)
        if data != (here.get(rel_base) or b""):
            team_folder.write_repo_file(os.path.join(root, rel_base), data)
    for rel in sorted(folded):
        os.unlink(os.path.join(root, rel))
    say("folded %d committed file(s) of %s/.kg/%s/ into nodes.jsonl and edges.jsonl; commit it: "
        "git add -A .kg && git commit -m 'kgd fold'" % (len(folded), root, team_folder.CHANGES_DIR))
    return 0
