"""The calibration corpus of the secrets gate (contract section 10, "Calibration"), generated at run time.

Built to find the gate's blind spots, not to confirm its table: every line is a generated context
(where agents write: .env, YAML, JSON, INI, Terraform, code, command lines, container manifests,
prose) filled with a generated value (weak human passwords made from word lists, seasons and
years, names and digits, keyboard walks, passphrases, short ones, random ones; provider tokens
with random bodies), and near misses are generated the same way (code that reads a secret,
hashes, ids, placeholders, references, settings named like secrets, paths, prose).

No credential-shaped literal lives in this file: the word lists are plain words, prefixes are
concatenated ("gh" + "p_"), and every value is composed by a seeded generator.

    lines(seed) -> [(category, secret, text)]   secret: True for a credential, False for a near miss

A held-back seed (bench/secrets_bench.py HELD_BACK) is never used while tuning the rules.
"""

import base64
import random
import string

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64URL = ALNUM + "-_"

# Credential categories, then near-miss categories (bench/secrets_bench.py prints them in this order).
SECRET_CATEGORIES = ("provider token", "url password", "env and config", "terraform", "command line",
                     "container", "code", "prose")
NEAR_CATEGORIES = ("code reading a secret", "placeholder", "reference", "hash and id", "setting",
                   "command", "docs and prose")

_WORDS = ("dragon monkey sunshine princess football shadow master welcome summer winter spring autumn "
          "letmein trustno login iloveyou baseball superman batman cheese coffee purple orange tiger "
          "falcon rocket galaxy thunder pepper ginger cookie banana hockey soccer matrix phoenix maverick "
          "starwars pokemon chelsea arsenal london paris berlin tokyo admin secret pass password token "
          "test here company acme staging deploy server database backup office guitar yankees freedom").split()
_NAMES = "jessica michael ashley daniel sophie emma oliver liam noah olivia lucas mia ethan anna jack".split()
_SEASONS = ("Spring", "Summer", "Autumn", "Fall", "Winter")
_WALKS = ("qwerty", "asdf", "zxcvbn", "1qaz2wsx", "zaq12wsx", "qazwsx", "123qwe", "1q2w3e4r", "azerty")
_PHRASE = ("correct horse battery staple blue river stone cloud paper window orange rabbit silver "
           "mountain coffee winter lamp garden violet piano").split()
_LEET = {"a": "@4", "o": "0", "e": "3", "s": "$5", "i": "1!", "t": "7"}
_SYMBOLS = "!@#$%*?&"


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, seq):
        return self.r.choice(seq)

    def s(self, n, alphabet=ALNUM):
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def cap(self, w):
        return self.pick((w, w.capitalize(), w.capitalize(), w.upper() if len(w) < 6 else w))

    def leet(self, w):
        return "".join(self.pick(_LEET[c]) if c in _LEET and self.r.random() < 0.5 else c for c in w)

    def year(self):
        return str(self.r.randrange(1970, 2031))

    def digits(self):
        return self.pick(("1", "12", "123", "1234", "99", "007", "2", "69", "11", self.year(), self.year()[2:]))

    def human(self):
        """A weak password a person makes: (style, value)."""
        style = self.pick(("word+digits", "word+digits+symbol", "leet", "two words", "season+year",
                           "name+digits", "walk", "passphrase", "short", "random", "word-with-secret-word"))
        w = self.pick(_WORDS)
        if style == "word+digits":
            v = self.cap(w) + self.digits()
        elif style == "word+digits+symbol":
            v = self.cap(w) + self.digits() + self.pick(_SYMBOLS)
        elif style == "leet":
            v = self.cap(self.leet(w)) + self.digits() + self.pick(("", "!", "#"))
        elif style == "two words":
            v = self.cap(w) + self.cap(self.pick(_WORDS)) + self.pick(("", self.digits(), self.digits() + "!"))
        elif style == "season+year":
            v = self.pick(_SEASONS) + self.year() + self.pick(("", "!", "@", "#"))
        elif style == "name+digits":
            v = self.cap(self.pick(_NAMES)) + self.pick((self.year(), self.digits())) + self.pick(("", "!", "."))
        elif style == "walk":
            v = self.cap(self.pick(_WALKS)) + self.pick(("", "!", "123", "!@#", "2024"))
        elif style == "passphrase":
            words = [self.pick(_PHRASE) for _ in range(self.r.randrange(3, 5))]
            sep = self.pick(("-", "_", ".", ""))
            v = sep.join(self.cap(x) if sep == "" else x for x in words)
        elif style == "short":
            v = (self.cap(w)[:self.r.randrange(4, 6)] + self.digits())[:self.r.randrange(6, 8)]
            if len(v) < 6:
                v += self.s(6 - len(v), string.digits)
        elif style == "random":
            v = self.s(self.r.randrange(10, 24), ALNUM + "!#%&*+-=?^_~")
        else:  # holds "pass", "secret", "test", "token" or "here"
            a, b = self.pick(("Pass", "Secret", "Test", "Token", "pass", "secret", "test", "token", "My")), \
                self.pick(("Here", "Word", "Pass", "Secret", "Test", "Key", "word", "here"))
            v = a + b + self.digits() + self.pick(("", "abc", "XYZ" + self.digits(), "!"))
        return style, v

    def url_safe_human(self):
        style, v = self.human()
        return style, "".join(c for c in v if c not in "@#?%/ ") or "Fallback9x"

    def token(self):
        """A random machine secret assigned to a key / token / secret name."""
        return self.pick((
            lambda: self.s(self.r.randrange(24, 48)),
            lambda: self.s(32, HEX),
            lambda: self.s(64, HEX),
            lambda: base64.b64encode(bytes(self.r.randrange(256) for _ in range(32))).decode(),
            lambda: "base64:" + base64.b64encode(bytes(self.r.randrange(256) for _ in range(32))).decode(),
            lambda: self.s(40, B64URL),
            lambda: self.pick(("token", "Token", "secret", "Secret", "key")) + self.pick(("Here", "Value", ""))
            + self.s(3, string.digits) + self.s(12),
        ))()

    def provider(self):
        """(provider, token) with a random body; prefixes assembled, never written whole."""
        gh = "g" + "h"
        sk = "s" + "k"
        return self.pick((
            lambda: ("github", gh + self.pick("pousr") + "_" + self.s(36)),
            lambda: ("github", "github" + "_pat_" + self.s(22) + "_" + self.s(59)),
            lambda: ("gitlab", "gl" + "pat-" + self.s(20, B64URL)),
            lambda: ("slack", "xo" + "x" + self.pick("bpa") + "-" + self.s(11, string.digits) + "-"
                     + self.s(12, string.digits) + "-" + self.s(24)),
            lambda: ("stripe", self.pick(("s", "r")) + "k_" + self.pick(("live", "test")) + "_" + self.s(24)),
            lambda: ("google", "AI" + "za" + self.s(35, B64URL)),
            lambda: ("openai", sk + "-" + self.pick(("", "proj-")) + self.s(48, B64URL)),
            lambda: ("anthropic", sk + "-ant-api03-" + self.s(93, B64URL) + "AA"),
            lambda: ("aws", "AK" + "IA" + self.s(16, string.ascii_uppercase + string.digits)),
            lambda: ("npm", "np" + "m_" + self.s(36)),
            lambda: ("sendgrid", "S" + "G." + self.s(22, B64URL) + "." + self.s(43, B64URL)),
        ))()


def _secrets(g):
    out = []

    def add(cat, text):
        out.append((cat, True, text))

    H = lambda: g.human()[1]  # noqa: E731
    U = lambda: g.url_safe_human()[1]  # noqa: E731
    user = lambda: g.pick(("admin", "app", "root", "deploy", "svc_api", "postgres", "backup", "ci"))  # noqa: E731
    host = lambda: g.pick(("db.internal", "10.0.3.7", "prod-db.acme.io", "cache", "mq.svc.cluster.local"))  # noqa: E731

    for _ in range(6):
        name, tok = g.provider()
        env = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "slack": "SLACK_BOT_TOKEN",
               "stripe": "STRIPE_KEY", "google": "GOOGLE_API_KEY", "openai": "OPENAI_API_KEY",
               "anthropic": "ANTHROPIC_API_KEY", "aws": "AWS_ACCESS_KEY_ID", "npm": "NPM_TOKEN",
               "sendgrid": "SENDGRID_API_KEY"}[name]
        add("provider token", g.pick(("%s=%s", "export %s=%s", "%s: %s", "\"%s\": \"%s\"")) % (env, tok))
        add("provider token", g.pick(("the CI uses %s", "curl -H 'Authorization: Bearer %s' https://api.example.com",
                                      "token %s expired yesterday", "`%s`", "key=%s&q=1")) % tok)

    for _ in range(8):
        scheme = g.pick(("postgres", "postgresql", "mysql", "mongodb", "mongodb+srv", "redis", "rediss", "amqp",
                         "https", "ftp", "smtp", "ldap", "sqlserver", "mssql"))
        u = g.pick((user(), ""))
        form = g.pick(("%s://%s:%s@%s:5432/app", "DATABASE_URL=%s://%s:%s@%s/app", "\"url\": \"%s://%s:%s@%s\"",
                       "connect to %s://%s:%s@%s and run the migration", "url: %s://%s:%s@%s/0"))
        add("url password", form % (scheme, u, U(), host()))

    env_names = ("DB_PASSWORD", "PASSWORD", "POSTGRES_PASSWORD", "MYSQL_ROOT_PASSWORD", "REDIS_PASS", "ADMIN_PWD",
                 "SMTP_PASSWORD", "DB_PASSWD", "KEYSTORE_PASS", "LDAP_BIND_PASSWORD", "PASSPHRASE")
    key_names = ("APP_KEY", "SIGNING_KEY", "ENCRYPTION_KEY", "SECRET_KEY", "JWT_SECRET", "API_TOKEN", "API_KEY",
                 "MASTER_KEY", "CLIENT_SECRET", "SESSION_SECRET", "WEBHOOK_SECRET", "AUTH_TOKEN", "ACCESS_TOKEN",
                 "HMAC_KEY", "PRIVATE_KEY", "STORAGE_ACCOUNT_KEY")
    yaml_names = ("password", "db_password", "adminPassword", "passwd", "pwd", "secret", "token", "api_key",
                  "apiKey", "client_secret", "signing_key", "encryptionKey", "auth_token", "pass", "passphrase")
    for _ in range(12):
        n, k, y = g.pick(env_names), g.pick(key_names), g.pick(yaml_names)
        value = H() if "PASS" in n or "PWD" in n else g.token()
        add("env and config", g.pick(("%s=%s", "export %s=%s", "%s=\"%s\"", "%s='%s'")) % (n, value))
        add("env and config", g.pick(("%s=%s", "export %s=%s", "%s=\"%s\"")) % (k, g.pick((g.token(), H()))))
        v = H() if "pass" in y.lower() or "pwd" in y.lower() else g.pick((g.token(), H()))
        form = g.pick(("%s: %s", "  %s: \"%s\"", "%s: '%s'", "\"%s\": \"%s\"", "%s = \"%s\"", "%s = %s",
                       "spring.datasource.%s=%s", "[db]\n%s = %s", "<%s>%s</password>"))
        add("env and config", form % (y, v))

    for _ in range(6):
        pad = " " * g.r.randrange(1, 16)
        add("terraform", g.pick(("  password%s= \"%s\"", "  master_password%s= \"%s\"", "  admin_password%s= \"%s\"",
                                 "  db_password%s= \"%s\"", "  secret_key%s= \"%s\"", "  token%s= \"%s\"",
                                 "  default%s= \"%s\"  # var.db_password")) % (pad, H()))
        add("terraform", "variable \"db_password\" {\n  type    = string\n  default = \"%s\"\n}" % H())

    for _ in range(14):
        p = H()
        q = p.replace("'", "")
        add("command line", g.pick((
            "mysql -u root -p%s app" % q, "mysqldump -uroot -p%s --all-databases > dump.sql" % q,
            "mysql --password=%s -h db" % q, "PGPASSWORD=%s psql -h db -U app" % q,
            "PGPASSWORD='%s' pg_dump app > app.sql" % q, "docker login -u deploy -p %s registry.acme.io" % q,
            "docker login --username ci --password %s ghcr.io" % q, "mongodump -u admin -p %s --db app" % q,
            "mongosh -u admin -p '%s' --authenticationDatabase admin" % q, "redis-cli -a %s ping" % q,
            "sshpass -p '%s' ssh deploy@10.0.0.8" % q, "curl -u admin:%s https://ci.acme.io/api" % q,
            "psql \"postgresql://app:%s@db/app\"" % q.replace("@", ""), "./manage.py createsuperuser --password %s" % q,
            "kubectl create secret generic db --from-literal=password=%s" % q,
            "helm install app ./chart --set db.password=%s" % q, "ansible-playbook site.yml -e ansible_password=%s" % q,
            "az login -u ops@acme.io -p %s" % q, "openssl pkcs12 -export -passout pass:%s -out c.p12" % q,
            "keytool -importkeystore -storepass %s -srcstorepass %s" % (q, q),
            "MYSQL_PWD=%s mysql -u app" % q, "wp user create bob bob@acme.io --user_pass=%s" % q,
            "htpasswd -b .htpasswd admin %s" % q, "smbclient //fs/share -U alice%%%s" % q,
        )))

    for _ in range(10):
        p, n = H(), g.pick(env_names)
        add("container", g.pick((
            "docker run -e %s=%s postgres:16" % (n, p), "    environment:\n      - %s=%s" % (n, p),
            "      %s: %s" % (n, p), "ENV %s=%s" % (n, p), "ENV %s %s" % (n, p),
            "        - name: %s\n          value: \"%s\"" % (n, p), "stringData:\n  password: %s" % p,
            "{\"name\": \"%s\", \"value\": \"%s\"}" % (n, p), "ARG %s=%s" % (n, p),
            "docker run --env %s=%s -d mysql:8" % (n, p),
        )))

    for _ in range(12):
        p = H()
        add("code", g.pick((
            "password = \"%s\"" % p, "db_password = '%s'" % p, "const password = '%s';" % p,
            "String password = \"%s\";" % p, "conn = psycopg2.connect(host=\"db\", user=\"app\", password=\"%s\")" % p,
            "DATABASES = {'default': {'PASSWORD': '%s'}}" % p, "$password = '%s';" % p,
            "client.login(\"admin\", password=\"%s\")" % p, "self.password = \"%s\"" % p,
            "config.secret = '%s'" % g.pick((p, g.token())), "api_key = \"%s\"" % g.token(),
            "let token = \"%s\";" % g.token(), "SECRET_KEY = '%s'" % g.token(), "pwd := \"%s\"" % p,
            "user.set_password('%s')" % p, "os.environ[\"DB_PASSWORD\"] = \"%s\"" % p,
            "auth = (\"admin\", \"%s\")" % p, "requests.get(url, auth=('bot', '%s'))" % p,
        )))

    for _ in range(10):
        p = H()
        add("prose", g.pick((
            "the staging DB password is %s" % p, "The password for the admin account is %s" % p,
            "root password: %s" % p, "I reset the password to %s so the test can log in" % p,
            "use %s as the password for the ci user" % p, "the wifi password is %s" % p,
            "admin login is admin / password %s" % p, "the API token for staging is %s" % g.token(),
            "Grafana admin password is `%s` (change it)" % p, "pw: %s" % p,
            "The new signing key is %s" % g.token(), "db creds: user app, password %s" % p,
        )))
    return out


def _near(g):
    out = []

    def add(cat, text):
        out.append((cat, False, text))

    env = lambda: g.pick(("DB_PASSWORD", "API_TOKEN", "APP_KEY", "SIGNING_KEY", "POSTGRES_PASSWORD",  # noqa: E731
                          "GITHUB_TOKEN", "SECRET_KEY", "REDIS_PASSWORD", "OPENAI_API_KEY"))
    for _ in range(10):
        e = env()
        add("code reading a secret", g.pick((
            "password = os.environ[\"%s\"]" % e, "token = os.environ.get('%s')" % e,
            "api_key = os.getenv(\"%s\", \"\")" % e, "const token = process.env.%s;" % e,
            "token = request.headers[\"Authorization\"]", "password = getpass.getpass()",
            "password = getpass.getpass(\"DB password: \")", "password_hash = bcrypt.hashpw(password, salt)",
            "secret = settings.%s" % e, "password = config[\"database\"][\"password\"]",
            "conn = connect(host=host, user=user, password=password)", "password=self._password,",
            "token = ENV.fetch(\"%s\")" % e, "String password = System.getenv(\"%s\");" % e,
            "password := os.Getenv(\"%s\")" % e, "if password is None: raise SystemExit(\"set %s\")" % e,
            "password: str = Field(..., min_length=12)", "def check_password(password: str) -> bool:",
            "token = secrets.token_urlsafe(32)", "key = Fernet.generate_key()",
            "api_key = args.api_key or read_keyring('%s')" % e.lower(),
            "$password = $_ENV['%s'];" % e, "password = user_input.strip()",
            "password = hashlib.sha256(raw.encode()).hexdigest()", "assert password == expected_password",
            "let apiKey = config.apiKey ?? process.env.%s;" % e,
        )))
    for _ in range(10):
        e = env()
        low = e.lower().replace("_", "-")
        add("placeholder", g.pick((
            "%s=<%s>" % (e, low), "%s=${%s}" % (e, e), "password: {{ .Values.db.password }}",
            "%s=YOUR_%s" % (e, e), "password: \"xxxxxxxx\"", "password: ********", "token: ...",
            "%s=changeme" % e, "password = \"<your password>\"", "api_key: \"${{ secrets.%s }}\"" % e,
            "password: '{{ vault_db_password }}'", "%s=your-%s-here" % (e, low), "password: \"\"",
            "postgres://user:password@localhost:5432/app", "mongodb://<username>:<password>@localhost",
            "mysql://root:${MYSQL_ROOT_PASSWORD}@db/app", "redis://:****@cache:6379",
            "amqp://guest:guest@localhost:5672/", "password=%(password)s", "password: REDACTED",
            "token = \"<token>\"", "password: [redacted]", "%s=***" % e, "%s=xxxxxxxxxxxxxxxx" % e,
            "password: '%s'" % "…", "SECRET_KEY=change-me", "password: changeit",
        )))
    for _ in range(8):
        e = env()
        add("reference", g.pick((
            "password: set-in-vault", "password: managed-by-terraform", "%s=stored-in-ssm" % e,
            "api_key: from-1password", "valueFrom: {secretKeyRef: {name: db-credentials, key: password}}",
            "        secretKeyRef:\n          name: app-secrets\n          key: api-token",
            "password_file: /run/secrets/db_password", "%s_FILE=/run/secrets/%s" % (e, e.lower()),
            "password: !ENV ${%s}" % e, "token: arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/api",
            "api_key: op://Engineering/OpenAI/credential", "password: vault:secret/data/db#password",
            "password = var.db_password", "  password = random_password.db.result",
            "  master_password = data.aws_secretsmanager_secret_version.db.secret_string",
            "%s is set in the CI secrets, never in the repo" % e, "export %s=$(pass show db/prod)" % e,
            "%s=$(cat /run/secrets/token)" % e, "secret: sealed-secrets/app-db",
            "password: injected-at-runtime", "token: provided-by-ci",
        )))
    for _ in range(8):
        add("hash and id", g.pick((
            "commit %s" % g.s(40, HEX), "token_id: %s-%s-4%s-a%s-%s" % (g.s(8, HEX), g.s(4, HEX), g.s(3, HEX),
                                                                      g.s(3, HEX), g.s(12, HEX)),
            "password_hash: $2b$12$%s" % g.s(53, ALNUM + "./"), "secret_sha256 = \"%s\"" % g.s(64, HEX),
            "api_key_id: %s" % g.s(20, string.ascii_uppercase + string.digits),
            "session_id=%s" % g.s(32, HEX), "request id %s-%s" % (g.s(8, HEX), g.s(4, HEX)),
            "sha256:%s" % g.s(64, HEX), "password_salt = \"%s\"" % g.s(16, HEX),
            "token_fingerprint: %s" % ":".join(g.s(2, HEX) for _ in range(16)),
            "kid: %s" % g.s(16, HEX), "key_version: %d" % g.r.randrange(1, 40),
            "password: pbkdf2_sha256$600000$%s$%s=" % (g.s(22), g.s(43)),
        )))
    for _ in range(10):
        add("setting", g.pick((
            "password_encryption = scram-sha-256", "PasswordAuthentication no",
            "token_ttl: %d" % g.r.randrange(60, 9000),
            "password_min_length: %d" % g.r.randrange(8, 20), "auth_method: md5", "token_type: bearer",
            "key: password", "sort_key: created_at", "primary_key = \"tenant_id\"", "api_key_header: X-API-Key",
            "secret_name: db-credentials", "secretName: tls-%s" % g.pick(("acme-io", "wildcard", "api")),
            "\"password\": {\"type\": \"string\", \"format\": \"password\"}", "password: required",
            "token_endpoint: https://auth.acme.io/oauth/token", "password_reset_timeout = 3600",
            "max_tokens: 4096", "pwd: /home/dev/app", "secret: false", "password: true",
            "host all all 0.0.0.0/0 scram-sha-256", "routing_key: orders.created", "cache_key = \"user:profile\"",
            "<input type=\"password\" name=\"password\" autocomplete=\"current-password\">",
            "token_limit = 8000", "partition_key: tenant_id", "secret_backend: vault",
            "password_policy: strong", "PASSWORD_HASHERS = [\"django.contrib.auth.hashers.Argon2PasswordHasher\"]",
        )))
    for _ in range(10):
        e = env()
        add("command", g.pick((
            "docker run -e POSTGRES_PASSWORD postgres:16", "docker run -e %s -p 5432:5432 postgres:16" % e,
            "cat token.txt | docker login --password-stdin -u ci ghcr.io", "mysql -u root -p app",
            "mysql -u root -p", "psql -h db -U app -W", "ssh -p 2222 deploy@10.0.0.8",
            "pg_dump -h db -p 5432 -U app app > app.sql", "redis-cli -h cache -p 6379 ping",
            "mongodump -u admin -p --db app", "gh auth login --with-token < token.txt",
            "kubectl create secret generic db --from-file=password=./db_password.txt",
            "aws secretsmanager get-secret-value --secret-id prod/db",
            "docker login -u ci --password-stdin ghcr.io", "openssl rand -hex 32 > signing.key",
            "python -m pip install -r requirements.txt --index-url https://pypi.org/simple",
            "curl -u \"$USER:$TOKEN\" https://ci.acme.io/api", "vault kv get -field=password secret/db",
            "npm config set //registry.npmjs.org/:_authToken=${NPM_TOKEN}",
            "helm install app ./chart --set db.password=$DB_PASSWORD",
            "ansible-vault encrypt group_vars/prod/vault.yml",
        )))
    for _ in range(10):
        add("docs and prose", g.pick((
            "The password reset flow sends a signed link valid for 30 minutes.",
            "the staging DB password is in 1Password under 'staging-db'",
            "The password is required and must be at least 12 characters.",
            "Rotate the signing key every 90 days; the new key is generated by the release job.",
            "token expired: the refresh token is only valid for 14 days",
            "The API key is passed in the X-API-Key header, never in the URL.",
            "password is stored hashed with argon2id; see auth/hashing.py",
            "the secret lives in Vault at secret/data/billing", "Login fails when the password is wrong.",
            "Set the password in the POSTGRES_PASSWORD environment variable before starting.",
            "use the token from `gh auth token` rather than a PAT",
            "the key is rotated hourly by the KMS keyring app-prod",
            "PASSWORD and TOKEN are environment variable names, not values.",
            "For docs use postgres://user:password@localhost/db as the DSN.",
            "The admin password is generated on first start and printed once to the log.",
            "commit %s fixed the token refresh race" % g.s(12, HEX),
        )))
    return out


def lines(seed):
    """[(category, secret, text)]: the credentials of seed `seed`, then its near misses."""
    g = Gen(seed)
    return _secrets(g) + _near(g)
