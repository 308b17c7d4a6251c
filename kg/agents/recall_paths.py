"""What a touch or an edge end names, for recall (contract sections 8 and 12). Pure.

Rules owned here:
- A part touch (`PATH#NAME`, `PATH:START-END`) names the file PATH; a url is compared without its
  scheme, `www.`, fragment or trailing slash, lower-cased.
- A path is its components (no '.', empty parts or trailing slash); one inside the project root is
  shown relative to it.
- The index maps a file's last component to (components, node id), a url to ids
  (kg/agents/recall.py's Index); recall.py re-exports these names (recall.relative_path, ...).
"""

import re

_MEMO_MAX = 200000

_PARTS = {}
_PART = re.compile(r"(?:#[A-Za-z_$][\w$.]*|:\d+(?:-\d+)?)$")


def file_of(target):
    """The file a touch names: `PATH#NAME` (a function, class or method) and `PATH:START-END` (lines)
    name PATH; anything else is itself."""
    m = _PART.search(target)
    return target[:m.start()] if m and m.start() else target


def _target_key(target):
    """("url", normalised) or ("file", components), memoised: the same paths come back."""
    got = _PARTS.get(target)
    if got is None:
        if len(_PARTS) >= _MEMO_MAX:
            _PARTS.clear()
        got = _PARTS[target] = ("url", norm_url(target)) if "://" in target else ("file", path_parts(file_of(target)))
    return got


def add_target(files, urls, target, nid):
    if not isinstance(target, str) or not target:
        return
    kind, key = _target_key(target)
    if kind == "url":
        urls.setdefault(key, set()).add(nid)
    elif key:
        files.setdefault(key[-1], set()).add((key, nid))


def drop_target(files, urls, target, nid):
    if not isinstance(target, str) or not target:
        return
    kind, key = _target_key(target)
    if kind == "url":
        ids = urls.get(key)
        if ids is not None:
            ids.discard(nid)
            if not ids:
                del urls[key]
    elif key:
        entries = files.get(key[-1])
        if entries is not None:
            entries.discard((key, nid))
            if not entries:
                del files[key[-1]]


def norm_url(url):
    u = url.strip().lower()
    u = u.split("#", 1)[0]
    for p in ("https://", "http://"):
        if u.startswith(p):
            u = u[len(p):]
            break
    if u.startswith("www."):
        u = u[4:]
    return u.rstrip("/")


def path_parts(path):
    """A path as a tuple of components, without '.', empty parts or a trailing slash."""
    return tuple(p for p in path.replace("\\", "/").split("/") if p and p != ".")


def relative_path(path, root):
    """path made relative to the project root when it lies inside it, else as given."""
    if not root:
        return path
    parts, rparts = path_parts(path), path_parts(root)
    if path.startswith("/") and root.startswith("/") and parts[:len(rparts)] == rparts and len(parts) > len(rparts):
        return "/".join(parts[len(rparts):])
    return path
