"""Crash safety (contract section 4): acknowledged writes survive a SIGKILL at any moment, and a crash
anywhere inside the storage layer's write path leaves files that load to exactly the
acknowledged state.

(a) A real kgd process under 4 concurrent writers (each its own session and keep-alive
    connection) is killed with SIGKILL at seeded random moments, several rounds on one root.
    After every kill: every file parses (journals up to a possibly torn last line), no node
    that was never sent exists anywhere, and after a restart the graphs hold exactly the
    acknowledged writes; the one write per writer that was in flight may or may not be there,
    but only whole.
(b) In-process fault injection: the os calls of kg/disk/ are wrapped so that, at the
    k-th call of a phase (a fold, a close, a start-up replay, a write), the storage root is
    copied as it is at that instant (the image a power cut would leave) and a BaseException
    unwinds the writer, as a dying process would. Every k is tried. A new Store opened on the
    image must hold exactly the acknowledged state, whatever temp files lie around.
"""

import json
import logging
import os
import random
import shutil
import signal
import threading
import time
import urllib.parse

import pytest

from kg.disk import files as storage
from kg.memory.store import Settings, Store
from kg.travel import team

from helpers import Gone, ToolClient

SEED = int(os.environ.get("KG_CRASH_SEED", "20240607"))
BIG = 10 ** 6


# ================================================================ helpers shared by both parts

def parse_json_file(path):
    with open(path, "rb") as f:
        obj = json.loads(f.read().decode("utf-8"))
    assert isinstance(obj, dict), "%s: top level is not an object" % path
    return obj


def journal_records(path):
    """Every complete line must parse; only bytes after the last newline may be torn."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        rec = json.loads(line.decode("utf-8"))      # raises: a complete journal line that does not parse
        assert isinstance(rec, dict), "%s line %d is not an object" % (path, i + 1)
        out.append(rec)
    return out, torn


def scan_root(root):
    """Check every file under root; -> (graph objects by path, journal records by path, temp files)."""
    graphs, journals, temps, problems = {}, {}, [], []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name == "kgd.lock":
                continue
            if ".corrupt-" in name:
                problems.append("a crash left a file that did not parse (quarantined): %s" % path)
            elif name.startswith(".tmp-"):
                temps.append(path)
            elif name.endswith(".journal"):
                try:
                    journals[path] = journal_records(path)[0]
                except (ValueError, UnicodeDecodeError, AssertionError) as exc:
                    problems.append("%s: %s" % (path, exc))
            elif name.endswith(".json") or name.endswith(".json.prev"):
                try:
                    graphs[path] = parse_json_file(path)
                except (ValueError, UnicodeDecodeError, AssertionError) as exc:
                    problems.append("%s does not parse: %s" % (path, exc))
            else:
                problems.append("unexpected file %s" % path)
    assert not problems, problems
    return graphs, journals, temps


# ================================================================ (a) SIGKILL under 4 writers

ROUNDS = 5
WRITERS = 4
FILE_ENDS = ["src/app.py", "src/db.py", "docs/notes.md", "tests/test_x.py"]
RELS = ["uses", "explains", "depends-on"]


class Model:
    """What one writer has been told is stored. Only this writer touches ids starting w<k>-."""

    def __init__(self, k):
        self.k = k
        self.prefix = "w%d-" % k
        self.nodes = {}   # id -> (level, gist, notes, touches)
        self.edges = {}   # (level, key) -> (from, to, rel, notes)
        self.sent = set()  # every node id ever sent in a put
        self.pending = None  # (tool, args, apply) of the request in flight when the daemon died
        self.counter = 0
        self.acked = {"kg_put_node": 0, "kg_put_edge": 0, "kg_delete_node": 0, "kg_delete_edge": 0}

    def state(self):
        return dict(self.nodes), dict(self.edges)

    def mine(self, actual_nodes, actual_edges):
        nodes = {i: v for i, v in actual_nodes.items() if i.startswith(self.prefix)}
        edges = {k: v for k, v in actual_edges.items() if v[0].startswith(self.prefix)}
        return nodes, edges


def apply_op(state, tool, args):
    """The state after one operation (node ids are this writer's)."""
    nodes, edges = dict(state[0]), dict(state[1])
    level = args.get("level")
    if tool == "kg_put_node":
        nodes[args["id"]] = (level, args["gist"], tuple(args["notes"]), tuple(args["touches"]))
    elif tool == "kg_put_edge":
        key = "%s->%s:%s" % (args["from"], args["to"], args["rel"])
        edges[(level, key)] = (args["from"], args["to"], args["rel"], tuple(args["notes"]))
    elif tool == "kg_delete_node":
        del nodes[args["id"]]
        for k in [k for k, e in edges.items() if k[0] == level and args["id"] in (e[0], e[1])]:
            del edges[k]
    elif tool == "kg_delete_edge":
        del edges[(level, "%s->%s:%s" % (args["from"], args["to"], args["rel"]))]
    return nodes, edges


def next_op(m, rnd, round_no, sid):
    m.counter += 1
    live = sorted(m.nodes)
    r = rnd.random()
    text = "round %d op %d of writer %d " % (round_no, m.counter, m.k)
    if not live or r < 0.35:
        nid = "%sr%d-%d" % (m.prefix, round_no, m.counter)
        args = {"session_id": sid, "level": rnd.choice(["user", "project"]), "id": nid,
                "gist": text + "é✓" * rnd.randrange(3), "notes": ["n%d" % i for i in range(rnd.randrange(3))],
                "touches": rnd.sample(FILE_ENDS, rnd.randrange(2))}
        return "kg_put_node", args
    if r < 0.55:
        nid = rnd.choice(live)
        args = {"session_id": sid, "level": m.nodes[nid][0], "id": nid, "gist": "updated " + text,
                "notes": ["x" * rnd.randrange(1, 300)], "touches": rnd.sample(FILE_ENDS, rnd.randrange(3))}
        return "kg_put_node", args
    if r < 0.80:
        frm = rnd.choice(live)
        level = m.nodes[frm][0]
        same = [i for i in live if m.nodes[i][0] == level and i != frm]
        to = rnd.choice(same) if same and rnd.random() < 0.7 else rnd.choice(FILE_ENDS)
        args = {"session_id": sid, "level": level, "from": frm, "to": to, "rel": rnd.choice(RELS),
                "notes": [text]}
        return "kg_put_edge", args
    if r < 0.92 or not m.edges:
        nid = rnd.choice(live)
        return "kg_delete_node", {"session_id": sid, "id": nid, "level": m.nodes[nid][0]}
    level, key = rnd.choice(sorted(m.edges))
    e = m.edges[(level, key)]
    return "kg_delete_edge", {"session_id": sid, "from": e[0], "to": e[1], "rel": e[2], "level": level}


def writer(port, cwd, m, rnd, round_no, pause, stop, problems):
    client = ToolClient(port, timeout=20)
    try:
        try:
            sid = client.call("kg_read", {"cwd": cwd})["structuredContent"]["session_id"]
        except Gone:
            return
        while not stop.is_set():
            pause.wait()
            tool, args = next_op(m, rnd, round_no, sid)
            if tool == "kg_put_node":
                m.sent.add(args["id"])
            m.pending = (tool, args)
            try:
                result = client.call(tool, args)
            except Gone:
                return                          # the daemon died with this request in flight
            if result.get("isError"):
                problems.append("writer %d: %s %r -> %s" % (m.k, tool, args, result["content"][0]["text"]))
                m.pending = None
                return
            m.nodes, m.edges = apply_op(m.state(), tool, args)
            m.pending = None
            m.acked[tool] += 1
    except Exception as exc:  # pragma: no cover - reported by the test
        problems.append("writer %d crashed: %r" % (m.k, exc))
    finally:
        client.close()


def actual_state(d, project):
    status, body = d.json("GET", "/api/graph?project_path=%s" % urllib.parse.quote(project))
    assert status == 200, body
    nodes, edges = {}, {}
    for level in ("user", "project"):
        for n in body[level]["nodes"]:
            assert n["state"] == "active", n
            nodes[n["id"]] = (level, n["gist"], tuple(n["notes"]), tuple(n["touches"]))
        for e in body[level]["edges"]:
            key = "%s->%s:%s" % (e["from"], e["to"], e["rel"])
            edges[(level, key)] = (e["from"], e["to"], e["rel"], tuple(e["notes"]))
    return nodes, edges


def ids_in_files(graphs, journals):
    ids = set()
    for obj in graphs.values():
        if isinstance(obj.get("nodes"), dict):
            ids.update(obj["nodes"])
    for recs in journals.values():
        for rec in recs:
            if rec.get("op") == "node":
                ids.add(rec["node"]["id"])
    return ids


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_under_four_writers_keeps_every_acknowledged_write(make_daemon, project):
    rnd = random.Random(SEED)
    cwd = os.path.realpath(str(project))
    models = [Model(k) for k in range(WRITERS)]
    d = make_daemon(args=["--max-tokens", str(BIG)], start=False)
    root = d.root
    report = {"rounds": 0, "acked": 0, "in_flight": 0, "in_flight_landed": 0, "temps": 0, "folded_rounds": 0}
    t_begin = time.monotonic()
    for round_no in range(1, ROUNDS + 1):
        d.start()
        problems = []
        stop, pause = threading.Event(), threading.Event()
        pause.set()
        threads = [threading.Thread(target=writer, daemon=True,
                                    args=(d.port, cwd, m, random.Random(rnd.random()), round_no, pause, stop, problems))
                   for m in models]
        for t in threads:
            t.start()
        before = sum(sum(m.acked.values()) for m in models)
        if round_no % 2 == 0:
            # Let writes pause long enough for the journals to be folded into the graph files,
            # then resume and kill somewhere around the fold or just after writing resumed.
            time.sleep(rnd.uniform(0.3, 0.7))
            pause.clear()
            time.sleep(rnd.uniform(0.9, 1.8))
            pause.set()
            time.sleep(rnd.uniform(0.0, 0.6))
            report["folded_rounds"] += 1
        else:
            time.sleep(rnd.uniform(0.4, 2.0))
        assert d.kill() == -signal.SIGKILL
        stop.set()
        pause.set()
        for t in threads:
            t.join(20)
            assert not t.is_alive(), "a writer hung after the daemon died"
        assert not problems, problems
        acked_this_round = sum(sum(m.acked.values()) for m in models) - before
        assert acked_this_round > 20, "too few writes acknowledged before the kill: %d" % acked_this_round

        # Files as the kill left them: all parse; no node that was never sent.
        graphs, journals, temps = scan_root(root)
        report["temps"] = max(report["temps"], len(temps))
        sent = set().union(*(m.sent for m in models))
        assert ids_in_files(graphs, journals) <= sent, "a file holds node ids nobody sent"

        # Restart on the same root: exactly the acknowledged writes (+ maybe each in-flight one).
        d.start()
        nodes, edges = actual_state(d, cwd)
        assert set(nodes) <= sent
        for m in models:
            got = m.mine(nodes, edges)
            want = m.state()
            if m.pending is not None:
                report["in_flight"] += 1
                tool, args = m.pending
                after = apply_op(want, tool, args)
                assert got in (want, after), (
                    "round %d writer %d: after the restart its graph is neither the acknowledged state nor that "
                    "plus the write in flight (%s %r)\nmissing/extra nodes: %r\nmissing/extra edges: %r"
                    % (round_no, m.k, tool, args, _diff(want[0], got[0]), _diff(want[1], got[1])))
                if got == after and got != want:
                    report["in_flight_landed"] += 1
                m.nodes, m.edges = got
                m.pending = None
            else:
                assert got == want, ("round %d writer %d lost or changed acknowledged writes:\nnodes %r\nedges %r"
                                     % (round_no, m.k, _diff(want[0], got[0]), _diff(want[1], got[1])))
        # Every node and edge belongs to some writer's model: nothing else changed.
        assert set(nodes) == set().union(*(set(m.nodes) for m in models))
        assert set(edges) == set().union(*(set(m.edges) for m in models))
        d.kill()
        report["rounds"] += 1
    report["acked"] = sum(sum(m.acked.values()) for m in models)
    # A last clean start and stop: folded files hold exactly the final state.
    d.start()
    assert d.stop() == 0
    graphs, journals, temps = scan_root(root)
    assert all(not recs for recs in journals.values()), "journals not folded at a clean stop"
    user = graphs[os.path.join(root, "user.json")]
    proj = [g for p, g in graphs.items() if p.endswith(os.sep + "graph.json")]
    assert len(proj) == 1
    want_nodes = {}
    for m in models:
        want_nodes.update(m.nodes)
    on_disk = {nid: ("user", n["gist"], tuple(n["notes"]), tuple(n["touches"])) for nid, n in user["nodes"].items()}
    on_disk.update({nid: ("project", n["gist"], tuple(n["notes"]), tuple(n["touches"]))
                    for nid, n in proj[0]["nodes"].items()})
    assert on_disk == want_nodes
    want_edges = {}
    for m in models:
        want_edges.update(m.edges)
    edges_on_disk = {(level, key): (e["from"], e["to"], e["rel"], tuple(e["notes"]))
                     for level, g in (("user", user), ("project", proj[0])) for key, e in g["edges"].items()}
    assert edges_on_disk == want_edges
    assert "Traceback" not in "".join(d.stderr_lines), "".join(d.stderr_lines)[-3000:]
    elapsed = time.monotonic() - t_begin
    print("crash rounds: %(rounds)d, acknowledged writes checked: %(acked)d, in flight at a kill: %(in_flight)d "
          "(landed: %(in_flight_landed)d), rounds killed around a fold: %(folded_rounds)d, "
          "max stray temp files: %(temps)d" % report, "elapsed %.1fs" % elapsed)
    assert report["acked"] >= 200


def _diff(want, got):
    return ({k: want[k] for k in want if got.get(k) != want[k]}, {k: got[k] for k in got if want.get(k) != got[k]})


# ================================================================ (b) crash inside the storage layer

class Crash(BaseException):
    """The process dies here (not an OSError: nothing in kgd may catch it and go on)."""


T0 = 1_700_000_000.0


class Injector:
    """Wraps the os calls kg/disk/ writes with. While armed, call number `at` (counting
    from 1) copies the storage root to a crash image and raises Crash. A write is torn: half
    its bytes reach the file before the image is taken."""

    NAMES = ("open", "write", "fsync", "fdatasync", "ftruncate", "link", "replace", "close", "unlink", "mkdir")

    def __init__(self, monkeypatch, root, image):
        self.root, self.image = root, image
        self.armed = False
        self.at = None
        self.count = 0
        self.trace = []
        self.real = {}
        for name in self.NAMES:
            self.real[name] = getattr(os, name)
            monkeypatch.setattr(storage.os, name, self._wrap(name))

    def _wrap(self, name):
        real = self.real[name]

        def fake(*args, **kwargs):
            if name in ("fsync", "fdatasync") and not self.armed:
                return None       # durability comes from the crash images here; skip the wait
            if not self.armed:
                return real(*args, **kwargs)
            self.count += 1
            self.trace.append((name, self._what(args)))
            if self.count == self.at:
                self.armed = False
                if name == "write" and len(args[1]) > 1:
                    real(args[0], bytes(args[1][:len(args[1]) // 2]))
                shutil.copytree(self.root, self.image, symlinks=True)
                raise Crash("crash at %s #%d" % (name, self.count))
            if name == "fsync":
                return None
            return real(*args, **kwargs)
        return fake

    @staticmethod
    def _what(args):
        a = args[0] if args else None
        if isinstance(a, int):
            try:
                return os.path.basename(os.readlink("/proc/self/fd/%d" % a))
            except OSError:
                return "fd"
        return os.path.basename(str(a))


def graph_state(g):
    return json.loads(json.dumps({"nodes": g.nodes, "edges": g.edges, "progress": g.meta.get("progress")}))


def store_state(store, projects):
    out = {"user": graph_state(store.user)}
    for p in projects:
        out[p] = graph_state(store.project_graph(p))
    return out


def die(store):
    """The process is gone: the kernel closes its fds under the root, and the flock goes with them."""
    for j in store.journals.values():
        try:
            j.close()
        except OSError:
            pass
    store.root_lock.release()
    root = os.path.realpath(store.layout.root) + os.sep
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith(root):
            try:
                os.close(int(fd))
            except OSError:
                pass


class Workload:
    """A deterministic set of acknowledged writes over the user graph and two project graphs."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.projects = []
        for name in ("alpha", "beta"):
            p = tmp_path / "work" / name
            (p / ".git").mkdir(parents=True, exist_ok=True)
            self.projects.append(os.path.realpath(str(p)))
        self.t = [T0]

    def clock(self):
        self.t[0] += 1.0
        return self.t[0]

    def open(self, root):
        return team.install(Store(root, Settings(max_tokens=BIG), clock=self.clock)).open()

    def part1(self, store):
        a = store.start_session(self.projects[0])
        b = store.start_session(self.projects[1])
        for i in range(8):
            store.put_node(a, "user", "u%d" % i, "user gist %d ✓" % i, ["note %d" % i], ["src/u%d.py" % i])
            store.put_node(a, "project", "a%d" % i, "alpha gist %d" % i, ["why %d" % i] * (i % 3))
            store.put_node(b, "project", "b%d" % i, "beta gist %d" % i)
        for i in range(7):
            store.put_edge(a, "project", "a%d" % i, "a%d" % (i + 1), "next", ["n%d" % i])
            store.put_edge(b, "project", "b%d" % i, "src/b%d.py" % i, "in")
            store.put_edge(a, "user", "u%d" % i, "u%d" % (i + 1), "rel")
        store.progress(a, "task", {"step": 1}, "user", has_state=True)
        return a, b

    def part2(self, store, a, b):
        store.delete_node(a, "a3", "project")               # and its two edges
        store.delete_edge(a, "u0", "u1", "rel", "user")
        store.put_node(a, "user", "u2", "user gist 2 rewritten", ["replaced"])
        store.put_node(b, "project", "b9", "beta late", touches=["src/late.py"])
        store.put_edge(b, "project", "b9", "b0", "after", ["late"])
        store.progress(a, "task", {"step": 2}, "project", has_state=True)
        store.progress(a, "task", None, "user", has_state=True)
        store.delete_node(a, "u7")


def _check_image(wl, image, expected, alternatives=(), caplog=None, label=""):
    """Open a Store on a crash image: it must hold `expected` (or one of `alternatives`)."""
    graphs, journals, temps = scan_root(image)          # every graph file parses
    if caplog is not None:
        caplog.clear()
    s = wl.open(image)
    try:
        got = store_state(s, wl.projects)
    finally:
        s.close()
    assert got == expected or got in alternatives, "%s: the crash image does not load to the acknowledged state" % label
    assert not [f for f in _walk(image) if ".corrupt-" in f], "%s: loading the image quarantined a file" % label
    if caplog is not None:
        bad = [r.getMessage() for r in caplog.records if "does not parse" in r.getMessage()]
        assert not bad, bad
    # Once more after that clean close (the recovered state was folded correctly).
    s = wl.open(image)
    try:
        assert store_state(s, wl.projects) == got, "%s: a second open differs from the first" % label
    finally:
        s.close()
    return got, graphs, journals, temps


def _walk(root):
    for folder, _, files in os.walk(root):
        for f in files:
            yield os.path.join(folder, f)


def _prev_heals(wl, image, expected, label):
    """If at this instant graph.json.prev is the same bytes as graph.json and a journal is
    beside it, a graph.json lost at this point is rebuilt from .prev + journal exactly."""
    checked = 0
    for path in list(_walk(image)):
        if not (path.endswith(os.sep + "graph.json") or path.endswith(os.sep + "user.json")):
            continue
        journal = path[:-len(".json")] + ".journal"
        prev = path + ".prev"
        if not (os.path.exists(prev) and os.path.exists(journal) and os.path.getsize(journal)):
            continue
        with open(path, "rb") as f, open(prev, "rb") as g:
            if f.read() != g.read():
                continue
        copy = image + "-heal"
        if os.path.exists(copy):
            shutil.rmtree(copy)
        shutil.copytree(image, copy)
        with open(path.replace(image, copy, 1), "wb") as f:
            f.write(b'{"nodes": {"torn')
        s = wl.open(copy)
        try:
            assert store_state(s, wl.projects) == expected, "%s: .prev + journal did not rebuild %s" % (label, path)
        finally:
            s.close()
        assert [f for f in _walk(copy) if ".corrupt-" in f]
        shutil.rmtree(copy)
        checked += 1
    return checked


def _run_phase(tmp_path, monkeypatch, caplog, phase, first_fold):
    """Enumerate every crash point of one phase; -> (crash points checked, .prev rebuilds checked,
    images holding stray temp files, the os calls of each run)."""
    caplog.set_level(logging.WARNING)
    k = 0
    checked = heals = temps_seen = 0
    traces = []
    while True:
        k += 1
        base = tmp_path / ("%s-%d" % (phase, k))
        root, image = str(base / "root"), str(base / "image")
        wl = Workload(base)
        inj = Injector(monkeypatch, root, image)
        store = wl.open(root)
        a, b = wl.part1(store)
        if not first_fold:
            store.fold_idle(force=True)
            wl.part2(store, a, b)
        acked = store_state(store, wl.projects)
        inj.at, inj.count, inj.trace = k, 0, []
        crashed = False
        try:
            if phase == "fold":
                inj.armed = True
                store.fold_idle(force=True)
            elif phase == "close":
                inj.armed = True
                store.close()
            elif phase == "startup":
                die(store)
                store = team.install(Store(root, Settings(max_tokens=BIG), clock=wl.clock))
                inj.armed = True
                store.open()
            inj.armed = False
        except Crash:
            crashed = True
        finally:
            inj.armed = False
        traces.append(list(inj.trace))
        if not crashed:
            if phase != "close":
                die(store)
            monkeypatch.undo()
            break
        die(store)
        monkeypatch.undo()
        label = "%s%s crash at call #%d (%s)" % (phase, " (first fold)" if first_fold else "", k,
                                                 ", ".join("%s %s" % t for t in inj.trace))
        heals += _prev_heals(wl, image, acked, label)          # on a copy of the untouched image
        got, graphs, journals, temps = _check_image(wl, image, acked, (), caplog, label)
        temps_seen += bool(temps)
        # The store that "died" can also be reopened in place (its unwinding cleaned up).
        s = wl.open(root)
        try:
            assert store_state(s, wl.projects) == acked, label + " (original root)"
        finally:
            s.close()
        checked += 1
        assert k < 200, "runaway enumeration"
    return checked, heals, temps_seen, traces


@pytest.mark.parametrize("phase, first_fold", [
    ("fold", True),       # the very first fold: no graph file yet
    ("fold", False),      # a later fold: graph file, .prev rotation, journal reset
    ("close", False),     # shutdown: folds every graph, then sessions.json
    ("startup", False),   # the replay-and-fold at start dies; the next start must still be exact
])
def test_crash_at_every_point_of_the_write_path(tmp_path, monkeypatch, caplog, phase, first_fold):
    checked, heals, temps_seen, traces = _run_phase(tmp_path, monkeypatch, caplog, phase, first_fold)
    calls = traces[-1]
    assert checked >= 10, (checked, calls)
    # Sanity: the enumeration really walked over the rename that publishes a graph file.
    assert any(name == "replace" for name, _ in calls), calls
    print("%s%s: %d crash points checked, %d .prev+journal rebuilds, %d images with stray temp files"
          % (phase, " (first fold)" if first_fold else "", checked, heals, temps_seen))


def test_crash_during_an_unacknowledged_write(tmp_path, monkeypatch, caplog):
    """A crash in the middle of a journal append or before its fsync: after a restart the write is
    either wholly there or wholly absent, and everything acknowledged before it is there."""
    caplog.set_level(logging.WARNING)
    k = 0
    outcomes = {"absent": 0, "present": 0}
    while True:
        k += 1
        base = tmp_path / ("w-%d" % k)
        root, image = str(base / "root"), str(base / "image")
        wl = Workload(base)
        inj = Injector(monkeypatch, root, image)
        store = wl.open(root)
        a, b = wl.part1(store)
        store.fold_idle(force=True)
        wl.part2(store, a, b)
        acked = store_state(store, wl.projects)
        inj.at, inj.count, inj.trace = k, 0, []
        inj.armed = True
        try:
            store.put_node(store.session(a.id), "user", "late", "in flight", ["maybe"])
            done = True
        except Crash:
            done = False
        inj.armed = False
        die(store)
        monkeypatch.undo()
        if done:
            break
        scan_root(image)
        s = wl.open(image)
        try:
            got = store_state(s, wl.projects)
        finally:
            s.close()
        late = got["user"]["nodes"].pop("late", None)
        assert got == acked, "crash at call #%d of an unacknowledged put changed acknowledged state" % k
        if late is None:
            outcomes["absent"] += 1
        else:
            outcomes["present"] += 1
            assert (late["gist"], late["notes"]) == ("in flight", ["maybe"])
        assert k < 50
    assert outcomes["absent"] >= 1, outcomes
    print("unacknowledged-write crash points:", outcomes)


def test_crash_between_temp_write_and_rename_then_restart_in_place(tmp_path, monkeypatch, caplog):
    """The case named in the issue, in place: the fold writes and fsyncs the temp file, the process
    dies before os.replace publishes it (no cleanup runs), a new Store starts on the same root."""
    caplog.set_level(logging.WARNING)
    wl = Workload(tmp_path)
    root = str(tmp_path / "root")
    store = wl.open(root)
    a, b = wl.part1(store)
    store.fold_idle(force=True)
    files = [os.path.join(root, "user.json")] + [os.path.join(root, "projects", d, "graph.json")
                                                 for d in os.listdir(os.path.join(root, "projects"))]
    old = {f: open(f, "rb").read() for f in files}
    wl.part2(store, a, b)
    acked = store_state(store, wl.projects)
    real_replace, real_unlink = os.replace, os.unlink

    def replace(src, dst):
        if os.path.basename(str(src)).startswith(".tmp-") and not str(src).endswith(".prev"):
            raise Crash("killed between the temp file and the rename")
        return real_replace(src, dst)

    def unlink(path):                      # a dead process cleans nothing up
        if os.path.basename(str(path)).startswith(".tmp-"):
            return None
        return real_unlink(path)
    monkeypatch.setattr(storage.os, "replace", replace)
    monkeypatch.setattr(storage.os, "unlink", unlink)
    with pytest.raises(Crash):
        store.fold_idle(force=True)
    monkeypatch.undo()
    die(store)
    temps = [f for f in _walk(root) if os.path.basename(f).startswith(".tmp-") and f.endswith(".part")]
    assert len(temps) == 1, "the simulated crash should leave the one temp file behind"
    crashed = os.path.join(os.path.dirname(temps[0]), "graph.json")
    if not os.path.exists(crashed):
        crashed = os.path.join(root, "user.json")
    # Every published file is still the old one, whole; the crashed graph's .prev is a good copy.
    for f, data in old.items():
        assert open(f, "rb").read() == data, f
    assert open(crashed + ".prev", "rb").read() == old[crashed]
    assert parse_json_file(temps[0])     # the temp file was whole (fsynced) when the process died
    # The temp file holds the new state, but loading must not need or misread it.
    caplog.clear()
    s = wl.open(root)
    assert store_state(s, wl.projects) == acked
    assert not [r for r in caplog.records if "does not parse" in r.getMessage()]
    s.put_node(s.session(a.id), "user", "after-crash", "written after the restart")
    s.close()
    s = wl.open(root)
    state = store_state(s, wl.projects)
    assert "after-crash" in state["user"]["nodes"]
    del state["user"]["nodes"]["after-crash"]
    assert state == acked
    s.close()
    assert not [f for f in _walk(root) if ".corrupt-" in f]
