"""Two loopback servers that watch an agent's traffic: an MCP tap in front of kgd, a refusing proxy.

Rules owned here:
- `McpTap` forwards every request to kgd unchanged (headers kept, Host set to kgd's) and records
  the request and kgd's answer, so a test can compare what kgd sent for a tool call with what the
  agent then handed its model. kgd's MCP is POST-only and answers whole JSON bodies, so the tap
  buffers each exchange; it opens one upstream connection per request.
- `RefusingProxy` is the HTTP(S)_PROXY an agent is given: it records every attempt and answers 403,
  so a test can assert that nothing the agent tried went anywhere but the loopback servers it named.
"""

import http.client
import http.server
import json
import threading

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
       "content-length"}


class _Server:
    def _start_server(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class McpTap(_Server):
    """`exchanges`: [{"method", "path", "headers", "request", "status", "response"}], JSON decoded where it parses."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.exchanges = []
        self._lock = threading.Lock()
        tap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                headers["Host"] = "127.0.0.1:%d" % tap.upstream
                conn = http.client.HTTPConnection("127.0.0.1", tap.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=raw, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    status, rheaders = resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
                finally:
                    conn.close()
                tap._record(self.command, self.path, dict(self.headers), raw, status, data)
                self.send_response(status)
                for k, v in rheaders:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_HEAD = do_OPTIONS = _forward

        self._start_server(Handler)

    def _record(self, method, path, headers, raw, status, data):
        def decode(b):
            try:
                return json.loads(b) if b else None
            except ValueError:
                return b.decode("utf-8", "replace")
        with self._lock:
            self.exchanges.append({"method": method, "path": path, "headers": headers, "request": decode(raw),
                                   "status": status, "response": decode(data)})

    def recording(self, since=0):
        with self._lock:
            return Recording(self.exchanges[since:])


class Recording:
    """A stretch of a tap's exchanges, read as MCP messages and HTTP hooks."""

    def __init__(self, exchanges):
        self.exchanges = exchanges

    def messages(self):
        """(request, response) pairs of JSON-RPC messages, batches unrolled, in order."""
        out = []
        for ex in self.exchanges:
            if not ex["path"].startswith("/mcp"):
                continue
            req, resp = ex["request"], ex["response"]
            reqs = req if isinstance(req, list) else [req]
            resps = resp if isinstance(resp, list) else [resp]
            by_id = {r.get("id"): r for r in resps if isinstance(r, dict)}
            for r in reqs:
                if isinstance(r, dict):
                    out.append((r, by_id.get(r.get("id")) if "id" in r else None))
        return out

    def tool_results(self, tool):
        """[(arguments, text of kgd's result)] of every tools/call of `tool`, in order."""
        out = []
        for req, resp in self.messages():
            params = req.get("params") or {}
            if req.get("method") == "tools/call" and params.get("name") == tool and resp:
                content = (resp.get("result") or {}).get("content") or []
                out.append((params.get("arguments"), "".join(c.get("text", "") for c in content)))
        return out

    def client_names(self):
        """The clientInfo names the agent sent (in `initialize`, or in `_meta` of the stateless revision)."""
        names = set()
        for req, _ in self.messages():
            params = req.get("params") or {}
            info = params.get("clientInfo") or (params.get("_meta") or {}).get("io.modelcontextprotocol/clientInfo")
            if isinstance(info, dict) and info.get("name"):
                names.add(info["name"])
        return sorted(names)

    def hooks(self):
        """[(path, hook input, kgd's answer)] of the HTTP hooks that went through the tap."""
        return [(ex["path"], ex["request"], ex["response"]) for ex in self.exchanges
                if ex["path"].startswith("/api/hooks")]


class RefusingProxy(_Server):
    def __init__(self):
        self.attempts = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _refuse(self):
                proxy.attempts.append("%s %s" % (self.command, self.path))
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            do_GET = do_POST = do_CONNECT = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = _refuse

        self._start_server(Handler)
