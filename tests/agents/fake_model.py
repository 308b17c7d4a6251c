"""A scripted model server on loopback that records every request, speaking one of three wire protocols.

Rules owned here: every request is recorded as it arrived (method, path, headers, JSON body) before
it is answered; a model turn (recognised by the protocol) is answered from `responder(view)` where
`view` is the protocol-neutral `Turn` of that request and the answer a list of actions
(`say(text)` / `call(name, args)`); every other path answers a harmless empty JSON object, so no
side call of an agent blocks it; a responder's exception is kept in `.errors` and answered 500.
The protocols themselves (parsing a request, streaming an answer) live in protocols.py.
"""

import http.server
import json
import threading

import protocols


def say(text):
    return {"type": "text", "text": text}


def call(name, args):
    return {"type": "call", "name": name, "args": args}


class FakeModel:
    """The server plus what it was sent: `requests` is a list of {"method", "path", "headers", "body"}."""

    def __init__(self, protocol, responder):
        self.proto = protocols.PROTOCOLS[protocol]()
        self.responder = responder
        self.requests = []
        self.errors = []
        self._lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if self.headers.get("Content-Encoding") == "gzip" and raw:
                    import gzip
                    raw = gzip.decompress(raw)
                elif self.headers.get("Content-Encoding") == "zstd" and raw:
                    return "<zstd body, %d bytes>" % len(raw)
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return raw.decode("utf-8", "replace")

            def _send(self, status, ctype, data):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_json(self, status, obj):
                self._send(status, "application/json", json.dumps(obj).encode("utf-8"))

            def _serve(self, method):
                body = self._body() if method in ("POST", "PUT") else None
                fake._record(method, self.path, dict(self.headers), body)
                kind = fake.proto.kind(method, self.path, body)
                if kind is None:
                    return self._send_json(200, fake.proto.side_answer(method, self.path))
                try:
                    actions = fake.proto.auto(kind, body)
                    if actions is None:
                        actions = fake.responder(fake.proto.turn(body, self.path))
                except Exception as exc:  # the test sees it in .errors; the agent gets an API error
                    fake.errors.append(repr(exc))
                    return self._send_json(500, {"error": {"message": repr(exc), "code": 500}})
                ctype, chunks = fake.proto.answer(kind, body, self.path, actions)
                if ctype == "application/json":
                    return self._send(200, ctype, b"".join(chunks))
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_HEAD(self):
                fake._record("HEAD", self.path, dict(self.headers), None)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _record(self, method, path, headers, body):
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def dump(self, path, since=0):
        """Write the recorded requests from `since` on to path (JSON), for reading a failure after the fact."""
        with open(str(path), "w") as f:
            json.dump(self.requests[since:], f, indent=1)
        return path

    def turns(self, since=0):
        """The protocol-neutral Turn of every recorded model turn from request `since` on, in order."""
        with self._lock:
            requests = self.requests[since:]
        return [self.proto.turn(r["body"], r["path"]) for r in requests
                if self.proto.kind(r["method"], r["path"], r["body"]) is not None]
