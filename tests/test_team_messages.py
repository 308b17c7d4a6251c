"""What a person is told about the team's `.kg/` (contract section 9): a symbolic link is named as
one, and `kgd share` in a project already shared and committed says there is nothing to commit."""

import os
import shutil
import subprocess
import sys

import pytest

from kg.travel import team_folder

from helpers import clean_env, free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_symlinked_kg_file_is_named_as_a_link(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("{}\n")
    link = tmp_path / "nodes.jsonl"
    link.symlink_to(target)
    data, problem = team_folder.read_file(str(link))
    assert data is None and "is a symbolic link" in problem and "Too many levels" not in problem


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_share_twice_says_nothing_to_commit(tmp_path):
    repo = tmp_path / "app"
    repo.mkdir()
    env = clean_env()
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@example.org"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True, env=env)
    kgd = [sys.executable, os.path.join(REPO, "kgd.py"), "--root", str(tmp_path / "root"), "--port", str(free_port()),
           "share"]
    first = subprocess.run(kgd, cwd=repo, capture_output=True, text=True, env=env, timeout=60)
    assert first.returncode == 0 and "git add .kg" in first.stdout, first.stderr
    subprocess.run(git + ["add", ".kg"], cwd=repo, check=True, env=env)
    subprocess.run(git + ["commit", "-qm", "share"], cwd=repo, check=True, env=env)
    again = subprocess.run(kgd, cwd=repo, capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0 and "Nothing to commit" in again.stdout and "git add" not in again.stdout, again
