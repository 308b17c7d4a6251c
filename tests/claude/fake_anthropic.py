"""A scripted stand-in for the Anthropic Messages API, on loopback, for driving the real Claude Code.

It owns three rules: every request is recorded as it arrived (path, headers, JSON body); a
`POST /v1/messages` is answered by a `responder(body) -> list of content blocks` the test supplies
(as SSE events when the body asks for `stream: true`, else one JSON message); and every other path
answers a harmless empty JSON object, so no call Claude Code makes on the side blocks it.
"""

import http.server
import json
import threading
import uuid

MODEL = "claude-sonnet-4-5-20250929"


def text_block(text):
    return {"type": "text", "text": text}


def tool_use_block(name, args):
    return {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name, "input": args}


def _message(blocks, model):
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def _sse_events(msg):
    """The event sequence of one streamed message, as the Messages API sends it."""
    head = dict(msg, content=[], stop_reason=None, usage=dict(msg["usage"], output_tokens=1))
    yield "message_start", {"type": "message_start", "message": head}
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": dict(block, input={})}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": msg["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


class FakeAnthropic:
    """The server plus what it was sent: `requests` is a list of {"path", "headers", "body"}."""

    def __init__(self, responder):
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
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return raw.decode("utf-8", "replace")

            def _send_json(self, status, obj):
                data = json.dumps(obj).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake._record(self.path, dict(self.headers), None)
                self._send_json(200, {})

            def do_HEAD(self):
                fake._record(self.path, dict(self.headers), None)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                body = self._body()
                fake._record(self.path, dict(self.headers), body)
                path = self.path.split("?")[0]
                if path.endswith("/v1/messages/count_tokens"):
                    return self._send_json(200, {"input_tokens": 100})
                if not path.endswith("/v1/messages") or not isinstance(body, dict):
                    return self._send_json(200, {})
                try:
                    blocks = fake.responder(body)
                except Exception as exc:  # the test sees it in .errors; Claude Code gets an API error
                    fake.errors.append(repr(exc))
                    return self._send_json(500, {"type": "error", "error": {"type": "api_error",
                                                                           "message": repr(exc)}})
                msg = _message(blocks, body.get("model") or MODEL)
                if not body.get("stream"):
                    return self._send_json(200, msg)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event, data in _sse_events(msg):
                    self.wfile.write(("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode("utf-8"))
                self.wfile.flush()
                self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _record(self, path, headers, body):
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def dump(self, path):
        """Write every recorded request to path (JSON), for reading a failure after the fact."""
        with open(str(path), "w") as f:
            json.dump(self.requests, f, indent=1)
        return path

    def messages(self):
        """Bodies of the recorded `POST /v1/messages` requests, in order."""
        return [r["body"] for r in self.requests
                if r["path"].split("?")[0].endswith("/v1/messages") and isinstance(r["body"], dict)]
