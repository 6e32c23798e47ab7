"""Text formats of the research family: facts, pages, corrections, questions and answers.

The generator writes and the oracle reads with the same tables here, so every fact sentence
has a pattern that recovers its value exactly. Filler sentences are built from a grammar whose
words never form a fact pattern, never name an entity and never open with "Its " or "The town ";
every fact and correction sentence names its page's subject or opens with one of those, which is
how the oracle's evolve code (evolve.js) tells the sentences to keep from filler.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

ENTITY_TYPES = ("object", "person", "org", "place")
TASK_MARKER = "RESEARCH TASK"
END_MARKER = "[end of page]"
CORRECTION_PREFIX = "Correction: "

_NAME = r"([^.]+)"
_YEAR = r"(\d{4})"
_CODE = r"([A-Z0-9-]+)"
_NUMBER = r"(\d[\d,]*)"


@dataclass(frozen=True)
class Attr:
    """One fact an entity has: a relation to another entity (`target` set) or a plain value."""

    key: str
    label: str  # how questions and correction notices name it
    owner: str  # entity type that has it
    target: str | None  # entity type of a relation's value; None for plain values
    templates: tuple[str, str]  # fact sentences; {e} = page subject, {v} = value
    patterns: tuple[str, ...]  # regexes whose group 1 is the value


ATTRS: dict[str, Attr] = {
    a.key: a
    for a in (
        Attr("discoverer", "discoverer", "object", "person",
             ("{e} was first described by {v}.", "Credit for the discovery of {e} belongs to {v}."),
             (rf"was first described by {_NAME}\.", rf"Credit for the discovery of [^.]+ belongs to {_NAME}\.")),
        Attr("discovery_year", "year of discovery", "object", None,
             ("The discovery of {e} was announced in {v}.", "{e} was first recorded in {v}."),
             (rf"was announced in {_YEAR}\.", rf"was first recorded in {_YEAR}\.")),
        Attr("designation", "catalogue designation", "object", None,
             ("Its catalogue designation is {v}.", "{e} is listed in the catalogue under the designation {v}."),
             (rf"catalogue designation is {_CODE}\.", rf"under the designation {_CODE}\.")),
        Attr("employer", "employer", "person", "org",
             ("{e} holds a research post at {v}.", "{e} is currently employed by {v}."),
             (rf"holds a research post at {_NAME}\.", rf"is currently employed by {_NAME}\.")),
        Attr("birthplace", "birthplace", "person", "place",
             ("{e} was born in the town of {v}.", "{e} is a native of {v}."),
             (rf"was born in the town of {_NAME}\.", rf"is a native of {_NAME}\.")),
        Attr("birth_year", "birth year", "person", None,
             ("{e} was born in {v}.", "The birth of {e} was registered in {v}."),
             (rf"was born in {_YEAR}\.", rf"birth of [^.]+ was registered in {_YEAR}\.")),
        Attr("researcher_id", "researcher ID", "person", None,
             ("{e} publishes under researcher ID {v}.", "{e} is registered under researcher ID {v}."),
             (rf"under researcher ID {_CODE}\.",)),
        Attr("founding_year", "founding year", "org", None,
             ("{e} was founded in {v}.", "{e} was established in {v}."),
             (rf"was (?:founded|established) in {_YEAR}\.",)),
        Attr("registry", "registry number", "org", None,
             ("{e} is entered in the public registry as number {v}.", "Its registry number is {v}."),
             (rf"public registry as number {_CODE}\.", rf"Its registry number is {_CODE}\.")),
        Attr("headquarters", "headquarters town", "org", "place",
             ("{e} has its headquarters in {v}.", "The main offices of {e} are in {v}."),
             (rf"has its headquarters in {_NAME}\.", rf"main offices of [^.]+ are in {_NAME}\.")),
        Attr("director", "director", "org", "person",
             ("{e} is directed by {v}.", "The current director of {e} is {v}."),
             (rf"is directed by {_NAME}\.", rf"The current director of [^.]+ is {_NAME}\.")),
        Attr("population", "population", "place", None,
             ("{e} has a population of {v}.", "The town counts {v} residents."),
             (rf"has a population of {_NUMBER}\.", rf"The town counts {_NUMBER} residents\.")),
        Attr("elevation", "elevation in metres", "place", None,
             ("{e} lies at an elevation of {v} metres.", "The town centre sits {v} metres above sea level."),
             (rf"elevation of {_NUMBER} metres\.", rf"sits {_NUMBER} metres above sea level\.")),
        Attr("mayor", "mayor", "place", "person",
             ("The mayor of {e} is {v}.", "{e} is governed by mayor {v}."),
             (rf"The mayor of [^.]+ is {_NAME}\.", rf"governed by mayor {_NAME}\.")),
    )
}  # fmt: skip
RELATIONS = {t: tuple(a.key for a in ATTRS.values() if a.owner == t and a.target) for t in ENTITY_TYPES}
VALUES = {t: tuple(a.key for a in ATTRS.values() if a.owner == t and not a.target) for t in ENTITY_TYPES}
_BY_LABEL = {a.label: a.key for a in ATTRS.values()}
_LABELS_RE = "|".join(re.escape(label) for label in sorted(_BY_LABEL, key=len, reverse=True))

#: the sentence of a correction notice that carries the corrected value.
CORRECTION_PATTERN = rf"The correct ({_LABELS_RE}) of (.+?) is ([^.]+)\."
_CORRECTION_RE = re.compile(CORRECTION_PATTERN)
_FACT_RES = {key: tuple(re.compile(p) for p in a.patterns) for key, a in ATTRS.items()}


def fact_sentence(attr: str, subject: str, value: str, variant: int) -> str:
    return ATTRS[attr].templates[variant % 2].format(e=subject, v=value)


def correction_sentences(attr: str, subject: str, old: str, new: str) -> str:
    label = ATTRS[attr].label
    return (
        f"{CORRECTION_PREFIX}an earlier version of our profile of {subject} gave its {label} as {old}. "
        f"The correct {label} of {subject} is {new}."
    )


# --------------------------------------------------------------------------- pages


def filler_sentence(rng: random.Random, pools: dict[str, tuple]) -> str:
    """One sentence of plausible noise from the split's grammar pools."""
    subject, verb, obj, mod = (rng.choice(pools[k]) for k in ("subjects", "verbs", "objects", "modifiers"))
    if rng.random() < 0.7:
        return f"{rng.choice(pools['openers'])}, {subject} {verb} {obj} {mod}."
    return f"{subject[0].upper()}{subject[1:]} {verb} {obj} {mod}."


def render_page(
    *, title: str, url: str, date: str, intro: str, core: list[str], n_filler: int,
    rng: random.Random, pools: dict[str, tuple],
) -> str:  # fmt: skip
    """A page: header lines, the intro, core sentences scattered among filler, the end marker."""
    sentences = [filler_sentence(rng, pools) for _ in range(n_filler)]
    for s in core:
        sentences.insert(rng.randint(0, len(sentences)), s)
    paragraphs, i = [], 0
    first = True
    while i < len(sentences) or first:
        size = rng.randint(4, 7)
        chunk = sentences[i : i + size]
        paragraphs.append(" ".join(([intro] if first else []) + chunk))
        i += size
        first = False
    header = f"Title: {title}\nURL: {url}\nPublished: {date}"
    return "\n\n".join([header, *paragraphs, END_MARKER])


@dataclass
class ParsedPage:
    """What the oracle reads from a page text."""

    title: str
    url: str
    date: str
    complete: bool  # the end marker is present (the page was not cut short)
    facts: dict[str, str] = field(default_factory=dict)
    corrections: list[tuple[str, str, str]] = field(default_factory=list)  # (attr key, subject, value)


_HEADER_RE = re.compile(r"^Title: (.+)\nURL: (\S+)\nPublished: (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def parse_page(text: str) -> ParsedPage | None:
    """Parse a page (full or cut down to its evidence sentences); None if it is not a page."""
    m = _HEADER_RE.search(text)
    if not m:
        return None
    body = text[m.end() :]
    page = ParsedPage(m.group(1), m.group(2), m.group(3), END_MARKER in body)
    for key, regexes in _FACT_RES.items():
        for rx in regexes:
            if fm := rx.search(body):
                page.facts[key] = fm.group(1).strip()
                break
    for cm in _CORRECTION_RE.finditer(body):
        page.corrections.append((_BY_LABEL[cm.group(1)], cm.group(2).strip(), cm.group(3).strip()))
    return page


# --------------------------------------------------------------------------- questions and answers


@dataclass(frozen=True)
class Question:
    """'What is the <chain[-1]> of the <chain[-2]> of ... of <anchor>?' (chain read from the anchor)."""

    qid: str
    anchor: str
    chain: tuple[str, ...]  # relation keys from the anchor, then the final attribute key

    def text(self) -> str:
        labels = [ATTRS[k].label for k in reversed(self.chain)]
        return f"{self.qid}: What is the " + " of the ".join(labels) + f" of {self.anchor}?"


_REL_LABELS = {ATTRS[k].label: k for t in ENTITY_TYPES for k in RELATIONS[t]}


def parse_question(line: str) -> Question | None:
    """Invert `Question.text`: peel labels off the front, the rest is the anchor's name."""
    m = re.match(r"^(Q\d+): What is the (.+)\?$", line.strip())
    if not m:
        return None
    qid, rest = m.group(1), m.group(2)
    final = next((lab for lab in sorted(_BY_LABEL, key=len, reverse=True) if rest.startswith(lab + " of ")), None)
    if final is None:
        return None
    rest = rest[len(final) + 4 :]
    rels: list[str] = []
    while True:
        lab = next((x for x in _REL_LABELS if rest.startswith(f"the {x} of ")), None)
        if lab is None:
            break
        rels.append(_REL_LABELS[lab])
        rest = rest[len(lab) + 8 :]
    return Question(qid, rest, (*reversed(rels), _BY_LABEL[final])) if rest else None


def parse_statement(text: str) -> list[Question] | None:
    """The questions of a task statement, or None if `text` is not one."""
    if TASK_MARKER not in text:
        return None
    found = [q for line in text.splitlines() if (q := parse_question(line))]
    return found or None


_UNITS_RE = re.compile(r"\s+(metres|meters|m|residents|inhabitants|people)$", re.IGNORECASE)


def normalize_answer(value: object) -> str:
    """Case, spacing, quotes, a final period, thousands separators and units do not count."""
    s = str(value).strip().strip("\"'").strip().rstrip(".").strip()
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    s = _UNITS_RE.sub("", s)
    return " ".join(s.split()).casefold()
