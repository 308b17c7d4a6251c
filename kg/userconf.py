"""Editing a person's JSON settings file (Claude Desktop's config, Claude Code's settings.json).

Rules owned here: a file that is not valid JSON, or not a JSON object, is refused with one clear
line and left untouched; a change is written whole (storage.atomic_write, mode 0600, no .prev)
after the old bytes are copied to <file>.bak-<YYYYmmdd-HHMMSS> (unless the caller knows they hold
nothing of the person's own); writing the same content again changes nothing.
"""

import json
import os
import stat
import time

from .console import CommandError
from .jsonrpc import strict_loads
from .storage import atomic_write


def load(path):
    """(the file's object, its raw bytes or None when it does not exist). An empty file reads as {}."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise CommandError("cannot read %s: %s" % (path, exc.strerror or exc))
    try:
        conf = strict_loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError("%s is not valid JSON (%s); fix it or move it aside, then run this again"
                           % (path, str(exc)[:120]))
    if not isinstance(conf, dict):
        raise CommandError("%s does not hold a JSON object (it holds a %s); fix it or move it aside, then run "
                           "this again" % (path, type(conf).__name__))
    return conf, raw


def encode(conf):
    return (json.dumps(conf, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def save(path, conf, raw, backup=True):
    """Write conf to path, keeping raw (the bytes read) as a dated backup. -> the backup's path.
    An empty conf with nothing to back up removes the file (it held only what we put there).
    A symlink is followed (the file it names is replaced, the link stays); a file without write
    permission is refused, not replaced behind the person's back."""
    path = os.path.realpath(path)
    if raw is not None and os.path.exists(path) and not os.stat(path).st_mode & stat.S_IWUSR:
        raise CommandError("%s is read-only; make it writable (chmod u+w) and run this again" % path)
    if not backup:
        raw = None
    if not conf and raw is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    backup = None
    if raw is not None:
        backup = base = "%s.bak-%s" % (path, time.strftime("%Y%m%d-%H%M%S"))
        n = 1
        while os.path.exists(backup):
            backup = "%s-%d" % (base, n)
            n += 1
        atomic_write(backup, raw, keep_prev=False)
    atomic_write(path, encode(conf), keep_prev=False)
    return backup
