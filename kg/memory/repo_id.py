"""A project's identity: the same repository is the same graph on every machine, whatever its folder
(contract section 9).

Rules owned here:
- A git repository with a commit is identified by its root commit (`git rev-list
  --max-parents=0 HEAD`; the lexically first when histories were joined): `git-<40 hex>`. Every
  clone and every worktree of it agrees, at any path, on any machine.
- A shallow clone cannot see its root commit, and a repository with no commit yet has none: both
  are identified by their normalised `origin` URL (scheme, user, port, `.git` suffix and case of
  the host dropped; `git@host:a/b` == `https://host/a/b`): `url-<24 hex>` of that text.
- Anything else (not a git repository, no commit and no origin, git missing) is identified by its
  resolved path: `path-<24 hex>`.
- An identity is a folder name safe on every file system: lower-case hex, ASCII, short.
"""

import hashlib
import os
import re

IDENTITY = re.compile(r"^(git-[0-9a-f]{40}|url-[0-9a-f]{24}|path-[0-9a-f]{24})$")
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")  # git@host:owner/repo
GIT_TIMEOUT = 10.0


def _digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def normalise_url(url):
    """The part of a remote URL that names the repository, the same for https, ssh and scp forms."""
    url = (url or "").strip()
    if not url:
        return ""
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", url)
    if m and m.group(1).lower() != "file":
        rest = m.group(2)
        host, _, path = rest.partition("/")
        host = host.rsplit("@", 1)[-1].lower()
        host = re.sub(r":\d*$", "", host)
        path = "/" + path
    elif m:  # file:///srv/repo.git
        host, path = "", m.group(2)
    else:
        scp = _SCP.match(url)
        if scp and not url.startswith("/") and not os.path.exists(url):
            host, path = scp.group(1).lower(), "/" + scp.group(2)
        else:
            host, path = "", os.path.normpath(os.path.abspath(url))
    path = re.sub(r"/+", "/", path).rstrip("/")
    if path.endswith(".git"):
        path = path[:-4].rstrip("/")
    if host and path.startswith("/~"):
        path = path[1:]
    return host + path


def identity_of_url(url):
    norm = normalise_url(url)
    return "url-" + _digest(norm) if norm else None


def identity_of_path(path):
    return "path-" + _digest(os.path.realpath(path))


def _git(args, cwd):
    from . import git_runner  # subprocess: only once a project is opened, never at start-up

    try:
        code, out, _ = git_runner.run(args, cwd, timeout=GIT_TIMEOUT, check=False)
    except git_runner.GitError:
        return None
    return out.strip() if code == 0 else None


def root_commit(path):
    """The repository's root commit (lexically first of several), or None: no commit, shallow,
    not a repository, git missing."""
    if _git(["rev-parse", "--is-shallow-repository"], path) != "false":
        return None
    out = _git(["rev-list", "--max-parents=0", "HEAD"], path)
    roots = sorted(r for r in (out or "").split() if re.match(r"^[0-9a-f]{40}$", r))
    return roots[0] if roots else None


def origin_url(path):
    return _git(["config", "--get", "remote.origin.url"], path) or None


def project_identity(project_root):
    """The identity of the project rooted at project_root (see the module's rules)."""
    if os.path.exists(os.path.join(project_root, ".git")):
        commit = root_commit(project_root)
        if commit:
            return "git-" + commit
        by_url = identity_of_url(origin_url(project_root))
        if by_url:
            return by_url
    return identity_of_path(project_root)


def is_identity(value):
    return isinstance(value, str) and bool(IDENTITY.match(value))
