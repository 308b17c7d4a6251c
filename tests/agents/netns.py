"""Running a command in a private network namespace whose only reachable ports are the test's own.

Rules owned here: `unshare -n` gives the command a network of its own holding only a loopback
interface, so nothing it tries can leave the machine, whatever it ignores of the environment.
The loopback servers the test runs (kgd, the fake model, the refusing proxy) are reached there on
the same 127.0.0.1 ports as outside: inside, a listener per port forwards to a Unix socket (Unix
sockets are not namespaced); outside, `Bridge` forwards each Unix socket to the real port. Used
only where `available()` says the host allows it (root, unshare present); else the caller runs the
command directly and relies on loopback binding and the refusing proxy.

Run as a script (`python netns.py SOCKDIR PORT... -- CMD...`) it is the inside half.
"""

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading


def available():
    """-> (True, None) when `unshare -n` works here, else (False, why not)."""
    if not shutil.which("unshare"):
        return False, "no unshare binary"
    try:
        r = subprocess.run(["unshare", "-n", sys.executable, os.path.abspath(__file__), "--lo-up"],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, "unshare -n failed: %r" % exc
    if r.returncode != 0:
        return False, "unshare -n failed: %s" % r.stderr.decode("utf-8", "replace").strip()[:200]
    return True, None


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _splice(a, b):
    """Copy both ways between two connected sockets until both sides are done, then close them."""
    t = threading.Thread(target=_pump, args=(b, a), daemon=True)
    t.start()
    _pump(a, b)
    t.join()
    a.close()
    b.close()


def _serve(listener, connect):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            peer = connect()
        except OSError:
            conn.close()
            continue
        threading.Thread(target=_splice, args=(conn, peer), daemon=True).start()


class Bridge:
    """Outside half: for each loopback port, a Unix socket in a short temporary folder that
    forwards to 127.0.0.1:port. `command(cmd)` wraps cmd to run inside a fresh namespace."""

    def __init__(self, ports):
        self.ports = sorted({int(p) for p in ports})
        self.dir = tempfile.mkdtemp(prefix="kgns-", dir="/tmp")  # short: Unix socket paths are bounded
        self._listeners = []
        for port in self.ports:
            path = os.path.join(self.dir, "%d.sock" % port)
            lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            lis.bind(path)
            lis.listen(64)
            self._listeners.append(lis)
            threading.Thread(target=_serve, args=(lis, lambda p=port: socket.create_connection(("127.0.0.1", p))),
                             daemon=True).start()

    def command(self, cmd):
        return ["unshare", "-n", sys.executable, os.path.abspath(__file__), self.dir] + \
               [str(p) for p in self.ports] + ["--"] + list(cmd)

    def close(self):
        for lis in self._listeners:
            lis.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _lo_up():
    """Bring the namespace's loopback interface up (SIOCGIFFLAGS / SIOCSIFFLAGS, no `ip` binary needed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))


def _unix_connector(path):
    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return s
    return connect


def _inside(argv):
    _lo_up()
    if argv == ["--lo-up"]:
        return 0
    sep = argv.index("--")
    sockdir, ports, cmd = argv[0], [int(p) for p in argv[1:sep]], argv[sep + 1:]
    for port in ports:
        lis = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lis.bind(("127.0.0.1", port))
        lis.listen(64)
        threading.Thread(target=_serve, args=(lis, _unix_connector(os.path.join(sockdir, "%d.sock" % port))),
                         daemon=True).start()
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(_inside(sys.argv[1:]))
