"""Configuration (contract section 1): flags beat environment variables, which beat defaults.

Rules owned here: each setting's flag, variable, default, type and range; a value that does not
parse or is out of range is a ConfigError with one clear line naming where it came from.
Imports nothing heavy: `kgd hook` resolves its configuration on every Claude Code event.
"""

import os

DEFAULTS = {
    "host": ("KG_HOST", "127.0.0.1", str),
    "port": ("KG_HTTP_PORT", 8765, int),
    "root": ("KG_STORAGE_ROOT", "~/.knowledge-graph", str),
    "max_tokens": ("KG_MAX_TOKENS", 5000, int),
    "grace_days": ("KG_GRACE_PERIOD_DAYS", 7.0, float),
    "orphan_grace_days": ("KG_ORPHAN_GRACE_DAYS", 365.0, float),
    "save_interval": ("KG_SAVE_INTERVAL", 30.0, float),
    "session_ttl": ("KG_SESSION_TTL", 86400.0, float),
    "log_level": ("KG_LOG_LEVEL", "INFO", str),
    "token": ("KG_TOKEN", None, str),
    "structured_output": ("KG_STRUCTURED_OUTPUT", False, "flag"),
    "sync_interval": ("KG_SYNC_INTERVAL", 300.0, float),
    "secret_scan": ("KG_SECRET_SCAN", True, "flag"),  # 0: writes to private graphs are not checked
}
FLAG_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
LIMITS = {"port": (0, 65535), "max_tokens": (100, 10 ** 8), "grace_days": (0, 36500), "orphan_grace_days": (0, 36500),
          "save_interval": (0.05, 86400), "session_ttl": (1, 10 ** 9),
          "sync_interval": (0.5, 7 * 86400)}


DEFAULT_PORT = DEFAULTS["port"][1]
DEFAULT_ROOT = os.path.abspath(os.path.expanduser(DEFAULTS["root"][1]))


class ConfigError(Exception):
    pass


def connect_host(cfg):
    """The address a client reaches the daemon at, given the address it binds."""
    host = cfg["host"]
    return "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)


def resolve_config(args, environ=None):
    """Merge flags, environment and defaults; raise ConfigError with one clear line."""
    environ = os.environ if environ is None else environ
    cfg = {}
    for name, (env, default, kind) in DEFAULTS.items():
        value = getattr(args, name, None)
        source = "--" + name.replace("_", "-")
        if value is None and environ.get(env) not in (None, ""):
            value, source = environ[env], env
        if value is None:
            cfg[name] = default
            continue
        if kind == "flag":
            if not isinstance(value, bool):
                if str(value).strip().lower() not in FLAG_WORDS:
                    raise ConfigError("%s=%r is not one of 1, true, yes, 0, false, no." % (source, value))
                value = FLAG_WORDS[str(value).strip().lower()]
            cfg[name] = value
            continue
        try:
            value = kind(value)
        except (TypeError, ValueError):
            raise ConfigError("%s=%r is not a valid %s." % (source, value, "number" if kind is not str else "value"))
        if name in LIMITS and not LIMITS[name][0] <= value <= LIMITS[name][1]:
            raise ConfigError("%s=%r is out of range (%s to %s)." % (source, value, LIMITS[name][0], LIMITS[name][1]))
        cfg[name] = value
    level = str(cfg["log_level"]).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError("log level %r is not one of DEBUG, INFO, WARNING, ERROR." % cfg["log_level"])
    cfg["log_level"] = level
    cfg["root"] = os.path.abspath(os.path.expanduser(cfg["root"]))
    return cfg
