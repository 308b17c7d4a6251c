"""kg/agents/part_code.py: the prompt's words in the code of the parts knowledge is about (the hint
that leads file recall). Pure rules with tables; the file cache against real files."""

import math
import os

import pytest

from kg.agents import part_code, recall

SRC = '''\
class Lexer:
    def tokenize(self, source):
        return self.tokeniter(source, "trim_blocks")

    def tokeniter(self, source, mode):
        return [source, mode]


def compile_templates(env, target):
    return [env, target]
'''


def test_part_words_cover_every_part_and_a_class_holds_its_methods():
    words = part_code.part_words(SRC, "lexer.py")
    assert {"Lexer", "Lexer.tokenize", "Lexer.tokeniter", "compile_templates"} <= set(words)
    assert "trim" in words["Lexer.tokenize"] and "block" in words["Lexer.tokenize"]
    assert "trim" in words["Lexer"]  # the class's lines hold its methods'
    assert "trim" not in words["compile_templates"]
    assert part_code.part_words("not python at all {{", "notes.txt") == {}


@pytest.mark.parametrize("parts, qwords, want", [
    # a word only one part holds: log(1 + n / 1); one every part holds tells none apart: nothing
    ({"a": {"trim", "x"}, "b": {"x"}}, {"trim"}, {"a": math.log(3)}),
    ({"a": {"trim", "x"}, "b": {"x"}}, {"x"}, {}),
    ({"a": {"trim", "x"}, "b": {"x"}}, {"trim", "x"}, {"a": math.log(3)}),
    ({"a": {"trim", "x"}, "b": {"x", "y"}, "c": {"y"}}, {"trim", "y"}, {"a": math.log(4), "b": math.log(2.5),
                                                                         "c": math.log(2.5)}),
    ({"a": {"x"}}, {"x"}, {}),            # one part: nothing to tell apart
    ({"a": {"x"}}, {"y"}, {}),            # no word held: no score
    ({}, {"x"}, {}),                      # no parts
    ({"a": {"x"}}, set(), {}),            # no prompt words
])
def test_scores_table(parts, qwords, want):
    parts = {k: frozenset(v) for k, v in parts.items()}
    got = part_code.scores(parts, qwords)
    assert part_code.scores(None, qwords, part_code.inverted(parts)) == got
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v)


def test_node_scores_rank_the_part_whose_code_holds_the_prompt_words(tmp_path):
    (tmp_path / "lexer.py").write_text(SRC)
    path = str(tmp_path / "lexer.py")
    wanted = {path: [("project:k-tok", "Lexer.tokenize"), ("project:k-iter", "Lexer.tokeniter"),
                     ("project:k-comp", "compile_templates"), ("project:k-gone", "vanished")]}
    got = part_code.node_scores(wanted, "trim_blocks is ignored when tokenizing", cache=part_code.Cache())
    assert max(got, key=got.get) == "project:k-tok"
    assert "project:k-comp" not in got and "project:k-gone" not in got


def test_the_cache_reads_a_file_again_only_when_it_changed(tmp_path, monkeypatch):
    (tmp_path / "lexer.py").write_text(SRC)
    path = str(tmp_path / "lexer.py")
    cache = part_code.Cache(max_files=1)
    inv, cost = cache.get(path, part_code.SCAN_BYTES)
    assert cost == os.path.getsize(path) and inv == part_code.inverted(part_code.part_words(SRC, path))
    assert cache.get(path, part_code.SCAN_BYTES) == (inv, 0)  # kept: nothing read
    (tmp_path / "lexer.py").write_text(SRC + "\n\ndef rewind_blocks():\n    return 1\n")
    os.utime(path, ns=(1, 1))
    inv2, cost2 = cache.get(path, part_code.SCAN_BYTES)
    assert cost2 > 0 and inv2[1]["rewind"] == ("rewind_blocks",)
    (tmp_path / "other.py").write_text("def f():\n    return 1\n")
    cache.get(str(tmp_path / "other.py"), part_code.SCAN_BYTES)
    assert list(cache.files) == [str(tmp_path / "other.py")]  # one file kept: the oldest dropped


def test_bounds_a_missing_file_a_big_one_and_the_budget(tmp_path, monkeypatch):
    cache = part_code.Cache()
    assert cache.get(str(tmp_path / "missing.py"), part_code.SCAN_BYTES) == (None, 0)
    assert cache.get(str(tmp_path), part_code.SCAN_BYTES) == (None, 0)  # a folder
    (tmp_path / "a.py").write_text(SRC)
    assert cache.get(str(tmp_path / "a.py"), 10) == (None, 0)  # over what is left of the budget
    monkeypatch.setattr(part_code, "FILE_MAX", 10)
    assert cache.get(str(tmp_path / "a.py"), part_code.SCAN_BYTES) == (None, 0)  # over FILE_MAX


def test_one_prompt_reads_at_most_the_budget_most_knowledge_first(tmp_path, monkeypatch):
    for name in ("few.py", "many.py"):
        (tmp_path / name).write_text(SRC)
    size = os.path.getsize(str(tmp_path / "few.py"))
    monkeypatch.setattr(part_code, "SCAN_BYTES", size + 1)  # room for one file
    wanted = {str(tmp_path / "few.py"): [("project:f", "Lexer.tokenize")],
              str(tmp_path / "many.py"): [("project:m1", "Lexer.tokenize"), ("project:m2", "Lexer")]}
    got = part_code.node_scores(wanted, "trim the blocks", cache=part_code.Cache())
    assert set(got) == {"project:m1", "project:m2"}


@pytest.mark.parametrize("touch, kept", [
    ("src/lexer.py#Lexer.tokenize", True),
    ("src/lexer.py", False),               # the whole file: no part to score
    ("src/lexer.py:3-9", False),           # lines, not a named part
    ("../outside.py#f", False),            # never a file outside the project
    ("/etc/passwd#root", False),
    ("https://example.com/x#frag", False),
])
def test_part_files_only_part_touches_inside_the_project(tmp_path, touch, kept):
    ix = recall.Index({"n": {"id": "n", "gist": "g", "notes": [], "touches": [touch]}}, {})
    got = recall.part_files(recall.part_touches([("project", ix)]), str(tmp_path))
    assert bool(got) is kept
    if kept:
        assert got == {str(tmp_path / "src" / "lexer.py"): [("project:n", "Lexer.tokenize")]}
    assert recall.part_files(recall.part_touches([("user", ix)]), str(tmp_path)) == {}  # the project level only
    assert recall.part_files(recall.part_touches([("project", ix)]), "relative/root") == {}


def test_the_index_keeps_part_touches_through_a_rebuild():
    n1 = {"id": "a", "gist": "g", "notes": [], "touches": ["x.py#f"]}
    ix = recall.Index({"a": n1}, {})
    assert ix.named == {"a": (("x.py", "f"),)}
    n2 = dict(n1, touches=["x.py#g"])
    ix2 = recall.Index({"a": n2, "b": {"id": "b", "gist": "h", "notes": [], "touches": ["y.py"]}}, {}, prev=ix)
    assert ix2.named == {"a": (("x.py", "g"),)}
    ix3 = recall.Index({}, {}, prev=ix2)
    assert ix3.named == {}


def test_an_edit_scores_the_parts_sharing_its_words():
    edits = [{"old_string": "return [source, mode]", "new_string": "return [target]"}, {"new_string": 3}, "x"]
    assert part_code.edit_text([e for e in edits if isinstance(e, dict)]) == "return [source, mode]\nreturn [target]"
    assert part_code.edit_text([{"old_string": None}]) == ""
    assert part_code.edit_text([{"new_string": "a"}] * (part_code.EDITS_MAX + 5)).count("a") == part_code.EDITS_MAX
    huge = part_code.edit_text([{"old_string": "x" * 10 ** 6, "new_string": "retry_limit"}])
    assert len(huge) == part_code.EDIT_CHARS + 1 + len("retry_limit")
    assert "retry" in recall.prompt_words(huge)  # the new text still counts


def test_an_edit_text_scores_parts_like_a_prompt(tmp_path):
    (tmp_path / "lexer.py").write_text(SRC)
    path = str(tmp_path / "lexer.py")
    wanted = {path: [("project:k-comp", "compile_templates"), ("project:k-iter", "Lexer.tokeniter")]}
    got = part_code.node_scores(wanted, part_code.edit_text([{"old_string": "x", "new_string": "return [target]"}]),
                                cache=part_code.Cache())
    assert list(got) == ["project:k-comp"]  # "target" is only there; "return" every part holds


def test_best_keeps_the_highest_scores_ties_by_key(monkeypatch):
    monkeypatch.setattr(part_code, "SCORES_MAX", 2)
    assert part_code.best({"b": 1.0, "a": 1.0, "c": 3.0}) == [("c", 3.0), ("a", 1.0)]


def test_warm_reads_the_files_into_the_cache_and_never_raises(tmp_path, caplog):
    (tmp_path / "a.py").write_text(SRC)
    cache = part_code.Cache()
    part_code.warm({str(tmp_path / "a.py"): [("project:k", "Lexer")], str(tmp_path / "gone.py"): []}, cache)
    assert list(cache.files) == [str(tmp_path / "a.py")]

    class Broken(part_code.Cache):
        def get(self, path, budget):
            raise RuntimeError("disk on fire")
    part_code.warm({str(tmp_path / "a.py"): []}, Broken())  # logged, not raised
    assert "part touches failed" in caplog.text
