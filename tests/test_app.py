"""kg/serve/app.py: the daemon wired in-process (port 0, a thread, a clean stop), `run(cfg)`'s start-up
errors, the structured_output switch, and POST /api/hooks through the daemon's hooks callable."""

import argparse
import json
import socket
import threading

import pytest

from kg.ops import cli
from kg.serve import app, http

from helpers import http_request


def config(root, **over):
    cfg = cli.resolve_config(argparse.Namespace(), environ={})
    cfg.update(root=str(root), port=0, save_interval=0.2)
    cfg.update(over)
    return cfg


@pytest.fixture
def running(tmp_path):
    a = app.App(config(tmp_path / "root")).start()
    yield a
    a.stop()


def test_in_process_start_serve_and_stop(tmp_path):
    a = app.App(config(tmp_path / "root")).start()
    assert a.port > 0 and a.url == "http://127.0.0.1:%d/" % a.port and a.running()
    st, _, data = http_request(a.port, "GET", "/health")
    assert st == 200 and json.loads(data)["status"] == "ok"
    st, _, data = http_request(a.port, "PUT", "/api/nodes/user/kept", json.dumps({"gist": "survives the stop"}),
                          {"Content-Type": "application/json"})
    assert st == 200, data
    a.stop()
    a.stop()  # idempotent
    assert not a.running()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", a.port), timeout=1).close()
    b = app.App(config(tmp_path / "root")).start()  # the lock was released, the write flushed
    try:
        st, _, data = http_request(b.port, "GET", "/api/nodes/user/kept")
        assert st == 200 and json.loads(data)["gist"] == "survives the stop"
    finally:
        b.stop()


def test_a_second_daemon_on_the_same_root_is_refused(running, tmp_path):
    with pytest.raises(app.StartError):
        app.App(config(tmp_path / "root")).start()


def test_port_in_use_is_one_clear_line(running, tmp_path, capsys):
    cfg = config(tmp_path / "other", port=running.port)
    with pytest.raises(app.StartError) as e:
        app.App(cfg).start()
    assert str(e.value) == ("port %d on 127.0.0.1 is already in use (is kgd already running? try `kgd status`)."
                            % running.port)
    assert app.run(cfg) == 2
    err = capsys.readouterr().err
    assert err.startswith("kgd: port %d on 127.0.0.1 is already in use" % running.port) and err.count("\n") == 1
    b = app.App(config(tmp_path / "other")).start()
    b.stop()


def test_unusable_root_is_one_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(app.StartError) as e:
        app.App(config(blocker / "root")).start()
    assert "root" in str(e.value) and "\n" not in str(e.value)


def test_run_serves_until_signalled(tmp_path, monkeypatch, capsys):
    """run(): the start line, then a clean stop when the loop is told to stop (as SIGTERM does)."""
    handlers = {}
    monkeypatch.setattr(app.signal, "signal", lambda sig, fn: handlers.setdefault(sig, fn))
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("code", app.run(config(tmp_path / "root"))))
    t.start()
    for _ in range(200):
        if len(handlers) == 2:
            break
        threading.Event().wait(0.05)
    handlers[app.signal.SIGTERM](app.signal.SIGTERM, None)
    t.join(10)
    assert result == {"code": 0}
    err = capsys.readouterr().err
    assert "listening on http://127.0.0.1:" in err and "(root: %s)" % (tmp_path / "root") in err


# ------------------------------------------------------------------ structured output switch

def test_structured_output_reaches_the_mcp_server(tmp_path, monkeypatch):
    seen = []

    class FakeServer:
        def __init__(self, store, **kw):
            seen.append(kw)

    monkeypatch.setattr(http.mcp, "Server", FakeServer)
    for flag in (False, True):
        a = app.App(config(tmp_path / ("root-%s" % flag), structured_output=flag)).start()
        a.stop()
    assert seen == [{"structured": False}, {"structured": True}]


# ------------------------------------------------------------------ POST /api/hooks

HOOK_INPUT = {"session_id": "claude-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
              "hook_event_name": "UserPromptSubmit", "prompt": "how do we build?"}
JSON = {"Content-Type": "application/json"}


def test_hooks_default_is_an_empty_200(running):
    st, hdrs, data = http_request(running.port, "POST", "/api/hooks", json.dumps(HOOK_INPUT), JSON)
    assert (st, data, hdrs["content-length"]) == (200, b"", "0")
    assert "content-type" not in hdrs


def test_hooks_answer_is_the_callables_dict(running):
    got = []

    def answer(payload):
        got.append(payload)
        return {"hookSpecificOutput": {"hookEventName": payload["hook_event_name"], "additionalContext": "ctx é"}}

    running.daemon.hooks = answer
    st, hdrs, data = http_request(running.port, "POST", "/api/hooks", json.dumps(HOOK_INPUT), JSON)
    assert st == 200 and hdrs["content-type"].startswith("application/json")
    assert json.loads(data) == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                       "additionalContext": "ctx é"}}
    assert got == [HOOK_INPUT]
    running.daemon.hooks = lambda payload: None
    st, hdrs, data = http_request(running.port, "POST", "/api/hooks", json.dumps(HOOK_INPUT), JSON)
    assert (st, data, hdrs["content-length"]) == (200, b"", "0")


@pytest.mark.parametrize("body, status", [
    (b"", 400), (b"[1, 2]", 400), (b'"text"', 400), (b"null", 400), (b"{broken", 400), (b"\xff\xfe", 400),
])
def test_hooks_refuse_a_body_that_is_not_a_json_object(running, body, status):
    called = []
    running.daemon.hooks = lambda payload: called.append(payload)
    st, _, data = http_request(running.port, "POST", "/api/hooks", body, JSON)
    assert st == status and "error" in json.loads(data)
    assert not called


def test_hooks_method_and_content_type(running):
    st, hdrs, data = http_request(running.port, "GET", "/api/hooks")
    assert st == 405 and hdrs["allow"] == "POST"
    st, _, _ = http_request(running.port, "POST", "/api/hooks", b"plain", {"Content-Type": "text/plain"})
    assert st == 415


def test_hooks_are_guarded_like_every_route(tmp_path):
    a = app.App(config(tmp_path / "root", token="hook-token-1")).start()
    try:
        a.daemon.hooks = lambda payload: {"systemMessage": "hi"}
        body = json.dumps(HOOK_INPUT)
        assert http_request(a.port, "POST", "/api/hooks", body, JSON)[0] == 401
        auth = dict(JSON, Authorization="Bearer hook-token-1")
        assert http_request(a.port, "POST", "/api/hooks", body, auth)[0] == 200
        assert http_request(a.port, "POST", "/api/hooks", body, dict(auth, Origin="https://evil.example"))[0] == 403
        assert http_request(a.port, "POST", "/api/hooks", body, dict(auth, Host="evil.example"))[0] == 403
    finally:
        a.stop()


def test_kg_hooks_are_wired(tmp_path):
    """The app answers /api/hooks with kg/agents/loop.py: a SessionStart binds a session and preloads."""
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    a = app.App(config(tmp_path / "root")).start()
    try:
        body = {"session_id": "claude-1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
                "hook_event_name": "SessionStart", "source": "startup"}
        st, _, data = http_request(a.port, "POST", "/api/hooks", json.dumps(body), JSON)
        out = json.loads(data)
        assert st == 200 and out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        assert out["hookSpecificOutput"]["additionalContext"].startswith("Session: ")
    finally:
        a.stop()


def test_kgd_serve_makes_full_collections_rare_and_keeps_young_ones():
    """kg/serve/app.py tune_collector (called by `kgd serve`): full passes walk the whole long-lived
    heap, and were half of a big .kg/ load's time under the lock; the young generations stay."""
    import gc

    before = gc.get_threshold()
    try:
        app.tune_collector()
        young, middle, full = gc.get_threshold()
        assert (young, middle) == before[:2] and full == app.GC_FULL_AFTER >= 100 * 10
    finally:
        gc.set_threshold(*before)


def test_kgd_serve_tunes_the_collector_once_started(monkeypatch):
    """run() is `kgd serve`: it tunes the collector after start-up (not App, which tests run in-process)."""
    calls = []
    monkeypatch.setattr(app, "tune_collector", lambda: calls.append("tuned"))
    monkeypatch.setattr(app, "release_startup_memory", lambda: calls.append("released"))

    class Started:
        url = "http://127.0.0.1:1/"

        def __init__(self, cfg):
            pass

        def start(self):
            pass

        def running(self):
            return False

        def stop(self):
            calls.append("stopped")
    monkeypatch.setattr(app, "App", Started)
    monkeypatch.setattr(app.signal, "signal", lambda *a: None)
    assert app.run({"log_level": "WARNING", "root": "/nonexistent"}) == 0
    assert calls == ["released", "tuned", "stopped"]
