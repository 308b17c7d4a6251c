"""A project's identity: the same repository is the same graph on every machine, whatever its folder
(contract section 9), and two repositories are two graphs even when they grew from one template.

Rules owned here:
- A repository's remote is `origin`'s URL, else the URL of its only remote (an `origin` renamed),
  else none (no remote, or several and none is `origin`). URLs are normalised: scheme, user,
  port, `.git` suffix and case of the host dropped; `git@host:a/b` == `https://host/a/b`.
- A git repository with a commit and a remote: its root commit (`git rev-list --max-parents=0
  HEAD`; the lexically first when histories were joined) and its remote:
  `git-<40 hex>-<24 hex of the URL>`. Every clone of one repository agrees, at any path, on any
  machine; a template cloned and given its own remote, or a fork, is another repository.
- With a commit and no remote: `git-<40 hex>` (a repository nobody cloned: the same text as
  before remotes counted, so its graph needs no migration).
- A shallow clone cannot see its root commit, and a repository with no commit yet has none: both
  are identified by their remote: `url-<24 hex>` of the normalised URL.
- Anything else (not a git repository, no commit and no remote, git missing) is identified by its
  resolved path: `path-<24 hex>`.
- An identity changes when a remote is added, renamed away, repointed, or a shallow clone is
  deepened; `earlier_forms` names what the same repository was called before (the root-only
  form, the URL-only form), so kg/memory/identities.py can hand an old graph to its repository.
- An identity is a folder name safe on every file system: lower-case hex, ASCII, short.
"""

import hashlib
import os
import re

IDENTITY = re.compile(r"^(git-[0-9a-f]{40}(-[0-9a-f]{24})?|url-[0-9a-f]{24}|path-[0-9a-f]{24})$")
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")  # git@host:owner/repo
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
GIT_TIMEOUT = 10.0


def _digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def normalise_url(url, base=None):
    """The part of a remote URL that names the repository, the same for https, ssh and scp forms
    (a relative local path is taken from `base`, the repository's folder, as git takes it)."""
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
            host, path = "", os.path.normpath(os.path.abspath(os.path.join(base or os.getcwd(), url)))
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
    roots = sorted(r for r in (out or "").split() if _COMMIT.match(r))
    return roots[0] if roots else None


def pick_remote(urls):
    """The URL that names the repository among its remotes ({name: url}): origin's, else the only
    remote's, else None."""
    urls = {k: v for k, v in (urls or {}).items() if (v or "").strip()}
    if "origin" in urls:
        return urls["origin"]
    return next(iter(urls.values())) if len(urls) == 1 else None


def remote_urls(path):
    """{remote name: url} from the repository's config (one git call)."""
    out = _git(["config", "--get-regexp", r"^remote\..*\.url$"], path) or ""
    urls = {}
    for line in out.splitlines():
        key, _, url = line.partition(" ")
        if key.startswith("remote.") and key.endswith(".url") and url.strip():
            urls.setdefault(key[len("remote."):-len(".url")], url.strip())
    return urls


def remote_url(path):
    return pick_remote(remote_urls(path))


def identity_for(commit, url, path):
    """The identity rule itself (pure): a root commit or None, a remote URL or None, the resolved
    path used when neither names the repository."""
    norm = normalise_url(url, path)
    if commit and _COMMIT.match(commit):
        return "git-" + commit + ("-" + _digest(norm) if norm else "")
    if norm:
        return "url-" + _digest(norm)
    return identity_of_path(path)


def project_identity(project_root):
    """The identity of the project rooted at project_root (see the module's rules)."""
    if os.path.exists(os.path.join(project_root, ".git")):
        commit = root_commit(project_root)
        url = remote_url(project_root)
        if commit or url:
            return identity_for(commit, url, project_root)
    return identity_of_path(project_root)


def earlier_forms(ident):
    """What the repository `ident` names was identified as before it had its remote or its whole
    history: `git-R-U` was `git-R` (root commit only) or `url-U` (a shallow clone). Else []."""
    m = re.match(r"^git-([0-9a-f]{40})-([0-9a-f]{24})$", ident or "")
    return ["git-" + m.group(1), "url-" + m.group(2)] if m else []


def is_identity(value):
    return isinstance(value, str) and bool(IDENTITY.match(value))
