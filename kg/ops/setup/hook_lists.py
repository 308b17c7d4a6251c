"""kgd's entries in an agent's lists of hooks, whatever the agent (Claude Code, Codex CLI, Gemini CLI,
Copilot CLI): found, added and taken out, every other entry left where it was.

Rules owned here:
- An entry is kgd's when it is a command hook running `kgd.py hook` / `kgd.pyz hook` (its command in
  "command", or Copilot's "bash"), or an HTTP hook to /api/hooks on a loopback address.
- Two layouts: "grouped" (Claude Code, Codex, Gemini: event -> [{"matcher"?, "hooks": [hook]}]) and
  "flat" (Copilot: event -> [hook]). `merge` replaces kgd's entries (any port) by the wanted ones;
  when they are already as wanted nothing changes; `without` takes out kgd's entries only, and the
  matcher groups and event lists that held nothing else.
- The command kgd writes: `<python> -S <kgd.py or kgd.pyz> hook [--agent NAME] [--event E]` plus
  --port / --root when not the defaults.
"""

import json
import re
import shlex

from ..client import entry_point, python_executable
from ..config import DEFAULT_PORT, DEFAULT_ROOT
from ..console import CommandError

_KGD_COMMAND = re.compile(r"""(?:^|[\s/'"])kgd\.pyz?['"]?\s+hook(?:\s|$)""")
KGD_URL = re.compile(r"\Ahttps?://(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)/api/hooks/?(?:\?\S*)?\Z")


def hook_command(cfg, agent=None, event=None):
    argv = [python_executable(), "-S", entry_point(), "hook"]
    if agent:
        argv += ["--agent", agent]
    if event:
        argv += ["--event", event]
    if cfg["port"] != DEFAULT_PORT:
        argv += ["--port", str(cfg["port"])]
    if cfg["root"] != DEFAULT_ROOT:
        argv += ["--root", cfg["root"]]
    return " ".join(shlex.quote(a) for a in argv)


def command_of(hook):
    """The shell command of a command hook (Copilot's "bash" or everyone else's "command"), or None."""
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return None
    for key in ("command", "bash"):
        if isinstance(hook.get(key), str):
            return hook[key]
    return None


def is_kgd_hook(hook):
    if not isinstance(hook, dict):
        return False
    if hook.get("type") == "http":
        return isinstance(hook.get("url"), str) and bool(KGD_URL.match(hook["url"].strip()))
    command = command_of(hook)
    return command is not None and bool(_KGD_COMMAND.search(command))


def event_lists(conf):
    hooks = conf.get("hooks")
    if hooks is None:
        return {}
    if not isinstance(hooks, dict):
        raise CommandError("\"hooks\" in the settings is not an object; fix it, then run this again")
    return hooks


def _inner(group, flat):
    """The hook objects of one entry: the entry itself (flat), or a matcher group's "hooks"."""
    if flat:
        return (group,)
    inner = group.get("hooks") if isinstance(group, dict) else None
    return inner if isinstance(inner, list) else ()


def found(conf, flat=False):
    """{event: [kgd's hook objects]} in conf."""
    out = {}
    for event, groups in event_lists(conf).items():
        for group in groups if isinstance(groups, list) else ():
            for hook in _inner(group, flat):
                if is_kgd_hook(hook):
                    out.setdefault(event, []).append(hook)
    return out


def matcher_of(conf, event, flat=False):
    if flat:
        return None
    for group in event_lists(conf).get(event) or []:
        if any(is_kgd_hook(h) for h in _inner(group, flat)):
            return group.get("matcher")
    return None


def without(conf, flat=False):
    """A copy of conf with kgd's hooks taken out -> (copy, how many were taken out)."""
    conf = json.loads(json.dumps(conf))
    hooks = event_lists(conf)
    removed = 0
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups, touched = [], False
        for group in groups:
            if flat:
                if is_kgd_hook(group):
                    touched, removed = True, removed + 1
                else:
                    kept_groups.append(group)
                continue
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


def as_wanted(conf, wanted, flat=False):
    """Are kgd's hooks in conf exactly the wanted ones ({event: [group or hook]})?"""
    have = found(conf, flat)
    return set(have) == set(wanted) and all(
        have[e] == [h for g in wanted[e] for h in _inner(g, flat)] for e in wanted) and all(
        matcher_of(conf, e, flat) == (None if flat else wanted[e][0].get("matcher")) for e in wanted)


def merge(conf, wanted, flat=False):
    """conf with kgd's hooks replaced by wanted -> (new conf, changed?)."""
    if as_wanted(conf, wanted, flat):
        return conf, False
    new, _ = without(conf, flat)
    if new.get("hooks") is None:
        new["hooks"] = {}
    hooks = new["hooks"]
    for event, groups in wanted.items():
        if not isinstance(hooks.get(event, []), list):
            raise CommandError("\"hooks\".%s in the settings is not a list; fix it, then run this again" % event)
        hooks.setdefault(event, []).extend(json.loads(json.dumps(groups)))
    return new, True
