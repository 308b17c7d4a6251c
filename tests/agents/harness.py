"""Running Codex CLI, Gemini CLI and Copilot CLI headless against kgd and a scripted model on loopback.

Rules owned here:
- Each agent runs from tests/agents/<name>/node_modules (the version its package-lock.json pins)
  with a clean environment and a throwaway HOME: the agent's own settings written here (its model
  is the test's FakeModel), then kgd's MCP entry and hooks as `kgd hooks install --agent NAME` writes
  them, or as this module writes them (HTTP hooks for Copilot). kgd's MCP server is reached through an
  McpTap in front of the daemon. Nothing of the developer's own set-up leaks in.
- Nothing leaves the machine: every proxy variable points at a RefusingProxy that records attempts,
  the agents' own telemetry and update checks are switched off in their configuration, and where
  the host allows it the agent (and every hook it runs) lives in a private network namespace
  (netns.py) that reaches only the test's loopback ports.
- What "the model received" is read from the fake model's recorded requests, never from the agent's
  own output. A scripted turn is a function of the protocol-neutral Turn (protocols.py).
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid

import netns
from fake_model import FakeModel, call, say
from watchers import McpTap, RefusingProxy

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)
from helpers import KGD, run_kgd  # noqa: E402

NETNS, NETNS_WHY = netns.available()


def _pinned(name, package):
    with open(os.path.join(HERE, name, "package.json")) as f:
        return json.load(f)["dependencies"][package]


class Agent:
    """One agent CLI: where it is, how its HOME is configured, how it is run, how its model reads files."""

    name = package = protocol = binary = None
    hook_events = ()

    @property
    def bin(self):
        return os.path.join(HERE, self.name, "node_modules", ".bin", self.binary)

    def version(self):
        """-> (version, None) when the pinned CLI runs here, else (None, why not)."""
        pinned = _pinned(self.name, self.package)
        if not os.path.exists(self.bin):
            return None, ("tests/agents/%s/node_modules has no %s: run (cd tests/agents/%s && npm ci) "
                          "(needs node/npm)" % (self.name, self.binary, self.name))
        try:
            with tempfile.TemporaryDirectory() as home:
                out = subprocess.run([self.bin, "--version"], capture_output=True, text=True, timeout=60,
                                     env={"PATH": os.environ.get("PATH", ""), "HOME": home}, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, "%s cannot run here: %r" % (self.binary, exc)
        m = re.search(r"(\d+\.\d+\.\d+)", out.stdout)
        if out.returncode != 0 or not m:
            return None, "%s cannot run here (exit %d): %s" % (self.binary, out.returncode,
                                                               (out.stderr or out.stdout).strip()[:300])
        if m.group(1) != pinned:
            return None, "%s is %s, package.json pins %s: run npm ci" % (self.binary, m.group(1), pinned)
        return m.group(1), None

    def tool(self, turn, suffix):
        """The name under which this turn offers the tool whose name ends with suffix (kg_read), or None."""
        names = sorted(n for n in turn.tools if n and n.endswith(suffix))
        return names[0] if names else None

    def hook_command(self, daemon, event=None):
        """kgd's command hook for this agent (contract section 11); Copilot's input names no event."""
        argv = [sys.executable, KGD, "hook", "--agent", self.name] + (["--event", event] if event else []) + [
            "--port", str(daemon.port), "--root", daemon.root]
        return " ".join(shlex.quote(a) for a in argv)


class Codex(Agent):
    name, package, protocol, binary = "codex", "@openai/codex", "responses", "codex"
    hook_events = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")

    def base(self, home, fake):
        d = os.path.join(home, ".codex")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.toml"), "w") as f:  # top-level keys first: kgd's block may follow
            f.write('model = "kgd-test-model"\nmodel_provider = "kgdtest"\ncheck_for_update_on_startup = false\n\n'
                    '[features]\nplugins = false\n\n[analytics]\nenabled = false\n\n'
                    '[model_providers.kgdtest]\nname = "kgd test"\nbase_url = "%s/v1"\nwire_api = "responses"\n'
                    % fake.url)
        return {}

    def write_kg(self, home, mcp_url, hooks):
        with open(os.path.join(home, ".codex", "config.toml"), "a") as f:
            f.write('\n[mcp_servers.kg]\nurl = "%s"\n' % mcp_url)
        if hooks:
            with open(os.path.join(home, ".codex", "hooks.json"), "w") as f:
                json.dump(
                    {
                        "hooks": {
                            e: [{"hooks": [{"type": "command", "command": hooks["command"](e), "timeout": 10}]}]
                            for e in self.hook_events
                        }
                    },
                    f,
                    indent=2,
                )

    def argv(self, prompt):
        return [self.bin, "exec", "--skip-git-repo-check", "--disable", "plugins", "--dangerously-bypass-hook-trust",
                "--dangerously-bypass-approvals-and-sandbox", prompt]

    def read_file(self, turn, path):
        return call("exec_command", {"cmd": "cat %s" % shlex.quote(path)})


class Gemini(Agent):
    name, package, protocol, binary = "gemini", "@google/gemini-cli", "gemini", "gemini"
    hook_events = ("SessionStart", "BeforeAgent", "AfterTool", "AfterAgent")

    def _settings(self, home, change):
        path = os.path.join(home, ".gemini", "settings.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        settings = {}
        if os.path.exists(path):
            with open(path) as f:
                settings = json.load(f)
        change(settings)
        with open(path, "w") as f:
            json.dump(settings, f, indent=2)

    def base(self, home, fake):
        self._settings(home, lambda s: s.update({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}}))
        return {"GEMINI_API_KEY": "kgd-test-" + uuid.uuid4().hex[:8], "GOOGLE_GEMINI_BASE_URL": fake.url}

    def write_kg(self, home, mcp_url, hooks):
        def change(s):
            s["mcpServers"] = {"kg": {"httpUrl": mcp_url}}
            if hooks:
                s["hooks"] = {e: [{"hooks": [{"type": "command", "command": hooks["command"](e), "timeout": 10000}]}]
                              for e in self.hook_events}
        self._settings(home, change)

    def argv(self, prompt):
        return [self.bin, "-p", prompt, "--approval-mode", "yolo", "--skip-trust"]

    def read_file(self, turn, path):
        return call("read_file", {"file_path": path})


class Copilot(Agent):
    name, package, protocol, binary = "copilot", "@github/copilot", "chat", "copilot"
    hook_events = ("sessionStart", "userPromptSubmitted", "postToolUse", "agentStop")

    def base(self, home, fake):
        os.makedirs(os.path.join(home, ".copilot"), exist_ok=True)
        return {
            "COPILOT_PROVIDER_BASE_URL": fake.url + "/v1",
            "COPILOT_PROVIDER_API_KEY": "kgd-test-" + uuid.uuid4().hex[:8],
            "COPILOT_MODEL": "gpt-4.1",
            "COPILOT_OFFLINE": "true",
            "COPILOT_HOOK_ALLOW_LOCALHOST": "1",
        }

    def write_kg(self, home, mcp_url, hooks):
        d = os.path.join(home, ".copilot")
        with open(os.path.join(d, "mcp-config.json"), "w") as f:
            json.dump({"mcpServers": {"kg": {"type": "http", "url": mcp_url, "tools": ["*"]}}}, f, indent=2)
        if hooks:  # HTTP hooks: the other way Copilot reaches kgd (the installer writes command hooks)
            os.makedirs(os.path.join(d, "hooks"), exist_ok=True)
            with open(os.path.join(d, "hooks", "kgd.json"), "w") as f:
                json.dump({"version": 1, "hooks": {e: [{"type": "http", "url": hooks["url"](e), "timeoutSec": 10}]
                                                   for e in self.hook_events}}, f, indent=2)

    def argv(self, prompt):
        return [self.bin, "-p", prompt, "--allow-all-tools", "--disable-client-telemetry", "--log-level", "error"]

    def read_file(self, turn, path):
        return call("view", {"path": path})


AGENTS = {a.name: a for a in (Codex(), Gemini(), Copilot())}


class Run:
    """One headless run: the process, the model's turns, kgd's MCP and HTTP-hook exchanges (a
    Recording), the proxy attempts, all from this run alone."""

    def __init__(self, proc, seconds, netns_used, requests, turns, mcp, attempts, errors):
        self.proc, self.seconds, self.netns = proc, seconds, netns_used
        self.requests, self.turns, self.mcp, self.attempts, self.errors = requests, turns, mcp, attempts, errors

    def main_turns(self, agent):
        """The turns of the conversation itself (kg tools offered), not the agent's side questions."""
        return [t for t in self.turns if agent.tool(t, "kg_read")]

    def describe(self):
        return "exit %s after %.1fs (netns: %s)\nstdout: %s\nstderr: %s\nfake model errors: %s\nrequests: %s" % (
            self.proc.returncode, self.seconds, self.netns, self.proc.stdout[-1500:], self.proc.stderr[-2500:],
            self.errors, [(r["method"], r["path"]) for r in self.requests][:30])


class Bench:
    """One agent's throwaway HOME and the loopback servers around it, for several runs.

    setup: "install" configures kgd with `kgd hooks install --agent NAME` (its MCP entry pointed at the
    tap); "write" writes the MCP entry and the hooks as this module does (command hooks, HTTP hooks for
    Copilot, through the tap); "mcp" writes the MCP entry only. The agent's own settings (its model,
    auth, telemetry and update checks off) are always written here, first."""

    def __init__(self, agent, daemon, home, setup="install"):
        self.agent, self.daemon, self.home = agent, daemon, str(home)
        self.fake = FakeModel(agent.protocol, lambda turn: [say("ok")]).start()
        self.tap = McpTap(daemon.port)
        self.proxy = RefusingProxy()
        self.bridge = netns.Bridge([daemon.port, self.fake.port, self.tap.port, self.proxy.port]) if NETNS else None
        os.makedirs(self.home, exist_ok=True)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home, "TMPDIR": self.home,
                    "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1", "NO_BROWSER": "1"}
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            self.env[var] = self.proxy.url
        self.env["NO_PROXY"] = self.env["no_proxy"] = "127.0.0.1,localhost"
        self.env.update(agent.base(self.home, self.fake))
        if setup == "install":
            code, out, err, _ = run_kgd("hooks", "install", "--agent", agent.name, "--port", self.tap.port,
                                        "--root", daemon.root, home=self.home)
            assert code == 0, "kgd hooks install --agent %s: %s%s" % (agent.name, out, err)
            self.installed = out
        else:
            def url(event):  # Copilot's HTTP hook input names no event: the URL does
                return "%s/api/hooks?agent=%s&event=%s" % (self.tap.url, agent.name, event)

            def command(event):
                return agent.hook_command(daemon, event if agent.name == "copilot" else None)

            agent.write_kg(
                self.home, self.tap.url + "/mcp", {"command": command, "url": url} if setup == "write" else None
            )

    def run(self, prompt, responder, cwd, artifacts=None, timeout=150):
        """`agent` once on `prompt` in cwd; -> Run."""
        self.fake.responder = responder
        marks = (len(self.fake.requests), len(self.tap.exchanges), len(self.proxy.attempts), len(self.fake.errors))
        cmd = self.agent.argv(prompt)
        if self.bridge:
            cmd = self.bridge.command(cmd)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=str(cwd), env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        run = Run(proc, time.monotonic() - t0, bool(self.bridge), self.fake.requests[marks[0]:],
                  self.fake.turns(marks[0]), self.tap.recording(marks[1]), self.proxy.attempts[marks[2]:],
                  self.fake.errors[marks[3]:])
        if artifacts:
            os.makedirs(artifacts, exist_ok=True)
            self.fake.dump(os.path.join(artifacts, "model-requests.json"), marks[0])
            with open(os.path.join(artifacts, "mcp-exchanges.json"), "w") as f:
                json.dump(run.mcp.exchanges, f, indent=1)
        return run

    def close(self):
        for s in (self.fake, self.tap, self.proxy):
            s.stop()
        if self.bridge:
            self.bridge.close()


SESSION = re.compile(r"Session: ([A-Za-z0-9_-]+)")


def script(agent, steps, final="Done."):
    """A responder: on each turn of the conversation, the next of `steps` not yet taken, then `final`.
    A step is a function (turn, state) -> action, state holding "session_id" (the first `Session:` line
    the model was shown). Side questions (no kg tools offered) get "ok"."""
    def respond(turn):
        if not agent.tool(turn, "kg_read"):
            return [say("ok")]
        m = SESSION.search(turn.text)
        state = {"session_id": m.group(1) if m else None}
        if len(turn.calls) < len(steps):
            return [steps[len(turn.calls)](turn, state)]
        return [say(final)]
    return respond
