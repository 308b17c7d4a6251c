"""The running daemon wired together: Store, HTTP Daemon and maintenance Loop, in one place.

Rules owned here:
- Start order: the store opens (taking the root's lock) before the port is bound, so a second
  daemon on the same root fails without touching the port; the maintenance loop and the HTTP
  thread start last. Stop order is the reverse: stop accepting, let in-flight requests finish
  (at most STOP_GRACE seconds), stop the loop, then flush and close the store.
- `App` runs in-process (tests: port 0, a thread, `stop()`); `run(cfg)` is `kgd serve`: logging,
  signals, the one start line on stderr, and start-up failures as one clear line with exit code 2;
  it also makes the cycle collector's full passes rare (a process-wide setting, so not App's).
- The hooks endpoint answers through kg/agents/loop.py's handler, loaded on the first hook call.
"""

import logging
import os
import signal
import sys
import threading
import time

from .. import __version__
from ..core.errors import KgError
from ..memory.maintenance import Loop
from ..memory.store import Settings, Store
from ..travel import team
from .http import Daemon

log = logging.getLogger("kgd")

STOP_GRACE = 10.0  # seconds in-flight requests get to finish on stop
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class StartError(Exception):
    """The daemon could not start; the message is the one line to show."""


class App:
    """One daemon: `App(cfg).start()` ... `stop()`. cfg is kg.cli.resolve_config's dict."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.store = self.daemon = self.loop = self.thread = self.remote = None
        self.stopped = False

    def start(self):
        cfg = self.cfg
        settings = Settings(max_tokens=cfg["max_tokens"], grace_days=cfg["grace_days"],
                            orphan_grace_days=cfg["orphan_grace_days"], save_interval=cfg["save_interval"],
                            session_ttl=cfg["session_ttl"], secret_scan=cfg.get("secret_scan", True))
        store = team.install(Store(cfg["root"], settings))  # the team's .kg/ in its load and close steps
        try:
            store.open("starting")
        except KgError as exc:
            raise StartError(exc.message)
        except OSError as exc:
            raise StartError("storage root %s is not usable: %s." % (cfg["root"], exc.strerror or exc))
        try:
            daemon = Daemon((cfg["host"], cfg["port"]), store, cfg["host"], cfg["token"],
                            structured_output=cfg.get("structured_output", False))
        except OSError as exc:
            store.close()
            if exc.errno in (98, 48):
                raise StartError("port %s on %s is already in use (is kgd already running? try `kgd status`)."
                                 % (cfg["port"], cfg["host"]))
            raise StartError("cannot listen on %s:%s: %s." % (cfg["host"], cfg["port"], exc.strerror or exc))
        daemon.hooks = hooks_handler(store)
        daemon.remote = self.remote = remote_sync(store, cfg)
        self.store, self.daemon = store, daemon
        store.root_lock.update("port %d" % self.port)
        if cfg["host"] not in LOOPBACK and not cfg["token"]:
            log.warning("listening on %s WITHOUT a token: anyone who can reach this address can read and change "
                        "the memory. Set --token or KG_TOKEN, or bind to 127.0.0.1.", cfg["host"])
        self.loop = Loop(
            store, settings.save_interval,
            housekeeping=[daemon.reap, store.team.poll, self.remote.tick, store.staleness.tick],  # marks: contract 12
        ).start()
        self.thread = threading.Thread(target=daemon.serve_forever, kwargs={"poll_interval": 0.2}, name="kgd-http")
        self.thread.start()
        return self

    @property
    def port(self):
        return self.daemon.server_address[1]

    @property
    def url(self):
        host = self.daemon.server_address[0]
        return "http://%s:%d/" % ("[%s]" % host if ":" in host else host, self.port)

    def running(self):
        return self.thread is not None and self.thread.is_alive()

    def stop(self):
        """Stop accepting, finish in-flight requests, then flush and close the store. Idempotent."""
        daemon = self.daemon
        if daemon is None or self.stopped:
            return
        self.stopped = True
        daemon.shutdown()
        daemon.begin_stop()
        self.remote.stop()  # a round under way is cancelled; a `kgd sync` waiting is answered
        deadline = time.monotonic() + STOP_GRACE
        while daemon.open_connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.server_close()
        self.thread.join(timeout=5)
        self.loop.stop()
        self.store.close()


def remote_sync(store, cfg):
    """The personal remote (kg/travel/remote.py): its worker runs only once `kgd sync --remote` set one."""
    remote = LazyRemote(store, cfg["root"], cfg.get("sync_interval", 300.0))
    store.add_listener(remote.changed)
    return remote.start()


class LazyRemote:
    """kg/travel/remote.py (and git, subprocess) loaded only once a remote is set up (ROOT/sync.json) or
    asked for (POST /api/remote): a daemon with no remote never imports them."""

    def __init__(self, store, root, interval):
        self.store, self.root, self.interval = store, root, interval
        self.real = None
        self.lock = threading.Lock()

    def load(self):
        with self.lock:
            if self.real is None:
                from ..travel.remote import RemoteSync
                from ..travel.remote_bridge import Bridge
                from ..travel.remote_repo import sync_folder

                bridge = Bridge(self.store, sync_folder(self.root))
                self.real = RemoteSync(self.root, self.interval, bridge=bridge).start()
        return self.real

    def start(self):
        if os.path.exists(os.path.join(self.root, "sync.json")):
            self.load()
        return self

    def changed(self, event=None):
        real = self.real
        if real is not None:
            real.changed(event)

    def status(self):
        if self.real is None:
            return {"enabled": False, "remote": None, "last_ok": None, "last_error": None, "syncing": False}
        return self.real.status()

    def sync_now(self, wait):
        return self.load().sync_now(wait)

    def tick(self):
        real = self.real
        if real is not None:
            real.tick()

    def stop(self):
        if self.real is not None:
            self.real.stop()


def hooks_handler(store):
    """The handler for POST /api/hooks: kg/agents/loop.py's, loaded on the first hook call (a daemon no
    Claude Code hook talks to never pays for it: its module, the recall index, hashlib)."""
    loaded = []
    lock = threading.Lock()

    def handle(payload, agent="claude", event=None):
        if not loaded:
            with lock:
                if not loaded:
                    from ..agents import loop
                    loaded.append(loop.handler(store))
        return loaded[0](payload, agent, event)
    return handle


GC_FULL_AFTER = 1000  # young collections between full ones (Python's default: 10 x 10)


def tune_collector():
    """Make the cycle collector's full passes rare. The daemon's heap is large, long-lived and
    acyclic (graphs of dicts, freed by reference counts), and a full pass walks all of it: with
    the default thresholds taking a teammate's 20,000 nodes spent half its time under the store's
    lock in full passes (bench/README.md). Young collections, which catch short-lived cycles, are
    unchanged."""
    import gc

    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_AFTER)


def release_startup_memory():
    """Hand the heap left over from start-up (compiling and loading the modules) back to the
    system: glibc keeps freed memory otherwise, and this is a long-running background service.
    A no-op where there is no glibc (macOS)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols include glibc's
    except (OSError, AttributeError, ImportError):
        pass


def run(cfg):
    """`kgd serve`: run until SIGTERM / SIGINT; the exit code (2 when it could not start)."""
    logging.basicConfig(level=getattr(logging, cfg["log_level"]), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = App(cfg)
    try:
        app.start()
    except StartError as exc:
        sys.stderr.write("kgd: %s\n" % exc)
        return 2
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stderr.write("kgd %s listening on %s (root: %s)\n" % (__version__, app.url, cfg["root"]))
    sys.stderr.flush()
    release_startup_memory()
    tune_collector()
    while not stop.wait(1.0):
        if not app.running():
            break
    log.info("stopping: finishing in-flight requests and flushing")
    app.stop()
    log.info("stopped")
    return 0
