"""`kgd hooks install|remove|print --agent codex|gemini|copilot`: that agent's own configuration, its
MCP server entry and its hooks (contract section 11). Claude Code's is kg/ops/setup/claude_hooks.py's.

What each agent reads, and where, is data: AGENTS, one row per agent. The code around it is shared:
JSON files are edited as kg/ops/setup/settings_file.py says (the person's other entries, formatting and mode kept;
atomic; symlinks followed; read-only and malformed files refused in one line), hook lists as
kg/ops/setup/hook_lists.py says, and Codex's TOML through kgd's own marked block (kg/ops/setup/toml_block.py).

Rules owned here:
- The MCP entry is named kg and points at http://127.0.0.1:PORT/mcp. An entry named kg that is not
  kgd's (another URL, another program) is refused, not overwritten.
- The hooks run `kgd hook --agent NAME` (Copilot's also `--event E`: its input names no event).
  Codex's hooks that can add context set additionalContextLimit to kg/agents/dialects.py's
  HOOK_CONTEXT_LIMITS (contract section 13), so Codex never cuts the preload into a file.
- Installing twice changes nothing; removing takes out only kgd's entries, and a file that held
  nothing else (kgd created it) is removed with them.
- What the person must still do by hand (Codex's hook trust) is said in one line after an install
  that wrote hooks.
"""

import json
import os
import re
import shlex
import shutil

from ...agents import dialects
from ..config import DEFAULT_PORT
from ..console import CommandError
from . import hook_lists, settings_file, toml_block

SERVER = "kg"
TOKEN_VAR = "KG_TOKEN"
_GEMINI_TOOLS = "read_file|read_many_files|write_file|replace|grep_search|glob|web_fetch|google_web_search|" \
                "run_shell_command"

# home: (the environment variable that moves the agent's folder, the folder under ~, True when the
# variable names the folder's parent rather than the folder itself).
AGENTS = {
    "codex": {
        "label": "Codex CLI", "program": "codex", "home": ("CODEX_HOME", ".codex", False),
        "mcp": {"file": "config.toml", "format": "toml"},
        "hooks": {"file": "hooks.json", "layout": "grouped", "timeout": 10, "event_flag": False,
                  "events": (("SessionStart", None), ("UserPromptSubmit", None), ("PostToolUse", None),
                             ("Stop", None)),
                  # Codex cuts hook context over this many tokens into a file (Stop adds none: Codex
                  # warns about the key there).
                  "context_limit": ("additionalContextLimit", dialects.HOOK_CONTEXT_LIMITS["codex"],
                                    ("SessionStart", "UserPromptSubmit", "PostToolUse"))},
        "by_hand": "Codex runs new or changed hooks only once you trust them: start `codex`, type /hooks and "
                   "trust kgd's 4 hooks",
    },
    "gemini": {
        "label": "Gemini CLI", "program": "gemini", "home": ("GEMINI_CLI_HOME", ".gemini", True),
        "mcp": {"file": "settings.json", "format": "json", "entry": lambda url: {"httpUrl": url},
                "token": {"headers": {"Authorization": "Bearer $" + TOKEN_VAR}}},
        "hooks": {"file": "settings.json", "layout": "grouped", "timeout": 10000, "event_flag": False,
                  "events": (("SessionStart", None), ("BeforeAgent", None), ("AfterTool", _GEMINI_TOOLS),
                             ("AfterAgent", None))},
    },
    "copilot": {
        "label": "Copilot CLI", "program": "copilot", "home": ("COPILOT_HOME", ".copilot", False),
        "mcp": {"file": "mcp-config.json", "format": "json",
                "entry": lambda url: {"type": "http", "url": url, "tools": ["*"]}},
        "hooks": {"file": os.path.join("hooks", "kgd.json"), "layout": "flat", "timeout": 10, "event_flag": True,
                  "command_key": "bash", "file_keys": {"version": 1},
                  "events": (("sessionStart", None), ("userPromptSubmitted", None), ("postToolUse", None),
                             ("agentStop", None))},
    },
}
NAMES = tuple(AGENTS)
_KGD_MCP_URL = re.compile(r"\Ahttps?://(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)(?:/mcp)?/?\Z")


def home(name):
    var, folder, parent = AGENTS[name]["home"]
    given = os.environ.get(var)
    if given:
        return os.path.join(given, folder) if parent else given
    return os.path.join(os.path.expanduser("~"), folder)


def path_of(name, part):
    return os.path.join(home(name), AGENTS[name][part]["file"])


def present(name):
    """Is the agent installed here (its program on PATH, or its folder exists)?"""
    return bool(shutil.which(AGENTS[name]["program"])) or os.path.isdir(home(name))


def mcp_url(port):
    return "http://127.0.0.1:%d/mcp" % port


def _need_port(cfg, name):
    if not cfg["port"]:
        raise CommandError("%s's configuration needs a fixed port (not --port 0): it is written once"
                           % AGENTS[name]["label"])


def wanted_hooks(name, cfg):
    """{event: [group or hook]} kgd installs for the agent."""
    spec = AGENTS[name]["hooks"]
    out = {}
    for event, matcher in spec["events"]:
        hook = {
            "type": "command",
            spec.get("command_key", "command"): hook_lists.hook_command(
                cfg, name, event if spec["event_flag"] else None
            ),
        }
        hook["timeoutSec" if spec["layout"] == "flat" else "timeout"] = spec["timeout"]
        if "context_limit" in spec and event in spec["context_limit"][2]:
            hook[spec["context_limit"][0]] = spec["context_limit"][1]
        if spec["layout"] == "flat":
            out[event] = [hook]
        else:
            group = {"matcher": matcher} if matcher else {}
            group["hooks"] = [hook]
            out[event] = [group]
    return out


def codex_body(cfg):
    lines = ["[mcp_servers.%s]" % SERVER, 'url = "%s"' % mcp_url(cfg["port"])]
    if cfg.get("token"):
        lines.append('bearer_token_env_var = "%s"' % TOKEN_VAR)
    return "\n".join(lines) + "\n"


def wanted_mcp(name, cfg):
    spec = AGENTS[name]["mcp"]
    entry = spec["entry"](mcp_url(cfg["port"]))
    if cfg.get("token") and spec.get("token"):
        entry.update(spec["token"])
    return entry


def is_kgd_mcp(entry):
    """An MCP entry that is kgd's: a loopback URL to kgd's port, or a command running kgd.py stdio."""
    if not isinstance(entry, dict):
        return False
    url = entry.get("httpUrl") or entry.get("url")
    if isinstance(url, str):
        return bool(_KGD_MCP_URL.match(url.strip()))
    words = [entry.get("command")] + list(entry.get("args") or [])
    return any(isinstance(w, str) and re.search(r"kgd\.pyz?\Z", w) for w in words)


def _servers(conf, path):
    servers = conf.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise CommandError("\"mcpServers\" in %s is not an object; fix it, then run this again" % path)
    return servers


class Files:
    """The JSON files of one command, each loaded once and written once (Gemini keeps its MCP entry
    and its hooks in one settings.json)."""

    def __init__(self):
        self.files = {}

    def conf(self, path):
        if path not in self.files:
            conf, raw = settings_file.load(path)
            self.files[path] = {"conf": conf, "raw": raw, "first": conf}
        return self.files[path]["conf"]

    def set(self, path, conf):
        self.files[path]["conf"] = conf

    def changed(self):
        return [p for p, f in self.files.items() if f["conf"] != f["first"]]

    def save(self, path, owned_only):
        """owned_only: the file held nothing but kgd's entries. -> a line naming the backup left, or None."""
        f = self.files[path]
        backup = settings_file.save(path, f["conf"], f["raw"], backup=False if owned_only else "if-lossy")
        return "(its formatting could not be kept: the old file is %s)" % backup if backup else None


def _strip_file_keys(name, conf):
    """conf without the keys kgd's own hooks file carries (Copilot's "version") when nothing else is left."""
    keys = AGENTS[name]["hooks"].get("file_keys") or {}
    if keys and conf.get("hooks") in (None, {}) and all(conf.get(k) == v for k, v in keys.items()):
        return {k: v for k, v in conf.items() if k not in keys and k != "hooks"}
    return conf


def _without_kgd(name, conf, path):
    """conf without kgd's MCP entry (when kgd's) and hooks -> (conf, mcp removed?, hooks removed)."""
    conf, removed = hook_lists.without(conf, AGENTS[name]["hooks"]["layout"] == "flat") if path == path_of(
        name, "hooks") else (conf, 0)
    took_mcp = False
    if path == path_of(name, "mcp") and AGENTS[name]["mcp"]["format"] == "json":
        servers = _servers(conf, path)
        if SERVER in servers and is_kgd_mcp(servers[SERVER]):
            conf = json.loads(json.dumps(conf))
            del conf["mcpServers"][SERVER]
            if not conf["mcpServers"]:
                del conf["mcpServers"]
            took_mcp = True
    return _strip_file_keys(name, conf), took_mcp, removed


def install(name, cfg, dry_run=False):
    """Write the agent's MCP entry and hooks -> the lines to say."""
    _need_port(cfg, name)
    spec, label = AGENTS[name], AGENTS[name]["label"]
    files, said, hooks_changed = Files(), [], False
    url = mcp_url(cfg["port"])
    mcp_path = path_of(name, "mcp")
    toml = None
    if spec["mcp"]["format"] == "toml":
        text, raw = toml_block.read(mcp_path)
        new, changed = toml_block.with_block(text, codex_body(cfg), mcp_path, ["mcp_servers." + SERVER])
        toml = (new, raw) if changed else None
        mcp_was_there = toml_block.block_body(text, mcp_path) is not None
    else:
        conf = files.conf(mcp_path)
        servers = _servers(conf, mcp_path)
        have = servers.get(SERVER)
        if have is not None and not is_kgd_mcp(have):
            raise CommandError("%s already has an MCP server named %s that is not kgd (%s); rename or remove it, "
                               "then run this again" % (mcp_path, SERVER, json.dumps(have)[:100]))
        want = wanted_mcp(name, cfg)
        mcp_was_there = have is not None
        if have != want:
            files.set(mcp_path, dict(conf, mcpServers=dict(servers, **{SERVER: want})))
    hooks_path = path_of(name, "hooks")
    conf = files.conf(hooks_path)
    if spec["hooks"].get("file_keys") and not conf:
        conf = dict(spec["hooks"]["file_keys"])
    new, hooks_changed = hook_lists.merge(conf, wanted_hooks(name, cfg), spec["hooks"]["layout"] == "flat")
    if hooks_changed:
        files.set(hooks_path, new)
    events = ", ".join(e for e, _ in spec["hooks"]["events"])
    mcp_changed = toml is not None or mcp_path in files.changed()
    if not mcp_changed and not hooks_changed:
        return ["%s: kgd's MCP server and hooks are already in %s; unchanged" % (label, home(name))]
    def verb(had):
        return ("would " if dry_run else "") + (("update" if dry_run else "updated") if had else
                                                ("add" if dry_run else "added"))
    if mcp_changed:
        had = mcp_was_there
        said.append("%s: %s kgd's MCP server %s (%s) in %s" % (label, verb(had), SERVER, url, mcp_path))
    if hooks_changed:
        had = bool(hook_lists.found(files.files[hooks_path]["first"], spec["hooks"]["layout"] == "flat"))
        said.append("%s: %s kgd's hooks (%s: kgd hook --agent %s) in %s" % (label, verb(had), events, name,
                                                                            hooks_path))
    if cfg.get("token") and not spec["mcp"].get("token") and spec["mcp"]["format"] == "json":
        said.append("%s: kgd runs with a token: add the header Authorization: Bearer <token> to its kg entry in %s "
                    "by hand" % (label, mcp_path))
    if dry_run:
        return said
    if toml is not None:
        toml_block.save(mcp_path, toml[0], toml[1])
    for path in files.changed():
        rest = _without_kgd(name, files.files[path]["first"], path)[0]
        note = files.save(path, owned_only=not rest)
        if note:
            said.append("%s: %s %s" % (label, path, note))
    if hooks_changed and spec.get("by_hand"):
        said.append("%s: by hand: %s" % (label, spec["by_hand"]))
    return said


def remove(name, cfg, dry_run=False):
    """Take kgd's MCP entry and hooks out of the agent's files -> the lines to say."""
    spec, label = AGENTS[name], AGENTS[name]["label"]
    files, said = Files(), []
    verb = "would remove" if dry_run else "removed"
    mcp_path, hooks_path = path_of(name, "mcp"), path_of(name, "hooks")
    toml = None
    if spec["mcp"]["format"] == "toml":
        text, raw = toml_block.read(mcp_path)
        new, took = toml_block.without(text, mcp_path)
        if took:
            toml = (new, raw)
            said.append("%s: %s kgd's MCP server %s from %s" % (label, verb, SERVER, mcp_path))
    json_paths = [hooks_path] + ([mcp_path] if spec["mcp"]["format"] == "json" and mcp_path != hooks_path else [])
    for path in json_paths:
        if not os.path.lexists(path):
            continue
        conf = files.conf(path)
        new, took_mcp, hooks_removed = _without_kgd(name, conf, path)
        if new != conf:
            files.set(path, new)
        if took_mcp:
            said.append("%s: %s kgd's MCP server %s from %s" % (label, verb, SERVER, path))
        if hooks_removed:
            said.append("%s: %s kgd's %d hook(s) from %s" % (label, verb, hooks_removed, path))
    if not said:
        return []
    # the files kgd's entries were all of are removed: the dry run says which, as the real run does
    emptied = ([mcp_path] if toml is not None and not toml[0] else []) + [
        p for p in files.changed() if not files.files[p]["conf"]]
    if not dry_run:
        if toml is not None:
            toml_block.save(mcp_path, toml[0], toml[1])
        for path in files.changed():
            note = files.save(path, owned_only=not files.files[path]["conf"])
            if note:
                said.append("%s: %s %s" % (label, path, note))
    said.extend("%s: %s" % (label, settings_file.emptied_line(p, dry_run)) for p in emptied)
    return said


def show(name, cfg):
    """What install would write, as the agent's files would hold it."""
    _need_port(cfg, name)
    spec = AGENTS[name]
    out = []
    if spec["mcp"]["format"] == "toml":
        out.append("# %s\n%s%s%s" % (path_of(name, "mcp"), toml_block.BEGIN + "\n", codex_body(cfg), toml_block.END))
    else:
        out.append("// %s\n%s" % (path_of(name, "mcp"), json.dumps({"mcpServers": {SERVER: wanted_mcp(name, cfg)}},
                                                                    indent=2)))
    hooks = dict(spec["hooks"].get("file_keys") or {}, hooks=wanted_hooks(name, cfg))
    out.append("// %s\n%s" % (path_of(name, "hooks"), json.dumps(hooks, indent=2)))
    return "\n".join(out)


def _port_of_command(command):
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    missing = [w for w in words[:3] if os.path.isabs(w) and not os.path.exists(w)]
    port = words[words.index("--port") + 1] if "--port" in words[:-1] else str(DEFAULT_PORT)
    return port, (missing[0] if missing else None)


def check(name, port):
    """-> [(level "ok"|"warn"|"fail", what, fix)] for the agent's configuration against a daemon on port."""
    spec, label = AGENTS[name], AGENTS[name]["label"]
    fix = "kgd hooks install --agent %s%s" % (name, " --port %d" % port if port != DEFAULT_PORT else "")
    out = []
    mcp_path, hooks_path = path_of(name, "mcp"), path_of(name, "hooks")
    try:
        if spec["mcp"]["format"] == "toml":
            body = toml_block.block_body(toml_block.read(mcp_path)[0], mcp_path)
            m = re.search(r'^url = "([^"]*)"', body or "", re.M)
            url = m.group(1) if m else None
        else:
            entry = _servers(settings_file.load(mcp_path)[0], mcp_path).get(SERVER)
            url = (entry.get("httpUrl") or entry.get("url")) if isinstance(entry, dict) else None
        hooks_conf = settings_file.load(hooks_path)[0]
        have = hook_lists.found(hooks_conf, spec["hooks"]["layout"] == "flat")
    except CommandError as exc:
        return [("fail", "%s: %s" % (label, exc), "fix the file, then: " + fix)]
    if url is None:
        out.append(("warn", "%s has no %s MCP server from kgd in %s" % (label, SERVER, mcp_path), fix))
    elif url.rstrip("/") != mcp_url(port):
        out.append(("fail", "%s's %s MCP server points at %s, not this daemon (%s)" % (label, SERVER, url,
                                                                                  mcp_url(port)), fix))
    else:
        out.append(("ok", "%s MCP server %s in %s -> %s" % (label, SERVER, mcp_path, url), None))
    events = [e for e, _ in spec["hooks"]["events"]]
    missing = [e for e in events if e not in have]
    wrong = []
    for event, hooks_ in have.items():
        for h in hooks_:
            given, gone = _port_of_command(hook_lists.command_of(h) or "")
            if gone:
                wrong.append("%s runs %s, which does not exist" % (event, gone))
            elif given != str(port):
                wrong.append("%s runs kgd hook for port %s, not %d" % (event, given, port))
    if wrong:
        out.append(("fail", "%s hooks in %s: %s" % (label, hooks_path, "; ".join(wrong)), fix))
    elif len(missing) == len(events):
        out.append(("warn", "no kgd hooks for %s in %s: it gets memory only when its agent asks" % (label, hooks_path),
                    fix))
    elif missing:
        out.append(("warn", "kgd's %s hooks lack %s in %s" % (label, ", ".join(missing), hooks_path), fix))
    else:
        out.append(("ok", "%s hooks in %s -> port %d%s" % (label, hooks_path, port, (
            " (%s)" % spec["by_hand"]) if spec.get("by_hand") else ""), None))
    return out
