"""`kgd bundle`: one zipapp holding kg/ (every file of the package: modules and the viewer's
kg/serve/ui/ files, no caches) plus kgd.py as __main__, and bytecode for the building Python, which
other versions ignore. Inside a .pyz it copies the archive it runs from.

Without -o it is written to ~/.cache/kgd/kgd.pyz ($XDG_CACHE_HOME/kgd/kgd.pyz): a build product that
can be made again, never dropped into the current folder (often a project's repository)."""

import os
import py_compile
import shutil
import tempfile
import zipapp

from .client import KG_DIR, entry_point, running_from_archive
from .console import say, warn

_SKIP_DIRS = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


def package_files(src_pkg):
    """Paths (relative to the package) of every file to ship, sorted; caches and editor files left out."""
    out = []
    for folder, dirs, files in os.walk(src_pkg):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in files:
            if name.startswith(".") or name.endswith(_SKIP_SUFFIXES):
                continue
            out.append(os.path.relpath(os.path.join(folder, name), src_pkg))
    return sorted(out)


def default_output():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kgd", "kgd.pyz")


def bundle(args, cfg):
    out = os.path.abspath(args.output or default_output())
    os.makedirs(os.path.dirname(out), exist_ok=True)
    here = entry_point()
    interpreter = args.python or "/usr/bin/env python3"
    tmp_out = out + ".part"
    if running_from_archive():
        if os.path.abspath(here) == out:
            warn("%s is the running archive; give another -o" % out)
            return 1
        zipapp.create_archive(here, tmp_out, interpreter=interpreter)
    else:
        src_pkg = KG_DIR
        with tempfile.TemporaryDirectory(prefix="kgd-bundle-") as tmp:
            for rel in package_files(src_pkg):
                dest = os.path.join(tmp, "kg", rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(os.path.join(src_pkg, rel), dest)
                if rel.endswith(".py") and not args.no_bytecode:
                    # zipimport uses kg/x.pyc when its magic number is this Python's; other versions
                    # fall back to the source. Unchecked hashes: no mtime comparison at import.
                    py_compile.compile(dest, cfile=dest + "c", dfile="kg/" + rel, doraise=True,
                                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            shutil.copy2(here, os.path.join(tmp, "__main__.py"))
            zipapp.create_archive(tmp, tmp_out, interpreter=interpreter, compressed=True)
    os.chmod(tmp_out, 0o755)
    os.replace(tmp_out, out)
    say("wrote %s (%d bytes); run it with: python3 %s%s" % (out, os.path.getsize(out), out,
                                                             "" if args.output else " (-o FILE writes it elsewhere)"))
    return 0
