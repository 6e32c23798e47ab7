"""Check a task family against the plug-in contract, like Gymnasium's `check_env` for envs.

A family written by a user fails here with a message that names the rule, the split and the
seed, instead of failing hours into a training run:

    from rl_compaction.harness.checker import check_family
    check_family(MyFamily())               # or: rl-compaction envs check my_family

It checks what `CompactionEnv`, the oracle strategies and training rely on: generation is
deterministic and seeds and splits give different tasks; instructions, tools and the opening
State are well formed; bad tool calls raise `ToolError` (the agent reads the message) rather
than crashing the env; `score` stays in [0, 1] and does not reward an empty or garbage answer;
the context-bound oracle solves the test tasks, the same way twice; and the env built on the
family passes Gymnasium's own checker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gymnasium.utils.env_checker import check_env

from rl_compaction.core.state import StateError, validate_state
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.oracle import run_oracle_episode
from rl_compaction.harness.tasks import (
    SPLITS,
    SUBMIT_TOOL,
    Difficulty,
    Task,
    TaskFamily,
    ToolError,
    get_family,
    tool_arguments,
)
from rl_compaction.protocol.evolve import EVOLVE

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_RESERVED = {EVOLVE, SUBMIT_TOOL["name"]}


class FamilyCheckError(AssertionError):
    """The family breaks a rule of the task plug-in contract; the message says which and where."""


@dataclass
class FamilyReport:
    """What the checks measured: the oracle's episode on each test seed, their figures, any warnings."""

    family: str
    #: test seed -> the oracle's episode with everything in view
    episodes: dict[int, EpisodeSummary] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def stats(self) -> EpisodeStats:
        return EpisodeStats.of(list(self.episodes.values()))


def check_family(
    family: TaskFamily | str,
    *,
    seeds: Sequence[int] = (0, 1),
    difficulty: Difficulty | None = None,
    unlimited_window: int = 1_000_000,
) -> FamilyReport:
    """Run every check on `family` (an instance or a registered name); raise `FamilyCheckError`
    at the first broken rule. The oracle plays each test seed in a window of `unlimited_window`
    tokens with no compaction and no turn limit to speak of, so it must solve the task with everything in view."""
    if isinstance(family, str):
        family = get_family(family)
    name = getattr(family, "name", None)
    _require(isinstance(name, str) and name, "the family needs a non-empty class attribute `name`")
    difficulty = difficulty or Difficulty()
    report = FamilyReport(name)
    _require(len(seeds) >= 2, "check_family needs at least two seeds to compare tasks")

    openings: dict[tuple[str, int], str] = {}  # fingerprints, to compare seeds and splits
    for split in SPLITS:
        for seed in seeds:
            where = f"{name}/{split}/seed {seed}"
            _check_task(_make(family, seed, split, difficulty, where), where)
            first = _fingerprint(_make(family, seed, split, difficulty, where), where)
            _require(
                first == _fingerprint(_make(family, seed, split, difficulty, where), where),
                f"{where}: the task is not deterministic (instructions, tools, initial State or the output of the "
                "oracle's first tool call differ between two makes); seed every random choice from "
                "split_seed(name, split, seed)",
            )
            openings[split, seed] = first
    for split in SPLITS:
        _require(
            len({openings[split, s] for s in seeds}) > 1,
            f"{name}/{split}: seeds {list(seeds)} all give the same task",
        )
    for seed in seeds:
        _require(
            len({openings[split, seed] for split in SPLITS}) == len(SPLITS),
            f"{name}/seed {seed}: two splits give the same task; derive the RNG from split_seed(name, split, seed)",
        )

    config = EnvConfig(context_window=unlimited_window, compaction_request="", max_turns=1_000)
    env = CompactionEnv(family, split="test", difficulty=difficulty, config=config)
    for i, seed in enumerate(seeds):
        where = f"{name}/test/seed {seed}"
        end = _oracle_episode(env, seed, where)
        _require(
            end.success,
            f"{where}: the oracle did not solve the task with everything in view (score {end.score:.3f}, "
            f"{end.turns} turns, truncated: {end.truncated_reason})",
        )
        if i == 0:
            repeat = _oracle_episode(env, seed, where)
            _require(
                (repeat.score, repeat.turns, repeat.ledger.cost) == (end.score, end.turns, end.ledger.cost),
                f"{where}: two oracle episodes of the same task differ (score, turns or cost); the oracle or "
                "the tools are not deterministic",
            )
        report.episodes[seed] = end
    peak = max(e.ledger.peak_context_tokens for e in report.episodes.values())
    default_window = EnvConfig().context_window
    if peak < default_window:
        report.warnings.append(
            f"the oracle's peak context ({peak:,} tokens) stays under a {default_window:,}-token window at this "
            "difficulty, so compaction is never needed"
        )
    try:
        check_env(env, skip_render_check=True)
    except Exception as e:  # Gymnasium reports in AssertionError, but a broken task can raise anything
        raise FamilyCheckError(f"{name}: Gymnasium's env checker failed on CompactionEnv: {e}") from e
    return report


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise FamilyCheckError(message)


def _make(family: TaskFamily, seed: int, split: str, difficulty: Difficulty, where: str) -> Task:
    try:
        task = family.make(seed, split, difficulty)
    except Exception as e:
        raise FamilyCheckError(f"{where}: make() raised {type(e).__name__}: {e}") from e
    _require(isinstance(task, Task), f"{where}: make() returned {type(task).__name__}, not a Task")
    return task


def _fingerprint(task: Task, where: str) -> str:
    """What identifies a task: its opening, plus the output of the oracle's first tool call (two
    tasks may open alike and differ in what their tools return)."""
    state = task.initial_state()
    parts: list[Any] = [task.instructions, task.tools(), state]
    try:
        turn = task.oracle().act(state)
        calls = [x for x in turn if x.get("type") == "function_call" and x.get("name") not in _RESERVED]
        if calls:
            parts.append(task.call_tool(calls[0]["name"], tool_arguments(calls[0])))
    except Exception as e:
        raise FamilyCheckError(f"{where}: the oracle's first turn failed: {type(e).__name__}: {e}") from e
    return json.dumps(parts, sort_keys=True, ensure_ascii=False)


def _check_task(task: Task, where: str) -> None:
    _require(isinstance(task.instructions, str) and task.instructions.strip(), f"{where}: instructions must be text")
    tools = task.tools()
    _require(isinstance(tools, list) and tools, f"{where}: tools() must return a non-empty list of function tools")
    names = []
    for i, tool in enumerate(tools):
        at = f"{where}: tools()[{i}]"
        _require(isinstance(tool, dict) and tool.get("type") == "function", f"{at} must be a function tool dict")
        tool_name = tool.get("name")
        _require(
            isinstance(tool_name, str) and bool(_TOOL_NAME.match(tool_name)),
            f"{at} needs a name of 1-64 letters, digits, _ or -; got {tool_name!r}",
        )
        _require(tool_name not in _RESERVED, f"{at} is named {tool_name!r}, which the env reserves")
        params = tool.get("parameters")
        _require(
            isinstance(params, dict) and params.get("type") == "object",
            f"{at} ({tool_name}) needs a JSON-schema object as parameters",
        )
        try:
            json.dumps(tool, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise FamilyCheckError(f"{at} ({tool_name}) is not JSON: {e}") from e
        names.append(tool_name)
        _check_bad_calls(task, tool_name, params, at)
    _require(len(set(names)) == len(names), f"{where}: tool names repeat: {names}")
    _check_raises_tool_error(task, "no_such_tool_", {}, f"{where}: call_tool of an unknown tool")
    state = task.initial_state()
    try:
        validate_state(state)
    except StateError as e:
        raise FamilyCheckError(f"{where}: initial_state() is not a valid State: {e}") from e
    _require(bool(state), f"{where}: initial_state() is empty; the agent needs the task statement")
    for answer in ("", "xyzzy"):
        try:
            score = task.score(answer)
        except Exception as e:
            raise FamilyCheckError(f"{where}: score({answer!r}) raised {type(e).__name__}: {e}") from e
        _require(
            isinstance(score, int | float) and 0.0 <= score < 1.0,
            f"{where}: score({answer!r}) must be a number in [0, 1) (a non-answer cannot succeed), got {score!r}",
        )


def _check_bad_calls(task: Task, name: str, params: dict[str, Any], at: str) -> None:
    """A call missing its required arguments, or with an unknown one, is the agent's mistake."""
    if params.get("required"):
        _check_raises_tool_error(task, name, {}, f"{at} ({name}) called without its required arguments")
    if params.get("additionalProperties") is False:
        _check_raises_tool_error(task, name, {"no_such_argument_": 1}, f"{at} ({name}) called with an unknown argument")


def _check_raises_tool_error(task: Task, name: str, arguments: dict[str, Any], what: str) -> None:
    try:
        task.call_tool(name, arguments)
    except ToolError:
        return
    except Exception as e:
        raise FamilyCheckError(
            f"{what} raised {type(e).__name__}: {e}; raise ToolError so the agent reads the message"
        ) from e
    raise FamilyCheckError(f"{what} returned normally; it must raise ToolError")


def _oracle_episode(env: CompactionEnv, seed: int, where: str) -> EpisodeSummary:
    try:
        info = run_oracle_episode(env, seed)
    except Exception as e:
        raise FamilyCheckError(f"{where}: the oracle episode raised {type(e).__name__}: {e}") from e
    return EpisodeSummary.from_info(info)
