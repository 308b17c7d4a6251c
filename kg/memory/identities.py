"""Which project graph on disk belongs to which repository (contract section 9: a project is the
same graph whatever its folder).

Rules owned here:
- ROOT/identities.json maps a project identity (kg/memory/repo_id.py) to the slug of its graph;
  each graph also records its identity in `_meta.repo_id`. A graph has one identity: recording a
  new one for a slug drops the old (a remote added, a shallow clone deepened, an origin repointed).
- Graphs made before identities existed are indexed the first time the daemon opens the root
  (git runs then, before any request). Two graphs of one repository (the same repository opened
  at two paths) are merged into the first by slug with the one merge rule (kg/core/kg_format.py for
  content, kg/core/personal.py for read times and states); the other's file is kept beside it as
  `graph.json.merged-<time>`, nothing is lost.
- Upgrade (identities named by root commit alone, `git-<root>`, before remotes counted): a checkout
  whose identity has no graph yet takes the graph indexed under its earlier form
  (repo_id.earlier_forms) unless that graph's recorded path is another live checkout that still
  claims it (its identity is that earlier form, or has it as an earlier form of its own). So the
  checkout the old graph recorded, or any clone with the same remote, or any checkout once the
  recorded one is gone, keeps the old knowledge; a template's other clone (same root commit,
  another remote) starts its own graph, whichever opens first. The graph is then re-identified
  (its `_meta.repo_id`, the index), nothing is copied or lost.
- The personal remote's folder of an earlier identity (ROOT/sync/projects/<identity>/, kept up by a
  machine that still knows the repository by it) is folded into the new identity's folder each
  time its files change, unless a graph on this machine still holds that identity or the folder
  was carried to another identity first (a template's other clone): a machine not yet upgraded
  meets the others there. Its files are left as they are (that machine writes them); one file
  is added, recording where it was carried.
- A path's identity is computed once per daemon (git runs), cached by path.
"""

import hashlib
import json
import logging
import os
import time

from ..core import kg_format, personal
from ..core.kg_format import MAX_FILE
from ..disk.files import atomic_write
from . import repo_id

log = logging.getLogger(__name__)

INDEX = "identities.json"


class Identities:
    def __init__(self, layout):
        self.layout = layout
        self.path = os.path.join(layout.root, INDEX)
        self.by_id = self._load()
        self.cache = {}  # project path -> identity
        self.recorded = {}  # slug -> the project_path its graph file records, when `warm` needed it
        self.told = set()  # (earlier identity, path) a refusal to take over was logged for

    def _load(self):
        try:
            with open(self.path, "r", encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(obj, dict):
            return {}
        return {k: v for k, v in obj.items() if repo_id.is_identity(k) and isinstance(v, str) and "/" not in v}

    def save(self):
        data = (json.dumps(self.by_id, sort_keys=True, indent=0) + "\n").encode("utf-8")
        try:
            atomic_write(self.path, data, keep_prev=False)
        except OSError as exc:
            log.warning("could not save %s (%s); it is rebuilt at the next start", self.path, exc.strerror or exc)

    def of_path(self, path):
        """The identity of a project root (git runs the first time per path)."""
        ident = self.cache.get(path)
        if ident is None:
            ident = repo_id.project_identity(path) if os.path.isdir(path) else repo_id.identity_of_path(path)
            self.cache[path] = ident
        return ident

    def warm(self, path):
        """of_path(path) and, when its graph is known only under an earlier form, the identity of
        the path that graph records: every identity `resolve` reads, computed before the lock."""
        ident = self.of_path(path)
        if self.slug_of(ident) is None:
            for old in repo_id.earlier_forms(ident):
                owner = self._owner(old)
                if owner and owner != path:
                    self.of_path(owner)
        return ident

    def resolve(self, path):
        """(identity, slug of its graph or None): the graph indexed under path's identity, else one
        indexed under an earlier form that path may take (see the rules). Reads what `warm`
        computed."""
        ident = self.of_path(path)
        slug = self.slug_of(ident)
        if slug is not None:
            return ident, slug
        for old in repo_id.earlier_forms(ident):
            slug = self.slug_of(old)
            if slug is not None and self._free(old, slug, ident, path):
                return ident, slug
        return ident, None

    def _owner(self, ident):
        slug = self.slug_of(ident)
        return self._recorded(slug) if slug else None

    def _recorded(self, slug):
        """The project_path a slug's graph records (read once per daemon: the file may be large)."""
        if slug not in self.recorded:
            self.recorded[slug] = self.layout.recorded_project_path(slug)
        return self.recorded[slug]

    def _free(self, old, slug, ident, path):
        """True when the graph of `old` is path's to take: no other live checkout claims it."""
        owner = self._recorded(slug)
        if not owner or owner == path:
            return True
        now = self.of_path(owner)
        if may_take(old, ident, now):
            return True
        if (old, path) not in self.told:
            self.told.add((old, path))
            log.info("projects/%s stays the graph of %s (%s); %s (%s, the same root commit) starts its own graph",
                     slug, owner, now, path, ident)
        return False

    def holds(self, ident):
        """True when a graph on this machine is identified `ident`."""
        return self.slug_of(ident) is not None

    def slug_of(self, ident):
        """The slug of the graph of that identity, if its file is there."""
        slug = self.by_id.get(ident)
        if slug is None:
            return None
        f = self.layout.graph_file(slug)
        return slug if os.path.exists(f) or os.path.exists(f + ".prev") else None

    def record(self, ident, slug):
        """Index `slug` under `ident`, and under nothing else (one graph, one identity)."""
        stale = [k for k, v in self.by_id.items() if v == slug and k != ident]
        if self.by_id.get(ident) != slug or stale:
            for k in stale:
                del self.by_id[k]
            self.by_id[ident] = slug
            self.save()

    def unindexed(self):
        indexed = set(self.by_id.values())
        return [s for s in self.layout.project_slugs() if s not in indexed]


def may_take(old, ident, owner_now):
    """May a checkout identified `ident` take the graph indexed under its earlier form `old`, whose
    recorded checkout is now identified `owner_now`? Yes when that checkout is the same repository
    or no longer claims the graph (gone, another repository); no when it still is `old` or would
    take `old` itself (a template's other clone)."""
    if owner_now == ident:
        return True
    return owner_now != old and old not in repo_id.earlier_forms(owner_now)


CARRIED = "carried-to.jsonl"  # in an earlier identity's folder: {"digest", "to"} per fold (merged by union)
_seen = {}  # (old folder, new identity) -> the old folder's files' stat when last looked at


def carry_over(folder, ident, taken):
    """Fold the personal remote's folder of an earlier form of `ident` (`folder`/<old>/, written by
    a machine that still knows the repository by it) into `folder`/<ident>/: each `.jsonl` file's
    lines are appended to the new folder's file of that name (those files merge several lines of
    one key by their rule; the bridge writes them back clean). Not when `taken(old)` (a graph on
    this machine still holds that identity), nor when the old folder was carried to another
    identity first (CARRIED, in the old folder, says to which: the lexically first if two machines
    raced); the same bytes are folded once. Returns the forms folded."""
    done = []
    for old in repo_id.earlier_forms(ident):
        src = os.path.join(folder, old)
        if not os.path.isdir(src) or os.path.islink(src) or taken(old):
            continue
        try:
            names = sorted(n for n in os.listdir(src) if n.endswith(".jsonl") and n != CARRIED
                           and os.path.isfile(os.path.join(src, n)) and not os.path.islink(os.path.join(src, n)))
            if _seen.get((src, ident)) == _stats(src, names):
                continue
            if _fold_folder(src, os.path.join(folder, ident), old, ident, names):
                done.append(old)
            _seen[(src, ident)] = _stats(src, names)
        except OSError as exc:
            log.warning("personal remote: could not carry projects/%s over to projects/%s (%s); tried again at "
                        "the next pass", old, ident, exc.strerror or exc)
    return done


def _stats(src, names):
    out = []
    for n in names + [CARRIED]:
        try:
            st = os.stat(os.path.join(src, n))
            out.append((n, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append((n, None, None))
    return tuple(out)


def _claims(src):
    """[(to, digest)] of the old folder's CARRIED lines (a bad line is skipped)."""
    out = []
    for ln in _read(os.path.join(src, CARRIED)).splitlines():
        try:
            rec = json.loads(ln.decode("utf-8"))
        except ValueError:
            continue
        if isinstance(rec, dict) and repo_id.is_identity(rec.get("to")) and isinstance(rec.get("digest"), str):
            out.append((rec["to"], rec["digest"]))
    return out


def _fold_folder(src, dst, old, ident, names):
    claims = _claims(src)
    first = min([to for to, _ in claims] or [ident])
    if first != ident:
        return False  # another repository of this root commit took it (a template's other clone)
    data = {n: _read(os.path.join(src, n)) for n in names}
    digest = hashlib.sha256(b"".join(n.encode() + b"\0" + d + b"\0" for n, d in data.items())).hexdigest()
    if (ident, digest) in claims:
        return False
    for n, d in data.items():
        if not d.strip():
            continue
        path = os.path.join(dst, n)
        mine = _read(path)
        if len(mine) + len(d) + 1 > MAX_FILE:
            log.warning("personal remote: projects/%s/%s not carried over: the two would exceed %d bytes", old, n,
                        MAX_FILE)
            continue
        atomic_write(path, mine + (b"\n" if mine and not mine.endswith(b"\n") else b"") + d, keep_prev=False)
    marks = _read(os.path.join(src, CARRIED))
    line = json.dumps({"digest": digest, "to": ident}, sort_keys=True).encode("utf-8") + b"\n"
    atomic_write(os.path.join(src, CARRIED), marks + (b"\n" if marks and not marks.endswith(b"\n") else b"") + line,
                 keep_prev=False)
    log.info("personal remote: projects/%s (the same repository under an earlier identity) carried over into "
             "projects/%s", old, ident)
    return True


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def own_kg(path):
    """A checkout whose own root holds `.kg/` is its own graph (its branch's knowledge)."""
    return bool(path) and os.path.isdir(os.path.join(path, ".kg"))


def _merged(mine, theirs, record, fields):
    """`mine` with the content of both versions merged by the one merge rule (kg/core/kg_format.py)."""
    merged = dict(mine)
    merged.update(fields(kg_format.merge_versions([record(mine), record(theirs)])))
    return merged


def merge_graph_into(into, other):
    """Merge Graph `other` into Graph `into` (in memory) by the one merge rule; the number of
    nodes and edges that changed in `into`. A node's personal state merges by kg/core/personal.py."""
    changed = 0
    for nid, node in other.nodes.items():
        mine = into.nodes.get(nid)
        merged = dict(node)
        if mine is not None:
            merged = _merged(mine, node, kg_format.node_record, kg_format.node_fields)
            personal.apply(merged, personal.merge(personal.record(mine, None, mine.get("_write_ts") or 0),
                                                  personal.record(node, None, node.get("_write_ts") or 0)))
        if merged != mine:
            into.put_node(merged)
            changed += 1
    for key, edge in other.edges.items():
        mine = into.edges.get(key)
        merged = dict(edge) if mine is None else _merged(mine, edge, kg_format.edge_record, kg_format.edge_fields)
        if merged != mine:
            into.put_edge(merged)
            changed += 1
    progress = other.meta.get("progress")
    if isinstance(progress, dict):
        into.meta.setdefault("progress", {})
        for task, state in progress.items():
            into.meta["progress"].setdefault(task, state)
    return changed


def retire(layout, slug, into_slug, now=None):
    """Move a merged graph's files aside (kept, never deleted)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now or time.time()))
    f = layout.graph_file(slug)
    for src in (f, f + ".prev"):
        if os.path.exists(src):
            os.replace(src, "%s.merged-%s" % (src, stamp))
    log.info("project graph projects/%s merged into projects/%s (the same repository); its file is kept as "
             "graph.json.merged-%s", slug, into_slug, stamp)

