"""Talking to a running daemon, for the operator commands, the stdio bridge and `kgd hook`.

Rules owned here:
- Which daemon serves a storage root: the process holding the flock on ROOT/kgd.lock, whose first
  line reads "pid N port P"; failing that, a kgd answering GET /health on the configured port.
- A daemon started for a client runs detached (own session, stdin/stdout closed), logs to
  ROOT/kgd.log (rotated once past 5 MiB), gets the token through KG_TOKEN (never argv, where ps
  shows it), and is started from the file this kgd runs from (kgd.py, or the kgd.pyz).
- No daemon is started on a port another program holds: the refusal names that program and the
  `--port` fix (kg/ops/port_owner.py), instead of a daemon that fails in its log.
"""

import http.client
import json
import os
import sys
import time

from ..disk.files import FILE_MODE, ensure_dir, lock_state
from ..disk.layout import Layout
from .config import connect_host
from .console import CommandError

LOG_NAME = "kgd.log"
LOG_ROTATE_BYTES = 5 * 1024 * 1024


KG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this file is kg/ops/client.py


def running_from_archive():
    """True inside a zipapp: this file is /path/kgd.pyz/kg/ops/client.py."""
    return os.path.isfile(os.path.dirname(KG_DIR))


def entry_point():
    """The file to run kgd again: kgd.py beside the kg package, or the .pyz holding it."""
    top = os.path.dirname(KG_DIR)
    return top if running_from_archive() else os.path.join(top, "kgd.py")


def python_executable():
    return sys.executable or "python3"


def root_lock(cfg):
    """(held, pid, port, note) of cfg's storage root."""
    return lock_state(Layout(cfg["root"]))


class Api:
    """JSON over one keep-alive HTTP connection to the daemon (reconnects once when stale)."""

    def __init__(self, host, port, token=None, timeout=30.0):
        self.host, self.port, self.token, self.timeout = host, port, token, timeout
        self.conn = None
        self.last_used = 0.0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None):
        """-> (status, headers dict with lower-case names, body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=False).encode("utf-8")
        hdrs = {"Accept": "application/json"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        hdrs.update(headers or {})
        if self.conn is not None and time.monotonic() - self.last_used > 20:
            self.close()  # the daemon drops idle keep-alive connections after 30 s
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError,
                    BrokenPipeError) as exc:
                self.close()
                if fresh or attempt:
                    raise ConnectionError("the connection to kgd on port %d broke: %s" % (self.port, exc))
                continue
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            self.last_used = time.monotonic()
            out_headers = {k.lower(): v for k, v in r.getheaders()}
            if out_headers.get("connection", "").lower() == "close":
                self.close()
            return r.status, out_headers, data
        raise ConnectionError("unreachable")

    def json(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        try:
            obj = json.loads(data.decode("utf-8")) if data else None
        except ValueError:
            obj = {"error": data[:200].decode("utf-8", "replace")}
        return status, obj


def get_json(api, path):
    """GET a JSON object from the daemon, or raise CommandError with the daemon's reason."""
    try:
        code, obj = api.json("GET", path)
    except (OSError, ConnectionError, http.client.HTTPException) as exc:
        raise CommandError("kgd on port %d stopped answering: %s" % (api.port, exc))
    if code == 401:
        raise CommandError("kgd on port %d refused the %s token; give the daemon's token with --token or KG_TOKEN"
                           % (api.port, "given" if api.token else "missing"))
    if code != 200 or not isinstance(obj, dict):
        raise CommandError("kgd on port %d answered %d to GET %s: %s" % (
            api.port, code, path.split("?")[0], (obj or {}).get("error") if isinstance(obj, dict) else obj))
    return obj


def health(host, port, timeout=2.0):
    """The /health answer of a kgd on host:port, or None (nothing there, or not kgd)."""
    if not port:
        return None
    api = Api(host, port, timeout=timeout)
    try:
        status, obj = api.json("GET", "/health")
    except (OSError, http.client.HTTPException, ConnectionError):
        return None
    finally:
        api.close()
    if status == 200 and isinstance(obj, dict) and obj.get("status") == "ok" and "version" in obj:
        return obj
    return None


def find_daemon(cfg, timeout=2.0):
    """The daemon serving cfg's root (or else listening on cfg's port), or None.

    -> {"port", "pid" (None when unknown), "health", "holds_root"}."""
    held, pid, lock_port, _ = root_lock(cfg)
    host = connect_host(cfg)
    tried = []
    for port in ((lock_port,) if held else ()) + (cfg["port"],):
        if not port or port in tried:
            continue
        tried.append(port)
        h = health(host, port, timeout)
        if h is not None:
            mine = held and port == lock_port
            return {"port": port, "pid": pid if mine else None, "health": h, "holds_root": mine}
    return None


def daemon_argv(cfg):
    return [python_executable(), entry_point(), "serve", "--host", cfg["host"], "--port", str(cfg["port"]),
            "--root", cfg["root"], "--max-tokens", str(cfg["max_tokens"]), "--log-level", cfg["log_level"]]


def spawn_daemon(cfg):
    """Start `kgd serve` detached (own session, stdio closed, stderr to ROOT/kgd.log)."""
    import subprocess  # only when a daemon must be started: keeps `kgd hook`'s common path light

    root = cfg["root"]
    ensure_dir(root)
    log_path = os.path.join(root, LOG_NAME)
    try:
        if os.path.getsize(log_path) > LOG_ROTATE_BYTES:
            os.replace(log_path, log_path + ".1")
    except OSError:
        pass
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    env = dict(os.environ)
    if cfg.get("token"):
        env["KG_TOKEN"] = cfg["token"]  # not on the command line, where ps would show it
    try:
        proc = subprocess.Popen(daemon_argv(cfg), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
                                start_new_session=True, close_fds=True, env=env, cwd="/")
    finally:
        os.close(fd)
    return proc, log_path


def log_tail(path, lines=3):
    """The last lines of a log, joined by " | ", without the "kgd: " each error line opens with
    (the caller's message carries one already)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    tail = [line.strip() for line in text.strip().splitlines()[-lines:]]
    return " | ".join(line[len("kgd: "):] if line.startswith("kgd: ") else line for line in tail)


def ensure_daemon(cfg, timeout=5.0):
    """The port of the daemon serving cfg's root, starting one in the background if none runs.

    -> (port, the Popen of the daemon started here, or None)."""
    found = find_daemon(cfg)
    if found:
        return found["port"], None
    host = connect_host(cfg)
    held = root_lock(cfg)[0]
    proc = log_path = None
    if not held:
        if cfg["port"]:
            from .port_owner import port_free, taken_line

            if not port_free(cfg["host"], cfg["port"]):
                raise CommandError(taken_line(host, cfg["port"]))
        proc, log_path = spawn_daemon(cfg)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held, _, lock_port, _ = root_lock(cfg)
        port = lock_port if held and lock_port else cfg["port"]
        if port and health(host, port, 0.5) is not None:
            return port, proc
        if proc is not None and proc.poll() is not None:
            found = find_daemon(cfg)  # lost a start race to another bridge: use the winner
            if found:
                return found["port"], None
            raise CommandError("the daemon could not start (exit %s): %s" % (
                proc.returncode, log_tail(log_path) or "see " + log_path))
        time.sleep(0.05)
    raise CommandError("the daemon did not answer on port %s within %.0f s%s" % (
        cfg["port"], timeout, "; see " + log_path if log_path else ""))
