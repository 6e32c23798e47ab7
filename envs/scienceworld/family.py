"""The scienceworld family: ScienceWorld's elementary-science tasks, played through its own simulator.

ScienceWorld (Wang et al., 2022; PyPI `scienceworld`) is a text world of rooms, substances,
devices, plants and animals, with 30 task types, each in many variations, split by its authors
into train / dev / test variations. This family plays it unchanged: the agent sends actions with
`act` (plus the free `look`, `inventory` and `task`), reads the simulator's observations, and is
scored by ScienceWorld's own score (0-100, divided by 100) when it submits. Its train / dev /
test variations are this family's train / validation / test splits.

Why memory matters: a task runs for tens to hundreds of actions, and the facts that decide it
(a measured temperature, whether a bulb lit, how long a block took to slide, where a thing was)
turn up once, among room descriptions that go stale. `Difficulty.scale` sets how often an act's
output also shows the room and the inventory after the action (ScienceWorld's free look and
inventory, the view SwiftSage-style agents are given): after every action at 1.0, after every
round(1/scale)-th below it. Those views are what piles up; at 1.0 the long task types outgrow a
32k window. Above 1.0, scale makes an episode a *session* of round(scale) tasks played one after
another (views after every action): the act output that ends one task gives the next task's
description and first view, the agent submits once after the last, and the score is the mean of
ScienceWorld's scores of the tasks. Each task's deciding facts stay within it, so a session's
context grows past 200k tokens while what the current task needs stays small: the horizon where
compaction pays. `Difficulty.level` picks the task types by horizon (see `LEVELS`).

Seeds enumerate the split: with m types at the level and sessions of s tasks, seed k plays the
single tasks k*s .. k*s+s-1, single task j being type ``LEVELS[level][j % m]`` in the ``j // m``-th
variation of that type's split (wrapping around). So with one task per episode seeds 0..m-1 cover
every type of the level once, and a session never repeats a type when s <= m.
"""

from __future__ import annotations

import copy
import subprocess
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

from rl_compaction_envs.scienceworld.oracle import STATUS_MARK, ScienceWorldOracle, end_notice, next_notice, task_label
from rl_compaction_envs.scienceworld.simulator import Episode, Simulator, SimulatorError

from rl_compaction.core.state import State
from rl_compaction.harness.tasks import (
    SPLITS,
    Difficulty,
    Oracle,
    Task,
    TaskFamily,
    ToolError,
    check_arguments,
    function_tool,
)

#: The task types this family plays, with the median length of their gold paths over test variations
#: (measured with scienceworld 1.2.3). Left out: the two Mendelian-genetics and the two melting-point
#: types, whose deciding observations the oracle does not read from the State (envs/README.md).
TASK_TYPES: dict[str, int] = {
    "boil": 105,
    "grow-fruit": 96,
    "inclined-plane-friction-unnamed-surfaces": 89,
    "inclined-plane-friction-named-surfaces": 82,
    "inclined-plane-determine-angle": 78,
    "freeze": 69,
    "grow-plant": 68,
    "melt": 50,
    "change-the-state-of-matter-of": 50,
    "test-conductivity": 43,
    "identify-life-stages-1": 42,
    "chemistry-mix": 30,
    "chemistry-mix-paint-tertiary-color": 28,
    "test-conductivity-of-unknown-substances": 28,
    "chemistry-mix-paint-secondary-color": 20,
    "use-thermometer": 18,
    "power-component-renewable-vs-nonrenewable-energy": 17,
    "identify-life-stages-2": 16,
    "find-living-thing": 13,
    "find-animal": 13,
    "power-component": 13,
    "find-plant": 12,
    "find-non-living-thing": 7,
    "lifespan-longest-lived-then-shortest-lived": 7,
    "lifespan-longest-lived": 6,
    "lifespan-shortest-lived": 6,
}

#: types whose answer follows from a measurement made long before it is used (the oracle's deciding steps)
MEASURED = (
    "inclined-plane-friction-unnamed-surfaces",
    "inclined-plane-friction-named-surfaces",
    "inclined-plane-determine-angle",
    "test-conductivity",
    "test-conductivity-of-unknown-substances",
    "use-thermometer",
)


def _order(types: list[str]) -> tuple[str, ...]:
    """Seed order: the measured types first, so the first seeds test memory hardest, then by horizon."""
    return tuple(sorted(types, key=lambda t: (t not in MEASURED, -TASK_TYPES[t])))


#: level -> task types: 1 = short horizon (median gold path <= 20 actions), 2 = all, 3 = long (>= 40)
LEVELS: dict[int, tuple[str, ...]] = {
    1: _order([t for t, n in TASK_TYPES.items() if n <= 20]),
    2: _order(list(TASK_TYPES)),
    3: _order([t for t, n in TASK_TYPES.items() if n >= 40]),
}

#: ScienceWorld's split names for this project's
_SPLIT_NAMES = {"train": "Train", "validation": "Dev", "test": "Test"}

#: (task type, split) -> variation indices, read from the simulator once per process
_VARIATIONS: dict[tuple[str, str], tuple[int, ...]] = {}

MAX_ACTION_CHARS = 300

INSTRUCTIONS = """\
You are an agent in ScienceWorld, a text simulation of a house (kitchen, bathroom, workshop, \
greenhouse, art studio, foundry, the outside and more) where you carry out an elementary science \
task. Act with act(action), one ScienceWorld action at a time, for example: "look around", \
"open door to kitchen", "go to kitchen", "pick up thermometer", "look at inclined plane", \
"use thermometer in inventory on water", "move metal pot to stove", "activate stove", \
"connect battery anode to red wire terminal 1", "mix cup", "read recipe", "focus on red box", \
"wait1" (let one step pass) or "wait" (ten steps). act("help") lists every action and act("objects") \
every object you can name. When an action is ambiguous the output numbers the choices: answer with \
act("0"), act("1"), ... `focus on` commits to an object: focus only on what the task names, since \
focusing on the wrong one fails the task. look(), inventory() and task() show the room, what you \
carry and the task again without letting time pass. When an act output says the task is over, call \
submit (any short answer): the score is ScienceWorld's own (0-100, here divided by 100) at that \
moment, so submitting early keeps only the partial score reached."""

ACT_TOOL = function_tool(
    "act",
    "Take one ScienceWorld action (time passes); returns what happened.",
    {"action": {"type": "string", "description": "One action, e.g. 'open door to kitchen' or '0' for a choice."}},
    ["action"],
)
LOOK_TOOL = function_tool("look", "Describe the room you are in (no time passes).", {}, [])
INVENTORY_TOOL = function_tool("inventory", "List what you carry (no time passes).", {}, [])
TASK_TOOL = function_tool("task", "Show the task description again.", {}, [])
TOOLS = (ACT_TOOL, LOOK_TOOL, INVENTORY_TOOL, TASK_TOOL)

SESSION_INSTRUCTIONS = """

This episode is a session of {n} tasks, each in its own world, played one after another. When an act \
output says "[Task k of {n} is over ...]", the same output gives the next task's description and its \
first view, and from then on act, look, inventory and task concern the next task. Call submit once, \
after the last task is over: the score is the mean of the {n} tasks' scores (a task not finished \
keeps the partial score it reached, a task not started scores 0)."""


def session_length(scale: float) -> int:
    """Tasks per episode: round(scale) above 1.0 (rounding halves up), otherwise one."""
    return max(1, int(scale + 0.5))


class ScienceWorldTask(Task):
    """A ScienceWorld task variation, or a session of several played one after another (module
    docstring), in the family's simulator process."""

    family: ClassVar[str] = "scienceworld"
    instructions = INSTRUCTIONS

    def __init__(self, simulator: Simulator, episodes: Sequence[Episode], view_every: int):
        if not episodes:
            raise ValueError("a ScienceWorld task needs at least one episode")
        self._sim = simulator
        self.episodes = tuple(episodes)
        self.view_every = view_every
        self.current = 0  # index of the task being played
        self.scores = [0] * len(self.episodes)  # ScienceWorld's score of each task so far, -100..100
        self.over = False  # the last task is over
        if len(self.episodes) > 1:
            self.instructions = INSTRUCTIONS + SESSION_INSTRUCTIONS.format(n=len(self.episodes))

    @property
    def episode(self) -> Episode:
        """The task being played."""
        return self.episodes[self.current]

    @property
    def sw_score(self) -> int:
        """ScienceWorld's score of the task being played after its last action, -100..100."""
        return self.scores[self.current]

    def label(self, index: int) -> str:
        """What heads task `index`'s description in a session ("[Task 3 of 8] "); "" for a single task."""
        return task_label(index + 1, len(self.episodes)) + " " if len(self.episodes) > 1 else ""

    def tools(self) -> list[dict[str, Any]]:
        return copy.deepcopy(list(TOOLS))

    def initial_state(self) -> State:
        description, opening = self._sim.opening(self.episodes[0])
        content = f"{self.label(0)}{description.strip()}\n\n{opening.strip()}"
        return [{"type": "message", "role": "user", "content": content}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name not in {t["name"] for t in TOOLS}:
            raise ToolError(f"unknown tool {name!r}; this task's tools are act, look, inventory and task")
        if name != "act":
            check_arguments(name, arguments, {})
            read = {"look": self._sim.look, "inventory": self._sim.inventory, "task": self._sim.task_description}
            return ("" if name != "task" else self.label(self.current)) + self._simulate(read[name]).strip()
        action = check_arguments(name, arguments, {"action": str})["action"].strip()
        if not action:
            raise ToolError("act: 'action' is empty; give one ScienceWorld action, e.g. 'look around'")
        if len(action) > MAX_ACTION_CHARS:
            raise ToolError(f"act: 'action' has {len(action)} characters; one action has at most {MAX_ACTION_CHARS}")
        if self.over:
            raise ToolError(f"the task is over (ScienceWorld score {self.sw_score}/100): call submit")
        outcome = self._simulate(self._sim.step, action)
        self.scores[self.current] = outcome.score
        ended = outcome.completed or outcome.score < 0
        text = outcome.observation.strip()
        if ended and self.current + 1 < len(self.episodes):
            return f"{text}\n\n{next_notice(self.current + 1, len(self.episodes), outcome.score)}\n{self._start_next()}"
        self.over = ended
        if self.episode.moves % self.view_every == 0:
            try:  # the action has happened: a failing view must not make it look as if it had not
                view = f"{self._sim.look(self.episode).strip()}\n{self._sim.inventory(self.episode).strip()}"
            except SimulatorError as e:
                view = f"(no view: {e})"
            text += f"\n\n{STATUS_MARK}\n{view}"
        if self.over:
            text += "\n\n" + end_notice(self.sw_score, self.mean_score() if len(self.episodes) > 1 else None)
        return text

    def _start_next(self) -> str:
        """Move the session on to its next task and show its description and first view (the finished
        world's view would only be stale)."""
        self.current += 1
        try:  # the finishing action has happened: a failing load must not make it look as if it had not
            description, opening = self._sim.opening(self.episode)
        except SimulatorError as e:
            return f"{self.label(self.current)}(could not show it: {e}; call task() and look())"
        return f"{self.label(self.current)}{description.strip()}\n\n{opening.strip()}"

    def mean_score(self) -> int:
        """The session's score so far on ScienceWorld's 0-100 scale: each task's score clipped at 0, averaged."""
        return round(sum(max(0, min(100, s)) for s in self.scores) / len(self.scores))

    def _simulate(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(self.episode, *args)
        except SimulatorError as e:
            raise ToolError(str(e)) from None

    def score(self, answer: str) -> float:
        """ScienceWorld's score when the agent submits (the answer text is not scored), in [0, 1]; in a
        session the mean over its tasks."""
        return sum(max(0, min(100, s)) for s in self.scores) / 100 / len(self.scores)

    def oracle(self) -> Oracle:
        episodes = self.episodes
        return ScienceWorldOracle([e.task_name for e in episodes], lambda i: self._sim.gold_path(episodes[i]))


class ScienceWorldFamily(TaskFamily):
    """ScienceWorld tasks from its official variation splits (see the module docstring)."""

    name: ClassVar[str] = "scienceworld"
    description: ClassVar[str] = (
        "ScienceWorld's science tasks in its own simulator (optional extra [scienceworld], needs Java): "
        "measurements and findings must be carried through stale room views."
    )

    def __init__(self) -> None:
        self._sim = Simulator()
        # an env dropped without close() still ends its Java process when it is garbage-collected
        weakref.finalize(self, self._sim.close)

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> ScienceWorldTask:
        difficulty = difficulty or Difficulty()
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        types, size = LEVELS[difficulty.level], session_length(difficulty.scale)
        episodes = []
        for single in range(seed * size, (seed + 1) * size):
            task_name = types[single % len(types)]
            variations = self.variations(task_name, split)
            episodes.append(Episode(task_name, variations[single // len(types) % len(variations)]))
        return ScienceWorldTask(self._sim, episodes, view_every=max(1, round(1 / difficulty.scale)))

    def variations(self, task_name: str, split: str) -> tuple[int, ...]:
        """ScienceWorld's own variation indices of `task_name` for `split` (train / validation / test)."""
        if task_name not in TASK_TYPES:
            raise ValueError(f"unknown task type {task_name!r}; this family plays {', '.join(TASK_TYPES)}")
        if (task_name, split) not in _VARIATIONS:
            for ours, theirs in _SPLIT_NAMES.items():
                _VARIATIONS[task_name, ours] = self._sim.variations(task_name, theirs)
        return _VARIATIONS[task_name, split]

    @property
    def process(self) -> subprocess.Popen | None:
        """The simulator's Java process while one runs."""
        return self._sim.process

    def close(self) -> None:
        """End the simulator process (a later task starts a new one)."""
        self._sim.close()
