"""kg/agents/shell_files.py: the files a shell command reads or a patch edits (file recall for agents that
read files through their shell, contract section 11). Conservative: only existing files count."""

import os

import pytest

from kg.agents import shell_files

FILES = ("kg/store.py", "kg/a.py", "README.md", "src/x.rs", "20", "with space.txt")


@pytest.fixture
def cwd(tmp_path):
    for f in FILES:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    (tmp_path / "adir").mkdir()
    return str(tmp_path)


@pytest.mark.parametrize("command, expected", [
    ("cat kg/store.py", ["kg/store.py"]),
    ("sed -n '1,200p' kg/store.py", ["kg/store.py"]),
    ("sed -n 1,80p kg/store.py kg/a.py", ["kg/store.py", "kg/a.py"]),
    ("sed -e 's/a/b/' kg/a.py", ["kg/a.py"]),
    ("head -n 40 kg/store.py", ["kg/store.py"]),
    ("head -40 kg/store.py", ["kg/store.py"]),
    ("tail -n +20 kg/a.py 2>/dev/null", ["kg/a.py"]),
    ("less README.md", ["README.md"]),
    ("nl -ba kg/store.py | sed -n '1,120p'", ["kg/store.py"]),
    ("grep -n lock kg/store.py", ["kg/store.py"]),
    ("grep -e lock -e unlock kg/a.py", ["kg/a.py"]),
    ("rg -n 'fn main' src/x.rs README.md", ["src/x.rs", "README.md"]),
    ("rg -g '*.py' lock kg/store.py", ["kg/store.py"]),
    ("cd kg && cat store.py", ["kg/store.py"]),
    ("cat 'with space.txt'", ["with space.txt"]),
    ("ls kg; cat kg/a.py && echo done", ["kg/a.py"]),
    ("cat kg/store.py kg/a.py README.md src/x.rs", ["kg/store.py", "kg/a.py", "README.md"]),  # at most MAX_FILES
    ("cat kg/a.py kg/a.py", ["kg/a.py"]),
    ("bash -lc 'cat README.md'", ["README.md"]),
    ("LC_ALL=C grep -n x kg/a.py", ["kg/a.py"]),
    ("/usr/bin/cat kg/a.py", ["kg/a.py"]),
    ("less 20", ["20"]),                 # a file named 20 is a file
    ("head -n 20 kg/a.py", ["kg/a.py"]),  # ... but the 20 of -n is not one
    # nothing, conservatively
    ("grep -rn lock kg", []),            # a folder
    ("grep lock", []),                   # the pattern only
    ("cat kg/*.py", []),                 # globs are not expanded
    ("cat $HOME/x", []),
    ("cat ~/x", []),
    ("cat kg/missing.py", []),
    ("echo kg/a.py", []),                # not a reader
    ("echo hi > kg/a.py", []),
    ("python kg/a.py", []),
    ("cat \"unclosed", []),
    ("cd /nonexistent-dir-kgd && cat a.py", []),
    ("cd $X && cat kg/a.py", []),        # the directory is lost: nothing after it
    ("", []),
    ("   ", []),
])
def test_command_files(cwd, command, expected):
    assert shell_files.command_files(command, cwd) == [os.path.join(cwd, f) for f in expected]


def test_absolute_paths_and_argv_lists(cwd):
    path = os.path.join(cwd, "kg", "store.py")
    assert shell_files.command_files("cat %s" % path, "/") == [path]
    assert shell_files.command_files(["bash", "-lc", "cat kg/store.py"], cwd) == [path]
    assert shell_files.command_files(["cat", "kg/store.py"], cwd) == [path]
    assert shell_files.command_files(["cat", 5], cwd) == []


PATCH = """*** Begin Patch
*** Update File: kg/a.py
@@ def f():
-    return 1
+    return 2
*** Add File: src/x.rs
+fn main() {}
*** Delete File: kg/gone.py
*** Update File: kg/store.py
*** Move to: README.md
*** End Patch
"""


def test_patch_files(cwd):
    os.remove(os.path.join(cwd, "kg", "store.py"))  # moved away by the patch: only its new name exists
    assert shell_files.patch_files(PATCH, cwd) == [os.path.join(cwd, f) for f in ("kg/a.py", "src/x.rs", "README.md")]
    heredoc = "apply_patch <<'EOF'\n%sEOF\n" % PATCH
    assert shell_files.command_files(heredoc, cwd)[:1] == [os.path.join(cwd, "kg/a.py")]


@pytest.mark.parametrize("command, cwd_value", [
    ("cat kg/a.py", "relative/dir"),     # a cwd that is not absolute
    ("cat kg/a.py", None),
    (None, "/"),
    (5, "/"),
    ({"command": "cat"}, "/"),
    ("cat " + "a" * (shell_files.MAX_COMMAND + 1), "/"),
    ("cat " + " ".join(["kg/a.py"] * (shell_files.MAX_WORDS + 5)), "/"),
    ("cat a\0b", "/"),
])
def test_hostile_commands_name_nothing(cwd, command, cwd_value):
    assert shell_files.command_files(command, cwd_value) == []


def test_hostile_patches_name_nothing(cwd):
    assert shell_files.patch_files(None, cwd) == []
    assert shell_files.patch_files("*** Update File: " + "x" * 5000, cwd) == []
    assert shell_files.patch_files("*** Update File: kg/a.py\0", cwd) == []
