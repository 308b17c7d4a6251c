"""bench/share_bench.py runs (contract section 9, "Living with git"): its quickest mode goes through
every step with real git and real daemons and prints every figure. Nothing here is timed: the
figures are the bench's to quote, from one run; what is checked is what the run must show
whatever the machine (what kgd diff counted, no tracked file modified, fold emptying changes/)."""

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, clean_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True,
                                                env=clean_env()).returncode != 0, reason="git is not installed")]


def test_quickest_run_prints_every_figure():
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "share_bench.py"), "--quick", "--nodes", "300",
                        "--commit-every", "100", "--puts", "40", "--changed", "30", "--rounds", "1"],
                       capture_output=True, text=True, env=clean_env(), timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for row in ("1. put, shared / private", "2. git status, 40 uncommitted changes", "   git status, clean",
                "3. git pull changing 30 of 300 nodes", "4. kgd diff A..B over 30 changed nodes",
                "5. .kg/ after 300 puts (3 commits)", "   .kg/ after kgd fold"):
        assert "\n" + row in out, (row, out)
    assert re.search(r"\n1\. put.*= \d+\.\d\d ", out), out
    assert "tracked files under .kg/ modified by kgd: 0 after the puts, 0 after the pulls" in out, out
    assert "'changed': 30, 'deleted': 0" in out, out
    data = re.findall(r"\n     of them data \(\.jsonl\) / under changes/ +[\d,]+ bytes, (\d+) files / (\d+) files", out)
    # one changes file per commit (kgd moves on to a new one once git tracks its last), then none
    assert data == [("5", "3"), ("2", "0")], out
