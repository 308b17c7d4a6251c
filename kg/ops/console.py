"""What an operator command prints. Rules owned here: results go to stdout, one line each;
warnings and errors go to stderr as one line starting with "kgd: "; a CommandError is the one
clear line a command exits non-zero with."""

import sys


class CommandError(Exception):
    """One clear line for the operator; the command exits non-zero."""


def say(text="", stream=None):
    (stream or sys.stdout).write(text + "\n")


def warn(text):
    sys.stderr.write("kgd: %s\n" % text)


def plural(n, word, words=None):
    """'1 node', '2 nodes'."""
    return "%d %s" % (n, word if n == 1 else (words or word + "s"))
