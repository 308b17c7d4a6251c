"""The storage root's files (contract section 4): where they live, how they are written, read and healed.

Lives here: the layout and project slugs (layout), atomic writes, healing loads and the root's lock
(files), a graph's journal with group commit (journal), and one graph's durability: its file, its
journal and whether they need a fold (durable). The only package besides travel/ that writes files.
May import: kg.core and kg.secrets.
"""
