"""A project's identity (contract section 9): the same repository is one project at any path, on any
machine; a repository with no commit is known by its origin; anything else by its path."""


import pytest

from kg.memory import git_runner, repo_id


def git(cwd, *args):
    return git_runner.output(list(args), str(cwd))


def make_repo(path, files=("a",)):
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for f in files:
        (path / f).write_text(f + "\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_clones_at_two_paths_are_one_project(tmp_path):
    origin = make_repo(tmp_path / "origin")
    git(tmp_path, "clone", "-q", str(origin), str(tmp_path / "src" / "app"))
    git(tmp_path, "clone", "-q", str(origin), str(tmp_path / "work" / "app2"))
    a = repo_id.project_identity(str(tmp_path / "src" / "app"))
    b = repo_id.project_identity(str(tmp_path / "work" / "app2"))
    root = git(origin, "rev-list", "--max-parents=0", "HEAD")
    assert a == b == repo_id.identity_for(root, str(origin), str(origin))
    assert repo_id.is_identity(a)


def test_identity_survives_new_commits_and_branches(tmp_path):
    repo = make_repo(tmp_path / "r")
    before = repo_id.project_identity(str(repo))
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "b").write_text("b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
    assert repo_id.project_identity(str(repo)) == before


def test_worktree_is_the_same_project(tmp_path):
    repo = make_repo(tmp_path / "r")
    git(repo, "worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt"))
    assert repo_id.project_identity(str(tmp_path / "wt")) == repo_id.project_identity(str(repo))


def test_joined_histories_take_the_lexically_first_root(tmp_path):
    a = make_repo(tmp_path / "a", files=("x",))
    b = make_repo(tmp_path / "b", files=("y",))
    git(a, "fetch", "-q", str(b), "HEAD")
    git(a, "merge", "-q", "--allow-unrelated-histories", "--no-edit", "FETCH_HEAD")
    roots = sorted(git(a, "rev-list", "--max-parents=0", "HEAD").split())
    assert len(roots) == 2
    assert repo_id.project_identity(str(a)) == "git-" + roots[0]


def test_no_commit_yet_uses_the_origin_url_in_any_spelling(tmp_path):
    ids = []
    for i, url in enumerate(["https://github.com/Me/App.git", "git@github.com:Me/App.git",
                             "ssh://git@GitHub.com:22/Me/App", "https://user@github.com/Me/App/"]):
        d = tmp_path / ("c%d" % i)
        d.mkdir()
        git(d, "init", "-q")
        git(d, "remote", "add", "origin", url)
        ids.append(repo_id.project_identity(str(d)))
    assert len(set(ids)) == 1 and ids[0].startswith("url-")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "remote", "add", "origin", "https://github.com/Me/Other.git")
    assert repo_id.project_identity(str(other)) != ids[0]


def test_shallow_clone_uses_its_origin(tmp_path):
    origin = make_repo(tmp_path / "origin")
    (origin / "b").write_text("b\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "two")
    git(tmp_path, "clone", "-q", "--depth", "1", "file://" + str(origin), str(tmp_path / "shallow"))
    got = repo_id.project_identity(str(tmp_path / "shallow"))
    assert got == repo_id.identity_of_url("file://" + str(origin))


def test_not_a_repository_is_its_path(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    got = repo_id.project_identity(str(d))
    assert got.startswith("path-") and got == repo_id.identity_of_path(str(d))
    link = tmp_path / "link"
    link.symlink_to(d)
    assert repo_id.project_identity(str(link)) == got
    assert repo_id.project_identity(str(tmp_path / "other")) != got


def test_empty_git_folder_without_commit_or_origin_is_its_path(tmp_path):
    d = tmp_path / "p"
    (d / ".git").mkdir(parents=True)  # not even a valid repository
    assert repo_id.project_identity(str(d)) == repo_id.identity_of_path(str(d))


def test_git_missing_falls_back_to_the_path(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "r")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert repo_id.project_identity(str(repo)) == repo_id.identity_of_path(str(repo))


@pytest.mark.parametrize("url,norm", [
    ("https://github.com/Me/App.git", "github.com/Me/App"),
    ("git@github.com:Me/App.git", "github.com/Me/App"),
    ("ssh://git@github.com:2222/Me/App.git/", "github.com/Me/App"),
    ("git@host:~me/app", "host~me/app"),
    ("file:///srv/git/app.git", "/srv/git/app"),
    ("/srv/git/app.git", "/srv/git/app"),
    ("", ""),
])
def test_normalise_url(url, norm):
    assert repo_id.normalise_url(url) == norm


def test_identities_are_safe_folder_names():
    for ident in (repo_id.identity_of_path("/a/B"), repo_id.identity_of_url("https://h/X"), "git-" + "0" * 40):
        assert repo_id.is_identity(ident) and ident == ident.lower() and ident.isascii() and "/" not in ident
    assert not repo_id.is_identity("../etc") and not repo_id.is_identity("git-XYZ")
