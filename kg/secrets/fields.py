"""Which texts of a node, an edge or a task's progress state the credential check reads, and how a
refusal or a withheld text reads (contract section 10). Pure; kg/secrets/kinds.py says whether one text
holds a credential.

Rules this file owns:
- A node's fields: id, gist, notes[i], touches[i]; an edge's: from, to, rel, edge notes[i]; a
  progress state's keys and string values, by key path. The fields are also scanned joined, so a
  private key pasted one line per note is found (named by its first field).
- A refusal names the field and the kind in words ("notes[2] looks like a GitHub token: ..."),
  never the secret, with advice fitted to the kind (a password: the variable or vault entry that
  holds it; a provider's key: the variable its documentation names); a withheld text is
  "[withheld: KIND]".
"""

from .kinds import Hit, find

_JOIN = "\n"  # no value, token or name class spans a line break: only a key block crosses two fields


def _fields_of_node(node):
    """(name, index, text): a field's name is "notes[%d]" % index, formatted only for a refusal
    (a clean node, the common case, never needs one)."""
    notes, touches = node.get("notes") or (), node.get("touches") or ()
    return ([("id", None, node.get("id")), ("gist", None, node.get("gist"))] +
            [("notes[%d]", i, t) for i, t in enumerate(notes)] + [("touches[%d]", i, t) for i, t in enumerate(touches)])


def _fields_of_edge(edge):
    return ([("from", None, edge.get("from")), ("to", None, edge.get("to")), ("rel", None, edge.get("rel"))] +
            [("edge notes[%d]", i, t) for i, t in enumerate(edge.get("notes") or ())])


def _named(field):
    name, i, _ = field
    return name if i is None else name % i


_last_whole = (None, None)  # (text, find's answer): a put scans what was sent, the node, then its graph


def _scan(fields):
    global _last_whole
    vals = [f[2] for f in fields]
    try:  # the common case, every field a string and none empty: no test per field
        joined = None if "" in vals else _JOIN.join(vals)
        texts = fields
    except TypeError:
        joined = None
    if joined is None:
        texts = [f for f in fields if isinstance(f[2], str) and f[2]]
        joined = _JOIN.join([f[2] for f in texts])
    last = _last_whole
    whole = last[1] if last[0] == joined else find(joined)  # one pass over the whole: the common case
    _last_whole = (joined, whole)
    if whole is None:
        return None
    for f in texts:
        hit = find(f[2])
        if hit is not None:
            return _named(f), hit
    # Found only across fields: a private key pasted one line per note. Named by where it starts.
    at = 0
    for f in texts:
        t = f[2]
        if whole.start < at + len(t) + 1:
            return _named(f), Hit(whole.kind, whole.label, max(whole.start - at, 0), len(t))
        at += len(t) + 1
    return _named(texts[-1]), whole


def scan_state(state):
    """("state.a.b[2]", Hit) for the first string of a kg_progress state holding a credential,
    or None. Keys are scanned, and each `"key": "value"` pair as written, so a password under
    a name ({"db_password": "..."}) is caught like one in a note. No recursion: a state may nest deep."""
    stack = [("state", state)]
    while stack:
        path, value = stack.pop()
        texts = ()
        if isinstance(value, str):
            texts = ((path, value),)
        elif isinstance(value, dict):
            pairs = [(k, v) for k, v in value.items() if isinstance(k, str)]
            texts = [(path, k) for k, _ in pairs] + [
                ("%s.%s" % (path, k), '"%s": "%s"' % (k, v)) for k, v in pairs if isinstance(v, (str, int, float))]
            stack.extend(("%s.%s" % (path, k), v) for k, v in reversed(pairs))
        elif isinstance(value, list):
            stack.extend(("%s[%d]" % (path, i), v) for i, v in reversed(list(enumerate(value))))
        for where, t in texts:
            hit = find(t)
            if hit is not None:
                return where, hit
    return None


WITHHELD = "[withheld: %s]"


def redact(text, limit=64):
    """The text with each credential found replaced by WITHHELD and its kind, for a person's
    own view of a flagged node (so it can be found and deleted without showing the secret)."""
    out = []
    for _ in range(limit):
        hit = find(text)
        if hit is None:
            break
        out.append(text[:hit.start] + WITHHELD % hit.kind)
        text = text[hit.end:]
    else:
        return WITHHELD % "text"
    return "".join(out) + text


def redact_item(item):
    """A public node or edge (a dict) with every text field redacted; lists copied."""
    out = dict(item)
    for key in ("id", "gist", "from", "to", "rel"):
        if isinstance(out.get(key), str):
            out[key] = redact(out[key])
    for key in ("notes", "touches"):
        if isinstance(out.get(key), list):
            out[key] = [redact(t) if isinstance(t, str) else t for t in out[key]]
    return out


def scan_node(node):
    """(field, Hit) for the first field of a node holding a credential, or None."""
    return _scan(_fields_of_node(node))


def scan_edge(edge):
    """(field, Hit) for the first field of an edge holding a credential, or None."""
    return _scan(_fields_of_edge(edge))


_TOKEN_VARIABLE = {  # the variable a provider's own documentation keeps its key in
    "github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "slack": "SLACK_BOT_TOKEN", "stripe": "STRIPE_SECRET_KEY",
    "google": "GOOGLE_API_KEY", "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "npm": "NPM_TOKEN",
    "pypi": "PYPI_API_TOKEN", "sendgrid": "SENDGRID_API_KEY", "aws-access-key-id": "AWS_ACCESS_KEY_ID",
    "aws-secret": "AWS_SECRET_ACCESS_KEY",
}
ADVICE = {
    "password": "save the name of the variable or vault entry that holds this password "
                "(e.g. \"DB_PASSWORD in .env\"), not the password",
    "url-password": "save the URL without its password and the name of the variable or vault entry that holds "
                    "the password (e.g. \"postgres://app@db/app, password in DB_PASSWORD\")",
    "basic-auth": "save the name of the variable or vault entry that holds these credentials, not the header",
    "private-key": "save the key file's path or the vault entry that holds it (e.g. \"~/.ssh/id_ed25519\"), "
                   "not the key",
    "jwt": "save where the token comes from (the login call, the cookie's name), not the token",
    "bearer": "save the name of the variable that holds this token (e.g. \"API_TOKEN in .env\"), not the token",
    "assigned-secret": "save the name of the variable or vault entry that holds this secret, not the secret",
    "slack-webhook": "save the name of the variable that holds the webhook URL (e.g. SLACK_WEBHOOK_URL), not the URL",
    "discord-webhook": "save the name of the variable that holds the webhook URL (e.g. DISCORD_WEBHOOK_URL), "
                       "not the URL",
    "too-many": "split the text or leave out the secret-shaped values",
}


def advice(kind):
    """What to save instead, fitted to the kind (contract section 10, Calibration)."""
    if kind in _TOKEN_VARIABLE:
        return "save where the key lives (e.g. \"in .env as %s\"), not the key" % _TOKEN_VARIABLE[kind]
    return ADVICE.get(kind, "save where the secret lives, not the secret")


def refusal(field, hit):
    """The refusal an agent reads: the field, the kind and advice fitted to it, never the secret."""
    return "%s looks like %s: %s. Nothing was written." % (field, hit.label, advice(hit.kind))
