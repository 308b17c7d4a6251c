#!/usr/bin/env python3
"""kgd: knowledge-graph memory daemon for AI coding agents. `python3 kgd.py` serves on 127.0.0.1:8765."""

import sys

if sys.version_info < (3, 9):
    sys.stderr.write("kgd needs Python 3.9 or newer (this is %d.%d).\n" % sys.version_info[:2])
    sys.exit(2)

from kg.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
