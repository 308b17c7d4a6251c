"""kg/ops/port_owner.py: who holds a port (contract section 13: a port held by another program is named,
with the --port fix; a kgd serving another root is named by that root). The parsers with tables of
cases, then the real lookups on this machine."""

import os
import socket
import sys

import pytest

from kg.ops import port_owner

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0
   1: 0100007F:223D 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0 100 0 0 10 0
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0 100 0 0 10 0
   3: 0100007F:223E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0 100 0 0 10 0
   4: garbage
"""
TCP6 = ("  sl  local_address                         remote_address                        st tx_queue\n"
        "   0: 00000000000000000000000001000000:223D 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000 0 6161 1\n")


@pytest.mark.parametrize("table, port, inodes", [
    (TCP, 8765, {"4242"}),          # the listener, not the connection to it (state 01)
    (TCP, 8080, {"5151"}),
    (TCP, 8766, set()),             # inode 0: a socket being torn down
    (TCP, 9999, set()),
    (TCP6, 8765, {"6161"}),
    ("", 8765, set()),
])
def test_listening_inodes(table, port, inodes):
    assert port_owner.listening_inodes(table, port) == inodes


@pytest.mark.parametrize("argv, shown", [
    ([], ""),
    (["/usr/bin/python3", "-m", "mcp_memory_service.server"], "python3 -m mcp_memory_service.server"),
    (["node", "server.js", "--port\n8765"], "node server.js --port 8765"),  # one line
    (["/x/y"] + ["a" * 40] * 5, ("y " + " ".join(["a" * 40] * 5))[:97] + "..."),
])
def test_short_command(argv, shown):
    assert port_owner.short_command(argv) == shown
    assert len(shown) <= port_owner.SHOWN


@pytest.mark.parametrize("links, argv, env, root", [
    (["/dev/null", "socket:[1]", "/home/a/.knowledge-graph/kgd.lock"], ["python3", "kgd.py", "--root", "/x"], {},
     "/home/a/.knowledge-graph"),   # the lock it holds wins over what it was told
    ([], ["python3", "kgd.py", "serve", "--root", "/srv/kg"], {"KG_STORAGE_ROOT": "/env"}, "/srv/kg"),
    ([], ["python3", "kgd.pyz", "--root=/srv/kg2"], {}, "/srv/kg2"),
    ([], ["python3", "kgd.py"], {"KG_STORAGE_ROOT": "/env"}, "/env"),
    ([], ["python3", "kgd.py", "--root"], {}, None),
    (["/home/a/kgd.lock.prev"], ["python3", "kgd.py"], {}, None),
])
def test_root_of_kgd(links, argv, env, root):
    assert port_owner.root_of_kgd(links, argv, env) == root


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads /proc (Linux)")
def test_the_owner_of_a_real_port_is_this_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert not port_owner.port_free("127.0.0.1", port)
        found = port_owner.owner(port)
        assert found["pid"] == os.getpid() and os.path.basename(sys.executable) in found["command"]
        assert port_owner.named(port).startswith("pid %d, " % os.getpid())
        line = port_owner.taken_line("127.0.0.1", port)
        assert ("pid %d" % os.getpid()) in line and "--port N" in line and "\n" not in line
    assert port_owner.port_free("127.0.0.1", port)
    assert port_owner.owner(port) is None
    assert "`lsof -i :%d`" % port in port_owner.taken_line("127.0.0.1", port)  # nobody to name: how to find


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads /proc (Linux)")
def test_the_root_of_a_real_daemon(make_daemon, tmp_path):
    d = make_daemon(root=tmp_path / "theirs")
    found = port_owner.owner(d.port)
    assert found["pid"] == d.proc.pid
    assert port_owner.kgd_root(found["pid"]) == str(tmp_path / "theirs")


def test_a_port_left_in_time_wait_by_the_daemon_is_free_and_a_listened_one_is_not():
    """`kgd stop; kgd start`: the daemon closed its connections itself, so the port's last ones wait
    in TIME_WAIT for a minute; the daemon binds with SO_REUSEADDR, and so must the check."""
    port_free = port_owner.port_free
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    assert not port_free("127.0.0.1", port)  # listened on: taken
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    srv.close()
    cli.close()
    assert port_free("127.0.0.1", port)
