#!/usr/bin/env python3
"""kgd: knowledge-graph memory daemon for AI coding agents. `python3 kgd.py` serves on 127.0.0.1:8765."""

import sys

if sys.version_info < (3, 9):
    sys.stderr.write("kgd needs Python 3.9 or newer (this is %d.%d).\n" % sys.version_info[:2])
    sys.exit(2)

if __name__ == "__main__" and sys.argv[1:2] == ["hook"]:
    # Claude Code runs `kgd hook` once per session start: skip argparse and the rest of the CLI.
    from kg.ops.hook import main as hook_main

    sys.exit(hook_main(sys.argv[2:]))

from kg.ops.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
