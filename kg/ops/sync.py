"""`kgd sync`: the storage root's knowledge on every machine through a private git remote
(contract section 9), and the lines `kgd status` / `kgd doctor` show about it.

Rules owned here:
- `kgd sync --remote URL` writes ROOT/sync.json, starts the daemon if none runs, and waits for
  the first round: it joins what the remote holds with what this machine has. A local path that
  does not exist yet becomes an empty bare repository (a folder on a mounted disk is a remote).
- `kgd sync` runs a round now and says how it went; `kgd sync --off` stops syncing (ROOT/sync/
  and its history stay; `--remote` turns it on again).
- Exit 1 when the round failed (the reason in one line); the daemon keeps retrying on its own.
- The status line says how many changes wait to be pushed (the last sync may be recent while a
  commit made since waits for the next round), and when they go ("in about 30s": the round
  that pushes them, not the interval's).
"""

import json
import os
import time

from ..memory import git_runner
from ..travel.remote_repo import check_remote, read_config, read_status, redact_url, write_config
from .client import Api, connect_host, ensure_daemon, find_daemon
from .console import CommandError, plural, say

WAIT = 120.0


def _ago(ts, now=None):
    if not ts:
        return "never"
    s = max(0, int((now or time.time()) - ts))
    if s < 120:
        return "%ds ago" % s
    if s < 7200:
        return "%dm ago" % (s // 60)
    if s < 172800:
        return "%dh ago" % (s // 3600)
    return "%dd ago" % (s // 86400)


def _looks_local(url):
    """A path rather than a URL (no scheme, not scp-like host:path)."""
    if "://" in url or "::" in url:
        return False
    head = url.split("/", 1)[0]
    return url.startswith(("/", ".", "~")) or ":" not in head


def resolve_remote(url):
    """The remote as the daemon should see it: a local path made absolute (the daemon runs
    elsewhere), created as an empty bare repository when missing."""
    check_remote(url)
    if not _looks_local(url):
        return url, False
    path = os.path.abspath(os.path.expanduser(url))
    if os.path.exists(path):
        return path, False
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise CommandError("%s does not exist (nor does its folder); give an existing folder or a git URL" % path)
    git_runner.run(["init", "--quiet", "--bare", path], parent)
    return path, True


def _in(seconds):
    s = int(round(seconds or 0))
    return "%ds" % s if s < 120 else "%dm" % (s // 60)


def _waiting(st):
    """"; 3 changes wait to be pushed (in about 25s)", or "" when nothing waits. The daemon's
    next_round_in is, while changes wait, when the round that pushes them begins (the debounce and
    the push gap, not the interval); while rounds fail, it is the next try."""
    n = st.get("waiting") or 0
    if not n:
        return ""
    if "next_round_in" in st:
        when = "pushing now"
        if round(st["next_round_in"] or 0) >= 1:
            when = "%sin about %s" % ("next try " if st.get("failing") else "", _in(st["next_round_in"]))
    else:
        when = "pushed when kgd starts" if st.get("enabled", True) else "kgd sync --remote turns it on"
    return "; %s %s to be pushed (%s)" % (plural(n, "change"), "waits" if n == 1 else "wait", when)


def describe(st, now=None):
    """Lines saying where the personal remote is and how the last round went."""
    if not st or not st.get("remote"):
        return ["remote:   none (kgd sync --remote URL keeps this memory on your other machines)"]
    lines = ["remote:   %s%s, last sync %s%s" % (st["remote"], "" if st.get("enabled", True) else " (off)",
                                                 _ago(st.get("last_ok"), now), _waiting(st))]
    err = st.get("last_error")
    if err and (not st.get("last_ok") or err.get("at", 0) > st["last_ok"]):
        lines.append("          last error %s (%s): %s" % (_ago(err.get("at"), now), err.get("kind"),
                                                           err.get("message")))
    if st.get("config_error"):
        lines.append("          %s" % st["config_error"])
    return lines


def offline_status(root):
    """What the files say when no daemon answers."""
    cfg = read_config(root)
    if not cfg.get("remote"):
        return None
    saved = read_status(root)
    shown = redact_url(cfg["remote"])
    out = dict(saved) if saved.get("remote") == shown else {}
    out.update(remote=shown, enabled=bool(cfg.get("enabled", True)))
    return out


def live_status(api):
    """GET /api/remote from a running daemon, or None when it has none to give."""
    try:
        code, obj = api.json("GET", "/api/remote")
    except OSError:
        return None
    return obj if code == 200 and isinstance(obj, dict) else None


def check(rep, cfg):
    """`kgd doctor`'s lines about the personal remote (rep: doctor.Report)."""
    st = None
    found = find_daemon(cfg)
    if found:
        api = Api(connect_host(cfg), found["port"], cfg.get("token"), timeout=5)
        try:
            st = live_status(api)
        finally:
            api.close()
    st = st or offline_status(cfg["root"])
    if not st or not st.get("remote"):
        return
    if not st.get("enabled", True):
        rep.ok("personal remote %s is off (kgd sync --remote %s turns it on)" % (st["remote"], st["remote"]))
        return
    if not git_runner.available():
        rep.fail("personal remote %s set, but git is not installed" % st["remote"], "install git")
        return
    for line in describe(st)[1:]:
        rep.warn("personal remote: " + line.strip(), "check the remote (network, credentials, path), then `kgd sync`")
        return
    if not st.get("last_ok"):
        rep.warn("personal remote %s has never synced" % st["remote"], "start kgd, then `kgd sync`")
        return
    rep.ok("personal remote %s, last sync %s%s" % (st["remote"], _ago(st.get("last_ok")), _waiting(st)))


def sync(args, cfg):
    root = cfg["root"]
    config = read_config(root)
    if args.off:
        if not config.get("remote"):
            say("remote sync is not set up")
            return 0
        config["enabled"] = False
        write_config(root, config)
        found = find_daemon(cfg)
        if found:
            _post(cfg, found["port"], 0)
        say("remote sync off; %s/sync keeps its history (kgd sync --remote %s turns it on again)"
            % (root, redact_url(config["remote"])))
        return 0
    if args.remote:
        try:
            url, created = resolve_remote(args.remote)
        except ValueError as exc:
            raise CommandError(str(exc))
        except git_runner.GitError as exc:
            raise CommandError("could not create the repository: %s" % exc.message)
        if created:
            say("created an empty repository at %s" % url)
        config.update(remote=url, enabled=True)
        write_config(root, config)
    elif not config.get("remote"):
        raise CommandError("no remote set up; run `kgd sync --remote URL` (a private git repository, or a path)")
    elif not config.get("enabled", True):
        raise CommandError("remote sync is off; `kgd sync --remote %s` turns it on" % redact_url(config["remote"]))
    if not git_runner.available():
        raise CommandError("git is not installed; kgd runs the `git` program to sync")
    port, _ = ensure_daemon(cfg, timeout=10.0)
    st = _post(cfg, port, 0 if args.no_wait else WAIT)
    if args.json:
        say(json.dumps(st))
    else:
        for line in describe(st):
            say(line)
    if args.no_wait:
        return 0
    if not st.get("completed"):
        say("the round is still running; `kgd status` shows how it ends")
        return 0
    err = st.get("last_error")
    return 1 if err and (not st.get("last_ok") or err.get("at", 0) > st["last_ok"]) else 0


def _post(cfg, port, wait):
    api = Api(connect_host(cfg), port, cfg.get("token"), timeout=wait + 30)
    try:
        code, obj = api.json("POST", "/api/remote", {"wait": wait})
    except OSError as exc:
        raise CommandError("kgd on port %d stopped answering: %s" % (port, exc))
    finally:
        api.close()
    if code != 200 or not isinstance(obj, dict):
        raise CommandError("kgd on port %d answered %d: %s" % (port, code, (obj or {}).get("error")
                                                                 if isinstance(obj, dict) else obj))
    return obj
