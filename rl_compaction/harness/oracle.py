"""Run a task's context-bound oracle in `CompactionEnv`, alone or with a compaction strategy.

This needs no model: the oracle decides from its State only, so the strategies' effect on
success and cost is measured honestly, and its episodes are demonstrations.
"""

from __future__ import annotations

import json
from typing import Any

from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.policy import ScriptedPolicy, Turn
from rl_compaction.harness.strategies import HARNESS_STRATEGIES
from rl_compaction.harness.tasks import Difficulty, Oracle
from rl_compaction.protocol.evolve import EVOLVE

#: "none": no compaction (and no request); "ignore": the harness asks for compaction and the oracle
#: reads on, until the window ends the episode; "evolve": the oracle answers compaction requests
#: with its own targeted evolve code; "evolve_lossy": it answers them with `LOSSY_EVOLVE_CODE`;
#: "evolve_summary": it answers them with its family's summary edit (`Oracle.summary_code`: the
#: facts retyped into one new message, which succeeds as often but costs more); "evolve_early": the
#: targeted edit with an annotation inserted at the start (`Oracle.early_edit_code`: the cached
#: prefix breaks there); "evolve_recent": the targeted edit that also keeps the newest tool results
#: (`Oracle.recent_edit_code`: a larger context at every later turn, and the next request sooner);
#: "evolve_eager": the targeted edit after every task tool output, asked or not
#: (it succeeds as often, and pays for an evolve call and its receipt at every turn where the window
#: still had room); "evolve_own": the targeted edit when asked, and unasked once the context holds
#: `OWN_SHARE` of the window (after a task tool output), so that it compacts where the harness never asks;
#: "ignore", "evolve_lossy", "evolve_summary", "evolve_early", "evolve_recent" and
#: "evolve_eager" are imperfect strategies for demonstrations, so RL has something to fix on success
#: and on cost; the others are harness strategies run at the threshold.
ORACLE_STRATEGIES = (
    "none",
    "ignore",
    "evolve",
    "evolve_lossy",
    "evolve_summary",
    "evolve_early",
    "evolve_recent",
    "evolve_eager",
    "evolve_own",
    *HARNESS_STRATEGIES,
)

#: the edit an evolve strategy answers requests with
EDITS = {
    "evolve": "targeted",
    "evolve_lossy": "lossy",
    "evolve_summary": "summary",
    "evolve_early": "early",
    "evolve_recent": "recent",
    "evolve_eager": "targeted",
    "evolve_own": "targeted",
}
#: the share of the window at which "evolve_own" edits unasked: the default request threshold's. Chosen on
#: validation tasks (vault level 1, scale 0.03, 8 seeds, windows 2,600-4,400 tiny tokens, no requests): 0.6,
#: 0.65, 0.7 and 0.75 all solve every task; 0.75 costs least (7,830 at a 3,300 window; 0.6: 9,116)
OWN_SHARE = 0.75
#: the share of the window at which a strategy edits unasked (0: after every task tool output)
UNASKED_AT = {"evolve_eager": 0.0, "evolve_own": OWN_SHARE}

#: A short, valid, lossy edit any family can take: keep the messages, drop every tool call and
#: output (the pending evolve call stays last). It forgets every fact the tools returned.
LOSSY_EVOLVE_CODE = 'return state.filter((x, i) => x.type === "message" || i === state.length - 1);'


#: the `Oracle` method that writes each family-specific demonstration edit
_HOOKS = {"summary": "summary_code", "early": "early_edit_code", "recent": "recent_edit_code"}


class MissingEdit(ValueError):
    """The family's oracle has no such edit (its `Oracle` hook returns None)."""


class OraclePolicy:
    """The oracle as a policy. With `use_evolve`, a pending compaction request is answered by one
    evolve call carrying the `edit`: the oracle's targeted code, `LOSSY_EVOLVE_CODE` ("lossy"), its
    summary code ("summary"), its early edit ("early") or its conservative edit ("recent"); otherwise
    requests are ignored. With `unasked_at` (a share of the window), it also edits unasked, right after an
    output of a task tool (before the next call), once the next input holds that share of the window (0: after
    every output)."""

    def __init__(
        self,
        oracle: Oracle,
        env: CompactionEnv,
        use_evolve: bool = False,
        edit: str = "targeted",
        unasked_at: float | None = None,
    ):
        if edit not in EDITS.values():
            raise ValueError(f"unknown edit {edit!r}; choose from {', '.join(EDITS.values())}")
        if unasked_at is not None and not 0.0 <= unasked_at <= 1.0:
            raise ValueError(f"unasked_at is a share of the window in [0, 1], got {unasked_at}")
        self.oracle, self.env, self.use_evolve, self.edit = oracle, env, use_evolve, edit
        self.unasked_at = unasked_at
        self._answered = 0

    def _after_task_tool(self, state: list[dict[str, Any]], turn: list[dict[str, Any]]) -> bool:
        """Whether the State ends with a task tool's output and the oracle's next turn calls a task tool
        (not submit): where an eager policy edits unasked. A usage report after the output is looked past."""
        if self.env.config.usage_report and state and state[-1].get("type") == "message":
            state = state[:-1]
        last = state[-1] if state else {}
        if last.get("type") != "function_call_output":
            return False
        call = next((x for x in state if x.get("type") == "function_call" and x["call_id"] == last["call_id"]), {})
        calls = [x for x in turn if x.get("type") == "function_call"]
        task_tools = {t["name"] for t in self.env.task.tools()}
        return call.get("name") in task_tools and bool(calls) and all(x["name"] in task_tools for x in calls)

    def _code(self, state: list[dict[str, Any]]) -> str | None:
        if self.edit == "lossy":
            return LOSSY_EVOLVE_CODE
        if self.edit in _HOOKS:
            method = _HOOKS[self.edit]
            code = getattr(self.oracle, method)(state)
            if code is None:
                raise MissingEdit(f"{type(self.oracle).__name__} has no {self.edit} edit (Oracle.{method})")
            return code
        return self.oracle.evolve_code(state)

    def act(self, observation: dict[str, Any]) -> list[dict[str, Any]]:
        state = observation["state"]
        request = self.env.pending_compaction_request
        if self.use_evolve and request and request != self._answered:
            self._answered = request  # answer each request once, even if the edit fails
            code = self._code(state)
            if code is not None:
                return [self._evolve_call(f"oracle_evolve_{request}", code)]
        turn = self.oracle.act(state)
        full = self.unasked_at is not None and self.env.input_tokens >= self.unasked_at * self.env.config.context_window
        if full and not request and self._after_task_tool(state, turn):
            code = self._code(state)
            if code is not None:
                return [self.oracle.function_call(state, EVOLVE, {"code": code}, prefix="oracle_eager_")]
        return turn

    @staticmethod
    def _evolve_call(call_id: str, code: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "call_id": call_id,
            "name": EVOLVE,
            "arguments": json.dumps({"code": code}, ensure_ascii=False),
        }


class OracleScriptedPolicy(ScriptedPolicy):
    """The oracle under a strategy, as a policy for batched rollouts and `rl-compaction eval`."""

    def __init__(self, strategy: str = "none"):
        if strategy not in ORACLE_STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(ORACLE_STRATEGIES)}")
        self.strategy, self.name = strategy, f"oracle:{strategy}"
        self._bound: dict[int, tuple[object, OraclePolicy]] = {}

    def act_env(self, env: CompactionEnv, observation: dict[str, Any]) -> Turn:
        task, policy = self._bound.get(id(env), (None, None))
        if task is not env.task:  # a new episode in this env
            policy = OraclePolicy(env.task.oracle(), env, **evolve_options(self.strategy))
            self._bound[id(env)] = (env.task, policy)
        return Turn(items=policy.act(observation))


def evolve_options(strategy: str) -> dict[str, Any]:
    """`OraclePolicy` keyword arguments for an oracle strategy."""
    edit = EDITS.get(strategy, "targeted")
    return {"use_evolve": strategy in EDITS, "edit": edit, "unasked_at": UNASKED_AT.get(strategy)}


def make_env(
    family: str,
    *,
    split: str = "test",
    strategy: str = "none",
    config: EnvConfig | None = None,
    difficulty: Difficulty | None = None,
) -> CompactionEnv:
    if strategy not in ORACLE_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(ORACLE_STRATEGIES)}")
    harness = HARNESS_STRATEGIES[strategy]() if strategy in HARNESS_STRATEGIES else None
    config = config or EnvConfig()
    if strategy == "none":
        config.compaction_request = ""
    return CompactionEnv(family, split=split, difficulty=difficulty, config=config, strategy=harness)


def run_oracle_episode(
    env: CompactionEnv,
    seed: int,
    *,
    use_evolve: bool = False,
    edit: str = "targeted",
    unasked_at: float | None = None,
) -> dict[str, Any]:
    """Reset `env` on task `seed`, let the oracle play it out, and return the final info."""
    obs, _ = env.reset(seed=seed)
    raw = env.unwrapped  # wrappers step the env; the oracle reads its task
    policy = OraclePolicy(raw.task.oracle(), raw, use_evolve=use_evolve, edit=edit, unasked_at=unasked_at)
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs))
        if terminated or truncated:
            return info
