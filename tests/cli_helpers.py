"""Running kgd's command line in a subprocess, for the tests of the operator commands."""

import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGD = os.path.join(REPO, "kgd.py")


def clean_env(home=None, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KG_", "KGD_", "XDG_", "PYTHON"))}
    if home is not None:
        env["HOME"] = str(home)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_kgd(*args, env=None, stdin=None, home=None, cwd=None, timeout=60):
    """-> (exit code, stdout, stderr, seconds taken). -S: kgd needs nothing from site-packages."""
    e = clean_env(home)
    e.update({k: str(v) for k, v in (env or {}).items()})
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-S", KGD] + [str(a) for a in args], env=e, input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=str(cwd or REPO))
    return r.returncode, r.stdout.decode(), r.stderr.decode(), time.monotonic() - t0
