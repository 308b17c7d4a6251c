"""The README's "where each rule lives" table is true: every file it names exists, and every
module of kg/ is named there (so a newcomer finds each rule in one place)."""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _table():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("| contract | module |")
    return text[start:text.index("\n\n", start)]


def test_every_module_the_table_names_exists():
    named = set(re.findall(r"`(kg/[\w/.]+)`", _table()))
    assert named
    missing = sorted(p for p in named if not os.path.exists(os.path.join(REPO, p)))
    assert not missing, "README names modules that do not exist: %s" % missing


def test_every_module_is_in_the_table():
    named = set(re.findall(r"`(kg/[\w/.]+)`", _table()))
    modules = {"kg/" + f for f in os.listdir(os.path.join(REPO, "kg")) if f.endswith(".py") and f != "__init__.py"}
    assert not sorted(modules - named), "modules missing from the README's table: %s" % sorted(modules - named)
