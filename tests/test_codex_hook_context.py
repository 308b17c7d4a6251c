"""The real Codex CLI shows its model kgd's whole preload (contract section 13).

Codex cuts a hook's additionalContext over its additionalContextLimit (default 2,500 tokens, counted
as one per 4 bytes of UTF-8) and saves the whole output to a file, showing the model a preview. kgd's
preload is up to 10,000 characters; with typographic quotes, dashes and accents in the gists it is
over 10,000 bytes. Configured by `kgd hooks install --agent codex` (tests/agents/harness.py's Bench),
Codex 0.171.0 (pinned in tests/agents/codex) runs headless against the recording model:
- as installed, the developer message holding the preload is the preload whole (no "truncated
  output", no "hook output saved to"), although it is over the default limit;
- the control: the same hooks without kgd's limit, and Codex cuts it (so the first check can fail).

Skips (with the reason) where `(cd tests/agents/codex && npm ci)` has not been run.
"""

import json
import math
import os
import sys

import pytest

from helpers import Daemon

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "agents"))
import harness  # noqa: E402
from fake_model import say  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEFAULT_LIMIT = 2500  # Codex's additionalContextLimit when a hook sets none
CUT_MARKS = ("truncated output", "Full hook output saved to", "tokens truncated")


def gist(i):
    return ("Fact %d — the pipeline’s cache layer keeps “station” buffers for the nightly report (módulo %d); "
            "see the façade before changing it" % (i, i))


@pytest.fixture(scope="module")
def codex():
    agent = harness.AGENTS["codex"]
    version, why = agent.version()
    if version is None:
        pytest.skip(why)
    return agent


def preload_seen(tmp_path, agent, strip_limit):
    project = tmp_path / "work" / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    daemon = Daemon(tmp_path / "root", env={"KG_STRUCTURED_OUTPUT": "0"}).start()
    bench = None
    try:
        for i in range(300):  # far more than 10,000 characters of gists: the preload is full
            status, obj = daemon.json("PUT", "/api/nodes/project/fact-%04d" % i,
                                      {"gist": gist(i), "project_path": str(project)})
            assert status == 200, obj
        bench = harness.Bench(agent, daemon, tmp_path / "home")
        hooks_json = tmp_path / "home" / ".codex" / "hooks.json"
        conf = json.loads(hooks_json.read_text())
        limits = [h.get("additionalContextLimit") for g in conf["hooks"]["SessionStart"] for h in g["hooks"]]
        assert limits and all(n and n > DEFAULT_LIMIT for n in limits), conf
        if strip_limit:
            for groups in conf["hooks"].values():
                for g in groups:
                    for h in g["hooks"]:
                        h.pop("additionalContextLimit", None)
            hooks_json.write_text(json.dumps(conf, indent=2))
        run = bench.run("Hello there.", lambda turn: [say("Done.")], project / "src",
                        artifacts=str(tmp_path / "artifacts"))
        assert run.proc.returncode == 0, run.describe()
        first = run.turns[0]
        texts = [c.get("text", "") for m in first.body.get("input", []) if m.get("role") == "developer"
                 for c in m.get("content") or [] if isinstance(c, dict)]
        held = [t for t in texts if "Session: " in t]
        assert len(held) == 1, texts
        return held[0]
    finally:
        if bench is not None:
            bench.close()
        daemon.stop()


def test_codex_shows_the_whole_preload(codex, tmp_path):
    text = preload_seen(tmp_path, codex, strip_limit=False)
    assert not any(mark in text for mark in CUT_MARKS), text[:300]
    assert text.startswith("Session: ")
    assert math.ceil(len(text.encode("utf-8")) / 4) > DEFAULT_LIMIT   # over Codex's default: the limit mattered
    assert len(text) > 9000 and "fact-0299" in text   # the newest gist, and no cut anywhere (above)


def test_without_kgds_limit_codex_cuts_the_preload(codex, tmp_path):
    text = preload_seen(tmp_path, codex, strip_limit=True)
    assert "truncated output" in text and "Full hook output saved to" in text, text[:300]
