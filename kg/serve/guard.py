"""Who may talk to the daemon (contract section 2): pure decisions, no sockets.

Rules owned here:
- DNS-rebinding guard: a `Host` that is not this machine (localhost, 127.0.0.1, [::1], or the
  configured --host) is refused with 403 and the connection closed; no Host header passes.
- An `Origin` that is not on this machine is refused with 403; no Origin passes (non-browser
  clients). Local: `http(s)://` with host `localhost`, a loopback address (`127.0.0.0/8`,
  `[::1]`, written in full) or the configured --host, and nothing else (no user, path or query).
- Hosts compare lower-cased, an IPv6 address without its brackets (normal_host), in both rules.
- With a token configured, every request needs `Authorization: Bearer <token>` except the
  public pages (GET/HEAD /health and the viewer's files, which hold no data); only the
  WebSocket may pass it as `?token=` (a browser cannot set headers there; anywhere else a
  token in a URL would leak into logs and history). Tokens are compared in constant time.
"""

import socket
from collections import namedtuple
from urllib.parse import urlsplit

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
PUBLIC_PATHS = frozenset({"/health", "/ui", "/ui/", "/ui/app.css", "/ui/app.js"})


# What to answer instead of serving: status, {"error": message}, extra headers, close the connection.
Refusal = namedtuple("Refusal", "status message headers close", defaults=(None, False))


def host_name(value):
    """The host part of a Host header: '127.0.0.1:8765' -> '127.0.0.1', '[::1]:80' -> '[::1]'.
    Anything that is not host[:port] with a numeric port (text after ']' or after the port)
    gives '' , which no guard accepts."""
    value = (value or "").strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return ""
        host, rest = value[: end + 1], value[end + 1:]
    elif value.count(":") == 1:
        host, rest = value.split(":", 1)
        rest = ":" + rest
    else:
        host, rest = value, ""
    if rest and not (rest[0] == ":" and rest[1:].isdigit() and rest[1:].isascii()):
        return ""
    return host


def normal_host(host):
    """A host as the guards compare it: trimmed, lower case, an IPv6 address without brackets."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]") and ":" in host:
        host = host[1:-1]
    return host


def origin_is_local(origin, extra_hosts=()):
    """True when a request with this `Origin` header may come in (None means absent)."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
        parts.port  # raises ValueError on a bad port
    except ValueError:
        return False
    if parts.scheme.lower() not in ("http", "https") or not host:
        return False
    if parts.username is not None or parts.password is not None:
        return False
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return False
    host = normal_host(host)
    return host == "localhost" or _is_loopback_address(host) or host in {normal_host(h) for h in extra_hosts if h}


def _is_loopback_address(host):
    """127.0.0.0/8 or ::1, written in full (no shorthand such as 127.1)."""
    for family, loopback in ((socket.AF_INET, None), (socket.AF_INET6, b"\0" * 15 + b"\1")):
        try:
            packed = socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return packed[0] == 127 if loopback is None else packed == loopback
    return False


class Policy:
    """The guard for one daemon: its bind address (an extra local name) and optional token."""

    def __init__(self, host="127.0.0.1", token=None):
        host = normal_host(host or "")
        self.extra_hosts = (host,) if host not in WILDCARD_HOSTS else ()
        self.allowed_hosts = LOCAL_HOSTS | set(self.extra_hosts)
        self.token = token or None

    def check(self, method, path, headers, query):
        """None when the request may go on, else the Refusal to answer.
        `headers` has lower-cased names; `query` is parse_qs output."""
        host = headers.get("host")
        if host is not None and normal_host(host_name(host)) not in self.allowed_hosts:
            return Refusal(403, "Host %r is not this machine; kgd only answers requests addressed to it "
                                "(DNS-rebinding guard)." % host[:100], None, True)
        origin = headers.get("origin")
        if origin is not None and not origin_is_local(origin, self.extra_hosts):
            return Refusal(403, "Origin %r is not on this machine; browsers on other sites may not use kgd."
                           % origin[:100])
        if self.token and needs_token(method, path) and not self.token_matches(given_token(path, headers, query)):
            return Refusal(401, "missing or wrong token: send Authorization: Bearer <token> (the daemon's --token).",
                           {"WWW-Authenticate": 'Bearer realm="kgd"'})
        return None

    def token_matches(self, given):
        import hmac  # only with a token configured: keeps the tokenless daemon's start-up lean

        return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"),
                                                         self.token.encode("utf-8"))


def needs_token(method, path):
    return not (method in ("GET", "HEAD") and path in PUBLIC_PATHS)


def given_token(path, headers, query):
    """The token the request carries: the Bearer header, or ?token= on /ws only."""
    auth = headers.get("authorization") or ""
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if path == "/ws" and query.get("token"):
        return query["token"][0]
    return None
