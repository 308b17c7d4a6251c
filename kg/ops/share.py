"""`kgd share [PATH] [--off]` (contract section 9): a project's graph written under its repository's
`.kg/`, to be committed with the code; or, with --off, no longer read nor written there.

Rules owned here:
- PATH (default: the current folder) must be inside a git working tree (`git rev-parse`); without
  git, or outside a working tree, one clear line and a non-zero exit.
- Through the daemon that holds the root when one answers (POST /api/share), so the live graph is
  the one written; otherwise the store is opened on the root for the time of the command.
- It prints the exact git commands to run; kgd never runs git commit, push or pull.
"""

import os
import shlex
import shutil
import subprocess

from ..core.errors import KgError
from ..memory.projects import resolve_project_root
from .client import Api, connect_host, find_daemon
from .console import CommandError, plural, say

COMMIT_MESSAGE = "Share project memory (kgd .kg/)"


def _git_toplevel(path):
    if shutil.which("git") is None:
        raise CommandError("git is not installed (or not on PATH); kgd share writes the memory into a git "
                           "repository and needs it")
    try:
        p = subprocess.run(["git", "-C", path, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                           timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandError("could not run git: %s" % exc)
    if p.returncode != 0:
        raise CommandError("%s is not inside a git working tree: run `kgd share` in your repository "
                           "(or `git init` it first)" % path)
    return p.stdout.strip()


def _through_daemon(cfg, root, off):
    found = find_daemon(cfg)
    if not found or not found["holds_root"]:
        return None
    api = Api(connect_host(cfg), found["port"], cfg.get("token"), timeout=120)
    try:
        code, obj = api.json("POST", "/api/share", {"project_path": root, "off": off})
    except (OSError, ConnectionError) as exc:
        raise CommandError("kgd on port %d stopped answering: %s" % (found["port"], exc))
    finally:
        api.close()
    if code != 200 or not isinstance(obj, dict):
        reason = obj.get("error") if isinstance(obj, dict) else obj
        raise CommandError("kgd on port %d could not share %s: %s" % (found["port"], root, reason))
    return obj


def _in_process(cfg, root, off):
    from ..memory.store import Settings, Store
    from ..travel import team

    store = team.install(Store(cfg["root"], Settings(max_tokens=cfg["max_tokens"])))
    try:
        store.open("kgd share")
    except KgError as exc:
        raise CommandError(exc.message)
    try:
        return store.team.share(root, off=off)
    except KgError as exc:
        raise CommandError(exc.message)
    finally:
        store.close()


def share(args, cfg):
    path = os.path.abspath(args.path or os.getcwd())
    if not os.path.isdir(path):
        raise CommandError("%s is not a folder" % path)
    _git_toplevel(path)
    try:
        root = resolve_project_root(path)
    except KgError as exc:
        raise CommandError(exc.message)
    result = _through_daemon(cfg, root, args.off) or _in_process(cfg, root, args.off)
    kg = os.path.join(root, ".kg")
    if args.off:
        say("kgd no longer reads or writes %s for this project; its graph keeps what it had." % kg)
        say("Teammates are not affected. To stop sharing for everyone: git rm -r .kg && git commit")
        return 0
    say("Shared %s and %s of %s in %s" % (plural(result.get("nodes", 0), "node"),
                                          plural(result.get("edges", 0), "edge"), root, kg))
    if result.get("published"):
        say("Published %s you had before .kg/ arrived (they stayed personal until now)."
            % plural(result["published"], "node"))
    if _nothing_to_commit(root):
        say("Nothing to commit: %s is in git as it is." % kg)
        return 0
    here = os.path.realpath(os.getcwd()) == os.path.realpath(root)
    cd = "" if here else "cd %s && " % shlex.quote(root)
    say("Commit it with the code (kgd never commits, pushes or pulls):")
    say("  %sgit add .kg && git commit -m %s" % (cd, shlex.quote(COMMIT_MESSAGE)))
    return 0


def _nothing_to_commit(root):
    """True when git says `.kg/` holds no change (a project already shared and committed)."""
    from ..memory import git_runner

    try:
        code, out, _ = git_runner.run(["status", "--porcelain", "--untracked-files=all", "--", ".kg"], root,
                                      timeout=30, check=False)
    except git_runner.GitError:
        return False
    return code == 0 and not out.strip()
