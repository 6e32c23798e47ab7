"""The dialogue family: plan a week of meetings from requirements a user gives, revises and
withdraws over a long, noisy conversation; check the schedule against the latest ones."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from rl_compaction_envs.dialogue.formats import render_calendar, render_room, statement
from rl_compaction_envs.dialogue.generate import World, generate, overlaps
from rl_compaction_envs.dialogue.grammar import DAY_END, DAY_START, GRID, Requirements, parse_time, reduce_events
from rl_compaction_envs.dialogue.oracle import DialogueOracle
from rl_compaction_envs.dialogue.pools import DAYS, POOLS

from rl_compaction.core.state import State
from rl_compaction.harness.tasks import (
    Difficulty,
    Task,
    TaskFamily,
    ToolError,
    check_arguments,
    function_tool,
    split_seed,
)

INSTRUCTIONS = """\
You are planning next week's meetings for a user who states the requirements over a long \
conversation, mixed with chit-chat and pasted text that does not matter.
A schedule is valid when, for every meeting the user asked for:
- it is scheduled exactly once, Monday to Friday, starting on the quarter hour (:00, :15, :30, \
:45), inside working hours 09:00-17:00 (it must end by 17:00);
- it lasts exactly the number of minutes the user asked for;
- none of its attendees has a blocking calendar entry that overlaps it (tool calendar: entries \
marked [cancelled] do not block; an out-of-office entry blocks the whole day);
- its room is one of the rooms listed in the task statement, seats every attendee (capacity >= \
number of attendees), has the equipment the user asked for, and has no existing booking that \
overlaps it (tool room_info);
- it does not overlap another of your meetings that shares an attendee or the room;
- the user's day, time-window, lunch-break and ordering requirements hold.
When the user revises or withdraws a requirement, only the latest version counts.
Talk to the user with plain messages (e.g. "next") until they say they are done, then use the \
tools and submit.
Answer format: call submit with answer = a JSON object {"schedule": [{"meeting": "<exact meeting \
name>", "day": "Tuesday", "start": "10:30", "minutes": 45, "room": "<room name>"}, ...]} with one \
entry per meeting. The score is the fraction of requirements your schedule satisfies; an \
unparseable answer scores 0."""

CALENDAR_TOOL = function_tool(
    "calendar",
    "The whole team calendar for one weekday: every person's entries with times (long output).",
    {"day": {"type": "string", "enum": list(DAYS), "description": "Weekday, e.g. Tuesday."}},
    ["day"],
)
ROOM_TOOL = function_tool(
    "room_info",
    "One room's capacity, equipment and existing bookings for the week.",
    {"room": {"type": "string", "description": "A room name from the task statement."}},
    ["room"],
)


@dataclass(frozen=True)
class Entry:
    """One well-formed schedule entry of an answer."""

    day: str
    start: int
    minutes: int
    room: str

    @property
    def end(self) -> int:
        return self.start + self.minutes


def parse_answer(answer: str) -> dict[str, Entry | None] | None:
    """Meeting name -> entry (None when malformed or given twice); None if the answer is unusable."""
    if not isinstance(answer, str):
        return None
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", answer.strip())
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("schedule"), list):
        return None
    out: dict[str, Entry | None] = {}
    for item in data["schedule"]:
        if not isinstance(item, dict) or not isinstance(item.get("meeting"), str):
            continue
        name = item["meeting"]
        out[name] = None if name in out else _entry(item)
    return out


def _entry(item: dict[str, Any]) -> Entry | None:
    day, start, minutes, room = (item.get(k) for k in ("day", "start", "minutes", "room"))
    if day not in DAYS or not isinstance(start, str) or not isinstance(room, str):
        return None
    if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes <= 0:
        return None
    try:
        t = parse_time(start)
    except ValueError:
        return None
    if t % GRID or t < DAY_START or t + minutes > DAY_END:
        return None
    return Entry(day, t, minutes, room)


def check_schedule(world: World, req: Requirements, answer: str) -> tuple[int, int]:
    """(satisfied, total) requirement checks of an answer; a missing or malformed meeting fails
    all of its checks."""
    entries = parse_answer(answer)
    got = {m: entries.get(m) if entries else None for m in req.meetings}
    checks: list[bool] = []
    for name, mt in req.meetings.items():
        e = got[name]
        people = set(mt.attendees)
        room = world.rooms.get(e.room) if e else None
        items = [
            True,  # scheduled, on the grid, in working hours
            e is not None and e.minutes == mt.minutes,
            e is not None
            and not any(
                b.blocks() and overlaps(e.start, e.end, b.start, b.end)
                for p in people
                for b in world.calendars[p][e.day]
            ),
            room is not None
            and e is not None
            and room.capacity >= len(people)
            and not any(overlaps(e.start, e.end, b.start, b.end) for b in room.bookings[e.day]),
            e is not None
            and not any(
                o is not None
                and o.day == e.day
                and overlaps(e.start, e.end, o.start, o.end)
                and (o.room == e.room or people & set(req.meetings[other].attendees))
                for other, o in got.items()
                if other != name
            ),
        ]
        if mt.features:
            items.append(room is not None and mt.features <= set(room.features))
        if mt.day is not None:
            items.append(e is not None and e.day == mt.day)
        items.extend(e is not None and e.day != d for d in sorted(mt.not_days))
        if mt.earliest is not None:
            items.append(e is not None and e.start >= mt.earliest)
        if mt.latest_end is not None:
            items.append(e is not None and e.end <= mt.latest_end)
        if req.lunch is not None:
            items.append(e is not None and not overlaps(e.start, e.end, *req.lunch))
        checks.extend(bool(x) and e is not None for x in items)
    for a, b in req.before:
        ea, eb = got.get(a), got.get(b)
        checks.append(ea is not None and eb is not None and DAYS.index(ea.day) < DAYS.index(eb.day))
    return sum(checks), len(checks)


class DialogueTask(Task):
    """One instance. The user's messages come in a fixed order; `initial_state` restarts them."""

    family: ClassVar[str] = "dialogue"
    instructions = INSTRUCTIONS

    def __init__(self, world: World, split: str, seed: int, difficulty: Difficulty):
        self.world, self.split, self.seed, self.difficulty = world, split, seed, difficulty
        self.requirements = reduce_events(world.events)
        self._next = 0

    def tools(self) -> list[dict[str, Any]]:
        return [CALENDAR_TOOL, ROOM_TOOL]

    def initial_state(self) -> State:
        self._next = 0
        return [{"type": "message", "role": "user", "content": statement(list(self.world.rooms))}]

    def user_reply(self, text: str) -> str | None:
        """The next scripted message, whatever the assistant said; None once the user is done."""
        if not isinstance(text, str):
            raise TypeError(f"user_reply takes the assistant's text (str), got {type(text).__name__}")
        if self._next >= len(self.world.messages):
            return None
        self._next += 1
        return self.world.messages[self._next - 1]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name == "calendar":
            day = check_arguments(name, arguments, {"day": str})["day"]
            if day not in DAYS:
                raise ToolError(f"calendar: day must be one of {', '.join(DAYS)}, got {day!r}")
            return render_calendar(self.world, day)
        if name == "room_info":
            room = check_arguments(name, arguments, {"room": str})["room"]
            if room not in self.world.rooms:
                raise ToolError(f"room_info: unknown room {room!r}; rooms: {', '.join(self.world.rooms)}")
            return render_room(self.world.rooms[room])
        raise ToolError(f"unknown tool {name!r}; this task's tools are calendar and room_info")

    def score(self, answer: str) -> float:
        if parse_answer(answer) is None:
            return 0.0
        satisfied, total = check_schedule(self.world, self.requirements, answer)
        return satisfied / total

    def oracle(self) -> DialogueOracle:
        return DialogueOracle()


class DialogueFamily(TaskFamily):
    name: ClassVar[str] = "dialogue"
    description: ClassVar[str] = (
        "Plan a week of meetings from requirements a simulated user states, revises and withdraws over "
        "a long conversation full of pasted noise; team calendars and room records come from tools."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> DialogueTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        world = generate(rng, POOLS[split], difficulty.level, difficulty.scale)
        return DialogueTask(world, split, seed, difficulty)
