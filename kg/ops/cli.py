"""The command line (contract section 1); the settings themselves are kg/ops/config.py's.

`kgd` (or `kgd serve`) runs the daemon. Bad configuration exits non-zero with one clear line
and no traceback; so does a mistyped command or option, naming the real ones and the closest.
The operator commands (OPERATOR_COMMANDS) are registered and run by kg/ops/commands.py, which
`serve` never imports.
"""

import argparse
import sys

from .. import __version__
from .config import ConfigError, resolve_config


def add_common(p):
    p.add_argument("--host", metavar="ADDR", help="bind address (KG_HOST; 127.0.0.1)")
    p.add_argument("--port", metavar="N", help="HTTP port, 0 = any free one (KG_HTTP_PORT; 8765)")
    p.add_argument("--root", metavar="DIR", help="storage root (KG_STORAGE_ROOT; ~/.knowledge-graph)")
    p.add_argument("--max-tokens", dest="max_tokens", metavar="N",
                   help="active-graph budget per graph, in tokens (KG_MAX_TOKENS; 5000)")
    p.add_argument("--log-level", dest="log_level", metavar="LEVEL",
                   help="DEBUG, INFO, WARNING or ERROR (KG_LOG_LEVEL; INFO)")
    p.add_argument("--token", metavar="TOKEN",
                   help="require Authorization: Bearer TOKEN on every request (KG_TOKEN; none)")
    p.add_argument("--structured-output", dest="structured_output", action="store_true", default=None,
                   help="tool results carry structuredContent (KG_STRUCTURED_OUTPUT=1/0; off)")


# Options of add_common that take a value (the rest are flags), and the top level's own.
VALUE_OPTIONS = ("--host", "--port", "--root", "--max-tokens", "--log-level", "--token")
GLOBAL_FLAGS = ("--structured-output", "--version", "-h", "--help")


class Parser(argparse.ArgumentParser):
    """argparse, with one line naming the real commands and options (and the closest) on a typo."""

    def error(self, message):
        from . import suggest  # only on a typo

        if message.startswith("unrecognized arguments:"):
            words = message.split(":", 1)[1].split()
            options = [w for w in words if w.startswith("-")]
            if options:
                known = [o for a in self._actions for o in a.option_strings]
                known += [o for p in _chosen_subparsers(self) for a in p._actions for o in a.option_strings]
                die(suggest.unknown_option(options[0].split("=", 1)[0], known))
            die("unexpected argument %r (try `kgd --help`)" % words[0])
        die(suggest.invalid_choice(message) or "%s (try `%s --help`)" % (message, self.prog))


def _chosen_subparsers(parser):
    return [p for p in getattr(parser, "kgd_chosen", ()) if p is not None]


def find_command(argv):
    """The subcommand named on the command line (None: serve), or exit on an unknown command or
    on an unknown option before it."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if a.startswith("-") and a != "-":
            name = a.split("=", 1)[0]
            exact = [o for o in VALUE_OPTIONS + GLOBAL_FLAGS if o == name]
            prefixed = [o for o in VALUE_OPTIONS + GLOBAL_FLAGS if o.startswith(name) and name.startswith("--")]
            match = exact or (prefixed if len(prefixed) == 1 else [])
            if not match:
                if len(prefixed) > 1:
                    die("option %s is ambiguous: %s" % (name, ", ".join(prefixed)))
                from . import suggest

                die(suggest.unknown_option(name, VALUE_OPTIONS + GLOBAL_FLAGS))
            if match[0] in ("-h", "--help", "--version"):
                return None
            i += 2 if match[0] in VALUE_OPTIONS and "=" not in a else 1
            continue
        if a != "serve" and a not in OPERATOR_COMMANDS:
            from . import suggest

            die(suggest.unknown_command(a, ("serve",) + OPERATOR_COMMANDS))
        return a
    return None


def build_parser():
    parser = Parser(prog="kgd", description="kgd: knowledge-graph memory daemon for AI coding agents")
    parser.add_argument("--version", action="version", version="kgd " + __version__)
    add_common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                title="commands (default: serve)")
    p = sub.add_parser("serve", help="run the daemon (the default)")
    add_common(p)
    for action in p._actions:  # flags given before `serve` must not be reset by its defaults
        if action.dest != "help":
            action.default = argparse.SUPPRESS
    return parser, sub


def die(message, code=2):
    sys.stderr.write("kgd: %s\n" % message)
    sys.exit(code)


def serve(cfg):
    """Run the daemon in the foreground (kg/serve/app.py wires it together)."""
    from ..serve.app import run
    return run(cfg)


# Operator subcommands live in kg/ops/commands.py, which the daemon itself never needs: `serve`
# does not import it (about 2 MB less resident memory for the background service).
OPERATOR_COMMANDS = ("status", "start", "stop", "stdio", "export", "import", "bundle", "doctor", "desktop",
                     "show", "search", "hook", "hooks", "sync", "share", "diff", "fold")


def help_argv(argv):
    """`kgd help` is `kgd --help`; `kgd help COMMAND` is `kgd COMMAND --help`."""
    if argv[:1] == ["help"]:
        return argv[1:2] + ["--help"]
    return argv


def main(argv=None):
    argv = help_argv(list(sys.argv[1:] if argv is None else argv))
    chosen = find_command(argv)
    parser, sub = build_parser()
    commands = None
    if chosen in OPERATOR_COMMANDS or any(a in ("-h", "--help") for a in argv):
        from . import commands
        commands.register(sub, add_common)
    parser.kgd_chosen = [sub.choices.get(chosen)] if chosen else []
    args = parser.parse_args(argv)
    command = args.command or "serve"
    try:
        cfg = resolve_config(args)
    except ConfigError as exc:
        if command == "hook":  # a hook must never fail its caller (Claude Code)
            sys.stderr.write("kgd hook: %s\n" % exc)
            return 0
        die(str(exc))
    if command == "serve":
        return serve(cfg)
    return commands.run(command, args, cfg)
