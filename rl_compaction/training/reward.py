"""The episode reward: task success first, then cost and penalties, every part reported.

    reward = score_weight * score + success_bonus * [success]
           - cost_weight * min(total_cost / cost_scale, 1)
           - evolve_failure_penalty * min(evolve failures, penalty_cap)
           - malformed_call_penalty * min(malformed calls, penalty_cap)
           - window_penalty * [episode ended at the context window]
           - limit_penalty * [episode ended at the turn, output or time limit]

Why these defaults: rewarding a shorter context alone teaches destructive forgetting (drop
everything, fail cheaply), so success must dominate. The cost term is capped at 0.2 and the
penalties of a solved episode at 0.2 + 0.1 (the window penalty only hits unsolved ones), so a
solved episode earns at least 1 + 0.5 - 0.5 = 1.0, more than any unsolved one (score < 1, no
bonus); among solved episodes the cheaper, cleaner one wins, and partial credit still counts.
The limit penalty matches the window penalty so that stalling until the turn limit is no escape
from it: without it, GRPO from a start that failed at the window learned to stop reading and idle
until `max_turns`, which raised its reward from -0.26 to -0.003 with no success at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from rl_compaction.core.configs import check_numbers
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.harness.rollout import EpisodeRecord


@dataclass
class RewardConfig:
    """Weights of the reward terms (all config, all logged).

    score_weight: weight of the task score in [0, 1]; success_bonus: added when the episode succeeded.
    cost_weight / cost_scale: total cost (input-token equivalents) is divided by cost_scale and capped at 1.
    evolve_failure_penalty: per rejected evolve call; malformed_call_penalty: per tool call with an
        unknown tool or bad arguments; both count at most `penalty_cap` events.
    window_penalty: once, when the episode hit the context window.
    limit_penalty: once, when it hit the turn, output-token or wall-time limit without submitting.
    """

    score_weight: float = 1.0
    success_bonus: float = 0.5
    cost_weight: float = 0.2
    cost_scale: float = 200_000.0
    evolve_failure_penalty: float = 0.05
    malformed_call_penalty: float = 0.025
    penalty_cap: int = 4
    window_penalty: float = 0.2
    limit_penalty: float = 0.2

    def __post_init__(self) -> None:
        check_numbers(self)
        for name, value in asdict(self).items():
            if value < 0:
                raise ValueError(f"reward weight {name} must be >= 0, got {value}")
        if self.cost_scale <= 0:
            raise ValueError("cost_scale must be > 0")


#: the env's truncation reasons other than the context window (`CompactionEnv.summary()`)
LIMIT_REASONS = ("max_turns", "max_output_tokens", "max_wall_s")


def malformed_calls(summary: EpisodeSummary) -> int:
    """Tool calls the env answered with an error of the caller's making (unknown tool, bad arguments)."""
    return sum(1 for e in summary.events if e["event"] in ("tool_error", "malformed_action"))


def episode_reward(info: EpisodeSummary | Mapping[str, Any], config: RewardConfig | None = None) -> dict[str, float]:
    """The reward of one finished episode (its end-of-episode `info`, as the dict or typed), with each
    term separately."""
    c = config or RewardConfig()
    s = info if isinstance(info, EpisodeSummary) else EpisodeSummary.from_info(info)
    terms = {
        "score": c.score_weight * float(s.score),
        "success": c.success_bonus * bool(s.success),
        "cost": -c.cost_weight * min(s.ledger.cost / c.cost_scale, 1.0),
        "evolve_failures": -c.evolve_failure_penalty * min(s.ledger.evolve_failures, c.penalty_cap),
        "malformed_calls": -c.malformed_call_penalty * min(malformed_calls(s), c.penalty_cap),
        "context_window": -c.window_penalty * (s.truncated_reason == "context_window"),
        "limits": -c.limit_penalty * (s.truncated_reason in LIMIT_REASONS),
    }
    terms["reward"] = sum(terms.values())
    return terms


#: a finished episode and the run's reward weights -> {"reward": r, <term>: value, ...}; every term is logged
RewardFn = Callable[[EpisodeRecord, RewardConfig], dict[str, float]]


def record_reward(record: EpisodeRecord, config: RewardConfig) -> dict[str, float]:
    """The default `RewardFn`: `episode_reward` of the episode's final info."""
    return episode_reward(record.info, config)
