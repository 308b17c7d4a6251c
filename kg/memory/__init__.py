"""The loaded graphs and the ONE write path: what every tool call, hook and pickup changes through.

Lives here: the store and its operations (store), the registry of loaded graphs and slug claims
(registry), the write path (write_path), the secrets gate a write passes first (gate), sessions,
project roots (projects), a project's identity and which graph belongs to it (repo_id, identities),
running git (git_runner, the only place kgd runs it), the maintenance loop, and requests-first
(foreground). Memory leaving the machine plugs in from above (travel/, wired by serve/app.py).
May import: kg.disk, kg.core, kg.secrets; never travel/, api/, serve/ or ops/.
"""
