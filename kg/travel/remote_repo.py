"""The sync working tree ROOT/sync/ and its git round with the personal remote (contract section 9).

Rules owned here:
- ROOT/sync/ is a git repository (0700) on branch `main`, pushed to `main` on the remote named
  `origin`; ROOT/sync.json (0600) holds the remote and the last round's outcome.
- Its `.gitattributes` names git's built-in union driver for the JSONL files, so two machines'
  lines are both kept and no per-clone set-up is needed; its `.gitignore` keeps out the temp
  file of a write a crash cut short.
- A round: export, commit what changed, fetch, merge (unrelated histories allowed: the first
  round joins what the remote holds with what this machine has), hand the changed files to the
  pickup, export again and commit, push unless the remote already has our `main`. A push refused
  because the remote moved is retried after another fetch and merge (a few times per round).
  Few git calls (each is a process on a machine serving requests): four when nothing changed.
- A conflict never stops the sync: whatever git leaves is committed as it is (the reader loads
  conflict markers and several versions of a node with the merge rule; the next export writes the
  files back clean).
- A password or token in the remote URL (`https://user:TOKEN@host/...`) is git's to use and
  stays in ROOT/sync.json and the sync repository's own config; everything shown to a person or
  written elsewhere (status, logs, errors, commit messages) carries redact_url() of it.
- ROOT/sync/ deleted while the daemon runs is made again; a `.git` there that is no usable
  repository (garbage HEAD, objects gone) is moved aside to ROOT/sync-broken-<time> and made
  afresh: memory and the remote hold the knowledge, the next round joins them. It is checked
  at the first round and again after any git call failed.
- A merge left half-done by a crash is finished at the next round, and a stale index.lock (this
  daemon holds the storage root, so no other git runs here) is removed when the worker starts.
- A clean stop flushes: export, commit, and push what the remote lacks, all within a few seconds
  (FLUSH_BUDGET, every git call's timeout cut to what is left of it). A push refused because
  another machine pushed since is retried after a fetch and a merge in ROOT/sync/ only: what the
  merge brought is not taken into memory at stop (the store is closing, and reading every graph
  it touches is work no timeout bounds); the next start's first pass reconciles those files with
  memory as it does any folder that moved. Offline, or out of time, nothing more is tried and the
  next start's first round pushes it.
"""

import json
import logging
import os
import re
import time

from ..disk.files import atomic_write, ensure_dir
from ..memory import foreground, git_runner

log = logging.getLogger(__name__)

BRANCH = "main"
REMOTE_REF = "refs/remotes/origin/" + BRANCH
ATTRIBUTES = "*.jsonl merge=union\n"
IGNORE = ".tmp-*\n"  # a write cut short by a crash leaves its temp file: never committed
PUSH_TRIES = 3
NICE = 10  # git runs at a lower CPU priority than the daemon serving requests
GC_EVERY = 10  # rounds between looks at the loose objects (kept in packs, see gc())
GC_AUTO = 1000
LOOSE_MAX_KIB = 32 * 1024  # a big graph's 3 MB file, committed a few dozen times: packed then
CONFIG_NAME = "sync.json"  # written by `kgd sync`: {"remote": URL, "enabled": bool}
STATUS_NAME = "sync-status.json"  # written by the daemon: the last round's outcome
FOLDER_NAME = "sync"
MAX_URL = 4096
FLUSH_BUDGET = 5.0  # seconds a clean stop gives the push of what waits
MIN_CALL = 0.2  # seconds: a flush starts no git call with less time left than this


def config_path(root):
    return os.path.join(root, CONFIG_NAME)


def sync_folder(root):
    return os.path.join(root, FOLDER_NAME)


def read_config(root):
    """ROOT/sync.json as a dict ({} when absent or unreadable)."""
    return _read_json(config_path(root))


def write_config(root, cfg):
    _write_json(config_path(root), cfg)


def read_status(root):
    return _read_json(os.path.join(root, STATUS_NAME))


def write_status(root, status):
    _write_json(os.path.join(root, STATUS_NAME), status)


def _read_json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _write_json(path, obj):
    atomic_write(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode("utf-8"), keep_prev=False)


_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@]*)@")


def redact_url(url):
    """The remote as shown or logged: a password becomes ***, and so does an http(s) user name
    with no password (a token given as the user: https://TOKEN@host/...)."""
    if not isinstance(url, str):
        return url
    m = _USERINFO.match(url)
    if not m:
        return url
    user, colon, _ = m.group(2).partition(":")
    if colon:
        shown = user + ":***"
    else:
        shown = "***" if m.group(1).lower().startswith("http") else user
    return m.group(1) + shown + "@" + url[m.end():]


def scrub(text, url):
    """`text` (a git error, say) with the secret part of `url` replaced by ***."""
    if not isinstance(text, str) or not isinstance(url, str):
        return text
    m = _USERINFO.match(url)
    if m:
        user, colon, password = m.group(2).partition(":")
        for secret in ([password] if colon else []) + ([user] if redact_url(url) != url and not colon else []):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
    return text.replace(url, redact_url(url))


def check_remote(url):
    """The remote URL as given, or ValueError saying why git must not be pointed at it."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the remote must be a git URL or a path")
    if len(url) > MAX_URL or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("the remote is not a usable URL (control characters or over %d characters)" % MAX_URL)
    if url.startswith("-"):
        raise ValueError("the remote %r starts with '-' (git would read it as an option)" % redact_url(url)[:100])
    if url.lower().startswith(("ext::", "fd::")):
        raise ValueError("the remote %r would run a command; give a URL or a path" % redact_url(url)[:100])
    return url


class SyncRepo:
    """Git operations on one sync working tree."""

    def __init__(self, folder, remote, timeout=git_runner.DEFAULT_TIMEOUT):
        self.folder = folder
        self.remote = remote
        self.timeout = timeout
        self._remote_set = None
        self._sound = False  # .git checked since the last git failure (ensure() looks again after one)
        self._has_head = False  # main has a commit (known once seen)
        self.rounds = 0
        self.cancelled = False
        self._proc = None
        self.deadline = None  # time.monotonic() by which a flush's git calls must end (None: no limit)

    def git(self, *args, check=True, timeout=None):
        if self.cancelled:
            raise git_runner.GitError("cancelled", "the daemon is stopping")
        foreground.give_way()  # git starts while no request is being served
        timeout = timeout or self.timeout
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= MIN_CALL:
                raise git_runner.GitError("timeout", "no time left for git %s within the stop's budget" % args[0])
            timeout = min(timeout, left)
        try:
            return git_runner.run(list(args), self.folder, timeout, check=check, started=self._started,
                              nice=NICE)
        except git_runner.GitError:
            self._sound = False  # the repository may be what failed: ensure() checks it again
            raise
        finally:
            self._proc = None
            if self.cancelled:
                raise git_runner.GitError("cancelled", "the daemon is stopping")

    def _started(self, proc):
        self._proc = proc
        if self.cancelled:
            git_runner.kill(proc)

    def cancel(self):
        """Stop the round under way: the git call running now is killed, no further one starts
        (what a killed git leaves, the next round finishes)."""
        self.cancelled = True
        git_runner.kill(self._proc)

    def out(self, *args):
        return self.git(*args)[1].strip()

    # ------------------------------------------------------------ set-up

    def ensure(self):
        """The folder is a repository on `main` with our attributes and `origin` = the remote."""
        ensure_dir(self.folder)
        if os.path.exists(os.path.join(self.folder, ".git")) and not self._sound and self._broken():
            aside = "%s-broken-%d" % (self.folder, int(time.time()))
            os.rename(os.path.join(self.folder, ".git"), aside)
            log.warning("remote sync: %s/.git is damaged; moved to %s and made afresh (memory and the remote "
                        "hold the knowledge)", self.folder, aside)
        if not os.path.exists(os.path.join(self.folder, ".git")):
            self.git("init", "--quiet")
            self.git("symbolic-ref", "HEAD", "refs/heads/" + BRANCH)
            self._remote_set = None  # a fresh repository has no origin yet
            self._has_head = False
        for name, text in ((".gitattributes", ATTRIBUTES), (".gitignore", IGNORE)):
            path = os.path.join(self.folder, name)
            try:
                with open(path, "r", encoding="utf-8") as f:
                    current = f.read()
            except (OSError, ValueError):
                current = None
            if current != text:
                atomic_write(path, text.encode("utf-8"), keep_prev=False)
        if self._remote_set != self.remote and self.remote:
            code, have, _ = self.git("config", "--get", "remote.origin.url", check=False)
            if code != 0:
                self.git("remote", "add", "origin", self.remote)
            elif have.strip() != self.remote:
                self.git("remote", "set-url", "origin", self.remote)
            self._remote_set = self.remote
        self.finish_merge()
        self._sound = True

    def _broken(self):
        """True when .git is no usable repository (its HEAD garbage, its commit's objects gone)."""
        code, _, _ = self.git("rev-parse", "--git-dir", check=False)
        if code != 0:
            return True
        code, out, _ = self.git("rev-parse", "-q", "--verify", "refs/heads/" + BRANCH, check=False)
        if code != 0:
            return False  # no commit yet
        code, _, _ = self.git("cat-file", "-e", out.strip() + "^{tree}", check=False)
        return code != 0

    def clear_stale_lock(self):
        """Remove index.lock left by a git killed with the daemon (call only before any git runs)."""
        lock = os.path.join(self.folder, ".git", "index.lock")
        try:
            os.unlink(lock)
            log.info("removed a stale %s (a git call was interrupted)", lock)
        except OSError:
            pass

    def finish_merge(self):
        """Commit a merge that a crash (or a conflict) left open, markers and all."""
        if os.path.exists(os.path.join(self.folder, ".git", "MERGE_HEAD")):
            self.git("add", "-A")
            self.git("commit", "--quiet", "--no-edit", "--no-verify", "-m",
                     "kgd: merge with %s" % redact_url(self.remote))

    # ------------------------------------------------------------ the steps of a round

    def head(self):
        head = self._ref("HEAD")
        self._has_head = head is not None
        return head

    def commit(self, message=None):
        """Commit everything in the working tree; True when there was something to commit."""
        self.git("add", "-A")
        code, _, _ = self.git("diff", "--cached", "--quiet", check=False)
        if code == 0 and (self._has_head or self.head() is not None):
            return False
        self.git("commit", "--quiet", "--no-verify", "--allow-empty", "-m",
                 message or "kgd: changes from %s" % git_runner.host_name())
        self._has_head = True
        return True

    def fetch(self):
        """Fetch the remote's `main`: (ours, theirs), the commits of our HEAD (normally `main`)
        and of the remote's `main` (None where there is none), read in one call."""
        # --prune: a remote that lost its `main` (emptied, or another URL) leaves no stale
        # origin/main behind to say it already holds ours
        self.git("fetch", "--quiet", "--no-tags", "--prune", "origin")
        try:
            with open(os.path.join(self.folder, ".git", "HEAD"), "r", encoding="utf-8") as f:
                head = f.read().strip()
        except (OSError, ValueError):
            head = ""
        if not head.startswith("ref: refs/"):  # detached by hand (or unreadable): ask git
            return self.head(), self._ref(REMOTE_REF)
        local = head[len("ref: "):]
        refs = {}
        for line in self.out("for-each-ref", "--format=%(refname) %(objectname)", local, REMOTE_REF).splitlines():
            name, _, sha = line.partition(" ")
            refs[name] = sha
        return refs.get(local), refs.get(REMOTE_REF)

    def _ref(self, name):
        code, out, _ = self.git("rev-parse", "--verify", "-q", name, check=False)
        return out.strip() if code == 0 else None

    def merge(self, ours, theirs):
        """Merge the remote's `main` (commit `theirs`) into ours (`ours`, None before the first
        commit); the files it changed (sorted) and whether git reported a conflict. Committed
        either way."""
        if ours is not None:
            code, _, _ = self.git("merge-base", "--is-ancestor", theirs, ours, check=False)
            if code == 0:
                return [], False
        code, _, err = self.git("merge", "--quiet", "--no-edit", "--no-verify", "--allow-unrelated-histories",
                                "-m", "kgd: merge with %s" % redact_url(self.remote), theirs, check=False)
        conflicted = code != 0
        if conflicted:
            if not os.path.exists(os.path.join(self.folder, ".git", "MERGE_HEAD")):
                raise git_runner.GitError("failed", "git merge: %s" % git_runner.summary(err), code, err)
            log.info("remote sync: git left a conflict in %s; committing it as it is for kgd to resolve",
                     self.folder)
            self.finish_merge()
        if ours is None:
            changed = self.out("ls-tree", "-r", "--name-only", "HEAD").splitlines()
        else:
            changed = self.out("diff", "--name-only", "--no-renames", ours, "HEAD").splitlines()
        return sorted(p for p in changed if p), conflicted

    def loose_kib(self):
        """What the loose objects weigh, in KiB (`git count-objects -v`'s size)."""
        code, out, _ = self.git("count-objects", "-v", check=False)
        for line in out.splitlines() if code == 0 else ():
            name, _, value = line.partition(":")
            if name.strip() == "size" and value.strip().isdigit():
                return int(value)
        return 0

    def gc(self):
        """Keep the repository packed: `git gc --auto` (about GC_AUTO loose objects, or many packs),
        or a whole `git gc` once the loose objects weigh LOOSE_MAX_KIB, which a big graph reaches
        long before their number counts (every commit stores its changed file whole until packed,
        where it becomes a delta). In the foreground (git would detach it): under this call's
        timeout, its lock released at the end."""
        args = ["-c", "gc.autoDetach=false", "gc", "--quiet"]
        if self.loose_kib() < LOOSE_MAX_KIB:
            args[2:2] = ["-c", "gc.auto=%d" % GC_AUTO]
            args.append("--auto")
        self.git(*args, check=False, timeout=max(self.timeout, 300))

    def push(self):
        self.git("push", "--quiet", "--porcelain", "origin", "HEAD:refs/heads/" + BRANCH)

    def flush(self, export=None, budget=FLUSH_BUDGET):
        """At a clean stop (the worker has ended): commit what changed and push what is committed,
        within `budget` seconds in all. A push refused because the remote moved (another machine
        pushed since our last round) is retried after a fetch and a merge, as a round does, but
        nothing is handed to the pickup (see the rules above). True when something was pushed,
        False when the remote already held it; raises git_runner.GitError (offline, refused, out
        of time)."""
        self.cancelled = False  # the worker's round was cancelled; this is the stop's own step
        self.deadline = time.monotonic() + budget
        try:
            self.ensure()
            if export:
                export()
            self.commit()
            ours, theirs = self.head(), self._ref(REMOTE_REF)
            tries = 0
            while True:
                if ours is None or ours == theirs:
                    return False
                if theirs is not None and self.git("merge-base", "--is-ancestor", ours, theirs, check=False)[0] == 0:
                    return False  # the remote moved past ours: nothing of ours waits
                try:
                    self.push()
                    return True
                except git_runner.GitError as exc:
                    tries += 1
                    if exc.kind != "rejected" or tries >= PUSH_TRIES:
                        raise
                ours, theirs = self.fetch()
                if theirs is not None and theirs != ours:
                    got, conflicted = self.merge(ours, theirs)
                    log.info("remote sync: the remote moved; merged %d file(s)%s at stop, taken into memory at the "
                             "next start", len(got), " (a conflict, resolved on reading)" if conflicted else "")
                    ours = self.head()
        finally:
            self.deadline = None

    def round(self, export=None, pickup=None):
        """One full round; returns {"changed": [...], "conflicted": bool, "pushed": bool}. Raises
        git_runner.GitError (local commits are kept). Nothing is pushed when the remote already has
        our `main`: a round where nothing changed anywhere is four git calls."""
        self.ensure()
        if export:
            export()
        self.commit()
        changed, conflicted, pushed = [], False, False
        for attempt in range(PUSH_TRIES):
            ours, theirs = self.fetch()
            if theirs is not None and theirs != ours:
                got, c = self.merge(ours, theirs)
                conflicted = conflicted or c
                if got:
                    changed.extend(p for p in got if p not in changed)
                    if pickup:
                        pickup(got)
                    if export:
                        export()
                    self.commit("kgd: merged on %s" % git_runner.host_name())
                ours = self.head()
            if ours is None or ours == theirs:
                break  # the remote holds all we have
            try:
                self.push()
                pushed = True
                break
            except git_runner.GitError as exc:
                if exc.kind != "rejected" or attempt == PUSH_TRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        self.rounds += 1
        if self.rounds % GC_EVERY == 0:
            self.gc()
        return {"changed": sorted(changed), "conflicted": conflicted, "pushed": pushed}
