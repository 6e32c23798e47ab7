"""The requirement language: structured events, their phrasings, the parser and the reducer.

The generator renders `Event`s into user messages with the split's phrasings; the oracle
parses any split's phrasings back into the same events (one grammar for all splits) and both
fold them with `reduce_events`, where a later event overrides an earlier one. The checker
scores against the generator's events, the oracle against what it can still read.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from rl_compaction_envs.dialogue.pools import DAYS, FEATURES, POOLS

DAY_START = 9 * 60
DAY_END = 17 * 60
GRID = 15  # meetings start on the quarter hour

_NAME = r"[A-Z][a-z]+"
#: placeholder -> regex body. Meeting names are always quoted by the templates.
_SLOTS = {
    "m": r"[A-Z][a-z]+ [a-z]+",
    "m2": r"[A-Z][a-z]+ [a-z]+",
    "people": rf"{_NAME}(?:, {_NAME})*(?:,? and {_NAME})?",
    "person": _NAME,
    "n": r"\d{1,3}",
    "old": r"\d{1,3}",
    "day": "|".join(DAYS),
    "t": r"\d\d:\d\d",
    "t2": r"\d\d:\d\d",
    "feature": "|".join(FEATURES),  # plain words and spaces: no escaping needed
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}/])")

KINDS = (
    "new",
    "minutes",
    "minutes_fix",
    "add",
    "drop",
    "on_day",
    "not_day",
    "forget_day",
    "not_before",
    "not_after",
    "needs",
    "before",
    "lunch",
    "done",
)


def fmt_time(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def parse_time(text: str) -> int:
    """'HH:MM' -> minutes since midnight; ValueError if malformed."""
    m = re.fullmatch(r"(\d\d):(\d\d)", text)
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ValueError(f"not a HH:MM time: {text!r}")
    return int(m.group(1)) * 60 + int(m.group(2))


def join_names(names: list[str] | tuple[str, ...]) -> str:
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def split_names(text: str) -> list[str]:
    return [n for n in re.split(r",? and |, ", text) if n]


def template_regex(template: str) -> str:
    """A template as a regex with a named group per slot."""
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(_SPECIAL.sub(r"\\\1", template[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>{_SLOTS[m.group(1)]})")
        pos = m.end()
    out.append(_SPECIAL.sub(r"\\\1", template[pos:]))
    return r"(?<![A-Za-z])" + "".join(out)


#: every phrasing of every split, so one parser reads all splits.
TEMPLATES: tuple[tuple[str, str], ...] = tuple(
    (kind, t) for pools in POOLS.values() for kind, ts in pools.templates.items() for t in ts
)


def _anchor(template: str) -> str:
    """The longest literal piece of a template: a cheap substring test before the regex runs."""
    return max(_PLACEHOLDER.split(template)[::2], key=len)


_COMPILED = tuple((kind, _anchor(t), re.compile(template_regex(t))) for kind, t in TEMPLATES)


@dataclass(frozen=True)
class Event:
    """One requirement statement. `args` holds the kind's fields (see `render`)."""

    kind: str
    meeting: str = ""
    args: tuple[tuple[str, object], ...] = ()

    def get(self, key: str) -> object:
        return dict(self.args)[key]


def event(kind: str, meeting: str = "", **args: object) -> Event:
    if kind not in KINDS:
        raise ValueError(f"unknown requirement kind {kind!r}")
    return Event(kind, meeting, tuple(sorted(args.items())))


def render(ev: Event, template: str) -> str:
    """Fill a phrasing of `ev.kind` with the event's fields."""
    a = dict(ev.args)
    values = {
        "m": ev.meeting,
        "m2": a.get("other", ""),
        "people": join_names(a["people"]) if "people" in a else "",
        "person": a.get("person", ""),
        "n": a.get("n", ""),
        "old": a.get("old", ""),
        "day": a.get("day", ""),
        "t": fmt_time(a["t"]) if "t" in a else "",
        "t2": fmt_time(a["t2"]) if "t2" in a else "",
        "feature": a.get("feature", ""),
    }
    return template.format(**values)


def _event_from_match(kind: str, m: re.Match[str]) -> Event:
    g = m.groupdict()
    mt = g.get("m", "") or ""
    if kind == "new":
        return event(kind, mt, people=tuple(split_names(g["people"])))
    if kind == "minutes":
        return event(kind, mt, n=int(g["n"]))
    if kind == "minutes_fix":
        return event(kind, mt, n=int(g["n"]), old=int(g["old"]))
    if kind in ("add", "drop"):
        return event(kind, mt, person=g["person"])
    if kind in ("on_day", "not_day", "forget_day"):
        return event(kind, mt, day=g["day"])
    if kind in ("not_before", "not_after"):
        return event(kind, mt, t=parse_time(g["t"]))
    if kind == "needs":
        return event(kind, mt, feature=g["feature"])
    if kind == "before":
        return event(kind, mt, other=g["m2"])
    if kind == "lunch":
        return event(kind, t=parse_time(g["t"]), t2=parse_time(g["t2"]))
    return event("done")


@functools.lru_cache(maxsize=4096)
def parse_events(text: str) -> tuple[Event, ...]:
    """All requirement clauses in a text, in reading order (overlaps: earliest, then longest).
    Cached: the oracle re-reads the same messages every turn."""
    found = []
    for kind, anchor, rx in _COMPILED:
        if anchor not in text:
            continue
        for m in rx.finditer(text):
            found.append((m.start(), -(m.end() - m.start()), m.end(), kind, m))
    found.sort(key=lambda x: (x[0], x[1]))
    events, end = [], -1
    for start, _, stop, kind, m in found:
        if start < end:
            continue
        events.append(_event_from_match(kind, m))
        end = stop
    return tuple(events)


@dataclass
class MeetingReq:
    """What is currently required of one meeting."""

    name: str
    attendees: list[str] = field(default_factory=list)
    minutes: int | None = None
    day: str | None = None
    not_days: set[str] = field(default_factory=set)
    earliest: int | None = None
    latest_end: int | None = None
    features: set[str] = field(default_factory=set)  # room_info equipment words

    def allowed_days(self) -> list[str]:
        if self.day is not None:
            return [self.day]
        return [d for d in DAYS if d not in self.not_days]


@dataclass
class Requirements:
    meetings: dict[str, MeetingReq] = field(default_factory=dict)
    before: list[tuple[str, str]] = field(default_factory=list)
    lunch: tuple[int, int] | None = None
    done: bool = False

    def meeting(self, name: str) -> MeetingReq:
        if name not in self.meetings:
            self.meetings[name] = MeetingReq(name)
        return self.meetings[name]


def reduce_events(events: list[Event]) -> Requirements:
    """Fold requirement events in order; later statements override earlier ones."""
    req = Requirements()
    for ev in events:
        a = dict(ev.args)
        if ev.kind == "done":
            req.done = True
            continue
        if ev.kind == "lunch":
            req.lunch = (int(a["t"]), int(a["t2"]))
            continue
        mt = req.meeting(ev.meeting)
        if ev.kind == "new":
            mt.attendees = list(a["people"])
        elif ev.kind in ("minutes", "minutes_fix"):
            mt.minutes = int(a["n"])
        elif ev.kind == "add" and a["person"] not in mt.attendees:
            mt.attendees.append(str(a["person"]))
        elif ev.kind == "drop" and a["person"] in mt.attendees:
            mt.attendees.remove(str(a["person"]))
        elif ev.kind == "on_day":
            mt.day = str(a["day"])
            mt.not_days.discard(mt.day)
        elif ev.kind == "not_day":
            mt.not_days.add(str(a["day"]))
            if mt.day == a["day"]:
                mt.day = None
        elif ev.kind == "forget_day":
            mt.not_days.discard(str(a["day"]))
            if mt.day == a["day"]:
                mt.day = None
        elif ev.kind == "not_before":
            mt.earliest = int(a["t"])
        elif ev.kind == "not_after":
            mt.latest_end = int(a["t"])
        elif ev.kind == "needs":
            mt.features.add(FEATURES[str(a["feature"])])
        elif ev.kind == "before":
            pair = (ev.meeting, str(a["other"]))
            if pair not in req.before:
                req.before.append(pair)
    return req
