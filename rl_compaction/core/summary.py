"""The end-of-episode summary, typed: the Gymnasium `info` of an episode's last step (`CompactionEnv.summary()`).

The env hands Gymnasium a plain dict (Gymnasium users and its env checker expect one) and `episodes.jsonl`
stores that dict; readers turn it into an `EpisodeSummary` with `EpisodeSummary.from_info` and read
attributes instead of string keys. `to_dict()` gives back the same JSON object, keys in the same order.

It lives in `core`, not beside the env in `harness`, because `core.reports` aggregates summaries and
must import the type; the summary is plain data (no tokenizer, cache model or task behind it), so the
bottom layer is its natural place, and the aggregation stays with the other report helpers rather than
moving up a layer. The ledger rows, events and env config stay plain dicts here: their types live in
higher layers (`accounting.TurnCost`, `harness.EnvConfig`).

Older records: a field that defaults to None was added after the first summaries were written (the
edit counts, the cost parts); None means "not recorded", not 0, and `to_dict` leaves it out again.
A field without a default has been in every summary, so a record without it is not a summary
(ValueError naming it). Keys the type does not know (a newer writer's) are kept in `extra` and
written back after the known ones, so rewriting a record loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Self


class _Record:
    """Reading and writing one JSON object in field order, shared by the three record types."""

    #: fields holding a nested record, by name
    NESTED: ClassVar[dict[str, type[_Record]]] = {}
    extra: dict[str, Any]

    @classmethod
    def _read(cls, data: Any, path: str) -> Self:
        """`data` as this record; `path` names where it sits in the summary, for the error messages."""
        if not isinstance(data, Mapping):
            raise ValueError(f"episode summary{path and ' field ' + path}: expected a JSON object, got {data!r:.60}")
        own = [f for f in fields(cls) if f.name != "extra"]
        missing = [f"{path}.{f.name}".lstrip(".") for f in own if f.name not in data and f.default is MISSING]
        if missing:
            raise ValueError(f"episode summary is missing {', '.join(map(repr, missing))}")
        known = {}
        for f in own:
            if f.name not in data:
                continue
            value, nested = data[f.name], cls.NESTED.get(f.name)
            # a None newer field stays None; a None required record is an error, raised by _read
            read = nested is not None and (value is not None or f.default is MISSING)
            known[f.name] = nested._read(value, f"{path}.{f.name}".lstrip(".")) if read else value
        names = {f.name for f in own}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object it was read from (or that the env wrote): known keys in field order, a
        None newer field left out, then the unknown keys."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and f.default is None):
                continue
            out[f.name] = value.to_dict() if isinstance(value, _Record) else value
        return {**out, **self.extra}


@dataclass(frozen=True, kw_only=True)
class CostParts(_Record):
    """An episode's cost by part (input-token equivalents; `accounting.COST_PARTS`); they sum to the cost."""

    uncached_input: float
    cached_input: float
    output: float
    cache_write: float
    attention: float
    kv_read: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LedgerTotals(_Record):
    """The ledger's sums over an episode (`accounting.Ledger.totals`)."""

    NESTED: ClassVar[dict[str, type[_Record]]] = {"cost_parts": CostParts}

    invocations: int
    input_tokens: int
    cached_tokens: int
    uncached_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cost: float
    #: None in records written before the cost was split into parts
    cost_parts: CostParts | None = None
    #: the largest model input of the episode
    peak_context_tokens: int
    #: evolve edits applied, by the model or the harness
    compactions: int
    evolve_failures: int
    harness_compactions: int
    evolve_tokens: int
    cached_share: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class EpisodeSummary(_Record):
    """One finished episode: outcome, cost totals, edit counts, and the rows and events behind them."""

    NESTED: ClassVar[dict[str, type[_Record]]] = {"ledger": LedgerTotals}

    # every step's info: the turn just played and the next model input's size (None once terminated)
    turn: int
    input_tokens: int | None
    # `CompactionEnv.summary()`, added at the last step
    score: float
    success: bool
    #: the submitted answer; None if the episode ended without one
    answer: str | None
    #: why the env cut the episode short ("context_window", "max_turns", ...); None if it ended by an answer
    truncated_reason: str | None
    turns: int
    ledger: LedgerTotals
    # the model's applied edits and how many of them were of each cheap kind (`harness.env.edit_counts`);
    # None in records written before they were counted
    model_edits: int | None = None
    selection_edits: int | None = None
    asked_edits: int | None = None
    targeted_edits: int | None = None
    #: `accounting.TurnCost.to_dict()` of each model invocation
    ledger_rows: list[dict[str, Any]]
    events: list[dict[str, Any]]
    task_seed: int
    #: the env's `EnvConfig` as a dict, less the sandbox limits
    config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> EpisodeSummary:
        """The summary in an end-of-episode `info` or an `episodes.jsonl` record's `info` (any version)."""
        return cls._read(info, "")
