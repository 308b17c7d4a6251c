"""The anchors kgd's secrets gate is measured against (contract section 10, "Calibration"):
detect-secrets (pip) and gitleaks (a binary on PATH), run on the same lines, as a user runs them.

Each line is written to its own file, named with the extension its content suggests (.env,
.yaml, .json, .tf, .py, .sh, .md), so each tool applies the rules it has for that kind of file;
a line counts as refused when the tool reports anything in its file. A tool that cannot be run
answers None ("unavailable" in the table), never a guess.

    run_all(texts) -> {"detect-secrets": [bool] or None, "gitleaks": [bool] or None}
"""

import json
import os
import shutil
import subprocess
import tempfile


def _ext(text):
    t = text.lstrip()
    if "resource " in t or "variable " in t or t.startswith(("password ", "master_password", "admin_password")) \
            or ("  " in text and "= \"" in text and text.startswith("  ")):
        return ".tf"
    if t.startswith(("{", "\"")):
        return ".json"
    if t.startswith(("export ", "docker ", "mysql", "psql", "PGPASSWORD", "curl ", "kubectl ", "helm ", "redis-cli",
                     "sshpass", "mongo", "ssh ", "az ", "openssl", "keytool", "ansible", "MYSQL_PWD", "wp ", "htpasswd",
                     "smbclient", "./", "pg_dump", "gh ", "aws ", "vault ", "npm ", "python ", "cat ")):
        return ".sh"
    first = t.split("=", 1)[0]
    if "=" in t and first.replace("_", "").isalnum() and first.isupper():
        return ".env"
    if any(k in t for k in ("(", "const ", "let ", " = \"", " = '", ";")):
        return ".py"
    if ": " in t or t.endswith(":"):
        return ".yaml"
    return ".md"


def _write(texts, folder):
    paths = []
    for i, text in enumerate(texts):
        path = os.path.join(folder, "line%05d%s" % (i, _ext(text)))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        paths.append(path)
    return paths


def detect_secrets(texts):
    """detect-secrets with its default plugins and filters (what `detect-secrets scan` runs)."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    folder = tempfile.mkdtemp(prefix="kgd-anchor-ds-")
    try:
        paths = _write(texts, folder)
        with default_settings():
            found = SecretsCollection()
            found.scan_files(*paths)
            hit = {os.path.abspath(f) for f, _ in found}
        return [os.path.abspath(p) in hit for p in paths]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def gitleaks(texts):
    """gitleaks with its default rules on the folder (`gitleaks detect --no-git`, v8)."""
    exe = shutil.which("gitleaks")
    if exe is None:
        return None
    folder = tempfile.mkdtemp(prefix="kgd-anchor-gl-")
    try:
        paths = _write(texts, folder)
        report = os.path.join(folder, "report.json")
        subprocess.run([exe, "detect", "--no-git", "--source", folder, "--report-format", "json",
                        "--report-path", report, "--exit-code", "0"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        with open(report, encoding="utf-8") as f:
            hit = {os.path.basename(x["File"]) for x in json.load(f) or ()}
        return [os.path.basename(p) in hit for p in paths]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_all(texts):
    return {"detect-secrets": detect_secrets(texts), "gitleaks": gitleaks(texts)}
