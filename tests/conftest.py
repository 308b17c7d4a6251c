"""Shared fixtures: a real kgd process on a free port (`--port 0`) over a temporary root, and project folders.

Markers (pytest.ini): `e2e` runs kgd as a process or a real client, `slow` takes over ~2 s; a test
that takes `make_daemon` or `daemon` is e2e whatever its file says.

Project paths: `project` is the folder as made (a pathlib.Path under tmp_path); `proj` and `other_project`
are resolved path strings, the form kgd reports, so a test may compare them with kgd's answers directly.
"""

import pytest

from helpers import HOMES, Daemon, real, short_id

MAX_ID = 200  # characters of a test id (PYTEST_CURRENT_TEST holds it; children never see it)


def pytest_collection_modifyitems(items):
    """A test that starts a daemon through these fixtures is e2e, even where its file forgot the mark.
    A test id over MAX_ID characters stops the run: give it a short one (ids= or pytest.param(id=...))."""
    long_ids = [item.nodeid[:120] + "..." for item in items if len(item.nodeid) > MAX_ID]
    if long_ids:
        raise pytest.UsageError("test ids over %d characters (give short ones: ids= or pytest.param(id=...)): %s"
                                % (MAX_ID, "; ".join(long_ids[:10])))
    for item in items:
        if "make_daemon" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)


def pytest_make_parametrize_id(config, val, argname):
    """Large str / bytes parameters get short ids (pytest would use the value itself)."""
    return short_id(val)


@pytest.fixture(scope="session", autouse=True)
def _children_homes(tmp_path_factory):
    HOMES.factory = tmp_path_factory


@pytest.fixture(autouse=True)
def _child_home(_children_homes):
    """The test's child processes get a HOME of its own (made only if one starts)."""
    HOMES.enter_test(True)
    yield
    HOMES.enter_test(False)


@pytest.fixture
def make_daemon(tmp_path):
    started = []

    def make(root=None, args=(), env=None, start=True):
        d = Daemon(root or (tmp_path / "root"), args, env)
        started.append(d)
        return d.start() if start else d
    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(make_daemon):
    return make_daemon()


@pytest.fixture
def project(tmp_path):
    """A project folder with a .git directory and a subfolder to use as cwd."""
    root = tmp_path / "work" / "myproj"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root


@pytest.fixture
def proj(project):
    """The project's resolved path, as kgd reports it."""
    return real(project)


@pytest.fixture
def other_project(tmp_path):
    """A second project's resolved path (a sibling of `project`)."""
    root = tmp_path / "work" / "otherproj"
    (root / ".git").mkdir(parents=True)
    return real(root)
