"""kg/core/search.py: query words and ranking (contract section 3, kg_search). Pure."""

import pytest

from kg.core import search

from helpers import node as N


def ids(query, nodes, limit=20, level="user"):
    return [n["id"] for _, _, n in search.rank(query, [(level, n) for n in nodes], limit)]


# ---------------------------------------------------------------- query_words

@pytest.mark.parametrize("query, words", [
    ("", []),
    ("   ", []),
    ("cache", ["cache"]),
    ("Cache  INVALIDATION", ["cache", "invalidation"]),
    ("x, b; c", ["x", "b", "c"]),
    ("dup dup DUP", ["dup"]),
    ('"quoted" (paren) [x] {y} <z> pool? yes!', ["quoted", "paren", "x", "y", "z", "pool", "yes"]),
    ("src/app.py", ["src/app.py"]),
    ("kebab-case-id", ["kebab-case-id"]),
    ("tab\tplus\nnewline", ["tab", "plus", "newline"]),
    ("closing the lid", ["closing", "lid"]),             # stop words are no query words
    ("The AND of", []),
    ("not null", ["not", "null"]),                       # negations stay
    ("theme other", ["theme"]),                          # "other" is a stop word, "theme" is not
    ('"" () !!', []),
    ("Ünïcode", ["ünïcode"]),
])
def test_query_words(query, words):
    assert search.query_words(query) == words


def test_query_words_bounded():
    assert len(search.query_words(" ".join("w%d" % i for i in range(500)))) <= 32


# ---------------------------------------------------------------- rank

def test_no_match_is_empty():
    assert search.rank("zebra", [("user", N("a", "apple"))]) == []
    assert search.rank("", [("user", N("a", "apple"))]) == []
    assert search.rank("   ", [("user", N("a", "apple"))]) == []
    assert search.rank("apple", []) == []


def test_exact_id_first():
    nodes = [N("cache-layer", "cache cache cache", ["cache"]),
             N("cache", "unrelated gist"),                         # exact id, weak otherwise
             N("cache-invalidation", "how cache invalidation works", ["cache"], ["src/cache.py"])]
    assert ids("cache", nodes)[0] == "cache"
    assert ids("CACHE", nodes)[0] == "cache"            # case-insensitive exact match
    assert ids("  Cache ", nodes)[0] == "cache"


def test_stop_words_match_nothing():
    """`kg_search "the"` used to match, and "closing the lid" returned an unrelated node through "the"."""
    lid = N("lid-closed", "closing the lid suspends the laptop")
    other = N("theme-colours", "the other theme uses dark colours")
    assert ids("the", [lid, other]) == []
    assert ids("closing the lid", [lid, other]) == ["lid-closed"]
    assert ids("how does the lid work", [lid, other]) == ["lid-closed"]


def test_a_stop_word_still_finds_its_exact_id():
    nodes = [N("the", "a node whose id is a stop word"), N("theory", "the theory")]
    assert ids("The", nodes) == ["the"]
    out = search.rank("the", [("user", nodes[0]), ("project", N("the", "x"))], limit=1)
    assert [(lvl, n["id"]) for _, lvl, n in out] == [("user", "the")]


def test_exact_id_with_several_words():
    nodes = [N("a b", "x"), N("a", "a b a b"), N("b", "a b")]
    assert ids("a b", nodes)[0] == "a b"


def test_more_matched_words_rank_higher():
    nodes = [N("one", "alpha"), N("two", "alpha beta"), N("three", "alpha beta gamma")]
    assert ids("alpha beta gamma", nodes) == ["three", "two", "one"]


def test_rarer_words_rank_higher():
    common = [N("c%d" % i, "common") for i in range(10)]
    nodes = common + [N("rare-hit", "scarce"), N("common-hit", "common")]
    order = ids("common scarce", nodes)
    assert order[0] == "rare-hit"


def test_id_or_gist_beats_notes_and_touches():
    nodes = [N("n-notes", "nothing", ["mentions widget here"]),
             N("n-touch", "nothing", [], ["src/widget.py"]),
             N("n-gist", "the widget story"),
             N("widget-id", "nothing")]
    order = ids("widget", nodes)
    assert set(order[:2]) == {"n-gist", "widget-id"}
    assert set(order[2:]) == {"n-notes", "n-touch"}


@pytest.mark.parametrize("field", ["id", "gist", "notes", "touches"])
def test_every_field_is_searched(field):
    n = N("plain", "plain")
    if field == "id":
        n["id"] = "has-Needle-inside"
    elif field == "gist":
        n["gist"] = "a NEEDLE in the gist"
    else:
        n[field] = ["the needle is here"]
    assert ids("needle", [n, N("other", "other")]) == [n["id"]]


def test_case_insensitive_substring():
    nodes = [N("A", "PostgreSQL Connection Pool"), N("B", "postgresql"), N("C", "mysql")]
    assert sorted(ids("postgresql", nodes)) == ["A", "B"]
    assert sorted(ids("POSTGRESQL", nodes)) == ["A", "B"]
    assert ids("pool", nodes) == ["A"]


@pytest.mark.parametrize("limit, n", [(1, 1), (3, 3), (20, 20), (50, 30), (200, 30)])
def test_limit(limit, n):
    nodes = [N("node-%02d" % i, "match") for i in range(30)]
    assert len(search.rank("match", [("user", x) for x in nodes], limit)) == n


def test_default_limit_is_20():
    nodes = [("user", N("node-%02d" % i, "match")) for i in range(30)]
    assert len(search.rank("match", nodes)) == 20


def test_result_shape_and_levels_pass_through():
    user = N("u", "shared word")
    proj = N("p", "shared word")
    out = search.rank("shared", [("user", user), ("project", proj)])
    assert [(lvl, n["id"]) for _, lvl, n in out] == [("project", "p"), ("user", "u")]   # tie: id ascending
    for score, lvl, n in out:
        assert isinstance(score, float) and score > 0
        assert round(score, 3) == score


def test_same_id_in_both_levels_user_first():
    out = search.rank("dup", [("user", N("dup", "x")), ("project", N("dup", "y"))])
    assert [lvl for _, lvl, _ in out] == ["user", "project"]


def test_scores_sorted_best_first():
    nodes = [N("n%d" % i, " ".join(["alpha", "beta", "gamma", "delta"][: i % 4 + 1]), ["alpha"] * (i % 2))
             for i in range(40)]
    out = search.rank("alpha beta gamma delta n7", [("user", n) for n in nodes], 200)
    scores = [s for s, _, _ in out]
    assert scores == sorted(scores, reverse=True)
    assert out[0][2]["id"] == "n7"


def test_rank_does_not_mutate_nodes():
    n = N("a", "Apple", ["Note"], ["src/A.py"])
    before = dict(n, notes=list(n["notes"]), touches=list(n["touches"]))
    search.rank("apple note", [("user", n)])
    assert n == before


def test_text_of_hook_is_used():
    """The store passes cached lower-cased text; rank must use it, not the node's fields."""
    n = N("a", "nothing")
    out = search.rank("secret", [("user", n)], text_of=lambda node: ("a\nsecret", ""))
    assert [x[2]["id"] for x in out] == ["a"]
