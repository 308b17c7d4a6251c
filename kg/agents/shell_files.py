"""The files a shell command reads, or a patch edits (file recall for agents that read files
through their shell tool, contract section 11), and the parts of a file an edit is in (contract
section 12's `PATH#NAME`). Pure but for one os.path.isfile per candidate and one bounded read of
an edited file.

Rules owned here:
- Conservative: a command over MAX_COMMAND characters, one shlex cannot split, or one whose
  words are not understood names no file. Only the readers in READERS (cat, sed -n, head, tail,
  less, nl, grep, rg, ...) are looked at, each simple command of a list or pipeline on its own
  (`;`, `&&`, `||`, `|`, newlines), through one `bash -lc "..."` wrapper and `cd DIR &&`.
- A word is a file only when it names an existing regular file (relative to the command's
  directory): a number, a pattern or a sed script that was taken for a path names nothing.
- A patch (`*** Begin Patch` ... `*** Update File: PATH`) names the files it adds, updates or
  moves to; a patch inside a shell command (`apply_patch <<'EOF'`) too.
- At most MAX_FILES files, in the order named, without repeats.
- The part an edit is in: where the edit's new text (else its old text) stands in the file, the
  innermost definition around it by its keyword and indentation (`def`, `class`, `function`,
  `func`, `fn`, ...), named `Class.method` inside a class; a file over PART_FILE_MAX bytes, or
  text not found, names no part.
"""

import os
import re
import shlex

from ..core import staleness

MAX_COMMAND = 8192
MAX_FILES = 3
MAX_WORDS = 400
PATCH_BEGIN = "*** Begin Patch"
_PATCH_HEADS = ("*** Update File: ", "*** Add File: ", "*** Move to: ")
_SEPARATORS = frozenset((";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"))
_REDIRECTS = frozenset((">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "2>", "2>>"))
_WRAPPERS = frozenset(("bash", "sh", "zsh", "dash", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/bin/zsh"))

# reader -> (options that take a value as the next word, does the first operand name a pattern or
# script rather than a file)
READERS = {
    "cat": ((), False), "bat": (("--line-range", "-r", "--language", "-l"), False),
    "less": (("-b", "-h", "-j", "-p", "-t", "-x", "-y", "-z"), False), "more": ((), False),
    "head": (("-n", "-c", "--lines", "--bytes"), False), "tail": (("-n", "-c", "--lines", "--bytes"), False),
    "nl": (("-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"), False),
    "sed": (("-e", "-f", "--expression", "--file", "-l", "--line-length"), True),
    "grep": (("-e", "-f", "-m", "-A", "-B", "-C", "--regexp", "--file", "--max-count", "-d", "-D", "--label"), True),
    "egrep": (("-e", "-f", "-m", "-A", "-B", "-C"), True), "fgrep": (("-e", "-f", "-m", "-A", "-B", "-C"), True),
    "rg": (("-e", "-f", "-g", "-t", "-T", "-m", "-A", "-B", "-C", "-M", "-j", "--glob", "--type", "--type-not",
            "--regexp", "--file", "--max-count", "--max-columns", "--threads", "--iglob", "--sort",
            "--sortr", "--max-depth", "--context", "--after-context", "--before-context"), True),
}
_SCRIPT_OPTIONS = frozenset(("-e", "-f", "--expression", "--file", "--regexp"))


def command_files(command, cwd):
    """Existing files a shell command (a string, or an argv list) reads, at most MAX_FILES."""
    if isinstance(command, list):
        if not all(isinstance(w, str) for w in command) or sum(len(w) + 1 for w in command) > MAX_COMMAND:
            return []
        if len(command) == 3 and command[0] in _WRAPPERS and command[1] in ("-c", "-lc", "-ic"):
            command = command[2]
        else:
            command = " ".join(shlex.quote(w) for w in command)
    if not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND:
        return []
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        return []
    if PATCH_BEGIN in command:
        return patch_files(command, cwd)
    out = []
    _script_files(command, cwd, out, depth=0)
    return out


def patch_files(patch, cwd):
    """Existing files a patch adds, updates or moves to, at most MAX_FILES."""
    if not isinstance(patch, str) or len(patch) > 4 * 1024 * 1024 or not isinstance(cwd, str):
        return []
    out = []
    for line in patch.splitlines():
        for head in _PATCH_HEADS:
            if line.startswith(head):
                _add(out, line[len(head):].strip(), cwd)
        if len(out) >= MAX_FILES:
            break
    return out


def _add(out, word, cwd):
    if not word or len(word) > 4096 or "\0" in word or len(out) >= MAX_FILES:
        return
    path = os.path.normpath(word if os.path.isabs(word) else os.path.join(cwd, word))
    try:
        if path not in out and os.path.isfile(path):
            out.append(path)
    except (OSError, ValueError):
        pass


def _split(script):
    lex = shlex.shlex(script, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    words = []
    try:
        for w in lex:
            words.append(w)
            if len(words) > MAX_WORDS:
                return None
    except ValueError:  # an unclosed quote: not understood
        return None
    return words


def _script_files(script, cwd, out, depth):
    words = _split(script.replace("\n", " ; "))
    if words is None:
        return
    simple = []
    for w in words + [";"]:
        if w in _SEPARATORS:
            if simple:
                cwd = _simple_files(simple, cwd, out, depth)
                if cwd is None:
                    return
            simple = []
        else:
            simple.append(w)


def _simple_files(words, cwd, out, depth):
    """Files of one simple command; the directory after it (`cd`), None when lost."""
    while words and "=" in words[0] and not words[0].startswith("="):  # NAME=value prefixes
        words = words[1:]
    if not words:
        return cwd
    name = os.path.basename(words[0])
    if name == "cd":
        if len(words) != 2 or words[1].startswith("-") or "$" in words[1] or words[1].startswith("~"):
            return None
        return os.path.normpath(os.path.join(cwd, words[1]))
    if words[0] in _WRAPPERS and len(words) == 3 and words[1] in ("-c", "-lc", "-ic") and depth == 0:
        _script_files(words[2], cwd, out, depth + 1)
        return cwd
    spec = READERS.get(name)
    if spec is None:
        return cwd
    takes_value, pattern_first = spec
    operands, script_given, skip = [], False, False
    it = iter(words[1:])
    for w in it:
        if w in _REDIRECTS:
            next(it, None)
            continue
        if skip:
            skip = False
            continue
        if w == "--":
            operands.extend(it)
            break
        if w.startswith("-") and len(w) > 1:
            opt = w.split("=", 1)[0]
            if opt in takes_value and "=" not in w:
                skip = True
            if opt in _SCRIPT_OPTIONS or (name == "sed" and opt.startswith("-") and not opt.startswith("--")
                                          and opt[1:2] in ("e", "f")):
                script_given = True
            continue
        operands.append(w)
    if pattern_first and not script_given:
        operands = operands[1:]
    for w in operands:
        if "$" in w or "*" in w or "?" in w or w.startswith("~"):
            continue
        _add(out, w, cwd)
    return cwd


PART_FILE_MAX = 2 * 1024 * 1024
_DEF = re.compile(r"^([ \t]*)(?:export\s+)?(?:async\s+|pub\s+|static\s+|public\s+|private\s+)*"
                  r"(def|class|function|func|fn|interface|struct|impl|trait|module)\s+([A-Za-z_$][\w$]*)")


def edited_parts(path, snippets):
    """Names of the parts (`NAME`, `Class.NAME`) the first found of `snippets` (texts an edit wrote
    or replaced) stands in, innermost first, then the class around it; [] when none is found."""
    return edit_site(path, snippets)[0]


def edit_site(path, snippets):
    """(edited_parts, {NAME: (first, last)} of every part of the file: staleness.part_spans) for
    one bounded read of the file; ([], {}) when no part is found."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > PART_FILE_MAX:
            return [], {}
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return [], {}
    for snip in snippets:
        if isinstance(snip, str) and snip.strip():
            at = text.find(snip)
            if at >= 0:
                names = part_at(text, text.count("\n", 0, at))
                return names, (staleness.part_spans(text, path) if names else {})
    return [], {}


def part_at(text, line):
    """The definitions around a line (0-based) of a source text: [innermost qualified name, ...
    outer ones], e.g. ["Option.__init__", "Option"]."""
    lines = text.split("\n")
    line = max(0, min(line, len(lines) - 1))
    here = lines[line].expandtabs()
    # a definition encloses the line when it is indented less (a def line encloses itself)
    indent = len(here) - len(here.lstrip()) + (1 if _DEF.match(lines[line]) else 0) if here.strip() else 10 ** 6
    chain = []
    for k in range(line, -1, -1):
        m = _DEF.match(lines[k])
        if not m:
            continue
        ind = len(m.group(1).expandtabs())
        if ind < indent:
            chain.append(m.group(3))
            indent = ind
            if ind == 0:
                break
    names, out = list(reversed(chain)), []
    for k in range(len(names), 0, -1):
        out.append(".".join(names[:k]))
    return out
