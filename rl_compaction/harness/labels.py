"""`LabelEdits`: an opt-in Gymnasium wrapper that says, of each edit the model applies, whether it left exactly
what the task oracle's own targeted edit leaves on the same State (the cheap edit by content).

The env records what an edit did (its receipt: applied, a pure selection, answering a request); judging it
against the oracle re-runs the oracle's edit code in the sandbox, which is analysis, not stepping. So it is a
wrapper, as Gymnasium puts cross-cutting concerns: eval and GRPO wrap their envs to report the cheap-edit
share (`targeted%`); an env without it records no `targeted` label, and the share is unknown rather than 0.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import State
from rl_compaction.harness.env import CompactionEnv


def targeted(env: CompactionEnv, before: State, call: dict[str, Any], after: State) -> dict[str, Any]:
    """{"targeted": True/False}, or None where the family's oracle has no targeted edit for this State."""
    code = env.task.oracle().evolve_code(before)
    if code is None:
        return {"targeted": None}
    result = run_evolve(before + [call], code, env.config.sandbox)
    return {"targeted": result.ok and result.state == after[:-1]}


class LabelEdits(gym.Wrapper):
    """Labels each edit the model applies with `targeted` (see the module); everything else is the env's."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        env.unwrapped.add_edit_label(targeted)
