#!/bin/sh
# kgd installer: copies kgd into a prefix, writes a launcher, installs and starts a user service
# (systemd on Linux, launchd on macOS) and registers kgd with Claude Code. No root needed.
# Running it twice changes nothing the second time: a re-run keeps what the earlier install was
# given (port, root, token, service, agents) unless an option says otherwise, and says so.
# `./install.sh --help` lists the options.
set -eu

usage() {
    cat <<'EOF'
Usage: ./install.sh [options]

Installs kgd for this user (no root): program files in the prefix, a `kgd` launcher, a user
service that keeps the daemon running, and the Claude Code MCP entry.

  --prefix DIR    where the program goes           (default ~/.local/share/kgd)
  --bin-dir DIR   where the `kgd` launcher goes    (default ~/.local/bin)
  --port N        the daemon's port                (default 8765)
  --root DIR      the storage root, your memory    (default ~/.knowledge-graph; also KG_STORAGE_ROOT)
  --python PATH   the Python 3.9+ to use           (default: python3 on PATH)
  --from PATH     install from this source tree or kgd.pyz
                  (default: the tree this script is in, else a kgd.pyz beside it)
  --no-service    no systemd / launchd service (start kgd yourself: `kgd start`)
  --no-start      write the service file but do not enable or start it
  --no-client     do not register kgd with Claude Code (nor its hooks)
  --no-hooks      do not add kgd's hooks: Claude Code's (~/.claude/settings.json), nor the
                  MCP entry and hooks of Codex, Gemini CLI or Copilot CLI when on PATH
  --no-permissions  do not add permissions.allow lines for kgd's tools there (Claude Code then
                  asks before every memory call)
  --desktop       also add kgd to Claude Desktop's config (via `kgd stdio`)
  --service, --client, --hooks, --permissions, --no-desktop, --no-token
                  undo the option of that name an earlier install was given
  --dry-run       show what would be done, change nothing
  --uninstall     remove what this script installed; keeps your memory (~/.knowledge-graph)
  -h, --help      this text

A re-run keeps what the earlier install (same --prefix) was given: --port, --root, the token
(KG_TOKEN set: the hooks send it), --no-service, --no-client, --no-hooks, --no-permissions,
--desktop. An option given again changes it, and the installer says so.

Environment: KGD_PYTHON (as --python), KGD_INSTALL_OS=linux|darwin (which service files to write),
KG_STORAGE_ROOT (as --root), KG_TOKEN (the hooks and agents' entries send Authorization: Bearer
$KG_TOKEN; the token itself is never written).
EOF
}

die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }

[ -n "${HOME:-}" ] || die "HOME is not set."

PREFIX="$HOME/.local/share/kgd"
BIN_DIR="$HOME/.local/bin"
PORT=8765
ROOT=""
PY="${KGD_PYTHON:-}"
FROM=""
SERVICE=1
START=1
CLIENT=1
HOOKS=1
PERMS=1
DESKTOP=0
DRY=0
UNINSTALL=0
TOKEN=0
GIVEN=""  # the remembered options this command line gives (see `remember` below)

need_arg() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)."; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) need_arg "$1" $#; PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#*=}; shift ;;
        --bin-dir) need_arg "$1" $#; BIN_DIR=$2; shift 2 ;;
        --bin-dir=*) BIN_DIR=${1#*=}; shift ;;
        --port) need_arg "$1" $#; PORT=$2; GIVEN="$GIVEN port"; shift 2 ;;
        --port=*) PORT=${1#*=}; GIVEN="$GIVEN port"; shift ;;
        --root) need_arg "$1" $#; ROOT=$2; GIVEN="$GIVEN root"; shift 2 ;;
        --root=*) ROOT=${1#*=}; GIVEN="$GIVEN root"; shift ;;
        --python) need_arg "$1" $#; PY=$2; shift 2 ;;
        --python=*) PY=${1#*=}; shift ;;
        --from) need_arg "$1" $#; FROM=$2; shift 2 ;;
        --from=*) FROM=${1#*=}; shift ;;
        --no-service) SERVICE=0; GIVEN="$GIVEN service"; shift ;;
        --service) SERVICE=1; GIVEN="$GIVEN service"; shift ;;
        --no-start) START=0; shift ;;
        --no-client) CLIENT=0; GIVEN="$GIVEN client"; shift ;;
        --client) CLIENT=1; GIVEN="$GIVEN client"; shift ;;
        --no-hooks) HOOKS=0; GIVEN="$GIVEN hooks"; shift ;;
        --hooks) HOOKS=1; GIVEN="$GIVEN hooks"; shift ;;
        --no-permissions) PERMS=0; GIVEN="$GIVEN permissions"; shift ;;
        --permissions) PERMS=1; GIVEN="$GIVEN permissions"; shift ;;
        --desktop) DESKTOP=1; GIVEN="$GIVEN desktop"; shift ;;
        --no-desktop) DESKTOP=0; GIVEN="$GIVEN desktop"; shift ;;
        --no-token) TOKEN=0; GIVEN="$GIVEN token"; shift ;;
        --dry-run) DRY=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (see --help)." ;;
    esac
done

abspath() {  # absolute form of a path that may not exist yet; ~/ expanded
    case "$1" in
        "~") printf '%s' "$HOME" ;;
        "~/"*) printf '%s/%s' "$HOME" "${1#\~/}" ;;
        /*) printf '%s' "$1" ;;
        *) printf '%s/%s' "$(pwd)" "$1" ;;
    esac
}
PREFIX=$(abspath "$PREFIX"); PREFIX=${PREFIX%/}
BIN_DIR=$(abspath "$BIN_DIR"); BIN_DIR=${BIN_DIR%/}
MANIFEST="$PREFIX/.kgd-install-manifest"

manifest_lines() {  # manifest_lines KIND: the values of that kind in the current manifest
    [ -f "$MANIFEST" ] || return 0
    sed -n "s/^$1 //p" "$MANIFEST"
}

# ---------------------------------------------------------------- what the earlier install was given

DEFAULT_ROOT="$HOME/.knowledge-graph"
if [ -z "$ROOT" ] && [ -n "${KG_STORAGE_ROOT:-}" ]; then
    ROOT=$KG_STORAGE_ROOT; GIVEN="$GIVEN root"
fi
if [ -n "$ROOT" ]; then
    ROOT=$(abspath "$ROOT"); [ "$ROOT" = / ] || ROOT=${ROOT%/}
fi
if [ -n "${KG_TOKEN:-}" ] && [ "$TOKEN" = 0 ] && ! case " $GIVEN " in *" token "*) true ;; *) false ;; esac; then
    TOKEN=1; GIVEN="$GIVEN token"
fi
KEPT=""        # "--port 8766, --no-service": what this run keeps from the earlier install
CHANGES=""     # one line per remembered option this run changes
option_word() {  # option_word NAME VALUE: the option that gives VALUE
    case "$1:$2" in
        port:*) printf -- '--port %s' "$2" ;;
        root:*) printf -- '--root %s' "$2" ;;
        token:1) printf 'the token (KG_TOKEN)' ;; token:0) printf 'no token' ;;
        desktop:1) printf -- '--desktop' ;; desktop:0) printf -- '--no-desktop' ;;
        permissions:1) printf -- '--permissions' ;; permissions:0) printf -- '--no-permissions' ;;
        *:1) printf -- '--%s' "$1" ;; *:0) printf -- '--no-%s' "$1" ;;
    esac
}
remember() {  # remember NAME VARIABLE DEFAULT: keep the earlier install's value unless given now
    [ -f "$MANIFEST" ] || return 0
    old=$(manifest_lines "$1" | head -n 1)
    eval "cur=\${$2}"
    case " $GIVEN " in
        *" $1 "*)
            if [ -n "$old" ] && [ "$old" != "$cur" ]; then
                CHANGES="$CHANGES$(option_word "$1" "$old") -> $(option_word "$1" "$cur")
"
            fi ;;
        *)
            if [ -n "$old" ]; then
                eval "$2=\$old"
                [ "$old" = "$3" ] || KEPT="$KEPT${KEPT:+, }$(option_word "$1" "$old")"
            fi ;;
    esac
}
if [ "$UNINSTALL" = 0 ]; then
    remember port PORT 8765
    remember root ROOT "$DEFAULT_ROOT"
    remember token TOKEN 0
    remember service SERVICE 1
    remember client CLIENT 1
    remember hooks HOOKS 1
    remember permissions PERMS 1
    remember desktop DESKTOP 0
fi
ROOT=${ROOT:-$DEFAULT_ROOT}
export KG_STORAGE_ROOT="$ROOT"  # every kgd command run below talks about this root
# the hooks and agents' entries name $KG_TOKEN (never its value): they need only know that one is used
if [ "$TOKEN" = 1 ]; then HOOK_TOKEN=${KG_TOKEN:-kept-from-the-earlier-install}; else HOOK_TOKEN=""; fi

case "$PORT" in
    ''|*[!0-9]*) die "--port must be a number from 1 to 65535, got '$PORT'." ;;
esac
[ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "--port must be a number from 1 to 65535, got '$PORT'."

# ---------------------------------------------------------------- Python

find_python() {
    if [ -z "$PY" ]; then
        PY=$(command -v python3 2>/dev/null) || PY=""
        [ -n "$PY" ] || return 1
    fi
    case "$PY" in
        */*) PY=$(abspath "$PY") ;;
        *) PY=$(command -v "$PY" 2>/dev/null) || return 2 ;;
    esac
    [ -f "$PY" ] && [ -x "$PY" ] || return 2
    PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 3
    case "$PYVER" in
        [0-9]*.[0-9]*) ;;
        *) return 3 ;;
    esac
    major=${PYVER%%.*}; minor=${PYVER#*.}
    if [ "$major" -lt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -lt 9 ]; }; then
        return 4
    fi
    return 0
}

PY_OK=0
find_python || PY_OK=$?
if [ "$PY_OK" = 0 ] && [ "$(head -c 2 "$PY")" = "#!" ]; then
    # a wrapper script (pyenv / asdf shim): services run without the shell setup it needs
    PY=$("$PY" -c 'import sys; print(sys.executable)')
fi
if [ "$PY_OK" != 0 ] && [ "$UNINSTALL" = 0 ]; then
    case "$PY_OK" in
        1) die "python3 was not found on PATH. kgd needs Python 3.9 or newer: install it (apt install python3 / dnf install python3 / brew install python3) or pass --python /path/to/python3." ;;
        2) die "the Python '$PY' is not an executable file; pass --python /path/to/python3 (3.9 or newer)." ;;
        3) die "'$PY' does not run as Python; pass --python /path/to/python3 (3.9 or newer)." ;;
        4) die "Python $PYVER at $PY is too old: kgd needs Python 3.9 or newer. Install a newer one and pass it with --python." ;;
    esac
fi

# ---------------------------------------------------------------- platform and source

OS=${KGD_INSTALL_OS:-$(uname -s)}
case "$OS" in
    Linux|linux) OS=linux ;;
    Darwin|darwin|macos) OS=darwin ;;
    *) [ "$SERVICE" = 0 ] || die "no user service support on $OS (Linux and macOS only); use --no-service and start kgd yourself." ;;
esac
export KGD_INSTALL_OS="$OS"  # `kgd desktop` picks the same config file
CONFIG_HOME=${XDG_CONFIG_HOME:-$HOME/.config}
LABEL=local.kgd
if [ "$OS" = darwin ]; then
    SERVICE_FILE="$HOME/Library/LaunchAgents/$LABEL.plist"
else
    SERVICE_FILE="$CONFIG_HOME/systemd/user/kgd.service"
fi
URL="http://127.0.0.1:$PORT/"
LAUNCHER="$BIN_DIR/kgd"
MARK="written by kgd's install.sh"

SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
SRC_KIND=""
if [ "$UNINSTALL" = 0 ]; then
    if [ -n "$FROM" ]; then
        FROM=$(abspath "$FROM"); FROM=${FROM%/}
        if [ -d "$FROM" ] && [ -f "$FROM/kgd.py" ] && [ -f "$FROM/kg/__init__.py" ]; then
            SRC_KIND=tree; SRC=$FROM
        elif [ -f "$FROM" ]; then
            SRC_KIND=pyz; SRC=$FROM
        else
            die "--from $FROM is neither a kgd source tree (kgd.py + kg/) nor a kgd.pyz file."
        fi
    elif [ -f "$SCRIPT_DIR/kgd.py" ] && [ -f "$SCRIPT_DIR/kg/__init__.py" ]; then
        SRC_KIND=tree; SRC=$SCRIPT_DIR
    elif [ -f "$SCRIPT_DIR/kgd.pyz" ]; then
        SRC_KIND=pyz; SRC="$SCRIPT_DIR/kgd.pyz"
    else
        die "no kgd to install next to this script: expected kgd.py and kg/ (a source tree) or kgd.pyz in $SCRIPT_DIR; or pass --from."
    fi
    if [ "$SRC_KIND" = tree ]; then
        SRC_ENTRY="$SRC/kgd.py"; ENTRY="$PREFIX/kgd.py"
    else
        SRC_ENTRY=$SRC; ENTRY="$PREFIX/kgd.pyz"
    fi
    if [ "$SRC_KIND" = tree ]; then
        SRC_VERSION="kgd $(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$SRC/kg/__init__.py")"
    else
        SRC_VERSION=$("$PY" "$SRC_ENTRY" --version 2>&1) || die "$SRC_ENTRY does not run with $PY: $SRC_VERSION"
    fi
fi

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/kgd-install.XXXXXX")
# The temp folder goes on every way out: a normal exit, ^C, kill, a closed terminal, and a reader
# that went away (`./install.sh --dry-run | head`: SIGPIPE would otherwise end the shell untrapped).
trap 'rm -rf "$TMPD"' EXIT
for sig in HUP INT PIPE TERM; do
    # shellcheck disable=SC2064
    trap "rm -rf \"\$TMPD\"; trap - EXIT; exit 1" "$sig"
done

# ---------------------------------------------------------------- helpers

CHANGED=0          # any program or service file written in this run
HOOKED=0           # Claude Code's SessionStart hook (which starts the daemon) is in place
PERMS_DONE=0       # permissions.allow holds kgd's tools
TOOL_NAMES="kg_read kg_put_node kg_put_edge kg_delete_node kg_delete_edge kg_search kg_sync kg_progress"
NEW_DIRS=""        # folders this run created (newline separated)
FILES=""           # files the install consists of (newline separated)

record_file() { FILES="$FILES$1
"; }

make_dir() {  # mkdir -p, remembering which folders did not exist before
    d=$1; missing=""
    while [ ! -d "$d" ]; do
        missing="$d
$missing"
        d=$(dirname "$d")
    done
    [ -n "$missing" ] || return 0
    # a dry run does not list folders: the files said to be written imply them
    [ "$DRY" = 1 ] || mkdir -p "$1"
    NEW_DIRS="$NEW_DIRS$missing"
}

show_file() { sed 's/^/    /' "$1"; }

QUIET_CHANGED=0    # files put_file wrote or chmod-ed (the program files are said in one line)
put_file() {  # put_file SRC DEST MODE [show|quiet]: copy when the content or mode differs
    src=$1; dest=$2; mode=$3
    record_file "$dest"
    if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
        cur=$(ls -l "$dest" | cut -c2-10)
        want=$(mode_string "$mode")
        if [ "$cur" = "$want" ]; then
            return 0
        fi
        if [ "$DRY" = 1 ]; then
            [ "${4:-}" = quiet ] || say "would chmod $mode $dest"
        else
            chmod "$mode" "$dest"
        fi
        CHANGED=1
        QUIET_CHANGED=$((QUIET_CHANGED + 1))
        return 0
    fi
    CHANGED=1
    QUIET_CHANGED=$((QUIET_CHANGED + 1))
    if [ "$DRY" = 1 ]; then
        [ "${4:-}" = quiet ] || say "would write $dest"
        [ "${4:-}" = show ] && show_file "$src"
        return 0
    fi
    make_dir "$(dirname "$dest")"
    cp "$src" "$dest.tmp-$$"
    chmod "$mode" "$dest.tmp-$$"
    mv -f "$dest.tmp-$$" "$dest"
    [ "${4:-}" = quiet ] || say "wrote $dest"
}

mode_string() {
    case "$1" in
        644) printf 'rw-r--r--' ;;
        755) printf 'rwxr-xr-x' ;;
        600) printf 'rw-------' ;;
        *) printf '%s' "$1" ;;
    esac
}

sh_quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
sd_quote() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/%/%%/g' -e 's/\$/$$/g')"; }
xml_escape() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'; }

port_state() {  # free | busy | kgd VERSION
    "$PY" - "$PORT" <<'EOF'
import http.client, json, socket, sys
port = int(sys.argv[1])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", port))
    state = "free"
except OSError:
    state = "busy"
finally:
    s.close()
if state == "busy":
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        h = json.loads(c.getresponse().read().decode("utf-8"))
        if h.get("status") == "ok" and "version" in h:
            state = "kgd %s" % h["version"]
    except Exception:
        pass
print(state)
EOF
}

wait_health() {  # wait_health SECONDS: is a kgd answering on PORT
    "$PY" - "$PORT" "$1" <<'EOF'
import http.client, json, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/health")
        if json.loads(c.getresponse().read().decode("utf-8")).get("status") == "ok":
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
}

service_active() {
    if [ "$OS" = darwin ]; then
        launchctl print "gui/$(id -u)/$LABEL" >/dev/null 2>&1
    else
        systemctl --user is-active --quiet kgd.service 2>/dev/null
    fi
}

claude_entry_is_ours() {  # claude_entry_is_ours URL
    out=$(claude mcp get kg 2>/dev/null) || return 2
    printf '%s\n' "$out" | grep -F "$1" >/dev/null 2>&1 && return 0
    return 1
}

# ---------------------------------------------------------------- uninstall

GONE="$TMPD/gone"  # what this uninstall removes (one path a line), so the dry run can tell which folders it empties
left_empty() {  # left_empty DIR: would DIR hold nothing once the paths in $GONE are gone
    for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        grep -Fx -e "$e" "$GONE" >/dev/null 2>&1 || return 1
    done
    return 0
}

if [ "$UNINSTALL" = 1 ]; then
    : >"$GONE"
    if [ ! -f "$MANIFEST" ]; then
        say "kgd is not installed in $PREFIX (no $MANIFEST); nothing to remove."
        exit 0
    fi
    OLD_PORT=$(manifest_lines port | head -n 1)
    OLD_ENTRY=$(manifest_lines entry | head -n 1)
    OLD_OS=$(manifest_lines os | head -n 1)
    [ -z "$OLD_OS" ] || OS=$OLD_OS
    export KGD_INSTALL_OS="$OS"
    OLD_URL="http://127.0.0.1:${OLD_PORT:-$PORT}/"
    # 1. the service
    if manifest_lines file | grep -Fx -e "$HOME/Library/LaunchAgents/$LABEL.plist" -e "$SERVICE_FILE" >/dev/null 2>&1; then
        if [ "$DRY" = 1 ]; then
            if [ "$OS" = darwin ]; then
                say "would run: launchctl bootout gui/$(id -u)/$LABEL"
            else
                say "would run: systemctl --user disable --now kgd.service"
            fi
        elif [ "$SERVICE" = 0 ] || [ "$START" = 0 ]; then
            say "not stopping the service (--no-service / --no-start); its file is removed below"
        elif [ "$OS" = darwin ]; then
            if launchctl bootout "gui/$(id -u)/$LABEL" >/dev/null 2>&1 || ! launchctl print "gui/$(id -u)/$LABEL" >/dev/null 2>&1; then
                say "stopped the launchd agent $LABEL"
            else
                say "could not stop the launchd agent $LABEL; stop it yourself: launchctl bootout gui/$(id -u)/$LABEL"
            fi
        else
            if msg=$(systemctl --user disable --now kgd.service 2>&1); then
                say "stopped and disabled kgd.service"
            else
                msg=$(printf '%s' "$msg" | head -n 1)
                say "could not stop and disable kgd.service (systemctl: ${msg:-failed}); if it runs, stop it yourself: systemctl --user disable --now kgd.service (or kgd stop)"
            fi
        fi
    fi
    # 1b. a daemon still serving the installed root (started by hand, by `kgd stdio` or a hook):
    # it would keep answering from deleted files
    OLD_ROOT=$(manifest_lines root | head -n 1)
    OLD_ROOT=${OLD_ROOT:-${KG_STORAGE_ROOT:-$HOME/.knowledge-graph}}
    if [ "$PY_OK" = 0 ] && [ -n "$OLD_ENTRY" ] && [ -f "$OLD_ENTRY" ]; then
        if [ "$DRY" = 1 ]; then
            # said only when one runs: the real run says nothing when there is nothing to stop
            if KG_HTTP_PORT=${OLD_PORT:-$PORT} "$PY" "$OLD_ENTRY" status --root "$OLD_ROOT" >/dev/null 2>&1; then
                say "would stop the kgd serving $OLD_ROOT (kgd stop)"
            fi
        elif out=$(KG_HTTP_PORT=${OLD_PORT:-$PORT} "$PY" "$OLD_ENTRY" stop --root "$OLD_ROOT" 2>&1); then
            case "$out" in *" stopped"*) say "$out" ;; esac
        else
            say "could not stop the kgd serving $OLD_ROOT ($(printf '%s' "$out" | head -n 1)); stop it yourself: kgd stop --root $OLD_ROOT"
        fi
    fi
    # 2. client entries that point at this install
    if [ "$CLIENT" = 1 ]; then
        if command -v claude >/dev/null 2>&1; then
            if claude_entry_is_ours "$OLD_URL"; then
                if [ "$DRY" = 1 ]; then
                    say "would run: claude mcp remove --scope user kg"
                else
                    claude mcp remove --scope user kg >/dev/null 2>&1 || say "could not remove Claude Code's kg entry; run: claude mcp remove --scope user kg"
                    say "removed Claude Code's kg entry ($OLD_URL)"
                fi
            fi
        else
            say "Claude Code is not on PATH; if you registered kgd there, run: claude mcp remove --scope user kg"
        fi
        if [ "$PY_OK" = 0 ] && [ -n "$OLD_ENTRY" ] && [ -f "$OLD_ENTRY" ]; then
            if [ "$DRY" = 1 ]; then dry_arg=--dry-run; else dry_arg=""; fi
            { "$PY" "$OLD_ENTRY" desktop --remove --kgd "$OLD_ENTRY" $dry_arg 2>&1 || true; } | sed 's/^/desktop: /' >"$TMPD/said"
            { "$PY" "$OLD_ENTRY" hooks remove --agent all $dry_arg 2>&1 || true; } | sed 's/^/hooks: /' >>"$TMPD/said"
            cat "$TMPD/said"
            # the settings files kgd's entries were all of go too (kg/ops/setup/settings_file.py
            # emptied_line): the dry run needs them to tell which folders are left empty
            sed -n 's/^.*would remove \(\/.*\) (nothing else in it)$/\1/p' "$TMPD/said" >>"$GONE"
        fi
    fi
    # 3. the files, then the folders this installer created (if empty)
    manifest_lines file >"$TMPD/files"
    n=0
    while IFS= read -r f; do
        if [ -f "$f" ] || [ -L "$f" ]; then
            [ "$DRY" = 1 ] || rm -f "$f"
            printf '%s\n' "$f" >>"$GONE"
            case "$f" in
                "$PREFIX"/*) n=$((n + 1)) ;;  # the program files: said in one line below
                *) if [ "$DRY" = 1 ]; then say "would remove $f"; else say "removed $f"; fi ;;
            esac
        fi
    done <"$TMPD/files"
    if [ "$n" -gt 0 ]; then
        if [ "$DRY" = 1 ]; then say "would remove $n program file(s) from $PREFIX"; else say "removed $n program file(s) from $PREFIX"; fi
    fi
    # the caches Python wrote beside kg/ and each package's modules: part of the program
    find "$PREFIX" -type d -name __pycache__ 2>/dev/null >>"$GONE"
    [ "$DRY" = 1 ] || find "$PREFIX" -type d -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
    manifest_lines dir >"$TMPD/madedirs"
    printf '%s\n' "$MANIFEST" >>"$GONE"
    [ "$DRY" = 1 ] || rm -f "$MANIFEST"
    # the folders the installer created, deepest first, each when nothing is left in it: the dry run
    # finds the same ones as the real run (what it would leave), and both say them the same way
    LC_ALL=C sort -r "$TMPD/madedirs" | while IFS= read -r d; do
        [ -n "$d" ] && [ -d "$d" ] || continue
        if [ "$DRY" = 1 ]; then
            left_empty "$d" || continue
            printf '%s\n' "$d" >>"$GONE"
        else
            rmdir "$d" 2>/dev/null || continue
        fi
        printf '%s\n' "$d"
    done >"$TMPD/dirs"
    inside=$(grep -c -F -e "$PREFIX/" "$TMPD/dirs" || true)
    if [ "$DRY" = 1 ]; then verb="would remove"; else verb="removed"; fi
    while IFS= read -r d; do
        case "$d" in
            "$PREFIX") if [ "$inside" -gt 0 ]; then say "$verb folder $PREFIX (and its $inside folder(s))"; else say "$verb folder $d"; fi ;;
            "$PREFIX"/*) ;;
            *) say "$verb folder $d" ;;
        esac
    done <"$TMPD/dirs"
    if ! grep -Fx -e "$PREFIX" "$TMPD/dirs" >/dev/null && [ "$inside" -gt 0 ]; then
        say "$verb $inside folder(s) in $PREFIX"
    fi
    if [ "$DRY" = 1 ]; then done_line="kgd would be uninstalled"; else done_line="kgd is uninstalled"; fi
    say "$done_line. Your memory stays in $OLD_ROOT; delete that folder yourself if you no longer want it."
    exit 0
fi

# ---------------------------------------------------------------- checks before changing anything

STATE=$(port_state)
SERVICE_WAS_ACTIVE=0
if [ "$SERVICE" = 1 ] && [ "$START" = 1 ] && [ "$DRY" = 0 ] && service_active; then
    SERVICE_WAS_ACTIVE=1
fi
case "$STATE" in
    free) ;;
    busy)
        # the program is named (kg/ops/port_owner.py, from the kgd being installed) when it can be seen
        who=$("$PY" -S -c 'import sys; sys.path.insert(0, sys.argv[1]); from kg.ops.port_owner import named; print(named(int(sys.argv[2])) or "")' \
            "$([ "$SRC_KIND" = tree ] && printf '%s' "$SRC" || printf '%s' "$SRC_ENTRY")" "$PORT" 2>/dev/null) || who=""
        die "port $PORT on 127.0.0.1 is in use by another program (${who:-not kgd; find it with: lsof -i :$PORT}). Choose another port: ./install.sh --port N (or free that one)" ;;
    kgd*)
        if [ "$SERVICE" = 1 ] && [ "$START" = 1 ] && [ "$SERVICE_WAS_ACTIVE" = 0 ] && [ "$DRY" = 0 ]; then
            die "a kgd (${STATE#kgd }) already runs on port $PORT outside the service (started by hand or by 'kgd stdio'). Stop it first (kgd stop), or use --no-service, or --port N."
        fi ;;
esac
NO_BUS="systemctl --user cannot reach your user session (no systemd user instance here: a container, or an SSH session without one). Re-run with --no-service and start kgd yourself (kgd start), or --no-start to only write the unit; on a server, 'loginctl enable-linger $(id -un)' gives you a user instance."
if [ "$SERVICE" = 1 ] && [ "$START" = 1 ] && [ "$OS" = linux ] && ! systemctl --user show-environment >/dev/null 2>&1; then
    if [ "$DRY" = 1 ]; then
        BUS_WARNING="warning: a real run would stop here, before changing anything: $NO_BUS"
    else
        die "$NO_BUS"
    fi
fi
if [ -e "$LAUNCHER" ] && ! grep -F "$MARK" "$LAUNCHER" >/dev/null 2>&1; then
    die "$LAUNCHER exists and was not written by this installer; move it away or choose --bin-dir."
fi

say "Installing $SRC_VERSION ($SRC_KIND from $SRC) for Python $PYVER ($PY)"
[ "$DRY" = 0 ] || say "(dry run: nothing is changed)"
[ -z "${BUS_WARNING:-}" ] || say "$BUS_WARNING"
[ -z "$KEPT" ] || say "kept from the earlier install: $KEPT (give an option to change it)"
printf '%s' "$CHANGES" | while IFS= read -r line; do
    [ -z "$line" ] || say "changed from the earlier install: $line"
done

# ---------------------------------------------------------------- 1. program files

make_dir "$PREFIX"
QUIET_CHANGED=0
if [ "$SRC_KIND" = tree ]; then
    make_dir "$PREFIX/kg"
    put_file "$SRC/kgd.py" "$PREFIX/kgd.py" 644 quiet
    for f in README.md LICENSE; do
        [ -f "$SRC/$f" ] && put_file "$SRC/$f" "$PREFIX/$f" 644 quiet
    done
    # every file of the kg package (modules and the viewer's kg/serve/ui/ files), no caches, and the
    # docs the README links to
    (cd "$SRC" && find kg docs -type f ! -name '*.pyc' ! -path '*/__pycache__/*' 2>/dev/null | LC_ALL=C sort) >"$TMPD/pkgfiles"
    while IFS= read -r f; do
        make_dir "$PREFIX/$(dirname "$f")"
        put_file "$SRC/$f" "$PREFIX/$f" 644 quiet
    done <"$TMPD/pkgfiles"
else
    put_file "$SRC" "$PREFIX/kgd.pyz" 644 quiet
fi
if [ "$QUIET_CHANGED" -gt 0 ]; then  # one line for the program, not one per file
    if [ "$DRY" = 1 ]; then
        say "would copy $QUIET_CHANGED program file(s) ($SRC_KIND) into $PREFIX"
    else
        say "copied $QUIET_CHANGED program file(s) ($SRC_KIND) into $PREFIX"
    fi
fi

# ---------------------------------------------------------------- 2. launcher

ROOT_LINES=""  # the launcher's storage root when not the default (KG_STORAGE_ROOT still wins)
if [ "$ROOT" != "$DEFAULT_ROOT" ]; then
    ROOT_LINES="[ -n \"\${KG_STORAGE_ROOT:-}\" ] || KG_STORAGE_ROOT=$(sh_quote "$ROOT")
export KG_STORAGE_ROOT
"
fi
cat >"$TMPD/launcher" <<EOF
#!/bin/sh
# kgd launcher, $MARK (\`install.sh --uninstall\` removes it).
: "\${KG_HTTP_PORT:=$PORT}"
export KG_HTTP_PORT
${ROOT_LINES}exec $(sh_quote "$PY") $(sh_quote "$ENTRY") "\$@"
EOF
make_dir "$BIN_DIR"
put_file "$TMPD/launcher" "$LAUNCHER" 755 show

# ---------------------------------------------------------------- 3. service file

SERVICE_CHANGED=0
if [ "$SERVICE" = 1 ]; then
    before=$CHANGED
    CHANGED=0
    SD_ROOT=""; PLIST_ROOT=""  # --root when not the default
    if [ "$ROOT" != "$DEFAULT_ROOT" ]; then
        SD_ROOT=" --root $(sd_quote "$ROOT")"
        PLIST_ROOT="        <string>--root</string>
        <string>$(xml_escape "$ROOT")</string>
"
    fi
    if [ "$OS" = darwin ]; then
        LOG="$HOME/Library/Logs/kgd.log"
        cat >"$TMPD/service" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- kgd knowledge-graph memory daemon, $MARK -->
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>$LABEL</string>
    <key>ProgramArguments</key>
    <array>
        <string>$(xml_escape "$PY")</string>
        <string>$(xml_escape "$ENTRY")</string>
        <string>serve</string>
        <string>--port</string>
        <string>$PORT</string>
${PLIST_ROOT}    </array>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>ThrottleInterval</key>
    <integer>10</integer>
    <key>ExitTimeOut</key>
    <integer>20</integer>
    <key>ProcessType</key>
    <string>Background</string>
    <key>StandardErrorPath</key>
    <string>$(xml_escape "$LOG")</string>
</dict>
</plist>
EOF
    else
        cat >"$TMPD/service" <<EOF
# kgd knowledge-graph memory daemon, $MARK
[Unit]
Description=kgd knowledge-graph memory daemon for AI coding agents

[Service]
Type=simple
ExecStart=$(sd_quote "$PY") $(sd_quote "$ENTRY") serve --port $PORT$SD_ROOT
Restart=on-failure
RestartSec=2
# exit 2 is a configuration error (port in use, root locked): restarting will not help
RestartPreventExitStatus=2
TimeoutStopSec=20

[Install]
WantedBy=default.target
EOF
    fi
    put_file "$TMPD/service" "$SERVICE_FILE" 644 show
    SERVICE_CHANGED=$CHANGED
    [ "$before" = 0 ] || CHANGED=1
elif [ -f "$SERVICE_FILE" ] && manifest_lines file | grep -Fx "$SERVICE_FILE" >/dev/null 2>&1; then
    record_file "$SERVICE_FILE"
    say "kept the service file from an earlier install ($SERVICE_FILE); --uninstall removes it"
fi

# ---------------------------------------------------------------- 4. Claude Desktop (kgd stdio)

if [ "$DESKTOP" = 1 ]; then
    DESKTOP_ROOT=""
    [ "$ROOT" = "$DEFAULT_ROOT" ] || DESKTOP_ROOT="--root=$ROOT"
    if [ "$OS" = darwin ]; then
        make_dir "$HOME/Library/Application Support/Claude"
    else
        make_dir "$CONFIG_HOME/Claude"
    fi
    if [ "$DRY" = 1 ]; then
        "$PY" "$SRC_ENTRY" desktop --port "$PORT" ${DESKTOP_ROOT:+"$DESKTOP_ROOT"} --python "$PY" --kgd "$ENTRY" --dry-run
    else
        "$PY" "$ENTRY" desktop --port "$PORT" ${DESKTOP_ROOT:+"$DESKTOP_ROOT"} --python "$PY" --kgd "$ENTRY"
    fi
fi

# ---------------------------------------------------------------- 4b. Claude Code hooks

if [ "$CLIENT" = 1 ] && [ "$HOOKS" = 1 ]; then
    make_dir "$HOME/.claude"  # recorded, so that --uninstall takes it away again if it is left empty
    if [ "$PERMS" = 1 ]; then perm_arg=""; else perm_arg="--no-permissions"; fi
    if [ "$DRY" = 1 ]; then
        if [ "$PERMS" = 1 ]; then
            say "would add to ~/.claude/settings.json: kgd's hooks (SessionStart, UserPromptSubmit, PostToolUse, Stop) and permissions.allow $(printf '"mcp__kg__%s", ' $TOOL_NAMES | sed 's/, $//')"
            PERMS_DONE=1
        else
            say "would add kgd's hooks (SessionStart, UserPromptSubmit, PostToolUse, Stop) to ~/.claude/settings.json"
        fi
        HOOKED=1
    elif out=$(KG_TOKEN=$HOOK_TOKEN "$PY" "$ENTRY" hooks install --port "$PORT" $perm_arg 2>&1); then
        [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/hooks: /'
        HOOKED=1
        PERMS_DONE=$PERMS
    else
        say "could not add kgd's hooks to ~/.claude/settings.json ($out); run: kgd hooks install"
    fi
fi

# ---------------------------------------------------------------- 4c. the other agents found on PATH

agent_home() {  # agent_home NAME: the folder the agent reads its configuration from
    case "$1" in
        codex) printf '%s' "${CODEX_HOME:-$HOME/.codex}" ;;
        gemini) printf '%s' "${GEMINI_CLI_HOME:-$HOME}/.gemini" ;;
        copilot) printf '%s' "${COPILOT_HOME:-$HOME/.copilot}" ;;
    esac
}

BY_HAND=""         # what the person must still do in an agent (one line each)
if [ "$CLIENT" = 1 ] && [ "$HOOKS" = 1 ]; then
    for agent in codex gemini copilot; do
        command -v "$agent" >/dev/null 2>&1 || continue
        ahome=$(agent_home "$agent")
        make_dir "$ahome"  # recorded, so that --uninstall takes it away again if it is left empty
        [ "$agent" != copilot ] || make_dir "$ahome/hooks"
        if [ "$DRY" = 1 ]; then
            say "would add kgd's MCP server and hooks for $agent to $ahome (kgd hooks install --agent $agent)"
        elif out=$(KG_TOKEN=$HOOK_TOKEN "$PY" "$ENTRY" hooks install --agent "$agent" --port "$PORT" 2>&1); then
            printf '%s\n' "$out" | grep -v ': by hand: ' | sed 's/^/hooks: /'
            hand=$(printf '%s\n' "$out" | grep ': by hand: ' || true)
            [ -z "$hand" ] || BY_HAND="$BY_HAND$hand
"
        else
            say "could not configure $agent for kgd ($out); run: kgd hooks install --agent $agent"
        fi
    done
fi

# ---------------------------------------------------------------- 5. manifest (what --uninstall removes)

OLD_DIRS=$(manifest_lines dir)
{
    say "# kgd install manifest, $MARK: what --uninstall removes"
    say "port $PORT"
    say "entry $ENTRY"
    say "os $OS"
    say "root $ROOT"
    say "token $TOKEN"
    say "service $SERVICE"
    say "client $CLIENT"
    say "hooks $HOOKS"
    say "permissions $PERMS"
    say "desktop $DESKTOP"
    printf '%s\n%s' "$OLD_DIRS" "$NEW_DIRS" | sed '/^$/d' | sort -u | sed 's/^/dir /'
    printf '%s' "$FILES" | sed '/^$/d' | sort -u | sed 's/^/file /'
} >"$TMPD/manifest"
# files a previous install had that this one no longer has (an older version's modules, a .pyz)
manifest_lines file | while IFS= read -r f; do
    if ! printf '%s' "$FILES" | grep -Fx "$f" >/dev/null 2>&1 && [ -f "$f" ]; then
        if [ "$DRY" = 1 ]; then say "would remove $f (no longer part of kgd)"; else rm -f "$f"; say "removed $f (no longer part of kgd)"; fi
    fi
done
if [ ! -f "$MANIFEST" ] || ! cmp -s "$TMPD/manifest" "$MANIFEST"; then
    if [ "$DRY" = 0 ]; then
        cp "$TMPD/manifest" "$MANIFEST.tmp-$$"
        chmod 644 "$MANIFEST.tmp-$$"
        mv -f "$MANIFEST.tmp-$$" "$MANIFEST"
    fi
fi

# ---------------------------------------------------------------- 6. start the service

if [ "$SERVICE" = 1 ]; then
    if [ "$OS" = darwin ]; then
        DOMAIN="gui/$(id -u)"
        START_CMD="launchctl bootstrap $DOMAIN $SERVICE_FILE"
    else
        START_CMD="systemctl --user daemon-reload && systemctl --user enable --now kgd.service"
    fi
    if [ "$DRY" = 1 ] || [ "$START" = 0 ]; then
        if [ "$DRY" = 1 ]; then
            say "would run: $START_CMD"
        else
            say "service not started (--no-start); to start it run: $START_CMD"
        fi
    elif [ "$OS" = darwin ]; then
        if [ "$SERVICE_WAS_ACTIVE" = 1 ] && [ "$CHANGED" = 1 ]; then
            launchctl bootout "$DOMAIN/$LABEL" >/dev/null 2>&1 || true
            i=0
            while launchctl print "$DOMAIN/$LABEL" >/dev/null 2>&1 && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
            SERVICE_WAS_ACTIVE=0
        fi
        if [ "$SERVICE_WAS_ACTIVE" = 0 ]; then
            launchctl bootstrap "$DOMAIN" "$SERVICE_FILE" 2>/dev/null || launchctl load -w "$SERVICE_FILE" \
                || die "launchctl could not load $SERVICE_FILE; try: $START_CMD"
            say "started the launchd agent $LABEL"
        fi
    else
        [ "$SERVICE_CHANGED" = 0 ] || systemctl --user daemon-reload
        if [ "$SERVICE_WAS_ACTIVE" = 1 ]; then
            if [ "$CHANGED" = 1 ]; then
                systemctl --user restart kgd.service
                say "restarted kgd.service (new files)"
            fi
            systemctl --user is-enabled --quiet kgd.service 2>/dev/null || systemctl --user enable --quiet kgd.service
        else
            systemctl --user enable --now --quiet kgd.service || die "systemctl --user enable --now kgd.service failed; see: journalctl --user -u kgd"
            say "enabled and started kgd.service"
        fi
    fi
    if [ "$DRY" = 0 ] && [ "$START" = 1 ]; then
        if wait_health 10; then
            say "kgd answers on $URL"
        elif [ "$OS" = darwin ]; then
            die "the service did not answer on $URL within 10 s; see $HOME/Library/Logs/kgd.log"
        else
            die "the service did not answer on $URL within 10 s; see: journalctl --user -u kgd"
        fi
    fi
fi

# ---------------------------------------------------------------- 7. Claude Code

if [ "$CLIENT" = 1 ]; then
    if command -v claude >/dev/null 2>&1; then
        rc=0
        claude_entry_is_ours "$URL" || rc=$?
        if [ "$rc" = 0 ]; then
            say "Claude Code already has kg -> $URL"
        elif [ "$DRY" = 1 ]; then
            [ "$rc" = 2 ] || say "would run: claude mcp remove --scope user kg"
            say "would run: claude mcp add --transport http --scope user kg $URL"
        else
            [ "$rc" = 2 ] || claude mcp remove --scope user kg >/dev/null 2>&1 || true
            if claude mcp add --transport http --scope user kg "$URL" >/dev/null; then
                say "registered kgd with Claude Code: kg -> $URL"
            else
                say "claude mcp add failed; run it yourself: claude mcp add --transport http --scope user kg $URL"
            fi
        fi
    else
        cat <<EOF

Claude Code is not on PATH. To connect it later, run:
    claude mcp add --transport http --scope user kg $URL
or put this in a project's .mcp.json (any MCP client that speaks Streamable HTTP takes the same URL):
    {
      "mcpServers": {
        "kg": {"type": "http", "url": "$URL"}
      }
    }
EOF
    fi
fi

# ---------------------------------------------------------------- 8. what is left to the user

[ "$PERMS_DONE" = 1 ] || cat <<EOF

So that Claude Code does not ask before every memory call, add to ~/.claude/settings.json:
    {
      "permissions": {
        "allow": [
          "mcp__kg__kg_read",
          "mcp__kg__kg_put_node",
          "mcp__kg__kg_put_edge",
          "mcp__kg__kg_delete_node",
          "mcp__kg__kg_delete_edge",
          "mcp__kg__kg_search",
          "mcp__kg__kg_sync",
          "mcp__kg__kg_progress"
        ]
      }
    }
EOF
[ -z "$BY_HAND" ] || printf '\n%s' "$BY_HAND"
case ":${PATH:-}:" in
    *":$BIN_DIR:"*) ;;
    *) say "
$BIN_DIR is not on your PATH: add it (e.g. in ~/.profile: export PATH=\"$BIN_DIR:\$PATH\") to run 'kgd'." ;;
esac
if [ "$SERVICE" = 1 ] && [ "$OS" = linux ] && [ "$DRY" = 0 ]; then
    say "
The service runs while you are logged in; to keep it running after you log out: loginctl enable-linger \$USER"
fi
if [ "$SERVICE" = 0 ]; then
    # no service (--no-service, e.g. where there is no user session): say what starts the daemon
    if [ "$HOOKED" = 1 ]; then
        starter="the first Claude Code session starts it (kgd's SessionStart hook), or run: kgd start"
    else
        starter="start it with: kgd start (a 'kgd stdio' client starts it too)"
    fi
    if [ "$DRY" = 1 ]; then
        say "
dry run: nothing was changed. Without a service, $starter"
    else
        say "
kgd is installed ($ENTRY) without a service: $starter"
    fi
elif [ "$DRY" = 1 ]; then
    say "
dry run: nothing was changed."
elif [ "$CHANGED" = 0 ]; then
    say "
kgd is installed ($ENTRY); nothing changed. 'kgd doctor' checks the setup."
else
    say "
kgd is installed ($ENTRY). 'kgd status' shows the daemon, 'kgd doctor' checks the setup."
fi
