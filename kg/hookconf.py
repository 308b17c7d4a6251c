"""`kgd hooks install|remove|print`: kgd's entries in Claude Code's ~/.claude/settings.json.

Rules owned here:
- kgd's entries: SessionStart runs the command hook `<python> -S <kgd.py or kgd.pyz> hook` (plus
  --port / --root when not the defaults; Claude Code runs SessionStart hooks only as commands);
  UserPromptSubmit, PostToolUse (file and web tools) and Stop are HTTP hooks POSTing to
  http://127.0.0.1:PORT/api/hooks with a short timeout. With a token, the HTTP hooks send
  `Authorization: Bearer $KG_TOKEN`, resolved by Claude Code from its environment (listed in
  allowedEnvVars): the token itself is never written to the file; `kgd hook` reads KG_TOKEN too.
- An entry is kgd's when it is a command hook running `kgd.py hook` / `kgd.pyz hook`, or an HTTP
  hook to /api/hooks on a loopback address. `install` replaces kgd's entries (any port) and
  touches nothing else; installing twice changes nothing; `remove` takes out only kgd's entries
  (and the matcher groups and event lists that held nothing else).
- kgd's tool permissions: `install` also adds `mcp__kg__<tool>` for each of kgd's tools to
  permissions.allow (so Claude Code does not ask before every memory call; --no-permissions skips
  it); `remove` takes exactly those names out again (and the list / object it emptied).
- The file is changed as userconf says: a file that is not a JSON object is refused, the person's
  formatting and file mode are kept, and a dated backup is left only when the rewrite could not
  reproduce their formatting.
"""

import json
import os
import re
import shlex

from . import userconf
from .client import entry_point, python_executable
from .config import DEFAULT_PORT, DEFAULT_ROOT
from .console import CommandError, say

TOOLS_MATCHER = "Read|Edit|Write|MultiEdit|Grep|Glob|NotebookEdit|WebFetch|WebSearch"
HTTP_EVENTS = (("UserPromptSubmit", None), ("PostToolUse", TOOLS_MATCHER), ("Stop", None))
HTTP_TIMEOUT = 5
COMMAND_TIMEOUT = 10
TOKEN_VAR = "KG_TOKEN"
TOOL_NAMES = ("kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge", "kg_search", "kg_sync",
              "kg_progress")
PERMISSIONS = tuple("mcp__kg__" + t for t in TOOL_NAMES)
_KGD_COMMAND = re.compile(r"""(?:^|[\s/'"])kgd\.pyz?['"]?\s+hook(?:\s|$)""")
_KGD_URL = re.compile(r"\Ahttps?://(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)/api/hooks/?\Z")


def settings_path(args=None):
    if args is not None and getattr(args, "settings", None):
        return os.path.abspath(args.settings)
    return os.path.join(os.path.expanduser("~"), ".claude", "settings.json")


def hook_command(cfg):
    argv = [python_executable(), "-S", entry_point(), "hook"]
    if cfg["port"] != DEFAULT_PORT:
        argv += ["--port", str(cfg["port"])]
    if cfg["root"] != DEFAULT_ROOT:
        argv += ["--root", cfg["root"]]
    return " ".join(shlex.quote(a) for a in argv)


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


def is_kgd_hook(hook):
    if not isinstance(hook, dict):
        return False
    if hook.get("type") == "command":
        return isinstance(hook.get("command"), str) and bool(_KGD_COMMAND.search(hook["command"]))
    if hook.get("type") == "http":
        return isinstance(hook.get("url"), str) and bool(_KGD_URL.match(hook["url"].strip()))
    return False


def _event_lists(conf):
    hooks = conf.get("hooks")
    if hooks is None:
        return {}
    if not isinstance(hooks, dict):
        raise CommandError("\"hooks\" in the settings is not an object; fix it, then run this again")
    return hooks


def found(conf):
    """{event: [kgd's hook objects]} in conf."""
    out = {}
    for event, groups in _event_lists(conf).items():
        for group in groups if isinstance(groups, list) else ():
            for hook in _inner(group):
                if is_kgd_hook(hook):
                    out.setdefault(event, []).append(hook)
    return out


def without_kgd(conf):
    """A copy of conf with kgd's hooks and tool permissions taken out -> (copy, how many hooks, how
    many permissions were taken out)."""
    conf, hooks_removed = without_hooks(conf)
    conf, perms_removed = without_permissions(conf)
    return conf, hooks_removed, perms_removed


def without_hooks(conf):
    """A copy of conf with kgd's hooks taken out -> (copy, how many were taken out)."""
    conf = json.loads(json.dumps(conf))
    hooks = _event_lists(conf)
    removed = 0
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups, touched = [], False
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_kgd_hook(h) for h in inner):
                kept_groups.append(group)
                continue
            touched = True
            kept = [h for h in inner if not is_kgd_hook(h)]
            removed += len(inner) - len(kept)
            if kept:
                kept_groups.append(dict(group, hooks=kept))
        if touched:
            if kept_groups:
                hooks[event] = kept_groups
            else:
                del hooks[event]
    if "hooks" in conf and not conf["hooks"] and removed:
        del conf["hooks"]
    return conf, removed


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


def _installed_as_wanted(conf, wanted):
    have = found(conf)
    return set(have) == set(wanted) and all(
        have[e] == [h for g in wanted[e] for h in g["hooks"]] for e in wanted) and all(
        _matcher_of(conf, e) == wanted[e][0].get("matcher") for e in wanted)


def _inner(group):
    """The hook objects of one matcher group; nothing when the group is not shaped as one."""
    inner = group.get("hooks") if isinstance(group, dict) else None
    return inner if isinstance(inner, list) else ()


def _matcher_of(conf, event):
    for group in _event_lists(conf).get(event) or []:
        if any(is_kgd_hook(h) for h in _inner(group)):
            return group.get("matcher")
    return None


def install_into(conf, cfg, permissions=True):
    """-> (new conf, changed?)."""
    wanted = kgd_entries(cfg)
    if _installed_as_wanted(conf, wanted):
        if not permissions:
            return conf, False
        new, added = with_permissions(conf)
        return new, bool(added)
    new, _ = without_hooks(conf)
    if permissions:
        new = with_permissions(new)[0]
    if new.get("hooks") is None:
        new["hooks"] = {}
    hooks = new["hooks"]
    for event, groups in wanted.items():
        if not isinstance(hooks.get(event, []), list):
            raise CommandError("\"hooks\".%s in the settings is not a list; fix it, then run this again" % event)
        hooks.setdefault(event, []).extend(groups)
    return new, True


def hooks(args, cfg):
    path = settings_path(args)
    permissions = not getattr(args, "no_permissions", False)
    if args.action == "print":
        shown = {"hooks": kgd_entries(cfg)}
        if permissions:
            shown["permissions"] = {"allow": list(PERMISSIONS)}
        say(json.dumps(shown, indent=2))
        return 0
    conf, raw = userconf.load(path)
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
    if args.dry_run:
        say("would have %s %s; the file would read:" % (action, path))
        say(userconf.encode(new, raw).decode("utf-8").rstrip())
        return 0
    # A file that held nothing but kgd's entries is removed with them; otherwise a backup only when
    # the person's formatting could not be kept.
    backup = userconf.save(path, new, raw, backup="if-lossy" if without_kgd(conf)[0] else False)
    say("%s %s%s; this takes effect in new Claude Code sessions" % (
        action, path, " (backup, as its formatting could not be kept: %s)" % backup if backup else ""))
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
                m = _KGD_URL.match(h["url"].strip())
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
