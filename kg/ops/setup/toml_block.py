"""kgd's own block of lines in a person's TOML file (Codex CLI's ~/.codex/config.toml).

Python 3.9 has no TOML writer (and 3.11's tomllib only reads), and re-serialising a person's file
would lose their comments and layout, so kgd never rewrites the file: it owns one block between two
marker comments and edits only those lines.

Rules owned here:
- The block is appended at the end, after a blank line; an update replaces it where it is; removing
  it takes out its lines and the separation kgd added, giving the file back byte for byte.
- A table kgd would write that the file already has outside the block (say a [mcp_servers.kg] of
  the person's own) is refused, as is a begin marker without its end: TOML forbids a table twice,
  and kgd does not guess. Where tomllib exists (3.11+) a file that does not parse is refused, and
  the new text is parsed before it is written.
- The file is written as userconf writes (atomic, mode kept, symlink followed, read-only refused).
"""

import os
import re

from ..console import CommandError
from . import settings_file

BEGIN = "# >>> kgd >>> (written by `kgd hooks install`; `kgd hooks remove` takes it out)"
BEGIN_NO_EOL = "# >>> kgd >>> (the file had no final line break; kgd added one)"
END = "# <<< kgd <<<"


def _tomllib():
    try:
        import tomllib
        return tomllib
    except ImportError:  # Python < 3.11: no parser in the standard library
        return None


def check_parses(path, text):
    lib = _tomllib()
    if lib is None:
        return
    try:
        lib.loads(text)
    except lib.TOMLDecodeError as exc:
        raise CommandError("%s is not valid TOML (%s); fix it, then run this again" % (path, str(exc)[:120]))


def read(path):
    """(text, raw bytes or None when the file does not exist)."""
    raw = settings_file.read_bytes(path)
    if raw is None:
        return "", None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError("%s is not UTF-8 text; fix it, then run this again" % path)
    check_parses(path, text)
    return text, raw


def _find(path, text):
    """(start, end) character offsets of kgd's block (marker lines included) and whether the begin
    marker says kgd added the final line break, or None."""
    m = re.search(r"^(%s|%s)\n" % (re.escape(BEGIN), re.escape(BEGIN_NO_EOL)), text, re.M)
    if not m:
        return None
    e = re.compile(r"^%s(?:\n|\Z)" % re.escape(END), re.M).search(text, m.end())
    if not e:
        raise CommandError("%s has kgd's begin marker but not its end marker (%s); fix it by hand, then run "
                           "this again" % (path, END))
    return m.start(), e.end(), m.group(1) == BEGIN_NO_EOL


def block_body(text, path):
    """The lines between kgd's markers, or None when there is no block."""
    where = _find(path, text)
    if where is None:
        return None
    start, end, _ = where
    inner = text[start:end].split("\n", 1)[1]
    return inner[:inner.rfind(END)]


def without(text, path):
    """text without kgd's block (and the separation kgd added) -> (text, removed?)."""
    where = _find(path, text)
    if where is None:
        return text, False
    start, end, added_eol = where
    before, after = text[:start], text[end:]
    if before.endswith("\n\n"):
        before = before[:-1]  # the blank line kgd put before its block
    if added_eol and before.endswith("\n") and not after:
        before = before[:-1]
    return before + after, True


def with_block(text, body, path, tables):
    """text with kgd's block holding body (TOML lines ending in a newline) -> (text, changed?).
    tables: the table names body defines, refused when the file defines them outside the block."""
    if block_body(text, path) == body:
        return text, False
    rest, _ = without(text, path)
    for table in tables:
        parts = [re.escape(p) + '|"' + re.escape(p) + '"' for p in table.split(".")]
        header = r"^\s*\[\s*" + r"\s*\.\s*".join("(?:%s)" % p for p in parts) + r"\s*\]"
        if re.search(header, rest, re.M):
            raise CommandError("%s already has a [%s] table of its own; remove or rename it, then run this "
                               "again" % (path, table))
    where = _find(path, text)
    if where is not None:  # an update: the block stays where it is
        start, end, added_eol = where
        marker = BEGIN_NO_EOL if added_eol else BEGIN
        new = text[:start] + marker + "\n" + body + END + ("\n" if text[end - 1:end] == "\n" else "") + text[end:]
    elif not rest:
        new = BEGIN + "\n" + body + END + "\n"
    elif rest.endswith("\n"):
        new = rest + "\n" + BEGIN + "\n" + body + END + "\n"
    else:
        new = rest + "\n\n" + BEGIN_NO_EOL + "\n" + body + END + "\n"
    check_parses(path, new)
    return new, True


def save(path, text, raw):
    """Write text to path as userconf does; an empty text removes a file kgd's block was all of."""
    path = settings_file.writable_target(path, raw)
    if not text:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    settings_file.write_bytes(path, text.encode("utf-8"))
