"""Running Codex CLI, Gemini CLI and Copilot CLI headless against kgd and a scripted model on loopback.

Rules owned here:
- Each agent runs from tests/agents/<name>/node_modules (the version its package-lock.json pins)
  with a clean environment and a throwaway HOME whose configuration the test writes: the model is
  the test's FakeModel, kgd's MCP server an McpTap in front of the daemon's /mcp, kgd's hooks the
  `kgd hook` command (HTTP to /api/hooks for Copilot). Nothing of the developer's own set-up leaks in.
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
from helpers import KGD  # noqa: E402

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

    def hook_command(self, daemon):
        """kgd's command hook for this agent (contract section 11)."""
        argv = [sys.executable, KGD, "hook", "--agent", self.name, "--port", str(daemon.port), "--root", daemon.root]
        return " ".join(shlex.quote(a) for a in argv)


class Codex(Agent):
    name, package, protocol, binary = "codex", "@openai/codex", "responses", "codex"
    hook_events = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")

    def configure(self, home, fake, mcp_url, hooks):
        d = os.path.join(home, ".codex")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write('model = "kgd-test-model"\nmodel_provider = "kgdtest"\n'
                    'check_for_update_on_startup = false\n\n'
                    '[features]\nplugins = false\nhooks = true\n\n'
                    '[analytics]\nenabled = false\n\n'
                    '[model_providers.kgdtest]\nname = "kgd test"\nbase_url = "%s/v1"\nwire_api = "responses"\n\n'
                    '[mcp_servers.kg]\nurl = "%s"\n' % (fake.url, mcp_url))
        if hooks:
            with open(os.path.join(d, "hooks.json"), "w") as f:
                json.dump({"hooks": {e: [{"hooks": [{"type": "command", "command": hooks["command"], "timeout": 10}]}]
                                     for e in self.hook_events}}, f, indent=2)
        return {}

    def argv(self, prompt):
        return [self.bin, "exec", "--skip-git-repo-check", "--disable", "plugins", "--dangerously-bypass-hook-trust",
                "--dangerously-bypass-approvals-and-sandbox", prompt]

    def read_file(self, turn, path):
        return call("exec_command", {"cmd": "cat %s" % shlex.quote(path)})


class Gemini(Agent):
    name, package, protocol, binary = "gemini", "@google/gemini-cli", "gemini", "gemini"
    hook_events = ("SessionStart", "BeforeAgent", "AfterTool", "AfterAgent")

    def configure(self, home, fake, mcp_url, hooks):
        d = os.path.join(home, ".gemini")
        os.makedirs(d, exist_ok=True)
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                    "privacy": {"usageStatisticsEnabled": False},
                    "telemetry": {"enabled": False},
                    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                    "mcpServers": {"kg": {"httpUrl": mcp_url}}}
        if hooks:
            settings["hooks"] = {e: [{"hooks": [{"type": "command", "command": hooks["command"], "timeout": 10000}]}]
                                 for e in self.hook_events}
        with open(os.path.join(d, "settings.json"), "w") as f:
            json.dump(settings, f, indent=2)
        return {"GEMINI_API_KEY": "kgd-test-" + uuid.uuid4().hex[:8], "GOOGLE_GEMINI_BASE_URL": fake.url}

    def argv(self, prompt):
        return [self.bin, "-p", prompt, "--approval-mode", "yolo", "--skip-trust"]

    def read_file(self, turn, path):
        return call("read_file", {"file_path": path})


class Copilot(Agent):
    name, package, protocol, binary = "copilot", "@github/copilot", "chat", "copilot"
    hook_events = ("sessionStart", "userPromptSubmitted", "postToolUse", "agentStop")

    def configure(self, home, fake, mcp_url, hooks):
        d = os.path.join(home, ".copilot")
        os.makedirs(os.path.join(d, "hooks"), exist_ok=True)
        with open(os.path.join(d, "mcp-config.json"), "w") as f:
            json.dump({"mcpServers": {"kg": {"type": "http", "url": mcp_url, "tools": ["*"]}}}, f, indent=2)
        if hooks:
            with open(os.path.join(d, "hooks", "kgd.json"), "w") as f:
                json.dump({"version": 1, "hooks": {e: [{"type": "http", "url": hooks["url"](e), "timeoutSec": 10}]
                                                   for e in self.hook_events}}, f, indent=2)
        return {"COPILOT_PROVIDER_BASE_URL": fake.url + "/v1", "COPILOT_PROVIDER_API_KEY": "kgd-test-" + uuid.uuid4().hex[:8],
                "COPILOT_MODEL": "gpt-4.1", "COPILOT_OFFLINE": "true", "COPILOT_HOOK_ALLOW_LOCALHOST": "1"}

    def argv(self, prompt):
        return [self.bin, "-p", prompt, "--allow-all-tools", "--disable-client-telemetry", "--log-level", "error"]

    def read_file(self, turn, path):
        return call("view", {"path": path})


AGENTS = {a.name: a for a in (Codex(), Gemini(), Copilot())}


class Run:
    """One headless run: the process, the model's requests, kgd's MCP exchanges, refused attempts."""

    def __init__(self, proc, fake, tap, proxy, seconds, netns_used):
        self.proc, self.fake, self.tap, self.proxy = proc, fake, tap, proxy
        self.seconds, self.netns = seconds, netns_used
        self.turns = fake.turns()

    def main_turns(self, agent):
        """The turns of the conversation itself (kg tools offered), not the agent's side questions."""
        return [t for t in self.turns if agent.tool(t, "kg_read")]

    def describe(self):
        return "exit %s after %.1fs (netns: %s)\nstdout: %s\nstderr: %s\nfake model errors: %s\nrequests: %s" % (
            self.proc.returncode, self.seconds, self.netns, self.proc.stdout[-1500:], self.proc.stderr[-2500:],
            self.fake.errors, [(r["method"], r["path"]) for r in self.fake.requests][:30])


def run_agent(agent, prompt, responder, daemon, cwd, home, hooks=False, artifacts=None, timeout=150):
    """Run `agent` once on `prompt` in cwd with a throwaway HOME; -> Run. hooks: install kgd's hooks
    (`kgd hook --agent NAME`, or `/api/hooks?agent=NAME&event=E` through the tap for Copilot)."""
    fake = FakeModel(agent.protocol, responder).start()
    tap = McpTap(daemon.port)
    proxy = RefusingProxy()
    bridge = None
    try:
        os.makedirs(home, exist_ok=True)
        hook_conf = None
        if hooks:
            def url(event):  # Copilot's HTTP hook input names no event: the URL does
                return "%s/api/hooks?agent=%s&event=%s" % (tap.url, agent.name, event)
            hook_conf = {"command": agent.hook_command(daemon), "url": url}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
               "TERM": "dumb", "NO_COLOR": "1", "CI": "1", "NO_BROWSER": "1"}
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env[var] = proxy.url
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        env.update(agent.configure(home, fake, tap.url + "/mcp", hook_conf))
        cmd = agent.argv(prompt)
        if NETNS:
            bridge = netns.Bridge([daemon.port, fake.port, tap.port, proxy.port])
            cmd = bridge.command(cmd)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        run = Run(proc, fake, tap, proxy, time.monotonic() - t0, NETNS)
        if artifacts:
            os.makedirs(artifacts, exist_ok=True)
            fake.dump(os.path.join(artifacts, "model-requests.json"))
            with open(os.path.join(artifacts, "mcp-exchanges.json"), "w") as f:
                json.dump(tap.exchanges, f, indent=1)
        return run
    finally:
        for s in (fake, tap, proxy):
            s.stop()
        if bridge:
            bridge.close()


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
