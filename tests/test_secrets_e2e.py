"""The calibrated secrets gate end to end (contract section 10, "Calibration"): a real daemon on
--port 0; for each credential category of tests/secrets_calibration.py, a line is refused over MCP
(isError, the field, the kind and its advice, never the secret) and over REST (422), and nothing is
stored; for each near-miss category, a line is stored and read back as sent.
"""

import pytest

from kg.secrets import kinds as secrets

import secrets_calibration

pytestmark = pytest.mark.e2e

_ROWS = secrets_calibration.lines(4242)


def _first(category, secret):
    return next(t for c, s, t in _ROWS if c == category and s is secret)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from helpers import Daemon
    d = Daemon(tmp_path_factory.mktemp("secrets-e2e") / "root", env={"KG_STRUCTURED_OUTPUT": "0"})
    d.start()
    proj = tmp_path_factory.mktemp("proj")
    (proj / ".git").mkdir()
    first = d.call("kg_read", {"cwd": str(proj)})["content"][0]["text"]
    sid = first.split("Session: ", 1)[1].split()[0]
    yield d, sid
    d.stop()


@pytest.mark.parametrize("category", secrets_calibration.SECRET_CATEGORIES)
def test_each_credential_category_is_refused_over_mcp_and_rest(served, category):
    d, sid = served
    text = _first(category, True)
    nid = "cal-" + category.replace(" ", "-")
    r = d.call("kg_put_node", {"session_id": sid, "level": "project", "id": nid, "gist": "how we reach it",
                               "notes": ["context", text]})
    assert r["isError"] is True, (category, text)
    message = r["content"][0]["text"]
    assert "notes[1] looks like " in message and "Nothing was written." in message
    hit = secrets.find(text)
    secret = text[hit.start:hit.end]
    assert "save " in message and secret not in message and text not in message
    assert "Not found: " + nid in d.call("kg_read", {"session_id": sid, "id": nid})["content"][0]["text"]
    code, body = d.json("PUT", "/api/nodes/user/" + nid, {"gist": "g", "notes": [text]})
    assert code == 422 and body["error"].startswith("notes[0] looks like "), (category, body)
    assert text not in body["error"]
    assert d.json("GET", "/api/nodes/user/" + nid)[0] == 404


def test_a_password_refusal_gives_password_advice(served):
    d, sid = served
    text = next(t for c, s, t in _ROWS if c == "env and config" and s and t.startswith(("DB_PASSWORD", "PASSWORD")))
    r = d.call("kg_put_node", {"session_id": sid, "level": "user", "id": "pw", "gist": "db", "notes": [text]})
    message = r["content"][0]["text"]
    assert "looks like a password: save the name of the variable or vault entry that holds this password" in message
    assert "GITHUB_TOKEN" not in message


@pytest.mark.parametrize("category", secrets_calibration.NEAR_CATEGORIES)
def test_each_near_miss_category_is_stored(served, category):
    d, sid = served
    text = _first(category, False)
    nid = "near-" + category.replace(" ", "-")
    r = d.call("kg_put_node", {"session_id": sid, "level": "user", "id": nid, "gist": "how it is read",
                               "notes": [text]})
    assert r.get("isError") is not True, (category, text, r["content"][0]["text"])
    code, body = d.json("GET", "/api/nodes/user/" + nid)
    assert code == 200 and body["notes"] == [text]
    code, _ = d.json("PUT", "/api/nodes/user/" + nid + "-rest", {"gist": "g", "notes": [text]})
    assert code in (200, 201), category
