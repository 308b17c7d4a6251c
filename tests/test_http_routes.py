"""The route table's newer answers: GET / for a person's browser (a page pointing to /ui), REST
search's `query=` (as well as `q=`), the viewer's files from an allow-list under one CSP without
'unsafe-inline' (no script a graph's text could inject), also from inside a zipapp."""

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import zipapp
from pathlib import Path

import pytest

from kg.ops import cli
from kg.serve import app, http, viewer

from helpers import clean_env, http_request

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    cfg = cli.resolve_config(argparse.Namespace(), environ={})
    cfg.update(root=str(tmp_path_factory.mktemp("routes") / "root"), port=0)
    a = app.App(cfg).start()
    yield a
    a.stop()


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def test_get_root_from_a_browser_is_a_page(running):
    st, hdrs, data = http_request(running.port, "GET", "/", headers={"Accept": BROWSER_ACCEPT})
    assert st == 200 and hdrs["content-type"] == "text/html; charset=utf-8"
    page = data.decode()
    assert 'href="/ui"' in page
    assert "claude mcp add --transport http --scope user kg http://127.0.0.1:%d/" % running.port in page
    assert hdrs["content-security-policy"] == viewer.CSP
    assert "<script" not in page and "style=" not in page and "<style" not in page


@pytest.mark.parametrize("path, accept", [
    ("/", None), ("/", "application/json, text/event-stream"), ("/", "*/*"), ("/mcp", BROWSER_ACCEPT),
])
def test_mcp_clients_keep_their_405(running, path, accept):
    st, hdrs, data = http_request(running.port, "GET", path, headers={"Accept": accept} if accept else {})
    assert st == 405 and hdrs["allow"] == "POST" and "POST only" in json.loads(data)["error"]


def test_rest_search_takes_query_as_well_as_q(running):
    assert http_request(running.port, "PUT", "/api/nodes/user/build-uses-make",
                   json.dumps({"gist": "the build runs through make targets"}),
                   {"Content-Type": "application/json"})[0] == 200
    by_q = json.loads(http_request(running.port, "GET", "/api/search?q=make+targets")[2])
    by_query = json.loads(http_request(running.port, "GET", "/api/search?query=make+targets")[2])
    assert by_q == by_query and by_q["results"][0]["id"] == "build-uses-make"
    st, _, data = http_request(running.port, "GET", "/api/search")
    assert st == 400 and "q (or query)" in json.loads(data)["error"]


# ------------------------------------------------------------------ the viewer's files

def test_viewer_files_allow_list_and_one_csp(running):
    types = {"/ui": "text/html", "/ui/": "text/html", "/ui/app.css": "text/css", "/ui/app.js": "text/javascript"}
    for path, ctype in types.items():
        st, hdrs, data = http_request(running.port, "GET", path)
        assert st == 200 and hdrs["content-type"].startswith(ctype), path
        assert hdrs["content-security-policy"] == viewer.CSP, path
        assert int(hdrs["content-length"]) == len(data) > 100
    for path in ("/ui/index.html", "/ui/../http.py", "/ui/app.js.map", "/ui/%2e%2e/cli.py", "/ui/viewer.py"):
        assert http_request(running.port, "GET", path)[0] == 404, path
    assert http_request(running.port, "POST", "/ui/app.js")[0] == 405


def test_csp_has_no_unsafe_inline_and_the_page_needs_none():
    assert "unsafe" not in viewer.CSP
    assert "script-src 'self'" in viewer.CSP and "style-src 'self'" in viewer.CSP
    page = viewer.read("index.html").decode()
    assert 'http-equiv="Content-Security-Policy"' not in page  # one policy: the header
    assert re.findall(r"<script\b[^>]*>", page) == ['<script src="/ui/app.js">']
    assert "<style" not in page and not re.search(r"\sstyle=", page)
    assert not re.search(r"\son[a-z]+\s*=", page), "inline event handler"
    js = viewer.read("app.js").decode()
    assert "innerHTML" not in js.replace("never innerHTML", "") and "eval(" not in js
    assert "setAttribute('style'" not in js and 'setAttribute("style"' not in js


@pytest.mark.e2e
def test_viewer_files_come_from_a_zipapp(tmp_path):
    """pkgutil.get_data finds kg/serve/ui/ inside kgd.pyz (what `kgd bundle` builds: kg/ + kgd.py)."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "kg", src / "kg", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "kgd.py", src / "__main__.py")
    pyz = tmp_path / "kgd.pyz"
    zipapp.create_archive(str(src), str(pyz))
    code = ("import sys; sys.path.insert(0, %r); from kg.serve import viewer; "
            "print(len(viewer.read('index.html')), len(viewer.read('app.js')), len(viewer.read('app.css')), "
            "viewer.__file__)" % str(pyz))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=str(tmp_path),
                         env=clean_env())
    assert out.returncode == 0, out.stderr
    sizes = [int(n) for n in out.stdout.split()[:3]]
    assert sizes == [len(viewer.read(n)) for n in ("index.html", "app.js", "app.css")]
    assert "kgd.pyz" in out.stdout
    # and the daemon run from the archive serves them
    root = tmp_path / "root"
    proc = subprocess.Popen([sys.executable, str(pyz), "--port", "0", "--root", str(root)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=str(tmp_path), env=clean_env())
    try:
        line = proc.stderr.readline().decode()
        port = int(re.search(r":(\d+)/", line).group(1))
        st, hdrs, data = http_request(port, "GET", "/ui/app.js")
        assert st == 200 and data == viewer.read("app.js")
    finally:
        proc.terminate()
        proc.wait(10)


def test_route_table_is_the_only_dispatch():
    """Every exact route names a Handler method that exists; the prefix goes to the REST table."""
    for path, route in http.ROUTES.items():
        for method, name in route.methods.items():
            assert callable(getattr(http.Handler, name)), (path, method, name)
        assert route.allow and route.refusal
    assert set(viewer.FILES) <= set(http.ROUTES)


def test_a_missing_viewer_file_is_a_clear_500(running, monkeypatch):
    def missing(name):
        raise FileNotFoundError(name)

    monkeypatch.setattr(viewer, "read", missing)
    st, _, data = http_request(running.port, "GET", "/ui/app.js")
    assert st == 500 and "kg/serve/ui/app.js is missing" in json.loads(data)["error"]


def _raw_post(port, headers, body):
    """One POST written byte for byte (http.client would be free to tidy the header lines)."""
    data = json.dumps(body).encode()
    head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n" % port
    head += "".join("%s:%s\r\n" % kv for kv in headers) + "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(data)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode("latin-1") + data)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


STATELESS_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.mark.parametrize("name_header", ["  kg_search  ", "\tkg_search\t", " kg_search", "kg_search "])
def test_mcp_header_values_are_compared_without_surrounding_whitespace(running, name_header):
    """Contract section 13, RFC 9110 section 5.5: `Mcp-Name:   kg_search  ` names kg_search."""
    status, resp = _raw_post(running.port, [("MCP-Protocol-Version", " 2026-07-28 "), ("Mcp-Method", "tools/call "),
                                            ("Mcp-Name", name_header)],
                             {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "kg_search", "arguments": {"query": "make"}, "_meta": STATELESS_META}})
    assert status == 200, resp
    assert resp["result"]["resultType"] == "complete" and resp["result"]["isError"] is False


def test_mcp_header_mismatch_still_refused_when_trimmed(running):
    status, resp = _raw_post(running.port, [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"),
                                            ("Mcp-Name", "  kg_sync  ")],
                             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": "kg_search", "arguments": {"query": "x"}, "_meta": STATELESS_META}})
    assert status == 400 and resp["error"]["code"] == -32020


def test_initialize_with_the_stateless_envelope_is_404(running):
    """Contract section 13: 2026-07-28 has no initialize; without the envelope it is the handshake."""
    status, resp = _raw_post(running.port, [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "initialize")],
                             {"jsonrpc": "2.0", "id": 3, "method": "initialize",
                              "params": {"protocolVersion": "2026-07-28", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}, "_meta": STATELESS_META}})
    assert status == 404 and resp["error"]["code"] == -32601
    status, resp = _raw_post(running.port, [("MCP-Protocol-Version", "2026-07-28")],
                             {"jsonrpc": "2.0", "id": 4, "method": "initialize",
                              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}}})
    assert status == 200 and resp["result"]["protocolVersion"] == "2025-11-25"
