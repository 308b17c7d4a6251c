"""kg/core/model.py: node states, the token estimate of contract section 5, and argument validation.

Tables of cases; no store, no disk.
"""

import pytest

from kg.core import model
from kg.core.errors import BadInput
from kg.core.model import (
    ACTIVE,
    ARCHIVED,
    ORPHANED,
    edge_counts,
    edge_key,
    estimate_tokens,
    node_state,
    node_tokens,
    recency,
)

from helpers import node as make_node


def node(nid="n", gist="", notes=(), archived=False, orphaned=None, **times):
    fields = {"_archived": archived, "_orphaned_ts": orphaned, "_created_ts": None, "_write_ts": None, "_read_ts": None}
    fields.update(times)
    return make_node(nid, gist, notes, **fields)


def edge(frm, to, rel="rel"):
    return {"from": frm, "to": to, "rel": rel, "notes": []}


# ---------------------------------------------------------------- node_state

@pytest.mark.parametrize("fields, state", [
    ({}, ACTIVE),
    ({"_archived": False, "_orphaned_ts": None}, ACTIVE),
    ({"_archived": True}, ARCHIVED),
    ({"_archived": True, "_orphaned_ts": None}, ARCHIVED),
    ({"_archived": True, "_orphaned_ts": 5.0}, ORPHANED),
    ({"_archived": False, "_orphaned_ts": 5.0}, ORPHANED),   # orphaned wins whatever _archived says
    ({"_orphaned_ts": 0}, ORPHANED),                         # time 0 is still a time, not "unset"
    ({"_orphaned_ts": 0.0, "_archived": True}, ORPHANED),
    ({"_archived": 0}, ACTIVE),
    ({"_archived": 1}, ARCHIVED),
])
def test_node_state(fields, state):
    n = {"id": "x", "gist": "g"}
    n.update(fields)
    assert node_state(n) == state
    assert model.is_active(n) == (state == ACTIVE)


# ---------------------------------------------------------------- node_tokens (contract 5)

@pytest.mark.parametrize("gist, notes, tokens", [
    ("", [], 20),
    ("abc", [], 20),                       # 3 // 4 = 0
    ("abcd", [], 21),
    ("a" * 7, [], 21),
    ("a" * 8, [], 22),
    ("a" * 400, [], 120),
    ("ab", ["cd"], 21),                     # (2 + 2) // 4: the sum is floored once, not per part
    ("a", ["b", "c", "d"], 21),             # 4 // 4
    ("a", ["b", "c"], 20),                  # 3 // 4
    ("", ["x" * 10, "y" * 10], 25),
    ("é" * 8, [], 22),                      # characters, not bytes
    ("a" * 2000, ["n" * 10000] * 3, 20 + 32000 // 4),
])
def test_node_tokens(gist, notes, tokens):
    assert node_tokens(node(gist=gist, notes=notes)) == tokens


def test_node_tokens_ignores_touches_and_id():
    a = node("short", gist="a" * 40)
    b = node("a-much-longer-identifier-" * 5, gist="a" * 40)
    b["touches"] = ["src/" + "x" * 500]
    assert node_tokens(a) == node_tokens(b) == 30


def test_node_tokens_missing_fields():
    assert node_tokens({"id": "x"}) == 20
    assert node_tokens({"id": "x", "gist": "abcd"}) == 21


# ---------------------------------------------------------------- recency

@pytest.mark.parametrize("times, expected", [
    ({"_created_ts": 10, "_write_ts": 20, "_read_ts": 30}, 30),
    ({"_created_ts": 10, "_write_ts": 40, "_read_ts": 30}, 40),
    ({"_created_ts": 10, "_write_ts": 20, "_read_ts": None}, 20),
    ({"_created_ts": 10, "_write_ts": None, "_read_ts": None}, 10),   # never written by kgd
    ({"_created_ts": None, "_write_ts": None, "_read_ts": None}, 0),
    ({}, 0),
    ({"_write_ts": 5.5, "_read_ts": 5.25}, 5.5),
])
def test_recency(times, expected):
    n = {"id": "x", "gist": ""}
    n.update(times)
    assert recency(n) == expected


# ---------------------------------------------------------------- edge_counts

NODES = {
    "act": node("act"),
    "act2": node("act2"),
    "arc": node("arc", archived=True),
    "arc2": node("arc2", archived=True),
    "orp": node("orp", archived=True, orphaned=1.0),
}


@pytest.mark.parametrize("frm, to, counts", [
    ("act", "act2", True),
    ("act", "arc", True),
    ("arc", "act", True),
    ("act", "orp", True),
    ("orp", "act", True),
    ("arc", "arc2", False),
    ("arc", "orp", False),
    ("orp", "arc", False),
    ("orp", "orp", False),           # self-loop on an orphaned node
    ("act", "act", True),            # self-loop on an active node
    ("act", "src/app.py", True),     # an active node and a file path
    ("src/app.py", "act", True),
    ("arc", "src/app.py", False),    # a file path end alone never counts (contract 5 revised)
    ("src/app.py", "orp", False),
    ("src/app.py", "README.md", False),
    ("arc", "not-a-node-here", False),  # nor any end that is not a node of this graph
])
def test_edge_counts(frm, to, counts):
    assert edge_counts(edge(frm, to), NODES) is counts


@pytest.mark.parametrize("frm, to, rel, key", [
    ("a", "b", "uses", "a->b:uses"),
    ("src/app.py", "b", "implements", "src/app.py->b:implements"),
    ("a", "b", "depends-on", "a->b:depends-on"),
])
def test_edge_key(frm, to, rel, key):
    assert edge_key(frm, to, rel) == key


# ---------------------------------------------------------------- estimate_tokens

def test_estimate_tokens_table():
    nodes = {
        "a": node("a", gist="a" * 40),                  # 30
        "b": node("b", gist="", notes=["n" * 8]),       # 22
        "c": node("c", gist="c" * 400, archived=True),  # 0: archived adds nothing
        "d": node("d", gist="d" * 400, archived=True, orphaned=3.0),  # 0
    }
    edges = {edge_key(*e): edge(*e) for e in [
        ("a", "b", "r"),          # counts
        ("c", "a", "r"),          # counts (a active)
        ("c", "d", "r"),          # does not count: both ends asleep
        ("d", "src/x.py", "r"),   # does not count: a file path end alone (contract 5 revised)
        ("a", "src/y.py", "r"),   # counts: an active node and a file path
        ("c", "c", "self"),       # does not count
    ]}
    assert estimate_tokens(nodes, edges) == 30 + 22 + 3 * 15


@pytest.mark.parametrize("nodes, edges, expected", [
    ({}, {}, 0),
    ({"a": node("a")}, {}, 20),
    ({"a": node("a", archived=True)}, {}, 0),
    ({}, {"x->y:r": edge("x", "y")}, 0),    # both ends foreign: no active node, costs nothing
])
def test_estimate_tokens_small(nodes, edges, expected):
    assert estimate_tokens(nodes, edges) == expected


# ---------------------------------------------------------------- public shapes

def test_public_node_drops_underscore_fields():
    n = node("a", gist="g", notes=["x"], archived=True, _created_ts=1, _write_ts=2)
    n["touches"] = ["src/a.py"]
    n["custom"] = "kept in the file, not shown"
    assert model.public_node(n) == {"id": "a", "gist": "g", "notes": ["x"], "touches": ["src/a.py"],
                                    "state": ARCHIVED}
    assert "state" not in model.public_node(n, with_state=False)
    # a copy: mutating the public view does not touch the stored node
    model.public_node(n)["notes"].append("y")
    assert n["notes"] == ["x"]


def test_public_edge():
    e = {"from": "a", "to": "b", "rel": "r", "notes": ["n"], "_extra": 1}
    assert model.public_edge(e) == {"from": "a", "to": "b", "rel": "r", "notes": ["n"]}
    assert model.public_edge({"from": "a", "to": "b", "rel": "r"})["notes"] == []


# ---------------------------------------------------------------- validation

CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f"]


@pytest.mark.parametrize("value", ["a", "kebab-case-id", "x" * model.MAX_ID, "ünïcödé-id", "a b c",
                                   "with/slash", "dots.and_underscores", "日本語"])
def test_check_id_accepts(value):
    assert model.check_id(value) == value


@pytest.mark.parametrize("value, words", [
    (None, "string"),
    (5, "string"),
    (True, "string"),
    (["a"], "string"),
    ({"a": 1}, "string"),
    (b"bytes", "string"),
    ("", "empty"),
    ("   ", "empty"),
    ("\n", "empty"),
    ("x" * (model.MAX_ID + 1), "limit"),
    ("a\nb", "control"),
    ("a\rb", "control"),
    ("a\tb", "control"),
] + [("a%sb" % c, "control") for c in CONTROL] + [(c + "id", "control") for c in ("\x00", "\x1b")])
def test_check_id_rejects(value, words):
    with pytest.raises(BadInput) as exc:
        model.check_id(value)
    assert words in exc.value.message.lower()
    assert "id" in exc.value.message


def test_check_id_uses_given_name():
    with pytest.raises(BadInput) as exc:
        model.check_id("", "task_id")
    assert exc.value.message.startswith("task_id")


@pytest.mark.parametrize("value, ok", [
    ("one line", True),
    ("x" * model.MAX_GIST, True),
    ("x" * (model.MAX_GIST + 1), False),
    ("", False),
    ("line\nbreak", False),      # newlines are for notes only
    ("tab\there", False),
    ("nul\x00", False),
    ("esc\x1b[31m", False),
    ("del\x7f", False),
    ("emoji 🎉 and ünïcode", True),
])
def test_check_text_gist(value, ok):
    if ok:
        assert model.check_text(value, "gist", model.MAX_GIST) == value
    else:
        with pytest.raises(BadInput):
            model.check_text(value, "gist", model.MAX_GIST)


@pytest.mark.parametrize("ch", ["\x80", "\x85", "\x9b", "\x9f"])
def test_check_text_rejects_c1_control_characters(ch):
    """Unicode category Cc includes U+0080..U+009F (U+009B is the 8-bit CSI terminal escape)."""
    with pytest.raises(BadInput):
        model.check_text("a%sb" % ch, "gist", model.MAX_GIST)
    with pytest.raises(BadInput):
        model.check_id("a%sb" % ch)


def test_check_text_allow_empty():
    assert model.check_text("", "x", 10, allow_empty=True) == ""
    with pytest.raises(BadInput):
        model.check_text(None, "x", 10, allow_empty=True)


@pytest.mark.parametrize("value, expected", [
    (None, None),                         # omitted: keep the old list
    ([], []),                             # given empty: clear the list
    (["a", "b"], ["a", "b"]),
    (["multi\nline\nnote"], ["multi\nline\nnote"]),   # newlines allowed in notes
    (["crlf\r\nnote"], ["crlf\r\nnote"]),
    (["tab\tnote"], ["tab\tnote"]),
    (["x" * model.MAX_NOTE], ["x" * model.MAX_NOTE]),
    (["n"] * model.MAX_NOTES, ["n"] * model.MAX_NOTES),
])
def test_check_notes_accepts(value, expected):
    assert model.check_notes(value) == expected


@pytest.mark.parametrize("value", [
    5,
    "single note",                   # notes is a list of strings (contract 3), never a bare string
    {"a": "b"},
    ("a", "b"),                      # a tuple is not a JSON list
    [1],
    [None],
    ["ok", 2],
    [""],                            # an empty note says nothing
    ["   "],
    ["x" * (model.MAX_NOTE + 1)],
    ["n"] * (model.MAX_NOTES + 1),
    ["nul\x00"],
    ["esc\x1b["],
    ["bell\x07"],
    ["del\x7f"],
])
def test_check_notes_rejects(value):
    with pytest.raises(BadInput) as exc:
        model.check_notes(value)
    assert "notes" in exc.value.message


@pytest.mark.parametrize("value, ok", [
    (None, True),
    ([], True),
    ("src/app.py", False),           # a list of strings, never a bare string
    (["src/app.py", "README.md"], True),
    (["x" * model.MAX_TOUCH], True),
    (["x" * (model.MAX_TOUCH + 1)], False),
    (["t"] * model.MAX_TOUCHES, True),
    (["t"] * (model.MAX_TOUCHES + 1), False),
    (["two\nlines"], False),          # newlines allowed in notes only
    (["tab\tpath"], False),
    (["nul\x00"], False),
    ([""], False),
    ([3], False),
    (3, False),
    ({"src": 1}, False),
])
def test_check_touches(value, ok):
    if ok:
        out = model.check_touches(value)
        assert out == ([value] if isinstance(value, str) else value)
    else:
        with pytest.raises(BadInput) as exc:
            model.check_touches(value)
        assert "touches" in exc.value.message


@pytest.mark.parametrize("value, default, expected", [
    ("user", None, "user"),
    ("project", None, "project"),
    (None, "user", "user"),
    ("project", "user", "project"),
])
def test_check_level_accepts(value, default, expected):
    assert model.check_level(value, default) == expected


@pytest.mark.parametrize("value, default", [
    (None, None),
    ("", None),
    ("USER", None),
    ("User", None),
    (" user", None),
    ("global", "user"),
    (1, None),
    (["user"], None),
    ({"user": 1}, None),
    (True, "user"),
])
def test_check_level_rejects(value, default):
    with pytest.raises(BadInput) as exc:
        model.check_level(value, default)
    assert "level" in exc.value.message
    assert "user" in exc.value.message and "project" in exc.value.message


@pytest.mark.parametrize("value, ok", [
    ("src/app.py", True),
    ("node-id", True),
    ("x" * model.MAX_PATH, True),
    ("x" * (model.MAX_PATH + 1), False),
    ("", False),
    ("a\x00b", False),
    ("a\nb", False),
    (None, False),
    (7, False),
])
def test_check_end(value, ok):
    if ok:
        assert model.check_end(value, "from") == value
    else:
        with pytest.raises(BadInput) as exc:
            model.check_end(value, "from")
        assert exc.value.message.startswith("from")


@pytest.mark.parametrize("value, ok", [
    ("depends-on", True),
    ("x" * model.MAX_REL, True),
    ("x" * (model.MAX_REL + 1), False),
    ("", False),
    ("a\nb", False),
    (None, False),
])
def test_check_rel(value, ok):
    if ok:
        assert model.check_rel(value) == value
    else:
        with pytest.raises(BadInput):
            model.check_rel(value)


def test_error_messages_say_what_to_do():
    """Messages are for an agent: they name the argument and never echo huge input."""
    with pytest.raises(BadInput) as exc:
        model.check_text("x" * 100000, "gist", model.MAX_GIST)
    assert "gist" in exc.value.message and "2000" in exc.value.message
    assert len(exc.value.message) < 300


@pytest.mark.parametrize("frm, to, rel", [
    ("a->b", "c", "r"),
    ("a", "b->c", "r"),
    ("a", "b", "r:s"),
])
def test_edge_parts_that_would_make_keys_ambiguous_are_refused(frm, to, rel):
    """"a->b" -> "c" and "a" -> "b->c" would share the key "a->b->c:r": refused at input."""
    with pytest.raises(BadInput):
        model.check_end(frm, "from")
        model.check_end(to, "to")
        model.check_rel(rel)


def test_edge_keys_are_unique_for_accepted_parts():
    ends = ["a", "a-", ">b", "b", "src/x.py", "C:/dir/f.py", "http://host/p", "-", ">"]
    rels = ["r", "depends-on", "x>y"]
    keys = {}
    for f in ends:
        for t in ends:
            for r in rels:
                k = model.edge_key(model.check_end(f, "from"), model.check_end(t, "to"), model.check_rel(r))
                assert keys.setdefault(k, (f, t, r)) == (f, t, r), k
