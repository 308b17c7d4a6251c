"""kg/agents/shell_files.py's part finder: which definition an edit is in (contract section 12's
`PATH#NAME`), by keyword and indentation, and what an edit names when the file says nothing."""

import pytest

from kg.agents.shell_files import edit_site, edited_parts, part_at

PY = """import os

class Option:
    x = 1

    @property
    def name(self):
        return self._name

    def __init__(self, flag):
        a = 2

        def inner():
            pass
        b = 3


def top():
    return 1
"""

JS = """export function render(el) {
  const x = 1;
  return x;
}

class Store {
  get(key) { return 1; }
}
"""


@pytest.mark.parametrize("line, parts", [
    (0, []),                                         # module level: no part
    (3, ["Option"]),                                 # a class body outside its methods
    (6, ["Option.name", "Option"]),                  # the def line itself
    (7, ["Option.name", "Option"]),
    (10, ["Option.__init__", "Option"]),
    (13, ["Option.__init__.inner", "Option.__init__", "Option"]),
    (14, ["Option.__init__", "Option"]),             # back out of the nested function
    (18, ["top"]),
])
def test_part_at_python(line, parts):
    assert part_at(PY, line) == parts


def test_part_at_other_languages_by_keyword():
    assert part_at(JS, 1) == ["render"]
    assert part_at(JS, 5) == ["Store"]


def test_edited_parts_finds_the_new_text_else_the_old(tmp_path):
    f = tmp_path / "core.py"
    f.write_text(PY)
    assert edited_parts(str(f), ["return 1", None]) == ["top"]
    assert edited_parts(str(f), ["not there", "a = 2"]) == ["Option.__init__", "Option"]
    assert edited_parts(str(f), ["", "nowhere"]) == []
    assert edited_parts(str(tmp_path / "missing.py"), ["x"]) == []
    assert edited_parts(str(tmp_path), ["x"]) == []  # a folder names no part


def test_edit_site_gives_the_parts_and_every_part_span_in_one_read(tmp_path):
    from kg.core import staleness

    f = tmp_path / "core.py"
    f.write_text(PY)
    names, spans = edit_site(str(f), ["return 1", None])
    assert names == ["top"] and spans == staleness.part_spans(PY, str(f)) and "Option.__init__" in spans
    assert edit_site(str(f), ["nowhere"]) == ([], {})
    assert edit_site(str(tmp_path / "missing.py"), ["x"]) == ([], {})
