"""Variant (proposed by the memory-quality work, not kgd's policy): pass 1 archives until the estimate is at most
max_tokens instead of 0.8 x max_tokens (contract section 5 fixes 0.8).

    python3 bench/memory_eval.py --seed 1,2 --policy kgd,lru --json before.json
    python3 bench/memory_eval.py --seed 1,2 --policy kgd,lru \\
        --plugin bench/variants/archive_to_budget.py --json after.json
    python3 bench/memory_eval.py --compare before.json after.json

It changes kg.compaction for every kgd run of this process (kgd and kgd-hooks alike)."""

from kg.core import compaction

compaction.ARCHIVE_TARGET = (1, 1)
