"""Text formats of the task statement and the tool outputs, and their parsers.

Outputs carry their own completeness checks (each person's and room's count of blocking
entries), so a reader can tell a complete record from one that compaction cut short. The
parsers accept both the full output and the shrunk form the oracle's evolve code keeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rl_compaction_envs.dialogue.generate import Room, World
from rl_compaction_envs.dialogue.grammar import fmt_time, parse_time
from rl_compaction_envs.dialogue.pools import DAYS

STATEMENT_MARK = "MEETING PLANNING TASK"
CALENDAR_MARK = "TEAM CALENDAR: "
_DAYS_RX = "|".join(DAYS)

_ROOMS_LINE = re.compile(r"^Rooms you may book: (.+)\.$", re.M)
_CAL_HEAD = re.compile(rf"^{CALENDAR_MARK}({_DAYS_RX})$", re.M)
_PERSON = re.compile(r"^## ([A-Z][a-z]+)\b.*blocking entries: (\d+)\s*$")
_BUSY = re.compile(r"^- (\d\d:\d\d)-(\d\d:\d\d) busy")
_OOO = re.compile(r"^- all day out-of-office")
_ROOM_HEAD = re.compile(r"^ROOM ([A-Z][a-z]+)$", re.M)
_CAPACITY = re.compile(r"^Capacity: (\d+)$", re.M)
_EQUIPMENT = re.compile(r"^Equipment: (.*)$", re.M)
_BOOKINGS = re.compile(r"^Existing bookings this week: (\d+)$", re.M)
_BOOKING = re.compile(rf"^- ({_DAYS_RX}) (\d\d:\d\d)-(\d\d:\d\d) booked", re.M)


def statement(room_names: list[str]) -> str:
    return (
        f"{STATEMENT_MARK}\n"
        "Hi! Please plan next week's meetings for my team, Monday to Friday. I will give you the "
        "requirements over several messages and may change my mind along the way; when I change "
        'something, the latest version counts. Reply with any short message (for example "next") '
        "to get my next message; I will tell you when I am done.\n"
        f"Rooms you may book: {', '.join(room_names)}.\n"
        "Everyone's busy times are in the team calendar (tool calendar, one weekday at a time); "
        "capacity, equipment and existing bookings of a room are in room_info."
    )


def rooms_of_statement(text: str) -> list[str]:
    m = _ROOMS_LINE.search(text)
    return [r.strip() for r in m.group(1).split(",")] if m else []


def render_calendar(world: World, day: str) -> str:
    people = sorted(world.team + world.outsiders)
    lines = [
        f"{CALENDAR_MARK}{day}",
        f"{len(people)} people. Times are 24-hour local time. Entries marked [cancelled] do not block "
        "time; an all day out-of-office entry blocks the whole day.",
    ]
    for person in people:
        entries = world.calendars[person][day]
        blocking = sum(b.blocks() for b in entries)
        lines.append(f"## {person} ({world.teams[person]} team), blocking entries: {blocking}")
        for b in entries:
            if b.status == "ooo":
                lines.append(f"- all day out-of-office{b.text}")
            else:
                tag = "busy" if b.status == "busy" else "[cancelled]"
                lines.append(f"- {fmt_time(b.start)}-{fmt_time(b.end)} {tag}{b.text}")
        if not entries:
            lines.append("- no entries")
    return "\n".join(lines)


def render_room(room: Room) -> str:
    total = sum(len(v) for v in room.bookings.values())
    lines = [
        f"ROOM {room.name}",
        f"Location: floor {room.floor}, {room.wing} wing",
        f"Capacity: {room.capacity}",
        f"Equipment: {', '.join(room.features) or 'none'}",
        f"Existing bookings this week: {total}",
    ]
    for day in DAYS:
        for b in room.bookings[day]:
            lines.append(f"- {day} {fmt_time(b.start)}-{fmt_time(b.end)} booked{b.text}")
    if room.notes:
        lines.append("Facilities notes:")
        lines.extend(room.notes)
    return "\n".join(lines)


def calendar_record(day: str, people: dict[str, list[tuple[int, int]]]) -> str:
    """The blocking entries of some people in the calendar output's own format (for notes)."""
    lines = [f"{CALENDAR_MARK}{day}"]
    for person, intervals in sorted(people.items()):
        lines.append(f"## {person}, blocking entries: {len(intervals)}")
        lines.extend(
            "- all day out-of-office" if (a, b) == (0, 24 * 60) else f"- {fmt_time(a)}-{fmt_time(b)} busy"
            for a, b in intervals
        )
    return "\n".join(lines)


def room_record(room: RoomData) -> str:
    """A room's capacity, equipment and bookings in the room_info format (for notes)."""
    found = [(day, a, b) for day in DAYS for a, b in room.bookings.get(day, [])]
    lines = [
        f"ROOM {room.name}",
        f"Capacity: {room.capacity}",
        f"Equipment: {', '.join(sorted(room.features)) or 'none'}",
        f"Existing bookings this week: {len(found)}",
    ]
    lines.extend(f"- {day} {fmt_time(a)}-{fmt_time(b)} booked" for day, a, b in found)
    return "\n".join(lines)


def parse_calendar(text: str) -> tuple[str, dict[str, list[tuple[int, int]]]] | None:
    """(day, person -> blocking intervals) for every complete person section, or None if the
    text is not a calendar output. A section whose entry count does not match is left out."""
    head = _CAL_HEAD.search(text)
    if not head:
        return None
    people: dict[str, list[tuple[int, int]]] = {}
    current: str | None = None
    expected = 0
    intervals: list[tuple[int, int]] = []

    def close() -> None:
        if current is not None and len(intervals) == expected:
            people[current] = list(intervals)

    for line in text.splitlines():
        if h := _PERSON.match(line):
            close()
            current, expected, intervals = h.group(1), int(h.group(2)), []
        elif current is not None and (b := _BUSY.match(line)):
            intervals.append((parse_time(b.group(1)), parse_time(b.group(2))))
        elif current is not None and _OOO.match(line):
            intervals.append((0, 24 * 60))
    close()
    return head.group(1), people


@dataclass
class RoomData:
    name: str
    capacity: int
    features: set[str]
    bookings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


def parse_room(text: str) -> RoomData | None:
    """The room record, or None if the text is not a complete room_info output."""
    head, cap, eq, count = (rx.search(text) for rx in (_ROOM_HEAD, _CAPACITY, _EQUIPMENT, _BOOKINGS))
    if not (head and cap and eq and count):
        return None
    features = set() if eq.group(1) == "none" else {f.strip() for f in eq.group(1).split(",")}
    bookings: dict[str, list[tuple[int, int]]] = {d: [] for d in DAYS}
    found = _BOOKING.findall(text)
    if len(found) != int(count.group(1)):
        return None
    for day, start, end in found:
        bookings[day].append((parse_time(start), parse_time(end)))
    return RoomData(head.group(1), int(cap.group(1)), features, bookings)
