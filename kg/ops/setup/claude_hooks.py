"""`kgd hooks install|remove|print [--agent NAME|all]`: kgd's entries in Claude Code's
~/.claude/settings.json here; the other agents' (Codex, Gemini, Copilot) in kg/ops/setup/agent_config.py.

Rules owned here:
- kgd's entries: SessionStart runs the command hook `<python> -S <kgd.py or kgd.pyz> hook` (plus
  --port / --root when not the defaults; Claude Code runs SessionStart hooks only as commands);
  UserPromptSubmit, PostToolUse (file and web tools) and Stop are HTTP hooks POSTing to
  http://127.0.0.1:PORT/api/hooks with a short timeout. With a token, the HTTP hooks send
  `Authorization: Bearer $KG_TOKEN`, resolved by Claude Code from its environment (listed in
  allowedEnvVars): the token itself is never written to the file; `kgd hook` reads KG_TOKEN too.
- Which entries are kgd's, and how they are replaced or taken out leaving every other one, is
  kg/ops/setup/hook_lists.py's: installing twice changes nothing; `remove` takes out only kgd's entries.
- kgd's tool permissions: `install` also adds `mcp__kg__<tool>` for each of kgd's tools to
  permissions.allow (so Claude Code does not ask before every memory call; --no-permissions skips
  it); `remove` takes exactly those names out again (and the list / object it emptied).
- The file is changed as userconf says: a file that is not a JSON object is refused, the person's
  formatting and file mode are kept, and a dated backup is left only when the rewrite could not
  reproduce their formatting.
"""

import json
import os
import shlex

from ..config import DEFAULT_PORT
from ..console import CommandError, say, warn
from . import hook_lists, settings_file

TOOLS_MATCHER = "Read|Edit|Write|MultiEdit|Grep|Glob|NotebookEdit|WebFetch|WebSearch"
HTTP_EVENTS = (("UserPromptSubmit", None), ("PostToolUse", TOOLS_MATCHER), ("Stop", None))
HTTP_TIMEOUT = 5
COMMAND_TIMEOUT = 10
TOKEN_VAR = "KG_TOKEN"
TOOL_NAMES = ("kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search", "kg_sync",
              "kg_progress")
PERMISSIONS = tuple("mcp__kg__" + t for t in TOOL_NAMES)


def settings_path(args=None):
    if args is not None and getattr(args, "settings", None):
        return os.path.abspath(args.settings)
    return os.path.join(os.path.expanduser("~"), ".claude", "settings.json")


def hook_command(cfg):
    return hook_lists.hook_command(cfg)


def hook_url(port):
    return "http://127.0.0.1:%d/api/hooks" % port


def kgd_entries(cfg):
    """{event: [matcher group]} that kgd installs for cfg (port, root, token)."""
    if not cfg["port"]:
        raise CommandError("hooks need a fixed port (not --port 0): Claude Code posts to a URL written once")
    http = {"type": "http", "url": hook_url(cfg["port"]), "timeout": HTTP_TIMEOUT}
    if cfg.get("token"):
        http["headers"] = {"Authorization": "Bearer $%s" % TOKEN_VAR}
        http["allowedEnvVars"] = [TOKEN_VAR]
    out = {"SessionStart": [{"matcher": "", "hooks": [{"type": "command", "command": hook_command(cfg),
                                                       "timeout": COMMAND_TIMEOUT}]}]}
    for event, matcher in HTTP_EVENTS:
        group = {"matcher": matcher} if matcher else {}
        group["hooks"] = [dict(http)]
        out[event] = [group]
    return out


is_kgd_hook = hook_lists.is_kgd_hook
found = hook_lists.found


def without_kgd(conf):
    """A copy of conf with kgd's hooks and tool permissions taken out -> (copy, how many hooks, how
    many permissions were taken out)."""
    conf, hooks_removed = without_hooks(conf)
    conf, perms_removed = without_permissions(conf)
    return conf, hooks_removed, perms_removed


def without_hooks(conf):
    """A copy of conf with kgd's hooks taken out -> (copy, how many were taken out)."""
    return hook_lists.without(conf)


def _allow_list(conf):
    perms = conf.get("permissions")
    allow = perms.get("allow") if isinstance(perms, dict) else None
    return allow if isinstance(allow, list) else None


def without_permissions(conf):
    """A copy of conf without kgd's tool permissions -> (copy, how many were taken out); the allow
    list and permissions object are dropped when kgd's names were all they held."""
    conf = json.loads(json.dumps(conf))
    allow = _allow_list(conf)
    if not allow:
        return conf, 0
    kept = [p for p in allow if p not in PERMISSIONS]
    removed = len(allow) - len(kept)
    if removed:
        conf["permissions"]["allow"] = kept
        if not kept:
            del conf["permissions"]["allow"]
            if not conf["permissions"]:
                del conf["permissions"]
    return conf, removed


def with_permissions(conf):
    """conf with kgd's tool permissions appended to permissions.allow (the missing ones) -> (conf, added)."""
    perms = conf.get("permissions", {})
    if not isinstance(perms, dict) or not isinstance(perms.get("allow", []), list):
        raise CommandError("\"permissions\".allow in the settings is not a list; fix it, or run this with "
                           "--no-permissions")
    have = perms.get("allow", [])
    missing = [p for p in PERMISSIONS if p not in have]
    if missing:
        conf = dict(conf, permissions=dict(perms, allow=list(have) + missing))
    return conf, len(missing)


def install_into(conf, cfg, permissions=True):
    """-> (new conf, changed?)."""
    new, changed = hook_lists.merge(conf, kgd_entries(cfg))
    if permissions:
        new, added = with_permissions(new)
        changed = changed or bool(added)
    return new, changed


AGENT_NAMES = ("claude", "codex", "gemini", "copilot")


def hooks(args, cfg):
    """`kgd hooks ACTION [--agent NAME|all]`: Claude Code's here, the other agents' in kg/ops/setup/agent_config.py.
    `all` is every agent for remove and print, and Claude Code plus each agent found here for install;
    one agent's refusal does not stop the others (exit 1 at the end)."""
    from . import agent_config

    agent = getattr(args, "agent", None) or "claude"
    if agent != "all":
        names = [agent]
    elif args.action == "install":
        names = ["claude"] + [n for n in agent_config.NAMES if agent_config.present(n)]
    else:
        names = list(AGENT_NAMES)
    failed = 0
    for name in names:
        try:
            if name == "claude":
                code = claude_hooks(args, cfg)
            elif args.action == "print":
                say(agent_config.show(name, cfg))
                code = 0
            else:
                do = agent_config.install if args.action == "install" else agent_config.remove
                lines = do(name, cfg, dry_run=args.dry_run)
                if not lines and agent != "all":
                    lines = ["%s: no kgd entries in %s; nothing to remove" % (agent_config.AGENTS[name]["label"],
                                                                               agent_config.home(name))]
                for line in lines:
                    say(line)
                code = 0
        except CommandError as exc:
            if agent != "all":
                raise
            warn("%s: %s" % (name, exc))
            code = 1
        failed += code
    return 1 if failed else 0


def claude_hooks(args, cfg):
    path = settings_path(args)
    permissions = not getattr(args, "no_permissions", False)
    if args.action == "print":
        shown = {"hooks": kgd_entries(cfg)}
        if permissions:
            shown["permissions"] = {"allow": list(PERMISSIONS)}
        say(json.dumps(shown, indent=2))
        return 0
    conf, raw = settings_file.load(path)
    if args.action == "install":
        new, changed = install_into(conf, cfg, permissions)
        if not changed:
            say("kgd's hooks%s are already in %s; unchanged" % (" and tool permissions" if permissions else "", path))
            return 0
        added = len(_allow_list(new) or []) - len(_allow_list(conf) or [])
        action = "added kgd's hooks (SessionStart: kgd hook; UserPromptSubmit, PostToolUse, Stop: %s)%s to" % (
            hook_url(cfg["port"]), " and %d tool permission(s)" % added if added else "")
    else:
        new, removed, perms = without_kgd(conf)
        if not removed and not perms:
            say("no kgd hooks in %s; nothing to remove" % path)
            return 0
        action = "removed kgd's %d hook(s)%s from" % (removed, " and %d tool permission(s)" % perms if perms else "")
    # A file that held nothing but kgd's entries is removed with them (and the dry run says so, not
    # that it would read {}); otherwise a backup only when the person's formatting could not be kept.
    if args.dry_run:
        if not new:
            say("would have %s %s" % (action, path))
            say(settings_file.emptied_line(path, dry_run=True))
        else:
            say("would have %s %s; the file would read:" % (action, path))
            say(settings_file.encode(new, raw).decode("utf-8").rstrip())
        return 0
    backup = settings_file.save(path, new, raw, backup="if-lossy" if without_kgd(conf)[0] else False)
    say("%s %s%s; this takes effect in new Claude Code sessions" % (
        action, path, " (backup, as its formatting could not be kept: %s)" % backup if backup else ""))
    if not new:
        say(settings_file.emptied_line(path))
    return 0


def check(conf, port):
    """Problems with kgd's hooks in conf for a daemon on port: (missing events, wrong targets)."""
    have = found(conf)
    wanted = ["SessionStart"] + [e for e, _ in HTTP_EVENTS]
    missing = [e for e in wanted if e not in have]
    wrong = []
    for event, hooks_ in have.items():
        for h in hooks_:
            if h.get("type") == "http":
                m = hook_lists.KGD_URL.match(h["url"].strip())
                if int(m.group(1)) != port:
                    wrong.append("%s posts to %s, not port %d" % (event, h["url"], port))
            else:
                try:
                    words = shlex.split(h["command"])
                except ValueError:
                    words = h["command"].split()
                files = [w for w in words[:3] if os.path.isabs(w) and not os.path.exists(w)]
                if files:
                    wrong.append("%s runs %s, which does not exist" % (event, files[0]))
                given = words[words.index("--port") + 1] if "--port" in words[:-1] else str(DEFAULT_PORT)
                if given != str(port):
                    wrong.append("%s runs kgd hook for port %s, not %d" % (event, given, port))
    return missing, wrong
