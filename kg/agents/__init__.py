"""Hook events in, context out (contract sections 8 and 11): the one ambient loop of every agent.

Lives here: each agent's events, fields and answer shape (dialects), the loop (loop), the preload
(preload), recall of a prompt or a file (recall), file recall's order (file_order) and the parts whose
code holds a prompt's or an edit's words (part_code), evidence of value (value), nudges to save
knowledge (nudges) and the files a shell command reads (shell_files). The store is handed in by the daemon's wiring.
May import: kg.core and kg.secrets only, so every rule here is tested with a stub store.
"""
