"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
tests/conformance/package.json) against a real kgd, for both requirement sets (contract section 13).

The suite runs every server scenario of a set against a kgd on --port 0 and writes one checks.json
per scenario. A check that fails (or warns) must be listed in tests/conformance/not-applicable.yaml
under a "# N/A:" reason, and a listed check must still fail (else the entry is stale). This test
judges every scenario the suite ran, the ones it does not score (pending, extensions) included:
the suite's own exit code ignores those, and the RFC 9110 whitespace check lives in one of them.

Needs `(cd tests/conformance && npm ci)` (CI does it), which also brings the Node 22 binary the
suite needs (npm's `node` package); otherwise it skips.
"""

import glob
import json
import os
import re
import subprocess

import pytest

from helpers import clean_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance")
SUITE = os.path.join(HERE, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
NODE = os.path.join(HERE, "node_modules", ".bin", "node")
NOT_APPLICABLE = os.path.join(HERE, "not-applicable.yaml")
SETS = ("2025-11-25", "2026-07-28")
FAILED = ("FAILURE", "WARNING")  # the suite's baseline counts a warning as a failure too


def read_not_applicable(path=NOT_APPLICABLE):
    """{"scenario:check-id": reason} from the suite's baseline file, where each entry sits under a
    `# N/A: reason` comment (continued by the comment lines right after it)."""
    entries, reason, in_reason = {}, None, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.strip()
            if text.startswith("# N/A:"):
                reason, in_reason = text[6:].strip(), True
            elif text.startswith("#") and in_reason and line.startswith("  "):
                reason += " " + text[1:].strip()
            elif text.startswith("- "):
                in_reason = False
                entry = text[2:].strip()
                assert reason, "%s: %r has no '# N/A:' reason above it" % (path, entry)
                assert re.fullmatch(r"[a-z0-9-]+:[a-z0-9-]+", entry), "%s: %r is not scenario:check-id" % (path, entry)
                assert entry not in entries, "%s: %r is listed twice" % (path, entry)
                entries[entry] = reason
            else:
                in_reason = False
    return entries


def _node():
    if not os.path.isfile(SUITE) or not os.access(NODE, os.X_OK):
        pytest.skip("tests/conformance/node_modules is missing: run (cd tests/conformance && npm ci) first "
                    "(it brings the suite and the Node 22 binary it needs)")
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=60, env=clean_env()).stdout
    m = re.match(r"v(\d+)\.", out.strip())
    if not m or int(m.group(1)) < 22:
        pytest.skip("the conformance suite needs Node 22+ (fs.globSync); tests/conformance has %r" % out.strip())
    return NODE


def required_scenarios(node, requirements):
    """The server scenarios a requirement set requires, as the suite lists them."""
    out = subprocess.run([node, SUITE, "list", "--server", "--requirements", requirements], capture_output=True,
                         text=True, timeout=120, env=clean_env(), cwd=HERE).stdout
    required = out.split("Server scenarios")[-1].split("Client scenarios")[0].split("Run and reported")[0]
    return set(re.findall(r"^\s+- ([a-z0-9-]+)\s*$", required, re.M))


def run_suite(node, url, requirements, out_dir):
    """-> (exit code, output, {scenario: [checks]})."""
    try:
        proc = subprocess.run([node, SUITE, "server", "--url", url, "--requirements", requirements,
                               "--expected-failures", NOT_APPLICABLE, "-o", str(out_dir)],
                              capture_output=True, text=True, timeout=600, env=clean_env(), cwd=HERE)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the conformance suite did not finish within 600 s: %s" % (exc.stdout or "")[-3000:])
    results = {}
    for path in glob.glob(os.path.join(str(out_dir), "server-*", "checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", os.path.basename(os.path.dirname(path)))
        with open(path, encoding="utf-8") as f:
            results[scenario] = json.load(f)
    return proc.returncode, proc.stdout + proc.stderr, results


def judge(results, not_applicable):
    """-> (passed, failed, unexpected [(key, status, message)], stale [keys], excused count)."""
    passed = failed = excused = 0
    unexpected, verdicts = [], {}
    for scenario, checks in sorted(results.items()):
        for c in checks:
            key = "%s:%s" % (scenario, c["id"])
            if c["status"] == "SUCCESS":
                passed += 1
                verdicts.setdefault(key, "SUCCESS")
            elif c["status"] in FAILED:
                failed += 1
                verdicts[key] = c["status"]
                if key in not_applicable:
                    excused += 1
                else:
                    unexpected.append((key, c["status"], (c.get("errorMessage") or "")[:300]))
    stale = sorted(k for k in not_applicable if verdicts.get(k) == "SUCCESS")
    return passed, failed, unexpected, stale, excused


def test_not_applicable_file_gives_every_entry_a_reason():
    entries = read_not_applicable()
    assert len(entries) > 50
    assert all(len(reason) > 30 for reason in entries.values())
    # Never the two checks contract section 13 names: they apply, and kgd passes them.
    assert "http-header-validation:sep-2243-server-accepts-whitespace-header-value" not in entries
    assert "server-stateless:sep-2575-http-server-method-not-found-404-initialize" not in entries
    assert not any(k.startswith(("server-initialize:", "tools-list:", "dns-rebinding-protection:", "ping:"))
                   for k in entries)


def test_judge_counts_and_flags():
    na = {"s:gone": "why", "s:still": "why"}
    results = {"s": [{"id": "ok", "status": "SUCCESS"}, {"id": "gone", "status": "SUCCESS"},
                     {"id": "still", "status": "FAILURE"}, {"id": "new", "status": "WARNING", "errorMessage": "m"},
                     {"id": "info", "status": "INFO"}]}
    passed, failed, unexpected, stale, excused = judge(results, na)
    assert (passed, failed, excused) == (2, 2, 1)
    assert unexpected == [("s:new", "WARNING", "m")] and stale == ["s:gone"]


@pytest.mark.parametrize("structured", [False, True], ids=["default", "structured-output"])
@pytest.mark.parametrize("requirements", SETS)
def test_conformance_suite(make_daemon, tmp_path, requirements, structured):
    node = _node()
    daemon = make_daemon(args=["--structured-output"] if structured else [],
                         env={"KG_STRUCTURED_OUTPUT": "1" if structured else "0"})
    code, output, results = run_suite(node, daemon.url + "/mcp", requirements, tmp_path / "results")
    missing = required_scenarios(node, requirements) - set(results)
    assert results and not missing, "scenarios the set requires did not run: %s\n%s" % (sorted(missing), output[-3000:])
    passed, failed, unexpected, stale, excused = judge(results, read_not_applicable())
    print("conformance %s (%s): %d scenarios, %d checks passed, %d failed (%d not applicable)" % (
        requirements, "structured" if structured else "default", len(results), passed, failed, excused))
    assert not unexpected, "applicable checks failed (fix kgd, or list one in not-applicable.yaml with why):\n" + \
        "\n".join("  %s %s: %s" % u for u in unexpected)
    assert not stale, "listed as not applicable but passing (remove from not-applicable.yaml): %s" % stale
    assert code == 0, "the suite's own baseline check failed:\n" + output[-3000:]
    if requirements == "2026-07-28":  # the two checks contract section 13 names ran, and passed
        for scenario, check in (("http-header-validation", "sep-2243-server-accepts-whitespace-header-value"),
                                ("server-stateless", "sep-2575-http-server-method-not-found-404-initialize")):
            statuses = {c["status"] for c in results.get(scenario, []) if c["id"] == check}
            assert statuses == {"SUCCESS"}, (scenario, check, statuses)
