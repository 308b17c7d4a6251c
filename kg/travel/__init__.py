"""Memory leaving the machine (contract section 9): the team's `.kg/` folder and the personal remote.

Lives here: a shared project's `.kg/` (team: the store's load, pickup, export and share steps;
team_prepared: read and parsed before the store's lock) and the personal remote (remote: the
worker; remote_schedule: when; remote_repo: the git round on ROOT/sync/; remote_bridge: graphs <->
the sync folder; remote_mirror: each graph's folder, base and records; remote_files: its files,
costing only changed lines). A client of memory's write path: it changes graphs only through the
store.
May import: kg.memory, kg.disk, kg.core, kg.secrets.
"""
