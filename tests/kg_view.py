"""What a repository's `.kg/` holds, read as kgd reads it (contract section 9, "Living with git"):
every file of a kind (`nodes.jsonl` and each `changes/NAME.nodes.jsonl`; the same for edges) merged
into one view by kgd's own code (kg/travel/team_sync.py Shared.read_parsed), so a test states a
property of the knowledge, not of one file's bytes."""

import os
import time

from kg.core import kg_format
from kg.travel import team_folder
from kg.travel.team_sync import Shared


def records(root, kind="node", now=None):
    """{key: record} of every file of `kind` merged (tombstones included)."""
    if not os.path.isdir(team_folder.kg_dir(str(root))):
        return {}
    return Shared(None, str(root)).read_parsed(time.time() if now is None else now)[2][kind]


def live(root, kind="node", now=None):
    """The live records of the merged view (tombstones left out)."""
    return {k: r for k, r in records(root, kind, now).items() if not kg_format.is_tombstone(r)}


def problems(root):
    return Shared(None, str(root)).read_parsed()[4]


def files(root):
    """{path relative to .kg/: bytes} of every data file under `.kg/` (base and changes/)."""
    out, d = {}, team_folder.kg_dir(str(root))
    for paths in team_folder.layout_files(str(root)).values():
        for p in paths:
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, d)] = f.read()
    return out


def lines(root, key, kind="node"):
    """Every line of one key in every file, as written (several versions before a merge)."""
    out = []
    for data in files(root).values():
        out += [rec for rec in kg_format.parse(data, kind)[0].values() if kg_format.key_of(rec) == key]
    return out


def raw_count(root, needle, kind=None):
    """How many times `needle` (bytes) occurs in the data files together (of `kind` only, if given)."""
    suffix = {None: "", "node": "nodes.jsonl", "edge": "edges.jsonl"}[kind]
    return sum(data.count(needle) for name, data in files(root).items() if name.endswith(suffix))


def change_files(root):
    """The names under `.kg/changes/` (this layout's files of knowledge not yet folded)."""
    d = team_folder.changes_dir(str(root))
    return sorted(os.listdir(d)) if os.path.isdir(d) else []
