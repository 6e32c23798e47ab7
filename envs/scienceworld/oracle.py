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
    circuit's light bulb is on in a view that is the newest tool output; otherwise the oracle looks.
  - inclined-plane-*: the plane follows from the stopwatch readings in the State, each paired with the
    plane the block was last moved to (the slower block marks the shallower angle or the more friction).
    A lost reading cannot be observed again without redoing the experiment, so the oracle gives up.
- A decision that needs the task description, when compaction removed it, reads it again with `task`.

Its memory besides the State is procedure, never a fact: its place in the gold path and how many
re-observations it made for the current step.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rl_compaction.evolve import EVOLVE
from rl_compaction.state import State, text_of
from rl_compaction.tasks import Oracle

#: heads the room view and inventory an act output carries (`Difficulty.scale`)
STATUS_MARK = "[around you now]"
END_MARK = "[The task is over"

VIEW = re.compile(r"This (?:room|outside location) is called the ")
TEMPERATURE = re.compile(r"measures a temperature of (-?\d+(?:\.\d+)?) degrees celsius")
TICKS = re.compile(r"The time reads (\d+) ticks")
BOX_MOVE = re.compile(r"^move (.+) to (\w+) box$", re.IGNORECASE)
PLANE_FOCUS = re.compile(r"^focus on (inclined plane.*)$")
BLOCK_MOVE = re.compile(r"^move (.+?) to (inclined plane.*)$")
PLANE_RULE = re.compile(r"shallowest angle|steepest angle|most friction|least friction")
BULB = re.compile(r"(\w+ light bulb)")
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


def end_notice(score: int) -> str:
    """What an act output ends with once ScienceWorld says the task is over."""
    return f"{END_MARK}: ScienceWorld score {score}/100. Call submit.]"


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


def task_text(state: State, calls: list[Call]) -> str | None:
    """The task description in the State: the opening message, or the newest `task` output."""
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
    """Follows `plan` (the gold path), reading every observed fact from the State (module docstring)."""

    def __init__(self, task_name: str, plan: tuple[str, ...]):
        self.task_name = task_name
        self.plan = plan
        self.next = 0  # the place in the plan
        self.asked: Counter[str] = Counter()  # re-observations made for the step at `next`, by what was missing

    def act(self, state: State) -> list[dict[str, Any]]:
        calls = read_calls(state)
        last = calls[-1].output if calls else None
        if last is not None and (END_MARK in last or "the task is over" in last):
            return self._submit(state, "done")
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
        text = task_text(state, calls)
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
        bulb = next((m.group(1) for a in reversed(self.plan[: self.next]) if (m := BULB.search(a))), None)
        if bulb is None:
            raise GiveUp("the plan built no circuit with a light bulb")
        newest = (calls[-1].output or "") if calls else ""
        lit = re.search(rf"\b{re.escape(bulb)}, which is (on|off)", newest) if VIEW.search(newest) else None
        if lit is None:
            return self._again("bulb", f"the {bulb} is not in the newest view", (Next("look", {}),))
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


#: The targeted edit: keep the messages (not the harness's requests), the two newest tool calls, and
#: the calls whose outputs hold a deciding fact (a thermometer or stopwatch reading, a recipe) or pair
#: one with its plane (`move block to inclined plane ...`); cut the stale room view off every kept output but the
#: newest two; drop the rest and earlier evolve round trips. The pending call stays last.
EVOLVE_CODE = r"""
const pending = state[state.length - 1];
const body = state.slice(0, -1);
const FACT = /measures a temperature of|The time reads|The recipe reads/;
const MARK = "\n\n" + __MARK__;
const outputs = new Map(body.filter(x => x.type === "function_call_output").map(x => [x.call_id, x]));
const calls = body.filter(x => x.type === "function_call" && x.name !== "evolve");
const recent = new Set(calls.slice(-2).map(x => x.call_id));
const keep = new Set(calls.filter(x => {
  const out = outputs.get(x.call_id);
  const pairsPlane = /"action": *"move [^"]* to inclined plane/i.test(x.arguments);
  return recent.has(x.call_id) || FACT.test(out ? out.output : "") || pairsPlane;
}).map(x => x.call_id));
const kept = [];
for (const x of body) {
  if (x.type === "message") { if (!String(x.content).startsWith("[harness]")) kept.push(x); continue; }
  if (!keep.has(x.call_id)) continue;
  if (x.type === "function_call_output" && !recent.has(x.call_id) && typeof x.output === "string") {
    const cut = x.output.indexOf(MARK);
    if (cut >= 0) x.output = x.output.slice(0, cut);
  }
  kept.push(x);
}
return [...kept, pending];
""".replace("__MARK__", json.dumps(STATUS_MARK))
