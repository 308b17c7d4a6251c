"""Hostile corpora of the secrets gate (contract section 10): what an outside evaluator tries.

Built at run time like tests/secrets_corpus.py: every prefix is concatenated, every body drawn
from a seeded generator; no credential-shaped literal lives in the repository.

- hostile_credentials(seed): (kind, text) pairs: every kind in the forms people paste (env, export,
  YAML, JSON, TOML, code, flags, headers, curl), then wrapped (fences, quotes, URL-encoding,
  unicode around, CRLF, zero-width characters inside).
- hostile_near_misses(seed): ordinary engineering lines that must pass.
"""

import string
from urllib.parse import quote

from secrets_corpus import (
    ALNUM,
    B64,
    B64URL,
    HEX,
    UPPER_DIGITS,
    URL_PASSWORD_CHARS,
    _Gen,
)

ZW = "\u200b"  # zero width space


def _forms(g):
    """(kind, text) in the plain forms."""
    gh = "g" + "h"
    sk = "s" + "k"
    out = []

    def add(kind, *texts):
        out.extend((kind, t) for t in texts)

    pem_b64 = "\n".join(g.s(64, B64) for _ in range(3))
    for kt in ("OPENSSH ", "EC ", "RSA ", "ENCRYPTED ", ""):
        add("private-key", "-----BEGIN %sPRIV" "ATE KEY-----\n%s\n-----END %sPRIV" "ATE KEY-----" % (kt, pem_b64, kt))
    add(
        "private-key",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n%s\n=%s\n-----END PGP PRIVATE KEY BLOCK-----"
        % (pem_b64, g.s(4, B64)),
        "-----BEGIN RSA PRIV" "ATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,%s\n\n%s"
        % (g.s(32, HEX.upper()), pem_b64),
        "-----BEGIN OPENSSH PRIV" "ATE KEY-----\r\n%s\r\n" % g.s(70, B64),
        "-----BEGIN PRIV" "ATE KEY-----   %s" % g.s(64, B64),
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 2\n%s\nPrivate-Lines: 1\n%s"
        % (g.s(64, B64), g.s(44, B64)),
        "AGE-" + "SECRET-KEY-1" + g.s(58, UPPER_DIGITS),
        "tls.key: |\n            -----BEGIN RSA PRIV" "ATE KEY-----\n            " + g.s(64, B64),
        '"key": "-----BEGIN DH PRIV' 'ATE KEY-----\\r\\n%s"' % g.s(64, B64),
    )
    add("sendgrid", "S" + "G." + g.s(22, B64URL) + "." + g.s(43, B64URL))
    add("discord-webhook", "https://discord.com/api/webhooks/%s/%s" % (g.s(18, string.digits), g.s(68, B64URL)))
    for p in ("AK" + "IA", "AS" + "IA"):
        kid = p + g.s(16, UPPER_DIGITS)
        add("aws-access-key-id", kid, "aws_access_key_id=" + kid, '"aws_access_key_id": "%s"' % kid,
            "AWS_ACCESS_KEY_ID: " + kid, "key id `%s` in the failing job" % kid)
    for _ in range(2):
        sec = g.s(40, B64)
        add("aws-secret", "aws_secret_access_key = " + sec, "aws_secret_access_key=" + sec,
            '{"aws_secret_access_key": "%s"}' % sec, "export AWS_SECRET_ACCESS_KEY=" + sec,
            "AWS_SECRET_ACCESS_KEY: " + sec, '  aws_secret_access_key: "%s"' % sec,
            '"SecretAccessKey":"%s"' % sec)
    for p in ("p_", "o_", "u_", "s_", "r_"):
        tok = gh + p + g.s(36)
        add("github", tok, '{"token": "%s"}' % tok, "export GH_TOKEN=" + tok)
    add("github", "github" + "_pat_11" + g.s(20, UPPER_DIGITS) + "_" + g.s(59))
    add("gitlab", "gl" + "pat-" + g.s(20, B64URL), "PRIVATE-TOKEN: gl" + "pat-" + g.s(20, ALNUM))
    for t in ("b", "p", "a", "r", "s"):
        add("slack", "xo" + "x" + t + "-" + g.s(12, string.digits) + "-" + g.s(12, string.digits) + "-" + g.s(24))
    add(
        "slack-webhook",
        "https://hooks.slack.com/services/T%s/B%s/%s" % (g.s(8, UPPER_DIGITS), g.s(10, UPPER_DIGITS), g.s(24)),
        "SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T%s/B%s/%s"
        % (g.s(10, UPPER_DIGITS), g.s(11, UPPER_DIGITS), g.s(24)),
    )
    for p in ("sk" + "_live_", "rk" + "_live_", "sk" + "_test_"):
        add("stripe", p + g.s(24), "STRIPE_KEY=%s%s" % (p, g.s(99)))
    add("stripe", "whsec_" + g.s(32))
    add("google", "AI" + "za" + g.s(35, B64URL), '"apiKey": "AI' + "za" + g.s(35, B64URL) + '"')
    add("openai", sk + "-" + g.s(48), sk + "-proj-" + g.s(124, B64URL), sk + "-svcacct-" + g.s(100, B64URL),
        sk + "-admin-" + g.s(100, B64URL), sk + "-" + g.s(20) + "T3Blbk" + "FJ" + g.s(20))
    add("anthropic", sk + "-ant-api03-" + g.s(93, B64URL) + "AA", sk + "-ant-admin01-" + g.s(93, B64URL) + "AA")
    for _ in range(2):
        j = g.jwt()
        add(
            "jwt",
            j,
            "Authorization: Bearer " + j,
            "https://app.example.com/callback#access_token=" + j + "&token_type=bearer",
            '{"id_token": "%s"}' % j,
            "https://app.example.com/sso?jwt=" + j,
        )
    pw = g.password(16, URL_PASSWORD_CHARS)
    for url in ("postgres://app:%s@db.prod:5432/app", "mongodb+srv://svc:%s@cluster0.ab1cd.mongodb.net/db?retryWrites=true",
                "redis://:%s@cache.internal:6379/0", "amqp://worker:%s@mq/vhost", "https://bot:%s@github.com/org/repo.git",
                "mysql://root:%s@10.0.0.5:3306", "ftp://deploy:%s@files.example.org/", "rediss://default:%s@r.upstash.io:6379",
                "smtp://mailer:%s@smtp.example.com:587", "jdbc:postgresql://db:5432/app?user=app&password=%s"):
        add("url-password" if "password=" not in url else "password", url % pw)
    add("url-password", "https://x-access-token:%s@github.com/o/r" % g.s(40, HEX))
    P = g.password
    def R(n=32):
        return g.s(n, ALNUM)
    for form in ("DB_PASSWORD=%s", "export DB_PASSWORD=%s", "export DB_PASSWORD='%s'", "db_password: %s",
                 "  password: \"%s\"", '{"password":"%s"}', "password = \"%s\"", "os.environ[\"DB_PASSWORD\"] = \"%s\"",
                 "mysql -u root -p%s -h db", "mysql --password=%s", "PGPASSWORD='%s' psql", "--password=%s",
                 "MYSQL_ROOT_PASSWORD=%s", "ConnectionStrings: Server=db;User Id=sa;Password=%s;",
                 "spring.datasource.password=%s", "redis-cli -a %s ping", "sshpass -p '%s' ssh deploy@host"):
        add("password", form % P())
    add("password", "curl -u admin:%s https://ci.example.com/api" % P(),
        "curl --user deploy:%s https://registry.example.com/v2/" % P())
    for form in ("SECRET=%s", "client_secret = \"%s\"", "const apiKey = \"%s\";", "let api_key = '%s'",
                 "API_KEY=%s", "apikey: %s", "\"access_key\": \"%s\"", "auth_token: %s", "X-Api-Key: %s",
                 "x-api-key: %s", "os.environ[\"SERVICE_TOKEN\"] = \"%s\"", "[default]\ntoken = \"%s\"",
                 "token=\"%s\"", "-H 'X-Auth-Token: %s'", "private_key = \"%s\"", "APP_SECRET_KEY: '%s'",
                 "headers['Authorization'] = 'Token %s'", "Authorization: Basic %s"):
        kind = "basic-auth" if "Basic" in form else "bearer" if "'Token" in form else "assigned-secret"
        add(kind, form % R())
    add("password", "<password>%s</password>" % P(), "machine api.example.com login bot password " + P(),
        "The password is " + P(), "passwd " + P())
    add("assigned-secret", "token " + R(40), "x-api-key " + R())
    add("aws-secret", "secret_access_key " + R(40))
    add("assigned-secret", "env:\n  - name: DB_PASSWORD\n    value: \"%s\"" % P(),
        '{"name": "STRIPE_API_KEY", "value": "%s"}' % R())
    add("basic-auth", "Authorization: Basic " + __import__("base64").b64encode(("admin:" + P()).encode()).decode())
    add("bearer", "Authorization: Bearer " + R(40), "authorization: bearer " + R(40))
    return out


def _wrap(g, text):
    """The same text as an agent might paste it: in a fence, quoted, encoded, among unicode."""
    yield "fence", "```\n%s\n```" % text
    yield "fence-lang", "```bash\n%s\n```" % text
    yield "quoted", '"%s"' % text.replace('"', '\\"')
    yield "unicode", "\u00e9t\u00e9 \u2014 %s \u2192 \u2705" % text
    yield "crlf", "note:\r\n%s\r\n" % text.replace("\n", "\r\n")
    yield "nbsp", "\u00a0%s\u00a0" % text
    yield "fullwidth", "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _zero_width(g, text):
    """A zero-width character inside the secret's body (after its first 12 characters)."""
    at = min(12 + g.r.randrange(4), len(text) - 2)
    return text[:at] + g.r.choice([ZW, "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]) + text[at:]


def hostile_credentials(seed=4019):
    g = _Gen(seed)
    plain = _forms(g)
    out = [(k, t, "plain") for k, t in plain]
    for i, (k, t) in enumerate(plain):
        for how, w in _wrap(g, t):
            out.append((k, w, how))
        if "\n" not in t:
            out.append((k, _zero_width(g, t), "zero-width"))
        if i % 3 == 0 and "://" not in t:
            out.append((k, quote(t, safe=""), "url-encoded"))
    return out


def hostile_near_misses(seed=5019):
    g = _Gen(seed)
    gh = "g" + "h"
    sk = "s" + "k"
    sha1, sha256, sha512 = g.s(40, HEX), g.s(64, HEX), g.s(128, HEX)
    def uuid():
        return "%s-%s-4%s-a%s-%s" % (g.s(8, HEX), g.s(4, HEX), g.s(3, HEX), g.s(3, HEX), g.s(12, HEX))
    b64 = __import__("base64").b64encode(b"The quick brown fox jumps over the lazy dog, twice over.").decode()
    lines = [
        "HEAD is now at %s Merge pull request #1234 from acme/fix-login" % sha1[:7],
        "commit %s (HEAD -> main, origin/main)" % sha1,
        "git revert --no-edit %s" % sha1,
        "git log %s..%s --oneline" % (sha1[:12], g.s(12, HEX)),
        "Merge: %s %s" % (g.s(7, HEX), g.s(7, HEX)),
        "Change-Id: I%s" % g.s(40, HEX),
        "uuid: " + uuid(),
        "X-Request-Id: " + uuid(),
        "correlation_id=%s" % uuid(),
        "UUID(\"%s\")" % uuid(),
        "%s  dist/app.tar.gz" % sha256,
        "SHA512 (kgd.tar.gz) = %s" % sha512,
        "md5sum: %s" % g.s(32, HEX),
        "checksum: sha256:%s" % sha256,
        "FROM python:3.11-slim@sha256:%s" % sha256,
        "docker pull ghcr.io/acme/web@sha256:%s" % sha256,
        "Digest: sha256:%s" % sha256,
        "\"integrity\": \"sha512-%s==\"," % g.s(86, B64),
        "resolved \"https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#%s\"" % g.s(40, HEX),
        "The payload is base64: %s" % b64,
        "echo %s | base64 -d" % b64,
        "A JWT is three base64url parts: header.payload.signature (eyJ... is '{\"' encoded).",
        "JWTs look like eyJhbGciOi...; never log them.",
        "Bearer tokens go in the Authorization header: `Authorization: Bearer <token>`.",
        "export GITHUB_TOKEN=<your-token>",
        "export OPENAI_API_KEY=${API_KEY}",
        "export GH_TOKEN=$GITHUB_TOKEN",
        "api_key = os.environ[\"OPENAI_API_KEY\"]",
        "OPENAI_API_KEY=" + sk + "-...",
        "GITHUB_TOKEN=" + gh + "p_xxxxxxxx",
        "aws_access_key_id = AK" + "IAIOSFODNN7EXAMPLE",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
        "password: changeme",
        "token = None",
        "api_key=os.getenv(\"X\")",
        "api_key = os.getenv(\"STRIPE_API_KEY\", \"\")",
        "secret = settings.SECRET_KEY",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "password: {{ vault_db_password }}",
        "DB_PASSWORD=",
        "password: null",
        "token: \"\"",
        "client_secret: REPLACE_ME",
        "API_KEY=your_api_key_here",
        "STRIPE_SECRET_KEY=" + sk + "_test_...",
        "src/auth/token_refresh.py",
        "/var/lib/postgresql/data/pg_hba.conf",
        "~/.config/gcloud/application_default_credentials.json",
        "C:\\Program Files\\Git\\usr\\bin\\ssh.exe",
        "https://github.com/acme/kgd/blob/%s/kg/secrets.py#L120" % sha1,
        "https://example.com/search?q=token&page=2",
        "https://docs.python.org/3/library/secrets.html#secrets.token_urlsafe",
        "http://localhost:8080/api/graph?project_path=/work/main",
        "ssh deploy@10.0.4.12 -p 2222",
        "ssh -i ~/.ssh/id_ed25519 ubuntu@ec2-3-91-12-4.compute-1.amazonaws.com",
        "git@github.com:acme/kgd.git",
        "git remote add origin git@gitlab.com:acme/infra.git",
        "https://github.com/acme/kgd.git",
        "mailto:security@example.com",
        "Contact jane.doe+kgd@example.co.uk about the rotation.",
        "func (c *Client) Token() (string, error) { return c.token, nil }",
        "token, err := auth.NewToken(ctx, cfg)",
        "const token = await getToken({ audience: 'api' });",
        "if secret is None: raise ValueError('SECRET_KEY not set')",
        "self.api_key = api_key or os.environ.get(\"ANTHROPIC_API_KEY\")",
        "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
        "accessToken: string | undefined;",
        "export const AUTH_TOKEN_HEADER = 'X-Auth-Token';",
        "def verify_password(plain_password: str, hashed_password: str) -> bool:",
        "token_type: Literal['bearer'] = 'bearer'",
        "2026-12-01T14:02:11.123Z INFO auth: token refreshed for user_id=4821 expires_in=3600",
        "2026-12-01 14:02:11,123 WARNING [worker-3] retrying job 9f1c2e7a after 503",
        "E1201 14:02:11.123456   12345 reflector.go:138] failed to list *v1.Secret: forbidden",
        "kgd 0.9.3 (python 3.9.18, sqlite 3.40.1)",
        "node v20.11.1, npm 10.2.4, typescript@5.4.5",
        "color: #1e293b; background: #f8fafc; border-color: #e2e8f0aa;",
        "--primary: rgb(59 130 246 / 0.5);",
        "handleAuthenticationTokenRefreshRequestWithRetryPolicy",
        "AbstractSingletonProxyFactoryBeanConfigurationManager",
        "tokenRefreshIntervalMs = 300000",
        "password_reset_token_ttl_seconds: 900",
        "secret_name: prod/billing/stripe",
        "secretRef: stripe-keys",
        "token_endpoint: https://oauth2.googleapis.com/token",
        "auth: { type: 'oauth2', flow: 'pkce' }",
        "api_key_header_name = \"X-Api-Key\"",
        "X-Api-Key: <redacted>",
        "Authorization: Basic <base64 of user:pass>",
        "Authorization: Bearer ${TOKEN}",
        "curl -u $USER:$PASS https://ci.example.com/api",
        "curl -u \"$CI_USER:$CI_TOKEN\" https://ci.example.com",
        "mysql -u root -p -h db.internal",
        "mysql -uroot -p$MYSQL_ROOT_PASSWORD",
        "psql \"postgresql://app@db:5432/app?sslmode=require\"",
        "redis://cache.internal:6379/0",
        "mongodb://mongo-0.mongo,mongo-1.mongo/?replicaSet=rs0",
        "amqp://mq.internal:5672/%2F",
        "https://user@github.com/acme/kgd.git",
        "ssh://git@github.com/acme/kgd.git",
        "postgres://app:@db/app",
        "redis://:@cache:6379",
        "The secret sauce is caching the token per tenant.",
        "Rotate secrets quarterly: tokens, passwords, API keys.",
        "We store the API key in AWS Secrets Manager, not in .env.",
        "i18n keys like auth.password.tooShort and auth.token.expired",
        "test_password_reset_sends_email PASSED [ 42%]",
        "pytest -k 'token and not slow' -x",
        "EXPIRES_AT=2026-12-31T23:59:59Z",
        "k8s: kubectl get secret db-creds -o jsonpath='{.data.password}' | base64 -d",
        "The tokenizer splits 'antidisestablishmentarianism' into 6 tokens.",
        "Session cookie: __Host-session (HttpOnly; Secure; SameSite=Lax)",
        "sk-learn is a typo of scikit-learn in requirements.txt",
        "ghp_ tokens are classic PATs; github_pat_ are fine-grained.",
        "Slack tokens start with xoxb- (bot) or xoxp- (user).",
        "The ids look like AKIA followed by 16 characters.",
        "version: 3.11.7-alpine3.19",
        "id: 01HF8ZJ3K9Q4T7M2B6N5R8W1XC",
        "ETag: W/\"%s\"" % g.s(32, HEX),
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ%s user@laptop" % g.s(60, B64),
        "SHA256:%s (ED25519)" % g.s(43, B64).rstrip("+/"),
        "password_policy: min 12 chars, 1 digit",
        "token_budget: 120000",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-creds",
        "-----BEGIN CERTIFICATE-----\nMIID%s\n-----END CERTIFICATE-----" % g.s(60, B64),
        "AWS_REGION=eu-west-1 AWS_PROFILE=prod",
        "arn:aws:iam::123456789012:role/deploy",
        "\u200bzero width in prose is fine\u200b",
        "caf\u00e9 r\u00e9sum\u00e9 na\u00efve \u2014 \u00bfqu\u00e9? \u2714",
        "`sha512-%s`" % g.s(86, B64),
        # the command-line and header kinds' near misses
        "mkdir -p build/dist && cp -a assets build/",
        "ssh -p 2222 deploy@bastion.example.com",
        "git push -u origin feature/token-refresh",
        "docker run -u 1000:1000 -p 8080:8080 acme/api",
        "mysql -u app -p app_production < dump.sql",
        "redis-cli -h cache -p 6379 info",
        "redis-cli -a $REDIS_PASSWORD ping",
        "curl -u admin https://ci.example.com/api (prompts for the password)",
        "curl -fsSL -u \"${NEXUS_USER}:${NEXUS_PASS}\" https://nexus/repo",
        "Basic authentication is disabled; use Basic auth only behind the VPN.",
        "Basic usage: kgd serve --port 7777",
        "The basic flow: Authorization header, then a token exchange.",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "Authorization: Token <token>",
        "See hooks.slack.com/services/... for the webhook (kept in Vault).",
        "SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "STRIPE_WEBHOOK_SECRET=whsec_...",
        "sk_test_ keys are fine in CI fixtures? No: they still read test data.",
        "tar -xzpf release.tar.gz -C /opt/kgd",
        "python -m pip install -U pip setuptools wheel",
        "headers['Authorization'] = f'Token {api_token}'",
        "os.environ[\"DB_PASSWORD\"] = getpass.getpass()",
        "pg_dump -U postgres -h localhost -p 5432 appdb",
        # code and config that name a secret without holding one
        "env:\n  - name: LOG_LEVEL\n    value: \"%s\"" % g.s(32, ALNUM),
        "  - name: API_TOKEN\n    valueFrom:\n      secretKeyRef: {name: api, key: token}",
        '{"name": "DB_PASSWORD", "valueFrom": "arn:aws:ssm:eu-west-1:123456789012:parameter/db"}',
        '{"name": "API_KEY", "value": "${API_KEY}"}',
        'password = hashlib.sha256(salt + pw).hexdigest()',
        'self.password = password',
        'token_endpoint_auth_method: client_secret_basic',
        'secretName: my-tls-secret',
        'password = bcrypt.hash(raw, 12)',
        'token = jwt.encode(payload, key, algorithm="HS256")',
        'token = secrets.token_urlsafe(32)',
        'api_key = cfg.get("api_key")',
        'const token = req.headers.authorization?.split(" ")[1];',
        'auth = HTTPBasicAuth(user, password)',
        "password=os.environ.get('DB_PASS','')",
        'export PGPASSWORD=$(aws ssm get-parameter --name /prod/db --with-decryption '
        '--query Parameter.Value --output text)',
        'DATABASE_URL=postgres://app:$DB_PASS@db:5432/app',
        'mysql -uroot -p"$MYSQL_PWD" app',
        'mysql -u root -ppassword',
        'The token is base64url(header) + "." + base64url(payload)',
        'passwordless login via WebAuthn (passkeys) shipped in v2.3.0',
        'token_expires_at=2026-12-01T10:00:00Z',
        'GITHUB_TOKEN: ${{ github.token }}',
        'secret_key_ref: projects/123456789012/secrets/stripe/versions/latest',
        '"password": "{{ .Values.db.password }}"',
        'password: !vault |',
        'token = "Bearer " + access_token',
        'auth_header = f"Bearer {self._token}"',
        'apikey=process.env.APIKEY',
        'access_key = boto3.Session().get_credentials().access_key',
        'private_key_path: ~/.ssh/id_rsa',
        'private_key = open("key.pem").read()',
        'password_regex = r"^(?=.*[A-Z])(?=.*\\d).{12,}$"',
        'token_pattern = r"[A-Za-z0-9_]{36}"',
        'Basic realm="Restricted"',
        'curl -u "${USER}:${TOKEN}" https://example.com',
        'curl -u user:password https://httpbin.org/basic-auth/user/password',
        'sshpass -p "$SSH_PASS" ssh host',
        'redis-cli -a "$(cat /run/secrets/redis)" ping',
        'authorization: Bearer {{token}}',
        'Authorization: Token token="abc", nonce="def"',
        'the password is stored as argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG',
        'pwd=/home/dev/src/kgd',
        'PWD=/Users/jane/work',
        'cd $(pwd)/build && make -j8',
        'secret-santa-2026.md',
        'auth0|5f8a9b2c3d4e5f6a7b8c9d0e',
        'auth_provider_x509_cert_url: https://www.googleapis.com/oauth2/v1/certs',
        'token_uri: https://oauth2.googleapis.com/token',
        '"client_id": "1234567890-abcdefghijklmnopqrstuvwxyz012345.apps.googleusercontent.com"',
        'secret: ${SECRET:-default}',
        'api_key: "{{ api_key }}"',
        'authToken := os.Getenv("AUTH_TOKEN")',
        'tokenizer.encode("hello world")',
        'passphrase: ""',
        'SECRET_KEY_BASE=$(rails secret)',
        'git config --global credential.helper store',
        'const accessKeyId = process.env.AWS_ACCESS_KEY_ID!;',
        'ssh-keygen -t ed25519 -C "dev@example.com" -f ~/.ssh/id_ed25519',
        'openssl rand -base64 32 > secret.key',
        'kubectl create secret generic db --from-literal=password="$DB_PASSWORD"',
        'password_changed_at: 2026-11-30T09:12:44.120Z',
        'token_ids = [101, 2023, 2003, 1037, 3231, 102]',
        'docker login -u _json_key -p "$(cat key.json)" gcr.io',
        'npm config set //registry.npmjs.org/:_authToken=${NPM_TOKEN}',
    ]
    return lines
