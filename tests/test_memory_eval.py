"""bench/memory_eval.py: deterministic, ordered as a ceiling should be, prints its table, and
drives the hooks when kg.agents.loop is there (a stand-in module here)."""

import io
import json
import os
import sys
import types

import pytest

import kg.agents
from kg.api import render

from helpers import clean_env

pytestmark = pytest.mark.e2e  # some tests run bench/memory_eval.py as a process

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import memory_eval  # noqa: E402


def run(tmp_path, name, *args):
    out = io.StringIO()
    path = str(tmp_path / name)
    assert memory_eval.main(list(args) + ["--json", path], out=out) == 0
    with open(path) as f:
        return json.load(f), out.getvalue()


def by_policy(doc):
    return {(r["policy"], r["max_tokens"]): r for r in doc["runs"]}


SMALL = ["--days", "45", "--max-tokens", "1500", "--seed", "3", "--policy", "kgd,none,lru,oracle"]


def test_same_seed_same_json(tmp_path):
    a, _ = run(tmp_path, "a.json", *SMALL)
    b, _ = run(tmp_path, "b.json", *SMALL)
    assert a == b
    c, _ = run(tmp_path, "c.json", *(SMALL[:4] + ["--seed", "4"] + SMALL[6:]))
    assert c != a


def test_oracle_is_the_ceiling_and_shares_add_up(tmp_path):
    doc, _ = run(tmp_path, "r.json", *SMALL)
    runs = by_policy(doc)
    kgd, oracle, lru = runs[("kgd", 1500)], runs[("oracle", 1500)], runs[("lru", 1500)]
    assert kgd["needs"] > 100 and kgd["needs"] == oracle["needs"] == lru["needs"]
    assert oracle["in_context"] >= kgd["in_context"] >= 0
    assert oracle["in_context"] >= lru["in_context"]
    assert kgd["in_context"] < 100  # the budget bites: the run measures something
    for r in doc["runs"]:
        assert sum(r["outcomes"].values()) == r["needs"] == r["warm_needs"] + r["cold_needs"]
        assert r["reads_over_40000"] == 0


def test_table_prints_every_run(tmp_path):
    _, text = run(tmp_path, "t.json", *SMALL)
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["policy", "M", "seed", "needs", "ctx%"]
    assert [ln.split()[0] for ln in lines[1:5]] == ["kgd", "none", "lru", "oracle"]
    assert "4 run(s)" in text and "JSON:" in text


def test_compare_prints_before_and_after(tmp_path):
    run(tmp_path, "a.json", *SMALL)
    out = io.StringIO()
    memory_eval.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")], out=out)
    assert "kgd" in out.getvalue() and "→" in out.getvalue()


def test_unknown_policy_is_refused():
    with pytest.raises(SystemExit):
        memory_eval.parse_args(["--policy", "kgd,fifo"])


def test_hooks_missing_is_skipped_with_a_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kg.agents.loop", None)
    monkeypatch.delattr(kg.agents, "loop", raising=False)
    doc, text = run(tmp_path, "h.json", "--days", "10", "--max-tokens", "1500", "--policy", "kgd,kgd-hooks")
    assert "kgd-hooks skipped" in text
    assert [r["policy"] for r in doc["runs"]] == ["kgd"]


def fake_hooks():
    """A stand-in for kg/agents/loop.py with its interface: preload = the kg_read text, recall = search."""
    def handler(store):
        sessions = {}

        def handle(p):
            ev = p["hook_event_name"]
            if ev == "SessionStart":
                s = sessions[p["session_id"]] = store.start_session(p["cwd"])
                g = store.read_graphs(s)
                result = {"session_id": s.id, "project_path": s.project_path, "user": g["user"],
                          "project": g["project"], "budget": {"max_tokens": 0, "user_tokens": 0, "project_tokens": 0}}
                text = render.render_read(result, store.settings.max_tokens)
            elif ev == "Stop":
                return {"decision": "block", "reason": "Save what a future session needs."}
            elif ev == "UserPromptSubmit":
                r = store.search(p["prompt"], sessions[p["session_id"]], 3)
                text = "\n".join("- %s: %s" % (n["id"], n["gist"]) for n in r["results"])
            else:
                return None
            return {"hookSpecificOutput": {"hookEventName": ev, "additionalContext": text}}
        return handle
    return types.SimpleNamespace(handler=handler)


def test_hooks_mode_reads_context_from_the_hook_texts(tmp_path, monkeypatch):
    fake = fake_hooks()
    monkeypatch.setitem(sys.modules, "kg.agents.loop", fake)
    monkeypatch.setattr(kg.agents, "loop", fake, raising=False)
    doc, _ = run(tmp_path, "k.json", "--days", "45", "--max-tokens", "1500", "--seed", "3",
                 "--policy", "kgd,kgd-hooks")
    runs = by_policy(doc)
    hooks = runs[("kgd-hooks", 1500)]
    assert hooks["outcomes"]["recall"] > 0
    assert hooks["outcomes"]["file"] == 0
    assert hooks["hook_chars_per_session"] > len("Save what a future session needs.")
    assert hooks["hook_errors"] == 0
    assert hooks["in_context"] >= runs[("kgd", 1500)]["in_context"]


def test_a_plugin_adds_a_variant(tmp_path):
    plugin = tmp_path / "variant.py"
    plugin.write_text("import memory_eval\n\n"
                      "class FillingLRU(memory_eval.LRU):\n"
                      "    name = 'lru-fill'\n"
                      "    skip_misfits = True\n\n"
                      "memory_eval.MEMORIES['lru-fill'] = FillingLRU\n")
    try:
        doc, text = run(tmp_path, "p.json", "--days", "30", "--max-tokens", "1500", "--seed", "3",
                        "--plugin", str(plugin), "--policy", "lru,lru-fill", "--label", "try")
    finally:
        memory_eval.MEMORIES.pop("lru-fill", None)
    assert doc["label"] == "try"
    assert [r["policy"] for r in doc["runs"]] == ["lru", "lru-fill"]
    assert "lru-fill" in text


def test_a_failing_hook_is_counted_not_fatal(tmp_path, monkeypatch):
    fake = fake_hooks()
    broken = types.SimpleNamespace(handler=lambda store: (lambda p: 1 / 0 if p["hook_event_name"] == "UserPromptSubmit"
                                                           else fake.handler(store)(p)))
    monkeypatch.setitem(sys.modules, "kg.agents.loop", broken)
    monkeypatch.setattr(kg.agents, "loop", broken, raising=False)
    doc, _ = run(tmp_path, "e.json", "--days", "10", "--max-tokens", "1500", "--policy", "kgd-hooks")
    r = doc["runs"][0]
    assert r["hook_errors"] == r["sessions"] > 0


def test_the_script_runs_from_the_command_line_with_a_plugin(tmp_path):
    import subprocess
    plugin = tmp_path / "variant.py"
    plugin.write_text("import memory_eval\n"
                      "class Mine(memory_eval.LRU):\n"
                      "    skip_misfits = True\n"
                      "memory_eval.MEMORIES['mine'] = Mine\n")
    out = subprocess.run([sys.executable, os.path.join(BENCH, "memory_eval.py"), "--days", "20", "--max-tokens", "1500",
                          "--policy", "kgd,mine", "--plugin", str(plugin), "--json", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=60, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert [ln.split()[0] for ln in out.stdout.splitlines()[1:3]] == ["kgd", "mine"]
    with open(tmp_path / "x.json") as f:
        assert [r["policy"] for r in json.load(f)["runs"]] == ["kgd", "mine"]


def test_the_archive_to_budget_variant_changes_what_kgd_keeps(tmp_path):
    """bench/variants/archive_to_budget.py (a proposal, not kgd's policy) runs as a plugin and
    leaves more nodes active than kgd's own pass 1 (which archives down to 0.8 x max_tokens)."""
    import subprocess

    def end_active(*extra):
        path = tmp_path / ("%d.json" % len(extra))
        out = subprocess.run([sys.executable, os.path.join(BENCH, "memory_eval.py"), "--days", "45",
                              "--max-tokens", "1500", "--seed", "3", "--policy", "kgd", "--json", str(path)]
                             + list(extra), capture_output=True, text=True, timeout=120, env=clean_env())
        assert out.returncode == 0, out.stderr
        with open(path) as f:
            run = json.load(f)["runs"][0]
        return run["end"]

    variant = os.path.join(BENCH, "variants", "archive_to_budget.py")
    base, atb = end_active(), end_active("--plugin", variant)
    assert base != atb


def test_every_row_reports_median_context_and_conventions(tmp_path):
    doc, text = run(tmp_path, "m.json", *SMALL)
    assert "ch/med" in text.splitlines()[0] and "conv" in text.splitlines()[0]
    for r in doc["runs"]:
        assert r["chars_per_session_median"] > 0
        assert r["conventions_needs"] > 0 and 0 <= r["conventions_in_context"] <= 100
        assert r["world"] == "conventions"


def test_the_classic_world_is_still_there(tmp_path):
    a, _ = run(tmp_path, "a.json", *SMALL)
    b, _ = run(tmp_path, "b.json", *(SMALL + ["--world", "classic"]))
    assert b["args"]["world"] == "classic" and {r["world"] for r in b["runs"]} == {"classic"}
    assert a["runs"][0]["needs"] != b["runs"][0]["needs"]


def test_conventions_are_cross_topic_and_needed_often():
    """The default world: each convention applies to several topics, its topics' facts link to it,
    and a good share of sessions need one (bench/README.md says why)."""
    from memory_world import World
    w = World(1, 180)
    conv = [f for f in w.facts.values() if f.topic == "conventions"]
    assert len(conv) == 30 and all(3 <= len(f.links) <= 6 for f in conv)
    ids = {f.fid for f in conv}
    assert sum(1 for f in w.facts.values() if f.topic != "conventions" and set(f.related) & ids) > 60
    share = sum(1 for s in w.sessions if any(n.fid in ids for n in s.needs)) / len(w.sessions)
    assert 0.4 < share < 0.8


def test_the_reference_is_skipped_with_one_line_when_missing(tmp_path):
    doc, text = run(tmp_path, "r.json", "--days", "10", "--max-tokens", "1500", "--policy", "kgd",
                    "--reference", str(tmp_path / "nowhere"), "--reference-python", "/nonexistent/python")
    assert [ln for ln in text.splitlines() if ln.startswith("reference skipped")]
    assert [r["policy"] for r in doc["runs"]] == ["kgd"]


@pytest.mark.skipif(not os.environ.get("KGD_BENCH_REFERENCE"),
                    reason="KGD_BENCH_REFERENCE=CHECKOUT:PYTHON names an installed reference (bench/README.md)")
def test_the_reference_row_runs_on_the_same_trace(tmp_path):
    checkout, python = os.environ["KGD_BENCH_REFERENCE"].split(":", 1)
    doc, text = run(tmp_path, "ref.json", "--days", "12", "--max-tokens", "5000", "--policy", "kgd-hooks",
                    "--reference", checkout, "--reference-python", python)
    runs = {r["policy"]: r for r in doc["runs"]}
    assert runs["reference"]["max_tokens"] == 0 and runs["reference"]["needs"] == runs["kgd-hooks"]["needs"]
    assert runs["reference"]["hook_errors"] == 0 and runs["reference"]["share_preload"] > 0
    assert "reference    own" in text


def _history_repo(tmp_path):
    """A small real git repository: functions of one module changed over a few commits."""
    import subprocess
    repo = tmp_path / "hist"
    repo.mkdir()
    env = clean_env(GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@x", GIT_COMMITTER_NAME="a",
               GIT_COMMITTER_EMAIL="a@x")

    def git(*args, when=None):
        e = dict(env, GIT_AUTHOR_DATE=when or "", GIT_COMMITTER_DATE=when or "")
        subprocess.run(["git", "-C", str(repo)] + list(args), check=True, env=e, capture_output=True)

    git("init", "-q")
    names = ["alpha", "beta", "gamma", "delta"]
    for k in range(12):
        body = "\n\n".join("def %s():\n    return %d\n" % (n, (k if i in (k % 4, (k + 1) % 4) else 0))
                           for i, n in enumerate(names))
        body += "\n\nclass Box:\n    def open(self):\n        return %d\n" % (k // 3)
        (repo / "mod.py").write_text(body)
        git("add", "mod.py")
        git("commit", "-q", "-m", "change %s and %s" % (names[k % 4], names[(k + 1) % 4]),
            when="2024-01-%02dT10:00:00" % (k + 1))
    return str(repo / ".git")


def test_the_history_world_replays_a_real_repository(tmp_path):
    gitdir = _history_repo(tmp_path)
    import memory_history_git
    doc = memory_history_git.extract(gitdir, 100)
    assert doc["n"] == 12 and not doc["shallow"]
    assert doc["commits"][1]["files"][0]["parts"] == ["beta", "gamma"]  # the functions whose lines changed
    assert "Box.open" in doc["commits"][3]["files"][0]["parts"]        # a method, not its class
    args = ["--world", "history", "--repo", gitdir, "--max-tokens", "5000"]
    a, out = run(tmp_path, "h1.json", *args)
    b, _ = run(tmp_path, "h2.json", *args)
    assert a == b
    assert "history: %s" % gitdir in out and "ch/p90" in out
    runs = by_policy(a)
    assert set(p for p, _ in runs) == {"kgd-hooks", "lru", "oracle"}
    needs = {r["needs"] for r in a["runs"]}
    assert len(needs) == 1 and needs.pop() > 10
    assert runs[("oracle", 5000)]["in_context"] == 100.0
    for r in a["runs"]:
        assert sum(r["outcomes"].values()) == r["needs"]
        assert r["chars_per_session_p90"] >= r["chars_per_session_median"] > 0
    assert runs[("kgd-hooks", 5000)]["in_context"] > 90  # a tiny graph fits the preload: its gists are seen
