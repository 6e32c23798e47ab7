"""A minimal episode loop for testing task families without the env: the oracle acts on its
State, task tools answer, and an optional Python `compact(state) -> state` runs every
`compact_every` turns to simulate lossy compaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from rl_compaction.core.state import State, validate_state
from rl_compaction.harness.tasks import Task, ToolError, tool_arguments


@dataclass
class Episode:
    score: float | None = None
    answer: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_output_chars: int = 0
    outputs: list[str] = field(default_factory=list)


def run_oracle(
    task: Task,
    *,
    max_turns: int = 2000,
    compact_every: int | None = None,
    compact: Callable[[State], State] | None = None,
) -> Episode:
    oracle = task.oracle()
    state = validate_state(task.initial_state())
    ep = Episode()
    while ep.turns < max_turns:
        ep.turns += 1
        if compact and compact_every and ep.turns % compact_every == 0:
            state = validate_state(compact(state))
        for item in oracle.act(state):
            if item.get("type") == "function_call":
                ep.tool_calls += 1
                args = tool_arguments(item)
                if item["name"] == "submit":
                    ep.answer = args["answer"]
                    ep.score = task.score(ep.answer)
                    return ep
                try:
                    out = task.call_tool(item["name"], args)
                except ToolError as e:
                    out = json.dumps({"error": str(e)})
                ep.tool_output_chars += len(out)
                ep.outputs.append(out)
                state = state + [item, {"type": "function_call_output", "call_id": item["call_id"], "output": out}]
            else:
                state = state + [{"type": "message", **{k: v for k, v in item.items() if k != "type"}}]
                reply = task.user_reply(item["content"] if isinstance(item["content"], str) else "")
                if reply is not None:
                    state = state + [{"type": "message", "role": "user", "content": reply}]
        validate_state(state)
    return ep
