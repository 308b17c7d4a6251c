"""kg/secrets/prefilter.py: the secrets check runs a kind only on a text holding one of its leading literals,
and gives exactly the answer of the whole table. Corpora are generated at run time."""

import random
import re

import pytest

from kg.secrets import fields as secretfields
from kg.secrets import kinds as secrets
from kg.secrets import prefilter as triggers

import secrets_corpus
import secrets_hostile


class _All:
    """The pre-filter switched off: every kind runs on every text."""

    def kinds_to_run(self, low):
        return secrets.KINDS


def _unfiltered(monkeypatch, text):
    with monkeypatch.context() as m:
        m.setattr(secrets, "_PREFILTER", _All())
        return secrets.find(text)


def _texts():
    out = [text for _, text in secrets_corpus.credentials(1019)] + [text for _, text in secrets_corpus.credentials(7)]
    out += secrets_corpus.near_misses() + [text for _, text, _ in secrets_hostile.hostile_credentials()]
    out += secrets_hostile.hostile_near_misses()
    out += list(secrets_corpus.adversarial(1 << 14).values())
    # Fragments glued at random: literals inside and across other literals, upper and lower case.
    rng = random.Random(11)
    frags = sorted(secrets._PREFILTER.all) + [t.upper() for t in secrets._PREFILTER.all] + [
        "=", ": ", " ", "\n", "\"", "x9Qz", "Kp3vT8rWq2LmN5bY7cJd", "\u200b", "%6B", "\uff54"]
    for _ in range(400):
        out.append("".join(rng.choice(frags) for _ in range(rng.randint(1, 12))))
    for kind, text in secrets_corpus.credentials(3):  # each credential inside prose and after other triggers
        out.append("the auth token --flag sk- value " + text + " trailing words")
    return out


def test_the_answer_is_the_whole_tables(monkeypatch):
    texts = _texts()
    assert sum(secrets.find(t) is not None for t in texts) > 100  # the comparison covers hits
    for text in texts:
        assert secrets.find(text) == _unfiltered(monkeypatch, text), text[:200]


def test_every_kind_of_the_table_has_a_trigger():
    # kg/secrets/kinds.py's rule: each kind's regex starts with a literal. A kind without one would run on
    # every text (correct, but the pre-filter would no longer spare most texts).
    assert [k.regex.pattern for k, t in zip(secrets.KINDS, secrets._PREFILTER.of_kind) if t is None] == []


def test_prose_without_a_trigger_runs_no_regex():
    low = secrets._lowered("The retry path uses exponential backoff with jitter; see kg/store.py line 40.")
    assert secrets._PREFILTER.kinds_to_run(low) == ()


def test_a_trigger_inside_a_longer_one_runs_both_kinds():
    run = {k.kind for k in secrets._PREFILTER.kinds_to_run("key sk-ant-xyz")}
    assert {"anthropic", "openai"} <= run


@pytest.mark.parametrize("pattern, expected", [
    (r"abc[0-9]+", {"abc"}),
    (r"(?:AKIA|ASIA)(?<![A-Z]....)[A-Z0-9]{16}", {"akia", "asia"}),
    (r"gh[pou]_(?<!x)[a-z]+", {"ghp_", "gho_", "ghu_"}),
    (r"(?P<kw>pass(?:word|wd)?)[=:]", {"pass"}),
    (r"credentials?=", {"credential"}),
    (r"\bbearer\s", {"bearer"}),
    (r" -(?P<flag>[pa]|-user)", {" -p", " -a", " --user"}),
])
def test_triggers_read_from_the_pattern(pattern, expected):
    assert triggers.triggers(re.compile(pattern)) == frozenset(expected)


@pytest.mark.parametrize("pattern", [
    r"(?i)token=", r"[a-z]+=secret", r"x+abc", r"a|bc", r"\d{4}-key", r"(?i:ab)cd",
])
def test_no_trigger_when_none_can_be_read(pattern):
    assert triggers.triggers(re.compile(pattern)) is None


def test_a_kind_without_trigger_always_runs():
    kinds = [secrets.Kind("a", "a", re.compile("[0-9]{4}x"), None, False),
             secrets.Kind("b", "b", re.compile("tok[0-9]"), None, False)]
    f = triggers.Prefilter(kinds)
    assert [k.kind for k in f.kinds_to_run("nothing here")] == ["a"]
    assert [k.kind for k in f.kinds_to_run("a tok9")] == ["a", "b"]


def test_a_long_text_holding_a_trigger_runs_every_kind():
    low = "plain words " * (triggers.MAX_NAMED // 12) + "token"
    assert list(secrets._PREFILTER.kinds_to_run(low)) == list(secrets.KINDS)
    assert secrets._PREFILTER.kinds_to_run(low[:-5] * 10) == ()


def test_a_text_longer_than_any_node_runs_every_kind():
    low = "plain words " * (triggers.MAX_FILTERED // 12 + 1)
    assert list(secrets._PREFILTER.kinds_to_run(low)) == list(secrets.KINDS)


@pytest.mark.parametrize("words, yes, no", [
    (["sk-", "sk-ant-", "secret"], ["a sk-x", "sk-ant-", "secrets"], ["sk", "secre", "s k-"]),
    ([" -p", " --user", "--"], [" -p", "a --user", "x--"], ["-p", " -", " -u"]),
])
def test_the_first_step_finds_any_word(words, yes, no):
    found = re.compile(triggers._trie(words))
    assert all(found.search(t) for t in yes)
    assert not any(found.search(t) for t in no)


def test_the_same_text_scanned_again_is_not_searched_again(monkeypatch):
    # A put scans what was sent, then the node, then its graph does: one search of the same text.
    calls = []
    real = secrets.find
    monkeypatch.setattr(secretfields, "find", lambda t: calls.append(t) or real(t))
    node = {"id": "n-%x" % random.getrandbits(64), "gist": "the retry path", "notes": ["uses backoff"], "touches": []}
    assert secretfields.scan_node(node) is None and secretfields.scan_node(dict(node)) is None
    assert len(calls) == 1
    node["notes"] = ["uses the token " + "Kp3vT8rWq2LmN5bY7cJdX4"]
    assert secretfields.scan_node(node) == secretfields.scan_node(node)
    assert len(calls) == 1 + 1 + 3 + 3  # the whole text once; the fields, to name the one that holds it


def _by_each_trigger(low):
    """The second step by its definition: every kind one of whose triggers the text holds."""
    f = secrets._PREFILTER
    if not any(t in low for t in f.all):
        return ()
    return [k for k, ts in zip(f.kinds, f.of_kind) if ts is None or any(t in low for t in ts)]


def test_the_second_step_names_the_kinds_of_every_trigger_the_text_holds():
    # Each place a trigger starts, the longest one there and its prefixes; " -p" and the like on their own.
    # Triggers glued, overlapping (passecret, sk-ant-, -----begin --user) and inside each other, at random.
    rng = random.Random(23)
    frags = sorted(secrets._PREFILTER.all) + ["x", " ", "a", "-", "s", "k", "_", "\n", ":", "/", "p", "t"]
    texts = ["passecret", "tokenpm_", "sk-ant-", "-----begin --user", "x -p", "a -- user", "authorization",
             "pass:", "hooks.slack.com/services/t", "private-lines:", " --user -w -a", "--", " -", "-p"]
    texts += ["".join(rng.choice(frags) for _ in range(rng.randint(1, 16))) for _ in range(20000)]
    for low in texts:
        assert list(secrets._PREFILTER.kinds_to_run(low)) == list(_by_each_trigger(low)), low


@pytest.mark.parametrize("yes, no", [
    (["x -p", " -p", "a --user", "x--", "sk-", "a -w1"], ["-p", " -", "b-w1326-0", "x- p", "- -user"]),
])
def test_the_first_step_finds_a_blank_trigger_from_its_second_character(yes, no):
    found = triggers._first_step([" -p", " --user", " -w", "--", "sk-"])
    assert all(found.search(t) for t in yes)
    assert not any(found.search(t) for t in no)
    assert " " not in triggers._first_step([" -p", "sk-"]).pattern.split("(?<=")[0]  # no stop at every space
