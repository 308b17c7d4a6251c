"""A seeded slice of bench/fuzz_inputs.py: hostile hook inputs of the four agents and
hostile `.kg/` files against a live daemon (contract sections 8, 9 and 11), the daemon up and serving
after each batch. The full run (100,000 cases) is `python3 bench/fuzz_inputs.py`; a failure there
names its batch seed, replayed with `--replay SEED:BATCH`."""

import json
import os
import random
import sys

import pytest

from helpers import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import fuzz_inputs  # noqa: E402

from kg.agents import dialects  # noqa: E402
from kg.core import kg_format  # noqa: E402

SEED = int(os.environ.get("KG_FUZZ_SEED", "3434"))


@pytest.mark.parametrize("status, body, ok", [
    (200, b"", True),
    (200, b'{"hookSpecificOutput": {}}', True),
    (400, b'{"error": "the body must be a JSON object"}', True),
    (415, b'{"error": "not JSON"}', True),
    (500, b'{"error": "boom"}', False),
    (200, b"[1]", False),
    (200, b"not json", False),
    (400, b"{}", False),
    (200, b'{"a": "' + b"x" * fuzz_inputs.MAX_ANSWER + b'"}', False),
])
def test_what_counts_as_an_answer_kgd_may_give(status, body, ok):
    assert (fuzz_inputs.check_hook_answer(status, body) is None) == ok


def test_a_canary_survives_every_hostile_file_kgds_parser_reads():
    """The fuzzer's own promise, checked in process on kg/core/kg_format.py: however hostile the
    other lines, a canary line in the file is read as written."""
    now = kg_format.ts(1_800_000_000)
    for i in range(300):
        rnd = random.Random("%d:%d" % (SEED, i))
        crec = fuzz_inputs.canary("canary-%d" % i, now)
        data, n = fuzz_inputs.lines_file(rnd, [crec], 40, now)
        assert n == 40
        recs, problems = kg_format.parse(data, "node")
        assert recs.get(crec["id"]) == crec, (i, problems[:3])


def test_hook_cases_cover_every_agent_and_are_reproducible():
    cwds = ["/tmp/x", "/tmp/y"]
    a = [fuzz_inputs.hook_case(random.Random(SEED), agent, cwds, "/tmp/fifo") for agent in dialects.NAMES]
    b = [fuzz_inputs.hook_case(random.Random(SEED), agent, cwds, "/tmp/fifo") for agent in dialects.NAMES]
    assert a == b
    decoded = []
    for _ in range(200):
        q, body, _ = fuzz_inputs.hook_case(random.Random(len(decoded)), "copilot", cwds, "/tmp/fifo")
        try:
            decoded.append(json.loads(body))
        except (ValueError, RecursionError):  # cut short, bytes, or nested deeper than Python parses
            decoded.append(None)
    dicts = [d for d in decoded if isinstance(d, dict)]
    assert len(dicts) > 150 and any("toolName" in d or "sessionId" in d for d in dicts)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_seeded_slice_against_a_live_daemon(tmp_path):
    counts, failures, seed = fuzz_inputs.run(cases=3000, seed=SEED, tmp=str(tmp_path / "fuzz"), quiet=True)
    assert failures == [], "\n".join(failures[:5])
    assert fuzz_inputs.total(counts) >= 3000
    for agent in dialects.NAMES:
        assert counts["hook-http:" + agent] > 100, counts
    assert counts["kg-line"] > 1000 and counts["kg-file"] >= 1, counts
    assert sum(v for k, v in counts.items() if k.startswith("hook-cmd:")) >= 3, counts
