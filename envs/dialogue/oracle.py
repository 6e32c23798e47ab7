"""The dialogue oracle: reads requirements, calendars and room records from its State only.

Every turn it re-parses the State: requirement clauses from user messages (later ones win),
calendar and room outputs (complete records only) and its own notes. While the user still
talks it answers "next"; then it fetches each calendar day and room record it lacks (again if
compaction cleared it, at most `MAX_FETCHES` times each), solves the schedule by backtracking
search and submits. Once it sees that compaction cleared tool outputs, it copies the lines it
needs from each new output into a short note (a plain assistant message) before fetching the
next, so clearing cannot starve it. Requirements that compaction removed are lost: it then
schedules what it still knows.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_compaction_envs.dialogue.formats import (
    STATEMENT_MARK,
    RoomData,
    calendar_record,
    parse_calendar,
    parse_room,
    room_record,
    rooms_of_statement,
)
from rl_compaction_envs.dialogue.grammar import (
    DAY_END,
    DAY_START,
    GRID,
    Event,
    MeetingReq,
    Requirements,
    fmt_time,
    parse_events,
    reduce_events,
)
from rl_compaction_envs.dialogue.pools import DAYS

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle

MAX_FETCHES = 4  # per calendar day or room, counting the calls still visible in the State
MAX_NODES = 50_000  # search budget before constraints are relaxed
TASK_TOOLS = ("calendar", "room_info")
NOTES_MARK = "My notes, copied from a tool output:"
#: the oracle's edit (envs/dialogue/evolve.js without its `//` comment lines): short on purpose, as
#: every token of it is generated
_EVOLVE_JS = "\n".join(
    line for line in Path(__file__).with_name("evolve.js").read_text().splitlines() if not line.startswith("//")
)
LONG = 1000  # user messages this long or longer are pasted texts (unless one holding a requirement is)


@dataclass
class View:
    """What the State currently shows."""

    rooms_listed: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    calendars: dict[str, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)  # day -> person
    rooms: dict[str, RoomData] = field(default_factory=dict)
    fetches: Counter[tuple[str, str]] = field(default_factory=Counter)
    ends_with_assistant: bool = False
    cleared: int = 0  # task tool outputs present but unreadable (compaction cleared or cut them)
    noted_calendars: dict[str, set[str]] = field(default_factory=dict)  # day -> people in notes
    noted_rooms: set[str] = field(default_factory=set)
    #: readable tool outputs in State order: ("calendar", day, people) or ("room_info", room, None)
    outputs: list[tuple[str, str, dict[str, list[tuple[int, int]]] | None]] = field(default_factory=list)

    @property
    def requirements(self) -> Requirements:
        return reduce_events(self.events)

    def talking(self) -> bool:
        """True while the user may still have requirements to give: no "done" message, no tool
        call yet, and the user answered the last message."""
        return not (self.requirements.done or self.fetches or self.ends_with_assistant)


def read_state(state: State) -> View:
    view = View()
    calls: dict[str, dict[str, Any]] = {}
    for item in state:
        kind = item.get("type", "message")
        if kind == "message":
            role, text = item.get("role"), text_of(item.get("content", ""))
            if role == "user" and text.startswith(STATEMENT_MARK):
                view.rooms_listed = rooms_of_statement(text)
            elif role == "user":
                view.events.extend(parse_events(text))
            elif role == "assistant" and text.startswith(NOTES_MARK):
                _read_record(view, text, note=True)
        elif kind == "function_call":
            calls[item["call_id"]] = item
            key = _fetch_key(item)
            if key:
                view.fetches[key] += 1
        elif kind == "function_call_output":
            call = calls.get(item["call_id"])
            if call is None or call.get("name") not in TASK_TOOLS:
                continue
            if not _read_record(view, text_of(item["output"]), note=False):
                view.cleared += 1
    last = state[-1] if state else {}
    view.ends_with_assistant = last.get("type", "message") == "message" and last.get("role") == "assistant"
    return view


def _read_record(view: View, text: str, note: bool) -> bool:
    """Merge a calendar or room record into the view; False if the text holds none."""
    if parsed := parse_calendar(text):
        day, people = parsed
        view.calendars.setdefault(day, {}).update(people)
        if note:
            view.noted_calendars.setdefault(day, set()).update(people)
        else:
            view.outputs.append(("calendar", day, people))
        return True
    if room := parse_room(text):
        view.rooms[room.name] = room
        if note:
            view.noted_rooms.add(room.name)
        else:
            view.outputs.append(("room_info", room.name, None))
        return True
    return False


def _fetch_key(call: dict[str, Any]) -> tuple[str, str] | None:
    if call.get("name") not in TASK_TOOLS:
        return None
    try:
        args = json.loads(call.get("arguments", "{}"))
    except json.JSONDecodeError:
        return None
    value = args.get("day" if call["name"] == "calendar" else "room") if isinstance(args, dict) else None
    return (call["name"], value) if isinstance(value, str) else None


# --------------------------------------------------------------------------- solver


@dataclass(frozen=True)
class Cand:
    day: int
    start: int
    end: int
    room: str


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


def _domain(mt: MeetingReq, req: Requirements, view: View, rooms: list[str], strict: bool) -> list[Cand]:
    """Slots physically possible for `mt` (attendees free, room free and big enough), and with
    `strict` also meeting its day, window, lunch and equipment requirements. Unknown calendars or
    rooms count as free (best effort when compaction lost them)."""
    minutes = mt.minutes or 60
    days = mt.allowed_days() if strict else list(DAYS)
    out = []
    for day in days:
        cal = view.calendars.get(day, {})
        busy = [iv for p in mt.attendees for iv in cal.get(p, [])]
        for start in range(DAY_START, DAY_END - minutes + 1, GRID):
            end = start + minutes
            if any(_overlap(start, end, a, b) for a, b in busy):
                continue
            if strict and (
                (mt.earliest is not None and start < mt.earliest)
                or (mt.latest_end is not None and end > mt.latest_end)
                or (req.lunch is not None and _overlap(start, end, *req.lunch))
            ):
                continue
            for name in rooms:
                data = view.rooms.get(name)
                if data is not None:
                    if data.capacity < len(mt.attendees):
                        continue
                    if strict and not mt.features <= data.features:
                        continue
                    if any(_overlap(start, end, a, b) for a, b in data.bookings.get(day, [])):
                        continue
                out.append(Cand(DAYS.index(day), start, end, name))
    return out


class _Budget(Exception):
    pass


def _search(req: Requirements, domains: dict[str, list[Cand]], ordered: bool) -> dict[str, Cand] | None:
    """Backtracking with forward checking, most constrained meeting first."""
    names = list(domains)
    shares = {
        (a, b): bool(set(req.meetings[a].attendees) & set(req.meetings[b].attendees)) for a in names for b in names
    }
    before = set(req.before) if ordered else set()
    nodes = 0

    def fits(a: str, ca: Cand, b: str, cb: Cand) -> bool:
        if (a, b) in before and not ca.day < cb.day:
            return False
        if (b, a) in before and not cb.day < ca.day:
            return False
        if ca.day != cb.day or not _overlap(ca.start, ca.end, cb.start, cb.end):
            return True
        return ca.room != cb.room and not shares[(a, b)]

    def rec(doms: dict[str, list[Cand]], chosen: dict[str, Cand]) -> dict[str, Cand] | None:
        nonlocal nodes
        if not doms:
            return chosen
        var = min(doms, key=lambda n: (len(doms[n]), n))
        for cand in doms[var]:
            nodes += 1
            if nodes > MAX_NODES:
                raise _Budget
            rest = {n: [c for c in d if fits(var, cand, n, c)] for n, d in doms.items() if n != var}
            if all(rest.values()):
                found = rec(rest, {**chosen, var: cand})
                if found is not None:
                    return found
        return None

    try:
        return rec(domains, {})
    except _Budget:
        return None


def solve(view: View) -> list[dict[str, Any]]:
    """A schedule meeting every requirement if the search finds one; otherwise one that keeps the
    physical constraints; otherwise a greedy best effort."""
    req = view.requirements
    rooms = view.rooms_listed or sorted(view.rooms)
    names = sorted(req.meetings)
    result: dict[str, Cand] | None = None
    for strict in (True, False):
        domains = {n: _domain(req.meetings[n], req, view, rooms, strict) for n in names}
        if all(domains.values()):
            result = _search(req, domains, ordered=strict)
            if result is not None:
                break
    if result is None:  # greedy: first physically possible slot, else Monday morning
        result = {}
        for n in names:
            options = _domain(req.meetings[n], req, view, rooms, strict=False)
            fallback = Cand(0, DAY_START, DAY_START + (req.meetings[n].minutes or 60), rooms[0] if rooms else "")
            result[n] = options[0] if options else fallback
    return [
        {
            "meeting": n,
            "day": DAYS[c.day],
            "start": fmt_time(c.start),
            "minutes": req.meetings[n].minutes or 60,
            "room": c.room,
        }
        for n, c in sorted(result.items())
    ]


# --------------------------------------------------------------------------- oracle


class DialogueOracle(Oracle):
    def __init__(self) -> None:
        self._calls = 0

    def _call(self, name: str, **arguments: Any) -> list[dict[str, Any]]:
        self._calls += 1
        return [
            {
                "type": "function_call",
                "call_id": f"dialogue_call_{self._calls}",
                "name": name,
                "arguments": json.dumps(arguments),
            }
        ]

    def act(self, state: State) -> list[dict[str, Any]]:
        view = read_state(state)
        if view.talking():
            return [{"role": "assistant", "content": "Noted. Next, please."}]
        req = view.requirements
        people = {p for mt in req.meetings.values() for p in mt.attendees}
        days = {d for mt in req.meetings.values() for d in mt.allowed_days()}
        if view.cleared and (note := self._note(view, people)):
            return [{"role": "assistant", "content": f"{NOTES_MARK}\n{note}"}]
        for day in DAYS:
            have = view.calendars.get(day, {})
            if day in days and not people <= set(have) and view.fetches[("calendar", day)] < MAX_FETCHES:
                return self._call("calendar", day=day)
        for room in view.rooms_listed:
            if room not in view.rooms and view.fetches[("room_info", room)] < MAX_FETCHES:
                return self._call("room_info", room=room)
        return self._call("submit", answer=json.dumps({"schedule": solve(view)}))

    @staticmethod
    def _note(view: View, people: set[str]) -> str | None:
        """The needed lines of the newest readable output that no note holds yet."""
        for tool, key, found in reversed(view.outputs):
            if tool == "calendar" and found is not None:
                wanted = {p: found[p] for p in people & set(found)}
                if not set(wanted) <= view.noted_calendars.get(key, set()):
                    return calendar_record(key, wanted)
            elif tool == "room_info" and key not in view.noted_rooms:
                return room_record(view.rooms[key])
        return None

    def evolve_code(self, state: State) -> str:
        """A few lines of JavaScript (see evolve.js): keep the task statement, the requirement
        messages, the oracle's notes and the calendar and room outputs cut to the attendees' blocking
        entries and the rooms' capacity, equipment and bookings; drop pasted texts, chatter, requests
        and old edits. The oracle names the attendees and a length no requirement message reaches."""
        req = read_state(state).requirements
        people = sorted({p for mt in req.meetings.values() for p in mt.attendees})
        needed = [
            len(text)
            for it in state
            if it.get("type", "message") == "message" and it.get("role") == "user"
            for text in [text_of(it.get("content", ""))]
            if text.startswith(STATEMENT_MARK) or parse_events(text)
        ]
        return _EVOLVE_JS.replace("__PEOPLE__", "|".join(people) or "(?!)").replace(
            "__LONG__", str(max([LONG - 1, *needed]) + 1)
        )
