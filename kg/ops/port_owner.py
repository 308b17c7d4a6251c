"""Who holds a TCP port here, so that `kgd start`, `kgd status` and `kgd doctor` name the program
(another memory server that also defaults to 8765, say) or the other kgd's storage root instead of
"another program" (contract section 13; section 1: one clear line).

Rules owned here:
- Linux: the listening sockets on the port from /proc/net/tcp and tcp6 (state 0A), the process with
  a descriptor linked to `socket:[INODE]` (only this user's processes can be looked into), and its
  command line. Elsewhere (macOS): `lsof -nP -iTCP:PORT -sTCP:LISTEN -Fpc`, when lsof is installed,
  within 2 s. Nothing found: None, and the caller says "another program" and how to find it.
- A kgd's storage root: the ROOT/kgd.lock it holds open, else its `--root` argument, else
  KG_STORAGE_ROOT in its environment, else None (the caller cannot tell).
- A command is shown short, on one line: its program's base name and its arguments (whitespace
  runs as one space), at most 100 characters.
"""

import os
import re
import socket

LISTEN = "0A"
SHOWN = 100
_SOCKET = re.compile(r"\Asocket:\[(\d+)\]\Z")


def port_free(host, port):
    """True when this process could listen on host:port now."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        # as the daemon binds (kg/serve/http.py): a port whose last connections wait in TIME_WAIT
        # (the daemon closed them, then stopped) is free; one that something listens on is not
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def listening_inodes(table, port):
    """The inodes of the sockets listening on `port` in the text of /proc/net/tcp or tcp6."""
    found = set()
    for line in table.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != LISTEN:
            continue
        _, _, hexport = cols[1].rpartition(":")
        try:
            if int(hexport, 16) == port and cols[9] != "0":
                found.add(cols[9])
        except ValueError:
            continue
    return found


def short_command(argv):
    """argv as a person reads it: the program's base name, then its arguments, bounded."""
    if not argv:
        return ""
    text = " ".join(" ".join([os.path.basename(argv[0])] + list(argv[1:])).split())  # one line, whatever it holds
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def root_of_kgd(lock_links, argv, environ):
    """A kgd's storage root from what is known of its process (see the module's rules)."""
    for target in lock_links:
        if target.endswith("/kgd.lock"):
            return os.path.dirname(target)
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--root="):
            return arg[len("--root="):]
    return environ.get("KG_STORAGE_ROOT") or None


def _read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except (OSError, ValueError):
        return None


def _argv(pid):
    raw = _read("/proc/%d/cmdline" % pid, "rb")
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a] if raw else []


def _fd_links(pid):
    folder = "/proc/%d/fd" % pid
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        try:
            out.append(os.readlink(os.path.join(folder, name)))
        except OSError:
            continue
    return out


def _environ(pid):
    raw = _read("/proc/%d/environ" % pid, "rb") or b""
    env = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def _proc_owner(port):
    inodes = set()
    for name in ("tcp", "tcp6"):
        inodes |= listening_inodes(_read("/proc/net/" + name) or "", port)
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        for target in _fd_links(pid):
            m = _SOCKET.match(target)
            if m and m.group(1) in inodes:
                return {"pid": pid, "argv": _argv(pid)}
    return {"pid": None, "argv": []}  # a process of another user (or of another PID namespace)


def _lsof_owner(port):
    import shutil
    import subprocess

    if shutil.which("lsof") is None:
        return None
    try:
        out = subprocess.run(["lsof", "-nP", "-iTCP:%d" % port, "-sTCP:LISTEN", "-Fpc"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=2).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return None
    pid = command = None
    for line in out.splitlines():
        if line.startswith("p") and line[1:].isdigit() and pid is None:
            pid = int(line[1:])
        elif line.startswith("c") and command is None:
            command = line[1:]
    return {"pid": pid, "argv": [command] if command else []} if pid else None


def owner(port):
    """{"pid" (None: not ours to see), "argv", "command"} of the program listening on port, or None."""
    try:
        found = _proc_owner(port) if os.path.isdir("/proc/net") else _lsof_owner(port)
    except OSError:
        found = None
    if found is None:
        return None
    found["command"] = short_command(found["argv"])
    return found


def kgd_root(pid):
    """The storage root the kgd with this pid serves, or None."""
    if not pid or not os.path.isdir("/proc/%d" % pid):
        return None
    return root_of_kgd(_fd_links(pid), _argv(pid), _environ(pid))


def named(port):
    """"pid 1234, python3 -m mcp_memory_service.server" for the program on port, or None."""
    found = owner(port)
    if found is None or found["pid"] is None:
        return None
    return "pid %d, %s" % (found["pid"], found["command"]) if found["command"] else "pid %d" % found["pid"]


def taken_line(host, port):
    """The one line for a port another program (not kgd) holds, with the fix."""
    who = named(port)
    return ("port %d on %s is taken by another program (%s), not kgd; run kgd on another port: kgd start "
            "--port N (./install.sh --port N moves the service and the clients with it)" % (
                port, host, who if who else "`lsof -i :%d` or `ss -ltnp` names it" % port))
