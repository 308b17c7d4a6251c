"""`kgd desktop`: kgd's entry in Claude Desktop's config, which only spawns commands (the stdio
bridge). Rules owned here: where that config lives per OS; the entry runs this Python and this
kgd (`stdio`, plus --port / --root when not the defaults); every other entry is kept, and
removing the last entry of a file kgd created deletes the file.
"""

import json
import os
import sys

from ..client import entry_point, python_executable
from ..config import DEFAULT_PORT
from ..console import CommandError, say
from . import settings_file

SERVER_NAME = "kg"


def target_os():
    """darwin or linux; KGD_INSTALL_OS overrides (tests generate macOS files on Linux)."""
    forced = os.environ.get("KGD_INSTALL_OS", "").strip().lower()
    if forced in ("darwin", "macos", "mac"):
        return "darwin"
    if forced:
        return "linux"
    return "darwin" if sys.platform == "darwin" else "linux"


def desktop_config_path():
    home = os.path.expanduser("~")
    if target_os() == "darwin":
        return os.path.join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json")
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "Claude", "claude_desktop_config.json")


def desktop_entry(args, cfg):
    kgd = os.path.abspath(args.kgd) if args.kgd else entry_point()
    entry_args = [kgd, "stdio"]
    if cfg["port"] != DEFAULT_PORT:
        entry_args += ["--port", str(cfg["port"])]
    if getattr(args, "root", None):
        entry_args += ["--root", cfg["root"]]
    python = args.python or python_executable()
    return {"command": os.path.abspath(python) if os.sep in python else python, "args": entry_args}


def desktop(args, cfg):
    path = os.path.abspath(args.config) if args.config else desktop_config_path()
    conf, raw = settings_file.load(path)
    if not isinstance(conf.get("mcpServers", {}), dict):
        raise CommandError("%s: expected an object with an \"mcpServers\" object; fix it, then run this again" % path)
    servers = conf.setdefault("mcpServers", {})
    name = args.name
    if args.remove:
        cur = servers.get(name)
        if cur is None:
            say("no %r entry in %s; nothing to remove" % (name, path))
            return 0
        cur_args = cur.get("args") if isinstance(cur, dict) else None
        if args.kgd and not (isinstance(cur_args, list) and cur_args and cur_args[0] == os.path.abspath(args.kgd)):
            say("the %r entry in %s runs something else (%s); left as it is" % (name, path, cur_args))
            return 0
        del servers[name]
        action = "removed the %r entry from" % name
        if conf == {"mcpServers": {}}:  # it held nothing but this entry (kgd desktop created it)
            if not args.dry_run:
                os.unlink(path)
            say("%s %s" % (("would have " if args.dry_run else "") + action, path))
            say(settings_file.emptied_line(path, args.dry_run))
            return 0
        if args.dry_run:
            say("would have %s %s; the file would read:" % (action, path))
            say(settings_file.encode(conf, raw).decode("utf-8").rstrip())
            return 0
    else:
        entry = desktop_entry(args, cfg)
        if servers.get(name) == entry:
            say("Claude Desktop already has the %r entry in %s; unchanged" % (name, path))
            return 0
        action = "%s the %r entry in" % ("updated" if name in servers else "added", name)
        servers[name] = entry
    if args.dry_run:
        say("would have %s %s:" % (action, path))
        say(json.dumps({"mcpServers": {name: servers.get(name)}}, indent=2))
        return 0
    backup = settings_file.save(path, conf, raw)
    say("%s %s%s; restart Claude Desktop to pick it up" % (action, path, " (backup: %s)" % backup if backup else ""))
    return 0
