"""What a candidate value looks like: random, a word, an id, a reference (contract section 10). Pure.

Why it exists: the token kinds (kg/secrets/kinds.py) and the password positions
(kg/secrets/passwords.py) both ask whether a string is random enough to be a machine secret, or
is a word, an identifier, a date, a path. These are the shared measures; which value is refused
where is decided by the two modules that ask.

Rules this file owns:
- entropy in bits per character; a prefixed token's body is random when varied, not words, no
  marker (xxxx, ${X}, <x>, ...) and not two placeholder words (yourTokenHere).
- A value assigned to a token-like name is a machine secret when at least 16 characters, 8
  distinct, two classes, 3 bits of entropy, not an id / version / date / path / reference /
  environment variable name / identifier made of words.
"""

import math
import re
import string
from collections import Counter

# A placeholder holds a marker anywhere, or a placeholder word inside one of its words (so the
# "HeRe" or "tESt" that a random string may hold by chance does not count).
_PLACEHOLDER_MARKS = re.compile(r"xxxx|XXXX|<|>|\{\{|\$\{|\$\(|\.\.\.|\u2026|\*\*\*|%s|%\(")
_PLACEHOLDER_WORDS = re.compile(
    r"your|example|change.?me|placeholder|redacted|dummy|sample|fake|insert|replace|here|todo|"
    r"fixme|test|secret|passw|token")
ENV_NAME = re.compile(r"\$?\{?[A-Z][A-Z0-9_]*\}?\Z")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9:.]{5,15}(?:Z|[+-][0-9:]{4,5})?)?\Z")
_REFERENCES = ("$", "arn:", "env:", "vault:", "op:", "ref+", "file:", "http")
_PATH_STARTS = ("/", "./", "../", "~/")


def path_like(value):
    """/run/secrets/db_password, ~/.aws/credentials: mostly lower case. A base64 secret may
    start with "/" too, but about 40% of its letters are upper case."""
    if not value.startswith(_PATH_STARTS):
        return False
    letters = [c for c in value if c.isalpha()]
    return sum(1 for c in letters if c.isupper()) <= 0.2 * len(letters)


def marked(value, words=1):
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


_LOWER, _UPPER, DIGIT = frozenset(string.ascii_lowercase), frozenset(string.ascii_uppercase), frozenset(string.digits)


def classes(chars):
    """How many of lower case, upper case, digit, other a set of characters mixes; has it a digit?"""
    digit = not chars.isdisjoint(DIGIT)
    n = (not chars.isdisjoint(_LOWER)) + (not chars.isdisjoint(_UPPER)) + digit
    return n + (not chars <= _LOWER | _UPPER | DIGIT), digit


def random_body(body, min_distinct=8):
    """The body of a prefixed token: varied enough to be random, not words (your_token_here),
    no placeholder (xxxx, yourTokenHere)."""
    return len(set(body)) >= min_distinct and not word_like(body) and not marked(body, 2)


_VOWELS = frozenset("aeiouyAEIOUY")


def _is_word(part):
    """A word has a vowel (get, Access, Token); an acronym is short upper case (HTTP, SQL)."""
    return len(part) >= 3 and (not _VOWELS.isdisjoint(part) or (part.isupper() and len(part) <= 4))


def word_like(value):
    """Identifiers and prose (getAccessToken, my-deploy-key, v2): every letter run is a word.
    Random text has short runs (case changes) or runs without a vowel (hlj, CXDLXY)."""
    parts = _WORDS.findall(value)
    alpha = [p for p in parts if p.isalpha()]
    digits = [p for p in parts if p.isdigit()]
    return bool(alpha) and all(map(_is_word, alpha)) and len(digits) <= 2 and all(len(d) <= 4 for d in digits)


def secret_value(value, password_like):
    """A value assigned to a secret-like name: a real secret rather than a word, a number, a
    reference or a placeholder? Passwords may be short and plain; tokens must look random."""
    chars = set(value)
    if len(value) < (8 if password_like else 16) or len(chars) < (5 if password_like else 8):
        return False
    n_classes, digit = classes(chars)
    if n_classes < 2 or entropy(value) < (2.5 if password_like else 3.0):
        return False
    if value.startswith(_REFERENCES) or path_like(value) or "://" in value or marked(value):
        return False
    if ENV_NAME.match(value) and ("_" in value or value.isalpha()):
        return False  # an environment variable's NAME
    if UUID.match(value) or DATE.match(value) or value.replace(".", "").replace("-", "").replace(":", "").isdigit():
        return False  # an id, a version, a date, a time
    return not word_like(value) if not password_like else digit or not word_like(value)
