"""The corpora of the secrets gate (contract section 10), built at run time.

No credential-shaped literal lives in this file: every prefix is assembled by concatenation
("gh" + "p_") and every body is drawn from a seeded random generator, so hosting providers'
push protection and kgd's own check never see one in the repository.

- credentials(seed): (kind, text) pairs, every kind in several real-looking contexts.
- near_misses(seed): lines of ordinary engineering text that must never be refused.
- adversarial(size): name -> a hostile text of `size` characters (near-miss prefixes, long runs
  of base64, many '://' and '@', dense assignments) for the linear-time bound.
"""

import base64
import json
import random
import string

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
UPPER_DIGITS = string.ascii_uppercase + string.digits
PASSWORD_CHARS = ALNUM + "!#&*+-=?@^_~."
URL_PASSWORD_CHARS = ALNUM + "!*+-._~"  # what a URL's userinfo holds unencoded


def _b64url(raw):
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class _Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def s(self, n, alphabet=ALNUM):
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def password(self, n=14, alphabet=PASSWORD_CHARS):
        # A password mixes classes; real ones do, and a single-class word is not flagged on purpose.
        body = [self.r.choice(string.ascii_lowercase), self.r.choice(string.ascii_uppercase),
                self.r.choice(string.digits)] + [self.r.choice(alphabet) for _ in range(n - 3)]
        self.r.shuffle(body)
        return "".join(body)

    def pem(self, kind):
        lines = "\n".join(self.s(64, B64) for _ in range(4))
        return "-----BEGIN %sPRIV" "ATE KEY-----\n%s\n%s==\n-----END %sPRIV" "ATE KEY-----" % (
            kind,
            lines,
            self.s(20, B64),
            kind,
        )

    def jwt(self):
        head = _b64url(json.dumps({"alg": self.r.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}).encode())
        claims = {"sub": self.s(12), "iat": self.r.randrange(1600000000, 1800000000), "scope": "repo read"}
        return "%s.%s.%s" % (head, _b64url(json.dumps(claims).encode()), self.s(43, B64URL))


def credentials(seed=1019):
    """Every kind of contract section 10, each in several contexts an agent might paste."""
    g = _Gen(seed)
    gh = "g" + "h"
    out = []

    def add(kind, *texts):
        out.extend((kind, t) for t in texts)

    for kt in ("", "RSA ", "EC ", "OPENSSH ", "DSA ", "ENCRYPTED "):
        add("private-key", g.pem(kt), "deploy key below:\n" + g.pem(kt))
    add(
        "private-key",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n%s\n-----END PGP PRIVATE KEY BLOCK-----"
        % g.s(64, B64),
        "KEY=\"-----BEGIN RSA PRIV" "ATE KEY-----\\n%s\\n-----END RSA PRIV" "ATE KEY-----\"" % g.s(64, B64),
    )
    for p in ("AK" + "IA", "AS" + "IA"):
        key = p + g.s(16, UPPER_DIGITS)
        add("aws-access-key-id", key, "aws_access_key_id = " + key, "export AWS_ACCESS_KEY_ID=" + key,
            '{"AccessKeyId": "%s", "Expiration": "2026-12-01T10:00:00Z"}' % key)
    for _ in range(2):
        sk = g.s(40, B64)
        add("aws-secret", "aws_secret_access_key = " + sk, "AWS_SECRET_ACCESS_KEY=" + sk,
            '"SecretAccessKey": "%s"' % sk, "aws secret: " + sk)
    for p in ("p_", "o_", "u_", "s_", "r_"):
        tok = gh + p + g.s(36)
        add("github", tok, "git clone https://x-access-token:%s@github.com/org/repo" % tok,
            "curl -H 'Authorization: token %s' https://api.github.com/user" % tok, "GITHUB_TOKEN=" + tok)
    pat = "github" + "_pat_" + g.s(22) + "_" + g.s(59)
    add("github", pat, "fine-grained PAT for the release bot: " + pat)
    add("gitlab", "gl" + "pat-" + g.s(20, B64URL), "GITLAB_TOKEN=gl" + "pat-" + g.s(20, B64URL))
    for t in ("b", "p", "a"):
        tok = "xo" + "x" + t + "-" + g.s(11, string.digits) + "-" + g.s(13, string.digits) + "-" + g.s(24)
        add("slack", tok, "SLACK_BOT_TOKEN=" + tok)
    for p in ("sk" + "_live_", "rk" + "_live_"):
        add("stripe", p + g.s(24), "stripe.api_key = '%s%s'" % (p, g.s(99)))
    add(
        "google",
        "AI" + "za" + g.s(35, B64URL),
        "https://maps.googleapis.com/maps/api/geocode/json?key=AI" + "za" + g.s(35, B64URL),
    )
    add("openai", "s" + "k-" + g.s(48), "OPENAI_API_KEY=s" + "k-proj-" + g.s(156, B64URL),
        "openai.api_key = \"s" + "k-svcacct-" + g.s(64, B64URL) + "\"")
    add("anthropic", "s" + "k-ant-api03-" + g.s(93, B64URL) + "AA",
        "ANTHROPIC_API_KEY=s" + "k-ant-admin01-" + g.s(93, B64URL) + "AA")
    add("npm", "np" + "m_" + g.s(36), "//registry.npmjs.org/:_authToken=np" + "m_" + g.s(36))
    add("pypi", "py" + "pi-AgEIcHlwaS5vcmc" + g.s(70, B64URL))
    for _ in range(3):
        add("jwt", g.jwt())
    add("jwt", "Cookie: session=" + g.jwt() + "; Path=/", "id_token=" + g.jwt())
    for scheme in ("postgres", "postgresql", "mysql", "redis", "amqp", "mongodb+srv", "https"):
        add(
            "url-password",
            "%s://app_%s:%s@db.internal:5432/prod" % (scheme, g.s(4), g.password(14, URL_PASSWORD_CHARS)),
        )
    add("url-password", "DATABASE_URL=postgres://deploy:%s@10.0.3.7/app" % g.password(14, URL_PASSWORD_CHARS),
        "redis://:%s@cache:6379/0" % g.password(20, URL_PASSWORD_CHARS),
        "https://oauth2:%s@gitlab.example.com/org/repo.git" % g.s(20, ALNUM),
        "amqp://svc:p%%40ss%s@mq:5672/" % g.s(10, ALNUM))
    add("bearer", "Authorization: Bearer " + g.s(40, ALNUM + "-._~"),
        "curl -H \"Authorization: Bearer %s\" https://api.internal/v1/jobs" % g.s(64, B64URL))
    for form in ("DB_PASSWORD=%s", "password: %s", '"password": "%s"', "--password %s", "PGPASSWORD=%s psql -h db",
                 "db.password = '%s'", "passwd=%s", "mysql --password=%s", "admin_pass: %s", "passphrase = \"%s\""):
        add("password", form % g.password())
    for form in ("api_key = %s", "client_secret: %s", "SECRET_KEY=%s", '"token": "%s"', "--api-token %s",
                 "auth_token := \"%s\"", "apiKey: '%s'", "ACCESS_KEY=%s", "private_key: %s", "credentials=%s",
                 "webhook_secret => '%s'", "X_AUTH=%s"):
        add("assigned-secret", form % g.s(32, ALNUM + "-_"))
    add("assigned-secret", "api_key=" + g.s(32, HEX), "export SENTRY_AUTH_TOKEN=" + g.s(64, HEX))
    return out


def near_misses(seed=2019):
    """Ordinary engineering text: notes, hashes, UUIDs, placeholders, code. None is a secret."""
    g = _Gen(seed)
    gh = "g" + "h"
    sha1, sha256 = g.s(40, HEX), g.s(64, HEX)
    uuid = "%s-%s-4%s-a%s-%s" % (g.s(8, HEX), g.s(4, HEX), g.s(3, HEX), g.s(3, HEX), g.s(12, HEX))
    lines = [
        # commits, checksums, digests, ids
        "commit " + sha1,
        "Fixed in %s (merge of #412); bisected with git bisect run make test." % sha1[:12],
        "git cherry-pick %s && git push origin HEAD:release/2.4" % sha1,
        "sha256:" + sha256,
        "image: ghcr.io/acme/api@sha256:" + sha256,
        "sha256sum dist/kgd.pyz -> %s" % sha256,
        "md5: " + g.s(32, HEX),
        "etag: \"%s\"" % g.s(40, HEX),
        "\"integrity\": \"sha512-%s==\"" % g.s(86, B64),
        "request id %s failed with 503 after 3 retries" % uuid,
        "session_id: " + uuid,
        "token_id: " + uuid,
        "api_key_id: " + g.s(20, ALNUM),
        "token_hash: " + sha256,
        "secret_sha256 = '%s'" % sha256,
        "client_id=0oa%s" % g.s(17, ALNUM),
        "trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
        # placeholders
        "export OPENAI_API_KEY=s" + "k-...",
        "export OPENAI_API_KEY=s" + "k-your-key-here",
        "GITHUB_TOKEN=" + gh + "p_" + "x" * 36,
        "GITHUB_TOKEN=" + gh + "p_" + "X" * 36,
        "api_key: YOUR_API_KEY",
        "password: ${DB_PASSWORD}",
        "token: <token>",
        "Authorization: Bearer $TOKEN",
        "Authorization: Bearer <your-token-here>",
        "curl -H \"Authorization: Bearer ${GITHUB_TOKEN}\" https://api.github.com/user",
        "postgres://user:password@localhost:5432/app",
        "postgres://app:${PGPASSWORD}@db/app",
        "redis://:****@cache:6379",
        "mysql://root:changeme@127.0.0.1/test",
        "amqp://guest:guest@localhost:5672/",
        "password=changeme",
        "password: ********",
        "secret: xxxxxxxxxxxxxxxx",
        "aws_access_key_id = AK" + "IAIOSFODNN7EXAMPLE",
        "xo" + "xb-your-bot-token",
        "gl" + "pat-xxxxxxxxxxxxxxxxxxxx",
        "AI" + "za...",
        "The file starts with -----BEGIN OPENSSH PRIV" "ATE KEY----- (do not paste the rest).",
        # where secrets live: names, paths, references
        "Set GITHUB_TOKEN and AWS_SECRET_ACCESS_KEY as repository secrets in CI.",
        "The Stripe key is in .env as STRIPE_SECRET_KEY; never commit .env.",
        "client_secret comes from Vault at secret/data/billing (role billing-api).",
        "password_file: /run/secrets/db_password",
        "token_file = ~/.config/gh/hosts.yml",
        "secret: arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf",
        "api_key: op://Engineering/OpenAI/credential",
        "keys live in ~/.aws/credentials and ~/.ssh/id_ed25519 (mode 0600)",
        "valueFrom: {secretKeyRef: {name: db-credentials, key: password}}",
        "password_min_length: 12",
        "max_tokens: 4096",
        "tokens_per_second: 85.3",
        "token_count = len(tokens)",
        "tokenizer: cl100k_base",
        "auth: oauth2",
        "author: Jane Doe <jane@example.com>",
        "compass_heading=N45E12 bypass=on passport_number=unknown",
        "next_page_token=" + g.s(32, B64URL),
        "auth_url: https://login.example.com/oauth2/authorize",
        # code
        "token = os.environ['GITHUB_TOKEN']",
        "password = getpass.getpass('DB password: ')",
        "const apiKey = process.env.OPENAI_API_KEY;",
        "if (!token) throw new Error('missing token: set KG_TOKEN');",
        "def refresh_token(self, token: str) -> str:",
        "headers = {'Authorization': f'Bearer {token}'}",
        "SECRET_KEY = get_random_secret_key()",
        "secret_key_base: <%= ENV['SECRET_KEY_BASE'] %>",
        "password=$(cat /run/secrets/db_password)",
        "api_key: !ENV ${API_KEY}",
        "access_key_id: ${AWS_ACCESS_KEY_ID}",
        "authToken = getAccessTokenFromEnvironment()",
        "password = request.form.get('password')",
        "for token in tokenize(source): yield token.kind",
        "assert secret_value == expected_secret_value",
        "x-api-key header is required on every call",
        "docker login --password-stdin ghcr.io < token.txt",
        "python==3.11.7 numpy>=1.26 pytest~=8.0",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%s dev@laptop" % g.s(43, B64),
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA%s\n-----END PUBLIC KEY-----"
        % g.s(40, B64),
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        # prose and paths
        "The password reset flow sends a signed link valid for 30 minutes.",
        "Rotate the GitHub token every 90 days; it is stored in 1Password under 'ci-bot'.",
        "JWTs are verified with the RS256 public key from the JWKS endpoint; tokens expire after 15 min.",
        "The auth middleware rejects requests without a session cookie (see kg/guard.py:41).",
        "CSRF token is rotated per session; the secret lives in the KMS keyring app-prod.",
        "Use https://git.example.com/org/repo.git or git@github.com:org/repo.git; both work.",
        "ssh://git@host.example.com:2222/org/repo.git needs the deploy key on the runner.",
        "C:\\Users\\dev\\AppData\\Roaming\\kgd\\user.json is the Windows path.",
        "The sk-learn pipeline and the task-runner both read config/settings.toml.",
        "Deployment 2026-12-01T14:05:00Z took 3m12s; p99 latency 184 ms.",
        "email ops@example.com or page #oncall; runbook at docs/runbooks/db-failover.md",
    ]
    return lines


def adversarial(size=1 << 20, seed=3019):
    """Hostile texts of `size` characters for the linear-time bound."""
    g = _Gen(seed)

    def fill(unit):
        return (unit * (size // len(unit) + 1))[:size]

    gh = "g" + "h"
    return {
        "near-miss prefixes": fill(gh + "p_ gl" + "pat- xo" + "xb- s" + "k-ant- AK" + "IA AI" + "za s" + "k_live_ eyJ "
                                   "-----BEGIN PRIV" "ATE KEY----- npm_ github_pat_ "),
        "glued prefixes": fill(gh + "p_"),
        "base64 run": g.s(size, B64),
        "base64url run of eyJ": fill("eyJ"),
        "JWT-shaped near misses": fill("eyJhYWFh.eyJhYWFh.aaaaaaaaaaaaaaaaaaaa "),
        "many :// and @": fill("://a:b@"),
        "only ://": fill("://"),
        "only @": fill("@"),
        "long user and password runs": fill("://" + "a" * 200 + ":" + "b" * 300 + " "),
        "keyword runs": fill("password secret token api_key auth "),
        "keyword tails": fill("token" + "_" * 40),
        "flags": fill("----------begin --x "),
        "private key headers": fill("-----BEGIN RSA PRIV" "ATE KEY-----"),
        "upper-case run": g.s(size, string.ascii_uppercase),
        "AKIA run": fill("AK" + "IA"),
        "spaces": " " * size,
        "random printable": g.s(size, string.printable),
        "dense assignments": fill("token=$AAAAAA1 "),  # a reference: judged, never refused
        "command flags": fill("mysql -p -p -pa -u a:b -a redis-cli --user "),
        "glued command flag": fill("mysql" + " -p" + "-zq" * 70),  # the next flag: judged, never refused
        "basic storm": fill("Authorization: Basic "),
        "basic run": "basic " + g.s(size - 6, B64),
        "authorization token storm": fill("authorization: token "),
        "slack webhook prefixes": fill("hooks.slack.com/services/T" + "A" * 12 + "/"),
        "percent storm": fill("%4" + "1"),
        "percent-encoded prefixes": fill("%22" + "g" + "hp_" + "%3D"),
        "zero-width storm": fill("\u200b" + "g" + "hp_"),
        "escaped quote storm": fill("\\\"token\\\": \\\""),
        "test keys": fill("s" + "k_test_ r" + "k_test_ whsec_ "),
        "nested quotes": fill("\"'`\"'`password=\"'"),
        "= storm": fill("="),
        "space-separated names": fill("password token secret_access_key passwd is "),
        "xml elements": fill("<password><token><secret>"),
        "putty private lines": fill("Private-Lines: 9\n"),
        "sendgrid and webhook prefixes": fill("S" + "G." + "a" * 22 + "." + " /api/webhooks/" + "1" * 18 + "/"),
        "fullwidth run": fill("\uff53\uff4b-\uff41"),
        "one long line of words": fill("token secret password key auth basic bearer "),
        "distinct assignments": "".join("password=$DECOY_AAAAAAAAABCD%07d " % i for i in range(size // 36 + 1))[:size],
    }
