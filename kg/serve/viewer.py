"""The viewer's files (contract section 7): which are served, under one Content-Security-Policy.

Rules owned here:
- Only the files in FILES are served (an allow-list: no path from a request reaches the loader).
  They live in kg/serve/ui/ and are read with pkgutil.get_data, so they are found inside kgd.pyz too.
- One CSP, sent as an HTTP header with every viewer response (the page carries none of its
  own): same-origin script, style and connections (the page's /api calls and its /ws feed), no
  'unsafe-inline', nothing from anywhere else.
- GET / from a person's browser gets FRONT_PAGE: where the viewer is and how to add kgd to an
  MCP client.

What the page itself draws and how it mirrors the canvas into the DOM for tests is told at the top
of kg/serve/ui/app.js.
"""

import html
import pkgutil

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
FILES = {
    "/ui": ("index.html", "text/html; charset=utf-8"),
    "/ui/": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.css": ("app.css", "text/css; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
}
_cache = {}


def read(name):
    """One of the viewer's files as bytes (read once, then kept: they never change while running)."""
    data = _cache.get(name)
    if data is None:
        data = pkgutil.get_data(__package__, "ui/" + name)
        if data is None:
            raise FileNotFoundError("kg/serve/ui/" + name)
        _cache[name] = data
    return data


FRONT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kgd</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="referrer" content="no-referrer">
<link rel="stylesheet" href="/ui/app.css"></head>
<body class="front"><main class="card">
<h1>kgd is running</h1>
<p>This is a knowledge-graph memory daemon for AI coding agents. Its address is for MCP clients,
which talk to it with <code>POST</code> requests.</p>
<p><a href="/ui">Open the graph viewer</a> to see what the agents remember.</p>
<h2>Connect a client</h2>
<p>Claude Code:</p>
<pre>claude mcp add --transport http --scope user kg {url}</pre>
<p>Any other MCP client: a Streamable HTTP server at <code>{url}</code>
(<code>kgd stdio</code> bridges clients that only speak stdio).</p>
<p>Status: <a href="/health">/health</a> &middot; REST API: <a href="/api/openapi.json">/api/openapi.json</a></p>
</main></body></html>
"""


def front_page(host):
    """The page for GET / in a browser; `host` is the request's Host header (already guarded)."""
    url = "http://%s/" % (host or "127.0.0.1:8765")
    return FRONT_PAGE.replace("{url}", html.escape(url)).encode("utf-8")
