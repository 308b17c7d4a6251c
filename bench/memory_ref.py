"""The reference row of bench/memory_eval.py: the reference plugin's daemon (mironmax/claudecode-plugins,
knowledge-graph/) run with its own hook scripts over HTTP on the same world and trace as kgd's rows.

Never a dependency of kgd: it runs only when `--reference DIR --reference-python PY` point to a
checkout and a throwaway venv (bench/README.md says how to make them), and is skipped with one line
otherwise.

Rules owned here:
- The daemon's wall clock is the simulation's: it runs under libfaketime's multithreaded library
  with an offset read from a file this module rewrites before every request (FAKETIME_NO_CACHE=1;
  monotonic clocks stay real so its event loop and threads keep working). Simulated time t maps to
  REF_EPOCH + t.
- Its hooks are its own scripts (hooks/kg-autostart.sh, kg-remind.sh, kg-tool-event.sh) fed the
  hook payloads Claude Code sends; what the agent receives is their additionalContext.
- The agent's calls (read by id, search, put node, put edge) go to its MCP endpoint (streamable
  HTTP, stateless JSON), as its tools would be called.
- The daemon's periodic maintenance thread runs on wall-clock seconds, which mean nothing here: its
  interval is set beyond the run, so its compaction runs where it also runs in use, after each write.
- Existence and counts are read from its graph files (write-through), which does not touch its state.
"""

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REF_EPOCH = 1767225600  # 2026-01-01T00:00:00Z: simulated time 0 (the world starts at -1 day)
FAKETIME_LIBS = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1"]
PIN = "963c6e6dc040f0457ee60479a2d1860a234223c7"


def faketime_lib():
    return next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)


def missing(checkout, python):
    """Why the reference cannot run (one line), or None."""
    if not checkout:
        return "reference skipped: no --reference checkout given"
    server = os.path.join(checkout, "server", "mcp_streamable_server.py")
    if not os.path.exists(server):
        return (
            "reference skipped: %s is not a knowledge-graph/ checkout (no server/mcp_streamable_server.py)" % checkout
        )
    if not python or not os.access(python, os.X_OK):
        return "reference skipped: --reference-python %r is not an executable" % python
    if faketime_lib() is None:
        return "reference skipped: libfaketimeMT.so.1 not found (apt-get install -y faketime)"
    for tool in ("bash", "curl", "python3"):
        if shutil.which(tool) is None:
            return "reference skipped: its hooks need %s on PATH" % tool
    r = subprocess.run([python, "-c", "import mcp.server, uvicorn, fastapi"], capture_output=True)
    if r.returncode != 0:
        return "reference skipped: %s cannot import mcp, uvicorn, fastapi (see bench/README.md)" % python
    return None


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ReferenceMemory:
    """The same interface as memory_eval.Memory, over the reference daemon and its hooks."""

    name = "reference"
    checkout = None
    python = None

    def __init__(self, root, project, max_tokens, args, clock):
        self.clock = clock
        self.project = project
        self.base = os.path.dirname(project)  # HOME for the daemon: it only accepts projects under HOME
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.read_chars = []
        self.errors = 0
        self.sid = None
        self.claude_id = None
        self._offset = None
        self.ts_file = os.path.join(self.base, "faketime")
        self._set_clock()
        self.port = _free_port()
        env = dict(os.environ, HOME=self.base, KG_STORAGE_ROOT=root, KG_HTTP_HOST="127.0.0.1",
                   KG_HTTP_PORT=str(self.port), KG_SAVE_INTERVAL=str(10 ** 8), KG_AUTOCOMMIT_INTERVAL="0",
                   KG_LOG_LEVEL="WARNING", KG_ORPHAN_GRACE_DAYS=str(int(args.orphan_grace_days)),
                   LD_PRELOAD=faketime_lib(), FAKETIME_TIMESTAMP_FILE=self.ts_file, FAKETIME_NO_CACHE="1",
                   FAKETIME_DONT_FAKE_MONOTONIC="1")
        env.pop("FAKETIME", None)
        self.log = open(os.path.join(self.base, "reference-daemon.log"), "wb")
        self.proc = subprocess.Popen([self.python, os.path.join(self.checkout, "server", "mcp_streamable_server.py")],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.base,
                                     start_new_session=True)
        self.hook_env = dict(os.environ, HOME=self.base, KG_HTTP_HOST="127.0.0.1", KG_HTTP_PORT=str(self.port),
                             CLAUDE_PROJECT_DIR=project, CLAUDE_PLUGIN_ROOT=self.checkout)
        for k in ("LD_PRELOAD", "FAKETIME"):
            self.hook_env.pop(k, None)
        deadline = time.time() + 60
        while not self._healthy():
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise RuntimeError("the reference daemon did not start; see %s" % self.log.name)
            time.sleep(0.2)

    # ------------------------------------------------------------ plumbing

    def _set_clock(self):
        """Point the daemon's clock at the simulation's (an offset from the real clock, in seconds)."""
        offset = "%+.3f" % (REF_EPOCH + self.clock() - time.time())
        tmp = self.ts_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(offset + "\n")
        os.replace(tmp, self.ts_file)

    def _healthy(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def _tool(self, name, arguments):
        self._set_clock()
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/" % self.port, data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream"})
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
        content = (doc.get("result") or {}).get("content") or []
        return "\n".join(c.get("text", "") for c in content)

    def _hook(self, script, payload):
        """Run one of its hook scripts as Claude Code would; the text the model would see."""
        if script == "kg-autostart.sh" and not self._healthy():
            # its SessionStart hook would start a daemon of its own in the background: never let it
            self.errors += 1
            return ""
        self._set_clock()
        payload = dict(payload, session_id=self.claude_id, cwd=self.project,
                       transcript_path=os.path.join(self.base, "transcript-%s.jsonl" % self.claude_id))
        try:
            r = subprocess.run(["bash", os.path.join(self.checkout, "hooks", script)], input=json.dumps(payload),
                               capture_output=True, text=True, env=self.hook_env, cwd=self.project, timeout=60)
        except subprocess.TimeoutExpired:
            self.errors += 1
            return ""
        out = r.stdout.strip()
        if not out:
            return ""
        try:
            doc = json.loads(out)
        except ValueError:
            return out  # plain stdout is context too for SessionStart / UserPromptSubmit
        return ((doc.get("hookSpecificOutput") or {}).get("additionalContext")) or ""

    def _graphs(self):
        """{level: nodes dict} from its graph files."""
        out = {"user": {}, "project": {}}
        for path in glob.glob(os.path.join(self.root, "**", "*.json"), recursive=True):
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
                continue
            level = "project" if os.sep + "projects" + os.sep in path else "user"
            out[level].update({k: v for k, v in data["nodes"].items() if k != "_meta" and isinstance(v, dict)})
        return out

    # ------------------------------------------------------------ the memory interface

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def begin(self, sess, world, run):
        self.claude_id = "00000000-0000-4000-8000-%012d" % sess.index
        text = self._hook("kg-autostart.sh", {"hook_event_name": "SessionStart", "source": "startup"})
        m = re.search(r"session_id: (\w+)", text)
        self.sid = m.group(1) if m else None
        if self.sid is None:  # no preload: the agent's first kg_read(cwd) registers the session
            self.errors += 1
            first = self._tool("kg_read", {"cwd": self.project})
            m = re.search(r"Session: (\w+)", first)
            self.sid = m.group(1) if m else None
        self.read_chars.append(len(text))
        return [("preload", text)]

    def prompt(self, text):
        return [("recall", self._hook("kg-remind.sh", {"hook_event_name": "UserPromptSubmit", "prompt": text,
                                                      "permission_mode": "default"}))]

    def file_read(self, path):
        full = os.path.join(self.project, path)
        return [("file", self._hook("kg-tool-event.sh", {
            "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {"file_path": full},
            "tool_response": {"type": "text", "file": {"filePath": full, "content": "..."}}}))]

    def file_edit(self, path, old, new):
        return []  # its PostToolUse hook matches Read|WebFetch|WebSearch only: an Edit runs none

    def stop(self):
        return []  # it has no Stop hook

    def read_ids(self, ids):
        return self._tool("kg_read", {"session_id": self.sid, "ids": list(ids)})

    def search(self, query):
        text = self._tool("kg_search", {"query": query, "session_id": self.sid})
        ids = re.findall(r"^▸ (\S+) \(", text, re.M)
        more = text.split("MORE MATCHES:", 1)
        if len(more) == 2:
            ids += re.findall(r"^  ([\w.-]+): ", more[1], re.M)
        return text, ids

    def put_node(self, level, nid, gist, notes, touches):
        args = {"session_id": self.sid, "level": level, "id": nid, "gist": gist, "notes": list(notes or [])}
        if touches is not None:
            args["touches"] = list(touches)
        self._tool("kg_put_node", args)

    def put_edge(self, level, frm, to, rel):
        self._tool("kg_put_edge", {"session_id": self.sid, "level": level, "from": frm, "to": to, "rel": rel})

    def exists(self, nid):
        g = self._graphs()
        return nid in g["user"] or nid in g["project"]

    def end_of_day(self, now):
        pass  # its maintenance runs after each write (see the module's docstring)

    def counts(self):
        g = self._graphs()
        out = {}
        for lv, nodes in g.items():
            active = [n for n in nodes.values() if not n.get("_archived") and "_orphaned_ts" not in n]
            out[lv] = {"active": len(active), "archived": len(nodes) - len(active)}
        return out


def configure(checkout, python):
    """Bind the checkout and interpreter; returns the class or None and the reason."""
    checkout = os.path.abspath(checkout) if checkout else checkout
    if checkout and os.path.isdir(os.path.join(checkout, "knowledge-graph", "server")):
        checkout = os.path.join(checkout, "knowledge-graph")
    why = missing(checkout, python)
    if why:
        return None, why
    ReferenceMemory.checkout = checkout
    ReferenceMemory.python = python
    return ReferenceMemory, None


if __name__ == "__main__":
    print(missing(*(sys.argv[1:3] + [None, None])[:2]) or "reference runnable")
