"""The model and every rule that needs no I/O: plain data and a `now` in, results out.

Lives here: nodes and edges (model), one graph in memory (graph), compaction, search ranking, the
change log and the kg_sync diff (changelog), the kinds of failure (errors), text forms written in
several places (text), the `.kg/` line format and its one merge rule (kg_format), the three-way
merge with `.kg/` (reconcile), a shared project's sync state (team_state) and a person's use of
their knowledge (personal). Tested with tables of cases, never a server.
May import: kg.secrets only.
"""
