"""The operator commands beside `serve`: their arguments (`register`) and their dispatch (`run`).

Each command lives in a module of its own, imported only when that command runs, so that a
short-lived command such as `kgd hook` loads no more than it needs:
status/start/stop (lifecycle), stdio, export/import (backup), bundle, doctor,
show/search (browse), hook, sync, share, diff/fold (review); in setup/, desktop and hooks (claude_hooks).
"""

import argparse
import importlib
import os

from .console import CommandError, warn

COMMANDS = {"status": "lifecycle:status", "start": "lifecycle:start", "stop": "lifecycle:stop",
            "stdio": "stdio:command", "export": "backup:export", "import": "backup:import_",
            "bundle": "bundle:bundle", "doctor": "doctor:doctor", "desktop": "setup.desktop:desktop",
            "show": "browse:show", "search": "browse:search", "hook": "hook:hook", "hooks": "setup.claude_hooks:hooks",
            "sync": "sync:sync", "share": "share:share", "diff": "review:diff", "fold": "review:fold"}


def _common(p, add_common):
    """The shared flags, without defaults: `kgd --port 9000 status` keeps the 9000 given
    before the subcommand (a subparser's None default would overwrite it)."""
    before = len(p._actions)
    add_common(p)
    for action in p._actions[before:]:
        action.default = argparse.SUPPRESS
    return p


def register(sub, add_common):
    def command(name, help):
        return _common(sub.add_parser(name, help=help, description=help), add_common)

    p = command("status", "is the daemon up: version, port, root, graphs, sessions")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p = command("start", "start the daemon in the background unless it runs")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for it to answer (10)")
    p = command("stop", "stop the daemon serving the root (SIGTERM, then wait)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for it to exit (20)")
    command("stdio", "MCP over stdin/stdout, forwarded to the daemon (started if needed)")
    p = command("export", "write the graphs (all states, all fields) as one JSON document")
    p.add_argument("--project", action="append", metavar="P", help="only this project (its folder or slug); repeatable")
    p.add_argument("--no-user", action="store_true", help="leave the user graph out")
    p.add_argument("-o", "--output", help="write to this file (mode 0600) instead of stdout")
    p.add_argument("--with-flagged", action="store_true",
                   help="keep what looks like a credential (left out by default, named on stderr)")
    p = command("import", "merge an export into the graphs")
    p.add_argument("file", help="a file written by `kgd export` (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p = command("bundle", "build a single-file kgd.pyz (stdlib zipapp)")
    p.add_argument("-o", "--output", help="where to write it (default ~/.cache/kgd/kgd.pyz, never the current folder)")
    p.add_argument("--python", help="the #! interpreter line (/usr/bin/env python3)")
    p.add_argument("--no-bytecode", action="store_true", help="sources only (smaller, slower first start)")
    p = command("doctor", "check Python, port, storage, service, client and hooks setup")
    p.add_argument("--skip-service", action="store_true", help="do not look at the systemd / launchd service")
    p.add_argument("--skip-client", action="store_true", help="do not look at the Claude configuration")
    p = command("desktop", "add kgd (via stdio) to Claude Desktop's config")
    p.add_argument("--config", help="the config file (default: Claude Desktop's, per OS)")
    p.add_argument("--name", default="kg", help="the server's name in mcpServers (kg)")
    p.add_argument("--python", help="the python to run (default: this one)")
    p.add_argument("--kgd", help="the kgd.py or kgd.pyz to run (default: this one)")
    p.add_argument("--remove", action="store_true", help="remove the entry (only if it runs --kgd, when given)")
    p.add_argument("--dry-run", action="store_true", help="show the entry, change nothing")
    p = command("show", "what an agent in this folder would read (kg_read), or the nodes named, in full")
    p.add_argument("ids", nargs="*", metavar="ID", help="node ids to show in full (none: the whole read)")
    p.add_argument("--cwd", help="read as an agent working in this folder would (default: the current one)")
    p = command("search", "search the memory as kg_search does (user graph + this folder's project)")
    p.add_argument("words", nargs="+", metavar="WORD", help="the words to look for")
    p.add_argument("--cwd", help="search as from this folder (default: the current one)")
    p.add_argument("--limit", type=int, default=20, help="at most this many results (20)")
    p = command("hook", "an agent's command hook: forward its hook input (stdin) to the daemon, print the answer")
    p.add_argument("--agent", default="claude", help="the agent running it: claude, codex, gemini, copilot (claude)")
    p.add_argument("--event", help="the agent's event name, when its input carries none (Copilot CLI)")
    p = command("hooks", "install, remove or print kgd's hooks in Claude Code's ~/.claude/settings.json")
    p.add_argument("action", choices=("install", "remove", "print"), help="what to do")
    p.add_argument("--agent", choices=("claude", "codex", "gemini", "copilot", "all"), default="claude",
                   help="whose configuration: claude (~/.claude/settings.json, the default), codex (~/.codex), "
                        "gemini (~/.gemini), copilot (~/.copilot), or all (install: those found here)")
    p.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    p.add_argument("--settings", help="Claude Code's settings file (default: ~/.claude/settings.json)")
    p.add_argument("--no-permissions", action="store_true",
                   help="do not add permissions.allow entries for kgd's tools (Claude Code then asks before each call)")
    p = command("sync", "keep this memory on your other machines through a private git remote")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--remote", metavar="URL", help="set the remote (a git URL, or a path: a bare repository "
                   "on a mounted disk, created if missing) and sync now")
    g.add_argument("--off", action="store_true", help="stop syncing (ROOT/sync keeps its history)")
    p.add_argument("--no-wait", dest="no_wait", action="store_true", help="start the round, do not wait for it")
    p.add_argument("--json", action="store_true", help="the remote's status as one JSON object")
    p = command("diff", "what this clone's .kg/ would publish (against HEAD), or what A..B changed in team memory")
    p.add_argument("range", nargs="?", metavar="A..B", help="two commits, e.g. origin/main..HEAD (default: this clone)")
    p.add_argument("--path", metavar="PATH", help="a folder of the repository (default: the current one)")
    p.add_argument("--json", action="store_true", help="one JSON object: added, changed, deleted, stale, withheld")
    p.add_argument("--exit-code", dest="exit_code", action="store_true", help="exit 1 when the diff lists something")
    p = command("fold", "fold the committed files under .kg/changes/ into nodes.jsonl and edges.jsonl (then commit)")
    p.add_argument("path", nargs="?", metavar="PATH", help="a folder of the repository (default: the current one)")
    p = command("share", "share this project's memory with the team through its git repository (.kg/)")
    p.add_argument("path", nargs="?", metavar="PATH", help="a folder of the repository (default: the current one)")
    p.add_argument("--off", action="store_true",
                   help="stop reading and writing .kg/ for you (the graph keeps what it had)")


def run(command, args, cfg):
    module, function = COMMANDS[command].split(":")
    try:
        handler = getattr(importlib.import_module("." + module, __package__), function)
        return handler(args, cfg)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except CommandError as exc:
        warn(str(exc))
        return 1
    except OSError as exc:
        warn(os_error_line(exc, cfg))
        return 1


def os_error_line(exc, cfg):
    """One clear line for a refused file operation: no "[Errno N]"; a path under the storage root is
    said as the root being unusable (as `serve` says it), with what to do."""
    reason = exc.strerror or str(exc)
    where = exc.filename if isinstance(exc.filename, str) else None
    root = (cfg or {}).get("root")
    if where and root:
        path = os.path.abspath(where)
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return ("storage root %s is not usable: %s (%s); make it writable, or give kgd another root "
                    "(--root or KG_STORAGE_ROOT)" % (root, reason, path))
    return "%s: %s" % (where, reason) if where else reason
