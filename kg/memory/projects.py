"""Which project a working directory belongs to (contract 3). Pure apart from reading .git.

Rules owned here:
- The project root of a cwd is the nearest ancestor (symlinks resolved) holding .git; with
  none, the cwd itself.
- A .git *file* marks a linked worktree (`gitdir: <main>/.git/worktrees/<name>`): its project
  is the main worktree, found through the gitdir's `commondir`; an unreadable or odd .git
  file leaves the worktree as its own root.
- Except (contract 9): a linked worktree whose own root holds `.kg/` (its branch's shared
  knowledge) is its own project, so each branch's knowledge stays with its checkout.
- A cwd must be an absolute path to an existing directory, UTF-8, without NUL, at most
  model.MAX_PATH characters: anything else is BadInput.
"""

import os

from ..core import model
from ..core.errors import BadInput


def resolve_project_root(cwd):
    """The project root for a cwd: nearest ancestor holding .git, else cwd (contract 3)."""
    if not isinstance(cwd, str) or not cwd.strip():
        raise BadInput("cwd must be the absolute path of the directory the agent works in.")
    if "\x00" in cwd or len(cwd) > model.MAX_PATH:
        raise BadInput("cwd is not a usable path (NUL byte or over %d characters)." % model.MAX_PATH)
    try:
        cwd.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("cwd is not a usable path (it holds a lone surrogate).") from None
    if not os.path.isabs(cwd):
        raise BadInput("cwd must be an absolute path, got %r." % cwd[:200])
    path = os.path.realpath(cwd)
    if not os.path.isdir(path):
        raise BadInput("cwd %r is not an existing directory on this machine." % cwd[:200])
    d = path
    while True:
        git = os.path.join(d, ".git")
        if os.path.isdir(git):
            return d
        if os.path.isfile(git):
            if os.path.isdir(os.path.join(d, ".kg")):
                return d
            return _worktree_main_root(d, git)
        parent = os.path.dirname(d)
        if parent == d:
            return path
        d = parent


def _worktree_main_root(d, git_file):
    """A linked worktree's .git file says `gitdir: <main>/.git/worktrees/<name>`; its
    commondir leads to the main .git, whose parent is the main worktree's root."""
    try:
        with open(git_file, "r", encoding="utf-8") as f:
            first = f.readline().strip()
        if not first.startswith("gitdir:"):
            return d
        gitdir = first[len("gitdir:"):].strip()
        gitdir = os.path.realpath(os.path.join(d, gitdir))
        common = gitdir
        commondir_file = os.path.join(gitdir, "commondir")
        if os.path.isfile(commondir_file):
            with open(commondir_file, "r", encoding="utf-8") as f:
                common = os.path.realpath(os.path.join(gitdir, f.read().strip()))
        if os.path.basename(common) == ".git" and os.path.isdir(os.path.dirname(common)):
            return os.path.dirname(common)
    except (OSError, ValueError):  # unreadable, not UTF-8 (UnicodeDecodeError), NUL in the path
        pass
    return d


def names_entry(project_path, name):
    """True when `name` (a relative path) names an existing file or folder inside the project
    root: no absolute path, no `..` step, no symlink leading outside the root."""
    if not project_path or not name or os.path.isabs(name) or "\x00" in name:
        return False
    parts = name.replace("\\", "/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    root = os.path.realpath(project_path)
    full = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, full]) != root or full == root:
        return False
    return os.path.lexists(os.path.join(root, *parts)) and os.path.exists(full)
