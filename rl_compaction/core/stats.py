"""`EpisodeStats`: the figures of a set of episodes, computed in one place under one set of names.

The eval table and metrics.json, GRPO's logged metrics, the oracle table of `envs oracle` and the
recipes' verdict all read these (they once computed them four times, as `success` and `success_rate`,
`compactions` and `compactions_per_episode`). Every figure is a mean per episode unless its name says
otherwise (a rate, a share, a count); the edit shares are None where no model edit applied.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean, stdev
from typing import Any

from rl_compaction.core.summary import EpisodeSummary


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a success rate (sensible at 0% and 100% too).

    The bounds are clamped to contain the rate itself: at 11/11 rounding gives an upper bound of
    0.9999999999999999 < 1.0, and a plot's error bar would then have a negative length."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """95% normal interval of a mean (mean +- z * sd / sqrt(n)); the mean itself for fewer than two values."""
    if len(values) < 2:
        m = mean(values) if values else 0.0
        return (m, m)
    m, sd = mean(values), stdev(values)
    half = z * sd / math.sqrt(len(values))
    return (m - half, m + half)


def edit_share(summaries: list[EpisodeSummary], kind: Callable[[EpisodeSummary], int | None]) -> float | None:
    """Of the model's applied edits over these episodes, the share that `kind` counts (a count of
    `rl_compaction.harness.env.edit_counts`: only selected items, answered a compaction request, ...).
    None where no model edit applied, and episodes written before that kind was counted are left out."""
    counted = [s for s in summaries if kind(s) is not None]
    edits = sum(s.model_edits or 0 for s in counted)
    return sum(kind(s) or 0 for s in counted) / edits if edits else None


def selection_share(summaries: list[EpisodeSummary]) -> float | None:
    """The cheap-edit share by content: of the model's applied edits, those that only selected items."""
    return edit_share(summaries, lambda s: s.selection_edits)


def asked_share(summaries: list[EpisodeSummary]) -> float | None:
    """The cheap-edit share by timing: of the model's applied edits, those that answered a compaction
    request (an unasked edit pays for its call and receipt while the window still had room)."""
    return edit_share(summaries, lambda s: s.asked_edits)


def targeted_share(summaries: list[EpisodeSummary]) -> float | None:
    """The cheap-edit share: of the model's applied edits, those that left exactly what the task oracle's
    own targeted edit leaves (the others kept more, or other things, or wrote new content)."""
    return edit_share(summaries, lambda s: s.targeted_edits)


def _edit_context_shares(summaries: list[EpisodeSummary]) -> list[float]:
    return [
        e["context_share"]
        for s in summaries
        for e in s.events
        if e.get("event") == "evolve" and e.get("by") == "model" and e.get("applied") and "context_share" in e
    ]


#: the error of an evolve call whose arguments are not exactly {"code": string} (`protocol.evolve`)
EVOLVE_ARGUMENTS_ERROR = 'evolve takes exactly {"code": string}'


def malformed_turns(summary: EpisodeSummary) -> set[int]:
    """The model's turns whose call the harness could not run as a call of its tool: unparseable
    (`malformed_action`), refused by the harness or the tool (`tool_error`: an unknown tool, arguments it
    does not take), or an evolve call without exactly its code argument. Failing code is not counted."""
    return {
        e["turn"]
        for e in summary.events
        if e.get("event") in ("malformed_action", "tool_error")
        or (e.get("event") == "evolve" and e.get("by") == "model" and e.get("error") == EVOLVE_ARGUMENTS_ERROR)
    }


def ignored_requests(summary: EpisodeSummary) -> tuple[int, int]:
    """(requests the model's next turn did not answer with an evolve call, requests it had a next turn for)."""
    edits = {e["turn"] for e in summary.events if e.get("event") == "evolve" and e.get("by") == "model"}
    asked = [e["turn"] for e in summary.events if e.get("event") == "compaction_request" and e["turn"] < summary.turns]
    return sum(t + 1 not in edits for t in asked), len(asked)


def _avg(values: list[float]) -> float:
    return mean(values) if values else 0.0


@dataclass
class EpisodeStats:
    """What a set of episodes achieved and cost (`of` computes it from their summaries; every figure has a
    default, so that a row recorded before a figure existed reads back without it)."""

    episodes: int = 0
    success_rate: float = 0.0
    success_ci95: list[float] = field(default_factory=lambda: [0.0, 1.0])
    mean_score: float = 0.0
    mean_cost: float = 0.0
    cost_ci95: list[float] = field(default_factory=lambda: [0.0, 0.0])
    #: cost at equal success: over the solved episodes only (failures end early or late, so their cost
    #: says little), with its interval; None without a solved episode
    mean_cost_solved: float | None = None
    cost_solved_ci95: list[float] | None = None
    #: the cost by part (accounting's `COST_PARTS`); None where some episode was recorded before the cost was split
    cost_parts: dict[str, float] | None = None
    cached_share: float = 0.0
    peak_context: float = 0.0
    compactions_per_episode: float = 0.0
    model_edits_per_episode: float = 0.0
    selection_share: float | None = None
    asked_share: float | None = None
    targeted_share: float | None = None
    #: when the model edited: its applied edits' context, as a share of the window, on the turn it edited
    #: (mean); None without one, or in episodes recorded before it was
    edit_context_share: float | None = None
    evolve_failures_per_episode: float = 0.0
    evolve_failure_rate: float = 0.0
    #: the protocol, as a base model holds it: the share of the model's turns whose call was malformed or
    #: refused for its form (`malformed_turns`)
    malformed_turn_rate: float = 0.0
    #: the share of compaction requests not answered by an evolve call on the next turn; None without one
    ignored_request_rate: float | None = None
    #: the share of submitted answers that were right (every answer is copied from the task's context); None
    #: without one
    answer_accuracy: float | None = None
    truncated: int = 0
    #: why episodes ended: "answer" or the env's `truncated_reason`, with counts
    ended: dict[str, int] = field(default_factory=dict)
    mean_turns: float = 0.0

    @classmethod
    def of(cls, summaries: list[EpisodeSummary]) -> EpisodeStats:
        n = len(summaries)
        ledgers = [s.ledger for s in summaries]
        wins = sum(s.success for s in summaries)
        solved = [s.ledger.cost for s in summaries if s.success]
        # parts of some episodes beside the cost of all would not add up to it: unknown unless every episode has them
        parts = [x.cost_parts.to_dict() for x in ledgers if x.cost_parts is not None]
        evolve_calls = sum(1 for s in summaries for row in s.ledger_rows if row["evolve_applied"] is not None)
        failures = sum(x.evolve_failures for x in ledgers)
        asked = [ignored_requests(s) for s in summaries]
        ignored, requests = sum(i for i, _ in asked), sum(r for _, r in asked)
        answered = [s.success for s in summaries if s.answer is not None]
        turns = sum(s.turns for s in summaries)
        return cls(
            episodes=n,
            success_rate=wins / n if n else 0.0,
            success_ci95=list(wilson_interval(wins, n)),
            mean_score=_avg([s.score for s in summaries]),
            mean_cost=_avg([x.cost for x in ledgers]),
            cost_ci95=list(mean_interval([x.cost for x in ledgers])),
            mean_cost_solved=_avg(solved) if solved else None,
            cost_solved_ci95=list(mean_interval(solved)) if solved else None,
            cost_parts={k: _avg([p[k] for p in parts]) for k in parts[0]} if parts and len(parts) == n else None,
            cached_share=_avg([x.cached_share for x in ledgers]),
            peak_context=_avg([x.peak_context_tokens for x in ledgers]),
            compactions_per_episode=_avg([x.compactions for x in ledgers]),
            model_edits_per_episode=_avg([s.model_edits or 0 for s in summaries]),
            selection_share=selection_share(summaries),
            asked_share=asked_share(summaries),
            targeted_share=targeted_share(summaries),
            edit_context_share=_avg(shares) if (shares := _edit_context_shares(summaries)) else None,
            evolve_failures_per_episode=_avg([x.evolve_failures for x in ledgers]),
            evolve_failure_rate=failures / evolve_calls if evolve_calls else 0.0,
            malformed_turn_rate=sum(len(malformed_turns(s)) for s in summaries) / turns if turns else 0.0,
            ignored_request_rate=ignored / requests if requests else None,
            answer_accuracy=_avg(answered) if answered else None,
            truncated=sum(s.truncated_reason is not None for s in summaries),
            ended=dict(Counter(s.truncated_reason or "answer" for s in summaries)),
            mean_turns=_avg([s.turns for s in summaries]),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> EpisodeStats:
        """Stats read back from metrics.json (a row's other keys, such as its policy, are left out); a row
        written before a figure existed gets None or 0 for it."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in names})
