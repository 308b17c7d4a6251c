"""Editing a person's settings file (Claude Desktop's config, Claude Code's, Gemini CLI's, Copilot
CLI's JSON; a marked block of Codex's TOML).

Rules owned here:
- A JSON file that is not valid JSON, or not a JSON object, is refused with one clear line and left
  untouched; so is a file without write permission (it is never replaced behind the person's back).
- The new content is written in the person's own style (indentation, separators, \\u escapes, final
  newline: whichever reproduces the bytes read) and keeps the file's mode; a symlink is followed
  (the file it names is replaced, the link stays). Writes are atomic (temp file, fsync, rename).
- A backup <file>.bak-<YYYYmmdd-HHMMSS> of the old bytes is kept only when the caller asks for one
  or, with backup="if-lossy", when the rewrite could not reproduce the person's own formatting (so
  something of theirs would otherwise be lost). Writing the same content again changes nothing.
- A file left with nothing once kgd's entries are out is removed, and both the dry run and the real
  run say so in the same words (emptied_line), never that it "would read {}".
"""

import json
import os
import stat
import time

from ...core.text import strict_loads
from ..console import CommandError

NEW_FILE_MODE = 0o600
_SEPARATORS = ((",", ": "), (", ", ": "), (",", ":"))


def read_bytes(path):
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CommandError("%s is a folder, not a settings file; move it aside, then run this again" % path)
    except OSError as exc:
        raise CommandError("cannot read %s: %s" % (path, exc.strerror or exc))


def load(path):
    """(the file's object, its raw bytes or None when it does not exist). An empty file reads as {}."""
    raw = read_bytes(path)
    if raw is None:
        return {}, None
    try:
        conf = strict_loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError("%s is not valid JSON (%s); fix it or move it aside, then run this again"
                           % (path, str(exc)[:120]))
    if not isinstance(conf, dict):
        raise CommandError("%s does not hold a JSON object (it holds a %s); fix it or move it aside, then run "
                           "this again" % (path, type(conf).__name__))
    return conf, raw


def _indent_of(text):
    """The indentation unit of a JSON text: None (one line), a number of spaces, or a tab."""
    lines = text.strip().splitlines()
    for line in lines[1:]:
        lead = line[:len(line) - len(line.lstrip(" \t"))]
        if lead:
            return "\t" if lead.startswith("\t") else len(lead)
    return None


def _dump(conf, indent, separators, ascii_, newline):
    return json.dumps(conf, indent=indent, separators=separators, ensure_ascii=ascii_) + ("\n" if newline else "")


def style(raw):
    """The json.dumps settings that reproduce raw (the first that does), else the closest guess."""
    if not raw or not raw.strip():
        return {"indent": 2, "separators": _SEPARATORS[0], "ascii_": False, "newline": True}
    text = raw.decode("utf-8")
    indent = _indent_of(text)
    newline = text.endswith("\n")
    conf = json.loads(text)
    for separators in _SEPARATORS:
        for ascii_ in (False, True):
            if _dump(conf, indent, separators, ascii_, newline) == text:
                return {"indent": indent, "separators": separators, "ascii_": ascii_, "newline": newline}
    return {"indent": indent, "separators": _SEPARATORS[0 if indent is not None else 1],
            "ascii_": "\\u" in text and not any(ord(c) > 127 for c in text), "newline": newline}


def encode(conf, raw=None):
    """conf as bytes, in the style of raw (the person's file) when given."""
    return _dump(conf, **style(raw)).encode("utf-8")


def reproducible(raw):
    """Would rewriting raw in its detected style give the same bytes back?"""
    if raw is None or not raw.strip():
        return True
    try:
        return encode(json.loads(raw.decode("utf-8")), raw) == raw
    except (UnicodeDecodeError, ValueError):
        return False


def writable_target(path, raw):
    """The real file behind path (symlinks followed); refused when it exists without write permission."""
    path = os.path.realpath(path)
    if raw is not None and os.path.exists(path) and not os.stat(path).st_mode & stat.S_IWUSR:
        raise CommandError("%s is read-only; make it writable (chmod u+w) and run this again" % path)
    return path


def write_bytes(path, data, mode=None):
    """Replace path with data atomically, keeping the file's mode (new files: 0600, folders 0700)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o700)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = NEW_FILE_MODE
    tmp = os.path.join(folder, ".%s.tmp-%s" % (os.path.basename(path), os.urandom(4).hex()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def keep_backup(path, raw):
    """Copy raw to <path>.bak-<date> (a new name each time). -> the backup's path."""
    backup = base = "%s.bak-%s" % (path, time.strftime("%Y%m%d-%H%M%S"))
    n = 1
    while os.path.exists(backup):
        backup = "%s-%d" % (base, n)
        n += 1
    write_bytes(backup, raw, mode=NEW_FILE_MODE)
    return backup


def emptied_line(path, dry_run=False):
    """The line said for a file removed because kgd's entries were all it held, by the dry run and the
    real run alike (install.sh's dry run reads it to tell which folders the real run leaves empty)."""
    return "%s %s (nothing else in it)" % ("would remove" if dry_run else "removed", path)


def save(path, conf, raw, backup=True):
    """Write conf to path in the style of raw (the bytes read). -> the backup's path, or None.

    backup: True (keep raw as a dated backup), False (never) or "if-lossy" (only when the person's
    formatting cannot be reproduced). An empty conf with nothing to back up removes the file (it held
    only what kgd put there)."""
    path = writable_target(path, raw)
    if backup == "if-lossy":
        backup = not reproducible(raw)
    if not conf and (raw is None or not backup):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    kept = keep_backup(path, raw) if backup and raw is not None else None
    write_bytes(path, encode(conf, raw))
    return kept
