#!/usr/bin/env python3
"""kg_read and kg_put_node on a 1,000-node project graph whose nodes are all still in their
grace period (default settings: nothing can be archived, so kg_read returns all of them).

    python3 bench/read_1000.py
"""

import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Client, Kgd, bulk_nodes, timed  # noqa: E402


def main():
    tmp = tempfile.mkdtemp(prefix="kgd-read1000-")
    try:
        os.makedirs(os.path.join(tmp, "p", ".git"))
        os.environ.pop("KG_GRACE_PERIOD_DAYS", None)
        k = Kgd(os.path.join(tmp, "root"))
        c = Client(k.port)
        sid = c.tool("kg_read", {"cwd": os.path.join(tmp, "p")})["structuredContent"]["session_id"]
        bulk_nodes(c, sid, "project", 1000, "n")
        d = timed(lambda i: c.tool("kg_read", {"session_id": sid}), 50)
        r = c.tool("kg_read", {"session_id": sid})
        print("kg_read, 1,000 nodes in grace: median %.2f ms, p90 %.2f ms; text %d characters; "
              "structuredContent %d nodes" % (statistics.median(d) * 1000, sorted(d)[44] * 1000,
                                               len(r["content"][0]["text"]),
                                               len(r["structuredContent"]["project"]["nodes"])))
        p = timed(lambda i: c.tool("kg_put_node", {"session_id": sid, "level": "project", "id": "x%d" % i,
                                                   "gist": "probe"}), 500)
        print("kg_put_node on that graph: %.0f round trips/s (1 / median), median %.2f ms"
              % (1 / statistics.median(p), statistics.median(p) * 1000))
        k.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
