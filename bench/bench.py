#!/usr/bin/env python3
"""kgd's benchmark: one run, one table, figures as ratios to a bare-server ceiling.

    python3 bench/bench.py            # full run (a few minutes)
    python3 bench/bench.py --quick    # under a minute

Everything talks HTTP over persistent keep-alive connections with the standard library
client, against kgd started as a real process on a free port over a temporary root. The
ceiling is a bare ThreadingHTTPServer answering a fixed small JSON-RPC body in one write.
Machines here are noisy: compare ratios from one run, not absolute times across runs.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = re.compile(r"listening on http://[^:]+:(\d+)/")


# ---------------------------------------------------------------- helpers

class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.n = 0

    def post(self, path, obj):
        body = json.dumps(obj).encode()
        self.conn.request("POST", path, body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return json.loads(data) if data else None

    def rpc(self, method, params=None):
        self.n += 1
        msg = {"jsonrpc": "2.0", "id": self.n, "method": method}
        if params is not None:
            msg["params"] = params
        return self.post("/mcp", msg)

    def tool(self, name, args):
        r = self.rpc("tools/call", {"name": name, "arguments": args})
        res = r["result"]
        if res.get("isError"):
            raise RuntimeError(res["content"][0]["text"])
        return res

    def session(self, cwd):
        """kg_read with cwd -> the session id, from the text's first line (results are text only
        unless kgd runs with --structured-output)."""
        text = self.tool("kg_read", {"cwd": cwd})["content"][0]["text"]
        return re.match(r"Session: (\S+)", text).group(1)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        return json.loads(r.read())


def timed(fn, n):
    """Run fn(i) n times; return the list of durations in seconds."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def rps(durations):
    """Requests per second from the median round trip: robust to the spikes of a noisy machine
    (the same statistic for the ceiling and for kgd, so their ratio is fair)."""
    return 1.0 / statistics.median(durations)


def ms(x):
    return x * 1000.0


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Kgd:
    def __init__(self, root, extra=(), repo=REPO):
        """repo: the checkout whose kgd.py runs (e.g. an older commit, for before/after figures)."""
        self.root = root
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, os.path.join(repo, "kgd.py"), "--port", "0", "--root", root,
                                      "--log-level", "WARNING"] + list(extra),
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=repo)
        while True:
            line = self.proc.stderr.readline().decode()
            if not line:
                raise RuntimeError("kgd did not start")
            m = START.search(line)
            if m:
                self.port = int(m.group(1))
                break
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/health")
        c.getresponse().read()
        self.startup_s = time.perf_counter() - t0
        c.close()
        threading.Thread(target=lambda: [None for _ in iter(self.proc.stderr.readline, b"")], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


# ---------------------------------------------------------------- ceiling

FIXED = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()


class Bare(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(FIXED), FIXED))

    def log_message(self, *a):
        pass


def ceiling(n):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Bare)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    c = Client(srv.server_address[1])
    timed(lambda i: c.rpc("ping"), 200)  # warm-up
    d = timed(lambda i: c.rpc("ping"), n)
    srv.shutdown()
    srv.server_close()
    return rps(d)


def bare_startup():
    code = ("import http.server,sys,threading\n"
            "s=http.server.ThreadingHTTPServer(('127.0.0.1',0),http.server.BaseHTTPRequestHandler)\n"
            "sys.stderr.write('listening on http://127.0.0.1:%d/\\n'%s.server_address[1]);sys.stderr.flush()\n"
            "s.serve_forever()\n")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    port = int(START.search(p.stderr.readline().decode()).group(1))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/")
    c.getresponse().read()
    dt = time.perf_counter() - t0
    rss = rss_kb(p.pid)
    p.kill()
    p.wait()
    return dt, rss


# ---------------------------------------------------------------- kgd measurements

def bulk_nodes(c, sid, level, n, prefix, start=0, batch=100):
    """Write n nodes with JSON-RPC batches of at most 100 (kgd's limit); set-up only, not
    measured. Fails loudly if any write did not succeed."""
    for b in range(start, start + n, batch):
        msgs = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "kg_put_node", "arguments": {
            "session_id": sid, "level": level, "id": "%s-%d" % (prefix, i),
            "gist": "insight number %d about module %d and its caching layer" % (i, i % 97),
            "notes": ["detail %d: the retry path uses exponential backoff with jitter" % i]}}}
            for i in range(b, min(b + batch, start + n))]
        out = c.post("/mcp", msgs)
        if not isinstance(out, list) or len(out) != len(msgs) or any(
                "result" not in r or r["result"].get("isError") for r in out):
            raise RuntimeError("bulk write failed: %s" % str(out)[:300])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller counts; under a minute")
    ap.add_argument("--json", help="also write the figures to this file")
    opts = ap.parse_args()
    q = opts.quick
    N = 300 if q else 2000
    BIG = 10000
    rows = []

    def row(name, value, unit, ratio=None, note=""):
        rows.append((name, value, unit, ratio, note))
        print(
            "  %-48s %10.3f %-6s %s %s"
            % (name, value, unit, "" if ratio is None else "(%.2f x ceiling)" % ratio, note),
            file=sys.stderr,
        )

    tmp = tempfile.mkdtemp(prefix="kgd-bench-")
    try:
        proj = os.path.join(tmp, "proj")
        os.makedirs(os.path.join(proj, ".git"))
        ceil = ceiling(N)
        row("ceiling: bare ThreadingHTTPServer JSON-RPC", ceil, "req/s", 1.0)
        bare_t, bare_rss = bare_startup()
        row("ceiling: bare server start-up to first answer", ms(bare_t), "ms")
        row("ceiling: bare server resident memory", bare_rss / 1024.0, "MB")

        # Grace 0: every node may be archived at once, so the graphs sit at their budget as a
        # year-old memory would, instead of growing without bound while all nodes are new.
        os.environ["KG_GRACE_PERIOD_DAYS"] = "0"
        k = Kgd(os.path.join(tmp, "root"))
        time.sleep(0.5)
        row("kgd start-up to first answered request", ms(k.startup_s), "ms", None, "(target < 300)")
        row("kgd resident memory, idle", rss_kb(k.proc.pid) / 1024.0, "MB", None, "(target < 25)")
        c = Client(k.port)
        timed(lambda i: c.rpc("ping"), 200)  # warm-up, as for the ceiling
        r = timed(lambda i: c.rpc("ping"), N)
        row("MCP ping", rps(r), "req/s", rps(r) / ceil)

        sid = c.session(proj)
        d_small = timed(lambda i: c.tool("kg_put_node", {"session_id": sid, "level": "project", "id": "seq-%d" % i,
                                                         "gist": "sequential insight %d" % i}), N)
        row("kg_put_node sequential (new nodes)", rps(d_small), "req/s", rps(d_small) / ceil, "(target >= 0.40)")
        d_edge = timed(lambda i: c.tool("kg_put_edge", {"session_id": sid, "level": "project", "from": "seq-%d" % i,
                                                        "to": "seq-%d" % ((i + 1) % N), "rel": "next"}), N)
        row("kg_put_edge sequential", rps(d_edge), "req/s", rps(d_edge) / ceil)

        # Cost at 100 nodes vs 10,000 nodes, same session, same kind of write (user level).
        c2 = Client(k.port)
        sid2 = c2.session(tmp)
        bulk_nodes(c2, sid2, "user", 100, "u")
        at100 = timed(lambda i: c2.tool("kg_put_node", {"session_id": sid2, "level": "user", "id": "p100-%d" % i,
                                                        "gist": "probe %d" % i}), N)
        bulk_nodes(c2, sid2, "user", BIG - 100 - N, "u", start=100)
        at10k = timed(lambda i: c2.tool("kg_put_node", {"session_id": sid2, "level": "user", "id": "p10k-%d" % i,
                                                        "gist": "probe %d" % i}), N)
        m100, m10k = statistics.median(at100), statistics.median(at10k)
        held = len(c2.get("/api/graph")["user"]["nodes"])
        if held < BIG:
            raise RuntimeError("the user graph holds %d nodes, not %d" % (held, BIG))
        row("kg_put_node median at ~100 nodes", ms(m100), "ms")
        row("kg_put_node median at ~10,000 nodes", ms(m10k), "ms")
        row("  cost ratio 10,000 / 100 nodes", m10k / m100, "x", None, "(target <= 1.5)")

        # 8 concurrent writers, each its own session and connection.
        per = max(50, N // 4)
        sids = [Client(k.port) for _ in range(8)]
        sess = [cl.session(proj) for cl in sids]
        lat = []
        lock = threading.Lock()

        def writer(j):
            cl, s = sids[j], sess[j]
            mine = []
            for i in range(per):
                t = time.perf_counter()
                cl.tool(
                    "kg_put_node",
                    {"session_id": s, "level": "project", "id": "w%d-%d" % (j, i), "gist": "writer %d" % j},
                )
                mine.append(time.perf_counter() - t)
            with lock:
                lat.extend(mine)
        ths = [threading.Thread(target=writer, args=(j,)) for j in range(8)]
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.perf_counter() - t0
        conc = 8 * per / wall
        seq_mean = N / sum(d_small)  # total throughput is a mean rate: compare it with the mean sequential rate
        row("8 concurrent writers, total", conc, "req/s", conc / ceil, "(target >= sequential)")
        row("  sequential kg_put_node, mean rate (for comparison)", seq_mean, "req/s", seq_mean / ceil)
        row("  8 writers: p50 latency", ms(statistics.median(lat)), "ms")
        row("  8 writers: p99 latency", ms(sorted(lat)[int(len(lat) * 0.99) - 1]), "ms")

        # Reads. The user graph now holds ~10,000 nodes, compacted to the default budget.
        reads = timed(lambda i: c.tool("kg_read", {"session_id": sid}), max(20, N // 10))
        row("kg_read full, default budget (median)", ms(statistics.median(reads)), "ms", None, "(target < 5)")
        byid = timed(lambda i: c.tool("kg_read", {"session_id": sid, "id": "seq-%d" % i}), max(50, N // 4))
        row("kg_read by id (median)", ms(statistics.median(byid)), "ms")
        words = ["caching", "module 42", "retry backoff", "insight number 777", "jitter layer"]
        srch = timed(
            lambda i: c2.tool("kg_search", {"session_id": sid2, "query": words[i % len(words)]}), max(20, N // 10)
        )
        row("kg_search over ~10,000 nodes (median)", ms(statistics.median(srch)), "ms", None, "(target < 20)")

        # kg_sync after another session's 100 writes.
        a = Client(k.port)
        sa = a.session(proj)
        syncs = []
        for rnd in range(5 if q else 20):
            for i in range(100):
                c.tool(
                    "kg_put_node", {"session_id": sid, "level": "project", "id": "sync-%d-%d" % (rnd, i), "gist": "s"}
                )
            t = time.perf_counter()
            text = a.tool("kg_sync", {"session_id": sa})["content"][0]["text"]
            syncs.append(time.perf_counter() - t)
            got = sum(1 for line in text.splitlines() if line.startswith("node "))
            assert got >= 100, got
        row("kg_sync after another session's 100 writes", ms(statistics.median(syncs)), "ms")

        time.sleep(1.5)
        held = len(c.get("/api/graph")["user"]["nodes"]) + sum(p["nodes"] for p in c.get("/api/projects")["projects"])
        row("kgd resident memory holding %d nodes (all graphs)" % held, rss_kb(k.proc.pid) / 1024.0, "MB")
        k.stop()

        # Start-up again with the data on disk.
        k2 = Kgd(os.path.join(tmp, "root"))
        row("kgd start-up with those %d nodes on disk" % held, ms(k2.startup_s), "ms")
        k2.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n| measure | value | unit | ratio to ceiling | note |")
    print("|---|---:|---|---:|---|")
    for name, value, unit, ratio, note in rows:
        print(
            "| %s | %.2f | %s | %s | %s |" % (name.strip(), value, unit, "" if ratio is None else "%.2f" % ratio, note)
        )
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump([dict(zip(("name", "value", "unit", "ratio", "note"), r)) for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
