"""The generator of the research family: a seeded world of fictional entities, its web pages and
a search engine over them, and multi-hop questions whose answers need the corrected facts.

A world holds the entities the questions walk through (the chain entities), similarly named
distractor entities on look-alike domains, and names mentioned without pages (stubs). Each
entity with pages has one main page; chain entities may also have archived copies on
look-alike domains (older, some facts wrong), dated correction notices (newer, superseding a
wrong fact of the main page, at level 3 sometimes twice) and stale notices (older than the
main page, so superseded by it). The answer always follows the most recently published
statement about the exact entity named.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from rl_compaction_envs.research.pools import POOLS, TAIL_SYLLABLES
from rl_compaction_envs.research.text import (
    ATTRS,
    CORRECTION_PREFIX,
    RELATIONS,
    VALUES,
    Question,
    correction_sentences,
    fact_sentence,
    render_page,
)

MAX_RESULTS = 10
MIN_RESULTS = 6
_MAX_PAGES_PER_ENTITY = MIN_RESULTS - 1  # so a search for an exact name lists every page about it
_SITE = {"object": ("science", "entry"), "person": ("name", "profile"), "org": ("org", "about"),
         "place": ("info", "guide")}  # fmt: skip
_ALT_TLD = {"science": "net", "name": "me", "org": "net", "info": "com"}
_NOUN = {"object": "object", "person": "person", "org": "organisation", "place": "town"}
_CODE_LETTERS = "ABCDEFGHJKLMNPRSTVWXYZ"


@dataclass(frozen=True)
class Level:
    """What a difficulty level sets: questions, hops per question, distractors and revisions."""

    questions: int
    hops: tuple[int, int]
    distractors: tuple[int, int]  # similarly named entities per chain entity
    archive_p: float  # chance a chain entity has an archived copy with wrong facts
    stale_p: float  # chance an uncorrected chain fact has a stale (older) correction notice
    double_p: float  # chance a correction is itself corrected later
    extra_correction_p: float  # chance of a correction on each chain fact beyond one per question
    sentences: int  # filler sentences of a main page at scale 1.0


LEVELS = {
    1: Level(2, (2, 2), (1, 1), 0.0, 0.0, 0.0, 0.15, 420),
    2: Level(4, (3, 3), (1, 2), 0.5, 0.25, 0.0, 0.25, 180),
    3: Level(6, (3, 4), (2, 3), 0.7, 0.35, 0.5, 0.35, 85),
}


@dataclass
class Entity:
    name: str
    type: str
    descriptor: str
    facts: dict[str, str] = field(default_factory=dict)  # the truth; relations hold entity names


@dataclass
class Page:
    url: str
    title: str
    date: str
    subject: str
    intro: str
    core: list[str]
    n_filler: int
    seed: int
    mentions: tuple[str, ...]
    rank: float  # tie-break among equal search scores


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


class World:
    """One generated instance: entities, pages, questions and their true answers."""

    def __init__(self, rng: random.Random, split: str, level: int, scale: float):
        self.rng = rng
        self.pools = POOLS[split]
        self.lv = LEVELS[level]
        self.n_filler = max(2, round(self.lv.sentences * scale))
        self.n_results = max(MIN_RESULTS, min(MAX_RESULTS, round(MAX_RESULTS * scale**0.25)))
        self.excerpt_sentences = 1 + min(2, round(2 * scale))
        self.entities: dict[str, Entity] = {}  # entities with pages
        self.names: set[str] = set()  # every name used (entities and stubs)
        self.roots: set[str] = set()
        self.pages: dict[str, Page] = {}
        self.questions: list[Question] = []
        self.answers: dict[str, str] = {}
        self.chain_steps: list[tuple[str, str]] = []  # (entity, attr) every question reads, in order
        self.look_alikes: dict[str, list[str]] = {}  # name -> similarly named entities with pages
        self._excerpts: dict[str, str] = {}
        self._build()

    # ------------------------------------------------------------------ names and values

    def _root(self) -> str:
        while True:
            tails = self.rng.sample(TAIL_SYLLABLES, 2 if self.rng.random() < 0.2 else 1)
            root = self.rng.choice(self.pools["first_syllables"]) + "".join(tails)
            if root not in self.roots:
                self.roots.add(root)
                return root

    def _fresh_name(self, etype: str) -> tuple[str, str]:
        """A new (name, descriptor) of an entity type, unused in this world."""
        while True:
            root = self._root()
            if etype == "person":
                name, desc = f"{self.rng.choice(self.pools['given_names'])} {root}", "research scientist"
            else:
                pattern, desc = self.rng.choice(self.pools[f"{etype}_kinds"])
                name = pattern.format(r=root)
            if name not in self.names:
                self.names.add(name)
                return name, desc

    def _similar_name(self, entity: Entity) -> tuple[str, str]:
        """A different entity's name one small edit away from `entity.name`."""
        for _ in range(100):
            name, choice = entity.name, self.rng.random()
            if entity.type == "person" and choice < 0.5:
                given = self.rng.choice([g for g in self.pools["given_names"] if not name.startswith(g + " ")])
                name = f"{given} {name.split(' ', 1)[1]}"
            elif entity.type in ("org", "place") and choice < 0.4:
                name = f"{self.rng.choice(self.pools['prefixes'])} {name}"
            else:  # change one letter of a root after its split-defining first syllable
                words = name.split(" ")
                i = self.rng.choice([k for k, w in enumerate(words) if any(w.startswith(r) for r in self.roots)])
                k = self.rng.randrange(3, len(words[i]))
                c = words[i][k]
                letters = "aeiou" if c in "aeiou" else "bdfgklmnprstvz"
                words[i] = words[i][:k] + self.rng.choice([x for x in letters if x != c]) + words[i][k + 1 :]
                name = " ".join(words)
            if name not in self.names:
                self.names.add(name)
                return name, entity.descriptor
        raise RuntimeError(f"no similar name found for {entity.name!r}")  # pragma: no cover

    def _value(self, attr: str) -> str:
        r = self.rng
        if attr == "discovery_year":
            return str(r.randint(1850, 2015))
        if attr == "birth_year":
            return str(r.randint(1935, 1995))
        if attr == "founding_year":
            return str(r.randint(1760, 1990))
        if attr == "designation":
            return f"{r.choice(_CODE_LETTERS)}{r.choice(_CODE_LETTERS)}-{r.randint(1000, 9999)}"
        if attr == "researcher_id":
            return f"R-{r.randint(1000, 9999)}-{r.randint(1000, 9999)}"
        if attr == "registry":
            return f"REG-{r.randint(100000, 999999)}"
        if attr == "population":
            return f"{r.randint(1200, 480000):,}"
        if attr == "elevation":
            return f"{r.randint(5, 2400):,}"
        raise KeyError(attr)

    def _wrong_value(self, attr: str, truth: str) -> str:
        """A plausible wrong value: a near miss for numbers and codes; for a relation, a look-alike
        of the true entity (an entity with its own pages) or a name without pages."""
        target = ATTRS[attr].target
        if target:
            if self.rng.random() < 0.5:
                return self._add_similar(self.entities[truth]).name
            return self._fresh_name(target)[0]
        for _ in range(100):
            if attr.endswith("_year"):
                wrong = str(int(truth) + self.rng.choice([-1, 1]) * self.rng.randint(1, 9))
            elif attr in ("population", "elevation"):
                n = int(truth.replace(",", ""))
                wrong = f"{max(1, n + self.rng.choice([-1, 1]) * max(1, n * self.rng.randint(2, 15) // 100)):,}"
            else:
                digits = [k for k, c in enumerate(truth) if c.isdigit()]
                k = self.rng.choice(digits)
                wrong = truth[:k] + self.rng.choice([d for d in "0123456789" if d != truth[k]]) + truth[k + 1 :]
            if wrong != truth:
                return wrong
        raise RuntimeError(f"no wrong value for {attr}")  # pragma: no cover

    def _add_similar(self, entity: Entity) -> Entity:
        similar = self._add_entity(*self._similar_name(entity), entity.type)
        self.look_alikes.setdefault(entity.name, []).append(similar.name)
        self.look_alikes.setdefault(similar.name, []).append(entity.name)
        return similar

    def _add_entity(self, name: str, descriptor: str, etype: str) -> Entity:
        e = Entity(name, etype, descriptor, {a: self._value(a) for a in VALUES[etype]})
        self.entities[name] = e
        return e

    def _date(self, first_year: int, last_year: int) -> str:
        r = self.rng
        return f"{r.randint(first_year, last_year):04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"

    def _dates(self, count: int, first_year: int, last_year: int) -> list[str]:
        """`count` distinct dates in increasing order."""
        dates: list[str] = []
        while len(dates) < count:
            if (d := self._date(first_year, last_year)) not in dates:
                dates.append(d)
        return sorted(dates)

    # ------------------------------------------------------------------ questions

    def _chain(self, qid: str) -> Question | None:
        """Walk a new chain from a new anchor; None (and nothing changed) if it revisits an entity."""
        r = self.rng
        hops = r.randint(*self.lv.hops)
        atype = "object" if r.random() < 0.7 else r.choice(["person", "org"])
        added: list[str] = []
        set_facts: list[tuple[Entity, str]] = []
        anchor = self._add_entity(*self._fresh_name(atype), atype)
        added.append(anchor.name)
        path, rels = [anchor], []
        for _ in range(hops):
            cur = path[-1]
            rel = r.choice(RELATIONS[cur.type])
            target = ATTRS[rel].target
            if rel in cur.facts:
                nxt = self.entities[cur.facts[rel]]
            else:
                pool = [e for e in self.entities.values() if e.type == target and e not in path]
                if pool and r.random() < 0.25:
                    nxt = r.choice(pool)
                else:
                    nxt = self._add_entity(*self._fresh_name(target), target)
                    added.append(nxt.name)
                cur.facts[rel] = nxt.name
                set_facts.append((cur, rel))
            if nxt in path:
                for e, k in set_facts:
                    del e.facts[k]
                for name in added:
                    del self.entities[name]
                return None
            path.append(nxt)
            rels.append(rel)
        final = r.choice(VALUES[path[-1].type])
        return Question(qid, anchor.name, (*rels, final))

    def _build(self) -> None:
        lv, r = self.lv, self.rng
        while len(self.questions) < lv.questions:
            q = self._chain(f"Q{len(self.questions) + 1}")
            if q is not None:
                self.questions.append(q)
        steps_of: dict[str, list[tuple[str, str]]] = {}
        for q in self.questions:
            cur, steps = q.anchor, []
            for key in q.chain:
                steps.append((cur, key))
                cur = self.entities[cur].facts[key]
            self.answers[q.qid] = cur
            steps_of[q.qid] = steps
            self.chain_steps += [s for s in steps if s not in self.chain_steps]
        chain_entities = list(dict.fromkeys(e for e, _ in self.chain_steps))

        # Revisions of the facts the questions read; every question reads at least one (page cap
        # permitting). Each
        # entity keeps under MIN_RESULTS pages so that searching its name lists them all.
        n_pages = dict.fromkeys(chain_entities, 1)
        shown: dict[tuple[str, str], str] = {}  # what the main page says instead of the truth
        revisions: dict[tuple[str, str], list[str]] = {}  # values of the newer notices, oldest first
        for q in self.questions:
            steps = steps_of[q.qid]
            forced = None if any(s in revisions for s in steps) else r.randrange(len(steps))
            for i, step in enumerate(steps):
                room = _MAX_PAGES_PER_ENTITY - n_pages[step[0]]
                if step in revisions or room < 1 or not (i == forced or r.random() < lv.extra_correction_p):
                    forced = i + 1 if i == forced and i + 1 < len(steps) else forced
                    continue
                truth = self.entities[step[0]].facts[step[1]]
                shown[step] = self._wrong_value(step[1], truth)
                revisions[step] = [truth]
                if room >= 2 and r.random() < lv.double_p:
                    first = self._wrong_value(step[1], truth)
                    if first != shown[step]:
                        revisions[step].insert(0, first)
                n_pages[step[0]] += len(revisions[step])
        stale: dict[tuple[str, str], str] = {}
        for step in self.chain_steps:
            if step not in revisions and n_pages[step[0]] < _MAX_PAGES_PER_ENTITY and r.random() < lv.stale_p:
                stale[step] = self._wrong_value(step[1], self.entities[step[0]].facts[step[1]])
                n_pages[step[0]] += 1
        archives: dict[str, dict[str, str]] = {}  # entity -> the facts its archived copy gets wrong
        for name in chain_entities:
            e = self.entities[name]
            if n_pages[name] < _MAX_PAGES_PER_ENTITY and r.random() < lv.archive_p:
                mine = [a for (n, a) in self.chain_steps if n == name]
                archives[name] = {
                    attr: self._wrong_value(attr, e.facts[attr])
                    for attr in dict.fromkeys([*mine, r.choice(list(e.facts))])
                }
        for name in chain_entities:
            for _ in range(r.randint(*lv.distractors)):
                self._add_similar(self.entities[name])
        for e in list(self.entities.values()):  # relations no question follows: names without pages
            for rel in RELATIONS[e.type]:
                e.facts.setdefault(rel, self._fresh_name(ATTRS[rel].target)[0])

        for e in list(self.entities.values()):
            facts = {k: shown.get((e.name, k), v) for k, v in e.facts.items()}
            self._main_page(e, facts, self._date(2016, 2020))
            for attr in e.facts:
                if (e.name, attr) in revisions:
                    values = revisions[(e.name, attr)]
                    old = shown[(e.name, attr)]
                    for value, date in zip(values, self._dates(len(values), 2021, 2025), strict=True):
                        self._notice(e, attr, old, value, date)
                        old = value
                if (e.name, attr) in stale:
                    self._notice(e, attr, e.facts[attr], stale[(e.name, attr)], self._date(2009, 2015), True)
            if e.name in archives:
                self._archive(e, {**facts, **archives[e.name]}, self._date(2008, 2015))

    # ------------------------------------------------------------------ pages

    def _add_page(self, page: Page) -> None:
        url, n = page.url, 2
        while page.url in self.pages:
            page.url, n = f"{url}-{n}", n + 1
        self.pages[page.url] = page

    def _main_page(self, e: Entity, facts: dict[str, str], date: str, url: str | None = None) -> Page:
        r = self.rng
        tld, path = _SITE[e.type]
        core = [fact_sentence(k, e.name, v, r.randrange(2)) for k, v in facts.items()]
        others = self.look_alikes.get(e.name, [])
        if others and r.random() < 0.5:
            core.append(f"{e.name} is sometimes confused with {r.choice(others)}, a different {_NOUN[e.type]}.")
        mentions = tuple(facts[k] for k in RELATIONS[e.type])
        page = Page(
            url or f"https://{_slug(e.name)}.{tld}/{path}", e.name, date, e.name,
            f"{e.name} is {_article(e.descriptor)}.", core, self._filler(), r.getrandbits(64), mentions, r.random(),
        )  # fmt: skip
        self._add_page(page)
        return page

    def _archive(self, e: Entity, facts: dict[str, str], date: str) -> None:
        tld, path = _SITE[e.type]
        host = self.rng.choice(
            [_slug(e.name).replace("-", "") + f".{tld}", f"{_slug(e.name)}.{_ALT_TLD[tld]}",
             f"{_slug(e.name)}-archive.{tld}"]
        )  # fmt: skip
        page = self._main_page(e, facts, date, url=f"https://{host}/{path}")
        page.intro += " This page is an archived copy of an earlier profile."

    def _notice(self, e: Entity, attr: str, old: str, new: str, date: str, stale: bool = False) -> None:
        tld, _ = _SITE[e.type]
        host = f"{_slug(e.name)}.{_ALT_TLD[tld] if stale else tld}"
        core = [correction_sentences(attr, e.name, old, new)]
        mentions = (old, new) if ATTRS[attr].target else ()
        self._add_page(Page(
            f"https://{host}/news/correction-{date}", f"{CORRECTION_PREFIX}{e.name}", date, e.name,
            f"This notice corrects an earlier article about {e.name}.", core, max(1, self.n_filler // 8),
            self.rng.getrandbits(64), mentions, self.rng.random(),
        ))  # fmt: skip

    def _filler(self) -> int:
        return max(2, round(self.n_filler * self.rng.uniform(0.85, 1.15)))

    def render(self, url: str) -> str:
        p = self.pages[url]
        return render_page(
            title=p.title, url=p.url, date=p.date, intro=p.intro, core=p.core, n_filler=p.n_filler,
            rng=random.Random(p.seed), pools=self.pools,
        )  # fmt: skip

    # ------------------------------------------------------------------ search

    def search(self, query: str) -> list[dict[str, str]]:
        """Pages ranked by how well their title (then the names they mention) match the query."""
        q, qt = _norm(query), _tokens(query)
        scored = []
        for p in self.pages.values():
            score = 2.0 * len(qt & _tokens(p.title))
            if q and q in _norm(p.title):
                score += 10
            if q and _norm(p.subject) == q:
                score += 6
            mention_text = " ".join(p.mentions)
            score += 0.5 * len(qt & _tokens(mention_text))
            if q and any(q in _norm(m) for m in p.mentions):
                score += 3
            if score > 0:
                scored.append((-score, p.rank, p))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [
            {"title": p.title, "url": p.url, "excerpt": self.excerpt(p.url)} for _, _, p in scored[: self.n_results]
        ]

    def excerpt(self, url: str) -> str:
        """The page's date and its first sentences (more of them at larger scales)."""
        if url not in self._excerpts:
            first = self.render(url).split("\n\n")[1]
            lead = " ".join(s.strip() for s in re.findall(r"[^.]+\.", first)[: self.excerpt_sentences])
            self._excerpts[url] = f"{self.pages[url].date} — {lead}"
        return self._excerpts[url]
