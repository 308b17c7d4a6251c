"""Two repositories grown from one template are two projects; every clone of one repository is one
(contract section 9: identified by the repository, not the folder). The rule (kg/memory/repo_id.py:
root commit plus the remote), the upgrade from identities by root commit alone
(kg/memory/identities.py: the old graph goes to its checkout, a template's other clone starts its
own), and the personal remote's folder of the old identity met by an upgraded machine; pure tables,
real git in temp folders, real daemons."""

import json
import os
import shutil

import pytest

from kg.core import kg_format
from kg.memory import git_runner, identities, repo_id
from kg.memory.store import Settings, Store
from kg.travel import team

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

R1, R2 = "1" * 40, "2" * 40
HTTPS, SSH, SCP = "https://github.com/me/app.git", "ssh://git@GitHub.com:22/me/app", "git@github.com:me/app.git"
FORK, OTHER = "https://github.com/you/app.git", "https://example.org/team/other.git"


def git(cwd, *args):
    return git_runner.output(list(args), str(cwd))


def make_template(path):
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("a template\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "template")
    return path


def clone(template, path, url=None):
    """A clone of `template` at `path`, its origin replaced by `url` (None: no remote at all)."""
    git(path.parent if path.parent.exists() else template.parent, "clone", "-q", str(template), str(path))
    if url is None:
        git(path, "remote", "remove", "origin")
    else:
        git(path, "remote", "set-url", "origin", url)
    return path


def root_of(path):
    return git(path, "rev-list", "--max-parents=0", "HEAD")


# ---------------------------------------------------------------- the rule, pure


def I(commit, url, path="/p"):  # noqa: E743 - the rule's own name in the tables
    return repo_id.identity_for(commit, url, path)


SAME = [
    ("one repository in https, ssh and scp spelling", I(R1, HTTPS), I(R1, SSH)),
    ("scp spelling", I(R1, HTTPS), I(R1, SCP)),
    ("a user and a trailing slash", I(R1, HTTPS), I(R1, "https://me@github.com/me/app/")),
    ("the folder never counts with a remote", I(R1, HTTPS, "/a"), I(R1, HTTPS, "/b/c")),
    ("nor without one", I(R1, None, "/a"), I(R1, None, "/b")),
    ("an empty remote is none", I(R1, ""), I(R1, None)),
    ("no commit: the remote alone", I(None, HTTPS, "/a"), I(None, SCP, "/b")),
    ("a relative local remote is read from the repository", I(R1, "../up.git", "/x/a"), I(R1, "/x/up", "/y")),
]
DIFFERENT = [
    ("a template given two remotes", I(R1, HTTPS), I(R1, OTHER)),
    ("a fork", I(R1, HTTPS), I(R1, FORK)),
    ("one URL, two histories", I(R1, HTTPS), I(R2, HTTPS)),
    ("a remote added", I(R1, None), I(R1, HTTPS)),
    ("a shallow clone (no root) and the full one", I(None, HTTPS), I(R1, HTTPS)),
    ("nothing to go by: the folder", I(None, None, "/a"), I(None, None, "/b")),
]


@pytest.mark.parametrize("why,a,b", SAME, ids=[c[0] for c in SAME])
def test_rule_same_repository(why, a, b):
    assert a == b and repo_id.is_identity(a)


@pytest.mark.parametrize("why,a,b", DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_rule_two_repositories(why, a, b):
    assert a != b and repo_id.is_identity(a) and repo_id.is_identity(b)


def test_rule_forms():
    with_remote = I(R1, HTTPS)
    tail = repo_id.identity_of_url(HTTPS)[len("url-"):]
    assert with_remote == "git-%s-%s" % (R1, tail)
    assert I(R1, None) == "git-" + R1  # no remote: what every version called it, so nothing migrates
    assert I(None, HTTPS) == "url-" + tail
    assert I(None, None, "/p") == repo_id.identity_of_path("/p")
    assert I("not-a-commit", None, "/p") == repo_id.identity_of_path("/p")
    assert repo_id.earlier_forms(with_remote) == ["git-" + R1, "url-" + tail]
    for ident in ("git-" + R1, "url-" + tail, repo_id.identity_of_path("/p"), None, "../etc"):
        assert repo_id.earlier_forms(ident) == []
    assert not repo_id.is_identity("git-%s-%s" % (R1, "x" * 24)) and not repo_id.is_identity(with_remote + "-")


@pytest.mark.parametrize("urls,picked", [
    ({"origin": HTTPS, "upstream": OTHER}, HTTPS),  # gh repo fork: origin is the fork, upstream the original
    ({"upstream": OTHER}, OTHER),  # origin renamed: the only remote still names the repository
    ({"a": HTTPS, "b": OTHER}, None),  # several, none is origin: no guess
    ({"origin": "  ", "mine": OTHER}, OTHER),
    ({}, None),
])
def test_which_remote_names_the_repository(urls, picked):
    assert repo_id.pick_remote(urls) == picked


N = I(R1, HTTPS)
OLD = "git-" + R1


@pytest.mark.parametrize("owner_now,takes", [
    (N, True),  # the checkout the old graph recorded has this very identity: one repository
    (repo_id.identity_of_path("/gone"), True),  # that checkout is gone (moved, deleted)
    (I(R2, OTHER), True),  # it holds another repository now
    (OLD, False),  # it is still known by the old form (no remote): the graph is still its own
    (I(R1, OTHER), False),  # a template's other clone: it takes the old graph itself when it opens
    (I(None, HTTPS), True),  # a shallow clone there now: it does not claim the root-only graph
])
def test_who_may_take_an_old_graph(owner_now, takes):
    assert identities.may_take(OLD, N, owner_now) is takes


def test_one_graph_one_identity_in_the_index(tmp_path):
    from kg.disk.layout import Layout

    ids = identities.Identities(Layout(str(tmp_path)))
    ids.record(OLD, "app")
    ids.record("git-" + R2, "other")
    ids.record(N, "app")  # the graph of `app` re-identified: the old form no longer leads to it
    assert ids.by_id == {N: "app", "git-" + R2: "other"}
    assert json.loads((tmp_path / "identities.json").read_text()) == ids.by_id


# ---------------------------------------------------------------- the rule, real repositories


def test_template_clones_with_their_own_remotes_are_two_repositories(tmp_path):
    t = make_template(tmp_path / "template")
    p = clone(t, tmp_path / "p", HTTPS)
    q = clone(t, tmp_path / "q", OTHER)
    p2 = clone(t, tmp_path / "elsewhere" / "p-again", SCP)  # P's repository cloned again, ssh spelling
    kept = clone(t, tmp_path / "kept", str(t))  # the template's origin kept: a clone of the template
    kept2 = clone(t, tmp_path / "kept2", "file://" + str(t))
    bare = clone(t, tmp_path / "bare", None)
    root = root_of(t)
    assert root_of(p) == root_of(q) == root
    got = {name: repo_id.project_identity(str(path)) for name, path in
           [("p", p), ("q", q), ("p2", p2), ("kept", kept), ("kept2", kept2), ("bare", bare)]}
    assert got["p"] == got["p2"] == I(root, HTTPS)
    assert got["q"] == I(root, OTHER) != got["p"]
    assert got["kept"] == got["kept2"] not in (got["p"], got["q"])
    assert got["bare"] == "git-" + root
    assert len({got["p"], got["q"], got["kept"], got["bare"]}) == 4


def test_remotes_renamed_added_repointed(tmp_path):
    t = make_template(tmp_path / "template")
    r = clone(t, tmp_path / "r", None)
    root = root_of(r)
    ident = lambda: repo_id.project_identity(str(r))  # noqa: E731
    assert ident() == "git-" + root
    git(r, "remote", "add", "origin", HTTPS)  # a remote added later: a new identity ...
    assert ident() == I(root, HTTPS) and "git-" + root in repo_id.earlier_forms(ident())  # ... that knows the old
    git(r, "remote", "set-url", "origin", SCP)  # https -> ssh: the same repository
    assert ident() == I(root, HTTPS)
    git(r, "remote", "rename", "origin", "github")  # the only remote, renamed
    assert ident() == I(root, HTTPS)
    git(r, "remote", "add", "fork", FORK)  # two remotes, neither is origin: the root commit alone
    assert ident() == "git-" + root
    git(r, "remote", "rename", "fork", "origin")  # the fork workflow: origin is the fork
    assert ident() == I(root, FORK)


def test_shallow_clone_and_repository_without_commits(tmp_path):
    t = make_template(tmp_path / "template")
    (t / "more").write_text("x\n")
    git(t, "add", "-A")
    git(t, "commit", "-q", "-m", "two")
    url = "file://" + str(t)
    git(tmp_path, "clone", "-q", "--depth", "1", url, str(tmp_path / "shallow"))
    shallow = repo_id.project_identity(str(tmp_path / "shallow"))
    assert shallow == repo_id.identity_of_url(url)
    git(tmp_path / "shallow", "fetch", "-q", "--unshallow")
    full = repo_id.project_identity(str(tmp_path / "shallow"))
    assert full == I(root_of(t), url) and shallow in repo_id.earlier_forms(full)
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert repo_id.project_identity(str(empty)) == repo_id.identity_of_path(str(empty))
    git(empty, "remote", "add", "origin", HTTPS)
    assert repo_id.project_identity(str(empty)) == repo_id.identity_of_url(HTTPS)


# ---------------------------------------------------------------- graphs in one store


def old_rule(project_root):
    """The identity rule before remotes counted (as the previous kgd computed it)."""
    if os.path.exists(os.path.join(project_root, ".git")):
        commit = repo_id.root_commit(project_root)
        if commit:
            return "git-" + commit
        by_url = repo_id.identity_of_url(repo_id.remote_urls(project_root).get("origin"))
        if by_url:
            return by_url
    return repo_id.identity_of_path(project_root)


def open_store(root):
    return team.install(Store(str(root), Settings(max_tokens=10 ** 6))).open()


def put(store, path, nid, gist="g"):
    store.put_node(store.start_session(str(path)), "project", nid, gist)


def ids(store, path):
    return set(store.graph("project", store.start_session(str(path))).nodes)


def index(root):
    return json.loads((root / "identities.json").read_text())


def old_root(tmp_path, monkeypatch, writers):
    """A storage root as the previous kgd left it: `writers` ((checkout, node id)...) wrote under
    identities by root commit alone, so a template's clones shared one graph."""
    root = tmp_path / "root"
    with monkeypatch.context() as m:
        m.setattr(repo_id, "project_identity", old_rule)
        store = open_store(root)
        try:
            for path, nid in writers:
                put(store, path, nid)
        finally:
            store.close()
    return root


@pytest.fixture
def template_clones(tmp_path):
    t = make_template(tmp_path / "template")
    return (t, clone(t, tmp_path / "src" / "app", HTTPS), clone(t, tmp_path / "work" / "app", OTHER))


def test_template_clones_are_two_graphs(tmp_path, template_clones):
    _, p, q = template_clones
    store = open_store(tmp_path / "root")
    try:
        put(store, p, "from-p")
        put(store, q, "from-q")
        assert ids(store, p) == {"from-p"} and ids(store, q) == {"from-q"}
    finally:
        store.close()
    assert sorted(index(tmp_path / "root")) == sorted([I(root_of(p), HTTPS, str(p)), I(root_of(q), OTHER, str(q))])
    store = open_store(tmp_path / "root")
    try:
        assert ids(store, q) == {"from-q"} and ids(store, p) == {"from-p"}
    finally:
        store.close()


def test_the_defect_as_it_was(tmp_path, monkeypatch, template_clones):
    _, p, q = template_clones
    root = old_root(tmp_path, monkeypatch, [(p, "from-p"), (q, "from-q")])
    assert list(index(root)) == ["git-" + root_of(p)] and len(os.listdir(str(root / "projects"))) == 1


@pytest.mark.parametrize("first", ["p", "q", "p2"])
def test_upgrade_old_graph_goes_to_its_checkout_whoever_opens_first(tmp_path, monkeypatch, template_clones, first):
    t, p, q = template_clones
    p2 = clone(t, tmp_path / "p2", SCP)  # P's repository at another path (ssh spelling)
    root = old_root(tmp_path, monkeypatch, [(p, "from-p"), (q, "from-q")])
    store = open_store(root)
    try:
        order = {"p": [p, q, p2], "q": [q, p2, p], "p2": [p2, q, p]}[first]
        seen = {str(path): ids(store, path) for path in order}
        assert seen[str(p)] == seen[str(p2)] == {"from-p", "from-q"}  # nothing lost, nothing split from P
        assert seen[str(q)] == set()  # the template's other clone: a graph of its own
        put(store, q, "q-new")
        put(store, p2, "p2-new")
        assert ids(store, p) == {"from-p", "from-q", "p2-new"} and ids(store, q) == {"q-new"}
    finally:
        store.close()
    rid = root_of(p)
    assert sorted(index(root)) == sorted([I(rid, HTTPS, str(p)), I(rid, OTHER, str(q))])  # the old form is gone
    store = open_store(root)
    try:
        assert ids(store, q) == {"q-new"} and ids(store, p2) == {"from-p", "from-q", "p2-new"}
    finally:
        store.close()


def test_upgrade_checkout_gone_first_clone_of_the_root_takes_it(tmp_path, monkeypatch, template_clones):
    t, p, q = template_clones
    root = old_root(tmp_path, monkeypatch, [(p, "from-p")])
    shutil.rmtree(str(p))  # moved or deleted since
    store = open_store(root)
    try:
        assert ids(store, q) == {"from-p"}  # nobody claims it any more: nothing left behind
        assert ids(store, clone(t, tmp_path / "later", FORK)) == set()
    finally:
        store.close()


def test_upgrade_checkout_without_remote_keeps_its_graph(tmp_path, monkeypatch, template_clones):
    t, p, q = template_clones
    git(p, "remote", "remove", "origin")
    root = old_root(tmp_path, monkeypatch, [(p, "from-p")])
    store = open_store(root)
    try:
        assert ids(store, q) == set()  # P is still known by the root commit alone: its graph stays P's
        assert ids(store, p) == {"from-p"}
        git(p, "remote", "add", "origin", HTTPS)  # a remote added while the daemon runs: next start
    finally:
        store.close()
    store = open_store(root)
    try:
        assert ids(store, p) == {"from-p"}
        assert ids(store, clone(t, tmp_path / "p-again", HTTPS)) == {"from-p"}
    finally:
        store.close()
    assert "git-" + root_of(p) not in index(root)


def test_adoption_runs_git_outside_the_lock(tmp_path, monkeypatch, template_clones):
    _, p, q = template_clones
    root = old_root(tmp_path, monkeypatch, [(p, "from-p")])
    store = open_store(root)
    calls = []
    real = git_runner.run

    def run(args, cwd, *a, **kw):
        calls.append((list(args), store.lock._is_owned()))
        return real(args, cwd, *a, **kw)

    monkeypatch.setattr(git_runner, "run", run)
    try:
        assert ids(store, q) == set()  # the recorded checkout's identity was computed: before the lock
        assert ids(store, p) == {"from-p"}
    finally:
        store.close()
    assert calls and not [a for a, held in calls if held]


# ---------------------------------------------------------------- the personal remote's old folder


def line(nid, gist):
    return kg_format.canonical({"id": nid, "gist": gist, "notes": [], "touches": [], "created": 1.0,
                                "changed": 1.0}).encode() + b"\n"


def test_carry_over_folds_an_old_folder_once_into_one_identity(tmp_path):
    folder = tmp_path / "projects"
    old, new = folder / OLD, folder / N
    old.mkdir(parents=True)
    nodes = old / kg_format.NODES_FILE
    nodes.write_bytes(line("a", "from the old machine"))
    assert identities.carry_over(str(folder), N, lambda ident: ident == OLD) == []  # held here: not folded
    assert not new.exists()
    assert identities.carry_over(str(folder), N, lambda ident: False) == [OLD]
    assert (new / kg_format.NODES_FILE).read_bytes() == line("a", "from the old machine")
    assert identities.carry_over(str(folder), N, lambda ident: False) == []  # the same bytes: once
    identities._seen.clear()  # a restart
    assert identities.carry_over(str(folder), N, lambda ident: False) == []
    assert nodes.read_bytes() == line("a", "from the old machine")  # the old machine's files are left as they are
    (new / kg_format.NODES_FILE).write_bytes(line("b", "written here"))  # the bridge rewrote it meanwhile
    nodes.write_bytes(line("a", "changed there since"))
    assert identities.carry_over(str(folder), N, lambda ident: False) == [OLD]
    assert (new / kg_format.NODES_FILE).read_bytes() == line("b", "written here") + line("a", "changed there since")
    other = I(R1, OTHER)  # the template's other clone, on this or another machine: the folder is N's
    assert identities.carry_over(str(folder), other, lambda ident: False) == []
    assert not (folder / other).exists()
    assert identities.carry_over(str(folder), OLD, lambda ident: False) == []  # no earlier form
    claims = [json.loads(x) for x in (old / identities.CARRIED).read_text().splitlines()]
    assert [c["to"] for c in claims] == [N, N]


def test_carry_over_race_the_first_identity_wins(tmp_path):
    folder = tmp_path / "projects"
    (folder / OLD).mkdir(parents=True)
    (folder / OLD / kg_format.NODES_FILE).write_bytes(line("a", "old"))
    a, b = sorted([I(R1, HTTPS), I(R1, OTHER)])
    (folder / OLD / identities.CARRIED).write_text(  # two machines claimed it at once; git's union kept both
        json.dumps({"digest": "x", "to": b}) + "\n" + json.dumps({"digest": "y", "to": a}) + "\nnot json\n")
    assert identities.carry_over(str(folder), b, lambda ident: False) == []
    assert identities.carry_over(str(folder), a, lambda ident: False) == [OLD]
