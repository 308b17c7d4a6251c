"""What a mistyped command, option or choice is answered with: one line naming the closest real
one ("did you mean status?") and, for a command, all of them. Loaded only on a typo."""

import re


def edit_distance(a, b):
    """Insertions, deletions, substitutions and swaps of neighbours ("statsu" -> "status": 1)."""
    prev2, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def closest(word, choices):
    """The choice nearest to a typo, or None when none is near (at most a third of it differs)."""
    best = min(choices, key=lambda c: (edit_distance(word.lower(), c), not c.startswith(word[:1])), default=None)
    if best is None or edit_distance(word.lower(), best) > max(1, len(word.lstrip("-")) // 3):
        return None
    return best


def unknown_option(option, known):
    near = closest(option, sorted(set(known)))
    return "unknown option %s%s" % (option, "; did you mean %s?" % near if near else " (try `kgd --help`)")


def unknown_command(word, commands):
    near = closest(word, commands)
    return "unknown command %r%s Commands: %s." % (word, "; did you mean %s?" % near if near else ".",
                                                  ", ".join(commands))


_INVALID_CHOICE = re.compile(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)\Z")


def invalid_choice(message):
    """argparse's "invalid choice" as one line with the closest choice, or None for other messages."""
    m = _INVALID_CHOICE.match(message)
    if not m:
        return None
    choices = re.findall(r"'([^']*)'", m.group(3))
    near = closest(m.group(2), choices)
    return "%s: unknown choice %r%s Choices: %s." % (m.group(1), m.group(2), "; did you mean %s?" % near
                                                    if near else ".", ", ".join(choices))
