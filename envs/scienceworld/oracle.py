"""The scienceworld oracle: the simulator's gold path, with every fact a step depends on read from the State.

The gold path is the plan: which actions, in which order, the procedure an expert would follow.
What a plan may not know is what the agent has observed, so each step that depends on an
observation is checked against the State as it is now:

- `focus on X` and `pick up X` (a found object): X must show in the newest view of the room still
  in the State (a `look`, a "look around", or the view an act output carries) or in what the actions
  since then printed. If it does not, the oracle looks (no time passes), then asks ScienceWorld which
  objects can be named here (`objects`, which knows its aliases), then checks the inventory, then
  gives up (submits with the partial score).
- The deciding step of three kinds of task:
  - use-thermometer: the box follows from the newest thermometer reading in the State against the
    task's threshold; a reading compaction removed is measured again.
  - test-conductivity and test-conductivity-of-unknown-substances: the box follows from whether the
    circuit's component (a light bulb, a buzzer or an electric motor, whichever the plan wired) is on in a
    view that is the newest tool output; otherwise the oracle looks.
  - inclined-plane-*: the plane follows from the stopwatch readings in the State, each paired with the
    plane the block was last moved to (the slower block marks the shallower angle or the more friction).
    A lost reading cannot be observed again without redoing the experiment, so the oracle gives up.
- A decision that needs the task description, when compaction removed it, reads it again with `task`.

In a session (several tasks played one after another) it follows each task's gold path in turn,
moving on when the newest output says the task is over, and reads only what the State holds since
that output: an earlier task's readings and views are another world's.

Its memory besides the State is procedure, never a fact: which task it is on, its place in that
task's gold path and how many re-observations it made for the current step.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Oracle
from rl_compaction.protocol.evolve import EVOLVE

#: heads the room view and inventory an act output carries (`Difficulty.scale`)
STATUS_MARK = "[around you now]"
END_MARK = "[The task is over"
#: what an act output that ends one task of a session, not its last, says (`next_notice`)
NEXT_MARK = re.compile(r"\[Task (\d+) of (\d+) is over: ")

VIEW = re.compile(r"This (?:room|outside location) is called the ")
TEMPERATURE = re.compile(r"measures a temperature of (-?\d+(?:\.\d+)?) degrees celsius")
TICKS = re.compile(r"The time reads (\d+) ticks")
BOX_MOVE = re.compile(r"^move (.+) to (\w+) box$", re.IGNORECASE)
PLANE_FOCUS = re.compile(r"^focus on (inclined plane.*)$")
BLOCK_MOVE = re.compile(r"^move (.+?) to (inclined plane.*)$")
PLANE_RULE = re.compile(r"shallowest angle|steepest angle|most friction|least friction")
#: the part of a conductivity circuit that shows whether current flows: a light bulb, a buzzer or an electric motor
#: ("connect red wire terminal 2 to anode in buzzer", or "... to blue light bulb cathode")
COMPONENT = re.compile(r"\b(?:anode|cathode) in (.+)$|\bto (?!battery )(.+?) (?:anode|cathode)$")
THERMOMETER_RULE = re.compile(
    r"above (-?\d+(?:\.\d+)?) degrees celsius, place it in the (\w+) box\. "
    r".*below (-?\d+(?:\.\d+)?) degrees celsius, place it in the (\w+) box"
)
CONDUCTIVITY_RULE = re.compile(
    r"If it is electrically conductive, place it in the (\w+) box\. "
    r"If it is electrically nonconductive, place it in the (\w+) box"
)
#: words a referent may carry that a room view does not spell out
_STOP = {"a", "an", "the", "in", "on", "to", "of", "and", "with", "containing", "called", "inventory", "agent"}
#: category words ScienceWorld's referents use for living things ("orange in organism", "in reproducing plant")
_STOP |= {"living", "thing", "organism", "plant", "animal"}


def end_notice(score: int, mean: int | None = None) -> str:
    """What an act output ends with once ScienceWorld says the (last) task is over; `mean` is a session's."""
    session = "" if mean is None else f"; the session's mean score is {mean}/100"
    return f"{END_MARK}: ScienceWorld score {score}/100{session}. Call submit.]"


def next_notice(number: int, of: int, score: int) -> str:
    """What heads the output that ends task `number` of a session's `of` and starts the next one."""
    return f"[Task {number} of {of} is over: ScienceWorld score {score}/100. Task {number + 1} of {of} follows.]"


def task_label(number: int, of: int) -> str:
    """What heads the description of task `number` of a session's `of` (its opening and `task` outputs)."""
    return f"[Task {number} of {of}]"


@dataclass(frozen=True)
class Call:
    """A task tool call in the State: its tool, the act's action ("" for other tools) and its output
    (None when compaction removed it)."""

    name: str
    action: str
    output: str | None


def read_calls(state: State) -> list[Call]:
    """The task tool calls in `state`, oldest first (evolve round trips left out)."""
    outputs = {x.get("call_id"): text_of(x.get("output", "")) for x in state if x.get("type") == "function_call_output"}
    calls = []
    for item in state:
        if item.get("type") != "function_call" or item.get("name") == EVOLVE:
            continue
        action = ""
        if item.get("name") == "act":
            try:
                args = json.loads(item.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            action = args.get("action", "") if isinstance(args, dict) and isinstance(args.get("action"), str) else ""
        calls.append(Call(str(item.get("name")), action.strip(), outputs.get(item.get("call_id"))))
    return calls


def current_calls(calls: list[Call]) -> list[Call]:
    """The calls of the task being played: those after the newest output that ended a session's task,
    that output cut to what follows its notice (the next task's description and first view)."""
    ends = [i for i, c in enumerate(calls) if c.output and NEXT_MARK.search(c.output)]
    if not ends:
        return calls
    start = calls[ends[-1]]
    return [Call(start.name, "", start.output[NEXT_MARK.search(start.output).start() :]), *calls[ends[-1] + 1 :]]


def task_text(state: State, calls: list[Call], label: str = "") -> str | None:
    """The task description in the State: the opening message, or the newest `task` output. In a
    session, the newest text headed by the task's `label` ("[Task 3 of 8]"), from the label on."""
    if label:
        texts = (text_of(x.get("content", x.get("output", ""))) for x in reversed(state))
        return next((t[t.index(label) :] for t in texts if label in t), None)
    for item in state:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            if "Your task is" in (text := text_of(item.get("content", ""))):
                return text
    return next((c.output for c in reversed(calls) if c.name == "task" and c.output), None)


def visible_text(calls: list[Call]) -> str | None:
    """What the agent can see now by the State: the newest room view, if no act after it moved the agent,
    with every output since and the newest inventory; None when no such view is left."""
    start = next((i for i in range(len(calls) - 1, -1, -1) if calls[i].output and VIEW.search(calls[i].output)), None)
    if start is None or any(_moves(c) for c in calls[start + 1 :]):
        return None
    inventory = next((c.output for c in reversed(calls) if c.name == "inventory" and c.output), "")
    return "\n".join([*(c.output or "" for c in calls[start:]), inventory])


def _moves(call: Call) -> bool:
    return call.name == "act" and call.action.lower().startswith(("go to ", "teleport to "))


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def shows(text: str, referent: str) -> bool:
    """Whether `text` names every word of the referent (ScienceWorld's referents reorder a view's words:
    "egg turtle" for "a turtle egg", "substance in metal pot" for "a metal pot (containing lead)")."""
    return _words(referent) - _STOP <= _words(text)


def plane_times(calls: list[Call]) -> dict[str, int]:
    """Stopwatch readings in the State by the inclined plane the block was last moved to before each."""
    times: dict[str, int] = {}
    plane = None
    for call in calls:
        if call.name == "act" and (m := BLOCK_MOVE.match(call.action.lower())):
            plane = m.group(2)
        if plane and call.output and (t := TICKS.search(call.output)):
            times[plane] = int(t.group(1))
    return times


class GiveUp(Exception):
    """A fact the next step needs is gone from the State and cannot be observed again."""


@dataclass(frozen=True)
class Next:
    """The oracle's next tool call; `advances` when it is the plan's action (not a re-observation)."""

    name: str
    arguments: dict[str, Any]
    advances: bool = False


#: ways to see an object again, in order: the room, ScienceWorld's list of what can be named here
#: (its own aliases: "common toad" for a frog egg), what the agent carries
SEE_AGAIN = (Next("look", {}), Next("act", {"action": "objects"}), Next("inventory", {}))


class ScienceWorldOracle(Oracle):
    """Follows each task's plan (its gold path) in turn, reading every observed fact from the State
    (module docstring). `task_names` are the session's task types (one for a single task);
    `plan_of(i)` gives task i's plan, asked for only when the task starts, so that generating it
    reloads no other world in between (ScienceWorld may list a reloaded room in another order)."""

    def __init__(self, task_names: list[str], plan_of: Callable[[int], tuple[str, ...]]):
        if not task_names:
            raise ValueError("the oracle needs at least one task")
        self.task_names = task_names
        self._plan_of = plan_of
        self._plans: dict[int, tuple[str, ...]] = {}
        self.task = 0  # which task is being played
        self.next = 0  # the place in its plan
        self.asked: Counter[str] = Counter()  # re-observations made for the step at `next`, by what was missing

    @property
    def task_name(self) -> str:
        return self.task_names[self.task]

    @property
    def plan(self) -> tuple[str, ...]:
        if self.task not in self._plans:
            self._plans[self.task] = self._plan_of(self.task)
        return self._plans[self.task]

    @property
    def label(self) -> str:
        """What heads the current task's description in a session; "" for a single task."""
        return task_label(self.task + 1, len(self.task_names)) if len(self.task_names) > 1 else ""

    def act(self, state: State) -> list[dict[str, Any]]:
        calls = read_calls(state)
        last = calls[-1].output if calls else None
        if last is not None and (END_MARK in last or "the task is over" in last):
            return self._submit(state, "done")
        if last is not None and (m := NEXT_MARK.search(last)) and int(m.group(1)) == self.task + 1:
            self.task, self.next = self.task + 1, 0
            self.asked.clear()
        calls = current_calls(calls)
        if self.next >= len(self.plan):
            return self._submit(state, "the gold path is done")
        try:
            step = self._step(state, calls)
        except GiveUp as e:
            return self._submit(state, f"gave up: {e}")
        if step.advances:
            self.next += 1
            self.asked.clear()
        return [self.function_call(state, step.name, step.arguments)]

    def _submit(self, state: State, answer: str) -> list[dict[str, Any]]:
        return [self.function_call(state, "submit", {"answer": answer})]

    def _step(self, state: State, calls: list[Call]) -> Next:
        """The plan's next action, decided from the State where it must be, or a re-observation."""
        action: str | Next = self.plan[self.next]
        if self.task_name == "use-thermometer" and BOX_MOVE.match(action):
            action = self._thermometer_box(state, calls, action)
        elif self.task_name.startswith("test-conductivity") and BOX_MOVE.match(action):
            action = self._conductivity_box(state, calls, action)
        elif self.task_name.startswith("inclined-plane") and PLANE_FOCUS.match(action.lower()):
            action = self._plane(state, calls)
        if isinstance(action, Next):
            return action
        target = re.match(r"^(?:focus on|pick up) (.+)$", action.lower())
        if target and not shows(visible_text(calls) or "", target.group(1)):
            return self._again("view", f"{target.group(1)!r} is not in view", SEE_AGAIN)
        return Next("act", {"action": action}, advances=True)

    def _again(self, key: str, missing: str, options: tuple[Next, ...]) -> Next:
        """The next way to observe `missing` again, or GiveUp once every way was tried for this step."""
        if self.asked[key] >= len(options):
            raise GiveUp(missing)
        self.asked[key] += 1
        return options[self.asked[key] - 1]

    def _rule(self, state: State, calls: list[Call], pattern: re.Pattern) -> re.Match | Next:
        """The task's decision rule from the description in the State, or a `task` call to read it again."""
        text = task_text(state, calls, self.label)
        if text is None:
            return self._again("task", "the task description", (Next("task", {}),))
        if (rule := pattern.search(text)) is None:
            raise GiveUp("the task description has no rule for this decision")
        return rule

    def _thermometer_box(self, state: State, calls: list[Call], action: str) -> str | Next:
        rule = self._rule(state, calls, THERMOMETER_RULE)
        if isinstance(rule, Next):
            return rule
        readings = [float(m.group(1)) for c in calls if c.output and (m := TEMPERATURE.search(c.output))]
        if not readings:
            measure = next((a for a in reversed(self.plan[: self.next]) if a.startswith("use thermometer")), None)
            if measure is None:
                raise GiveUp("no thermometer reading, and the plan took none")
            return self._again("reading", "no thermometer reading", (Next("act", {"action": measure}),))
        above, above_box, below, below_box = rule.groups()
        if readings[-1] > float(above):
            return _with_box(action, above_box)
        if readings[-1] < float(below):
            return _with_box(action, below_box)
        raise GiveUp(f"the reading {readings[-1]} is on the threshold")

    def _conductivity_box(self, state: State, calls: list[Call], action: str) -> str | Next:
        rule = self._rule(state, calls, CONDUCTIVITY_RULE)
        if isinstance(rule, Next):
            return rule
        part = next((m[1] or m[2] for a in reversed(self.plan[: self.next]) if (m := COMPONENT.search(a))), None)
        if part is None:
            raise GiveUp("the plan wired no component into the circuit")
        newest = (calls[-1].output or "") if calls else ""
        lit = re.search(rf"\b{re.escape(part)}, which is (on|off)", newest) if VIEW.search(newest) else None
        if lit is None:
            return self._again("component", f"the {part} is not in the newest view", (Next("look", {}),))
        return _with_box(action, rule.group(1) if lit.group(1) == "on" else rule.group(2))

    def _plane(self, state: State, calls: list[Call]) -> str | Next:
        """The plane to focus on: the block slid slowest down the shallower or the rougher one."""
        rule = self._rule(state, calls, PLANE_RULE)
        if isinstance(rule, Next):
            return rule
        planes = {m.group(2) for a in self.plan if (m := BLOCK_MOVE.match(a.lower()))}
        times = plane_times(calls)
        if not planes or not planes <= set(times):
            raise GiveUp("a stopwatch reading is no longer in the context")
        pick = max if rule.group(0) in ("shallowest angle", "most friction") else min
        chosen = pick(sorted(planes), key=lambda p: times[p])
        if sum(times[p] == times[chosen] for p in planes) > 1:
            raise GiveUp("the readings tie")
        return f"focus on {chosen}"

    def evolve_code(self, state: State) -> str:
        return EVOLVE_CODE


def _with_box(action: str, box: str) -> str:
    """The plan's `move X to ... box` with the box the oracle decided on."""
    return f"move {BOX_MOVE.match(action).group(1)} to {box} box"


#: The targeted edit: in a session, drop everything before the call whose output started the current
#: task (finished tasks' calls, readings and views). Of the rest keep the messages (not the harness's
#: requests), the two newest tool calls, and the calls whose observation (the output less its room
#: view) holds a deciding fact (a thermometer or stopwatch reading, a recipe) or starts the task, or
#: that pair a reading with its plane (`move block to inclined plane ...`), cut to that observation;
#: drop the rest and earlier evolve round trips. The pending call stays last.
EVOLVE_CODE = r"""
const pending = state.pop();
const start = state.findLastIndex(x => /\[Task \d+ of \d+ is over: /.test(x.output));
const body = state.slice(Math.max(start - 1, 0));
const calls = body.filter(x => x.type === "function_call" && x.name !== "evolve");
const kept = body.filter(x => x.type === "message" && !String(x.content).startsWith("[harness]"));
const FACT = /measures a temperature of|The time reads|The recipe reads|\[Task \d+ of \d+ is over: /;
for (const x of calls) {
  const out = body.find(y => y.type === "function_call_output" && y.call_id === x.call_id);
  const seen = out.output.split(__MARK__)[0];
  if (calls.indexOf(x) >= calls.length - 2) kept.push(x, out);
  else if (FACT.test(seen) || /"move [^"]* to inclined plane/.test(x.arguments)) kept.push(x, {...out, output: seen});
}
return [...kept, pending];
""".replace("__MARK__", json.dumps("\n\n" + STATUS_MARK))
