"""Does a text hold a credential, and of which kind (contract section 10)? Pure.

Why it exists: agents paste what they see (an `.env` line, a token from a failing curl, a
connection string from a stack trace), and whatever kgd stores is shown to every later session
and, for a shared graph, committed to a repository. Every write is checked here first.

Rules this file owns:
- The table KINDS: each kind is one regular expression that starts with a literal, followed only
  by bounded character classes whose neighbours are disjoint, so the engine finds the literal with
  its fast prefix search and never backtracks more than a constant per hit. A small check in
  Python then judges the few full-format candidates (placeholder, randomness, the JWT header); a
  repeated near-miss is judged once. Linear time on any input.
- Names are matched case-insensitively on an ASCII-lower-cased copy of the text (same offsets):
  `(?i)` alternations defeat the engine's prefix search.
- Never refused: commit hashes, UUIDs, checksums, placeholders (`YOUR_API_KEY`, `sk-...`, `xxxx`,
  `<token>`, `${TOKEN}`, `changeme`, `***`), environment variable names, paths, URLs without a
  password, ordinary code and prose.
- A refusal names the field and the kind in words, never the secret.
- A text is read as its reader sees it: when nothing is found, it is scanned once more with
  invisible format characters (zero-width, BOM, soft hyphen) dropped and escaped quotes
  unescaped, and once more percent-decoded.
- Refused on purpose: Stripe test keys (sk_test_, rk_test_) and webhook secrets (whsec_): a test
  key still reads and writes the account's test data. Passed on purpose: AWS's documented example
  key id (AKIA...EXAMPLE) and other ids holding EXAMPLE.
"""

import base64
import binascii
import json
import re
import unicodedata
from collections import namedtuple
from urllib.parse import unquote

from . import positions as pw
from .positions import group as _group
from .prefilter import Prefilter, lowered
from .values import DIGIT, entropy, marked, random_body, secret_value  # noqa: F401 (entropy: the tests ask it here)

Hit = namedtuple("Hit", "kind label start end")
Kind = namedtuple("Kind", "kind label regex check lower")

# ---- the checks, one per kind of regex ----

def _check_token(text, m):
    return random_body(m.group("body"))


def _check_slack(text, m):
    """Slack tokens open with numeric team and user ids: digits, then random characters."""
    body = m.group("body")
    return len(set(body)) >= 6 and not DIGIT.isdisjoint(body) and not marked(body, 2)


def _check_aws_id(text, m):
    body = m.group("body")
    return len(set(body)) >= 6 and "EXAMPLE" not in body


def _check_jwt(text, m):
    head = text[m.start():m.end("head")]  # "eyJ" is the start of the encoded '{"'

    try:
        obj = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(obj, dict) and "alg" in obj and random_body(m.group("sig"))


def _check_private_key(text, m):
    return True


def _check_bearer(text, m):
    return secret_value(_group(text, m, "value"), False)


def _check_basic(text, m):
    """Basic base64(user:pass): refused when it decodes to user:password, or looks random."""
    value = _group(text, m, "value")
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
        user, sep, password = raw.partition(":")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return secret_value(value, False)
    return bool(sep) and pw.url_password(user, password)


def _check_slack_webhook(text, m):
    return random_body(m.group("body"), 12)


# ---- the kinds ----

def _token(kind, label, prefix, body):
    """A token that begins with a literal prefix, not glued to a word before it."""
    lit = re.escape(prefix)
    return Kind(kind, label, re.compile("%s(?<![A-Za-z0-9_\\-]%s)(?P<body>%s)" % (lit, lit, body)), _check_token, False)


def _assignment(keyword):
    """`name = value`, `name: value`, `"name": "value"`, `name := value` for names holding
    `keyword` (one regex per keyword: each starts with a literal, which the engine finds fast)."""
    # (?=(?P<tail>...))(?P=tail) takes the rest of the name atomically: no backtracking into it.
    return Kind("assigned-secret", None, re.compile(
        r"(?P<kw>%s)(?=(?P<tail>[a-z0-9_.\-]{0,30}))(?P=tail)"
        r"(?P<sep>[\"']?\]?(?:[ \t]{0,40}(?::=|=>|==|[:=])[ \t]{0,4}[\"'`]?|>|\([ \t]{0,4}[\"']|"  # aligned =, <x>, f('
        r"[ \t]{1,3}(?:(?:for|of|on)[ \t]{1,3}[^\n.:=;\"'`]{1,40}?[ \t]{1,3})?(?:is|was|to|are)[ \t]{1,3}"  # prose
        r"(?:(?:now|reset[ \t]{1,3}to|changed[ \t]{1,3}to|set[ \t]{1,3}to)[ \t]{1,3})?[\"'`]?|[ \t]{1,2}[\"'`]?))"
        r"(?P<value>[^\s\"'`,;<>(){}\[\]]{4,200})" % keyword), pw.check_assignment, True)


KINDS = (
    Kind("private-key", "a private key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,2}PRIVATE KEY(?: BLOCK)?-----"  # RSA, EC, OPENSSH, ENCRYPTED, PGP...
        r"(?:\\[rn]|[ \t\r\n]){0,64}(?:[A-Za-z0-9+/=]{32}|Proc-Type:|Version:|Comment:)"), _check_private_key, False),
    Kind("private-key", "a private key", re.compile(  # PuTTY .ppk: its private half follows this line
        r"Private-Lines:[ \t]{0,4}[0-9]{1,4}(?:\\[rn]|[ \t\r\n]){1,64}[A-Za-z0-9+/=]{32}"), _check_private_key, False),
    _token("private-key", "a private key", "AGE-SECRET-KEY-1", "[0-9A-Z]{50,70}"),
    Kind("aws-access-key-id", "an AWS access key id", re.compile(
        r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)(?<![A-Za-z0-9]....)(?P<body>[A-Z0-9]{16})(?![A-Za-z0-9])"),
        _check_aws_id, False),
    _token("github", "a GitHub token", "github_pat_", "[A-Za-z0-9_]{50,255}"),
    Kind("github", "a GitHub token", re.compile(  # ghp_ gho_ ghu_ ghs_ ghr_
        r"gh[pousr]_(?<![A-Za-z0-9_\-]gh._)(?P<body>[A-Za-z0-9]{30,255})"), _check_token, False),
    _token("gitlab", "a GitLab token", "glpat-", "[A-Za-z0-9_\\-]{20,255}"),
    Kind("slack", "a Slack token", re.compile(
        r"xox[abeoprs]-(?<![A-Za-z0-9_\-]xox.-)(?P<body>[A-Za-z0-9\-]{20,255})"), _check_slack, False),
    Kind("stripe", "a Stripe secret key", re.compile(  # sk_live_ rk_live_
        r"k_live_(?<![A-Za-z0-9_\-][rs]k_live_)(?<=[rs]k_live_)(?P<body>[A-Za-z0-9]{20,255})"), _check_token, False),
    Kind("stripe", "a Stripe secret key", re.compile(  # sk_test_ rk_test_: a test key still reads test data
        r"k_test_(?<![A-Za-z0-9_\-][rs]k_test_)(?<=[rs]k_test_)(?P<body>[A-Za-z0-9]{20,255})"), _check_token, False),
    _token("stripe", "a Stripe secret key", "whsec_", "[A-Za-z0-9]{24,255}"),
    Kind("slack-webhook", "a Slack webhook URL", re.compile(
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<body>T[A-Z0-9]{6,12}/[A-Z0-9]{6,14}/[A-Za-z0-9]{16,64})"),
        _check_slack_webhook, False),
    _token("google", "a Google API key", "AIza", "[A-Za-z0-9_\\-]{35,255}"),
    Kind("sendgrid", "a SendGrid API key", re.compile(
        r"SG\.(?<![A-Za-z0-9_\-]SG\.)(?P<body>[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})"
        r"(?![A-Za-z0-9_\-])"), _check_token, False),
    Kind("discord-webhook", "a Discord webhook URL", re.compile(
        r"/api/webhooks/[0-9]{17,20}/(?P<body>[A-Za-z0-9_\-]{60,68})"), _check_token, False),
    _token("anthropic", "an Anthropic API key", "sk-ant-", "[A-Za-z0-9_\\-]{30,255}"),
    Kind("openai", "an OpenAI API key", re.compile(
        r"sk-(?<![A-Za-z0-9_\-]sk-)(?!ant-)(?P<body>[A-Za-z0-9_\-]{20,255})"), _check_token, False),
    _token("npm", "an npm token", "npm_", "[A-Za-z0-9]{36,255}"),
    _token("pypi", "a PyPI token", "pypi-AgEIcHlwaS5vcmc", "[A-Za-z0-9_\\-]{30,255}"),
    Kind("jwt", "a JSON Web Token", re.compile(
        r"eyJ(?<![A-Za-z0-9_\-.]eyJ)(?P<head>[A-Za-z0-9_\-]{4,2000})\.[A-Za-z0-9_\-]{4,8000}\.(?P<sig>[A-Za-z0-9_\-]{16,2000})"),
        _check_jwt, False),
    Kind("url-password", "a URL with a password", re.compile(
        r"://(?P<user>[^\s/?#@:\"'<>\[\]]{0,128}):(?P<pw>[^\s/?@\"'<>]{1,256})@(?=[A-Za-z0-9\[_])"),
        pw.check_url, False),
    Kind("bearer", "a bearer token", re.compile(
        r"bearer[ \t]{1,4}(?P<value>[a-z0-9._~+/=\-]{16,2000})"), _check_bearer, True),
    Kind("bearer", "a token in an Authorization header", re.compile(
        r"authorization[\"']?\]?[ \t]{0,4}[:=][ \t]{0,4}[\"'`]?(?:token|apikey|api-key|key|sso-key)[ \t]{1,4}"
        r"(?P<value>[a-z0-9._~+/=\-]{16,2000})"), _check_bearer, True),
    Kind("assigned-secret", "a secret value assigned to a secret-like name", re.compile(
        r"value(?<![a-z0-9_]value)[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"'`]?(?P<value>[^\s\"'`,;<>(){}\[\]]{4,200})"),
        pw.check_named_value, True),
    Kind("basic-auth", "HTTP basic credentials", re.compile(
        r"basic[ \t]{1,4}(?<![a-z0-9_]basic[ \t])(?P<value>[a-z0-9+/]{8,2000}={0,2})(?![a-z0-9+/=])"),
        _check_basic, True),
    Kind("password", "a password", re.compile(
        r" -(?P<flag>[pauw]|-user)(?P<space>[ \t=]{1,4})?[\"']?(?P<value>[^\s\"'`]{4,200})"), pw.check_command, True),
) + tuple(_assignment(kw) for kw in (
    r"pass(?:word|wd|phrase)?", r"pwd?", r"secret", r"token", r"api[_\-]?key", r"access[_\-]?key",
    r"private[_\-]?key", r"auth", r"credentials?",
    # KEY after a qualifier (APP_KEY, signingKey); api_key, access_key, private_key, secret_key have their own
    r"key(?<!api_key)(?<!api-key)(?<!apikey)(?<!access_key)(?<!access-key)(?<!accesskey)(?<!private_key)"
    r"(?<!private-key)(?<!privatekey)(?<!secret_key)(?<!secret-key)(?<!secretkey)",
)) + (
    Kind("password", "a password", re.compile(  # Terraform: variable "db_password" { default = "..." }
        r"default[ \t]{0,40}=[ \t]{0,4}\"(?P<value>[^\"\n]{4,200})\""), pw.check_tf_default, True),
    Kind("password", "a password", re.compile(  # openssl -passin pass:...
        r"pass:(?<![a-z0-9_]pass:)(?P<value>[^\s\"'`]{4,200})"), pw.check_openssl, True),
    Kind("password", "a password", re.compile(
        r"htpasswd[ \t]{1,4}-(?P<flags>[a-z]{1,6})(?P<args>(?:[ \t]{1,4}[^\s]{1,200}){2,3})"), pw.check_htpasswd, True),
    Kind("password", "a password", re.compile(  # auth=("user", "..."), requests' basic auth
        r"auth[ \t]{0,4}=[ \t]{0,4}\([ \t]{0,4}[\"'][^\"'\n]{1,64}[\"'][ \t]{0,4},[ \t]{0,4}[\"']"
        r"(?P<value>[^\"'\n]{4,200})[\"']"), pw.check_quoted_password, True),
    Kind("password", "a password", re.compile(  # use ... as the password: the words before are read back
        r"pass(?:(?<=as pass)|(?<=as the pass)|(?<=as a pass)|(?<=as my pass)|(?<=as our pass))"
        r"(?:word|phrase)?(?![a-z0-9_])"), pw.check_use_as, True),

    # A command-line flag with a bare value, --db-password VALUE: its name is judged in Python.
    Kind("assigned-secret", None, re.compile(
        r"--(?<![a-z0-9_\-]--)(?P<kw>)(?=(?P<tail>[a-z][a-z0-9_.\-]{0,39}))(?P=tail)[ \t]{1,4}[\"']?"
        r"(?P<value>[^\s\"'`,;<>(){}\[\]]{4,200})"),
        pw.check_assignment, True),
)

_PREFILTER = Prefilter(KINDS)
_lowered = lowered  # kg/secrets/prefilter.py: the text with ASCII letters lower-cased, same offsets


# Python looks at most at this many candidates per text, and judges at most MAX_JUDGED distinct
# ones: far more than a node can hold (its text allows under 1,000 per field, under 8,000 in all),
# so only a hostile text reaches a bound, and it is refused: a gate that gave up silently would
# let a secret through behind the decoys. The bounds keep that text's answer in tens of ms.
MAX_CANDIDATES = 16384
MAX_JUDGED = 4096
TOO_MANY = "a text with more secret-shaped values than kgd checks"
# A kind's first candidates in a text are judged without the key that spots a repeat: a node has a
# few, and slicing and hashing each one's context cost as much as its check's cheap exit.
DEDUPE_AFTER = 16


# Invisible format characters (zero-width space and joiners, word joiner, BOM, soft hyphen, bidi
# controls, variation selectors, tags) split a token for a regex but not for whoever copies it.
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f]")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def _variants(text):
    """The text as its reader sees it, when it differs: invisible characters dropped and
    escaped quotes (\\") unescaped, compatibility forms folded (NFKC); then percent-decoded. Each is
    scanned once more (linear)."""
    plain = text if text.isascii() else _INVISIBLE.sub("", text)  # every invisible one is non-ASCII
    for _ in range(3):  # \" and \\\" (escaped twice): str.replace, far faster than a regex's sub
        if "\\\"" not in plain and "\\'" not in plain:
            break
        plain = plain.replace("\\\"", "\"").replace("\\'", "'")
    if not plain.isascii():
        plain = unicodedata.normalize("NFKC", plain)  # fullwidth and compatibility letters
    if plain != text:
        yield plain
    if _PERCENT.search(plain):
        decoded = unquote(plain)
        if decoded != plain:
            yield decoded


def find(text):
    """The first credential in `text` as Hit(kind, label, start, end), or None (kinds in table
    order). A hit found only in a variant (zero-width characters dropped, quotes unescaped,
    percent-decoded) spans the whole text: its offsets there do not map back."""
    hit = _find(text)
    if hit is not None or not text:
        return hit
    for variant in _variants(text):
        hit = _find(variant)
        if hit is not None:
            return Hit(hit.kind, hit.label, 0, len(text))
    return None


def _find(text):
    if not text:
        return None
    low = _lowered(text)
    seen = judged = 0
    for k in _PREFILTER.kinds_to_run(low):  # kg/secrets/prefilter.py: only kinds whose leading literal it holds
        rejected = ()  # a repeated near-miss is judged once
        first, check, key = seen + DEDUPE_AFTER, k.check, None
        for m in k.regex.finditer(low if k.lower else text):
            seen += 1
            if seen > first:  # a node's few candidates are judged without building a key
                key = text[max(m.start() - pw.KEY_BACK, 0):m.end()]  # all that its check reads
                if key in rejected and seen <= MAX_CANDIDATES:
                    continue
            judged += 1
            if judged > MAX_JUDGED or seen > MAX_CANDIDATES:
                return Hit("too-many", TOO_MANY, m.start(), m.end())
            ok = check(text, m)
            if ok:  # True, or (start,) when the secret stands before the match (use PASS as the password)
                kind, label = pw.label_assignment(text, m) if k.label is None else (k.kind, k.label)
                return Hit(kind, label, ok[0] if isinstance(ok, tuple) else m.start(), m.end())
            if key is not None:
                if not rejected:
                    rejected = set()
                rejected.add(key)
    return None
