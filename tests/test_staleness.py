"""kg/core/staleness.py: the pure rule of contract section 12, table by table."""

import subprocess

import pytest

from kg.core import staleness as st
from kg.core.staleness import Change, Seen

from helpers import clean_env


@pytest.mark.parametrize("touch, want", [
    ("src/a.py", ("src/a.py", None)),
    ("src/a.py#refresh", ("src/a.py", ("name", "refresh"))),
    ("src/a.py#Auth.refresh", ("src/a.py", ("name", "Auth.refresh"))),
    ("src/a.py:10-20", ("src/a.py", ("lines", 10, 20))),
    ("src/a.py:7", ("src/a.py", ("lines", 7, 7))),
    ("src/a.py:20-10", ("src/a.py:20-10", None)),      # backwards: a name, not a range
    ("src/a.py:0-3", ("src/a.py:0-3", None)),
    ("#anchor", ("#anchor", None)),                     # no path before the part
    ("https://x.org/a#b", (None, None)),
    ("", (None, None)),
    ("  ", (None, None)),
    (None, (None, None)),
])
def test_split_touch(touch, want):
    assert st.split_touch(touch) == want


def test_blob_id_is_gits(tmp_path):
    for data in (b"", b"hello\n", "caf\u00e9\r\nx".encode()):
        p = tmp_path / "f"
        p.write_bytes(data)
        git = subprocess.run(["git", "hash-object", str(p)], capture_output=True, text=True,
                             env=clean_env()).stdout.strip()
        assert st.blob_id(data) == git


@pytest.mark.parametrize("data, n", [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"a\n\n", 2)])
def test_line_count(data, n):
    assert st.line_count(data) == n


PY = b'''import os


@decorated
def refresh(token):
    return token + 1


class Auth:
    def refresh(self):
        return 2

    def other(self):
        return 3
'''


@pytest.mark.parametrize("path, name, span", [
    ("a.py", "refresh", (3, 5)),              # decorators included, the top-level one first
    ("a.py", "Auth.refresh", (9, 10)),
    ("a.py", "Auth", (8, 13)),
    ("a.py", "other", (12, 13)),              # found inside the class
    ("a.py", "missing", None),
    ("a.py", "Auth.missing", None),
])
def test_python_parts(path, name, span):
    assert st.part_span(PY.decode().split("\n"), path, name) == span


JS = """export function refresh(token) {
  if (token) {
    return 1;
  }
}

class Auth {
  refresh() { return 2; }
}

func (s *Server) Handle(w http.ResponseWriter) {
\treturn
}
"""

RB = """class Auth
  def refresh
    1
  end
end
"""


@pytest.mark.parametrize("text, path, name, span", [
    (JS, "a.js", "refresh", (0, 4)),
    (JS, "a.js", "Auth", (6, 8)),
    (JS, "a.go", "Handle", (10, 12)),
    (RB, "a.rb", "refresh", (1, 3)),
    (RB, "a.rb", "Auth.refresh", (1, 3)),
    (RB, "a.rb", "Auth", (0, 4)),
    ("def broken(:\n    x\n", "a.py", "broken", (0, 1)),   # not Python any more: by keyword
    (JS, "a.js", "nothere", None),
])
def test_keyword_parts(text, path, name, span):
    assert st.part_span(text.split("\n"), path, name) == span


@pytest.mark.parametrize("text, path", [(PY.decode(), "a.py"), (JS, "a.js"), (JS, "a.go"), (RB, "a.rb"),
                                         ("def broken(:\n    x\n", "a.py")])
def test_part_spans_are_part_span_for_every_part(text, path):
    """One pass gives every part where part_span finds it (file recall orders by nearness with it)."""
    spans = st.part_spans(text, path)
    assert spans
    lines = text.split("\n")
    for name, span in spans.items():
        assert st.part_span(lines, path, name) == span, name


def test_part_spans_names():
    assert sorted(st.part_spans(PY.decode(), "a.py")) == ["Auth", "Auth.other", "Auth.refresh", "other", "refresh"]
    assert sorted(st.part_spans(RB, "a.rb")) == ["Auth", "Auth.refresh"]
    assert st.part_spans("x = 1\n", "a.py") == {}


@pytest.mark.parametrize("a, b, gap", [
    ((3, 5), (3, 5), 0), ((3, 5), (5, 9), 0), ((0, 20), (4, 6), 0),   # overlapping (a class and its method)
    ((0, 2), (10, 12), 8), ((10, 12), (0, 2), 8), ((0, 2), (3, 4), 1),
])
def test_span_gap(a, b, gap):
    assert st.span_gap(a, b) == gap


def test_a_part_changes_only_with_its_own_text():
    before = st.state_of(PY, "a.py", ("name", "Auth.refresh"))
    elsewhere = PY.replace(b"return 3", b"return 30").replace(b"import os", b"import os, sys")
    assert st.state_of(elsewhere, "a.py", ("name", "Auth.refresh")) == before
    moved = b"# a comment\n\n" + PY
    assert st.state_of(moved, "a.py", ("name", "Auth.refresh")) == before
    spaces = PY.replace(b"return 2", b"return 2   ").replace(b"\n", b"\r\n")
    assert st.state_of(spaces, "a.py", ("name", "Auth.refresh")) == before
    changed = PY.replace(b"return 2", b"return 22")
    assert st.state_of(changed, "a.py", ("name", "Auth.refresh"))["id"] != before["id"]
    assert st.state_of(PY.replace(b"class Auth", b"class Other"), "a.py", ("name", "Auth.refresh")) is None


def test_lines_followed_where_their_text_moved():
    data = b"".join(b"line %d\n" % i for i in range(1, 41))
    rec = st.state_of(data, "a.txt", ("lines", 10, 12))
    assert rec["lines"] == 3
    shifted = b"new\nnew\n" + data
    assert st.state_of(shifted, "a.txt", ("lines", 10, 12), rec)["id"] == rec["id"]
    edited = data.replace(b"line 11\n", b"line eleven\n")
    assert st.state_of(edited, "a.txt", ("lines", 10, 12), rec)["id"] != rec["id"]
    assert st.state_of(data[:20], "a.txt", ("lines", 10, 12), rec) is None   # the file got shorter


REC = {"commit": "c" * 40, "files": {
    "src/a.py": {"id": "A1", "lines": 400},
    "src/b.py#refresh": {"id": "pB1", "lines": 12},
    "big.bin": {"size": 10, "mtime": 5.0},
}}


@pytest.mark.parametrize("touch, seen, detail, want", [
    # current
    ("src/a.py", Seen(True, {"id": "A1", "lines": 400}, None), None, None),
    ("src/b.py#refresh", Seen(True, {"id": "pB1", "lines": 12}, None), None, None),
    ("big.bin", Seen(True, {"size": 10, "mtime": 5.0}, None), None, None),
    # could not be judged: never marked
    ("src/a.py", None, None, None),
    ("src/a.py", Seen(None, None, None), None, None),
    ("src/a.py", Seen(True, {"id": None}, None), None, None),
    ("big.bin", Seen(True, {}, None), None, None),
    # stale
    ("src/a.py", Seen(True, {"id": "A2", "lines": 410}, None), (4, 14, 410),
     Change("src/a.py", "src/a.py", None, "changed", None, 4, 14, 410)),
    ("src/a.py", Seen(False, None, None), (1, None, None),
     Change("src/a.py", "src/a.py", None, "deleted", None, 1, None, None)),
    ("src/a.py", Seen(False, None, "src/c.py"), None,
     Change("src/a.py", "src/a.py", None, "renamed", "src/c.py", None, None, None)),
    ("src/b.py#refresh", Seen(True, None, None), None,
     Change("src/b.py#refresh", "src/b.py", ("name", "refresh"), "vanished", None, None, None, None)),
    ("src/b.py#refresh", Seen(True, {"id": "pB2", "lines": 15}, None), (2, 30, 500),
     Change("src/b.py#refresh", "src/b.py", ("name", "refresh"), "changed", None, 2, None, 15)),
    ("big.bin", Seen(True, {"size": 11, "mtime": 5.0}, None), None,
     Change("big.bin", "big.bin", None, "changed", None, None, None, None)),
])
def test_judge_touch(touch, seen, detail, want):
    assert st.judge_touch(touch, REC["files"][touch], seen, detail) == want


def test_judge_a_node_orders_what_matters_first():
    seen = {"src/a.py": Seen(True, {"id": "A2", "lines": 400}, None), "src/b.py#refresh": Seen(False, None, None),
            "big.bin": Seen(True, {"size": 10, "mtime": 5.0}, None)}
    got = st.judge(REC, seen, {"src/a.py": (4, 14, 400)})
    assert [c.kind for c in got] == ["deleted", "changed"]
    assert st.mark(got) == "stale: refresh in src/b.py deleted (+1 more)"
    assert st.judge({"files": "bad"}, seen) == [] and st.judge(None, seen) == []
    assert st.judge(REC, {}) == []


def _c(**kw):
    base = dict(touch="src/x.py", path="src/x.py", part=None, kind="changed", to=None, commits=None,
                changed=None, total=None)
    base.update(kw)
    return Change(**base)


@pytest.mark.parametrize("changes, text", [
    ([], ""),
    ([_c(commits=4)], "stale: src/x.py changed, 4 commits ago"),
    ([_c(commits=1)], "stale: src/x.py changed, 1 commit ago"),
    ([_c(changed=14, total=400)], "stale: src/x.py changed, 14 of 400 lines"),
    ([_c(changed=14, total=400, commits=0)], "stale: src/x.py changed, 14 of 400 lines, not committed"),
    ([_c(kind="deleted")], "stale: src/x.py deleted"),
    ([_c(kind="renamed", to="src/y.py", commits=1)], "stale: src/x.py renamed to src/y.py, 1 commit ago"),
    ([_c(part=("name", "refresh_token"), commits=2)], "stale: refresh_token in src/x.py changed, 2 commits ago"),
    ([_c(part=("name", "f"), kind="vanished")], "stale: f in src/x.py removed"),
    ([_c(part=("lines", 3, 9))], "stale: lines 3-9 of src/x.py changed"),
    ([_c(), _c(), _c()], "stale: src/x.py changed (+2 more)"),
])
def test_mark(changes, text):
    assert st.mark(changes) == text


@pytest.mark.parametrize("changes, said, text", [
    # the line's gist names the part or file verbatim: the mark gives only the news
    ([_c(part=("name", "Option.flag"), commits=2)], "Option.flag in src/x.py: parses --flag",
     "stale: changed, 2 commits ago"),
    ([_c(changed=14, total=400)], "src/x.py holds the pool", "stale: changed, 14 of 400 lines"),
    ([_c(part=("name", "f"), kind="vanished")], "f in src/x.py: the entry", "stale: removed"),
    ([_c(kind="deleted")], "src/x.py is the entry", "stale: deleted"),
    # a gist that names it only in part, or not at all, keeps the name
    ([_c(part=("name", "f"), commits=1)], "f retries once", "stale: f in src/x.py changed, 1 commit ago"),
    ([_c(part=("name", "f"))], "", "stale: f in src/x.py changed"),
    ([_c(part=("name", "f"))], None, "stale: f in src/x.py changed"),
    # a rename names where it went; two changes say which one leads
    ([_c(kind="renamed", to="src/y.py")], "src/x.py holds it", "stale: src/x.py renamed to src/y.py"),
    ([_c(), _c(path="src/z.py", touch="src/z.py")], "src/x.py and src/z.py", "stale: src/x.py changed (+1 more)"),
])
def test_mark_said_on_a_line_that_names_it(changes, said, text):
    assert st.mark(changes, said) == text


def test_mark_stays_short():
    long = "d/" * 200 + "x.py"
    text = st.mark([_c(path=long, touch=long, kind="renamed", to=long, changed=1, total=2, commits=3)] * 9)
    assert len(text) <= st.MARK_MAX and text.startswith("stale: …")


GOOD = {"commit": "a" * 40, "files": {"src/a.py": {"id": "b" * 40, "lines": 3}, "big": {"size": 9, "mtime": 1.5}}}


@pytest.mark.parametrize("files, ok", [
    (GOOD, True),
    ({"files": {"a.py": {"id": "p" + "c" * 24, "lines": 0}}}, True),      # no commit: a plain folder
    (None, False), ("x", False), ({}, False), ({"files": {}}, False),
    ({"files": GOOD["files"], "commit": "HEAD"}, False),
    ({"files": GOOD["files"], "commit": "A" * 40}, False),
    ({"files": GOOD["files"], "extra": 1}, False),
    ({"files": {"a.py": {}}}, False),
    ({"files": {"a.py": {"lines": 3}}}, False),                           # no id nor size
    ({"files": {"a.py": {"id": "x y"}}}, False),
    ({"files": {"a.py": {"id": "b" * 65}}}, False),
    ({"files": {"a.py": {"id": "b", "lines": True}}}, False),
    ({"files": {"a.py": {"id": "b", "lines": -1}}}, False),
    ({"files": {"a.py": {"size": 1, "mtime": float("nan")}}}, False),
    ({"files": {"a.py": {"id": "b", "owner": "x"}}}, False),
    ({"files": {"": {"id": "b"}}}, False),
    ({"files": {"a\n.py": {"id": "b"}}}, False),
    ({"files": {"t%d" % i: {"id": "b"} for i in range(st.MAX_STATES + 1)}}, False),
])
def test_check_files_from_an_untrusted_line(files, ok):
    got = st.check_files({"files": files})
    assert got == ({"files": files} if ok else {})
    if ok:  # through memory and back to a line: the same
        node = st.memory_files(got)
        assert st.files_field(node) == got and node["_files"] is not got["files"]


def test_files_field_of_a_node_without_states():
    assert st.files_field({}) == {} and st.files_field({"_files": {"files": {}}}) == {}
    assert st.memory_files({}) == {}


OVERLOADED = '''import typing


class Param:
    @typing.overload
    def get(self, call: True) -> int: ...

    @typing.overload
    def get(self, call: False) -> str: ...

    def get(self, call=True):
        return 1 if call else "1"


if typing.TYPE_CHECKING:
    def hidden():
        pass
else:
    def shown():
        return 2
'''


@pytest.mark.parametrize("name, span", [
    ("Param.get", (4, 11)),   # the overload stubs and the real body: one part, first to last
    ("get", (4, 11)),
    ("hidden", (15, 16)),     # under an if
    ("shown", (18, 19)),      # under its else
])
def test_an_overloaded_name_is_one_part_from_its_first_definition_to_its_last(name, span):
    assert st.part_span(OVERLOADED.split("\n"), "p.py", name) == span


def test_a_change_to_an_overloaded_functions_body_changes_its_part():
    before = st.state_of(OVERLOADED.encode(), "p.py", ("name", "Param.get"))
    after = st.state_of(OVERLOADED.replace('"1"', '"one"').encode(), "p.py", ("name", "Param.get"))
    assert before["id"] != after["id"]
