"""kg/secrets/passwords.py: passwords judged by where they stand (contract section 10, "Calibration").

Table tests for each rule (names, the closed placeholder forms, references, code, hash formats,
each position), the lines of the issue that found the gaps, and property tests over the generated
calibration corpus (tests/secrets_calibration.py) on seeds other than the bench's held-back one.
Every password-shaped literal is joined at run time: none lives in the repository whole.
"""

import pytest

from kg.secrets import kinds as secrets
from kg.secrets import passwords

import secrets_calibration

P1 = "Passw" + "0rd123"
P2 = "Spring" + "2024!"
P3 = "token" + "Here123abc"
P4 = "S3cr3t" + "Passw0rd9"


# ---------------------------------------------------------------- the lines that found the gaps

@pytest.mark.parametrize("text", [
    "postgres://admin:%s@db.internal:5432/app" % P4,
    "DB_PASSWORD=" + P1,
    "password: My" + "Password2024",
    "mysql -u root -p" + "SecretPass99" + " app",
    "export API_TOKEN=" + P3 + "XYZ789",
    "password: hunt" + "er2",  # 7 characters
    "DB_PASSWORD=" + "correct-horse-battery-staple",  # a passphrase without digits
    "APP_KEY=base64:" + "K7xQ2mVn9pLr4sT8wYz1aBcD3eFgH5jK6lMnOpQrStU=",
    "SIGNING_KEY=" + "sign" + "me-2024-Q3",
    "ENCRYPTION_KEY=" + "4f8a" * 8,
    "docker login -u deploy -p " + P2 + " registry.acme.io",
    "mongodump -u admin -p " + P1 + " --db app",
    '  password            = "%s"' % P2,  # Terraform's aligned =
    "the staging DB password is " + P2,
    "the password is `" + "sunshine" + "`",
    "the value " + "secret" + "Pass99" + " contains the word secret",  # not in a password's place: see below
])
def test_the_issues_lines_are_refused(text):
    if text.startswith("the value "):
        assert secrets.find(text) is None  # a word is not a password's place
        return
    assert secrets.find(text) is not None, text


@pytest.mark.parametrize("text", [
    'password = os.environ["DB_PASSWORD"]',
    'token = request.headers["Authorization"]',
    "password = getpass.getpass()",
    "valueFrom: {secretKeyRef: {name: db, key: password}}",
    "cat token.txt | docker login --password-stdin -u ci ghcr.io",
    "password_hash = bcrypt.hashpw(password, salt)",
    "docker run -e POSTGRES_PASSWORD postgres:16",
    "mongodb://<username>:<password>@localhost",
    "password_encryption = scram-sha-256",
    "password: set-in-vault",
    "password: managed-by-terraform",
    "postgres://user:password@localhost:5432/app",
])
def test_code_naming_where_a_secret_comes_from_passes(text):
    assert secrets.find(text) is None, text


# ---------------------------------------------------------------- the closed forms

@pytest.mark.parametrize("value", [
    "<db-password>", "[redacted]", "{password}", "${DB_PASSWORD}", "{{ .Values.db.password }}", "$(pass show db)",
    "%(password)s", "YOUR_DB_PASSWORD", "your-token-here", "yourPassword", "insert_key_here", "xxxxxxxx", "xxx",
    "sk-xxxx", "********", "...", "abc\u2026", "changeme", "CHANGEME", "changeit", "password", "guest", "REDACTED",
    "required", "none", "null", "true", "AKIA" + "IOSFODNN7" + "EXAMPLE",  # AWS docs' example key, built here
])
def test_placeholders_are_a_closed_set_of_forms(value):
    assert passwords.placeholder(value)
    assert not passwords.concrete_password(value, quoted=True)


@pytest.mark.parametrize("value", [P1, P2, P3, P4, "Welcome" + "1", "Test" + "Word02!", "My" + "SecretPass",
                                   "here" + "4you2", "yourself" + "99", "Jessica" + "1990"])
def test_a_value_holding_a_placeholder_word_is_no_placeholder(value):
    assert not passwords.placeholder(value)
    assert passwords.concrete_password(value, quoted=True)


@pytest.mark.parametrize("value, where", [
    ("$DB_PASSWORD", True), ("${DB_PASSWORD}", True), ("env:DB_PASSWORD", True), ("vault:secret/db#password", True),
    ("op://Eng/db/password", True), ("arn:aws:secretsmanager:eu-west-1:1:secret:db", True), ("/run/secrets/db", True),
    ("~/.pgpass", True), ("DB_PASSWORD", True), ("set-in-vault", True), ("managed-by-terraform", True),
    ("stored-in-ssm", True), ("from-1password", True), ("secret/data/db", True), ("%DB_PASSWORD%", True),
    ("!ENV", True),
    ("$" + "occer99#", False), ("correct-horse-battery", False), (P2, False), ("blue-river-stone", False),
])
def test_references_name_where_the_secret_lives(value, where):
    assert passwords.reference(value) is where


@pytest.mark.parametrize("value, after, is_code", [
    ("os.environ", "[", True), ("getpass.getpass", "(", True), ("settings.DB_PASSWORD", "", True),
    ("self._password", "", True), ("var.db_password", "", True), ("db_password", "", True),
    ("newPass", "", True), ("expected_secret", "", True), (":password", "", True), ("?", "", True),
    ("&anchor", "", True), ("$password", "", True),
    ("window.garden.silver", "", False), ("berlin" + "Hockey", "", False), ("sunshine", "", False),
    ("Token" + "2", "", False), ("cloud_stone_piano", "", False),
])
def test_code_in_a_values_place(value, after, is_code):
    assert passwords.code(value, after) is is_code


@pytest.mark.parametrize("value", ["pbkdf2_sha256$600000$abc$def=", "$2b$12$" + "a" * 53, "{SSHA}abcdef",
                                   "md5" + "0" * 32, "SCRAM-SHA-256$4096:abc$def:ghi", "$argon2id$v=19$m=65536"])
def test_password_hashes_name_no_password(value):
    assert passwords.hash_format(value) and not passwords.concrete_password(value, quoted=True)


# ---------------------------------------------------------------- names

@pytest.mark.parametrize("name, cls", [
    ("DB_PASSWORD", "password"), ("PGPASSWORD", "password"), ("MYSQL_PWD", "password"), ("passwd", "password"),
    ("admin_pass", "password"), ("-storepass", "password"), ("--user_pass", "password"), ("pw", "password"),
    ("passphrase", "password"), ("db.password", "password"),
    ("APP_KEY", "secret"), ("SIGNING_KEY", "secret"), ("ENCRYPTION_KEY", "secret"), ("signingKey", "secret"),
    ("STORAGE_ACCOUNT_KEY", "secret"), ("api_key", "secret"), ("auth_token", "secret"), ("client_secret", "secret"),
    ("X_AUTH", "weak"), ("credentials", "weak"),
    ("key", None), ("primary_key", None), ("sort_key", None), ("api_key_id", None), ("password_encryption", None),
    ("PasswordAuthentication", None), ("--password-stdin", None), ("password_hash", None), ("token_ttl", None),
    ("secretName", None), ("compass", None), ("bypass", None), ("passport_number", None), ("tokenizer", None),
    ("author", None), ("password_salt", None), ("routing_key", None),
])
def test_names(name, cls):
    assert passwords.secret_name(name) == cls


# ---------------------------------------------------------------- positions

def _pw():
    return "Winter" + "2025#"


@pytest.mark.parametrize("form", [
    "postgres://app:%s@db/app", "redis://:%s@cache:6379/0", "DB_PASSWORD=%s", "export DB_PASSWORD='%s'",
    "password: %s", '"password": "%s"', "[db]\npassword = %s", '  master_password      = "%s"',
    "<password>%s</password>",
    "spring.datasource.password=%s", "mysql -uroot -p%s app", "mysql --password=%s", "PGPASSWORD=%s psql",
    "docker login -u ci -p %s ghcr.io", "mongosh -u admin -p %s", "redis-cli -a %s ping", "sshpass -p %s ssh h",
    "curl -u admin:%s https://ci", "http -a alice:%s api.example.com/me", "http -u alice:%s https://ci",
    "xh -a alice:%s api.example.com", "smbclient //fs/s -U alice%%%s", "openssl pkcs12 -export -passout pass:%s",
    "keytool -list -storepass %s", "htpasswd -b .htpasswd admin %s", "ldapsearch -D cn=admin -w %s",
    "ENV DB_PASSWORD %s", "docker run -e DB_PASSWORD=%s postgres:16", "- name: DB_PASSWORD\n  value: \"%s\"",
    'variable "db_password" {\n  default = "%s"\n}', 'conn = connect(user="app", password="%s")',
    "user.set_password('%s')", 'auth = ("admin", "%s")', "the wifi password is %s",
    "The password for the admin account is %s", "I reset the password to %s", "use %s as the password",
    "root password: %s", "db creds: user app, password %s", "keytool -storepass %s -keypass x",
])
def test_every_password_position_refuses_a_human_password(form):
    hit = secrets.find(form % _pw())
    # a Kubernetes env entry is named by its kind of entry ("a secret value assigned to a secret-like name")
    assert hit is not None and hit.kind in ("password", "url-password", "assigned-secret"), form
    assert _pw() in (form % _pw())[hit.start:hit.end] or hit.kind == "password"


@pytest.mark.parametrize("form", [
    "password: %s", "DB_PASSWORD=%s", "mysql -uroot -p%s", "postgres://app:%s@db/app", "the password is %s",
])
@pytest.mark.parametrize("placeholder", ["<password>", "${DB_PASSWORD}", "changeme", "********", "YOUR_PASSWORD",
                                         "set-in-vault", "..."])
def test_every_password_position_passes_a_placeholder(form, placeholder):
    assert secrets.find(form % placeholder) is None, form % placeholder


@pytest.mark.parametrize("text", [
    "The password is required and must be at least 12 characters.", "Login fails when the password is wrong.",
    "token expired: the refresh token is only valid for 14 days", "The admin password is generated on first start.",
    "if password is None: raise SystemExit", "mysql -u root -p app", "mongodump -u admin -p --db app",
    "ssh -p 2222 deploy@host", "docker run -p 8080:80 nginx", "redis-cli -h cache -p 6379 ping",
    "http -a alice api.example.com/me (prompts for the password)", "http -a $API_USER:$API_PASS api.example.com",
    "<input type=\"password\" name=\"password\">", "we use bcrypt as the password hasher",
    "The token is base64url(header) + \".\" + base64url(payload)", 'token = "Bearer " + access_token',
    # lines of this repository's own docs and code that a first version refused
    "the `registry` of loaded graphs, the secrets `gate`, `sessions`", "- **Token estimate**: an edge costs 15",
    '"""Pass after pass: admit new feeds', "One maintenance pass: compaction", "G.tokens = +g.tokens || 0;",
    "`Upgrade` must hold the token `websocket` and", 'assert out == "Password: \\nScrew you.\\n"',
    '"password": "save the name of the variable or vault entry that holds this password "',
    "VENDOR_DEFAULTS = frozenset((  # documentation's default passwords: publishing one reveals nothing",
    "# keytool -storepass, wp --user_pass: glued words ending in pass", "# --db-password VALUE: its name is judged",
    '"""htpasswd -b FILE USER PASS, htpasswd -nb USER PASS."""', "secrets: inherit",
])
def test_prose_and_commands_about_passwords_pass(text):
    assert secrets.find(text) is None, text


def test_a_hit_before_its_keyword_covers_the_value():
    """`use PASS as the password`: the hit starts at the value, so a redacted view hides it."""
    text = "note: use %s as the password for ci" % _pw()
    hit = secrets.find(text)
    assert text[hit.start:hit.end].startswith(_pw())


# ---------------------------------------------------------------- the generated corpus

@pytest.mark.parametrize("seed", [101, 202, 303])
def test_the_calibration_corpus_on_other_seeds(seed):
    """Seeds the rules were not tuned on (tuning used 0..9; the bench's held-back seed is not here)."""
    rows = secrets_calibration.lines(seed)
    missed = [t for _, s, t in rows if s and secrets.find(t) is None]
    alarms = [t for _, s, t in rows if not s and secrets.find(t) is not None]
    n_secret = sum(1 for _, s, _ in rows if s)
    assert len(missed) <= 0.02 * n_secret, missed
    assert len(alarms) <= 0.02 * (len(rows) - n_secret), alarms


def test_the_corpus_covers_every_category_and_holds_no_literal():
    rows = secrets_calibration.lines(0)
    assert {c for c, s, _ in rows if s} == set(secrets_calibration.SECRET_CATEGORIES)
    assert {c for c, s, _ in rows if not s} == set(secrets_calibration.NEAR_CATEGORIES)
    with open(secrets_calibration.__file__, encoding="utf-8") as f:
        assert secrets.find(f.read()) is None  # the generator's source holds nothing refused
