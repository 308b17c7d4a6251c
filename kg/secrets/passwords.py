"""Passwords and secrets judged by where they stand (contract section 10, "Calibration"). Pure.

Why it exists: a weak human password (a word, digits, a symbol) looks like nothing; what makes it
a credential is its place: a URL's password part, a password flag, an assignment or config key
named like a password / secret / token / key, a sentence that says it is one. In such a place a
concrete value is refused however human it is; what is not concrete is a closed set of forms.

Rules this file owns (docs/reference.md, "Secrets: what is refused, what passes", lists them):
- Names: password-like (password, passwd, pass as a word, passphrase, pwd, pw, keytool's
  -storepass...), secret-like (secret, token, api_key, access_key, private_key, a KEY after a
  qualifier: APP_KEY, SIGNING_KEY, ENCRYPTION_KEY...), weak (auth, credentials: a random value
  only). A name ending in a word that says it is not the secret (password_encryption, token_ttl,
  secret_name, --password-stdin, password_hash) holds none.
- Not concrete (closed): placeholders PLACEHOLDER forms, VENDOR_DEFAULTS, CONFIG_WORDS,
  references (where the secret comes from), password-hash formats, and, unquoted only, code.
- (Which place a candidate stands in, and which name it belongs to: kg/secrets/positions.py.)
- A password-like name's concrete value of 4+ characters is refused; a secret-like name's when
  it is random or mixes letters with digits or symbols (not a kebab-case resource name); in prose
  and after a bare space, a plain word never is.
"""

import functools
import re
import string

from .values import DATE, UUID, path_like, secret_value

# ---- the closed forms that are not a concrete value ----

VENDOR_DEFAULTS = frozenset((  # documentation's default passwords: publishing one reveals nothing
    "password", "passwd", "pass", "pwd", "secret", "changeme", "change_me", "change-me", "changeit",
    "admin", "root", "guest", "postgres", "mysql", "redis", "test", "example", "default", "replace_me",
    "replaceme", "replace-me", "fixme", "todo", "tbd", "none", "null", "nil", "empty",
))
CONFIG_WORDS = frozenset((  # what a config or schema says in a secret's place
    "undefined", "true", "false", "yes", "no", "on", "off", "required", "optional", "hidden", "masked",
    "redacted", "unset", "disabled", "enabled", "auto", "generated", "random", "prompt", "ask", "stdin",
    "env", "vault", "string", "str", "text", "bool", "boolean", "int", "integer", "sensitive", "omitted",
    "removed", "value", "unknown", "dummy", "placeholder", "sample", "secretstr", "self", "this", "bearer",
    "basic", "digest", "token", "oauth", "oauth2", "plain", "plaintext", "user", "file", "name", "key",
))
_TEMPLATE = re.compile(r"\$\{|\{\{|\$\(|%\(|<%|#\{|\{%|%[sd](?![A-Za-z0-9])")
_WRAPPED = ("<>", "[]", "{}", "()")
_YOUR = re.compile(r"(?:[Yy]our|YOUR)(?:[_\-.]|[A-Z]|\Z)")
_HERE_END = re.compile(r"(?:[_\-. ]|[a-z])here\Z|(?<=[a-z])Here\Z|\AHERE\Z", re.I)


def placeholder(v):
    """<...>, [...], {...}, ${...}, {{...}}, $(...), %(...)s, YOUR_..., ...-here, xxxx, ***, ...,
    and the closed word lists: never a concrete value."""
    low = v.lower()  # the cheap tests first (substrings, then regexes): every candidate value asks
    if low in VENDOR_DEFAULTS or low in CONFIG_WORDS or "xxxx" in low or low.startswith("xxx"):
        return True  # (only x and X lower-case to x)
    if "..." in v or "***" in v or "EXAMPLE" in v:
        return True  # EXAMPLE: AWS's documented example key and secret (...EXAMPLE, ...EXAMPLEKEY)
    if len(v) >= 2 and v[0] + v[-1] in _WRAPPED:
        return True
    if _TEMPLATE.search(v) or "\u2026" in v or "\u2022\u2022" in v or "\u25cf\u25cf" in v:
        return True
    return bool(_YOUR.match(v) or (low.endswith("here") and _HERE_END.search(v)))


_SHELL_REF = re.compile(r"\$(?:\{?[A-Z_][A-Z0-9_]*\}?|[0-9@*#?])\Z")
_CODE_REF = re.compile(r"\$[a-z_][A-Za-z0-9_]*\Z")  # $password in PHP, Perl, a shell function: unquoted only
_REF_STARTS = ("env:", "vault:", "op://", "arn:", "file:", "ref+", "sops:", "ssm:", "awssm:", "keychain:",
               "secret://", "!env", "!vault", "enc[", "@microsoft.keyvault", "secretref:", "k8s:", "gcp:",
               "azurekv:", "bws:", "doppler:")
_ENV_VAR = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\Z")
_PHRASE = re.compile(r"[a-z0-9]+(?:[-_/.][a-z0-9]+)+\Z")
_WHERE = frozenset((  # set-in-vault, managed-by-terraform, stored-in-ssm, from-1password, injected-at-runtime
    "vault", "terraform", "env", "environment", "ssm", "kms", "keychain", "keyring", "sops", "1password",
    "onepassword", "bitwarden", "lastpass", "doppler", "ci", "helm", "k8s", "kubernetes", "runtime", "secrets",
    "secretsmanager", "manager", "store", "injected", "external", "managed", "provided", "stored", "sealed",
    "pulumi", "ansible", "chamber", "infisical", "akv", "keyvault", "gsm", "conjur", "parameter",
))
_PATHISH = re.compile(r"[a-z0-9_\-]+(?:/[a-z0-9_\-.]+)+\Z")


def reference(v):
    """Where a secret comes from, not the secret: $X, env:/vault:/op://..., a path, an environment
    variable's name, a URL, a phrase naming a store (set-in-vault), a store path (secret/db)."""
    low = v.lower()
    if low.startswith(_REF_STARTS) or path_like(v) or "://" in v or _ENV_VAR.match(v) or _SHELL_REF.match(v):
        return True
    if (v[0] == v[-1] == "%") and len(v) > 2:
        return True  # %DB_PASSWORD% (Windows)
    if _PATHISH.match(v):
        return True
    return bool(_PHRASE.match(v)) and not _WHERE.isdisjoint(re.split(r"[-_/.]", v))


_HASH_STARTS = ("pbkdf2_", "pbkdf2:", "argon2", "$argon2", "scrypt:", "bcrypt$", "sha1$", "sha256$", "md5$",
                "{ssha}", "{sha}", "{crypt}", "{bcrypt}", "{ssha512}", "scram-sha-256$", "$2a$", "$2b$", "$2y$",
                "$5$", "$6$", "$1$")
_MD5_PG = re.compile(r"md5[0-9a-f]{32}\Z")


def hash_format(v):
    """A password hash names no password: pbkdf2_sha256$..., $2b$..., {SSHA}..., md5 + 32 hex."""
    low = v.lower()
    return low.startswith(_HASH_STARTS) or bool(_MD5_PG.match(low))


_DOTTED = re.compile(r"[A-Za-z_$][A-Za-z_]*(?:\??\.[A-Za-z_$][A-Za-z_0-9]*)+\Z")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z_]*\Z")
_CODE_PARTS = frozenset((
    "pass", "password", "passwd", "pwd", "pw", "secret", "token", "key", "cred", "creds", "credential",
    "credentials", "auth", "api", "input", "value", "val", "var", "env", "config", "cfg", "conf", "settings",
    "args", "opts", "options", "param", "params", "data", "raw", "new", "old", "current", "user", "form",
    "request", "field", "text", "plain", "hashed", "encoded", "decoded", "result", "response", "arg", "ctx",
    "expected", "actual", "entered", "typed", "default", "db", "my", "the", "get", "read", "load",
))
_BOUND = re.compile(r"[:&*@][A-Za-z_]+\Z")  # :password (SQL), &anchor / *alias (YAML), @password
_LOWER_NAME = re.compile(r"[a-z_][a-z_.]*\Z")
_CAMEL = re.compile(r"[a-z]+(?:[A-Z][a-z]+)+\Z")
_UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\Z")


def _segment(s):
    """A dotted name's part: 'code' (a code word, snake_case, camelCase, UPPER_SNAKE, one letter),
    'random' (mixed case with digits), else 'word'."""
    low = s.lower()
    if low in _CODE_ROOTS or low in _CODE_PARTS or low[:-1] in _CODE_PARTS or len(s) == 1 or s.startswith("$"):
        return "code"
    if ("_" in s and (s.islower() or _UPPER_SNAKE.match(s))) or _CAMEL.match(s):
        return "code"
    if any(c.isdigit() for c in s) and not s.islower() and not s.isupper():
        return "random"
    return "word"


_CODE_ROOTS = frozenset((
    "os", "process", "self", "this", "ctx", "var", "local", "locals", "module", "data", "random", "output", "outputs",
    "values", "spec", "secrets", "vault", "aws", "azurerm", "google", "app", "params", "props", "state", "store",
    "options", "opts", "cls", "req", "res", "env", "environ", "getenv", "config", "settings", "conf", "cfg",
))
_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def code(v, after=""):
    """Unquoted code in a value's place: a call or subscript (os.environ[...], getpass()), a
    dotted name (settings.DB_PASSWORD), a bind parameter (:password, ?), a variable whose name
    says what it holds (db_password, newPass, expected_secret)."""
    if after[:1] in ("(", "["):
        return True
    if v[0] in "+!-" and _LOWER_NAME.match(v, 1):
        v = v[1:]  # +g.tokens, !ok: an operator before code
    if v == "?" or _BOUND.match(v) or _CODE_REF.match(v):
        return True
    if _DOTTED.match(v):  # settings.DB_PASSWORD, self._pw, var.db_password; not window.garden.silver
        kinds = [_segment(s) for s in v.replace("?", "").split(".")]
        return "code" in kinds and "random" not in kinds
    if _IDENT.match(v):
        parts = [p.lower() for p in _PARTS.findall(v)]
        return not _CODE_PARTS.isdisjoint(parts) or ("_" in v and v.islower() and len(parts) <= 2)
    return False


# ---- concrete values, by the kind of name ----

_VERSION = re.compile(r"v?[0-9]+(?:\.[0-9]+)+[a-z0-9\-]*\Z")
_KEBAB = re.compile(r"[a-z][a-z0-9]*(?:[-.][a-z0-9]+)+\Z")
_WORDS_JOINED = re.compile(r"[a-z]{2,}(?:_[a-z]{2,}){2,}\Z|[a-z]{2,}(?:\.[a-z]{2,}){2,}\Z")
_SYMBOLS = frozenset("!@#$%^&*?~+=|\\")


def not_a_value(v, quoted, after):
    if not quoted and after[:1] in ("(", "["):
        return True  # code: a call or subscript (os.environ[...], getpass()), the cheapest test first
    return placeholder(v) or reference(v) or hash_format(v) or (not quoted and code(v, after))


def concrete_password(v, quoted=False, after=""):
    """A value in a password's place: refused unless it is one of the closed forms."""
    if len(v) < 4 or not_a_value(v, quoted, after):
        return False
    if v.isdigit():
        return len(v) >= 6
    return not DATE.match(v)


def _camel(v):
    return any(a.islower() and b.isupper() for a, b in zip(v, v[1:]))


def _mixed(v):
    """Letters with digits or symbols, or a camel case inside (berlinHockey): not a plain word."""
    letters = any(c.isalpha() for c in v)
    return letters and (any(c.isdigit() for c in v) or not _SYMBOLS.isdisjoint(v)
                        or any(a.islower() and b.isupper() for a, b in zip(v, v[1:])))


def concrete_secret(v, quoted=False, after="", strong=True):
    """A value in a token's or key's place: random, or (a strong name) letters mixed with digits or
    symbols, not a version, a kebab-case name (db-credentials-v2) nor a closed form."""
    if len(v) < 6 or (not quoted and v.isalpha() and (v.islower() or v.istitle())):
        return False  # a plain word (token: refresh) is never a machine secret unquoted
    if not_a_value(v, quoted, after):
        return False
    if UUID.match(v) and strong:
        return True  # an API key may be a UUID (an id's name, token_id, holds none)
    if secret_value(v, False):
        return True
    if not strong or _VERSION.match(v) or DATE.match(v):
        return False
    if _WORDS_JOINED.match(v) and (quoted or "." in v):
        return True  # words joined by _ or . (three or more) are a passphrase; kebab-case is a resource name
    if quoted and v.isalpha() and after[:1] in "\"'`":
        return True  # a whole quoted word in a secret's place is its value
    if _KEBAB.match(v):
        return False
    return _mixed(v) and not v.replace(".", "").replace("-", "").isdigit()


def concrete_in_prose(v, quoted, password_like, bare=False):
    """`password is X`, `password X`: quoted, random or mixed; a plain word (required, stored,
    wrong) never; a passphrase of three words or more is one. After a bare space (the token
    'websocket', Token estimate**) a quote proves nothing and symbols alone do not count."""
    v = v.rstrip(".,;:)*_")
    if bare and (quoted or not any(c.isdigit() for c in v) and not secret_value(v, False) and not (
            password_like and (_WORDS_JOINED.match(v) or _KEBAB.match(v) and v.count("-") >= 2 or _camel(v)))):
        return False
    if len(v) < 4 or (not quoted and v.isalpha() and (v.islower() or v.istitle())):
        return False  # a plain word: is required, is stored, comes from
    if not_a_value(v, quoted, ""):
        return False
    if quoted:
        return True
    if password_like and (_KEBAB.match(v) and v.count("-") + v.count(".") >= 2 or _WORDS_JOINED.match(v)):
        return True  # a passphrase of three words or more
    return _mixed(v) or secret_value(v, False)


# ---- names ----

LOOK_BACK = 42  # a name is at most this long (with its "--")
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
# Names that hold a secret-like word but not a secret: token_count, secret_hash, public_key_id.
_NOT_SECRET_NAME = re.compile(r"hash|sha|md5|digest|checksum|fingerprint|commit|public|page|cursor|sample|example")
_NOT_SECRET_END = frozenset((
    "id", "ids", "len", "length", "ttl", "expiry", "expires", "expiration", "type", "name", "names",
    "file", "path", "url", "uri", "endpoint", "env", "var", "count", "size", "max", "min", "limit",
    "budget", "header", "prefix", "format", "policy", "version", "usage", "cost", "rate", "timeout",
    "dir", "mode", "field", "param", "location", "store", "manager", "provider", "source", "ref",
    "at", "ts", "date", "time", "timestamp", "encryption", "authentication", "method", "stdin", "salt",
    "backend", "reset", "second", "seconds", "minutes", "hours", "days", "strength", "complexity",
    "history", "required", "enabled", "disabled", "algorithm", "algo", "command", "cmd", "secret_name",
    "hasher", "hashers", "label", "kind", "class", "key", "keys", "arn", "vault", "attempts", "retries",
    "regex", "pattern", "rules", "rule", "lifetime", "interval", "delay", "lookup", "changed",
))
_KEYWORD = re.compile(r"pass(?:word|wd|phrase)?|pwd|pw|secret|token|api[_\-]?key|access[_\-]?key|"
                      r"private[_\-]?key|auth|credentials?|key")
# KEY is a secret after one of these words (APP_KEY, signingKey, STORAGE_ACCOUNT_KEY), never alone.
_KEY_QUALIFIERS = frozenset((
    "app", "signing", "sign", "signature", "encryption", "encrypt", "enc", "secret", "master", "private", "api",
    "access", "client", "jwt", "hmac", "aes", "crypt", "crypto", "cipher", "service", "webhook", "shared",
    "storage", "subscription", "license", "session", "cookie", "admin", "root", "integration", "partner",
    "merchant", "django", "rails", "laravel", "flask", "fernet", "decryption", "hash", "mac", "data", "account",
    "secure", "auth", "deploy", "server", "consumer", "app_secret", "kms", "wrapping", "symmetric",
))
# Glued words ending in "pass" that name a password (keytool's storepass, wp-cli's user_pass), never
# compass, bypass, surpass.
_PASS_GLUED = ("store", "key", "srcstore", "deststore", "srckey", "destkey", "user", "root", "admin", "db", "new",
               "old", "master", "sa", "app", "my", "ssh", "smtp", "mail", "ftp", "bind")


NAME_STR = "".join(sorted(NAME_CHARS))
NAME_BACK = LOOK_BACK - 2  # the name before a keyword, without its "--"


def name_start(text, pos):
    """Where the name that ends at `pos` starts: the run of name characters before it, at most
    NAME_BACK of them (one rstrip in C, not a loop per character: every candidate asks)."""
    head = text[max(pos - NAME_BACK, 0):pos]
    return pos - len(head) + len(head.rstrip(NAME_STR))


def _keyword_is_a_word(name, kw_start, kw_end):
    """compass, bypass, tokenizer and author hold a keyword that is not a word of the name."""
    if name.isupper():
        return True  # DBPASSWORD
    before = name[kw_start - 1] if kw_start > 0 else ""
    low = name.lower()
    if before.isalpha() and not (before.islower() and name[kw_start].isupper()):
        head = low[:kw_start].lstrip("-_.").rsplit("_", 1)[-1].rsplit(".", 1)[-1].rsplit("-", 1)[-1]
        if not (low[kw_start:kw_end].startswith("pass") and head in _PASS_GLUED):
            return False
    after = name[kw_end:kw_end + 1]
    return not after.islower() or (after == "s" and not name[kw_end + 1:kw_end + 2].isalpha())


@functools.lru_cache(maxsize=2048)
def secret_name(name):
    """'password', 'secret', 'weak' or None for a whole name such as DB_PASSWORD or --api-token."""
    low = name.lower()
    kws = [low[m.start():m.end()] for m in _KEYWORD.finditer(low) if _keyword_is_a_word(name, m.start(), m.end())]
    if not kws:
        return None
    words = [w.lower() for w in _NAME_WORDS.findall(name)]
    if _NOT_SECRET_NAME.search(low) or not words:
        return None
    qualified_key = len(words) > 1 and words[-1] in ("key", "keys") and words[-2] in _KEY_QUALIFIERS
    if words[-1] in _NOT_SECRET_END and not qualified_key:
        return None
    if any(k.startswith("pass") or k == "pwd" for k in kws) or (kws == ["pw"] and len(words) <= 2 and "pw" in words):
        return "password"
    if any(k.startswith(("secret", "token", "api", "access", "private")) for k in kws) or qualified_key:
        return "secret"
    return "weak" if any(k.startswith(("auth", "credential")) for k in kws) else None
