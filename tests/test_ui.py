"""The /ui viewer end to end: a real daemon, a real headless Chromium, the page's live feed.

The page draws on a <canvas>, so it mirrors what it draws into `<ul id="kgd-drawn">` (one
`<li data-level data-id data-state>` per drawn node) and `window.kgdDrawn` (a Set of "level:id").
Chromium is driven over `--remote-debugging-pipe` (NUL-separated JSON on fds 3 and 4), which
needs nothing beyond the standard library and lets the test put a node *after* the page has
loaded and watch it arrive over the WebSocket.

Needs the `daemon` fixture from conftest.py (`.url`, `.call_tool(name, args)`).
A screenshot is left in tests/artifacts/ui.png.
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from helpers import clean_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

if not os.path.exists(CHROMIUM):
    pytest.skip("headless Chromium is not installed at %s (apt-get install chromium)" % CHROMIUM,
                allow_module_level=True)


class Chromium:
    """Headless Chromium with a minimal DevTools Protocol client over --remote-debugging-pipe."""

    def __init__(self, width=1400, height=900):
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="kgd-ui-chromium-")
        to_child_r, self.wfd = os.pipe()
        self.rfd, from_child_w = os.pipe()
        # Park the child's ends above fd 4 so the dup2 calls below cannot clobber each other.
        cr = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        cw = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def pipes_on_3_and_4():
            os.dup2(cr, 3)
            os.dup2(cw, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-quic", "--no-first-run", "--no-default-browser-check",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-extensions", "--mute-audio", "--hide-scrollbars",
               "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
               "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=pipes_on_3_and_4,
                                     close_fds=False, env=clean_env())
        os.close(cr)
        os.close(cw)
        self.next_id = 0
        self.replies = {}
        self.events = []
        self.closed = False
        self.cond = threading.Condition()
        self.session = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cond:
                    self.closed = True
                    self.cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                with self.cond:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cond.notify_all()

    def send(self, method, params=None, session=True, timeout=20):
        with self.cond:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self.cond:
            while mid not in self.replies:
                if self.closed:
                    raise RuntimeError("Chromium closed the DevTools pipe (crashed or failed to start)")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("Chromium did not answer %s within %ss" % (method, timeout))
                self.cond.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            raise RuntimeError("%s failed: %s" % (method, reply["error"]))
        return reply.get("result", {})

    def open(self, url):
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            target = pages[0]["targetId"]
        else:
            target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Runtime.enable")
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def eval(self, expression, timeout=20):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % json.dumps(r["exceptionDetails"])[:500])
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=20.0, interval=0.1):
        """Poll a JS expression until it is truthy; returns its last value."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.eval(expression, timeout=5)
            except (RuntimeError, TimeoutError):
                value = None
            if value:
                return value
            time.sleep(interval)
        return value

    def exceptions(self):
        with self.cond:
            return [json.dumps(e["params"]["exceptionDetails"])[:800] for e in self.events
                    if e.get("method") == "Runtime.exceptionThrown"]

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # a clean checkout has no artifacts/ yet
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False, timeout=5)
                except Exception:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            for fd in (self.wfd, self.rfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)


def drawn(level, node_id):
    """JS: is this node in the page's drawn set?"""
    return "!!(window.kgdDrawn && window.kgdDrawn.has(%s))" % json.dumps(level + ":" + node_id)


HOSTILE = 'xss-<img src=x onerror="window.__kgdPwned=1">'


def test_ui_draws_both_graphs_and_live_changes(daemon, tmp_path):
    project_dir = tmp_path / "ui-project"
    project_dir.mkdir()
    read = daemon.call_tool("kg_read", {"cwd": str(project_dir)})
    sid, project_path = read["session_id"], read["project_path"]

    def put(level, node_id, gist, **extra):
        args = {"session_id": sid, "level": level, "id": node_id, "gist": gist}
        args.update(extra)
        return daemon.call_tool("kg_put_node", args)

    put("user", "before-node", "Put before the page loaded")
    put("user", HOSTILE, '<script>window.__kgdPwned=2</script> gist text is data, not markup')
    put("project", "before-project-node", "A project-level memory", touches=["src/app.py"])
    daemon.call_tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "before-project-node",
                                     "to": "src/app.py", "rel": "implemented-in"})

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser = Chromium()
    try:
        browser.open(daemon.url + "/ui#?project=" + quote(project_path, safe=""))
        assert browser.wait_for("document.documentElement.dataset.kgdReady === '1'", 20), \
            "the page never finished its first graph load; exceptions: %s" % browser.exceptions()
        assert browser.eval("document.title") == "kgd — knowledge graph"

        assert browser.wait_for(drawn("user", "before-node"), 10), "before-node was not drawn"
        assert browser.wait_for(drawn("project", "before-project-node"), 10), "the project graph was not drawn"
        assert browser.eval(drawn("user", HOSTILE)), "a node whose id looks like HTML was not drawn"
        assert (
            browser.eval("document.querySelector('#kgd-drawn li[data-id=\"before-node\"]').dataset.state") == "active"
        )

        assert browser.wait_for("document.documentElement.dataset.kgdWs === 'live'", 15), \
            "the live feed (WebSocket /ws) never connected"
        put("user", "after-node", "Put after the page loaded; arrives over the WebSocket")
        assert browser.wait_for(drawn("user", "after-node"), 10), "after-node did not appear without a reload"

        time.sleep(0.6)   # let the arrival highlight and the activity log settle into the picture
        browser.screenshot(ARTIFACTS / "ui.png")

        daemon.call_tool("kg_delete_node", {"session_id": sid, "level": "user", "id": "after-node"})
        assert browser.wait_for("!(%s)" % drawn("user", "after-node"), 10), "a deleted node stayed on the page"

        assert browser.eval("window.__kgdPwned === undefined"), "data from the graph was run as markup"
        assert browser.eval("document.querySelectorAll('#kgd-drawn img, #kgd-drawn script').length") == 0
        assert browser.exceptions() == []
    finally:
        browser.close()


# ------------------------------------------------------------------ layout rules: readable at every size, both schemes

USER_NODES = ["prefers-small-commits", "python-style", "tests-first", "review-habits", "editor-setup",
              "deploy-window", "shell-aliases", "ci-runs-long"]
PROJECT_NODES = ["build-uses-make", "db-layer", "app-entry", "readme-quickstart", "migrations", "config-env",
                 "logging-rule", "release-process", "a-very-long-node-identifier-for-label-tests", "perf-budget"]
GEOMETRY = "JSON.stringify(window.kgdGeometry())"


def _populate(daemon, project_dir):
    """Two islands with edges inside each and across them (the pull that once dragged nodes over)."""
    read = daemon.call_tool("kg_read", {"cwd": str(project_dir)})
    sid = read["session_id"]
    for level, ids in (("user", USER_NODES), ("project", PROJECT_NODES)):
        for i in ids:
            daemon.call_tool("kg_put_node", {"session_id": sid, "level": level, "id": i, "gist": "about " + i,
                                             "touches": ["src/app.py"] if i == "app-entry" else []})
    edges = [("user", "prefers-small-commits", "tests-first"), ("user", "python-style", "review-habits"),
             ("project", "build-uses-make", "release-process"), ("project", "db-layer", "migrations"),
             ("project", "app-entry", "src/app.py"), ("project", "build-uses-make", "python-style"),
             ("project", "perf-budget", "python-style"), ("project", "db-layer", "tests-first"),
             ("user", "editor-setup", "shell-aliases")]
    for level, a, b in edges:
        daemon.call_tool("kg_put_edge", {"session_id": sid, "level": level, "from": a, "to": b, "rel": "relates"})
    return read["project_path"]


def _overlap(a, b):
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _rect(region):
    return (region["x0"], region["y0"], region["x1"] - region["x0"], region["y1"] - region["y0"])


def _inside(region, x, y):
    return region["x0"] <= x <= region["x1"] and region["y0"] <= y <= region["y1"]


@pytest.mark.parametrize("size", [(1400, 900), (800, 600), (720, 1000)], ids=["1400x900", "800x600", "720x1000"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_viewer_layout_rules(daemon, tmp_path, size, scheme):
    project_dir = tmp_path / "layout-project"
    (project_dir / ".git").mkdir(parents=True)
    project_path = _populate(daemon, project_dir)
    browser = Chromium(*size)
    try:
        browser.open("about:blank")
        browser.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        browser.send("Page.navigate", {"url": daemon.url + "/ui#?project=" + quote(project_path, safe="")})
        assert browser.wait_for("document.documentElement.dataset.kgdReady === '1'", 20), browser.exceptions()
        # The first layout is drawn when the graph is ready, not when animation frames come round.
        first = json.loads(browser.eval(GEOMETRY))
        assert first["frames"] >= 1 and len(first["nodes"]) >= len(USER_NODES) + len(PROJECT_NODES)
        # The stylesheet and script came through the one CSP (no inline code to be blocked).
        assert browser.eval("getComputedStyle(document.getElementById('bar')).display") == "flex"
        time.sleep(2.5)  # let the animation settle
        g = json.loads(browser.eval(GEOMETRY))
        regions = g["regions"]
        assert set(regions) == {"user", "project"}
        assert not _overlap(_rect(regions["user"]), _rect(regions["project"])), regions
        nodes = [n for n in g["nodes"] if n["kind"] == "node"]
        assert len(nodes) == len(USER_NODES) + len(PROJECT_NODES)
        for n in nodes:
            other = "project" if n["level"] == "user" else "user"
            assert _inside(regions[n["level"]], n["x"], n["y"]), n
            assert not _inside(regions[other], n["x"], n["y"]), ("drawn in the other island", n)
            assert n["label"], ("no label", n)
            lx, ly, lw, lh = n["label"]
            assert 0 <= lx and lx + lw <= g["width"] and 0 <= ly and ly + lh <= g["height"], ("label off canvas", n)
        hud = [o for o in g["overlays"]][0]  # the stats card comes first
        for n in nodes:
            assert not _overlap(hud, (n["x"] - n["r"], n["y"] - n["r"], 2 * n["r"], 2 * n["r"])), ("under the card", n)
            assert not _overlap(hud, n["label"]), ("label under the card", n)
        chips = json.loads(browser.eval(
            "JSON.stringify([].map.call(document.querySelectorAll('.toggles .lbl'), function (e) {"
            " return [e.textContent, e.offsetWidth, e.scrollWidth, e.clientWidth]; }))"))
        assert [c[0] for c in chips] == ["archived", "orphaned", "files"]
        for text, width, scroll, client in chips:
            assert width > 0 and scroll <= client, ("chip text hidden or cut", text)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(ARTIFACTS / ("ui-%dx%d-%s.png" % (size[0], size[1], scheme)))
        assert browser.exceptions() == []
    finally:
        browser.close()


SHARING = ("JSON.stringify((function () { var s = document.getElementById('sharing'),"
           " c = s.parentNode.querySelector('.counts'), st = getComputedStyle(s);"
           " return {text: s.textContent, title: s.title, h: s.offsetHeight, fs: parseFloat(st.fontSize),"
           " scroll: s.scrollWidth, client: s.clientWidth, top: s.getBoundingClientRect().top,"
           " countsBottom: c.getBoundingClientRect().bottom}; })())")


@pytest.mark.parametrize("shared", [False, True], ids=["personal", "shared"])
def test_the_sharing_label_is_one_line_under_the_counts(daemon, tmp_path, shared):
    """The label ("personal (not in the repository)", "shared in /full/path/.kg (8 nodes)") once sat in
    the counts' four-column grid and wrapped under them."""
    from kg.core import kg_format

    project_dir = tmp_path / ("a-project-folder-with-a-rather-long-name-" * 3)
    (project_dir / ".git").mkdir(parents=True)
    if shared:
        (project_dir / ".kg").mkdir()
        recs = {"n%d" % i: kg_format.node_record({"id": "n%d" % i, "gist": "shared node %d" % i,
                                                  "_created_ts": 1.7e9, "_write_ts": 1.7e9}) for i in range(8)}
        (project_dir / ".kg" / kg_format.NODES_FILE).write_bytes(kg_format.render(recs))
    project_path = daemon.call_tool("kg_read", {"cwd": str(project_dir)})["project_path"]
    browser = Chromium(800, 600)
    try:
        browser.open("about:blank")
        browser.send("Page.navigate", {"url": daemon.url + "/ui#?project=" + quote(project_path, safe="")})
        assert browser.wait_for("document.documentElement.dataset.kgdReady === '1'", 20), browser.exceptions()
        assert browser.wait_for("!!document.getElementById('sharing')", 10)
        s = json.loads(browser.eval(SHARING))
        want = "shared in the repository \u00b7 8 nodes" if shared else "personal \u00b7 not in the repository"
        assert s["text"] == want, s
        assert s["h"] <= 1.6 * s["fs"], ("the label wraps", s)
        assert s["scroll"] <= s["client"], ("the label is cut", s)
        assert s["top"] >= s["countsBottom"] - 0.5, ("the label sits beside the counts", s)
        if shared:
            assert os.path.join(project_path, ".kg") in s["title"]  # the full path, where it cannot wrap
        assert browser.exceptions() == []
    finally:
        browser.close()
