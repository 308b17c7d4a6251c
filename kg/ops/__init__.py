"""What a person runs (contract section 1): the command line and every operator command.

Lives here: the command line and settings (cli, config, suggest), the command table (commands), what
a command prints (console), talking to a running daemon (client), status / start / stop (lifecycle),
doctor, export / import (backup), show / search (browse), bundle, the stdio bridge (stdio), the
command hook (hook), sync, share, reading a root read-only (disk_view), and in setup/ each agent's
configuration files. A command imports what it needs when it runs, so `kgd hook` stays tiny.
May import: every package of kg.
"""
