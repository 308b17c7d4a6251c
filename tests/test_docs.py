"""The README and docs/ stay true to the code (as sqlite-utils' tests keep its README honest).

- the README's first lines are the two commands a newcomer needs: run the daemon, run the tests
  (the same command `.ci/run` runs);
- every command and option of `kgd --help`, every setting, every REST route of kg/api/openapi.py,
  every install.sh option and every tool's permission line is written down in README.md or docs/;
- docs/reference.md's "where each rule lives" table names every module of kg/ and only modules that
  exist (so a newcomer finds each rule in one place);
- every relative link and #anchor in README.md and docs/ leads somewhere;
- code, tests and benchmarks cite the contract's sections, never an issue number (a reader who
  clones the repository has the contract, not the issue tracker).
"""

import ast
import io
import os
import re
import tokenize

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))


def _read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


def _all_docs():
    return "\n".join(_read(rel) for rel in DOCS)


# ---------------------------------------------------------------- the first lines

def _first_commands():
    lines = _read("README.md").split("\n")
    assert lines[0].startswith("# kgd — ") and lines[1] == ""
    return [line.strip().split("   #")[0].strip() for line in lines[2:4]], lines[2:4]


def test_first_line_runs_the_daemon_where_the_defaults_say():
    from kg.ops import config
    (run, _), (line, _) = _first_commands()
    assert run == "python3 kgd.py"
    assert line.rstrip().endswith("# run the daemon on %s:%d" % (config.DEFAULTS["host"][1], config.DEFAULT_PORT))


def test_second_line_is_the_test_command_ci_runs():
    (_, test_cmd), (_, line) = _first_commands()
    assert line.rstrip().endswith("# run the tests")
    ci = [ln for ln in _read(".ci/run").split("\n") if ln.startswith("python3 -m venv")]
    assert len(ci) == 1
    quiet = re.sub(r" --(quiet|disable-pip-version-check)\b", "", ci[0]).strip()
    assert quiet == test_cmd, "README's test command %r is not what .ci/run runs (%r)" % (test_cmd, quiet)


# ---------------------------------------------------------------- commands, settings, routes

def _parser():
    from kg.ops import cli, commands
    parser, sub = cli.build_parser()
    commands.register(sub, cli.add_common)
    return parser, sub


def test_every_command_of_kgd_help_is_documented():
    _, sub = _parser()
    text = _all_docs()
    assert len(sub.choices) >= 14
    missing = [name for name in sub.choices if not re.search(r"\bkgd %s\b" % re.escape(name), text)]
    assert not missing, "commands of `kgd --help` in neither README.md nor docs/: %s" % missing


def test_every_option_of_kgd_help_is_documented():
    parser, _ = _parser()
    text = _all_docs()
    flags = [s for a in parser._actions for s in a.option_strings
             if s.startswith("--") and s not in ("--help", "--version")]
    assert "--max-tokens" in flags
    assert not [f for f in flags if f not in text], "options of `kgd --help` not documented"


def test_every_setting_is_documented():
    from kg.ops import config
    text = _all_docs()
    missing = [env for env, _, _ in config.DEFAULTS.values() if env not in text]
    assert not missing, "settings in neither README.md nor docs/: %s" % missing


def _routes_written(text):
    """(METHOD, path) for every `GET /api/x` or `GET/PUT /api/x?...` written in backquotes."""
    found = set()
    for methods, path in re.findall(r"`((?:GET|PUT|POST|DELETE)(?:/(?:GET|PUT|POST|DELETE))*) (/[^`\s?]*)", text):
        for m in methods.split("/"):
            found.add((m, path))
    return found


def test_every_rest_route_is_documented():
    from kg.api.openapi import OPENAPI
    routes = {(m.upper(), path) for path, ops in OPENAPI["paths"].items() for m in ops}
    assert ("PUT", "/api/nodes/{level}/{id}") in routes
    missing = sorted(routes - _routes_written(_all_docs()))
    assert not missing, "REST routes of kg/openapi.py in neither README.md nor docs/: %s" % missing


def test_the_reference_lists_every_rest_route():
    from kg.api.openapi import OPENAPI
    routes = {(m.upper(), path) for path, ops in OPENAPI["paths"].items() for m in ops}
    assert routes <= _routes_written(_read("docs/reference.md"))


def test_install_options_tools_and_addresses_are_documented():
    from kg.api import tools
    text = _all_docs()
    flags = set(re.findall(r"^\s+(--[a-z-]+)\)", _read("install.sh"), re.M))
    assert flags >= {"--prefix", "--port", "--no-service", "--no-client", "--dry-run", "--uninstall", "--desktop"}
    assert not sorted(f for f in flags if f not in text), "install.sh options not documented"
    names = [t["name"] for t in tools.TOOLS]
    assert len(names) == 8
    assert not [n for n in names if "mcp__kg__" + n not in text], "a tool's permissions.allow line is missing"
    assert "http://localhost" not in text  # localhost may be ::1, where kgd does not listen


# ---------------------------------------------------------------- the rule -> module table

def _table():
    text = _read("docs/reference.md")
    start = text.index("| contract | module |")
    return text[start:text.index("\n\n", start)]


def test_every_module_the_table_names_exists():
    named = set(re.findall(r"`(kg/[\w/.]+)`", _table()))
    assert named
    missing = sorted(p for p in named if not os.path.exists(os.path.join(REPO, p)))
    assert not missing, "docs/reference.md names modules that do not exist: %s" % missing


def test_every_module_is_in_the_table():
    named = set(re.findall(r"`(kg/[\w/.]+)`", _table()))
    kg = os.path.join(REPO, "kg")
    modules = {os.path.relpath(os.path.join(d, f), REPO) for d, _, files in os.walk(kg) for f in files
               if f.endswith(".py") and f != "__init__.py"}
    assert len(modules) > 60
    assert not sorted(modules - named), "modules missing from docs/reference.md's table: %s" % sorted(modules - named)


def test_the_table_cites_sections_the_contract_has():
    sections = set(re.findall(r"^## (\d+)\. ", _read("docs/contract.md"), re.M))
    cited = {n for row in _table().split("\n")[2:] for n in re.match(r"\| ([\d, ]+) ", row).group(1).split(", ")}
    assert cited and cited <= sections


# ---------------------------------------------------------------- links

def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(rel):
    seen, out = {}, set()
    in_code = False
    for line in _read(rel).split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.+)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def _links(rel):
    text = re.sub(r"```.*?```", "", _read(rel), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("rel", DOCS)
def test_links_lead_somewhere(rel):
    bad = []
    for link in _links(rel):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(rel), target)) if target else rel
        if not os.path.exists(os.path.join(REPO, path)):
            bad.append(link)
        elif anchor and (not path.endswith(".md") or anchor not in _anchors(path)):
            bad.append(link)
    assert not bad, "%s: links that lead nowhere: %s" % (rel, bad)


def test_the_slug_rule():
    assert _slug("One file: kgd.pyz") == "one-file-kgdpyz"
    assert _slug("5. Compaction (per graph, after every write)") == "5-compaction-per-graph-after-every-write"
    assert _slug("Codex CLI, Gemini CLI, Copilot CLI") == "codex-cli-gemini-cli-copilot-cli"


# ---------------------------------------------------------------- citations

def _python_files():
    for top in ("kg", "tests", "bench"):
        for folder, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__")]
            for f in files:
                if f.endswith(".py"):
                    yield os.path.join(folder, f)
    yield os.path.join(REPO, "kgd.py")


def _comments_and_docstrings(source):
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


ISSUE = re.compile(r"\bissues?[ -]\d", re.I)


def test_no_issue_numbers_in_comments_or_docstrings():
    found = []
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        if not ISSUE.search(source):  # most files: no need to parse
            continue
        for line, text in _comments_and_docstrings(source):
            if ISSUE.search(text):
                found.append("%s:%d" % (os.path.relpath(path, REPO), line))
    assert not found, "say the reason (or the contract section) instead of an issue number: %s" % found


def test_the_citation_check_sees_comments_and_docstrings():
    src = '"""Module (issue 7)."""\n\ndef f():\n    """Doc."""\n    return "issue 12"  # see issue 13\n'
    hits = [line for line, text in _comments_and_docstrings(src) if ISSUE.search(text)]
    assert sorted(hits) == [1, 5]
