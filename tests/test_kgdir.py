"""The .kg/ text format, its one merge rule and the three-way reconcile: tables and properties."""

import json

import pytest
from hypothesis import given, settings, strategies

from kg.core import kg_format, model
from kg.core.reconcile import reconcile


def N(nid, gist="g", notes=(), touches=(), created=1.0, changed=None):
    return {"id": nid, "gist": gist, "notes": list(notes), "touches": list(touches), "created": float(created),
            "changed": float(created if changed is None else changed)}


def E(frm, to, rel="uses", notes=(), changed=1.0):
    return {"from": frm, "to": to, "rel": rel, "notes": list(notes), "changed": float(changed)}


def T(nid, deleted):
    return {"id": nid, "deleted": float(deleted)}


def line(rec):
    return kg_format.canonical(rec).encode("utf-8")


# ---------------------------------------------------------------- render / parse

def test_render_is_sorted_canonical_lf_with_final_newline():
    recs = {"b": N("b"), "B": N("B"), "a": N("a", notes=["é\nx"])}
    data = kg_format.render(recs)
    lines = data.split(b"\n")
    assert data.endswith(b"\n") and b"\r" not in data
    assert [json.loads(x)["id"] for x in lines[:-1]] == ["B", "a", "b"]  # code-point order
    assert "é".encode("utf-8") in data  # not escaped
    assert lines[0] == b'{"changed":1.0,"created":1.0,"gist":"g","id":"B","notes":[],"touches":[]}'
    assert kg_format.render(dict(reversed(list(recs.items())))) == data


def test_render_empty_is_empty_and_parse_round_trips():
    assert kg_format.render({}) == b""
    recs = {"a": N("a", notes=["x"], touches=["src/a.py"]), "b": T("b", 5)}
    back, problems = kg_format.parse(kg_format.render(recs), "node")
    assert back == recs and problems == []


def test_ids_differing_in_case_are_two_nodes():
    recs = {"Cache": N("Cache", "upper"), "cache": N("cache", "lower")}
    back, _ = kg_format.parse(kg_format.render(recs), "node")
    assert back["Cache"]["gist"] == "upper" and back["cache"]["gist"] == "lower"


def test_render_prunes_tombstones_older_than_a_year():
    now = 1000 * 86400.0
    recs = {"old": T("old", now - 366 * 86400), "new": T("new", now - 10), "n": N("n")}
    out, _ = kg_format.parse(kg_format.render(recs, now=now), "node")
    assert set(out) == {"new", "n"}


def test_parse_skips_conflict_markers_and_reads_both_sides():
    ours, theirs = N("x", "ours", ["a"], changed=5), N("x", "theirs", ["b"], changed=6)
    data = b"\n".join([line(N("a")), b"<<<<<<< HEAD", line(ours), b"||||||| base", line(N("x")),
                       b"=======", line(theirs), b">>>>>>> feature", line(N("z")), b""])
    recs, problems = kg_format.parse(data, "node")
    assert problems == []
    assert recs["x"]["gist"] == "theirs" and recs["x"]["notes"] == ["b", "a"]
    assert set(recs) == {"a", "x", "z"}
    assert kg_format.needs_rewrite(data, recs)
    clean = kg_format.render(recs)
    assert not kg_format.needs_rewrite(clean, recs) and b"<<<<<<<" not in clean


@pytest.mark.parametrize("bad, what", [
    (b"{not json", "not JSON"),
    (b'{"id":"x","gist":"g","notes":[],"touches":[],"created":1,"changed":NaN}', "changed"),
    (b'{"id":"x","gist":"g","notes":[],"touches":[],"created":1,"changed":1e400}', "changed"),
    (b'{"id":"a->b","gist":"g","notes":[],"touches":[],"created":1,"changed":1}', "->"),
    (b'{"id":"","gist":"g","notes":[],"touches":[],"created":1,"changed":1}', "empty"),
    (b'{"id":"x","gist":"g","notes":"oops","touches":[],"created":1,"changed":1}', "notes"),
    (b'{"id":"x","gist":"g\\u0000","notes":[],"touches":[],"created":1,"changed":1}', "control"),
    (b'{"id":"x","gist":"g","notes":[],"touches":[],"created":true,"changed":1}', "created"),
    (b'{"id":"x","gist":"g","notes":[],"touches":[],"created":1,"changed":1e12}', "range"),
    (b'[1,2]', "object"),
    (b'\xff\xfe{}', "UTF-8"),
    (b"[" * 100000, "JSON"),
])
def test_bad_lines_are_reported_and_skipped(bad, what):
    data = line(N("a")) + b"\n" + bad + b"\n" + line(N("b")) + b"\n"
    recs, problems = kg_format.parse(data, "node")
    assert set(recs) == {"a", "b"}
    assert len(problems) == 1 and problems[0].startswith("nodes.jsonl line 2:") and what in problems[0]


def test_node_over_the_text_bound_is_skipped():
    notes = ["x" * model.MAX_NOTE] * 2
    recs, problems = kg_format.parse(line(N("big", notes=notes)) + b"\n", "node")
    assert recs == {} and "limit" in problems[0]


def test_huge_line_and_huge_file_are_refused_without_parsing():
    data = b'{"id":"' + b"x" * (kg_format.MAX_LINE + 10) + b'"}\n' + line(N("ok")) + b"\n"
    recs, problems = kg_format.parse(data, "node")
    assert set(recs) == {"ok"} and "bytes" in problems[0]
    recs, problems = kg_format.parse(b" " * (kg_format.MAX_FILE + 1), "node")
    assert recs == {} and "not loaded" in problems[0]


def test_many_bad_lines_are_counted_not_listed():
    data = b"junk\n" * 1000 + line(N("ok")) + b"\n"
    recs, problems = kg_format.parse(data, "node")
    assert set(recs) == {"ok"}
    assert len(problems) == kg_format.MAX_PROBLEMS + 1 and "980 more" in problems[-1]


def test_ten_thousand_duplicates_of_one_id_load_as_one():
    data = b"".join(line(N("dup", "v%d" % i, ["n%d" % (i % 50)], changed=i)) + b"\n" for i in range(10000))
    recs, problems = kg_format.parse(data, "node")
    assert problems == [] and list(recs) == ["dup"]
    assert recs["dup"]["gist"] == "v9999" and recs["dup"]["notes"][0] == "n49" and len(recs["dup"]["notes"]) == 50


def test_crlf_lines_load():
    recs, _ = kg_format.parse(line(N("a")) + b"\r\n" + line(N("b")) + b"\r\n", "node")
    assert set(recs) == {"a", "b"}


def test_edges_parse_and_render():
    recs = {model.edge_key("a", "src/x.py", "touches"): E("a", "src/x.py", "touches", ["n"]),
            model.edge_key("a", "b", "uses"): {"from": "a", "to": "b", "rel": "uses", "deleted": 3.0}}
    data = kg_format.render(recs)
    assert data.split(b"\n")[0].startswith(b'{"deleted":3.0,"from":"a"')  # "a->b:uses" < "a->src/..."
    back, problems = kg_format.parse(data, "edge")
    assert back == recs and problems == []
    _, problems = kg_format.parse(b'{"from":"a","to":"b","rel":"x:y","notes":[],"changed":1}\n', "edge")
    assert "rel" in problems[0]


def test_unknown_fields_are_dropped_and_integers_become_times():
    line = b'{"id":"a","gist":"g","notes":[],"touches":[],"created":1,"changed":2,"run":"rm -rf /"}\n'
    recs, _ = kg_format.parse(line, "node")
    assert recs["a"] == N("a", created=1, changed=2)


# ---------------------------------------------------------------- the merge rule

MERGE_TABLE = [
    ("later change wins the gist",
     [N("x", "old", changed=1), N("x", "new", changed=2)], N("x", "new", changed=2)),
    ("notes and touches are the union, winner first",
     [N("x", "a", ["n1", "n2"], ["f1"], changed=1), N("x", "b", ["n3", "n1"], ["f2"], changed=2)],
     N("x", "b", ["n3", "n1", "n2"], ["f2", "f1"], changed=2)),
    ("created is the earliest",
     [N("x", "a", created=5, changed=9), N("x", "b", created=3, changed=4)], N("x", "a", created=3, changed=9)),
    ("a tombstone wins over older versions",
     [N("x", "a", changed=1), T("x", 2)], T("x", 2)),
    ("a tombstone loses to a later change, and the older version's notes stay deleted",
     [N("x", "a", ["old"], changed=1), T("x", 2), N("x", "b", ["new"], changed=3)], N("x", "b", ["new"], changed=3)),
    ("a change at the very time of the delete survives",
     [N("x", "a", changed=2), T("x", 2)], N("x", "a", changed=2)),
    ("two tombstones: the later",
     [T("x", 2), T("x", 7)], T("x", 7)),
    ("a tie on changed: the larger canonical line wins",
     [N("x", "aaa", changed=2), N("x", "zzz", changed=2)], N("x", "zzz", ["n"][:0], changed=2)),
]


@pytest.mark.parametrize("why, versions, expected", MERGE_TABLE, ids=[t[0] for t in MERGE_TABLE])
def test_merge_table(why, versions, expected):
    assert kg_format.merge_versions(versions) == expected
    assert kg_format.merge_versions(list(reversed(versions))) == expected


def test_merge_of_edges_unions_notes():
    out = kg_format.merge_versions([E("a", "b", notes=["x"], changed=1), E("a", "b", notes=["y", "x"], changed=2)])
    assert out == E("a", "b", notes=["y", "x"], changed=2)
    tomb = {"from": "a", "to": "b", "rel": "uses", "deleted": 5.0}
    assert kg_format.merge_versions([E("a", "b", changed=1), tomb]) == tomb


def test_merge_clips_to_the_node_bound_keeping_the_winners_notes():
    big = "w" * (model.MAX_NOTE - 10)
    a = N("x", "win", [big, "mine"], changed=2)
    b = N("x", "lose", ["o" * model.MAX_NOTE, "short"], changed=1)
    out = kg_format.merge_versions([a, b])
    assert out["gist"] == "win" and out["notes"][:2] == [big, "mine"]
    assert len(out["gist"]) + sum(map(len, out["notes"])) <= model.MAX_NODE_TEXT
    many = [N("x", "g", ["a%d" % i for i in range(60)], ["t%d" % i for i in range(60)], changed=2),
            N("x", "g", ["b%d" % i for i in range(60)], ["u%d" % i for i in range(60)], changed=1)]
    out = kg_format.merge_versions(many)
    assert len(out["notes"]) == model.MAX_NOTES and out["notes"][:60] == many[0]["notes"]
    assert len(out["touches"]) == model.MAX_TOUCHES


texts = strategies.text(alphabet="abcxyz é", min_size=1, max_size=6).filter(lambda s: s.strip())
versions = strategies.one_of(
    strategies.builds(lambda g, n, t, c, d: N("x", g, n, t, created=c, changed=c + d),
              texts, strategies.lists(texts, max_size=4), strategies.lists(texts, max_size=3),
              strategies.integers(0, 20), strategies.integers(0, 5)),
    strategies.builds(lambda d: T("x", d), strategies.integers(0, 25)))


@settings(max_examples=300, deadline=None)
@given(strategies.lists(versions, min_size=1, max_size=6), strategies.randoms())
def test_merge_is_order_independent_and_idempotent(vs, rnd):
    m = kg_format.merge_versions(vs)
    shuffled = list(vs)
    rnd.shuffle(shuffled)
    assert kg_format.merge_versions(shuffled) == m
    assert kg_format.merge_versions([m, m]) == m
    # A file holding the merged line beside the versions it came from (what a union merge of a
    # clean rewrite leaves) resolves to the same record.
    assert kg_format.merge_versions(vs + [m]) == m
    back, problems = kg_format.parse(kg_format.render({"x": m}), "node")
    assert back == {"x": m} and problems == []


@settings(max_examples=300, deadline=None)
@given(strategies.lists(versions, min_size=1, max_size=6))
def test_merge_never_drops_a_version_not_older_than_every_delete(vs):
    m = kg_format.merge_versions(vs)
    deleted = max((v["deleted"] for v in vs if "deleted" in v), default=None)
    survivors = [v for v in vs if "deleted" not in v and (deleted is None or v["changed"] >= deleted)]
    if survivors:
        assert "deleted" not in m
        assert m["changed"] == max(v["changed"] for v in survivors)
        assert set(m["notes"]) == set().union(*(v["notes"] for v in survivors))
    else:
        assert m == {"id": "x", "deleted": float(deleted)}


# ---------------------------------------------------------------- the three-way reconcile

A1, A2, A3 = N("a", "one", changed=1), N("a", "two", changed=2), N("a", "three", ["t"], changed=3)
S = kg_format.stamp

RECONCILE_TABLE = [
    # (why, memory, disk, base, dropped, expect memory changes, expect disk writes)
    ("in sync", {"a": A1}, {"a": A1}, {"a": S(A1)}, {}, {}, {}),
    ("memory changed: written", {"a": A2}, {"a": A1}, {"a": S(A1)}, {}, {}, {"a": A2}),
    ("disk changed: taken", {"a": A1}, {"a": A2}, {"a": S(A1)}, {}, {"a": A2}, {}),
    ("both changed: merged both ways", {"a": A2}, {"a": A3}, {"a": S(A1)}, {},
     {"a": N("a", "three", ["t"], changed=3)}, {}),
    ("deleted here, disk unchanged: tombstone", {}, {"a": A1}, {"a": S(A1)}, {}, {}, {"a": T("a", 100)}),
    ("deleted here with a known time", {"a": T("a", 50)}, {"a": A1}, {"a": S(A1)}, {}, {}, {"a": T("a", 50)}),
    ("deleted here at 50, disk changed at 3 (before): the delete wins", {"a": T("a", 50)}, {"a": A3},
     {"a": S(A1)}, {}, {}, {"a": T("a", 50)}),
    ("deleted here at 2.5, disk changed at 3 (after): the change comes back", {"a": T("a", 2.5)}, {"a": A3},
     {"a": S(A1)}, {}, {"a": A3}, {}),
    ("deleted here at an unknown time, disk changed: the disk's version stands", {}, {"a": A2}, {"a": S(A1)},
     {}, {"a": A2}, {}),
    ("gone from disk (other branch), memory unchanged: leaves the view, nothing written",
     {"a": A1}, {}, {"a": S(A1)}, {}, {"a": None}, {}),
    ("teammate's tombstone, memory unchanged: leaves the view", {"a": A1}, {"a": T("a", 9)}, {"a": S(A1)}, {},
     {"a": None}, {}),
    ("gone from disk but changed here: the acknowledged change is written", {"a": A2}, {}, {"a": S(A1)}, {},
     {}, {"a": A2}),
    ("teammate's tombstone older than a change here: the change is written",
     {"a": A3}, {"a": T("a", 2)}, {"a": S(A1)}, {}, {}, {"a": A3}),
    ("teammate's tombstone newer than a change here: deleted", {"a": A2}, {"a": T("a", 9)}, {"a": S(A1)}, {},
     {"a": None}, {}),
    ("new on disk: added", {}, {"a": A1}, {}, {}, {"a": A1}, {}),
    ("new here: written", {"a": A1}, {}, {}, {}, {}, {"a": A1}),
    ("new on both sides: merged", {"a": A2}, {"a": A3}, {}, {}, {"a": N("a", "three", ["t"], changed=3)}, {}),
    ("new here, older than a tombstone on disk: deleted", {"a": A1}, {"a": T("a", 2)}, {}, {}, {"a": None}, {}),
    ("tombstone on disk, nothing here: nothing", {}, {"a": T("a", 2)}, {}, {}, {}, {}),
    ("both deleted", {}, {}, {"a": S(A1)}, {}, {}, {}),
    ("dropped by compaction, disk unchanged: stays out, no tombstone", {}, {"a": A1}, {}, {"a": S(A1)}, {}, {}),
    ("dropped, then a teammate changed it: comes back", {}, {"a": A2}, {}, {"a": S(A1)}, {"a": A2}, {}),
]


@pytest.mark.parametrize("why, mem, disk, base, dropped, want_mem, want_disk", RECONCILE_TABLE,
                         ids=[t[0] for t in RECONCILE_TABLE])
def test_reconcile_table(why, mem, disk, base, dropped, want_mem, want_disk):
    r = reconcile(mem, disk, base, 100.0, dropped)
    assert r.memory == want_mem
    assert r.disk == want_disk
    _assert_agrees(mem, disk, r)


def test_reconcile_keeps_dropped_until_news_and_forgets_it_when_the_disk_deletes():
    r = reconcile({}, {"a": A1}, {}, 100.0, {"a": S(A1)})
    assert r.dropped == {"a": S(A1)} and r.base == {}
    r = reconcile({}, {"a": T("a", 5)}, {}, 100.0, {"a": S(A1)})
    assert r.dropped == {} and r.disk == {}
    r = reconcile({"a": A2}, {"a": A1}, {}, 100.0, {"a": S(A1)})  # put again here
    assert r.dropped == {} and r.disk == {"a": A2}


def test_reconcile_never_writes_a_frozen_key():
    r = reconcile({"a": A2}, {"a": A1}, {"a": S(A1)}, 100.0, frozen={"a"})
    assert r.disk == {} and r.base == {"a": S(A1)}
    r = reconcile({}, {"a": A1}, {"a": S(A1)}, 100.0, frozen={"a"})
    assert r.disk == {}


def test_reconcile_edges_tombstone_by_key():
    e = E("a", "src/x.py", "touches")
    key = model.edge_key("a", "src/x.py", "touches")
    r = reconcile({}, {key: e}, {key: S(e)}, 42.0)
    assert r.disk == {key: {"from": "a", "to": "src/x.py", "rel": "touches", "deleted": 42.0}}


def _apply(mem, disk, r):
    mem2 = {k: v for k, v in mem.items() if "deleted" not in v}
    for k, v in r.memory.items():
        if v is None:
            mem2.pop(k, None)
        else:
            mem2[k] = v
    disk2 = dict(disk)
    disk2.update(r.disk)
    return mem2, disk2


def _assert_agrees(mem, disk, r, dropped=()):
    """After applying a reconcile, memory and disk hold the same live records, the base names
    exactly those, and a second reconcile changes nothing."""
    mem2, disk2 = _apply(mem, disk, r)
    live_disk = {k: v for k, v in disk2.items() if "deleted" not in v and k not in r.dropped}
    assert mem2 == live_disk
    assert r.base == {k: S(v) for k, v in mem2.items()}
    again = reconcile(mem2, disk2, r.base, 200.0, r.dropped)
    assert again.memory == {} and again.disk == {}


pick = strategies.sampled_from([None, A1, A2, A3, T("a", 1.5), T("a", 2.5), T("a", 9)])


@settings(max_examples=500, deadline=None)
@given(pick, pick, strategies.sampled_from([None, S(A1), S(A2), S(A3)]), strategies.booleans())
def test_reconcile_always_leaves_both_sides_agreeing(m, d, b, drop):
    mem = {} if m is None else {"a": m}
    disk = {} if d is None else {"a": d}
    base = {} if b is None else {"a": b}
    dropped = {"a": b} if drop and b is not None and m is None else {}
    if dropped:
        base = {}
    r = reconcile(mem, disk, base, 100.0, dropped)
    _assert_agrees(mem, disk, r)
    # Nothing acknowledged is lost silently: a live version here that is not older than every
    # tombstone around is still live on both sides afterwards.
    if m is not None and "deleted" not in m:
        tombs = [v["deleted"] for v in (d,) if v is not None and "deleted" in v]
        if (b is None or S(m) != b) and all(m["changed"] >= t for t in tombs):
            mem2, _ = _apply(mem, disk, r)
            assert "a" in mem2


def test_reader_rereads_only_changed_lines_and_agrees_with_parse():
    recs = {"n%03d" % i: N("n%03d" % i, "v0", changed=1) for i in range(50)}
    reader = kg_format.Reader("node")
    out, problems, stamps = reader.parse(kg_format.render(recs))
    assert out == recs and problems == [] and stamps == {k: S(v) for k, v in recs.items()}
    recs2 = dict(recs, n007=N("n007", "v1", changed=2))
    data = kg_format.render(recs2) + line(N("n001", "other", changed=3)) + b"\n{bad\n"
    out, problems, stamps = reader.parse(data)
    assert (out, problems) == kg_format.parse(data, "node")
    assert out["n001"]["gist"] == "other" and "n001" not in stamps  # merged: no cached stamp
    assert all(stamps[k] == S(out[k]) for k in stamps)
    assert len(reader.lines) == 51  # only the lines of the last parse are kept


@pytest.mark.parametrize("rec", [N("a", created=0, changed=0), N("a", created=0, changed=5), N("a", created=3.25)])
def test_a_record_taken_into_memory_gives_back_the_same_record(rec):
    node = dict(kg_format.node_fields(rec), _read_ts=None)
    assert kg_format.node_record(node) == rec
    e = E("a", "src/x.py", changed=0)
    assert kg_format.edge_record(kg_format.edge_fields(e)) == e


def test_a_bom_is_ignored_and_a_lone_surrogate_escape_is_skipped_not_fatal():
    good = kg_format.canonical({"id": "first", "gist": "g", "notes": [], "touches": [], "created": 1.0, "changed": 1.0})
    data = b"\xef\xbb\xbf" + good.encode() + b"\r\n"
    data += b'{"id":"bad-\\ud800","gist":"g","notes":[],"touches":[],"created":1,"changed":1}\n'
    data += b'{"id":"bad-tomb-\\udfff","deleted":1}\n'
    recs, problems, stamps = kg_format.Reader("node").parse(data)  # the stamps encode every line
    assert list(recs) == ["first"] and "first" in stamps
    assert len(problems) == 2 and all("surrogate" in p for p in problems)


def test_a_file_over_the_line_bound_gives_its_first_lines_and_says_so(monkeypatch):
    monkeypatch.setitem(kg_format.MAX_RECORDS, "node", 3)
    recs = {"n%d" % i: N("n%d" % i) for i in range(5)}
    data = kg_format.render(recs).replace(b"\n", b"\n\n", 1)  # blank lines are not counted
    reader = kg_format.Reader("node")
    out, problems, _ = reader.parse(data)
    assert sorted(out) == ["n0", "n1", "n2"] and reader.cut
    assert problems == ["nodes.jsonl: more than 3 lines; the 2 lines from line 5 on are skipped, and kgd does "
                        "not write this file until it is back under the limit"]
    assert kg_format.parse(data, "node") == (out, problems)
    out, problems, _ = reader.parse(kg_format.render({k: recs[k] for k in ("n0", "n1", "n2")}))
    assert len(out) == 3 and problems == [] and not reader.cut
