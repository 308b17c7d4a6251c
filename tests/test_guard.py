"""kg/serve/guard.py's Host / Origin / token policy as tables of cases (no sockets, no daemon)."""

import pytest

from kg.serve import guard

TOKEN = "guard-token-7c1d"


@pytest.mark.parametrize("value, host", [
    ("127.0.0.1:8765", "127.0.0.1"), ("localhost", "localhost"), ("LOCALHOST:80", "localhost"),
    ("[::1]:8765", "[::1]"), ("[::1]", "[::1]"), ("::1", "::1"),
    ("127.0.0.1:80x", ""), ("[::1]x", ""), ("[::1", ""), ("127.0.0.1:", ""), ("127.0.0.1:٣", ""),
    ("", ""), (None, ""), ("evil.example:8765", "evil.example"),
])
def test_host_name(value, host):
    assert guard.host_name(value) == host


@pytest.mark.parametrize("origin,extra,ok", [
    (None, (), True),
    ("http://localhost", (), True),
    ("http://localhost:8765", (), True),
    ("https://LOCALHOST:3000", (), True),
    ("http://127.0.0.1:8765", (), True),
    ("http://127.0.0.2", (), True),
    ("http://[::1]:8765", (), True),
    ("http://mybox.lan:8765", ("mybox.lan",), True),
    ("http://[fe80::1]", ("[fe80::1]",), True),
    ("http://mybox.lan:8765", (), False),
    ("null", (), False),
    ("", (), False),
    ("https://evil.example", (), False),
    ("http://localhost.evil.example", (), False),
    ("http://127.0.0.1.evil.example", (), False),
    ("http://evil.localhost", (), False),
    ("ftp://localhost", (), False),
    ("file://", (), False),
    ("chrome-extension://abcdef", (), False),
    ("http://user@localhost", (), False),
    ("http://localhost:notaport", (), False),
    ("http://0.0.0.0", (), False),
    ("localhost", (), False),
    ("http://[::ffff:127.0.0.1]", (), False),
])
def test_origin_is_local(origin, extra, ok):
    assert guard.origin_is_local(origin, extra) is ok


@pytest.mark.parametrize("value, host", [
    ("LocalHost", "localhost"), (" [::1] ", "::1"), ("[FD00::5]", "fd00::5"), ("[localhost]", "[localhost]"),
    ("127.0.0.1", "127.0.0.1"), ("", ""),
])
def test_normal_host(value, host):
    assert guard.normal_host(value) == host


LOCAL = guard.Policy()
BOUND = guard.Policy("192.168.1.20")
WILD = guard.Policy("0.0.0.0")
V6 = guard.Policy("fd00::5")
TOKENED = guard.Policy(token=TOKEN)


@pytest.mark.parametrize("policy, headers, status", [
    (LOCAL, {}, None),
    (LOCAL, {"host": "127.0.0.1:8765"}, None),
    (LOCAL, {"host": "localhost:8765"}, None),
    (LOCAL, {"host": "[::1]:8765"}, None),
    (LOCAL, {"host": "evil.example:8765"}, 403),
    (LOCAL, {"host": "127.0.0.1.evil.example"}, 403),
    (LOCAL, {"host": "127.0.0.1:8765 junk"}, 403),
    (LOCAL, {"host": "192.168.1.20:8765"}, 403),
    (BOUND, {"host": "192.168.1.20:8765"}, None),
    (WILD, {"host": "0.0.0.0:8765"}, 403),
    (V6, {"host": "[fd00::5]:8765"}, None),
    (V6, {"origin": "http://[FD00::5]:8765"}, None),
    (guard.Policy("[FD00::5]"), {"host": "[fd00::5]:8765"}, None),
    (LOCAL, {"host": "[localhost]:8765"}, 403),
    (LOCAL, {"origin": "http://127.0.0.1:8765"}, None),
    (LOCAL, {"origin": "http://localhost:3000"}, None),
    (LOCAL, {"origin": "https://[::1]"}, None),
    (LOCAL, {"origin": "null"}, 403),
    (LOCAL, {"origin": "https://evil.example"}, 403),
    (LOCAL, {"origin": "http://127.0.0.1.evil.example"}, 403),
    (LOCAL, {"origin": "file://"}, 403),
    (LOCAL, {"origin": "http://192.168.1.20:8765"}, 403),
    (BOUND, {"origin": "http://192.168.1.20:8765"}, None),
])
def test_host_and_origin(policy, headers, status):
    refusal = policy.check("POST", "/mcp", headers, {})
    assert (refusal.status if refusal else None) == status
    if refusal:
        assert refusal.message and "{" not in refusal.message[:1]


def test_a_bad_host_closes_the_connection_a_bad_origin_does_not():
    assert LOCAL.check("GET", "/health", {"host": "evil.example"}, {}).close is True
    assert LOCAL.check("GET", "/health", {"origin": "https://evil.example"}, {}).close is False


BEARER = {"authorization": "Bearer " + TOKEN}


@pytest.mark.parametrize("method, path, headers, query, status", [
    ("POST", "/mcp", {}, {}, 401),
    ("POST", "/mcp", BEARER, {}, None),
    ("POST", "/mcp", {"authorization": "bearer " + TOKEN}, {}, None),
    ("POST", "/mcp", {"authorization": "Bearer wrong"}, {}, 401),
    ("POST", "/mcp", {"authorization": "Basic " + TOKEN}, {}, 401),
    ("POST", "/mcp", {}, {"token": [TOKEN]}, 401),  # a token in a URL only on /ws
    ("GET", "/api/projects", {}, {"token": [TOKEN]}, 401),
    ("GET", "/api/health", {}, {}, 401),
    ("POST", "/api/hooks", {}, {}, 401),
    ("POST", "/api/hooks", BEARER, {}, None),
    ("GET", "/ws", {}, {"token": [TOKEN]}, None),
    ("GET", "/ws", {}, {"token": ["wrong"]}, 401),
    ("GET", "/ws", {}, {"token": [""]}, 401),
    ("GET", "/ws", {}, {}, 401),
    ("GET", "/health", {}, {}, None),
    ("HEAD", "/health", {}, {}, None),
    ("POST", "/health", {}, {}, 401),
    ("GET", "/ui", {}, {}, None),
    ("GET", "/ui/", {}, {}, None),
    ("GET", "/ui/app.js", {}, {}, None),
    ("GET", "/ui/app.css", {}, {}, None),
    ("GET", "/ui/other", {}, {}, 401),
    ("GET", "/", {"accept": "text/html"}, {}, 401),
    ("GET", "/nowhere", {}, {}, 401),
])
def test_token(method, path, headers, query, status):
    refusal = TOKENED.check(method, path, headers, query)
    assert (refusal.status if refusal else None) == status
    if refusal:
        assert refusal.headers == {"WWW-Authenticate": 'Bearer realm="kgd"'}


def test_no_token_configured_needs_none():
    assert LOCAL.check("POST", "/api/hooks", {}, {}) is None
    assert guard.Policy(token="").token is None


def test_host_is_checked_before_the_token():
    assert TOKENED.check("POST", "/mcp", {"host": "evil.example"}, {}).status == 403
