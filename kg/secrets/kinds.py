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
import functools
import json
import math
import re
import string
import unicodedata
from collections import Counter, namedtuple
from urllib.parse import unquote

from .prefilter import Prefilter, lowered

Hit = namedtuple("Hit", "kind label start end")
Kind = namedtuple("Kind", "kind label regex check lower")

# ---- judging a candidate value ----

# A placeholder holds a marker anywhere, or a placeholder word inside one of its words (so the
# "HeRe" or "tESt" that a random string may hold by chance does not count).
_PLACEHOLDER_MARKS = re.compile(r"xxxx|XXXX|<|>|\{\{|\$\{|\$\(|\.\.\.|\u2026|\*\*\*|%s|%\(")
_PLACEHOLDER_WORDS = re.compile(
    r"your|example|change.?me|placeholder|redacted|dummy|sample|fake|insert|replace|here|todo|"
    r"fixme|test|secret|passw|token")
_ENV_NAME = re.compile(r"\$?\{?[A-Z][A-Z0-9_]*\}?\Z")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9:.]{5,15}(?:Z|[+-][0-9:]{4,5})?)?\Z")
_REFERENCES = ("$", "arn:", "env:", "vault:", "op:", "ref+", "file:", "http")
_PATH_STARTS = ("/", "./", "../", "~/")


def _path_like(value):
    """/run/secrets/db_password, ~/.aws/credentials: mostly lower case. A base64 secret may
    start with "/" too, but about 40% of its letters are upper case."""
    if not value.startswith(_PATH_STARTS):
        return False
    letters = [c for c in value if c.isalpha()]
    return sum(1 for c in letters if c.isupper()) <= 0.2 * len(letters)


def _placeholder(value, words=1):
    """xxxx, ${X}, <x>, ... anywhere, or `words` words holding a placeholder word (changeme123,
    yourTokenHere). A random token may hold one such word by chance (...SqTestMN...)."""
    if _PLACEHOLDER_MARKS.search(value):
        return True
    found = 0
    for w in _WORDS.findall(value):
        if len(w) >= 4 and _PLACEHOLDER_WORDS.search(w.lower()):
            found += 1
            if found >= words:
                return True
    return False


_C_LOG_C = [0.0] + [c * math.log2(c) for c in range(1, 257)]


def entropy(value):
    """Shannon entropy in bits per character: log2(n) - sum(c log2 c) / n over the counts c."""
    n = len(value)
    if not n:
        return 0.0
    counts = Counter(value).values()
    if n > 256:
        return math.log2(n) - sum(c * math.log2(c) for c in counts) / n
    return math.log2(n) - sum(map(_C_LOG_C.__getitem__, counts)) / n


_LOWER, _UPPER, _DIGIT = frozenset(string.ascii_lowercase), frozenset(string.ascii_uppercase), frozenset(string.digits)


def _classes(chars):
    """How many of lower case, upper case, digit, other a set of characters mixes; has it a digit?"""
    digit = not chars.isdisjoint(_DIGIT)
    n = (not chars.isdisjoint(_LOWER)) + (not chars.isdisjoint(_UPPER)) + digit
    return n + (not chars <= _LOWER | _UPPER | _DIGIT), digit


def _random_body(body, min_distinct=8):
    """The body of a prefixed token: varied enough to be random, not words (your_token_here),
    no placeholder (xxxx, yourTokenHere)."""
    return len(set(body)) >= min_distinct and not _word_like(body) and not _placeholder(body, 2)


_VOWELS = frozenset("aeiouyAEIOUY")


def _is_word(part):
    """A word has a vowel (get, Access, Token); an acronym is short upper case (HTTP, SQL)."""
    return len(part) >= 3 and (not _VOWELS.isdisjoint(part) or (part.isupper() and len(part) <= 4))


def _word_like(value):
    """Identifiers and prose (getAccessToken, my-deploy-key, v2): every letter run is a word.
    Random text has short runs (case changes) or runs without a vowel (hlj, CXDLXY)."""
    parts = _WORDS.findall(value)
    alpha = [p for p in parts if p.isalpha()]
    digits = [p for p in parts if p.isdigit()]
    return bool(alpha) and all(map(_is_word, alpha)) and len(digits) <= 2 and all(len(d) <= 4 for d in digits)


def _secret_value(value, password_like):
    """A value assigned to a secret-like name: a real secret rather than a word, a number, a
    reference or a placeholder? Passwords may be short and plain; tokens must look random."""
    chars = set(value)
    if len(value) < (8 if password_like else 16) or len(chars) < (5 if password_like else 8):
        return False
    classes, digit = _classes(chars)
    if classes < 2 or entropy(value) < (2.5 if password_like else 3.0):
        return False
    if value.startswith(_REFERENCES) or _path_like(value) or "://" in value or _placeholder(value):
        return False
    if _ENV_NAME.match(value) and ("_" in value or value.isalpha()):
        return False  # an environment variable's NAME
    if _UUID.match(value) or _DATE.match(value) or value.replace(".", "").replace("-", "").replace(":", "").isdigit():
        return False  # an id, a version, a date, a time
    return not _word_like(value) if not password_like else digit or not _word_like(value)


# ---- the checks, one per kind of regex ----

def _group(text, m, name):
    """A group's text from the original (a lower-cased kind matched a copy)."""
    return text[m.start(name):m.end(name)]


def _check_token(text, m):
    return _random_body(m.group("body"))


def _check_slack(text, m):
    """Slack tokens open with numeric team and user ids: digits, then random characters."""
    body = m.group("body")
    return len(set(body)) >= 6 and not _DIGIT.isdisjoint(body) and not _placeholder(body, 2)


def _check_aws_id(text, m):
    body = m.group("body")
    return len(set(body)) >= 6 and "EXAMPLE" not in body


def _check_jwt(text, m):
    head = text[m.start():m.end("head")]  # "eyJ" is the start of the encoded '{"'

    try:
        obj = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(obj, dict) and "alg" in obj and _random_body(m.group("sig"))


_DEFAULT_PASSWORDS = frozenset((
    "password", "pass", "passwd", "pwd", "pw", "secret", "changeme", "admin", "root", "guest",
    "test", "example", "postgres", "mysql", "redis", "1234", "12345", "123456", "xxx", "token",
))


def _check_url(text, m):
    """user:pass@ in a URL, unless the password is a documentation default or a reference."""
    return _check_url_parts(m.group("user"), m.group("pw"))


def _check_url_parts(user, pw):
    if pw.lower() in _DEFAULT_PASSWORDS or pw == user or set(pw) <= set("*xX.") or _placeholder(pw):
        return False
    return not (pw.startswith("$") or _ENV_NAME.match(pw) and ("_" in pw or pw.isalpha()))


def _check_private_key(text, m):
    return True


_LOOK_BACK = 42  # a name is at most this long (with its "--")
_KEY_BACK = 160  # a check reads at most this many characters before its match (a command's line)
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
# Names that hold a secret-like word but not a secret: token_count, secret_hash, public_key_id.
_NOT_SECRET_NAME = re.compile(r"hash|sha|md5|digest|checksum|fingerprint|commit|public|page|cursor|sample|example")
_NOT_SECRET_END = frozenset((
    "id", "ids", "len", "length", "ttl", "expiry", "expires", "expiration", "type", "name", "names",
    "file", "path", "url", "uri", "endpoint", "env", "var", "count", "size", "max", "min", "limit",
    "budget", "header", "prefix", "format", "policy", "version", "usage", "cost", "rate", "timeout",
    "dir", "mode", "field", "param", "location", "store", "manager", "provider", "source", "ref",
    "at", "ts", "date", "time", "timestamp",
))
_KEYWORD = re.compile(r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_\-]?key|access[_\-]?key|"
                      r"private[_\-]?key|auth|credentials?")


def _name_start(text, pos):
    i = pos
    while i > 0 and pos - i < _LOOK_BACK - 2 and text[i - 1] in _NAME_CHARS:
        i -= 1
    return i


def _keyword_is_a_word(name, kw_start, kw_end):
    """compass, bypass, tokenizer and author hold a keyword that is not a word of the name."""
    if name.isupper():
        return True  # DBPASSWORD
    before = name[kw_start - 1] if kw_start > 0 else ""
    if before.isalpha() and not (before.islower() and name[kw_start].isupper()):
        return False
    after = name[kw_end:kw_end + 1]
    return not after.islower() or (after == "s" and not name[kw_end + 1:kw_end + 2].isalpha())


@functools.lru_cache(maxsize=1024)
def _secret_name(name):
    """(password-like, secret-like) for a whole name such as DB_PASSWORD or --api-token."""
    low = name.lower()
    for m in _KEYWORD.finditer(low):
        if _keyword_is_a_word(name, m.start(), m.end()):
            break
    else:
        return False, False
    words = _NAME_WORDS.findall(name)
    if _NOT_SECRET_NAME.search(low) or (words and words[-1].lower() in _NOT_SECRET_END):
        return False, False
    return ("pass" in low or "pwd" in low), True


def _check_assignment(text, m):
    value = _group(text, m, "value")
    if len(value) < 8 or len(set(value)) < 5:  # the cheap test first: most candidates end here
        return False
    if text[m.end("value"):m.end("value") + 1] == "(":
        return False  # code: password = hashlib.sha256(...), token = os.environ.get(...)
    # A flag's name starts after its "--"; an assignment's name may start before its keyword.
    start = m.start("kw") if m.group("kw") == "" else _name_start(text, m.start("kw"))
    name, sep = text[start:m.end("tail")], m.groupdict().get("sep") or "="
    if sep == ">" and text[start - 1:start] != "<":
        return False  # only an XML element, <password>...</password>
    if sep.strip(" \t\"'`") in ("", "is", ">") and not (name.islower() or name.isupper() or name.istitle()):
        return False  # `password VALUE`: a name written as a word, not noise (pwD_ tl...)
    password_like, secret_like = _secret_name(name)
    return secret_like and _secret_value(value, password_like)


def _check_bearer(text, m):
    return _secret_value(_group(text, m, "value"), False)


def _label_assignment(text, m):
    start = m.start("kw") if m.group("kw") == "" else _name_start(text, m.start("kw"))
    name = text[start:m.end("tail")].lower()
    window = text[max(m.start("kw") - 80, 0):m.start("kw")].lower()
    aws = "aws" in name or "aws" in window or "secretaccess" in name.replace("_", "")
    if len(_group(text, m, "value")) == 40 and aws:
        return "aws-secret", "an AWS secret access key"
    if "pass" in name or "pwd" in name:
        return "password", "a password"
    return "assigned-secret", "a secret value assigned to a secret-like name"


def _check_basic(text, m):
    """Basic base64(user:pass): refused when it decodes to user:password, or looks random."""
    value = _group(text, m, "value")
    try:
        _, sep, pw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8").partition(":")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return _secret_value(value, False)
    return bool(sep) and bool(pw) and not _placeholder(pw) and pw.lower() not in _DEFAULT_PASSWORDS


# A password given on a command line: (flag, whether a space may follow it, commands that mean it).
_COMMAND_FLAGS = {"p": (("mysql", "mariadb"), ("sshpass",)), "a": ((), ("redis-cli",)),
                  "u": ((), ("curl", "wget", "http ")), "-user": ((), ("curl", "wget"))}


def _line_before(text, start, n=160):
    return text[max(text.rfind("\n", max(start - n, 0), start) + 1, start - n, 0):start].lower()


def _check_command(text, m):
    """mysql -pPASS, sshpass -p PASS, redis-cli -a PASS, curl -u user:PASS: the command is on the line."""
    glued, spaced = _COMMAND_FLAGS[m.group("flag")]
    line = _line_before(text, m.start())
    if not any(c in line for c in (spaced if m.group("space") else glued + spaced)):
        return False
    value = _group(text, m, "value")
    if m.group("flag") in ("u", "-user"):
        user, sep, pw = value.partition(":")
        pw = pw.rstrip(".,;:)")  # prose: "curl -u user:pass."
        return bool(sep) and _check_url_parts(user, pw) and _secret_value(pw, True)
    return _secret_value(value, True)


_NAMED = re.compile(r"name[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"']?(?P<name>[A-Za-z0-9_.\-]{1,60})", re.I)


def _check_named_value(text, m):
    """Kubernetes and ECS environment lists: `- name: DB_PASSWORD` then `value: ...`."""
    names = list(_NAMED.finditer(text[max(m.start() - _KEY_BACK, 0):m.start()]))
    if not names:
        return False
    password_like, secret_like = _secret_name(names[-1].group("name"))
    return secret_like and _secret_value(_group(text, m, "value"), password_like)


def _check_slack_webhook(text, m):
    return _random_body(m.group("body"), 12)


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
        r"(?P<sep>[\"']?\]?(?:[ \t]{0,4}(?::=|=>|==|[:=])[ \t]{0,4}[\"'`]?|>|[ \t]{1,2}(?:is[ \t]{1,2})?[\"'`]?))"
        r"(?P<value>[^\s\"'`,;<>(){}\[\]]{8,200})" % keyword), _check_assignment, True)


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
        r"://(?P<user>[^\s/?#@:\"'<>\[\]]{0,128}):(?P<pw>[^\s/?#@\"'<>]{1,256})@(?=[A-Za-z0-9\[_])"),
        _check_url, False),
    Kind("bearer", "a bearer token", re.compile(
        r"bearer[ \t]{1,4}(?P<value>[a-z0-9._~+/=\-]{16,2000})"), _check_bearer, True),
    Kind("bearer", "a token in an Authorization header", re.compile(
        r"authorization[\"']?\]?[ \t]{0,4}[:=][ \t]{0,4}[\"'`]?(?:token|apikey|api-key|key|sso-key)[ \t]{1,4}"
        r"(?P<value>[a-z0-9._~+/=\-]{16,2000})"), _check_bearer, True),
    Kind("assigned-secret", "a secret value assigned to a secret-like name", re.compile(
        r"value(?<![a-z0-9_]value)[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"'`]?(?P<value>[^\s\"'`,;<>(){}\[\]]{8,200})"),
        _check_named_value, True),
    Kind("basic-auth", "HTTP basic credentials", re.compile(
        r"basic[ \t]{1,4}(?<![a-z0-9_]basic[ \t])(?P<value>[a-z0-9+/]{8,2000}={0,2})(?![a-z0-9+/=])"),
        _check_basic, True),
    Kind("password", "a password", re.compile(
        r" -(?P<flag>[pau]|-user)(?P<space>[ \t=]{1,4})?[\"']?(?P<value>[^\s\"'`]{4,200})"), _check_command, True),
) + tuple(_assignment(kw) for kw in (
    r"pass(?:word|wd|phrase)?", r"pwd", r"secret", r"token", r"api[_\-]?key", r"access[_\-]?key",
    r"private[_\-]?key", r"auth", r"credentials?",
)) + (
    # A command-line flag with a bare value, --db-password VALUE: its name is judged in Python.
    Kind("assigned-secret", None, re.compile(
        r"--(?<![a-z0-9_\-]--)(?P<kw>)(?=(?P<tail>[a-z][a-z0-9_.\-]{0,39}))(?P=tail)[ \t]{1,4}[\"']?"
        r"(?P<value>[^\s\"'`,;<>(){}\[\]]{8,200})"),
        _check_assignment, True),
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
        rejected = set()  # a repeated near-miss is judged once
        for m in k.regex.finditer(low if k.lower else text):
            seen += 1
            key = text[max(m.start() - _KEY_BACK, 0):m.end()]  # all that its check reads
            if key in rejected and seen <= MAX_CANDIDATES:
                continue
            judged += 1
            if judged > MAX_JUDGED or seen > MAX_CANDIDATES:
                return Hit("too-many", TOO_MANY, m.start(), m.end())
            if k.check(text, m):
                kind, label = _label_assignment(text, m) if k.label is None else (k.kind, k.label)
                return Hit(kind, label, m.start(), m.end())
            rejected.add(key)
    return None
