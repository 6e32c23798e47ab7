"""Seeded world generation: team, rooms, a planted schedule, calendars and the conversation.

The generator first plants a valid schedule, then writes calendars and room bookings that
leave the planted slots free and requirements that the planted schedule meets, so every
instance is solvable. Superseded requirements (wrong durations, wrong days, attendee lists
that change, a lunch break that moves, a day pin later withdrawn because an attendee is
out of office) are stated early and corrected later, far apart, between long pasted noise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rl_compaction_envs.dialogue.grammar import DAY_END, DAY_START, GRID, Event, event, fmt_time, render
from rl_compaction_envs.dialogue.pools import DAYS, FEATURES, SplitPools, all_syllables

_DURATIONS = (30, 45, 60, 90)
_CAPACITIES = (3, 4, 4, 6, 8, 10, 12)
_LUNCHES = (
    (12 * 60, 13 * 60),
    (12 * 60 + 30, 13 * 60 + 30),
    (11 * 60 + 45, 12 * 60 + 45),
    (12 * 60 + 15, 13 * 60 + 15),
)
NOISE_CAP = 2.0  # above scale 1, a pasted text grows to at most this many times its scale-1 length
_TRAPS = ("minutes_fix", "day_move", "forget_day", "attendee_add", "attendee_drop", "lunch_move", "window_move")


@dataclass(frozen=True)
class Level:
    """What a difficulty level adds: meetings, people, rooms, revisions, orderings, noise."""

    meetings: int
    team: int
    rooms: int
    revisions: int
    orderings: int
    noise_messages: int


LEVELS = {
    1: Level(meetings=4, team=7, rooms=4, revisions=3, orderings=0, noise_messages=7),
    2: Level(meetings=6, team=9, rooms=5, revisions=5, orderings=1, noise_messages=9),
    3: Level(meetings=8, team=11, rooms=6, revisions=7, orderings=2, noise_messages=11),
}


@dataclass(frozen=True)
class Block:
    """A calendar entry or room booking; status 'busy', 'cancelled' (blocks nothing) or 'ooo'."""

    start: int
    end: int
    status: str
    text: str

    def blocks(self) -> bool:
        return self.status != "cancelled"


@dataclass(frozen=True)
class Room:
    name: str
    floor: int
    wing: str
    capacity: int
    features: tuple[str, ...]  # room_info equipment words
    bookings: dict[str, tuple[Block, ...]]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Slot:
    meeting: str
    day: str
    start: int
    minutes: int
    room: str

    @property
    def end(self) -> int:
        return self.start + self.minutes


@dataclass
class World:
    """Everything hidden about one instance; the task reveals it only through messages and tools."""

    team: list[str]
    outsiders: list[str]
    teams: dict[str, str]  # person -> team label (flavour for calendar headers)
    rooms: dict[str, Room]
    calendars: dict[str, dict[str, tuple[Block, ...]]]  # person -> day -> entries
    events: list[Event]  # requirement events in the order they are said
    messages: list[str]  # user messages after the task statement; the last one says "done"
    planted: list[Slot] = field(default_factory=list)


def overlaps(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


class _Names:
    """Unique capitalised names whose first syllable comes from the split's pool."""

    def __init__(self, rng: random.Random, pools: SplitPools, reserved: set[str]):
        self.rng, self.firsts, self.rest = rng, pools.syllables(), all_syllables()
        self.taken = {r.lower() for r in reserved}

    def make(self, syllables: int) -> str:
        for _ in range(10_000):
            name = self.rng.choice(self.firsts) + "".join(self.rng.choice(self.rest) for _ in range(syllables - 1))
            if self.rng.random() < 0.3:
                name += self.rng.choice("nrl")
            if name not in self.taken:
                self.taken.add(name)
                return name.capitalize()
        raise RuntimeError("name pool exhausted")


class Generator:
    def __init__(self, rng: random.Random, pools: SplitPools, level: int, scale: float):
        # Up to scale 1 everything grows with the scale. Above it each output keeps its scale-1 size
        # (calendars, room records; a pasted text grows to at most NOISE_CAP times its scale-1 length)
        # and the conversation gets longer instead: more pasted texts between the requirements, about
        # (5 * scale - 4) times the scale-1 amount of noise, so the episode's volume stays about
        # proportional to the scale while every single output still fits a small context window.
        self.rng, self.pools, self.lv, self.scale = rng, pools, LEVELS[level], min(scale, 1.0)
        self.noise_scale = min(scale, NOISE_CAP)
        self.noise_messages = self.lv.noise_messages
        if scale > 1:
            self.noise_messages = round(self.lv.noise_messages * (5 * scale - 4) / self.noise_scale)
        self.names = _Names(rng, pools, set(pools.rooms) | set(pools.meeting_kinds))
        self.meeting_names: list[str] = []  # noise mentions them unquoted, as distractors

    # ----------------------------------------------------------------- helpers
    def _fill(self, template: str, people: list[str], projects: list[str]) -> str:
        r = self.rng
        p, p2 = r.sample(people, 2)
        return template.format(
            p=p,
            p2=p2,
            proj=r.choice(projects),
            n=r.randint(2, 95),
            day=r.choice(DAYS),
            t=fmt_time(r.randrange(8 * 60, 18 * 60, 15)),
            room=r.choice(self.pools.rooms),
            meeting=r.choice(self.meeting_names or projects),
        )

    def _details(self, people: list[str], projects: list[str]) -> str:
        """Flavour text whose amount follows `scale` (none at small scales)."""
        if self.scale < 0.25:
            return ""
        title = self._fill(self.rng.choice(self.pools.event_titles), people, projects)
        count = int(self.scale * 2 + self.rng.random())
        extra = " ".join(
            self._fill(self.rng.choice(self.pools.noise_sentences), people, projects) for _ in range(count)
        )
        return f" | {title}" + (f". Notes: {extra}" if extra else "")

    def _free_blocks(
        self,
        reserved: list[tuple[int, int]],
        busy_minutes: int,
        lo: int,
        hi: int,
        people: list[str],
        projects: list[str],
    ) -> list[Block]:
        """Random busy blocks in [lo, hi) totalling about `busy_minutes`, avoiding `reserved`."""
        taken = list(reserved)
        out: list[Block] = []
        total, tries = 0, 0
        while total < busy_minutes and tries < 200:
            tries += 1
            dur = self.rng.choice((30, 45, 60, 60, 90, 120))
            start = self.rng.randrange(lo, hi - dur + 1, GRID)
            if any(overlaps(start, start + dur, a, b) for a, b in taken):
                continue
            taken.append((start, start + dur))
            out.append(Block(start, start + dur, "busy", self._details(people, projects)))
            total += dur
        return out

    # ----------------------------------------------------------------- world
    def build(self) -> World:
        r, lv = self.rng, self.lv
        team = [self.names.make(2) for _ in range(lv.team)]
        outsiders = [self.names.make(2) for _ in range(round(self.scale * 18))]
        everyone = team + outsiders
        projects = [self.names.make(3) for _ in range(4)]
        labels = {p: r.choice(self.pools.teams) for p in everyone}

        # rooms: at least two can seat the largest meeting (5 people)
        room_names = r.sample(self.pools.rooms, lv.rooms)
        caps = [r.choice(_CAPACITIES) for _ in room_names]
        for i in r.sample(range(lv.rooms), 2):
            caps[i] = max(caps[i], r.choice((6, 8, 10)))
        feats = [tuple(f for f in FEATURES.values() if r.random() < 0.45) for _ in room_names]

        # meetings with their final attendees and durations
        kinds = list(self.pools.meeting_kinds)
        meetings: dict[str, list[str]] = {}
        while len(meetings) < lv.meetings:
            name = f"{self.names.make(3)} {r.choice(kinds)}"
            meetings[name] = r.sample(team, r.randint(2, 5))
        minutes = {m: r.choice(_DURATIONS) for m in meetings}
        self.meeting_names = list(meetings)
        lunch = r.choice(_LUNCHES)

        planted = self._plant(meetings, minutes, dict(zip(room_names, caps, strict=True)), lunch)
        by_name = {s.meeting: s for s in planted}

        events_by_chain, ooo = self._requirements(
            meetings, minutes, by_name, team, lunch, dict(zip(room_names, feats, strict=True))
        )

        # calendars leave every planted meeting free for its attendees
        calendars: dict[str, dict[str, tuple[Block, ...]]] = {}
        for person in everyone:
            calendars[person] = {}
            for day in DAYS:
                if (person, day) in ooo:
                    text = f" | Out of office{self._details(everyone, projects)}"
                    calendars[person][day] = (Block(0, 24 * 60, "ooo", text),)
                    continue
                reserved = [(s.start, s.end) for s in planted if s.day == day and person in meetings[s.meeting]]
                busy = self._free_blocks(reserved, int(r.uniform(0.35, 0.6) * 480), 8 * 60, 18 * 60, everyone, projects)
                cancelled = [
                    Block(s, s + d, "cancelled", self._details(everyone, projects))
                    for d in (r.choice((30, 60)) for _ in range(r.randint(0, 2)))
                    for s in [r.randrange(DAY_START, DAY_END - d + 1, GRID)]
                ]
                calendars[person][day] = tuple(sorted(busy + cancelled, key=lambda b: (b.start, b.end)))

        rooms: dict[str, Room] = {}
        for name, cap, feat in zip(room_names, caps, feats, strict=True):
            bookings = {}
            for day in DAYS:
                reserved = [(s.start, s.end) for s in planted if s.day == day and s.room == name]
                blocks = self._free_blocks(
                    reserved, r.choice((0, 60, 90, 120, 180)), DAY_START, DAY_END, everyone, projects
                )
                bookings[day] = tuple(sorted(blocks, key=lambda b: b.start))
            notes = tuple(
                self._fill(r.choice(self.pools.room_notes), everyone, projects) for _ in range(round(self.scale * 16))
            )
            rooms[name] = Room(
                name, r.randint(1, 6), r.choice(("east", "west", "north", "south")), cap, feat, bookings, notes
            )

        merged = self._merge(events_by_chain)
        messages = self._messages(merged, everyone, projects)
        return World(team, outsiders, labels, rooms, calendars, [ev for ev, _ in merged], messages, planted)

    def _plant(
        self, meetings: dict[str, list[str]], minutes: dict[str, int], caps: dict[str, int], lunch: tuple[int, int]
    ) -> list[Slot]:
        """Place every meeting without clashes (shared attendee or room), off lunch."""
        r = self.rng
        for _ in range(200):
            planted: list[Slot] = []
            for name in r.sample(list(meetings), len(meetings)):
                cands = []
                for day in DAYS:
                    for start in range(DAY_START, DAY_END - minutes[name] + 1, GRID):
                        end = start + minutes[name]
                        if overlaps(start, end, *lunch):
                            continue
                        for room, cap in caps.items():
                            if cap < len(meetings[name]):
                                continue
                            if any(
                                s.day == day
                                and overlaps(start, end, s.start, s.end)
                                and (s.room == room or set(meetings[s.meeting]) & set(meetings[name]))
                                for s in planted
                            ):
                                continue
                            cands.append(Slot(name, day, start, minutes[name], room))
                if not cands:
                    break
                planted.append(r.choice(cands))
            else:
                return planted
        raise RuntimeError("could not plant a schedule")

    def _requirements(
        self,
        meetings: dict[str, list[str]],
        minutes: dict[str, int],
        slots: dict[str, Slot],
        team: list[str],
        lunch: tuple[int, int],
        feats: dict[str, tuple[str, ...]],
    ) -> tuple[list[list[tuple[Event, bool]]], set[tuple[str, str]]]:
        """Per-meeting chains of (event, is_revision) whose final meaning the planted schedule meets,
        with superseded statements first; also the (person, day) out-of-office pairs the traps need."""
        r = self.rng
        names = list(meetings)
        head: dict[str, list[tuple[Event, bool]]] = {m: [] for m in names}  # early statements
        body: dict[str, list[tuple[Event, bool]]] = {m: [] for m in names}  # final statements, shuffled
        tail: dict[str, list[tuple[Event, bool]]] = {m: [] for m in names}  # revisions
        people = {m: list(meetings[m]) for m in names}  # as first announced
        day_rule: dict[str, str] = {}
        ooo: set[tuple[str, str]] = set()
        lunch_chain: list[tuple[Event, bool]] = [(event("lunch", t=lunch[0], t2=lunch[1]), False)]
        windows: dict[str, dict[str, int]] = {m: {} for m in names}  # "not_before"/"not_after" -> time
        moved_window: set[str] = set()  # meetings whose not_before is a revision of an earlier one
        minutes_done: set[str] = set()

        for m in names:
            s = slots[m]
            x = r.random()
            if x < 0.35:
                day_rule[m] = "on"
            elif x < 0.7:
                day_rule[m] = "not"
                for d in r.sample([d for d in DAYS if d != s.day], r.randint(1, 2)):
                    body[m].append((event("not_day", m, day=d), False))
            if r.random() < 0.45:
                windows[m]["not_before"] = max(DAY_START, s.start - r.choice((0, 15, 30, 60)))
            if r.random() < 0.45:
                windows[m]["not_after"] = min(DAY_END, s.end + r.choice((0, 15, 30, 60)))
            if feats[s.room] and r.random() < 0.45:
                word = r.choice(feats[s.room])
                phrase = next(k for k, v in FEATURES.items() if v == word)
                body[m].append((event("needs", m, feature=phrase), False))

        made = 0
        for _ in range(200):
            if made >= self.lv.revisions:
                break
            kind, m = r.choice(_TRAPS), r.choice(names)
            s = slots[m]
            if kind == "minutes_fix" and m not in minutes_done:
                wrong = r.choice([d for d in (*_DURATIONS, 120) if d != minutes[m]])
                head[m].append((event("minutes", m, n=wrong), False))
                tail[m].append((event("minutes_fix", m, n=minutes[m], old=wrong), True))
                minutes_done.add(m)
            elif kind == "day_move" and day_rule.get(m) in (None, "on"):
                day_rule[m] = "moved"
                head[m].append((event("on_day", m, day=r.choice([d for d in DAYS if d != s.day])), False))
                tail[m].append((event("on_day", m, day=s.day), True))
            elif kind == "forget_day" and day_rule.get(m) in (None, "not"):
                banned = {dict(e.args)["day"] for e, _ in body[m] if e.kind == "not_day"}
                options = [
                    (p, d)
                    for p in meetings[m]
                    for d in DAYS
                    if d != s.day
                    and d not in banned
                    and not any(t.day == d and p in meetings[t.meeting] for t in slots.values())
                ]
                if not options:
                    continue
                p, d = r.choice(options)
                ooo.add((p, d))
                day_rule[m] = "forgot" if day_rule.get(m) is None else "not+forgot"
                head[m].append((event("on_day", m, day=d), False))
                tail[m].append((event("forget_day", m, day=d), True))
            elif kind == "attendee_add" and len(people[m]) >= 3 and people[m] == meetings[m]:
                p = r.choice(people[m])
                people[m] = [q for q in people[m] if q != p]
                tail[m].append((event("add", m, person=p), True))
            elif kind == "attendee_drop" and people[m] == meetings[m]:
                extra = [q for q in team if q not in meetings[m]]
                q = r.choice(extra)
                people[m] = people[m] + [q]
                r.shuffle(people[m])
                tail[m].append((event("drop", m, person=q), True))
            elif kind == "lunch_move" and len(lunch_chain) == 1:
                wrong = r.choice([w for w in _LUNCHES if w != lunch])
                lunch_chain = [(event("lunch", t=wrong[0], t2=wrong[1]), False), lunch_chain[0]]
                lunch_chain[1] = (lunch_chain[1][0], True)
            elif kind == "window_move" and "not_before" not in windows[m] and s.start >= DAY_START + 60:
                final = s.start - r.choice((0, 15, 30))
                early = r.choice(range(DAY_START, final - 15 + 1, 15))
                windows[m]["not_before"] = final
                head[m].append((event("not_before", m, t=early), False))
                moved_window.add(m)
            else:
                continue
            made += 1

        chains: list[list[tuple[Event, bool]]] = []
        for m in names:
            s = slots[m]
            if day_rule.get(m) == "on":
                body[m].append((event("on_day", m, day=s.day), False))
            if m not in minutes_done:
                body[m].append((event("minutes", m, n=minutes[m]), False))
            if "not_before" in windows[m]:
                ev = event("not_before", m, t=windows[m]["not_before"])
                (tail[m] if m in moved_window else body[m]).append((ev, m in moved_window))
            if "not_after" in windows[m]:
                body[m].append((event("not_after", m, t=windows[m]["not_after"]), False))
            r.shuffle(body[m])
            r.shuffle(head[m])
            r.shuffle(tail[m])
            chains.append([(event("new", m, people=tuple(people[m])), False), *head[m], *body[m], *tail[m]])
        slot_names = sorted(names, key=lambda n: (DAYS.index(slots[n].day), n))
        pairs = [(a, b) for a in slot_names for b in slot_names if DAYS.index(slots[a].day) < DAYS.index(slots[b].day)]
        for a, b in r.sample(pairs, min(self.lv.orderings, len(pairs))):
            chains.append([(event("before", a, other=b), False)])
        chains.append(lunch_chain)
        return chains, ooo

    def _merge(self, chains: list[list[tuple[Event, bool]]]) -> list[tuple[Event, bool]]:
        """Interleave chains at random, keeping each chain's order (a uniform random merge)."""
        chains = [list(c) for c in chains]
        out = []
        while chains:
            weights = [len(c) for c in chains]
            i = self.rng.choices(range(len(chains)), weights=weights)[0]
            out.append(chains[i].pop(0))
            if not chains[i]:
                chains.pop(i)
        return out

    def _noise(self, people: list[str], projects: list[str]) -> str:
        """Chit-chat, or a long pasted text (meeting notes or an email thread)."""
        r, pools = self.rng, self.pools
        if r.random() < 0.3:
            return r.choice(pools.chatter)
        length = max(1, round(self.noise_scale * r.randint(70, 120)))
        sentences = [self._fill(r.choice(pools.noise_sentences), people, projects) for _ in range(length)]
        intro = r.choice(pools.noise_intros)
        if r.random() < 0.5:
            return intro + "\n\n" + "\n".join(f"- {s}" for s in sentences)
        parts, i = [], 0
        while i < len(sentences):
            k = r.randint(2, 6)
            sender = r.choice(people)
            parts.append(
                f"From: {sender}\nSubject: {r.choice(pools.email_subjects)}\n\n"
                + " ".join(sentences[i : i + k])
                + f"\n\n-- {sender}"
            )
            i += k
        return intro + "\n\n" + "\n\n".join(parts)

    def _messages(self, events: list[tuple[Event, bool]], people: list[str], projects: list[str]) -> list[str]:
        r, pools = self.rng, self.pools
        messages: list[str] = []
        i = 0
        while i < len(events):
            take = 2 if r.random() < 0.3 and i + 1 < len(events) else 1
            group = events[i : i + take]
            i += take
            opener = r.choice(pools.revision_openers if any(rev for _, rev in group) else pools.openers)
            clauses = " ".join(render(ev, r.choice(pools.templates[ev.kind])) for ev, _ in group)
            messages.append(" ".join(x for x in (opener, clauses, r.choice(pools.closers)) if x))
        for _ in range(self.noise_messages):
            messages.insert(r.randint(1, len(messages)), self._noise(people, projects))
        messages.append(r.choice(pools.templates["done"]))
        return messages


def generate(rng: random.Random, pools: SplitPools, level: int, scale: float) -> World:
    return Generator(rng, pools, level, scale).build()
