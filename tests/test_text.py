"""kg/core/text.py: the compact JSON form and the clipped string, each defined once for every module."""

import glob
import os

import pytest

from kg.core.text import clip, compact_json

from helpers import REPO


@pytest.mark.parametrize("s, n, line, want", [
    ("short", 10, True, "short"),
    ("a  b\n c\t", 10, True, "a b c"),
    ("a  b\n c", 10, False, "a  b\n c"),
    ("abcdefghij", 5, True, "abcd…"),
    ("ab  cdefgh", 5, False, "ab  …"),
    ("abc", 1, True, "…"),
    ("abc", 0, True, "…"),
])
def test_clip(s, n, line, want):
    assert clip(s, n, line) == want


def test_compact_json_keeps_non_ascii_and_has_no_spaces():
    assert compact_json({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


def test_each_is_written_once():
    paths = glob.glob(os.path.join(REPO, "kg", "**", "*.py"), recursive=True)
    sources = {os.path.basename(p): open(p, encoding="utf-8").read() for p in paths}
    assert [n for n, s in sources.items() if 'separators=(",", ":")' in s] == ["text.py"]
    assert sorted(n for n, s in sources.items() if "def clip(" in s or "def _clip(" in s) == ["text.py"]
