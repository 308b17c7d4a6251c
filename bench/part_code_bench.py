"""What the parts' code hint (kg/agents/part_code.py) costs the hooks, on a big project: 300 Python
files of 20 functions each (real files on disk), 8,000 project nodes about those functions (touches
`PATH#NAME`) and 2,000 user nodes, in-process through kg.agents.loop.handler on a real Store.

Run from the repository root: python3 bench/part_code_bench.py
Rows, each with the hint on and off (node_scores answering nothing) in the same run, alternated:
- SessionStart and the thread that reads the files; the first prompt after it; a prompt on an empty
  cache (every file read and parsed: what the thread spares the first prompt);
- later prompts (files kept by size and modification time; only what changed is read again);
- an Edit's PostToolUse (its words scored over every kept file) and a Read's.
p50 / p99 over many calls. Machines here are noisy: read the ratios, measured in one run.
"""

import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kg.agents import loop, part_code  # noqa: E402
from kg.memory.store import Settings, Store  # noqa: E402
from kg.travel import team  # noqa: E402

FILES, FUNCS = 300, 20
VOCAB = ["w%d" % i for i in range(5000)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(VOCAB))]
FILLER = "the a this is we should when how what why fix add please make sure that it works".split()


def words(rng, k):
    return rng.choices(VOCAB, WEIGHTS, k=k)


def source(rng, f):
    out = []
    for k in range(FUNCS):
        body = ["    %s = %s(%s)" % tuple(words(rng, 3)) for _ in range(12)]
        out.append("def f%d_%s(x):\n%s\n    return x\n" % (k, "_".join(words(rng, 2)), "\n".join(body)))
    return "\n\n".join(out)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def row(name, on, off):
    print("%-40s on p50 %7.2f ms p99 %7.2f | off p50 %7.2f ms p99 %7.2f | x%.2f at p50" % (
        name, pct(on, 0.5), pct(on, 0.99), pct(off, 0.5), pct(off, 0.99), pct(on, 0.5) / max(1e-9, pct(off, 0.5))))


def main():
    rng = random.Random(11)
    tmp = tempfile.mkdtemp(prefix="kgd-part-code-bench-")
    real = part_code.node_scores
    try:
        proj = os.path.join(tmp, "proj")
        os.makedirs(os.path.join(proj, ".git"))
        os.makedirs(os.path.join(proj, "kg"))
        names = {}
        size = 0
        for f in range(FILES):
            text = source(rng, f)
            size += len(text)
            with open(os.path.join(proj, "kg", "m%d.py" % f), "w") as fh:
                fh.write(text)
            names[f] = [line[4:line.index("(")] for line in text.split("\n") if line.startswith("def ")]
        store = team.install(Store(os.path.join(tmp, "root"), Settings(max_tokens=10 ** 9))).open()
        s = store.start_session(proj)
        with store.lock:
            for level, n in (("user", 2000), ("project", 8000)):
                g = store.graph(level, s)
                for i in range(n):
                    f = rng.randrange(FILES)
                    nid = "%s-%d" % (level[0], i)
                    touches = ["kg/m%d.py#%s" % (f, rng.choice(names[f]))] if level == "project" else []
                    g.nodes[nid] = {"id": nid, "gist": " ".join(words(rng, 12)), "notes": [" ".join(words(rng, 20))],
                                    "touches": touches, "_created_ts": 1.0, "_write_ts": 1.0, "_read_ts": None,
                                    "_archived": False, "_orphaned_ts": None}
                g.recount()
        print("project: %d files, %.1f MB, %d parts; nodes: 8,000 project (part touches) + 2,000 user" % (
            FILES, size / 1e6, FILES * FUNCS))
        handle = loop.handler(store, env={})
        base = {"session_id": "bench", "transcript_path": "/t", "cwd": proj}
        t = time.perf_counter()
        handle(dict(base, hook_event_name="SessionStart", source="startup"))
        for th in threading.enumerate():
            if th.name in ("kgd-recall-index", "kgd-part-code"):
                th.join()
        print("%-40s %7.0f ms (the files read on a thread)" % ("SessionStart, then its threads done",
                                                                (time.perf_counter() - t) * 1000))

        def prompt():
            return " ".join(rng.choice(FILLER) for _ in range(6)) + " " + " ".join(words(rng, 6))

        def timed(payload):
            t = time.perf_counter()
            handle(dict(base, **payload))
            return (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        handle(dict(base, hook_event_name="UserPromptSubmit", prompt=prompt()))
        print("%-40s on %7.0f ms" % ("first prompt, after the warm thread", (time.perf_counter() - t) * 1000))
        part_code.CACHE.files.clear()
        t = time.perf_counter()
        handle(dict(base, hook_event_name="UserPromptSubmit", prompt=prompt()))
        first = (time.perf_counter() - t) * 1000
        part_code.node_scores = lambda *a, **kw: {}
        t = time.perf_counter()
        handle(dict(base, hook_event_name="UserPromptSubmit", prompt=prompt()))
        print("%-40s on %7.0f ms | off %7.0f ms" % ("a prompt on an empty cache", first,
                                                     (time.perf_counter() - t) * 1000))
        rows = {"prompt": ([], []), "edit": ([], []), "read": ([], [])}
        for k in range(600):
            on = k % 2 == 0
            part_code.node_scores = real if on else (lambda *a, **kw: {})
            col = 0 if on else 1
            rows["prompt"][col].append(timed({"hook_event_name": "UserPromptSubmit", "prompt": prompt()}))
            f = rng.randrange(FILES)
            path = os.path.join(proj, "kg", "m%d.py" % f)
            rows["read"][col].append(timed({"hook_event_name": "PostToolUse", "tool_name": "Read",
                                            "tool_input": {"file_path": path}, "tool_response": {}}))
            old = "    return x"
            rows["edit"][col].append(timed({"hook_event_name": "PostToolUse", "tool_name": "Edit",
                                            "tool_input": {"file_path": path, "old_string": old,
                                                           "new_string": old + " or " + " ".join(words(rng, 3))},
                                            "tool_response": {}}))
        row("UserPromptSubmit, warm cache", *rows["prompt"])
        row("PostToolUse Read", *rows["read"])
        row("PostToolUse Edit", *rows["edit"])
        store.close()
    finally:
        part_code.node_scores = real
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
