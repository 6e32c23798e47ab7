"""Fixed harness strategies: compaction without the model, written as evolve code.

Each strategy turns the State (ending with the pending evolve call the harness made) into
JavaScript that runs through the same sandbox and protocol as a model's edit, so their costs
and failures are measured the same way. All of them drop earlier evolve round-trips (call
and receipt together) and keep the task statement: the items before the first model turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rl_compaction.core.state import State

if TYPE_CHECKING:
    from rl_compaction.harness.env import CompactionEnv

# Shared JS helpers: units are a function_call with its output, or a single other item.
_PRELUDE = r"""
const pending = state[state.length - 1];
const body = state.slice(0, -1);
const isEvolve = (x) => x.type === "function_call" && x.name === "evolve";
const evolveIds = new Set(body.filter(isEvolve).map((x) => x.call_id));
const kept = body.filter((x) => !evolveIds.has(x.call_id));
let head = kept.findIndex((x) => x.type === "function_call" || (x.type === "message" && x.role === "assistant"));
if (head < 0) head = kept.length;
const task = kept.slice(0, head);
const units = [];
const byCall = new Map();
for (const x of kept.slice(head)) {
  if (x.type === "function_call_output" && byCall.has(x.call_id)) { byCall.get(x.call_id).push(x); continue; }
  const unit = [x];
  if (x.type === "function_call") byCall.set(x.call_id, unit);
  units.push(unit);
}
const size = (xs) => xs.reduce((n, x) => n + JSON.stringify(x).length, 0);
"""


def _code(params: dict[str, Any], body: str) -> str:
    return f"const P = {json.dumps(params, ensure_ascii=False)};\n{_PRELUDE}\n{body.strip()}\n"


def _char_budget(state: State, env: CompactionEnv, keep_fraction: float) -> int:
    """Characters of context to keep: `keep_fraction` of the threshold, via the current chars/token ratio."""
    tokens = max(1, len(env.counter.input_ids(env.instructions, env.tools, state[:-1])))
    chars = len(json.dumps(state, ensure_ascii=False))
    return int(env.config.compaction_threshold * keep_fraction * chars / tokens)


@dataclass(frozen=True)
class SlidingWindow:
    """Keep the task and the newest turns; drop the oldest turns until under budget."""

    keep_fraction: float = 0.5
    name: str = "sliding_window"

    def __call__(self, state: State, env: CompactionEnv) -> str:
        return _code(
            {"budget": _char_budget(state, env, self.keep_fraction)},
            """
let total = size(task) + units.reduce((n, u) => n + size(u), 0);
let first = 0;
while (first < units.length - 1 && total > P.budget) { total -= size(units[first]); first++; }
return [...task, ...units.slice(first).flat(), pending];
""",
        )


@dataclass(frozen=True)
class ClearToolOutputs:
    """Replace the outputs of all but the newest `keep_last` tool calls by a placeholder; calls stay."""

    keep_last: int = 2
    placeholder: str = "[output cleared by the harness to save context]"
    name: str = "clear_tool_outputs"

    def __call__(self, state: State, env: CompactionEnv) -> str:
        return _code(
            {"keep_last": self.keep_last, "placeholder": self.placeholder},
            """
const calls = units.filter((u) => u[0].type === "function_call");
const keepFrom = Math.max(0, calls.length - P.keep_last);
calls.slice(0, keepFrom).forEach((u) => { if (u[1]) u[1].output = P.placeholder; });
return [...task, ...units.flat(), pending];
""",
        )


@dataclass(frozen=True)
class Summary:
    """Replace all turns but the newest `keep_last` by one message written by `summarize`.

    `summarize(state, env) -> str` is the hook for a model-written summary (`rl_compaction.evaluation.evaluate`
    backs it with the evaluated model); it records its own model call in `env.ledger`.
    """

    summarize: Callable[[State, CompactionEnv], str]
    keep_last: int = 2
    name: str = "summary"

    def __call__(self, state: State, env: CompactionEnv) -> str:
        text = self.summarize(state[:-1], env)
        return _code(
            {"keep_last": self.keep_last, "summary": text},
            """
const recent = units.slice(Math.max(0, units.length - P.keep_last));
const note = {type: "message", role: "user", content: "[summary of earlier work]\\n" + P.summary};
return [...task, note, ...recent.flat(), pending];
""",
        )


#: Strategies that need nothing but the env; "none" means no harness compaction.
HARNESS_STRATEGIES: dict[str, Callable[[], Any]] = {
    "sliding_window": SlidingWindow,
    "clear_tool_outputs": ClearToolOutputs,
}
