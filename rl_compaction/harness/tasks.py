"""The Task plug-in contract: what a task family provides to `CompactionEnv`.

A family is found through the entry-point group ``rl_compaction.tasks`` (name -> a
`TaskFamily` subclass), so a third party adds one from its own package without editing
this repository. A family makes seeded `Task` instances; a task supplies its tools, its
opening context, tool results, a checker and a scripted, context-bound `Oracle`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar

from rl_compaction.core.render import function_tool  # part of the plug-in API: families build their tools with it
from rl_compaction.core.state import State

SPLITS = ("train", "validation", "test")
ENTRY_POINT_GROUP = "rl_compaction.tasks"


class ToolError(Exception):
    """A task tool was called with bad arguments; the message goes back to the agent as the tool output."""


#: The largest `Difficulty.scale`: scale 1.0 is an episode of ~32k tokens of tool output.
MAX_SCALE = 1000.0


@dataclass(frozen=True)
class Difficulty:
    """Knobs shared by every family (families may read `level` as they see fit).

    scale: multiplies the volume of tool output. 1.0 (default) gives an oracle episode well
        over 32k tokens of tool output; about 0.06 gives ~2k tokens for fast CPU tests.
    level: 1 (easy) to 3 (hard): more hops / records / revisions / bugs and more distractors.
    """

    scale: float = 1.0
    level: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)):
            raise ValueError(f"difficulty scale must be a number, got {self.scale!r}")
        # finite and bounded: generators multiply volumes by it (inf overflowed them, 1e300 made them
        # allocate without end); MAX_SCALE is ~30M tokens of tool output, past any context window
        if not 0 < self.scale <= MAX_SCALE:
            raise ValueError(f"difficulty scale must be in (0, {MAX_SCALE:g}], got {self.scale}")
        if self.level not in (1, 2, 3):
            raise ValueError(f"difficulty level must be 1, 2 or 3, got {self.level}")


def split_seed(family: str, split: str, seed: int) -> int:
    """Map (family, split, seed) to the generator's RNG seed; splits never share one."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    digest = hashlib.sha256(f"{family}/{split}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


SUBMIT_TOOL = function_tool(
    "submit",
    "Submit the final answer. Ends the task; only the answer is scored.",
    {"answer": {"type": "string", "description": "The final answer in the format the task asks for."}},
    ["answer"],
)


class Oracle(ABC):
    """A scripted solver that decides only from what its current State holds.

    It never reads the generator's hidden truth: it parses the tool outputs present in the
    State, so when compaction has removed a fact it must fetch it again or fail.
    """

    #: how many call ids this oracle has handed out (its only memory besides the State)
    calls_made: int = 0

    def function_call(self, state: State, name: str, arguments: dict[str, Any], prefix: str = "call_") -> dict:
        """A function_call item with a call_id (`prefix` + counter) unused in `state` and by this oracle."""
        used = {item.get("call_id") for item in state}
        while True:
            self.calls_made += 1
            call_id = f"{prefix}{self.calls_made}"
            if call_id not in used:
                break
        return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}

    @abstractmethod
    def act(self, state: State) -> list[dict[str, Any]]:
        """The next model turn: Responses output items, e.g. one function_call
        ``{"type": "function_call", "call_id": ..., "name": ..., "arguments": json}`` or an
        assistant message ``{"role": "assistant", "content": "..."}``. call_ids must be unique
        across the episode. Submitting is a call of the `submit` tool."""

    def evolve_code(self, state: State) -> str | None:
        """Targeted compaction: JavaScript (body of ``function evolve(state)``) that keeps the
        exact evidence this task still needs and drops the rest; None if the family has none."""
        return None

    def summary_code(self, state: State) -> str | None:
        """A summary edit: JavaScript that replaces the context with one new message retyping the
        task and the facts it still needs. It keeps what the targeted edit keeps, so it succeeds as
        often, but every fact costs output tokens (and can be mistyped by a model) and the new first
        item breaks the cached prefix: the expensive alternative in demonstrations, so a cost
        reward has a choice to decide. None if the family has none."""
        return None

    def early_edit_code(self, state: State) -> str | None:
        """The targeted edit with a short annotation inserted as the first item of the State: it
        keeps what the targeted edit keeps, but an edit at the start of the context re-processes
        everything after it (the cached prefix ends at the system message), where the same note at
        the end would keep the cache. None if the family has none."""
        return None

    def recent_edit_code(self, state: State) -> str | None:
        """A conservative edit: what the targeted edit keeps, plus the newest tool results, which the task
        no longer needs. It succeeds as often, but the larger context is paid for at every later turn
        and brings the next compaction sooner. None if the family has none."""
        return None


class Task(ABC):
    """One generated task instance."""

    family: ClassVar[str]

    #: task-specific system instructions (the env adds the State suffix and tool rules).
    instructions: str

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The task's own tools as Responses function tool definitions (not evolve or submit)."""

    @abstractmethod
    def initial_state(self) -> State:
        """The opening context, e.g. one user message with the task statement."""

    @abstractmethod
    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a task tool; raise `ToolError` for unknown tools or bad arguments."""

    def user_reply(self, text: str) -> str | None:
        """Interactive tasks: the simulated user's next message after a plain assistant
        message `text`; None when the user has nothing to add (the default)."""
        return None

    @abstractmethod
    def score(self, answer: str) -> float:
        """Score the submitted answer in [0, 1] (partial credit allowed). The env scores anything else
        (NaN, inf, 7.5, a string) 0 and records a ``score_error`` event."""

    @abstractmethod
    def oracle(self) -> Oracle:
        """A fresh context-bound oracle for this instance."""


class TaskFamily(ABC):
    """A seeded generator of tasks. Train, validation and test splits share no seeds and
    no entity or template pools."""

    name: ClassVar[str]
    description: ClassVar[str] = ""

    @abstractmethod
    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> Task:
        """Generate the task for `seed` in `split` (deterministic)."""

    def close(self) -> None:
        """Release what the family holds outside Python, such as a simulator process (`CompactionEnv.close`
        calls it). A closed family may be used again and starts what it needs anew. Nothing by default."""
        return None


@functools.cache
def _entry_points() -> dict[str, Any]:
    """Scanned once per process (installed plug-ins do not change while it runs)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def family_names() -> list[str]:
    """Names of the registered families, without importing them."""
    return sorted(_entry_points())


def task_families() -> dict[str, type[TaskFamily]]:
    """Every registered family class, by name (entry-point group ``rl_compaction.tasks``)."""
    return {name: ep.load() for name, ep in sorted(_entry_points().items())}


def get_family(name: str) -> TaskFamily:
    """An instance of the family registered as `name` (only that plug-in is imported)."""
    eps = _entry_points()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none (is the package installed?)"
        raise KeyError(f"unknown task family {name!r}; registered: {known}")
    return eps[name].load()()


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_json_answer(answer: Any) -> dict[str, Any] | None:
    """A submitted answer as a JSON object (a surrounding markdown code fence is tolerated), or None."""
    if not isinstance(answer, str):
        return None
    text = answer.strip()
    if m := _FENCE.match(text):
        text = m.group(1)
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def check_arguments(tool: str, arguments: Any, schema: dict[str, type]) -> dict[str, Any]:
    """Return `arguments` if it holds exactly the keys of `schema` with those types (an int is
    never a bool); otherwise raise the ToolError the agent reads."""
    if not isinstance(arguments, dict):
        raise ToolError(f"{tool}: arguments must be a JSON object")
    expected = ", ".join(repr(k) for k in schema) or "no arguments"
    extra = sorted(set(arguments) - set(schema))
    if extra:
        raise ToolError(f"{tool}: unexpected argument(s) {', '.join(extra)}; it takes only {expected}")
    for key, kind in schema.items():
        if key not in arguments:
            raise ToolError(f"{tool}: missing required argument {key!r}")
        value = arguments[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            wanted = {str: "a string", int: "an integer"}.get(kind, kind.__name__)
            raise ToolError(f"{tool}: {key!r} must be {wanted}, got {type(value).__name__}")
    return arguments


def tool_arguments(item: dict[str, Any]) -> dict[str, Any]:
    """Parse a function_call's JSON arguments (an object), or raise ToolError."""
    try:
        args = json.loads(item.get("arguments", ""))
    except json.JSONDecodeError as e:
        raise ToolError(f"arguments are not valid JSON: {e.msg}") from None
    if not isinstance(args, dict):
        raise ToolError("arguments must be a JSON object")
    return args
