"""Hand-made end-of-episode infos, for tests of the code that reads them (reward, metrics, reports)."""

from __future__ import annotations

from typing import Any

from rl_compaction.accounting import COST_PARTS


def summary_info(ledger: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """The info of a one-turn episode that cost nothing, with every field `EpisodeSummary.from_info`
    requires; `fields` replace its values and `ledger` its ledger totals. The edit counts, which older
    records lack, are left out unless given."""
    totals = {
        "invocations": 1,
        "input_tokens": 0,
        "cached_tokens": 0,
        "uncached_tokens": 0,
        "output_tokens": 0,
        "cache_write_tokens": 0,
        "cost": 0.0,
        "cost_parts": dict.fromkeys(COST_PARTS, 0.0),
        "peak_context_tokens": 0,
        "compactions": 0,
        "evolve_failures": 0,
        "harness_compactions": 0,
        "evolve_tokens": 0,
        "cached_share": 0.0,
    }
    info = {
        "turn": 1,
        "input_tokens": None,
        "score": 0.0,
        "success": False,
        "answer": None,
        "truncated_reason": None,
        "turns": 1,
        "ledger": {**totals, **(ledger or {})},
        "ledger_rows": [],
        "events": [],
        "task_seed": 0,
        "config": {},
    }
    return {**info, **fields}
