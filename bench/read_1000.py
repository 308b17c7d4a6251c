#!/usr/bin/env python3
"""kg_read and kg_put_node on a project graph whose nodes are all still in their grace period
(default settings: nothing can be archived, so kg_read returns all of them).

    python3 bench/read_1000.py                                   # 1,000 nodes
    python3 bench/read_1000.py --nodes 2600 --edges 1000         # where a full read once reached 500 KB
    python3 bench/read_1000.py --nodes 2600 --edges 1000 --repo /tmp/kgd-base   # another checkout

Full kg_read is measured over HTTP on one keep-alive connection: the response size on the wire
(JSON-RPC body bytes), the text's characters, the serialized structuredContent's characters (if
any), and the round trip's p50 / p90.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import REPO, Client, Kgd, bulk_nodes, timed  # noqa: E402


def raw_call(port, name, args):
    """One tools/call -> (response body bytes, parsed result)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}).encode()
    conn.request("POST", "/mcp", body, {"Content-Type": "application/json"})
    data = conn.getresponse().read()
    conn.close()
    return data, json.loads(data)["result"]


def bulk_edges(c, sid, n, nodes, prefix):
    for b in range(0, n, 100):
        msgs = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "kg_put_edge", "arguments": {
            "session_id": sid, "level": "project", "from": "%s-%d" % (prefix, i % nodes),
            "to": "%s-%d" % (prefix, (i * 7 + 1) % nodes), "rel": "depends-on"}}} for i in range(b, min(b + 100, n))]
        out = c.post("/mcp", msgs)
        if any("result" not in r or r["result"].get("isError") for r in out):
            raise RuntimeError("bulk edge write failed: %s" % str(out)[:300])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=0)
    ap.add_argument("--reads", type=int, default=50)
    ap.add_argument("--repo", default=REPO, help="checkout whose kgd.py runs (default: this one)")
    ap.add_argument("--structured-output", action="store_true", help="pass --structured-output to kgd")
    opts = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kgd-read-")
    try:
        os.makedirs(os.path.join(tmp, "p", ".git"))
        os.environ.pop("KG_GRACE_PERIOD_DAYS", None)
        os.environ.pop("KG_STRUCTURED_OUTPUT", None)
        k = Kgd(os.path.join(tmp, "root"), ["--structured-output"] if opts.structured_output else [], repo=opts.repo)
        c = Client(k.port)
        sid = c.session(os.path.join(tmp, "p"))
        bulk_nodes(c, sid, "project", opts.nodes, "n")
        bulk_edges(c, sid, opts.edges, opts.nodes, "n")
        timed(lambda i: c.tool("kg_read", {"session_id": sid}), 5)  # warm-up
        d = sorted(timed(lambda i: c.tool("kg_read", {"session_id": sid}), opts.reads))
        data, r = raw_call(k.port, "kg_read", {"session_id": sid})
        text = r["content"][0]["text"]
        active = re.search(r"## Project graph: (\d+) active", text).group(1)
        sc = r.get("structuredContent")
        print(
            "kgd at %s: kg_read, %d nodes in grace + %d edges (%s active): p50 %.2f ms, p90 %.2f ms over HTTP; "
            "response %d bytes; text %d characters; structuredContent %s"
            % (
                opts.repo,
                opts.nodes,
                opts.edges,
                active,
                statistics.median(d) * 1000,
                d[int(len(d) * 0.9) - 1] * 1000,
                len(data),
                len(text),
                "absent"
                if sc is None
                else "%d characters" % len(json.dumps(sc, ensure_ascii=False, separators=(",", ":"))),
            )
        )
        p = sorted(timed(lambda i: c.tool("kg_put_node", {"session_id": sid, "level": "project", "id": "x%d" % i,
                                                          "gist": "probe"}), 500))
        print("kg_put_node on that graph: %.0f round trips/s (1 / median), median %.2f ms"
              % (1 / statistics.median(p), statistics.median(p) * 1000))
        k.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
