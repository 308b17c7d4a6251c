"""Running the `git` program: the only place kgd does (contract section 9).

Rules owned here:
- git never waits for a person: no terminal prompt (GIT_TERMINAL_PROMPT=0, ssh in batch mode
  unless the user chose an ssh command), no pager, no editor, stdin closed, its own process group
  (no controlling terminal to ask on); every call has a timeout, after which the whole group is
  killed.
- The caller's GIT_DIR / GIT_WORK_TREE / GIT_INDEX_FILE and the like never leak in: git works on
  the folder it is given. The user's own configuration (credential helpers, ssh keys) is kept:
  a private remote needs it.
- Commits are made as `kgd <kgd@HOST>`, unsigned, whatever the user's configuration says, and
  repository hooks never run.
- A failure is a GitError whose `kind` says what a person can do about it (offline, auth,
  rejected, no_remote, timeout, missing, failed); its message is one line.
"""

import os
import signal
import socket
import subprocess

DEFAULT_TIMEOUT = 60.0
OUTPUT_LIMIT = 2000  # characters of stderr kept in an error

# Variables that would point git at another repository, index or object store than the folder.
_LEAKY = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
          "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
          "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
          "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_CONFIG",
          "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_QUARANTINE_PATH", "GIT_REPLACE_REF_BASE",
          "GIT_TRACE", "GIT_TRACE_PACKET", "GIT_TRACE_PERFORMANCE", "GIT_TRACE_SETUP")

# stderr fragments (LC_ALL=C) -> kind, first match wins.
_KINDS = (
    ("auth", ("authentication failed", "permission denied", "could not read username",
              "could not read password", "access denied", "invalid username or password",
              "host key verification failed", "terminal prompts disabled", "403")),
    ("offline", ("could not resolve host", "could not resolve hostname", "connection refused",
                 "connection timed out", "network is unreachable", "no route to host",
                 "operation timed out", "failed to connect", "connection reset", "unable to access")),
    ("no_remote", ("does not appear to be a git repository", "repository not found",
                   "no such file or directory", "not found", "does not exist")),
    ("rejected", ("[rejected]", "non-fast-forward", "fetch first", "failed to push some refs",
                  "[remote rejected]", "pre-receive hook declined")),
)


class GitError(Exception):
    """git failed; `kind` is one of offline, auth, rejected, no_remote, timeout, missing, failed."""

    def __init__(self, kind, message, returncode=None, stderr=""):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.returncode = returncode
        self.stderr = stderr


def host_name():
    name = socket.gethostname().split(".")[0] or "localhost"
    return "".join(c for c in name if c.isalnum() or c in "-_") or "localhost"


def git_env(base=None):
    """The environment git runs with: the caller's, minus what redirects git, plus no prompts."""
    env = dict(os.environ if base is None else base)
    for name in _LEAKY:
        env.pop(name, None)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat", GIT_EDITOR="true", EDITOR="true",
               VISUAL="true", GIT_MERGE_AUTOEDIT="no", LC_ALL="C", LANGUAGE="C", GIT_OPTIONAL_LOCKS="0")
    if not env.get("GIT_SSH_COMMAND") and not env.get("GIT_SSH"):
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes -o ConnectTimeout=20"
    env.pop("GIT_ASKPASS", None)
    env.pop("SSH_ASKPASS", None)
    return env


def identity_args():
    """-c options every call carries: who commits, unsigned, no hooks, no line-ending rewrites."""
    return ["-c", "user.name=kgd", "-c", "user.email=kgd@%s" % host_name(), "-c", "commit.gpgsign=false",
            "-c", "tag.gpgsign=false", "-c", "core.hooksPath=%s" % os.devnull, "-c", "core.autocrlf=false",
            "-c", "core.safecrlf=false", "-c", "core.quotepath=off", "-c", "advice.detachedHead=false",
            "-c", "init.defaultBranch=main", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
            "-c", "protocol.ext.allow=never", "-c", "credential.interactive=false"]


def classify(stderr):
    low = (stderr or "").lower()
    for kind, needles in _KINDS:
        if any(n in low for n in needles):
            return kind
    return "failed"


def summary(stderr):
    """One line out of git's stderr: the most telling line, clipped."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for prefix in ("fatal:", "error:", "! ", "remote:"):
        for ln in lines:
            if ln.lower().startswith(prefix) or (prefix == "! " and "[rejected]" in ln):
                return ln[:300]
    return (lines[-1] if lines else "no output")[:300]


def run(args, cwd, timeout=DEFAULT_TIMEOUT, check=True, env=None, started=None, nice=0, identity=True, input=None,
        raw=False):
    """Run `git ARGS` in cwd; (returncode, stdout, stderr) as text. check: a non-zero exit is a
    GitError. A missing git program is GitError("missing"); a timeout kills git and its children.
    started(proc) is called once git runs (a caller that may cancel keeps it for `kill`); `nice`
    lowers git's CPU priority (background work must not slow the daemon's requests). identity=False
    leaves out kgd's -c options (to read the user's own name: a read, never a commit). input: bytes
    for git's stdin (`cat-file --batch`); raw: stdout as bytes (file contents, exactly)."""
    argv = ["git"] + (identity_args() if identity else []) + list(args)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=git_env(env),
                                stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError as exc:
        if cwd and not os.path.isdir(cwd):
            raise GitError("failed", "folder %s does not exist" % cwd) from exc
        raise GitError("missing", "git is not installed (kgd runs the `git` program to sync)") from exc
    except OSError as exc:
        raise GitError("failed", "could not run git: %s" % (exc.strerror or exc)) from exc
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        except (OSError, AttributeError):
            pass
    if started is not None:
        started(proc)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise GitError("timeout", "git %s gave no answer within %gs" % (args[0], timeout), None,
                       _text(err)) from None
    out, err = (out or b"") if raw else _text(out), _text(err)
    if check and proc.returncode != 0:
        raise GitError(classify(err), "git %s: %s" % (args[0], summary(err)), proc.returncode,
                       err[-OUTPUT_LIMIT:])
    return proc.returncode, out, err


def output(args, cwd, timeout=DEFAULT_TIMEOUT):
    """stdout of a git call that must succeed, stripped."""
    return run(args, cwd, timeout)[1].strip()


def kill(proc):
    """Stop a running git and whatever it started (a cancelled round, a daemon stopping)."""
    if proc is not None and proc.poll() is None:
        _kill_group(proc)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def _text(data):
    return (data or b"").decode("utf-8", "replace")


def available():
    """True when a git program runs here."""
    try:
        run(["--version"], cwd=None, timeout=10)
        return True
    except GitError:
        return False
