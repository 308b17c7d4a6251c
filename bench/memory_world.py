"""The simulated world of bench/memory_eval.py: a project, its topics, the facts an agent learns
and the schedule of sessions that need them. Pure and seeded: the same seed gives the same world,
whatever memory policy is later run against it.

Rules owned here:
- Topics have their own vocabulary and folder; they go hot for a few days to a few weeks, then
  cold, and come back. Conventions (project level) are needed in most sessions; user-level
  lessons are needed now and then in any topic.
- The user graph also receives lessons learnt in other projects ("elsewhere": written by this
  project's sessions, as the simulation has one project, but almost never needed here).
- A fact emerges on a day and is discovered by the first session that works on its topic after
  that day; only discovered facts can be needed. Needs, discoveries, file reads, the prompt, and
  each need's agent decisions (search or not, update or not) are drawn here, once, so that every
  policy faces exactly the same work.
- The agent's choices are drawn per need: it notices an id of the fact in a list it was shown
  (p 0.85), searches when it did not (p 0.8), updates the node after using it (p 0.1).
- A need is warm when its fact was touched (discovered, needed or updated) in the last 14 days.
- Two kinds of world (`kind`): "conventions" (the default) has 30 cross-topic conventions, each
  linked to 3-6 topics, needed now and then in sessions on those topics and linked from their
  facts; "classic" keeps the first world (8 conventions, each needed in 30 % of all sessions) so
  that older figures can be reproduced.
"""

import random

DAY = 86400.0
WARM_S = 14 * DAY
KINDS = ("conventions", "classic")
CONVENTION_COUNT = 30
CONVENTION_EARLY = 10          # known in the first 30 days; the rest emerge as the project grows
CONVENTION_WEIGHTS = [0.06, 0.1, 0.15, 0.25]  # p of a need in a session on one of its topics
CONVENTION_ELSEWHERE = 0.01    # p of a need in a session on another topic
CONVENTION_LINK = 0.35         # p that a topic fact links to one of its topic's conventions

TOPICS = [
    ("auth", "token session login oauth refresh scope password cookie jwt expiry"),
    ("billing", "invoice stripe refund tax currency subscription webhook coupon proration ledger"),
    ("search", "index query ranking tokenizer stemming shard synonym facet relevance reindex"),
    ("ui", "component layout modal theme hydration router form accessibility tooltip render"),
    ("deploy", "docker helm rollout canary terraform secret pipeline artifact rollback cluster"),
    ("db", "migration schema transaction deadlock replica vacuum constraint orm pool btree"),
    ("cache", "redis ttl eviction invalidation warmup stampede key serializer hit memo"),
    ("notify", "email template queue retry sms digest unsubscribe bounce push throttle"),
    ("metrics", "prometheus histogram label dashboard alert latency counter scrape grafana slo"),
    ("i18n", "locale translation plural gettext rtl timezone catalog fallback format unicode"),
    ("api", "endpoint pagination version openapi ratelimit cors payload status idempotency client"),
    ("jobs", "worker cron backoff celery lock batch scheduler heartbeat deadletter concurrency"),
]
CONVENTIONS = ("conventions", "lint format commit changelog typing review branch fixture logging docstring",
               ["pyproject.toml", "CONTRIBUTING.md", "Makefile", "tests/conftest.py", "setup.cfg"])
LESSONS = ("lessons", "git rebase shell quoting venv pytest debugger regex encoding flaky bisect profiling ssh "
                      "locale signals")
ELSEWHERE = ("elsewhere", "npm webpack gradle xcode cargo kotlin swift css android terraform kubectl make cmake "
                         "docker yarn")
SUFFIXES = ["guard", "limit", "window", "policy", "handler", "mode", "flag", "budget", "map", "check",
            "hook", "marker", "offset", "prefix", "table", "queue"]
GISTS = [
    "{ident} must be set before {w1} {w2} runs, or {w3} fails silently",
    "{W1} {w2} is driven by {ident}; keep it in step with {w3}",
    "Never change {w1} {w2} without updating {ident}, {w3} depends on it",
    "{W1} uses {ident} for {w2}; {w3} breaks when it is missing",
    "The {w1} {w2} bug came from {ident}: check {w3} first",
    "{ident} decides how {w1} treats {w2}; {w3} reads it too",
]
NOTES = [
    "Seen in {file}: {w2} with {ident} at {num} made {w3} time out.",
    "Why: {w1} caches {w2} per request, so {ident} has to be known before the first call.",
    "Gotcha: the {w3} tests pass locally but fail in CI unless {ident} is reset between cases.",
    "Decision ({num}): keep {ident} explicit rather than derived from {w1}; the {w2} path needs it.",
    "Related: {w3} retries mask the problem; look for {ident} in the logs first.",
]
FILLER = "please fix the failing case add handle update latest check why does it broke again make it work".split()


class Fact:
    __slots__ = ("fid", "level", "topic", "node_id", "gist", "notes", "touches", "words", "ident",
                 "emerge_day", "weight", "related", "links")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class Need:
    __slots__ = ("fid", "notice", "search", "query", "update", "warm")

    def __init__(self, fid, notice, search, query, update, warm):
        self.fid, self.notice, self.search, self.query = fid, notice, search, query
        self.update, self.warm = update, warm


class Session:
    __slots__ = ("index", "t", "topic", "needs", "discover", "files", "prompt")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class World:
    """Facts and the session schedule; `next_needs[fid]` lists need times (for the oracle)."""

    def __init__(self, seed, days, kind="conventions"):
        if kind not in KINDS:
            raise ValueError("world kind %r: choose from %s" % (kind, ", ".join(KINDS)))
        self.seed = seed
        self.days = days
        self.kind = kind
        rnd = random.Random("world:%s" % seed)
        self.topics = {}
        for name, vocab in TOPICS:
            words = vocab.split()
            files = ["src/%s/%s.py" % (name, w) for w in words[:4]] + ["tests/%s/test_%s.py" % (name, words[0])]
            self.topics[name] = (words, files)
        self.topics[CONVENTIONS[0]] = (CONVENTIONS[1].split(), CONVENTIONS[2])
        self.topics[LESSONS[0]] = (LESSONS[1].split(), [])
        self.topics[ELSEWHERE[0]] = (ELSEWHERE[1].split(), [])
        self.files = sorted({f for _, files in self.topics.values() for f in files})
        self.facts = {}
        self._prefixes = set()
        self._idents = set()
        for name, _ in TOPICS:
            for i in range(rnd.randint(24, 36)):
                # the first few facts of a topic are its core: they emerge early and are needed more
                core = i < 4
                self._fact(rnd, "project", name, rnd.uniform(0, 20) if core else rnd.uniform(0, days * 0.9),
                           3.0 if core else 1.0)
        names = [n for n, _ in TOPICS]
        if kind == "classic":
            for i in range(8):
                self._fact(rnd, "project", CONVENTIONS[0], rnd.uniform(0, 45) if i < 6 else rnd.uniform(45, days), 1.0)
        else:
            for i in range(CONVENTION_COUNT):
                early = i < CONVENTION_EARLY
                f = self._fact(
                    rnd,
                    "project",
                    CONVENTIONS[0],
                    rnd.uniform(0, 30) if early else rnd.uniform(30, days * 0.9),
                    rnd.choice(CONVENTION_WEIGHTS),
                    rnd.choice([[]] * 10 + [[x] for x in CONVENTIONS[2]]),
                )
                f.links = sorted(rnd.sample(names, rnd.randint(3, 6)))
        for i in range(28):
            self._fact(rnd, "user", LESSONS[0], rnd.uniform(-30, days), rnd.choice([0.03, 0.06, 0.1, 0.2]))
        for i in range(60):
            self._fact(rnd, "user", ELSEWHERE[0], rnd.uniform(-60, days), 0.01)
        for f in self.facts.values():
            same = sorted(g.fid for g in self.facts.values() if g.topic == f.topic and g.fid != f.fid)
            f.related = rnd.sample(same, min(2, len(same)))
        if kind != "classic":
            for f in sorted(self.facts.values(), key=lambda f: f.fid):
                if f.topic == CONVENTIONS[0]:  # written with links to where it applies
                    where = sorted(g.fid for g in self.facts.values() if g.topic in f.links and g.weight > 1)
                    f.related = rnd.sample(where, min(3, len(where)))
                if f.topic in names and rnd.random() < CONVENTION_LINK:
                    convs = sorted(
                        g.fid for g in self.facts.values() if g.topic == CONVENTIONS[0] and f.topic in g.links
                    )
                    if convs:
                        f.related.append(rnd.choice(convs))
        self.sessions = self._schedule(rnd)
        self.need_times = {}
        for s in self.sessions:
            for n in s.needs:
                self.need_times.setdefault(n.fid, []).append(s.index)

    def _fact(self, rnd, level, topic, emerge_day, weight, touches=None):
        words, files = self.topics[topic]
        for _ in range(100):
            w1, w2, w3 = rnd.sample(words, 3)
            ident = "%s_%s" % (w1, rnd.choice(SUFFIXES))
            if ident in self._idents:
                continue
            gist = rnd.choice(GISTS).format(ident=ident, w1=w1, W1=w1.capitalize(), w2=w2, w3=w3)
            if gist[:28] in self._prefixes:
                continue
            break
        else:
            raise RuntimeError("world generation could not find a unique fact")
        self._idents.add(ident)
        self._prefixes.add(gist[:28])
        fid = "f%03d" % len(self.facts)
        if touches is None:
            touches = rnd.sample(files, min(len(files), rnd.choice([0, 1, 1, 2]))) if files else []
        notes = [rnd.choice(NOTES).format(file=(touches or ["the logs"])[0], w1=w1, w2=w2, w3=w3, ident=ident,
                                          num=rnd.randint(2, 900))
                 for _ in range(rnd.choice([1, 1, 2]))]
        node_id = "%s-%s-%s" % (
            {"lessons": "lesson", "elsewhere": "tip"}.get(topic, topic),
            ident.replace("_", "-"),
            w2,
        )
        self.facts[fid] = Fact(fid=fid, level=level, topic=topic, node_id=node_id, gist=gist, notes=notes,
                               touches=sorted(touches), words=[w1, w2, w3], ident=ident, emerge_day=emerge_day,
                               weight=weight, related=[], links=[])
        return self.facts[fid]

    def _schedule(self, rnd):
        """Hot periods of 2 topics at a time; 0-4 sessions a day; needs and discoveries."""
        names = [n for n, _ in TOPICS]
        hot = {}  # topic -> last hot day
        for t in rnd.sample(names, 2):
            hot[t] = rnd.randint(4, 15)
        discovered, last_touch = set(), {}
        sessions = []
        for day in range(self.days):
            for t in sorted(hot):
                if day >= hot[t]:
                    del hot[t]
                    cold = [n for n in names if n not in hot and n != t]
                    hot[rnd.choice(cold)] = day + rnd.randint(4, 18)
            weekend = day % 7 in (5, 6)
            count = rnd.choice([0, 0, 1]) if weekend else rnd.choice([1, 2, 2, 3, 3, 4])
            hot_list = sorted(hot)
            for k in range(count):
                t = day * DAY + 9 * 3600 + k * 2.5 * 3600 + rnd.uniform(0, 3600)
                topic = rnd.choice(names) if rnd.random() < 0.1 else rnd.choice(hot_list)
                sessions.append(self._session(rnd, len(sessions), t, day, topic, discovered, last_touch))
        return sessions

    def _session(self, rnd, index, t, day, topic, discovered, last_touch):
        words, files = self.topics[topic]

        def known(tp):
            return sorted(f for f in discovered if self.facts[f].topic == tp)

        def pick(pool, k):
            out = []
            pool = list(pool)
            while pool and len(out) < k:
                w = [self.facts[f].weight * (2.0 if t - last_touch.get(f, -1e18) < WARM_S else 1.0) for f in pool]
                f = rnd.choices(pool, w)[0]
                pool.remove(f)
                out.append(f)
            return out

        need_ids = pick(known(topic), rnd.randint(2, 5))
        if self.kind == "classic":
            need_ids += [f for f in known(CONVENTIONS[0]) if rnd.random() < 0.3]
        else:
            need_ids += [
                f
                for f in known(CONVENTIONS[0])
                if rnd.random() < (self.facts[f].weight if topic in self.facts[f].links else CONVENTION_ELSEWHERE)
            ]
        need_ids += [f for tp in (LESSONS[0], ELSEWHERE[0]) for f in known(tp) if rnd.random() < self.facts[f].weight]
        needs = []
        for fid in need_ids:
            f = self.facts[fid]
            q = rnd.sample(f.words, 2) + ([f.ident] if rnd.random() < 0.5 else [])
            warm = t - last_touch.get(fid, -1e18) < WARM_S
            needs.append(Need(fid, rnd.random() < 0.85, rnd.random() < 0.8, " ".join(q), rnd.random() < 0.1, warm))
        fresh = [f.fid for f in self.facts.values() if f.fid not in discovered and f.emerge_day <= day]
        discover = []
        for tp, k in ((topic, rnd.choice([0, 1, 1, 2])), (CONVENTIONS[0], rnd.random() < 0.3),
                      (LESSONS[0], rnd.random() < 0.15), (ELSEWHERE[0], rnd.random() < 0.25)):
            pool = sorted(f for f in fresh if self.facts[f].topic == tp)
            discover += pool[:int(k)]
        for fid in need_ids + discover:
            last_touch[fid] = t
        discovered.update(discover)
        read = set()
        for fid in need_ids:
            f = self.facts[fid]
            if f.touches and rnd.random() < 0.6:
                read.add(rnd.choice(f.touches))
        if files:
            read.update(rnd.sample(files, rnd.randint(1, 2)))
        prompt = [rnd.choice(FILLER), rnd.choice(FILLER)] + rnd.sample(words, 2)
        for fid in need_ids:
            f = self.facts[fid]
            if f.topic == topic and rnd.random() < 0.5:
                prompt.append(rnd.choice([f.ident] + f.words[:2]))
        rnd.shuffle(prompt)
        return Session(index=index, t=t, topic=topic, needs=needs, discover=discover, files=sorted(read),
                       prompt=" ".join(prompt))
