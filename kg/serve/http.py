"""The one HTTP port (contract section 2): framing, limits, keep-alive and the route table. Sockets live here.

Rules owned here:
- ROUTES maps a path to the Handler methods that answer it, per HTTP method: POST / and /mcp are
  MCP (GET / answers a person's browser with a small page, anything else on them 405 with Allow:
  POST); GET /health; /api/... goes to kg/api/rest.py, which answers its own 404 and 405; GET /ws
  (kg/serve/ws.py, then kg/serve/broadcaster.py serves it); the viewer's files (kg/serve/viewer.py).
  Anything else is a JSON 404; a known path with a wrong method is 405 with Allow.
- Every request passes kg/serve/guard.py's Policy (Host, Origin, token) before it is routed.
- Bodies over 4 MiB get 413 without being read (and the connection is closed).
- Every response is sent in one write with Content-Length (no Nagle stalls on keep-alive).
- Connections are bounded (503 past the limit), idle keep-alive connections time out, and a
  request whose headers trickle in slower than HEADER_DEADLINE is cut off by the reaper.
- Any unexpected exception becomes a plain 500 JSON error; the traceback goes to the log.
"""

import logging
import socket
import socketserver
import threading
import time
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .. import __version__
from ..api import jsonrpc, mcp
from ..core.errors import KgError
from ..core.text import compact_json
from ..memory import foreground
from ..memory.projects import resolve_project_root
from ..memory.sessions import new_session_id
from . import broadcaster, guard, hub, ws

log = logging.getLogger(__name__)

MAX_BODY = 4 * 1024 * 1024
MAX_CONNECTIONS = 256
IDLE_TIMEOUT = 30.0  # seconds a keep-alive connection may sit silent
HEADER_DEADLINE = 30.0  # seconds from waiting for a request to having its headers
MAX_TRAILERS = 64  # trailer lines accepted after a chunked body's last chunk
MCP_ONLY = "MCP here is POST only (stateless Streamable HTTP: no SSE stream, no session)."


# methods: HTTP method ("*": any) -> name of the Handler method that answers it;
# allow and refusal: the Allow header and the message of a 405.
Route = namedtuple("Route", "methods allow refusal")


_GET = Route({"GET": "health", "HEAD": "health"}, "GET", "use GET.")
_VIEW = Route({"GET": "viewer_file", "HEAD": "viewer_file"}, "GET", "use GET.")
ROUTES = {
    "/": Route({"POST": "mcp", "GET": "front_page"}, "POST", MCP_ONLY),
    "/mcp": Route({"POST": "mcp"}, "POST", MCP_ONLY),
    "/health": _GET,
    "/api/health": _GET,
    "/ws": Route({"GET": "websocket"}, "GET", "use GET with a WebSocket upgrade."),
    "/ui": _VIEW,
    "/ui/": _VIEW,
    "/ui/app.css": _VIEW,
    "/ui/app.js": _VIEW,
}
# Under a prefix, the module behind it answers its own 404 and 405 (kg/api/rest.py's table).
PREFIXES = (("/api/", Route({"*": "api"}, "", "")),)


def find_route(path):
    route = ROUTES.get(path)
    if route is None:
        for prefix, r in PREFIXES:
            if path.startswith(prefix):
                return r
    return route


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kgd/" + __version__
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT

    # ------------------------------------------------------------ plumbing

    def setup(self):
        super().setup()
        self.server.track(self, True)
        self.request_started = None

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.track(self, False)

    def parse_request(self):
        ok = super().parse_request()  # sets self.command BEFORE reading the headers
        self.headers_done = True
        foreground.begin()  # background work gives way until this request is answered
        # One lower-cased dict per request (email.message's get() rescans every header per call),
        self.h = {}  # its values without surrounding whitespace, as RFC 9110 section 5.5 parses a field.
        if ok:
            for k, v in self.headers.items():
                self.h.setdefault(k.lower(), v.strip(" \t"))
        return ok

    def handle_one_request(self):
        self.request_started = time.monotonic()
        self.headers_done = False
        self.h = {}
        self.command = None
        self.body_consumed = False
        try:
            super().handle_one_request()
        except (ConnectionError, socket.timeout, OSError):
            self.close_connection = True
        finally:
            self.request_started = None
            foreground.end()

    def log_message(self, fmt, *args):
        log.debug("%s " + fmt, self.address_string(), *args)

    def log_error(self, fmt, *args):
        log.debug("%s " + fmt, self.address_string(), *args)

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (bad request line, header too long) as JSON too."""
        self.close_connection = True
        self.respond(code, {"error": message or "bad request"})

    def _skip_unread_body(self):
        """A request answered without reading its body (403, 404, 405...) must not leave that
        body in the stream to be parsed as the next request: drain a small one, else close."""
        if self.body_consumed or self.close_connection or not self.h:
            return
        self.body_consumed = True
        if "chunked" in (self.h.get("transfer-encoding") or "").lower():
            self.close_connection = True
            return
        try:
            n = int(self.h.get("content-length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > 65536:
            self.close_connection = True
        elif n:
            self.rfile.read(n)

    def respond(self, status, obj=None, headers=None, body=None, content_type="application/json"):
        self._skip_unread_body()
        if body is None and obj is not None:
            body = compact_json(obj).encode("utf-8")
        body = body or b""
        reason = self.responses.get(status, ("",))[0]
        lines = ["HTTP/1.1 %d %s" % (status, reason), "Server: " + self.server_version,
                 "Content-Length: %d" % len(body), "Cache-Control: no-store",
                 "X-Content-Type-Options: nosniff"]
        if body:
            lines.append("Content-Type: " + content_type)
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        if self.close_connection or getattr(self.server, "stopping", False):
            self.close_connection = True
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body if self.command != "HEAD" else b"")
        self.wfile.write(data)
        self.wfile.flush()

    def error(self, status, message, headers=None):
        self.respond(status, {"error": message}, headers)

    # ------------------------------------------------------------ entry points

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    def do_PATCH(self):
        self.route("PATCH")

    def do_OPTIONS(self):
        self.route("OPTIONS")

    def do_HEAD(self):
        self.route("HEAD")

    def __getattr__(self, name):
        # Any other method (TRACE, CONNECT, lower-case get, garbage): routed like the rest, so a
        # known path answers 405 with Allow and an unknown one 404, never http.server's 501.
        if name.startswith("do_"):
            return lambda: self.route(self.command)
        raise AttributeError(name)

    def route(self, method):
        try:
            self.dispatch(method)
        except (ConnectionError, socket.timeout, BrokenPipeError):
            self.close_connection = True
        except Exception:
            log.exception("internal error on %s %s", method, self.path[:200])
            self.close_connection = True
            try:
                self.error(500, "internal error; the daemon logged the details.")
            except OSError:
                pass

    def dispatch(self, method):
        url = urlsplit(self.path)
        path = url.path
        query = parse_qs(url.query, keep_blank_values=True) if url.query else {}
        refusal = self.server.policy.check(method, path, self.h, query)
        if refusal is not None:
            if refusal.close:
                self.close_connection = True
            return self.error(refusal.status, refusal.message, refusal.headers)
        route = find_route(path)
        if route is None:
            return self.error(404, "no such path %s; kgd serves MCP on POST / and /mcp, /health, /api/..., /ws "
                                   "and /ui." % path[:200])
        name = route.methods.get(method) or route.methods.get("*")
        if name is None:
            return self.error(405, route.refusal, {"Allow": route.allow})
        return getattr(self, name)(method, path, query)

    # ------------------------------------------------------------ handlers: (method, path, query)

    def front_page(self, method, path, query):
        """GET /: a person's browser gets a page pointing to /ui; an MCP client gets its 405."""
        if path == "/" and "text/html" in (self.h.get("accept") or "").lower():
            from . import viewer
            return self.respond(200, body=viewer.front_page(self.h.get("host")),
                                content_type="text/html; charset=utf-8",
                                headers={"Content-Security-Policy": viewer.CSP})
        return self.error(405, MCP_ONLY, {"Allow": "POST"})

    def health(self, method, path, query):
        return self.respond(200, self.server.health())

    def viewer_file(self, method, path, query):
        from . import viewer  # loaded on first view: most daemons never serve the page

        name, content_type = viewer.FILES[path]
        try:
            body = viewer.read(name)
        except OSError:
            log.error("the viewer's file kg/serve/ui/%s is missing from this installation", name)
            return self.error(500, "the viewer's file kg/serve/ui/%s is missing from this installation of kgd; "
                                   "reinstall it, or rebuild kgd.pyz with `kgd bundle`." % name)
        return self.respond(200, body=body, content_type=content_type,
                            headers={"Content-Security-Policy": viewer.CSP})

    def api(self, method, path, query):
        from ..api import rest  # loaded on first use: the OpenAPI document is large

        body = None
        if method in ("POST", "PUT", "PATCH"):
            body = self.read_body()
            if body is None:
                return
        status, obj, headers = rest.handle(self.server.store, method, path, query, body,
                                           self.h.get("content-type"), hooks=self.server.hooks,
                                           remote=self.server.remote)
        return self.respond(status, obj, headers)

    # ------------------------------------------------------------ bodies

    def read_body(self):
        """The request body, or None after answering an error (413, 400, 411)."""
        self.body_consumed = True
        te = (self.h.get("transfer-encoding") or "").lower()
        if "chunked" in te:
            return self.read_chunked()
        length = self.h.get("content-length")
        if length is None:
            return b""
        try:
            n = int(length)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self.error(400, "Content-Length is not a number.")
            return None
        if n > MAX_BODY:
            self.close_connection = True
            self.error(413, "body of %d bytes is over the 4 MiB limit." % n)
            return None
        data = self.read_exactly(n)
        if data is None or len(data) < n:
            self.close_connection = True
            return None
        return data

    def read_exactly(self, n, deadline=None):
        """n body bytes, or None when they do not all arrive by the deadline (default:
        HEADER_DEADLINE from now), so a client trickling its body cannot hold a thread (R.U.D.Y.)."""
        deadline = deadline if deadline is not None else time.monotonic() + HEADER_DEADLINE
        parts, got = [], 0
        try:
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.connection.settimeout(min(left, IDLE_TIMEOUT))
                b = self.rfile.read1(min(n - got, 65536))
                if not b:
                    break
                parts.append(b)
                got += len(b)
        except OSError:  # socket.timeout included
            return None
        finally:
            self.connection.settimeout(IDLE_TIMEOUT)
        return b"".join(parts)

    def _skip_trailers(self, chunks, deadline):
        """The trailer lines after the last chunk: at most MAX_TRAILERS, within the body's deadline
        (a client sending trailers forever would hold this thread, and the background work that
        gives way to requests, for good)."""
        for _ in range(MAX_TRAILERS + 1):
            if time.monotonic() > deadline:
                break
            if not self.rfile.readline(1024).strip():
                return b"".join(chunks)
        self.close_connection = True
        self.error(400, "malformed chunked body: too many trailer lines, or too slow.")
        return None

    def read_chunked(self):
        """A chunked body: hex sizes only, within MAX_BODY and one HEADER_DEADLINE overall."""
        chunks, total = [], 0
        deadline = time.monotonic() + HEADER_DEADLINE
        while True:
            line = self.rfile.readline(1024)
            digits = line.split(b";")[0].strip()
            if not digits or len(digits) > 16 or digits.strip(b"0123456789abcdefABCDEF"):
                self.close_connection = True
                self.error(400, "malformed chunked body: a chunk size must be hexadecimal digits.")
                return None
            size = int(digits, 16)
            if size == 0:
                return self._skip_trailers(chunks, deadline)
            total += size
            if total > MAX_BODY:
                self.close_connection = True
                self.error(413, "body is over the 4 MiB limit.")
                return None
            data = self.read_exactly(size, deadline)
            if data is None or len(data) < size:
                self.close_connection = True
                return None
            chunks.append(data)
            self.rfile.readline(8)

    # ------------------------------------------------------------ MCP

    def mcp(self, method, path, query):
        body = self.read_body()
        if body is None:
            return
        req = mcp.Request(self.h.get("mcp-protocol-version"), self.h.get("mcp-method"),
                          self.h.get("mcp-name"), self.h.get("user-agent"))
        payload, status = jsonrpc.handle(body, self.server.mcp.dispatch, req)
        if payload is None:
            return self.respond(202)
        self.respond(status, payload)

    # ------------------------------------------------------------ WebSocket

    def websocket(self, method, path, query):
        try:
            accept = ws.check_handshake(self.command, self.headers)
        except ws.HandshakeError as exc:
            return self.error(exc.status, str(exc), getattr(exc, "headers", None))
        project = (query.get("project_path") or [None])[0]
        project_path = None
        if project:
            try:
                # Events name the graph's path: another checkout of a repository gets that graph's.
                project_path = self.server.store.registry.graph_path(resolve_project_root(project))
            except KgError as exc:
                return self.error(400, exc.message)
        if self.server.hub.count() >= self.server.feeds.max_feeds:
            return self.error(503, "too many live-feed clients; retry in a moment.", {"Retry-After": "1"})
        self.wfile.write(ws.handshake_response(accept))
        self.wfile.flush()
        self.close_connection = True
        # session_id names this feed connection (in logs and the viewer); it is not a store
        # session, so watching the memory writes nothing and pins nothing.
        hello = {"type": "connected", "session_id": new_session_id(), "project_path": project_path,
                 "version": __version__}
        # The broadcaster thread serves the feed from now on; this handler thread returns.
        sock, early = hub.take_over(self.connection, self.rfile)
        self.server.feeds.attach(sock, hub.project_filter(project_path), hello, early)


def no_hooks(payload):
    """A Daemon's hook answer until kg/serve/app.py sets kg/agents/loop.py's (tests may not): an empty 200."""
    return None


class Daemon(ThreadingHTTPServer):
    """The HTTP server plus what handlers need: store, MCP server, hub, guards, bookkeeping."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, store, host="127.0.0.1", token=None, structured_output=False):
        self.store = store
        self.mcp = mcp.Server(store, structured=structured_output)
        self.hub = hub.Hub()
        self.feeds = broadcaster.Broadcaster(self.hub)
        self.stop_event = threading.Event()
        self.stopping = False
        self.started = time.time()
        self.policy = guard.Policy(host, token)
        self.hooks = no_hooks
        self.remote = None  # the personal remote (kg/travel/remote.py), set where the daemon is wired
        self._conns = set()
        self._conns_lock = threading.Lock()
        store.add_listener(self.hub.feed)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def server_bind(self):
        """As HTTPServer's, without socket.getfqdn(): a reverse DNS lookup that can stall
        start-up for seconds on a machine with slow DNS (and loads the IDNA codec)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def track(self, handler, alive):
        with self._conns_lock:
            if alive:
                self._conns.add(handler)
            else:
                self._conns.discard(handler)

    def process_request(self, request, client_address):
        with self._conns_lock:
            busy = len(self._conns) >= MAX_CONNECTIONS
        if busy or self.stopping:
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: 52\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
                                b'{"error":"too many connections; retry in a moment."}')
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def open_connections(self):
        """HTTP connections plus live feeds, so a stop waits for the feeds' 1001 closes too."""
        with self._conns_lock:
            n = len(self._conns)
        return n + self.feeds.open_count()

    def health(self):
        h = {"status": "ok", "version": __version__, "uptime_s": round(time.time() - self.started, 3)}
        h.update(self.store.health())
        h["ws_clients"] = self.hub.count()
        return h

    def reap(self):
        """Cut off connections whose request headers trickle in too slowly (slowloris)."""
        now = time.monotonic()
        with self._conns_lock:
            handlers = list(self._conns)
        for h in handlers:
            started = h.request_started
            if started is not None and now - started > HEADER_DEADLINE and not getattr(h, "headers_done", False):
                try:
                    h.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def begin_stop(self):
        """Stop accepting; wake idle keep-alive connections and WebSocket loops so they end."""
        self.stopping = True
        self.stop_event.set()
        self.hub.close()
        with self._conns_lock:
            handlers = list(self._conns)
        for h in handlers:
            if h.request_started is None or getattr(h, "command", None) is None:
                try:
                    h.connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
