"""Bounded, seeded fuzzing of every way in: bad input gets a clear error, never a crash or a hang.

Six kinds of case, each against its own kgd process (cwd in an empty temp dir, --root in
another): raw malformed HTTP over sockets, JSON-RPC bodies, tool arguments, kg_read cwd
values (and the other places a project path comes in), REST requests and WebSocket frames.

Every case must get a clear answer: an HTTP 2xx/4xx with a JSON body (202 may be empty), a
JSON-RPC error that is not -32603 (an internal error is a bug), an isError tool result, or a
WebSocket close / a plain connection close; never a 5xx, never a traceback on the wire. After
each batch GET /health answers 200. At the end the daemon stops cleanly (exit 0), its log
holds no traceback, the cwd is still empty, no kgd file appeared outside the root, and every
file in the root parses as strict JSON.

Findings are collected, grouped by what went wrong, and reported together at the end of each
test. Seed: KGD_FUZZ_SEED (default below); case counts scale with KGD_FUZZ_SCALE (default 1).
"""

import base64
import collections
import json
import os
import random
import re
import socket
import struct
import sys
import time
from urllib.parse import quote

import pytest

from helpers import REPO, Daemon

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("KGD_FUZZ_SEED", "20261129"))
SCALE = float(os.environ.get("KGD_FUZZ_SCALE", "1"))
BATCH = 100
TIMEOUT = 5.0


def n_cases(n):
    return max(1, int(n * SCALE))


# =============================================================================== strict JSON

def _no_constant(name):
    raise ValueError("non-standard JSON constant %s" % name)


def strict_json(data):
    """Parse as RFC 8259 JSON: UTF-8, no NaN / Infinity, no lone surrogates."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    obj = json.loads(text, parse_constant=_no_constant)
    json.dumps(obj, ensure_ascii=False).encode("utf-8")  # raises on lone surrogates
    return obj


LEAK = re.compile(r'Traceback \(most recent call last\)|File "[^"]*", line \d+')


# =============================================================================== raw HTTP

def read_until_close(s, data=b"", timeout=TIMEOUT, on_reset="reset"):
    """Read until EOF or the deadline -> (`data` + the bytes received, "closed" | "timeout" | on_reset)."""
    data = bytearray(data)
    deadline = time.monotonic() + timeout
    while True:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            b = s.recv(65536)
        except socket.timeout:
            return bytes(data), "timeout"
        except OSError:
            return bytes(data), on_reset
        if not b:
            return bytes(data), "closed"
        data += b
        if time.monotonic() > deadline:
            return bytes(data), "timeout"


def raw_exchange(port, data, timeout=TIMEOUT, half_close=True):
    """Send bytes, half-close, read until the server closes. -> (bytes, outcome)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading everything (413)
        # a reset after an early close: whatever arrived is the answer
        return read_until_close(s, timeout=timeout, on_reset="closed")
    finally:
        s.close()


STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})(?: [^\r\n]*)?\Z")


def parse_responses(data, head=False):
    """Split a byte stream of HTTP/1.1 responses. -> list of (status, headers, body).
    Raises ValueError on anything that is not a well-formed response with Content-Length."""
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            raise ValueError("truncated response head %r" % data[pos:pos + 80])
        lines = data[pos:end].split(b"\r\n")
        m = STATUS_LINE.match(lines[0])
        if not m:
            raise ValueError("bad status line %r" % lines[0][:80])
        status = int(m.group(1))
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(b":")
            if not sep:
                raise ValueError("bad response header line %r" % line[:80])
            headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        pos = end + 4
        if status == 101:
            out.append((status, headers, data[pos:]))
            break
        if 100 <= status < 200:
            continue  # 100 Continue
        if "content-length" not in headers:
            raise ValueError("response %d without Content-Length" % status)
        n = int(headers["content-length"])
        if head and (pos == len(data) or data[pos:].startswith(b"HTTP/1.")):
            body = b""  # HEAD: Content-Length without a body
        else:
            body = data[pos:pos + n]
            if len(body) < n:
                raise ValueError("response %d body truncated (%d of %d bytes)" % (status, len(body), n))
            pos += n
        out.append((status, headers, body))
    return out


# =============================================================================== random data

HOSTILE = [
    "", " ", "\t", ".", "..", "...", "../..", "../../etc/passwd", "..\\..\\windows\\win.ini", "/etc/passwd",
    "/abs/path", "/", "//", "///x", "./x", "x/../../..", "~", "~/.ssh/id_rsa", "$HOME", "${HOME}", "%2e%2e%2f",
    "%00", "C:\\Windows\\system32", "\\\\server\\share", "\x00", "a\x00b", "/tmp/\x00x", "\x01\x02\x03",
    "\x1b[31mred\x1b[0m", "\r\nX-Injected: 1", "line\nbreak", "\x7f", "\x85", "\u202e", "\ufeff", "\u2028",
    "\uffff", "\U0010ffff", "\u2603", "\U0001f600" * 10, "\u540d\u524d", "\ud800", "\udfff", "a\ud800b", "\udc80\ud800",
    "null", "true", "0", "-1", "1e999", "NaN", "<script>alert(1)</script>", "' OR '1'='1", "`id`", "$(id)",
    "%s%s%s%n", "{{7*7}}", "A" * 201, "b" * 2001, "c" * 10240, "CON", "NUL", "/proc/self/environ", "/dev/zero",
    "/dev/null", "ok-id", "kg_read", "user", "project", "active", "-", "a" * 4097, "/" + "d/" * 2100,
]
SAFE_IDS = ["alpha", "beta", "gamma", "delta", "shared-id", "auth-tokens-expire", "x"]


class Raw(str):
    """Text emitted verbatim by dump(): NaN, 1e999, deep nesting..."""


RAW_LITERALS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000, "-0", "1.0e-400", "0.1e1",
                "123456789012345678901234567890", "1E400", "2e-5"]


def dump(v):
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dump(x) for x in v) + "]"
    return json.dumps(v)


def deep(r, n=None):
    n = n or r.choice([100000, 50000, 2000, 990, 500])
    if r.random() < 0.5:
        return Raw("[" * n + "]" * n)
    return Raw('{"a":' * n + "1" + "}" * n)


def rand_unicode(r, n):
    out = []
    for _ in range(n):
        k = r.random()
        if k < 0.5:
            out.append(chr(r.randint(32, 126)))
        elif k < 0.6:
            out.append(chr(r.randint(0, 31)))
        elif k < 0.7:
            out.append(chr(r.randint(0xD800, 0xDFFF)))
        elif k < 0.9:
            out.append(chr(r.randint(0x80, 0xFFFF)))
        else:
            out.append(chr(r.randint(0x10000, 0x10FFFF)))
    return "".join(out)


class Budget:
    """Caps the number of 1 MB strings a generator emits."""

    def __init__(self, n):
        self.n = n

    def take(self):
        if self.n > 0:
            self.n -= 1
            return True
        return False


def rand_str(r, budget=None):
    k = r.random()
    if budget is not None and k < 0.01 and budget.take():
        return "M" * (1 << 20)
    if k < 0.45:
        return r.choice(HOSTILE)
    if k < 0.65:
        return r.choice(SAFE_IDS)
    if k < 0.8:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz-_0123456789") for _ in range(r.randint(1, 30)))
    return rand_unicode(r, r.randint(0, 40))


def rand_json(r, depth=0, budget=None):
    k = r.random()
    if depth > 3:
        k = k * 0.7
    if k < 0.08:
        return None
    if k < 0.14:
        return r.random() < 0.5
    if k < 0.24:
        return r.choice([0, 1, -1, 7, 200, 201, 2 ** 31, 2 ** 63, -2 ** 63, 10 ** 30, r.randint(-1000, 1000)])
    if k < 0.29:
        return r.choice([0.5, -0.0, 1e308, 1.5, -2.25, 3.0])
    if k < 0.33:
        return Raw(r.choice(RAW_LITERALS))
    if k < 0.62:
        return rand_str(r, budget)
    if k < 0.66 and depth == 0:
        return deep(r)
    if k < 0.83:
        return [rand_json(r, depth + 1, budget) for _ in range(r.randint(0, 4))]
    return {rand_str(r): rand_json(r, depth + 1, budget) for _ in range(r.randint(0, 4))}


def pct(s):
    return quote(s.encode("utf-8", "surrogatepass"), safe="")


# =============================================================================== the harness

KGD_FILE = re.compile(r"^(\.knowledge-graph|user\.json|sessions\.json|graph\.json|kgd\.lock|projects|.*\.journal"
                      r"|.*\.json\.prev"
                      r"|.*\.corrupt-\d+|\.tmp-.*\.part)$")


def kgd_like(names):
    return {n for n in names if KGD_FILE.match(n)}


def listing(d):
    try:
        return set(os.listdir(d))
    except OSError:
        return set()


class Harness:
    def __init__(self, tmp_path, name):
        self.name = name
        self.seed = SEED + sum(map(ord, name))
        self.r = random.Random(self.seed)
        self.tmp = str(tmp_path)
        self.root = os.path.join(self.tmp, "root")
        self.cwd = os.path.join(self.tmp, "cwd")
        os.mkdir(self.cwd)
        self.project = os.path.join(self.tmp, "work", "proj")
        os.makedirs(os.path.join(self.project, ".git"))
        os.makedirs(os.path.join(self.project, "src"))
        self.watched = {d: kgd_like(listing(d)) for d in ("/", "/tmp", REPO, os.path.dirname(self.tmp),
                                                           os.path.expanduser("~"))}
        self.daemon = Daemon(self.root, cwd=self.cwd).start()
        self.port = self.daemon.port
        self.daemon.http_timeout = TIMEOUT * 2
        self.findings = collections.OrderedDict()
        self.counts = collections.Counter()
        self.cases = 0
        self.started = time.monotonic()

    # ---------------------------------------------------------------- bookkeeping

    def fail(self, kind, what, case):
        key = "%s: %s" % (kind, what)
        examples = self.findings.setdefault(key, [])
        examples.append(case)

    def tick(self, kind):
        self.cases += 1
        self.counts[kind] += 1
        if self.cases % BATCH == 0:
            self.batch_check()

    def batch_check(self):
        if self.daemon.proc.poll() is not None:
            self.fail("daemon", "the daemon exited (code %s)" % self.daemon.proc.returncode,
                      "after %d cases" % self.cases)
            pytest.fail(self.report())
        try:
            data, outcome = raw_exchange(self.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            (status, _, body), = parse_responses(data)
            assert status == 200 and strict_json(body)["status"] == "ok"
        except Exception as exc:  # noqa: BLE001 - any failure here is the finding
            self.fail("health", "GET /health failed after a batch: %r" % (exc,), "after %d cases" % self.cases)

    def report(self):
        lines = ["%d finding(s) after %d cases (seed %d, KGD_FUZZ_SEED=%d):" % (
            len(self.findings), self.cases, self.seed, SEED)]
        for key, examples in self.findings.items():
            lines.append("- %s  [%d case(s)]" % (key, len(examples)))
            for ex in examples[:3]:
                text = ex if isinstance(ex, str) else repr(ex)
                lines.append("    e.g. %s" % (text[:300] + ("..." if len(text) > 300 else "")))
        return "\n".join(lines)

    # ---------------------------------------------------------------- keep-alive HTTP (http.client)

    def http(self, method, path, body=None, headers=None):
        """The daemon's keep-alive connection, always with Content-Type: application/json unless overridden."""
        return self.daemon.request(method, path, body, dict({"Content-Type": "application/json"}, **(headers or {})))

    def post_rpc(self, kind, case, body, expect_tool, path="/mcp", headers=None):
        """POST one fuzz case and check the answer; a transport failure is a finding."""
        try:
            status, hdrs, data = self.http("POST", path, body, headers)
        except Exception as exc:  # noqa: BLE001
            self.fail(kind, "transport failure %r" % (exc,), case)
            self.daemon.close_conn()
        else:
            self.check_rpc(kind, case, status, hdrs, data, expect_tool=expect_tool)

    def rpc(self, msg, headers=None):
        body = msg if isinstance(msg, (bytes, str)) else json.dumps(msg)
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        return self.http("POST", "/mcp", body, headers)

    def call(self, name, args):
        st, hdrs, data = self.rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": name, "arguments": args}})
        assert st == 200, (st, data[:300])
        resp = strict_json(data)
        assert "result" in resp and not resp["result"].get("isError"), resp
        return resp["result"]["structuredContent"]

    # ---------------------------------------------------------------- checks

    def check_http(self, kind, case, status, headers, body, allow=(), head=False, path=""):
        """An HTTP answer: 2xx/4xx (or an allowed status), JSON body, no traceback. -> parsed body or None."""
        text = body.decode("utf-8", "replace")
        if LEAK.search(text):
            self.fail(kind, "traceback text in a response body", case)
        if status >= 500 and status not in allow:
            self.fail(kind, "HTTP %d%s" % (status, " (unknown method)" if "Unsupported method" in text else ""),
                      (case, text[:160]))
            return None
        if status == 101:
            return None
        if not (200 <= status < 500 or status in allow):
            self.fail(kind, "unexpected HTTP status %d" % status, case)
        if "content-length" not in headers:
            self.fail(kind, "response without Content-Length", case)
        if status in (202, 204) or head:
            if body and not head:
                self.fail(kind, "HTTP %d with a body" % status, case)
            return None
        ctype = headers.get("content-type", "")
        if ctype.startswith("text/html"):
            if not path.startswith("/ui"):
                self.fail(kind, "HTML answer outside /ui", case)
            return None
        if not ctype.startswith("application/json"):
            self.fail(kind, "HTTP %d with Content-Type %r" % (status, ctype), case)
        try:
            obj = strict_json(body)
        except (ValueError, UnicodeDecodeError) as exc:
            self.fail(kind, "HTTP %d body is not strict JSON (%s)" % (status, str(exc)[:60]), (case, body[:200]))
            return None
        if status >= 400 and not (isinstance(obj, dict) and (isinstance(obj.get("error"), str) or "jsonrpc" in obj)):
            self.fail(kind, "HTTP %d without an {\"error\": ...} body" % status, (case, body[:200]))
        if status == 405 and "allow" not in headers:
            self.fail(kind, "405 without Allow", case)
        if status == 401 and "www-authenticate" not in headers:
            self.fail(kind, "401 without WWW-Authenticate", case)
        return obj

    def check_rpc(self, kind, case, status, headers, body, expect_tool=False):
        obj = self.check_http(kind, case, status, headers, body)
        if obj is None:
            return
        msgs = obj if isinstance(obj, list) else [obj]
        if isinstance(obj, list) and not obj:
            self.fail(kind, "empty JSON array answered (should be 202)", case)
        for m in msgs:
            if not isinstance(m, dict):
                self.fail(kind, "JSON-RPC answer item is not an object", (case, body[:200]))
                continue
            if "jsonrpc" not in m:
                if status < 400 or not isinstance(m.get("error"), str):
                    self.fail(kind, "HTTP %d answer is neither JSON-RPC nor {\"error\"}" % status, (case, body[:200]))
                continue
            if m.get("jsonrpc") != "2.0" or ("result" in m) == ("error" in m):
                self.fail(kind, "malformed JSON-RPC response", (case, body[:200]))
                continue
            rid = m.get("id", "missing")
            id_ok = rid is None or isinstance(rid, (str, int, float)) and not isinstance(rid, bool)
            if rid == "missing" or not id_ok:
                self.fail(kind, "JSON-RPC response with a missing or invalid id", (case, body[:200]))
            if "error" in m:
                err = m["error"]
                if not (isinstance(err, dict) and isinstance(err.get("code"), int)
                        and isinstance(err.get("message"), str)):
                    self.fail(kind, "malformed JSON-RPC error object", (case, body[:200]))
                elif err["code"] == -32603:
                    self.fail(kind, "JSON-RPC -32603 internal error (an exception escaped)", case)
                elif status >= 500:
                    self.fail(kind, "JSON-RPC error with HTTP %d" % status, case)
            elif expect_tool == "always" or (expect_tool and isinstance(m["result"], dict)
                                             and ("content" in m["result"] or "isError" in m["result"])):
                self.check_tool_result(kind, case, m["result"])

    def check_tool_result(self, kind, case, res):
        if not isinstance(res, dict):
            return self.fail(kind, "tools/call result is not an object", case)
        content = res.get("content")
        if not (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)
                and content[0].get("type") == "text" and isinstance(content[0].get("text"), str)):
            return self.fail(kind, "tool result without exactly one text item", (case, res))
        if res.get("isError") is True:
            if "structuredContent" in res:
                self.fail(kind, "isError result carries structuredContent", case)
            if not content[0]["text"].strip():
                self.fail(kind, "isError result with an empty message", case)
        elif res.get("isError") is False:
            if not isinstance(res.get("structuredContent"), dict):
                self.fail(kind, "successful tool result without structuredContent", case)
        else:
            self.fail(kind, "tool result without a boolean isError", case)

    def raw(self, kind, case, data, allow=(), head=False, expect_answer=False, path="", half_close=True):
        out, outcome = raw_exchange(self.port, data, half_close=half_close)
        if outcome == "timeout":
            self.fail(kind, "no answer and no close within %.0f s" % TIMEOUT, case)
        try:
            responses = parse_responses(out, head=head)
        except ValueError as exc:
            self.fail(kind, "garbled answer: %s" % exc, (case, out[:200]))
            return []
        if expect_answer and not responses:
            self.fail(kind, "connection closed without an answer", case)
        for status, headers, body in responses:
            self.check_http(kind, case, status, headers, body, allow=allow, head=head, path=path)
        return responses

    # ---------------------------------------------------------------- the end

    def finish(self):
        self.batch_check()
        code = self.daemon.stop()
        time.sleep(0.2)  # let conftest's reader thread take the last log lines
        if code != 0:
            self.fail("daemon", "exit code %s after SIGTERM (expected 0)" % code, "shutdown")
        # Internal errors the daemon logged: each traceback's last line is the finding.
        lines = self.daemon.stderr_lines
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                j = i + 1
                where = ""
                while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("\t")):
                    m = re.match(r'\s+File "([^"]+)", line (\d+), in (\S+)', lines[j])
                    if m and "/kg/" in m.group(1):
                        where = "%s:%s %s" % (os.path.relpath(m.group(1), REPO), m.group(2), m.group(3))
                    j += 1
                last = lines[j].strip() if j < len(lines) else "?"
                self.fail("log", "traceback logged: %s raised in %s" % (last.split(":")[0][:80], where),
                          "%s | %s" % (lines[i - 1].strip()[:120], last[:200]))
        self.check_files()
        elapsed = time.monotonic() - self.started
        sys.stdout.write("\n[fuzz %s] %s cases in %.1f s, seed %d: %s\n" % (
            self.name, self.cases, elapsed, self.seed, dict(self.counts)))
        if self.findings:
            pytest.fail(self.report(), pytrace=False)

    def check_files(self):
        # 1. the daemon's cwd is still empty
        left = listing(self.cwd)
        if left:
            self.fail("files", "files written in the daemon's cwd: %s" % sorted(left)[:5], self.cwd)
        # 2. no kgd file appeared in watched places outside the root
        for d, before in self.watched.items():
            new = kgd_like(listing(d)) - before
            if new:
                self.fail("files", "kgd-like files appeared in %s: %s" % (d, sorted(new)[:5]), d)
        # 3. under the test's temp dir, nothing but what the test made and the root
        mine = {self.root, self.cwd, os.path.join(self.tmp, "work")}
        for name in listing(self.tmp):
            p = os.path.join(self.tmp, name)
            if p not in mine and not name.startswith("fixture-"):
                self.fail("files", "unexpected file outside the root: %s" % p, p)
        for dirpath, dirnames, filenames in os.walk(os.path.join(self.tmp, "work")):
            for f in filenames:
                p = os.path.join(dirpath, f)
                if not p.startswith(os.path.join(self.tmp, "work", "fixture")):
                    self.fail("files", "file written inside a project dir: %s" % p, p)
        # 4. everything in the root stays in the root and parses
        root_real = os.path.realpath(self.root)
        for dirpath, dirnames, filenames in os.walk(self.root):
            for f in filenames + dirnames:
                p = os.path.join(dirpath, f)
                if os.path.islink(p):
                    self.fail("files", "symlink in the root: %s" % p, p)
                if not os.path.realpath(p).startswith(root_real + os.sep):
                    self.fail("files", "path escapes the root: %s" % p, p)
            for f in filenames:
                p = os.path.join(dirpath, f)
                rel = os.path.relpath(p, self.root)
                if ".corrupt-" in f or f.endswith(".part"):
                    self.fail("files", "leftover %s in the root" % rel, rel)
                    continue
                if f == "kgd.lock":
                    continue
                with open(p, "rb") as fh:
                    data = fh.read()
                try:
                    if f.endswith(".journal"):
                        for line in data.splitlines():
                            strict_json(line)
                    else:
                        obj = strict_json(data)
                        if not isinstance(obj, dict):
                            raise ValueError("top level is not an object")
                except (ValueError, UnicodeDecodeError) as exc:
                    self.fail("files", "%s does not parse as strict JSON: %s" % (rel, str(exc)[:100]), rel)


@pytest.fixture
def harness(request, tmp_path):
    h = Harness(tmp_path, request.node.name)
    yield h
    if h.daemon.proc is not None:
        h.daemon.stop()


# =============================================================================== 1. raw HTTP

RAW_PATHS = ["/", "/mcp", "/health", "/api/health", "/api/graph", "/api/nodes/user/x", "/ws", "/ui", "/nope",
             "*", "http://127.0.0.1/health", "http://evil.example/", "//", "/%ZZ", "/api/%00", "/../../etc/passwd",
             "/health?x=%ZZ", "/api/search?q=%FF%FE", "/" + "a" * 3000, "/health#frag", "", "/\x00", "/\x7f\x80\xff"]
RAW_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "get", "Post", "TRACE", "CONNECT", "FOO",
               "G E T", "", "\x00GET", "GET\x00", "M" * 300]
RAW_VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/3", "HTTP/0.9", "HTTP/1.1.1", "HTTP/abc",
                "http/1.1", "HTTP/1", "HTTP/01.01", "HTTP/1.10", "HTTP/9999999999999999999.0", "FOO/1.1", ""]
RAW_HEADER_LINES = [
    b"X-A: b", b"NoColonHere", b" leading-space: continuation", b"\tfolded", b"X-Nul: a\x00b", b"X-Bin: \xff\xfe\x80",
    b":empty-name", b"X-Empty:", b"Host: evil.example", b"Host: 127.0.0.1", b"Host:",
    b"Host: localhost:1\r\nHost: evil",
    b"Content-Length: abc", b"Content-Length: -1", b"Content-Length: 1e3", b"Content-Length: 99999999999999999999",
    b"Content-Length: 5 5", b"Content-Length: 0x10", b"Content-Length: +3", b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip, chunked", b"Transfer-Encoding: identity", b"Expect: 100-continue", b"Expect: foo",
    b"Connection: keep-alive", b"Connection: close", b"Connection: Upgrade", b"Origin: null", b"Origin: http://evil",
    b"Origin: \xff", b"Authorization: Bearer x", b"Content-Type: text/plain", b"MCP-Protocol-Version: 2026-07-28",
    b"Mcp-Method: x", b"Mcp-Name: =?base64?!!!?=", b"X-" + b"h" * 70000 + b": v", b"X-Long: " + b"v" * 70000,
]


def gen_raw_http(r, port, n):
    budget_many_headers = 20
    for i in range(n):
        k = r.random()
        allow = ()
        head = False
        if k < 0.06:
            data = bytes(r.getrandbits(8) for _ in range(r.randint(0, 300)))
            yield ("random bytes", data), data, allow, head, ""
            continue
        if k < 0.09:
            data = r.choice([b"\r\n", b"\r\n\r\n", b"\n\n", b" ", b"GET", b"GET /", b"GET /\r\n",
                             b"GET /health\r\n\r\n", b"GET / HTTP/1.1", b"GET / HTTP/1.1\r\n",
                             b"GET / HTTP/1.1\r\nHost: x", b"\x16\x03\x01\x02\x00",
                             b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"G" * 70000 + b" / HTTP/1.1\r\n\r\n",
                             b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"])
            allow = (505,) if b"HTTP/2" in data else ()
            yield ("fixed garbage", data[:100]), data, allow, head, ""
            continue
        method = r.choice(RAW_METHODS)
        path = r.choice(RAW_PATHS)
        version = r.choice(RAW_VERSIONS)
        if re.match(r"HTTP/(\d+)\.?", version) and int(re.match(r"HTTP/(\d+)", version).group(1)) >= 2:
            allow = (505,)
        line = ("%s %s %s" % (method, path, version)).rstrip() if version != "HTTP/0.9" else "%s %s" % (method, path)
        lines = [line.encode("latin-1", "replace")]
        if r.random() < 0.85:
            lines.append(("Host: 127.0.0.1:%d" % port).encode())
        for _ in range(r.choice([0, 0, 1, 1, 2, 3])):
            h = r.choice(RAW_HEADER_LINES)
            if len(h) > 60000 and r.random() < 0.7:
                continue
            lines.append(h)
        if budget_many_headers and r.random() < 0.03:
            budget_many_headers -= 1
            lines.extend(b"X-Many-%d: v" % j for j in range(r.choice([99, 101, 500])))
        body = b""
        kb = r.random()
        if kb < 0.2:
            msg = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
            lines.append(b"Content-Length: %d" % len(msg))
            body = msg
        elif kb < 0.3:  # truncated body
            lines.append(b"Content-Length: %d" % r.choice([10, 100, 5000]))
            body = b'{"jsonrpc":"2.0"'
        elif kb < 0.38:  # body longer than announced: the rest is the next "request"
            lines.append(b"Content-Length: 2")
            body = b"{}GARBAGE / HTTP/1.1\r\n\r\n"
        elif kb < 0.5:  # chunked, valid or garbage
            lines.append(b"Transfer-Encoding: chunked")
            body = r.choice([b"0\r\n\r\n", b"2\r\n{}\r\n0\r\n\r\n", b"zz\r\n{}\r\n0\r\n\r\n", b"-5\r\nabc\r\n0\r\n\r\n",
                             b"FFFFFFFFFFFFFFFF\r\nabc", b"5;ext=1\r\n{\"a\":\r\n0\r\n\r\n", b"3\r\n{}", b"1\r\n{",
                             b"2\r\n{}XX0\r\n\r\n", b"0\r\nX-Trailer: 1\r\n\r\n", b"", b"\r\n\r\n",
                             b"1" * 2000 + b"\r\n",
                             b"400001\r\n" + b"x" * 100])
        elif kb < 0.55:  # over 4 MiB announced, not sent
            lines.append(b"Content-Length: %d" % (4 * 1024 * 1024 + r.randint(1, 10 ** 6)))
            body = b"{}"
        elif kb < 0.6:  # pipelined requests
            body = b""
            lines_tail = b"\r\n".join(lines) + b"\r\n\r\n"
            data = lines_tail + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * r.randint(1, 3)
            head = method.upper() == "HEAD"
            yield ("pipelined", data[:200]), data, allow, head, path
            continue
        head = method == "HEAD"
        data = b"\r\n".join(lines) + b"\r\n\r\n" + body
        yield ("request", data[:300]), data, allow, head, path


def test_fuzz_raw_http(harness):
    h = harness
    for case, data, allow, head, path in gen_raw_http(h.r, h.port, n_cases(1500)):
        h.raw("raw-http", case, data, allow=allow, head=head, path=path)
        h.tick("raw-http")
    h.finish()


# =============================================================================== 2. JSON-RPC bodies

METHODS = ["initialize", "ping", "tools/list", "tools/call", "server/discover", "notifications/initialized",
           "prompts/list", "resources/list", "", "tools/", "TOOLS/LIST", "rpc.discover", "\ud800", "x" * 5000]
VERSIONS = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28", "1999-01-01", "", "latest"]
HEADER_VALUES = {
    "MCP-Protocol-Version": ["2025-06-18", "2026-07-28", "2099-01-01", "garbage", "", "2026-07-28, 2025-06-18"],
    "Mcp-Method": ["tools/call", "tools/list", "other", ""],
    "Mcp-Name": ["kg_read", "=?base64?a2dfcmVhZA==?=", "=?base64?!!!?=", "=?base64?/w==?=", "x" * 500],
    "Content-Type": ["application/json", "text/plain", "application/json; charset=latin-1", ""],
    "Accept": ["application/json, text/event-stream", "text/event-stream", "*/*"],
    "Mcp-Session-Id": ["abc", "", "\u00e9"],
}


def rand_params(r, method, budget):
    k = r.random()
    if k < 0.15:
        return rand_json(r, budget=budget)
    params = {}
    if method == "initialize":
        params = {"protocolVersion": r.choice(VERSIONS + [rand_json(r)]), "capabilities": rand_json(r),
                  "clientInfo": r.choice([{"name": "fuzz", "version": "1"}, rand_json(r)])}
    elif method == "tools/call":
        params = {"name": r.choice(["kg_read", "kg_search", "kg_sync", "kg_nope", "", rand_str(r)]),
                  "arguments": r.choice([{}, {"query": rand_str(r, budget)}, {"cwd": rand_str(r)}, rand_json(r)])}
    if r.random() < 0.3:
        params["_meta"] = r.choice([
            {"io.modelcontextprotocol/protocolVersion": r.choice(VERSIONS),
             "io.modelcontextprotocol/clientCapabilities": r.choice([{}, None, [], rand_json(r)])},
            {"io.modelcontextprotocol/protocolVersion": rand_json(r)}, rand_json(r), None])
    if r.random() < 0.2:
        params[rand_str(r)] = rand_json(r)
    return params


def rand_message(r, budget):
    msg = {}
    if r.random() < 0.9:
        msg["jsonrpc"] = "2.0" if r.random() < 0.85 else rand_json(r)
    if r.random() < 0.8:
        msg["id"] = r.choice([1, 2, "abc", "", 0, -1, 1.5, None, True, [], {}, 2 ** 70, "\ud800",
                              Raw("NaN"), Raw("Infinity"), Raw("1e999"), Raw("1" * 5000), rand_str(r)])
    method = r.choice(METHODS) if r.random() < 0.85 else rand_json(r)
    if r.random() < 0.95:
        msg["method"] = method
    if r.random() < 0.8:
        msg["params"] = rand_params(r, method, budget)
    if r.random() < 0.05:
        msg["result"] = rand_json(r)
    if r.random() < 0.05:
        msg["error"] = rand_json(r)
    if r.random() < 0.1:
        msg[rand_str(r)] = rand_json(r)
    return msg


def gen_jsonrpc(r, n):
    budget = Budget(8)
    for i in range(n):
        headers = {}
        for name, values in HEADER_VALUES.items():
            if r.random() < 0.12:
                headers[name] = r.choice(values)
        k = r.random()
        if k < 0.1:
            body = r.choice([
                b"", b" ", b"\n", b"null", b"{", b"[", b"]", b"{}", b"[]", b"[[]]", b"[1]", b'"x"', b"1", b"true",
                b"\xff\xfe", b"\xef\xbb\xbf{}", b'{"jsonrpc":"2.0","id":1,"method":"ping\xff"}',
                b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xafping"}',
                b'{"jsonrpc":"2.0","id":1,"method":"\xed\xa0\x80"}',
                b'{"jsonrpc":"2.0","id":1,"method":"ping"', b'{"jsonrpc":"2.0","id":1,"method":"ping"}}',
                b'{"jsonrpc":"2.0","id":1,"method":"ping"}{"x":1}', b"\x00" * 10, bytes(range(256)),
                b'{"jsonrpc":"2.0","id":1,"method":"ping","id":2}', b"{'jsonrpc':'2.0'}", b"\x1f\x8b\x08\x00",
                ("[" * 100000 + "]" * 100000).encode(), ('{"a":' * 100000 + "1" + "}" * 100000).encode(),
                b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 100000 + b"]" * 100000 + b"}",
                b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}', b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
                b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
            ])
            case = ("fixed", body[:120], headers)
        elif k < 0.25:
            body = dump(rand_json(r, budget=budget)).encode("utf-8", "surrogatepass")
            case = ("random json", body[:200], headers)
        elif k < 0.35:
            items = [rand_message(r, budget) for _ in range(r.choice([0, 1, 2, 3, 5, 101]))]
            body = dump(items).encode("utf-8", "surrogatepass")
            case = ("batch", body[:200], headers)
        else:
            body = dump(rand_message(r, budget)).encode("utf-8", "surrogatepass")
            case = ("message", body[:200], headers)
        yield case, body, headers


def test_fuzz_jsonrpc(harness):
    h = harness
    for case, body, headers in gen_jsonrpc(h.r, n_cases(1500)):
        h.post_rpc("jsonrpc", case, body, expect_tool=True, path=r_path(h.r), headers=headers)
        h.tick("jsonrpc")
    h.finish()


def r_path(r):
    return "/mcp" if r.random() < 0.7 else "/"


# =============================================================================== 3. tool arguments

TOOL_FIELDS = {
    "kg_read": ["cwd", "session_id", "id", "ids", "level"],
    "kg_put_node": ["session_id", "level", "id", "gist", "notes", "touches"],
    "kg_put_edge": ["session_id", "level", "from", "to", "rel", "notes"],
    "kg_delete_node": ["session_id", "id", "level"],
    "kg_delete_edge": ["session_id", "from", "to", "rel", "level"],
    "kg_search": ["query", "session_id", "limit"],
    "kg_sync": ["session_id"],
    "kg_progress": ["session_id", "task_id", "state", "level"],
}


def valid_args(r, tool, sid, project):
    level = r.choice(["user", "project"])
    nid = r.choice(SAFE_IDS)
    if tool == "kg_read":
        return r.choice([{"cwd": project}, {"session_id": sid}, {"session_id": sid, "id": nid},
                         {"session_id": sid, "ids": [nid, r.choice(SAFE_IDS)], "level": level}])
    if tool == "kg_put_node":
        return {"session_id": sid, "level": level, "id": nid, "gist": "a gist about %s" % nid,
                "notes": ["note"], "touches": ["src/app.py"]}
    if tool == "kg_put_edge":
        return {"session_id": sid, "level": level, "from": nid, "to": r.choice(SAFE_IDS + ["src/app.py"]),
                "rel": "depends-on", "notes": []}
    if tool == "kg_delete_node":
        return {"session_id": sid, "id": nid, "level": level}
    if tool == "kg_delete_edge":
        return {"session_id": sid, "from": nid, "to": r.choice(SAFE_IDS), "rel": "depends-on"}
    if tool == "kg_search":
        return {"query": r.choice(["gist", "alpha beta", "src"]), "session_id": sid, "limit": 5}
    if tool == "kg_sync":
        return {"session_id": sid}
    return {"session_id": sid, "task_id": "task-" + nid, "state": {"step": 1}, "level": level}


def hostile_value(r, budget):
    k = r.random()
    if k < 0.5:
        return rand_str(r, budget)
    if k < 0.7:
        return [rand_str(r, budget) for _ in range(r.choice([0, 1, 3, 101]))]
    if k < 0.75:
        return deep(r, r.choice([990, 2000, 100000]))
    return rand_json(r, budget=budget)


def targeted_tool_cases(sid, project):
    """Hand-picked cases that random choice reaches too rarely."""
    s = {"session_id": sid}
    cases = []
    for bad in (Raw("NaN"), Raw("Infinity"), Raw("1e999"), "\ud800", {"\ud800": 1}, {"a": Raw("NaN")},
                {"a": "\udfff"}, {"deep": deep(random.Random(1), 990)}, {"x": "y" * 70000}, {"big": 10 ** 300}):
        for level in ("user", "project"):
            cases.append(("kg_progress", dict(s, task_id="t-special-%d" % len(cases), level=level, state=bad)))
    for field in ("id", "gist"):
        for bad in ("\ud800", "a\udfffb", "\x00", "\u202e", "x" * 201 if field == "id" else "x" * 2001):
            args = dict(s, level="user", id="special", gist="g")
            args[field] = bad
            cases.append(("kg_put_node", args))
    for field in ("notes", "touches"):
        for bad in (["\ud800"], ["ok", "\udc00"], ["\x00"], ["../../etc/passwd"], ["n" * 10001], ["t"] * 101):
            cases.append(("kg_put_node", dict(s, level="user", id="special", gist="g", **{field: bad})))
    for field in ("from", "to", "rel"):
        for bad in ("\ud800", "/etc/passwd", "../../x", "\x00", "r" * 101):
            args = dict(s, level="user", **{"from": "special", "to": "src/a.py", "rel": "r"})
            args[field] = bad
            cases.append(("kg_put_edge", args))
    for q in ("\ud800", "\x00", "q" * 1001, "  ", "..", "/etc/passwd"):
        cases.append(("kg_search", {"query": q}))
    for lim in (0, -1, 201, 1.5, Raw("NaN"), Raw("1e999"), 10 ** 30, True, "5"):
        cases.append(("kg_search", {"query": "special", "limit": lim}))
    for ids in (["\ud800"], ["a"] * 201, [], ["ok", 1], "special"):
        cases.append(("kg_read", dict(s, ids=ids)))
    for task in ("\ud800", "../../etc/passwd", "\x00", "t" * 201):
        cases.append(("kg_progress", dict(s, task_id=task)))
    return cases


def gen_tool_cases(r, n, sid, project):
    budget = Budget(10)
    tools = list(TOOL_FIELDS)
    targeted = targeted_tool_cases(sid, project)
    for tool, args in targeted:
        yield tool, args
    for i in range(n - len(targeted)):
        tool = r.choice(tools)
        args = valid_args(r, tool, sid, project)
        k = r.random()
        if k < 0.1:
            pass  # a valid call keeps the graphs populated for the others
        elif k < 0.55:
            for _ in range(r.choice([1, 1, 1, 2, 3])):
                field = r.choice(TOOL_FIELDS[tool])
                args[field] = hostile_value(r, budget)
        elif k < 0.65:
            args.pop(r.choice(list(args)), None)
        elif k < 0.72:
            args[rand_str(r)] = rand_json(r)
        elif k < 0.8:
            for field in TOOL_FIELDS[tool]:
                if field != "session_id" or r.random() < 0.3:
                    args[field] = r.choice(HOSTILE)
        elif k < 0.85:
            args = r.choice([None, [], "x", 1, True, [args], Raw("NaN"), deep(r)])
        elif k < 0.9:
            tool = r.choice(["", "kg_", "KG_READ", "kg_read\x00", "\ud800", "kg_read ", rand_str(r)])
        elif k < 0.95:
            args["session_id"] = r.choice(["", "nope", "\x00", "../sessions.json", sid + "x", sid.upper(), 1, None,
                                           ["x"], "a" * 100000])
        else:
            field = r.choice(TOOL_FIELDS[tool])
            args[field] = r.choice([Raw("NaN"), Raw("1e999"), Raw("-Infinity"), Raw("1" * 5000), "\ud800",
                                    {"\ud800": 1}, {"a": Raw("NaN")}, [Raw("Infinity")]])
        yield tool, args


def test_fuzz_tool_arguments(harness):
    h = harness
    sid = h.call("kg_read", {"cwd": h.project})["session_id"]
    for tool, args in gen_tool_cases(h.r, n_cases(2000), sid, h.project):
        body = dump({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}})
        body = body.encode("utf-8", "surrogatepass")
        case = (tool, body[:300])
        h.post_rpc("tools", case, body, expect_tool="always")
        h.tick("tools")
    # The graphs still read back, whole.
    try:
        st = h.call("kg_read", {"cwd": h.project})
        assert isinstance(st["user"]["nodes"], list)
    except Exception as exc:  # noqa: BLE001
        h.fail("tools", "full kg_read fails after the fuzz: %r" % (exc,), "final read")
    h.finish()


# =============================================================================== 4. cwd and project paths

WS_UPGRADE = (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")


def hostile_dirs(base):
    """Files, links and .git files that try to lead the project-root search astray."""
    made = {}
    os.makedirs(base)
    f = os.path.join(base, "a-file")
    with open(f, "w") as fh:
        fh.write("not a dir")
    made["file"] = f
    loop_a, loop_b = os.path.join(base, "loop-a"), os.path.join(base, "loop-b")
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    made["loop"] = loop_a
    dangling = os.path.join(base, "dangling")
    os.symlink(os.path.join(base, "missing"), dangling)
    made["dangling"] = dangling
    to_root = os.path.join(base, "to-root")
    os.symlink("/", to_root)
    made["to-root"] = to_root
    gitfiles = {
        "git-etc": b"gitdir: /etc\n", "git-up": b"gitdir: ../../../../../..\n", "git-garbage": b"garbage\n",
        "git-binary": b"gitdir: \xff\xfe\x00\x01\n", "git-nul": b"gitdir: /tmp\x00/x\n", "git-empty": b"",
        "git-long": b"gitdir: " + b"a/" * 5000 + b"\n", "git-nonl": b"gitdir: " + b"z" * 100000,
        "git-missing": b"gitdir: /nonexistent/.git/worktrees/x\n",
    }
    for name, content in gitfiles.items():
        d = os.path.join(base, name, "sub")
        os.makedirs(d)
        with open(os.path.join(base, name, ".git"), "wb") as fh:
            fh.write(content)
        made[name] = d
    # a worktree whose commondir is hostile
    wt = os.path.join(base, "wt")
    gitdir = os.path.join(base, "fake-main", ".git", "worktrees", "wt")
    os.makedirs(gitdir)
    os.makedirs(wt)
    with open(os.path.join(gitdir, "commondir"), "wb") as fh:
        fh.write(b"../../\x00\xff../..\n")
    with open(os.path.join(wt, ".git"), "w") as fh:
        fh.write("gitdir: %s\n" % gitdir)
    made["worktree-hostile-commondir"] = wt
    # a .git directory that is unreadable-ish: a fifo named .git
    fifo_dir = os.path.join(base, "fifo-git")
    os.makedirs(fifo_dir)
    os.mkfifo(os.path.join(fifo_dir, ".git"))
    made["fifo-git"] = fifo_dir
    return made


def gen_cwds(r, n, made, project):
    fixed = ["/nonexistent/dir", "/", "//", "/./", "/tmp/../tmp", "relative/dir", ".", "..", "../..", "", " ",
             "\x00", "/tmp\x00/x", "/" + "a" * 5000, "/" + "a/" * 3000, "/tmp/\x01\x1b[0m", "~", "$HOME",
             "/proc/self", "/proc/self/cwd", "/dev/null", "/etc/passwd", "/dev/zero", "/tmp/\ud800", "\ud800",
             project, project + "/src", project + "/src/../src", project + "/", project + "/.git",
             project + "/nope", "file://" + project, "C:\\work", None, 1, [], {}, True]
    values = fixed + list(made.values())
    for i in range(n):
        if i < len(values):
            v = values[i]
        elif r.random() < 0.7:
            v = r.choice(values)
        else:
            v = r.choice([project, "/tmp", "/"]) + "/" + rand_str(r)
        yield v


def test_fuzz_cwd_and_project_paths(harness, tmp_path):
    h = harness
    made = hostile_dirs(os.path.join(str(tmp_path), "work", "fixture"))
    for v in gen_cwds(h.r, n_cases(400), made, h.project):
        way = h.r.choice(["kg_read", "kg_read", "kg_read+sid", "rest-session", "rest-graph", "rest-put", "ws"])
        case = (way, v if not isinstance(v, str) or len(v) < 300 else v[:300] + "...")
        if way.startswith("kg_read"):
            args = {"cwd": v}
            if way == "kg_read+sid":
                args["session_id"] = h.r.choice(["unknown-session", "", "../x"])
            body = dump({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": "kg_read", "arguments": args}}).encode("utf-8", "surrogatepass")
            h.post_rpc("cwd", case, body, expect_tool=True)
        elif not isinstance(v, str):
            continue
        else:
            q = pct(v)
            if way == "rest-session":
                body = dump({"project_path": v}).encode("utf-8", "surrogatepass")
                req = b"POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
                      b"Content-Length: %d\r\n\r\n" % len(body) + body
            elif way == "rest-graph":
                req = b"GET /api/graph?project_path=" + q.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            elif way == "rest-put":
                body = b'{"gist":"g"}'
                req = b"PUT /api/nodes/project/fuzz-node?project_path=" + q.encode() + \
                      b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
                      b"Content-Length: 12\r\n\r\n" + body
            else:
                req = b"GET /ws?project_path=" + q.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + WS_UPGRADE
            if len(req) > 60000:
                continue
            h.raw("cwd", case, req, expect_answer=True)
        h.tick("cwd")
    h.finish()


# =============================================================================== 5. REST

REST_TEMPLATES = ["/api/health", "/api/graph", "/api/sessions", "/api/sessions/{sid}", "/api/nodes/{level}/{id}",
                  "/api/edges/{level}", "/api/search", "/api/sync", "/api/progress/{task}", "/api/projects",
                  "/api/openapi.json", "/api/", "/api", "/api/nodes", "/api/nodes/{level}", "/api/nodes/{level}/{id}/x",
                  "/api/unknown", "/api//nodes//user", "/api/nodes/{level}/{id}/", "/API/health"]
PCT_GARBAGE = ["%ZZ", "%", "%0", "%00", "%2F", "%2f..%2f", "%2e%2e", "%ED%A0%80", "%C0%AF", "%FF", "%E2%82", "%25",
               "%%", "%u0041", "+", "%20", "%0d%0aX-Injected:%201"]
QUERY_KEYS = ["project_path", "session_id", "q", "limit", "level", "from", "to", "rel", "token", "x", ""]
REST_METHODS = ["GET"] * 30 + ["PUT"] * 20 + ["POST"] * 12 + ["DELETE"] * 15 + ["PATCH"] * 4 + ["OPTIONS"] * 3 + \
               ["HEAD"] * 4 + ["TRACE", "CONNECT", "FOO"]
CONTENT_TYPES = ["application/json"] * 6 + ["text/plain", "application/x-www-form-urlencoded", "",
                                            "application/json; charset=latin-1", "application/vnd.kgd+json",
                                            "multipart/form-data; boundary=x", "application/JSON", "*/*", "\x7f"]


def seg(r, sid, project):
    k = r.random()
    if k < 0.35:
        return pct(r.choice(SAFE_IDS))
    if k < 0.45 and sid:
        return sid
    if k < 0.65:
        return pct(rand_str(r))[:6000]
    if k < 0.85:
        return r.choice(PCT_GARBAGE) + pct(r.choice(SAFE_IDS))
    return r.choice(["..", ".", "%2e%2e", "user", "project", "USER", "", "a" * 5000])


def rest_body(r, sid, project, budget):
    k = r.random()
    if k < 0.15:
        return None
    if k < 0.6:
        body = {}
        for f in r.sample(["gist", "notes", "touches", "session_id", "project_path", "from", "to", "rel", "state",
                           "level"], r.randint(0, 5)):
            body[f] = r.choice([rand_str(r, budget), [rand_str(r)], rand_json(r), "gist text", sid, project,
                                {"step": 1}])
        return dump(body).encode("utf-8", "surrogatepass")
    if k < 0.75:
        return dump(rand_json(r, budget=budget)).encode("utf-8", "surrogatepass")
    return r.choice([b"", b"gist=x", b"\xff\xfe\x00", b"{", b"null", b"[]", b'{"gist": NaN}', b'{"gist": "\\ud800"}',
                     b'{"state": {"a": Infinity}}', ("[" * 100000 + "]" * 100000).encode(),
                     b'{"gist":"x","gist":"y"}', b"\xef\xbb\xbf{}", b'{"gist":"' + b"g" * 3000 + b'"}'])


def targeted_rest(sid, project):
    """(method, target, body) cases that random choice reaches too rarely."""
    pp = pct(project)
    bodies = [b'{"gist": "\\ud800"}', b'{"gist": "g", "notes": ["\\udfff"]}', b'{"gist": NaN}',
              b'{"gist": "g", "touches": [Infinity]}', b'{"gist": "g", "session_id": "\\ud800"}',
              b'{"gist": "g", "project_path": "\\ud800"}', b'{"gist": "g", "project_path": "/tmp\\u0000x"}',
              ("[" * 100000 + "]" * 100000).encode(), ('{"gist":' * 50000 + '"x"' + "}" * 50000).encode()]
    out = []
    for i, b in enumerate(bodies):
        out.append(("PUT", "/api/nodes/user/special-%d" % i, b))
        out.append(("PUT", "/api/nodes/project/special-%d?project_path=%s" % (i, pp), b))
    for i, st in enumerate([b"NaN", b"Infinity", b'{"a": NaN}', b'{"a": "\\ud800"}', b'{"\\udc00": 1}',
                            b'{"a": 1e999}', b"[" * 5000 + b"]" * 5000]):
        out.append(("PUT", "/api/progress/task-special-%d?level=user" % i, b'{"state": ' + st + b"}"))
    for b in (b'{"from": "\\ud800", "to": "src/a.py", "rel": "r"}', b'{"from": "a", "to": "b", "rel": NaN}',
              b'{"from": "special-0", "to": "/etc/passwd", "rel": "\\udfff"}'):
        out.append(("PUT", "/api/edges/user", b))
    for b in (b'{"project_path": "\\ud800"}', b'{"project_path": "/tmp/\\ud800"}', b'{"project_path": NaN}',
              b'{"project_path": "/tmp\\u0000"}', b'{"project_path": ""}', b'{"project_path": "relative"}'):
        out.append(("POST", "/api/sessions", b))
    for t in ("/api/nodes/user/%ED%A0%80", "/api/nodes/user/%00", "/api/nodes/%ZZ/x", "/api/progress/%ED%B0%80",
              "/api/sessions/%ED%A0%80", "/api/search?q=%ED%A0%80", "/api/search?q=%00", "/api/search?q=x&limit=1e999",
              "/api/search?q=x&limit=NaN", "/api/search?q=x&limit=" + "9" * 5000, "/api/graph?project_path=%00",
              "/api/edges/user?from=%00&to=x&rel=y", "/api/sync?session_id=%ED%A0%80"):
        out.append(("GET", t, None))
        out.append(("DELETE", t, None))
    return out


def gen_rest(r, n, sid, project, port):
    budget = Budget(6)
    for method, target, body in targeted_rest(sid, project):
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1:%d" % port, "Connection: close"]
        if body is not None:
            lines += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
        yield (method, target[:200], (body or b"")[:120]), "\r\n".join(lines).encode() + b"\r\n\r\n" + (body or b""), \
            False, target
    for i in range(n):
        method = r.choice(REST_METHODS)
        tpl = r.choice(REST_TEMPLATES)
        path = tpl
        for name in ("{sid}", "{level}", "{id}", "{task}"):
            if name in path:
                v = seg(r, sid, project)
                if name == "{level}" and r.random() < 0.6:
                    v = r.choice(["user", "project"])
                path = path.replace(name, v)
        params = []
        for _ in range(r.choice([0, 1, 2, 3, 5])):
            key = r.choice(QUERY_KEYS)
            kv = r.random()
            if kv < 0.3 and key in ("project_path",):
                val = pct(project)
            elif kv < 0.4 and key == "session_id":
                val = sid
            elif kv < 0.7:
                val = pct(rand_str(r))[:5000]
            else:
                val = r.choice(PCT_GARBAGE)
            params.append("%s=%s" % (key, val) if r.random() < 0.9 else key)
        if r.random() < 0.05:
            params.append(r.choice(["&&&", "=", "==", "%ZZ=%ZZ", ";", "a=1&a=2", "q=a&q=b"]))
        target = path + ("?" + "&".join(params) if params else "")
        body = rest_body(r, sid, project, budget) if method in ("PUT", "POST", "PATCH") or r.random() < 0.05 else None
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1:%d" % port, "Connection: close"]
        if body is not None:
            ct = r.choice(CONTENT_TYPES)
            if ct or r.random() < 0.5:
                lines.append("Content-Type: " + ct)
            lines.append("Content-Length: %d" % len(body))
        elif method in ("PUT", "POST") and r.random() < 0.3:
            lines.append("Content-Length: %d" % (4 * 1024 * 1024 + 1))
        data = "\r\n".join(lines).encode("utf-8", "surrogatepass") + b"\r\n\r\n" + (body or b"")
        yield (method, target[:200], (body or b"")[:120]), data, method == "HEAD", path


def test_fuzz_rest(harness):
    h = harness
    st, hdrs, data = h.http("POST", "/api/sessions", json.dumps({"project_path": h.project}).encode())
    sid = strict_json(data)["session_id"]
    for case, data, head, path in gen_rest(h.r, n_cases(1500), sid, h.project, h.port):
        h.raw("rest", case, data, head=head, expect_answer=True, path=path)
        h.tick("rest")
    h.finish()


# =============================================================================== 6. WebSocket

def ws_open(port, extra=b"", path="/ws"):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    key = base64.b64encode(os.urandom(16))
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n" % port
              + b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n"
              + extra + b"\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            raise ConnectionError("closed during the handshake: %r" % buf[:200])
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError("no upgrade: %r" % head[:200])
    return s, rest


def frame(fin, rsv, opcode, payload, mask=True, length_mode=None, declared=None):
    b0 = (0x80 if fin else 0) | rsv | opcode
    n = len(payload) if declared is None else declared
    mbit = 0x80 if mask else 0
    if length_mode == 126 or (length_mode is None and 126 <= n < 65536):
        head = bytes([b0, mbit | 126]) + struct.pack("!H", n & 0xFFFF)
    elif length_mode == 127 or (length_mode is None and n >= 65536):
        head = bytes([b0, mbit | 127]) + struct.pack("!Q", n)
    else:
        head = bytes([b0, mbit | n])
    if mask:
        key = os.urandom(4)
        masked = bytes(c ^ key[i % 4] for i, c in enumerate(payload))
        return head + key + masked
    return head + payload


CLOSE_CODES = [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1011, 1012, 1015, 999, 0, 2999, 3000, 4999,
               5000, 65535]


def rand_ws_payload(r, opcode):
    k = r.random()
    if opcode == 8:
        if k < 0.2:
            return b""
        if k < 0.3:
            return b"\x03"
        reason = r.choice([b"", b"bye", b"\xff\xfe", b"\xed\xa0\x80", b"r" * 200])
        return struct.pack("!H", r.choice(CLOSE_CODES)) + reason
    if k < 0.25:
        return r.choice([b"ping", b'{"type":"ping"}', b"hello", b"{}", b'{"type":"node_put"}', b"\"x\""])
    if k < 0.45:
        return r.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\xfe\xff"])
    if k < 0.5:
        return b"p" * r.choice([125, 126, 127, 65535, 65536])
    return bytes(r.getrandbits(8) for _ in range(r.randint(0, 200)))


def gen_ws(r, n):
    for i in range(n):
        k = r.random()
        if k < 0.1:
            yield "random bytes", bytes(r.getrandbits(8) for _ in range(r.randint(1, 300)))
            continue
        frames = []
        for _ in range(r.choice([1, 1, 2, 3, 5])):
            opcode = r.choice([0, 1, 1, 2, 8, 9, 9, 10] * 3 + list(range(16)))
            fin = r.random() < 0.8
            rsv = 0 if r.random() < 0.85 else r.choice([0x10, 0x20, 0x40, 0x70])
            payload = rand_ws_payload(r, opcode)
            mask = r.random() < 0.9
            lm = r.choice([None] * 8 + [126, 127])
            declared = None
            kd = r.random()
            if kd < 0.04:
                declared = 2 ** 63 + 5
                lm = 127
            elif kd < 0.08:
                declared = (1 << 20) + 1
                lm = 127
            elif kd < 0.12:
                declared = len(payload) + r.randint(1, 50)
            frames.append(frame(fin, rsv, opcode, payload, mask, lm, declared))
        desc = "frames"
        if r.random() < 0.05:  # a fragmented text message with a character split across fragments
            frames = [frame(False, 0, 1, "caf\u00e9".encode()[:4]), frame(True, 0, 0, "caf\u00e9".encode()[4:])]
            desc = "split utf-8"
        yield desc, b"".join(frames)


def check_ws_stream(h, case, data, outcome="closed"):
    from kg.serve.ws import OP_CLOSE, OP_TEXT, ProtocolError, parse_close, parse_frame
    buf = data
    seen_close = False
    while buf:
        try:
            parsed = parse_frame(buf, max_size=None)
        except ProtocolError as exc:
            h.fail("ws", "server sent a malformed frame: %s" % exc, case)
            return
        if parsed is None:
            if outcome != "reset":  # after a reset the tail may simply be lost
                h.fail("ws", "server stream ends inside a frame", (case, buf[:40]))
            return
        fr, used = parsed
        buf = buf[used:]
        if fr.mask is not None:
            h.fail("ws", "server frame is masked", case)
        if seen_close:
            h.fail("ws", "server sent a frame after its close frame", case)
        if LEAK.search(fr.payload.decode("utf-8", "replace")):
            h.fail("ws", "traceback text in a frame", case)
        if fr.opcode == OP_TEXT:
            try:
                strict_json(fr.payload)
            except (ValueError, UnicodeDecodeError) as exc:
                h.fail("ws", "server text frame is not strict JSON (%s)" % str(exc)[:60], (case, fr.payload[:100]))
        elif fr.opcode == OP_CLOSE:
            seen_close = True
            try:
                code, _ = parse_close(fr.payload)
            except ProtocolError as exc:
                h.fail("ws", "server close frame is malformed: %s" % exc, case)
            else:
                if fr.payload and code in (1005, 1006, 1015):
                    h.fail("ws", "server close carries reserved code %d" % code, case)


WS_HANDSHAKES = [
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: short\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: \xff\xfe\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: a\r\nSec-WebSocket-Key: b\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"POST /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
    b"GET /ws HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n" + WS_UPGRADE,
    b"GET /ws?project_path=%ZZ&project_path=%00 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + WS_UPGRADE,
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket, foo\r\nConnection: keep-alive, Upgrade\r\n"
    b"Sec-WebSocket-Version: 13, 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
]


@pytest.mark.slow
def test_fuzz_websocket_frames(harness):
    h = harness
    from kg.serve.ws import OP_CLOSE
    for i, hs in enumerate(WS_HANDSHAKES):
        h.raw("ws-handshake", ("handshake", i, hs[:120]), hs)
        h.tick("ws-handshake")
    for desc, fuzz in gen_ws(h.r, n_cases(600)):
        case = (desc, fuzz[:80])
        try:
            s, rest = ws_open(h.port)
        except (OSError, ConnectionError) as exc:
            h.fail("ws", "handshake failed: %r" % (exc,), case)
            h.tick("ws")
            continue
        try:
            try:
                s.sendall(fuzz)
                time.sleep(0.002)
                s.sendall(frame(True, 0, OP_CLOSE, struct.pack("!H", 1000)))
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server already failed the connection
            data, outcome = read_until_close(s, rest)
        finally:
            s.close()
        if outcome == "timeout":
            h.fail("ws", "connection neither closed nor answered within %.0f s" % TIMEOUT, case)
        check_ws_stream(h, case, data, outcome)
        h.tick("ws")
    # every live-feed subscriber is gone again
    deadline = time.monotonic() + 5
    clients = None
    while time.monotonic() < deadline:
        st, hdrs, body = h.http("GET", "/health")
        clients = strict_json(body).get("ws_clients")
        if not clients:
            break
        time.sleep(0.1)
    if clients:
        h.fail("ws", "%s live-feed subscriber(s) leaked after their sockets closed" % clients, "health")
    h.finish()
