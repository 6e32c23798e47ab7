"""The ledger: the cost of every model turn of an episode, and the receipt of one evolve edit."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rl_compaction.accounting.cache_models import COST_PARTS, CacheModel, get_cache_model
from rl_compaction.accounting.counters import TokenCounter
from rl_compaction.accounting.prefix import (
    PrefixIndex,
    TokenIds,
    _as_list,
    compaction_cost,
    reusable_prefix,
)
from rl_compaction.core.state import State


def edit_metrics(
    counter: TokenCounter,
    instructions: str,
    tools: list[dict[str, Any]],
    before_state: State,
    after_state: State,
    evolve_call_tokens: int,
    output_weight: float | None = None,
) -> dict[str, Any]:
    """The receipt numbers of an evolve edit: the model inputs rendered from the State before
    and after the edit, their reusable prefix, Cache Cost and Compaction Cost.
    `output_weight` defaults to the default preset's (configs/accounting.yaml)."""
    if output_weight is None:
        output_weight = get_cache_model().output_weight
    before = counter.input_ids(instructions, tools, before_state)
    after = counter.input_ids(instructions, tools, after_state)
    prefix = reusable_prefix(before, after)
    cost = len(after) - prefix
    return {
        "before_tokens": len(before),
        "after_tokens": len(after),
        "reusable_prefix_tokens": prefix,
        "evolve_call_tokens": evolve_call_tokens,
        "cache_cost": cost,
        "compaction_cost": compaction_cost(evolve_call_tokens, cost, output_weight),
    }


@dataclass(frozen=True)
class TurnCost:
    """One model invocation's tokens and cost (input-token equivalents)."""

    index: int
    input_tokens: int
    cached_tokens: int
    uncached_tokens: int
    output_tokens: int
    cache_write_tokens: int
    #: longest prefix shared with the previous invocation's input (no block rounding)
    reusable_prefix: int
    evolve_call_tokens: int
    #: None: no evolve call in this turn; True/False: the edit was applied / failed
    evolve_applied: bool | None
    cost: float
    #: the cost by part (`COST_PARTS`); they sum to `cost`
    cost_parts: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Ledger:
    """Per-episode record of model invocations under one `CacheModel`."""

    def __init__(self, cache_model: CacheModel):
        if not isinstance(cache_model, CacheModel):
            raise TypeError(f"Ledger needs a CacheModel, got {type(cache_model).__name__}")
        self.cache_model = cache_model
        self._rows: list[TurnCost] = []
        self._index = PrefixIndex()
        self._previous_input: list[int] = []
        self._harness_edits: list[bool] = []

    @property
    def rows(self) -> list[TurnCost]:
        return list(self._rows)

    def record(
        self,
        input_ids: TokenIds,
        output: TokenIds | int,
        *,
        evolve_call_tokens: int = 0,
        evolve_applied: bool | None = None,
    ) -> TurnCost:
        """Account one invocation: its exact input ids and its output ids, or only the output
        token count (a provider's usage report, an estimate). Generated tokens can join the
        cache (`cache_outputs`) only when their ids are given."""
        cm = self.cache_model
        inputs = _as_list(input_ids)
        if isinstance(output, bool) or not isinstance(output, int):
            output_ids: list[int] | None = _as_list(output)
            n_out = len(output_ids)
        elif output < 0:
            raise ValueError(f"output token count must be >= 0, got {output}")
        else:
            output_ids, n_out = None, output
        if isinstance(evolve_call_tokens, bool) or not isinstance(evolve_call_tokens, int) or evolve_call_tokens < 0:
            raise ValueError(f"evolve_call_tokens must be an int >= 0, got {evolve_call_tokens!r}")
        if evolve_applied not in (None, True, False):
            raise ValueError(f"evolve_applied must be None, True or False, got {evolve_applied!r}")
        if evolve_call_tokens and evolve_applied is None:
            raise ValueError("evolve_call_tokens given without evolve_applied: say whether the edit was applied")

        cacheable = inputs + output_ids if cm.cache_outputs and output_ids is not None else list(inputs)
        shared = self._index.extend(cacheable, copy=False)
        cached = cm.cached(min(shared, len(inputs)))
        written = max(0, cm.cached(len(cacheable)) - cm.cached(shared))
        uncached = len(inputs) - cached
        parts = cm.cost_parts(len(inputs), cached, n_out, written)
        row = TurnCost(
            index=len(self._rows),
            input_tokens=len(inputs),
            cached_tokens=cached,
            uncached_tokens=uncached,
            output_tokens=n_out,
            cache_write_tokens=written,
            reusable_prefix=reusable_prefix(self._previous_input, inputs),
            evolve_call_tokens=evolve_call_tokens,
            evolve_applied=evolve_applied,
            cost=sum(parts.values()),
            cost_parts=parts,
        )
        self._previous_input = cacheable[: len(inputs)] if len(cacheable) > len(inputs) else cacheable
        self._rows.append(row)
        return row

    def record_harness_edit(self, applied: bool) -> None:
        """An edit the harness made itself (a fixed strategy at the threshold): no model
        invocation and no generated tokens, but it counts as a compaction or a failure."""
        self._harness_edits.append(bool(applied))

    def totals(self) -> dict[str, Any]:
        """Sums over all invocations, plus peak context (largest input), compactions (evolve
        edits applied, by the model or the harness), evolve failures, evolve tokens and the
        cached share of input."""
        rows = self._rows
        total_input = sum(r.input_tokens for r in rows)
        total_cached = sum(r.cached_tokens for r in rows)
        return {
            "invocations": len(rows),
            "input_tokens": total_input,
            "cached_tokens": total_cached,
            "uncached_tokens": sum(r.uncached_tokens for r in rows),
            "output_tokens": sum(r.output_tokens for r in rows),
            "cache_write_tokens": sum(r.cache_write_tokens for r in rows),
            "cost": sum(r.cost for r in rows),
            "cost_parts": {k: sum(r.cost_parts[k] for r in rows) for k in COST_PARTS},
            "peak_context_tokens": max((r.input_tokens for r in rows), default=0),
            "compactions": sum(r.evolve_applied is True for r in rows) + sum(self._harness_edits),
            "evolve_failures": sum(r.evolve_applied is False for r in rows) + sum(not a for a in self._harness_edits),
            "harness_compactions": sum(self._harness_edits),
            "evolve_tokens": sum(r.evolve_call_tokens for r in rows),
            "cached_share": total_cached / total_input if total_input else 0.0,
        }
