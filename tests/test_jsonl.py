"""kg/core/jsonl.py: the one loop that reads the personal remote's untrusted line files."""

import json

import pytest

from kg.core import jsonl, kg_format
from kg.core.errors import BadInput


def _check(obj):
    if not isinstance(obj, dict) or not isinstance(obj.get("k"), str):
        raise BadInput("k must be a string")
    return {"k": obj["k"], "n": obj.get("n", 0)}


def _read(data, **kw):
    return jsonl.records(data, "f.jsonl", _check, lambda r: r["k"], lambda a, b: max(a, b, key=lambda r: r["n"]), **kw)


def _line(**rec):
    return json.dumps(rec).encode()


@pytest.mark.parametrize("data, keys, problems", [
    (b"", [], []),
    (None, [], []),
    (_line(k="a") + b"\n" + _line(k="b") + b"\n", ["a", "b"], []),
    (kg_format.BOM + _line(k="a"), ["a"], []),  # an editor's byte order mark: the first line is still read
    (b"<<<<<<< HEAD\n" + _line(k="a") + b"\n=======\n>>>>>>> x\n", ["a"], []),
    (b"\r\n\n" + _line(k="a") + b"\r\n", ["a"], []),
    (b"{not json\n" + _line(k="a"), ["a"], ["f.jsonl line 1: not JSON"]),
    (_line(k=1) + b"\n" + _line(k="a"), ["a"], ["f.jsonl line 1: k must be a string"]),
    (b"[1]\n", [], ["f.jsonl line 1: k must be a string"]),
    (b"\xff\xfe\n", [], ["f.jsonl line 1: not JSON"]),
])
def test_lines(data, keys, problems):
    out, got = _read(data)
    assert sorted(out) == keys and got == problems


def test_lines_of_one_key_are_merged_by_the_files_rule_in_any_order():
    lines = [_line(k="a", n=n) for n in (3, 9, 1)]
    assert _read(b"\n".join(lines))[0]["a"]["n"] == 9
    assert _read(b"\n".join(reversed(lines)))[0]["a"]["n"] == 9


def test_bounds_and_the_count_of_problems_left_out():
    assert _read(b"x" * (kg_format.MAX_FILE + 1))[1][0].startswith("f.jsonl is ")
    long = b'{"k": "' + b"a" * kg_format.MAX_LINE + b'"}'
    assert _read(long)[1] == ["f.jsonl line 1: line over %d bytes" % kg_format.MAX_LINE]
    out, problems = _read(b"\n".join([b"bad"] * (kg_format.MAX_PROBLEMS + 5)))
    assert len(problems) == kg_format.MAX_PROBLEMS + 1 and problems[-1] == "f.jsonl: 5 more bad lines skipped"


def test_known_lines_are_not_parsed_again_and_fresh_collects_this_parse():
    line = _line(k="a", n=2)
    fresh = {}
    out, _ = _read(line, known={line: {"k": "a", "n": 7}}, fresh=fresh)
    assert out["a"]["n"] == 7 and fresh == {line: {"k": "a", "n": 7}}
