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
"""

import base64
import binascii
import functools
import json
import math
import re
import string
from collections import Counter, namedtuple

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
    if _UUID.match(value) or value.replace(".", "").replace("-", "").replace(":", "").isdigit():
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
    user, pw = m.group("user"), m.group("pw")
    if pw.lower() in _DEFAULT_PASSWORDS or pw == user or set(pw) <= set("*xX.") or _placeholder(pw):
        return False
    return not (pw.startswith("$") or _ENV_NAME.match(pw) and ("_" in pw or pw.isalpha()))


def _check_private_key(text, m):
    return True


_LOOK_BACK = 42  # a check reads at most this many characters before its match (a name, then "--")
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
# Names that hold a secret-like word but not a secret: token_count, secret_hash, public_key_id.
_NOT_SECRET_NAME = re.compile(r"hash|sha|md5|digest|checksum|fingerprint|commit|public|page|cursor|sample|example")
_NOT_SECRET_END = frozenset((
    "id", "ids", "len", "length", "ttl", "expiry", "expires", "expiration", "type", "name", "names",
    "file", "path", "url", "uri", "endpoint", "env", "var", "count", "size", "max", "min", "limit",
    "budget", "header", "prefix", "format", "policy", "version", "usage", "cost", "rate", "timeout",
    "dir", "mode", "field", "param", "location", "store", "manager", "provider", "source", "ref",
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
    # A flag's name starts after its "--"; an assignment's name may start before its keyword.
    start = m.start("kw") if m.group("kw") == "" else _name_start(text, m.start("kw"))
    password_like, secret_like = _secret_name(text[start:m.end("tail")])
    return secret_like and _secret_value(value, password_like)


def _check_bearer(text, m):
    return _secret_value(_group(text, m, "value"), False)


def _label_assignment(text, m):
    start = m.start("kw") if m.group("kw") == "" else _name_start(text, m.start("kw"))
    name = text[start:m.end("tail")].lower()
    window = text[max(m.start("kw") - 80, 0):m.start("kw")].lower()
    if len(_group(text, m, "value")) == 40 and ("aws" in name or "aws" in window or "secretaccess" in name.replace("_", "")):
        return "aws-secret", "an AWS secret access key"
    if "pass" in name or "pwd" in name:
        return "password", "a password"
    return "assigned-secret", "a secret value assigned to a secret-like name"


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
        r"(?P<sep>[\"']?[ \t]{0,4}(?::=|=>|==|[:=])[ \t]{0,4}[\"'`]?)"
        r"(?P<value>[^\s\"'`,;<>(){}\[\]]{8,200})" % keyword), _check_assignment, True)


KINDS = (
    Kind("private-key", "a private key", re.compile(
        r"-----BEGIN (?:RSA |DSA |EC |OPENSSH |ENCRYPTED |PGP |SSH2 ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----"
        r"(?:\\n|[ \t\r\n]){0,8}(?:[A-Za-z0-9+/=]{32}|Proc-Type:|Version:|Comment:)"), _check_private_key, False),
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
    _token("google", "a Google API key", "AIza", "[A-Za-z0-9_\\-]{35,255}"),
    _token("anthropic", "an Anthropic API key", "sk-ant-", "[A-Za-z0-9_\\-]{30,255}"),
    Kind("openai", "an OpenAI API key", re.compile(
        r"sk-(?<![A-Za-z0-9_\-]sk-)(?!ant-)(?P<body>[A-Za-z0-9_\-]{20,255})"), _check_token, False),
    _token("npm", "an npm token", "npm_", "[A-Za-z0-9]{36,255}"),
    _token("pypi", "a PyPI token", "pypi-AgEIcHlwaS5vcmc", "[A-Za-z0-9_\\-]{30,255}"),
    Kind("jwt", "a JSON Web Token", re.compile(
        r"eyJ(?<![A-Za-z0-9_\-.]eyJ)(?P<head>[A-Za-z0-9_\-]{4,2000})\.[A-Za-z0-9_\-]{4,8000}\.(?P<sig>[A-Za-z0-9_\-]{16,2000})"),
        _check_jwt, False),
    Kind("url-password", "a URL with a password", re.compile(
        r"://(?P<user>[^\s/?#@:\"'<>\[\]]{0,128}):(?P<pw>[^\s/?#@\"'<>]{1,256})@(?=[A-Za-z0-9\[_])"), _check_url, False),
    Kind("bearer", "a bearer token", re.compile(
        r"bearer[ \t]{1,4}(?P<value>[a-z0-9._~+/=\-]{16,2000})"), _check_bearer, True),
) + tuple(_assignment(kw) for kw in (
    r"pass(?:word|wd|phrase)?", r"pwd", r"secret", r"token", r"api[_\-]?key", r"access[_\-]?key",
    r"private[_\-]?key", r"auth", r"credentials?",
)) + (
    # A command-line flag with a bare value, --db-password VALUE: its name is judged in Python.
    Kind("assigned-secret", None, re.compile(
        r"--(?<![a-z0-9_\-]--)(?P<kw>)(?=(?P<tail>[a-z][a-z0-9_.\-]{0,39}))(?P=tail)[ \t]{1,4}[\"']?(?P<value>[^\s\"'`,;<>(){}\[\]]{8,200})"),
        _check_assignment, True),
)

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _lowered(text):
    """The text with ASCII letters lower-cased, same length (offsets stay valid)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


# Python looks at most at this many candidates per text, and judges at most MAX_JUDGED distinct
# ones: far more than a node can hold (its text allows under 1,000 per field, under 8,000 in all),
# so only a hostile text reaches a bound, and it is refused: a gate that gave up silently would
# let a secret through behind the decoys. The bounds keep that text's answer in tens of ms.
MAX_CANDIDATES = 16384
MAX_JUDGED = 4096
TOO_MANY = "a text with more secret-shaped values than kgd checks"


def find(text):
    """The first credential in `text` as Hit(kind, label, start, end), or None (kinds in table order)."""
    if not text:
        return None
    low = None
    seen = judged = 0
    for k in KINDS:
        if k.lower and low is None:
            low = _lowered(text)
        rejected = set()  # a repeated near-miss is judged once
        for m in k.regex.finditer(low if k.lower else text):
            seen += 1
            key = text[max(m.start() - _LOOK_BACK, 0):m.end()]  # all that its check reads
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


# ---- nodes and edges ----

_JOIN = "\n"  # no value, token or name class spans a line break, so no match crosses two fields


def _fields_of_node(node):
    yield "id", node.get("id")
    yield "gist", node.get("gist")
    for i, note in enumerate(node.get("notes") or ()):
        yield "notes[%d]" % i, note
    for i, touch in enumerate(node.get("touches") or ()):
        yield "touches[%d]" % i, touch


def _fields_of_edge(edge):
    yield "from", edge.get("from")
    yield "to", edge.get("to")
    yield "rel", edge.get("rel")
    for i, note in enumerate(edge.get("notes") or ()):
        yield "edge notes[%d]" % i, note


def _scan(fields):
    texts = [(name, t) for name, t in fields if isinstance(t, str) and t]
    if find(_JOIN.join(t for _, t in texts)) is None:  # one pass over the whole: the common case
        return None
    for name, t in texts:
        hit = find(t)
        if hit is not None:
            return name, hit
    return None


def scan_node(node):
    """(field, Hit) for the first field of a node holding a credential, or None."""
    return _scan(_fields_of_node(node))


def scan_edge(edge):
    """(field, Hit) for the first field of an edge holding a credential, or None."""
    return _scan(_fields_of_edge(edge))


def refusal(field, hit):
    """The refusal an agent reads: the field and the kind, never the secret."""
    return ("%s looks like %s: save where the secret lives (e.g. \"in .env as GITHUB_TOKEN\"), "
            "not the secret. Nothing was written." % (field, hit.label))
