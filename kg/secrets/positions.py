"""Where a password or secret stands: the checks of kg/secrets/kinds.py's password and assignment
kinds (contract section 10, "Calibration"). Pure.

Why it exists: each kind's regex finds a candidate (a name and a value, a flag and its value, a
URL's user:pass@); these checks read the candidate's place (which form: assignment, XML, call,
prose, bare; which command is on the line; which name a Kubernetes or Terraform value belongs to)
and ask kg/secrets/passwords.py whether the name holds a secret and the value is concrete.

Rules this file owns:
- `NAME=value` at a line's start (.env, .properties, export) is a literal, never code.
- An upper-case name followed by a space is a value only in a Dockerfile's ENV / ARG (`docker run
  -e POSTGRES_PASSWORD postgres:16` names a variable); `"password" name=` is a string, not prose.
- A command-line password counts only with its command on the line: glued `-pVALUE` for mysql /
  mariadb, spaced `-p VALUE` for docker / podman / helm registry / az / oc login, mongo*, sshpass,
  sqlcmd; `-a` for redis-cli, `-w` for ldap*, `-u user:pass` for curl / wget, `-U user%pass` for
  smbclient; a flag-shaped word after the flag is the next flag (the password is asked for).
"""

import re

from .passwords import (
    NAME_BACK,
    NAME_STR,
    VENDOR_DEFAULTS,
    concrete_in_prose,
    concrete_password,
    concrete_secret,
    name_start,
    secret_name,
)
from .values import secret_value

KEY_BACK = 160  # a check reads at most this many characters before its match (a command's line)
_TRAILING = ".,;:)`'\""  # prose and quotes after a command's value
_PROSE_NEXT = re.compile(r" [A-Za-z]")  # more words follow the value
_VERBS = re.compile(r"(?:^|[ \t])(?:is|was|to|are)(?:[ \t]|$)")


def group(text, m, name):
    """A group's text from the original (a lower-cased kind matched a copy)."""
    return text[m.start(name):m.end(name)]


def line_before(text, start, n=KEY_BACK):
    return text[max(text.rfind("\n", max(start - n, 0), start) + 1, start - n, 0):start].lower()


def url_password(user, pw):
    """The password part of user:pass@ (a URL, curl -u): the user's own name is a docs default."""
    return pw != user and concrete_password(pw, quoted=True)


def check_url(text, m):
    return url_password(m.group("user"), m.group("pw"))


def _form(sep):
    """'assign' (=, :, :=, =>), 'xml' (<password>...), 'call' (set_password('...')), 'prose'
    (password is ..., password for X is ...) or 'bare' (password VALUE)."""
    if "=" in sep or ":" in sep:
        return "assign"
    if ">" in sep:
        return "xml"
    if "(" in sep:
        return "call"
    return "prose" if _VERBS.search(sep.lower()) else "bare"


def _name_of(text, m):
    start = m.start("kw") if m.group("kw") == "" else name_start(text, m.start("kw"))
    return start, text[start:m.end("tail")]


def _class_of(text, start, name, form):
    """The name's class; in prose a lone KEY takes the word before it (the new signing key is)."""
    cls = secret_name(name)
    if cls is None and form in ("prose", "bare") and name.lower() in ("key", "keys"):
        before = text[max(start - 30, 0):start].split()
        if before:
            cls = secret_name(before[-1].strip("\"'`(") + "_" + name)
    return cls


def check_assignment(text, m):
    # The cheap tests first, the name's (cached) before the value's: most candidates end here. Groups 1 and
    # 2 are kw and tail in both regexes that ask (kg/secrets/kinds.py); m.regs reads every span at once.
    regs = m.regs
    k0, k1 = regs[1]
    if k0 == k1:
        start = k0  # a --flag's name starts after its "--"
    else:
        head = text[max(k0 - NAME_BACK, 0):k0]  # passwords.name_start, inline
        start = k0 - len(head) + len(head.rstrip(NAME_STR))
    name = text[start:regs[2][1]]
    if secret_name(name) is None and name[:3].lower() != "key":
        return False
    v0, v1 = m.span("value")
    value = text[v0:v1]
    if len(value) > 4 and value[-1] in ".,;:":
        value = value.rstrip(".,;:")  # prose around a value: "--db-password VALUE:"
    if value.lower() in VENDOR_DEFAULTS or value[0] == "\\":
        return False  # a documented default; an escape (\n) ends the text before any value
    sep = m.group("sep") if "sep" in m.re.groupindex else None
    form = "assign" if sep is None else _form(sep)  # None: the --flag VALUE kind
    cls = _class_of(text, start, name, form)
    if cls is None:
        return False
    after = text[m.end("value"):m.end("value") + 1]
    quoted = sep is not None and sep[-1:] in "\"'`"
    plain = value.isalpha() and (value.islower() or value.istitle())
    if plain and after == " " and (quoted or ":" in (sep or "")) and _PROSE_NEXT.match(text, m.end("value")):
        return False  # "save the name of ...", "--user_pass: glued words ...": a sentence, not a value
    if name[-1:] in "sS" and name.lower().endswith(("passwords", "secrets", "tokens", "keys", "credentials")):
        cls = "weak"  # a plural holds a list or a count (secrets: inherit, tokens: 4096), a random value only
    if cls == "weak" and len(value) < 16 and form != "xml":
        return False  # a weak name takes only a random value, 16 characters or more (values.secret_value)
    if form == "xml":
        return text[start - 1:start] == "<" and after == "<" and concrete_password(value, True)
    if form == "call":
        return cls == "password" and concrete_password(value, True)
    if form in ("prose", "bare"):
        if sep[:1] in "\"']":
            return False  # type="password" name=...: a string, then another attribute
        written = text[start - 4:start].upper()
        if name.isupper() and written.strip() in ("ENV", "ARG") and form == "bare":
            form = "assign"  # a Dockerfile's ENV NAME value
        elif name.isupper() and form == "bare":
            return False  # docker run -e POSTGRES_PASSWORD postgres:16 names a variable
        elif not (name.islower() or name.isupper() or name.istitle()):
            return False  # a name written as a word, not noise (pwD_ tl...)
    if form in ("prose", "bare"):
        if after == "(":
            return False  # the token is base64url(header) + ...
        if cls == "weak":
            return secret_value(value, False)
        return concrete_in_prose(value, quoted, cls == "password", bare=form == "bare")
    if cls == "password" and name.lower() == "pass" and ":" in sep:
        return concrete_in_prose(value, quoted, True)  # prose: "one maintenance pass: compaction"
    if sep == "=" and (name.isupper() or "." in name) and _line_start(text, start):
        quoted = True  # NAME=value at a line's start (.env, .properties, export): a literal, never code
    if cls == "password":
        return concrete_password(value, quoted, after)
    return concrete_secret(value, quoted, after, strong=cls == "secret")


def _line_start(text, start):
    """Whether the name begins its line (after blanks and an `export` / `set` / `ENV`)."""
    head = text[max(text.rfind("\n", max(start - 40, 0), start) + 1, start - 40, 0):start].strip()
    return head in ("", "export", "set", "ENV", "ARG", "-", "- ", "setenv") or (start == 0)


def label_assignment(text, m):
    start, name = _name_of(text, m)
    sep = m.groupdict().get("sep")
    cls = _class_of(text, start, name, "assign" if sep is None else _form(sep))
    low = name.lower()
    window = text[max(m.start("kw") - 80, 0):m.start("kw")].lower()
    aws = "aws" in low or "aws" in window or "secretaccess" in low.replace("_", "")
    if len(group(text, m, "value")) == 40 and aws:
        return "aws-secret", "an AWS secret access key"
    if cls == "password":
        return "password", "a password"
    return "assigned-secret", "a secret value assigned to a secret-like name"


# A password given on a command line: (flag, commands where it is glued, where it may be spaced).
_COMMAND_FLAGS = {
    "p": (("mysql", "mariadb"), ("sshpass", "mongo", "docker login", "podman login", "buildah login", "skopeo login",
                                 "registry login", "oc login", "az login", "sqlcmd", "bcp ")),
    "a": (("redis-cli",), ("redis-cli", "http ", "https ", "xh ")),  # HTTPie / xh: -a user:pass
    "w": ((), ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami")),
    "u": ((), ("curl", "wget", "http ", "smbclient", "rpcclient")), "-user": ((), ("curl", "wget")),
}


def check_command(text, m):
    """mysql -pPASS, docker login -p PASS, mongodump -p PASS, redis-cli -a PASS, curl -u user:PASS,
    smbclient -U user%PASS: the command is on the line."""
    glued, spaced = _COMMAND_FLAGS[m.group("flag")]
    line = line_before(text, m.start()) + " "  # `http -u ...` at a line's start: the command word ends here
    space = m.group("space")
    commands = glued if not space else glued + spaced if space.strip(" \t") == "=" else spaced
    if not any(c in line for c in commands):  # -pVALUE glued (never -passout), -p VALUE, -p=VALUE
        return False
    value = group(text, m, "value").rstrip(_TRAILING)
    if _FLAG.match(value) or any(c in value.lower() for c in spaced + glued):
        return False  # mongodump -p --db app: the next flag, the password is asked for; the command itself
    if m.group("flag") in ("u", "-user") or (m.group("flag") == "a" and "redis-cli" not in line):
        user, sep, pw = value.partition("%" if "smbclient" in line or "rpcclient" in line else ":")
        return bool(sep) and url_password(user, pw.rstrip(".,;:)"))
    return concrete_password(value, True)


_FLAG = re.compile(r"--?[A-Za-z][A-Za-z\-]*\Z")  # mongodump -p --db app: the next flag, the password is asked
_NAMED = re.compile(r"name[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"']?(?P<name>[A-Za-z0-9_.\-]{1,60})", re.I)
_VARIABLE = re.compile(r"variable[ \t]{1,4}\"(?P<name>[A-Za-z0-9_\-]{1,60})\"")


def _judge_named(cls, value):
    if cls == "password":
        return concrete_password(value, True)
    return cls is not None and concrete_secret(value, True, "", strong=cls == "secret")


def check_named_value(text, m):
    """Kubernetes and ECS environment lists: `- name: DB_PASSWORD` then `value: ...`."""
    names = list(_NAMED.finditer(text[max(m.start() - KEY_BACK, 0):m.start()]))
    return bool(names) and _judge_named(secret_name(names[-1].group("name")), group(text, m, "value"))


def check_tf_default(text, m):
    """Terraform: `variable "db_password" { ... default = "..." }`."""
    names = [n.group("name") for n in _VARIABLE.finditer(text[max(m.start() - KEY_BACK, 0):m.start()])]
    end = text.find("\n", m.end())
    comment = _VAR_COMMENT.search(text[m.end():end if end >= 0 else len(text)])
    if comment:
        names.append(comment.group("name"))  # default = "..."  # var.db_password
    return bool(names) and _judge_named(secret_name(names[-1]), group(text, m, "value"))


_VAR_COMMENT = re.compile(r"^[ \t]{0,40}(?:#|//)[^\n]{0,80}?\bvar\.(?P<name>[A-Za-z0-9_]{1,60})")


def check_openssl(text, m):
    """openssl -passin pass:PASS / -passout pass:PASS."""
    value = group(text, m, "value").rstrip(_TRAILING)
    return "-pass" in line_before(text, m.start(), 24) and concrete_password(value, True)


def check_htpasswd(text, m):
    """htpasswd -b FILE USER PASS, htpasswd -nb USER PASS."""
    flags, args = m.group("flags"), group(text, m, "args").split()
    ok = len(args) == (2 if "n" in flags else 3)
    return "b" in flags and ok and concrete_password(args[-1].rstrip(_TRAILING), True)


def check_quoted_password(text, m):
    """auth=("user", "PASS")."""
    return concrete_password(group(text, m, "value"), True)


_ARTICLES = frozenset(("the", "a", "my", "our", "its", "your", "their"))


def check_use_as(text, m):
    """`use PASS as the password (for ...)`: the words before the keyword, read back (at most five)."""
    window = text[max(m.start() - 260, 0):m.start()].split("\n")[-1]
    words = window.split()[-6:]
    for j in range(len(words) - 1, max(len(words) - 4, 1) - 1, -1):
        if words[j].lower() == "as" and j >= 2 and words[j - 2].lower() == "use":
            between = [w.lower() for w in words[j + 1:]]
            if len(between) <= 2 and (not between or between[0] in _ARTICLES or len(between) == 1):
                value = words[j - 1]
                if concrete_in_prose(value.strip("\"'`"), value[:1] in "\"'`", True):
                    return (m.start() - len(window) + window.rfind(value),)  # the hit starts at the value
            return False
    return False
