#!/usr/bin/env python3
"""Live-feed fan-out: how many WebSocket clients one kgd keeps fed while a writer does 1,000
puts, and the delay from a put to its event at each client.

Run from the repository root (needs the `websockets` library, a dev dependency):

    python3 bench/ws_fanout.py                       # N = 10, 50, 100 clients, 1,000 puts
    python3 bench/ws_fanout.py --clients 10,50,100,200 --puts 1000 --procs 2
    python3 bench/ws_fanout.py --clients 0,100 --kgd /tmp/old/kgd.py   # another checkout

A run with 0 clients is the writer's rate with no viewer; the `vs 0` column gives every row's
writer rate as a share of it (the aim: at least 80 % with 100 viewers), and `kgd CPU
ms/put` the daemon's own CPU time (user + system) per put while the writer ran. On a small
machine the viewers' own parsing competes with the writer for the CPU: `--raw-clients` (frames
read by hand) and `--nice` make the viewers cheaper or yield, so the rows show kgd's fan-out cost.

For each N a fresh kgd (`python3 kgd.py --port 0 --root TMP`) is started. N clients connect to
`/ws` (asyncio `websockets`, spread over --procs client processes so the clients' own parsing
does not share a GIL with the writer). One writer in this process then does --puts `kg_put_node`
calls over MCP on one keep-alive http.client connection, as fast as the daemon answers; each
node's gist carries its send time (time.time()). Every client records receive time - send time
for each node_put event. Reported per N: clients that got every event, clients the daemon
dropped (too slow: close 1008), median / p99 / worst delay in ms over all events of all clients,
and the writer's throughput and per-put latency.

The delay is measured from just before the writer sends the request, so it includes the
write itself (journal append + fsync) as well as the fan-out.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")
START_LINE = re.compile(r"kgd (\S+) listening on http://(\S+):(\d+)/ \(root: (.*)\)")
GIST = re.compile(r"^bench (\d+) t=(\d+\.\d+)$")


# ----------------------------------------------------------------------------- kgd

def start_kgd(root, extra_args, kgd=KGD):
    env = dict(os.environ)
    env.pop("KG_TOKEN", None)
    proc = subprocess.Popen([sys.executable, kgd, "--port", "0", "--root", root] + list(extra_args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=os.path.dirname(os.path.abspath(kgd)))
    deadline = time.monotonic() + 15
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode("utf-8", "replace")
        if not line:
            raise SystemExit("kgd exited early: %s" % "".join(lines))
        lines.append(line)
        m = START_LINE.search(line)
        if m:
            # keep draining stderr so the daemon never blocks on a full pipe
            threading.Thread(target=lambda: [None for _ in iter(proc.stderr.readline, b"")], daemon=True).start()
            return proc, int(m.group(3))
    proc.kill()
    raise SystemExit("kgd printed no start line: %s" % "".join(lines))


def stop_kgd(proc):
    proc.terminate()
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


# ----------------------------------------------------------------------------- clients (worker process)

def client_worker(port, n_clients, puts, ready_q, result_q, stop_evt, worker_id, nice=0):
    import asyncio

    if nice:
        os.nice(nice)

    try:
        from websockets.asyncio.client import connect
    except ImportError:  # websockets < 13
        from websockets import connect
    import inspect
    kwargs = {"compression": None, "open_timeout": 30, "ping_interval": None, "max_size": 2 ** 20}
    if "proxy" in inspect.signature(connect).parameters:
        kwargs["proxy"] = None

    url = "ws://127.0.0.1:%d/ws" % port

    async def one(idx, connected_evt, counts):
        delays = []
        close_code = None
        try:
            async with connect(url, **kwargs) as ws:
                hello = json.loads(await ws.recv())
                assert hello.get("type") == "connected", hello
                counts["connected"] += 1
                if counts["connected"] == n_clients:
                    connected_evt.set()
                seen = set()
                while len(seen) < puts:
                    try:
                        msg = await asyncio.wait_for(ws.recv(), 0.25)
                    except asyncio.TimeoutError:
                        if stop_evt.is_set():
                            break
                        continue
                    now = time.time()
                    ev = json.loads(msg)
                    if ev.get("type") != "node_put":
                        continue
                    m = GIST.match(ev["node"]["gist"])
                    if not m:
                        continue
                    seen.add(int(m.group(1)))
                    delays.append(now - float(m.group(2)))
                close_code = 1000
        except Exception as exc:  # closed by the daemon (1008 = too slow) or a failure
            rcvd = getattr(exc, "rcvd", None)
            close_code = getattr(rcvd, "code", None) or type(exc).__name__
        return {"received": len(delays), "delays": delays, "close": close_code}

    async def main():
        connected_evt = asyncio.Event()
        counts = {"connected": 0}
        tasks = [asyncio.ensure_future(one(i, connected_evt, counts)) for i in range(n_clients)]
        try:
            await asyncio.wait_for(connected_evt.wait(), 60)
        except asyncio.TimeoutError:
            pass
        ready_q.put((worker_id, counts["connected"]))
        return await asyncio.gather(*tasks)

    result_q.put((worker_id, asyncio.run(main())))


def raw_client_worker(port, n_clients, puts, ready_q, result_q, stop_evt, worker_id, nice=0):
    """The same viewers without the `websockets` library: a handshake by hand, then one selectors
    loop reading frames. Several times cheaper per message, so on a small machine the viewers
    take less of the CPU that the writer and kgd need (--raw-clients)."""
    import base64
    import selectors
    import socket
    import struct

    if nice:
        os.nice(nice)
    gist = re.compile(rb'"gist":"bench (\d+) t=(\d+\.\d+)"')
    clients = []
    for _ in range(n_clients):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(("GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (port, key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            s.close()
            continue
        s.setblocking(False)
        clients.append({"sock": s, "buf": bytearray(rest), "seen": set(), "delays": [], "close": None,
                        "hello": False})
    ready_q.put((worker_id, len(clients)))
    sel = selectors.DefaultSelector()
    for c in clients:
        sel.register(c["sock"], selectors.EVENT_READ, c)
    left = len(clients)

    def frames(c, now):
        buf = c["buf"]
        pos, n = 0, len(buf)
        while n - pos >= 2:
            op, ln, hl = buf[pos] & 0x0F, buf[pos + 1] & 0x7F, 2
            if ln == 126:
                if n - pos < 4:
                    break
                ln, hl = struct.unpack_from("!H", buf, pos + 2)[0], 4
            elif ln == 127:
                if n - pos < 10:
                    break
                ln, hl = struct.unpack_from("!Q", buf, pos + 2)[0], 10
            if n - pos < hl + ln:
                break
            payload = bytes(buf[pos + hl:pos + hl + ln])
            pos += hl + ln
            if op == 0x8:
                c["close"] = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                return False
            if op != 0x1:
                continue
            if not c["hello"]:
                c["hello"] = b'"connected"' in payload
                continue
            m = gist.search(payload)
            if m:
                c["seen"].add(int(m.group(1)))
                c["delays"].append(now - float(m.group(2)))
        del buf[:pos]
        return len(c["seen"]) < puts

    while left and not stop_evt.is_set():
        for key, _ in sel.select(0.25):
            c = key.data
            try:
                data = c["sock"].recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            now = time.time()
            c["buf"] += data
            if not data or not frames(c, now):
                if c["close"] is None:
                    c["close"] = 1000 if len(c["seen"]) >= puts else "eof"
                sel.unregister(c["sock"])
                left -= 1
    for c in clients:
        try:
            c["sock"].setblocking(True)
            c["sock"].sendall(b"\x88\x82\0\0\0\0\x03\xe8")  # masked close 1000, zero key
        except OSError:
            pass
        c["sock"].close()
    result_q.put((worker_id, [{"received": len(c["delays"]), "delays": c["delays"], "close": c["close"]}
                              for c in clients]))


# ----------------------------------------------------------------------------- writer

def rpc(conn, msg):
    conn.request("POST", "/mcp", body=json.dumps(msg).encode(), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, data[:200]))
    resp = json.loads(data)
    if "error" in resp or resp["result"].get("isError"):
        raise RuntimeError("tool failed: %s" % str(resp)[:300])
    return resp["result"]


def writer(port, puts, cwd):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sid = rpc(conn, {"jsonrpc": "2.0", "id": 0, "method": "tools/call",
                     "params": {"name": "kg_read", "arguments": {"cwd": cwd}}})["structuredContent"]["session_id"]
    lat = []
    t_start = time.monotonic()
    for i in range(puts):
        sent = time.time()
        t0 = time.monotonic()
        rpc(conn, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                   "params": {"name": "kg_put_node", "arguments": {
                       "session_id": sid, "level": "user", "id": "bench-%04d" % i,
                       "gist": "bench %d t=%.6f" % (i, sent)}}})
        lat.append(time.monotonic() - t0)
    elapsed = time.monotonic() - t_start
    conn.close()
    return elapsed, lat


# ----------------------------------------------------------------------------- one run

def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def run(n, puts, procs, kgd_args, grace, kgd=KGD, nice=0, raw=False):
    tmp = tempfile.mkdtemp(prefix="kgd-wsbench-")
    try:
        cwd = os.path.join(tmp, "proj")
        os.makedirs(os.path.join(cwd, ".git"))
        proc, port = start_kgd(os.path.join(tmp, "root"), kgd_args, kgd)
        try:
            ctx = multiprocessing.get_context("spawn")
            ready_q, result_q, stop_evt = ctx.Queue(), ctx.Queue(), ctx.Event()
            procs = min(procs, n)
            shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
            target = raw_client_worker if raw else client_worker
            workers = [ctx.Process(target=target, args=(port, k, puts, ready_q, result_q, stop_evt, i, nice))
                       for i, k in enumerate(shares)]
            for w in workers:
                w.start()
            connected = sum(ready_q.get(timeout=120)[1] for _ in workers)
            cpu0 = cpu_seconds(proc.pid)
            elapsed, lat = writer(port, puts, cwd)
            kgd_cpu = cpu_seconds(proc.pid) - cpu0
            # let the feed drain: stop once every worker is done or `grace` seconds pass
            results = []
            deadline = time.monotonic() + grace
            while len(results) < len(workers):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stop_evt.set()
                    remaining = 30
                try:
                    results.append(result_q.get(timeout=min(remaining, 1.0)))
                except Exception:
                    continue
            stop_evt.set()
            for w in workers:
                w.join(30)
        finally:
            code = stop_kgd(proc)
        clients = [c for _, rs in results for c in rs]
        delays = sorted(d for c in clients for d in c["delays"])
        full = sum(1 for c in clients if c["received"] >= puts)
        dropped = sum(1 for c in clients if c["close"] == 1008)
        lat.sort()
        return {
            "clients": n, "connected": connected, "all_events": full, "dropped_1008": dropped,
            "events": len(delays), "delay_median_ms": statistics.median(delays) * 1000 if delays else float("nan"),
            "delay_p99_ms": pct(delays, 99) * 1000, "delay_max_ms": delays[-1] * 1000 if delays else float("nan"),
            "writer_s": elapsed, "puts_per_s": puts / elapsed,
            "put_median_ms": statistics.median(lat) * 1000, "put_p99_ms": pct(lat, 99) * 1000,
            "kgd_cpu_ms_per_put": kgd_cpu / puts * 1000,
            "kgd_exit": code,
            "closes": sorted({str(c["close"]) for c in clients}),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="0,10,50,100",
                    help="comma-separated client counts (default 0,10,50,100; 0 = the writer alone)")
    ap.add_argument("--puts", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=2, help="client processes (default 2)")
    ap.add_argument("--grace", type=float, default=20.0, help="seconds to wait for stragglers after the last put")
    ap.add_argument("--kgd-arg", action="append", default=[],
                    help="extra kgd flag (repeatable), e.g. --kgd-arg=--max-tokens=100000")
    ap.add_argument("--kgd", default=KGD, help="the kgd.py to start (default: this checkout's)")
    ap.add_argument("--raw-clients", action="store_true",
                    help="viewers read frames by hand instead of with the websockets library (cheaper per message)")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the client processes (e.g. 10: the viewers yield the CPU to kgd "
                         "and the writer, so the figure is kgd's own fan-out cost on a small machine)")
    args = ap.parse_args(argv)
    ns = [int(x) for x in args.clients.split(",") if x.strip()]
    print("python %s, %d CPUs, %d puts per run, %s clients in %d process(es) at nice %d, %s" % (
        sys.version.split()[0], os.cpu_count() or 0, args.puts, "raw" if args.raw_clients else "websockets",
        args.procs, args.nice, args.kgd))
    hdr = ("clients", "all events", "dropped", "delay median ms", "p99 ms", "worst ms", "puts/s", "vs 0",
           "put median ms", "put p99 ms", "kgd CPU ms/put")
    print(" | ".join(hdr))
    print(" | ".join("---" for _ in hdr))
    out = []
    alone = None
    for n in ns:
        r = run(n, args.puts, args.procs, args.kgd_arg, args.grace, args.kgd, args.nice, args.raw_clients)
        out.append(r)
        if n == 0:
            alone = r["puts_per_s"]
        share = "%.0f %%" % (100.0 * r["puts_per_s"] / alone) if alone else "-"
        print("%d | %d/%d | %d | %.1f | %.1f | %.1f | %.0f | %s | %.2f | %.2f | %.2f" % (
            n, r["all_events"], r["connected"], r["dropped_1008"], r["delay_median_ms"], r["delay_p99_ms"],
            r["delay_max_ms"], r["puts_per_s"], share, r["put_median_ms"], r["put_p99_ms"],
            r["kgd_cpu_ms_per_put"]), flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
