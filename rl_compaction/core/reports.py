"""Progress bars and result tables shared by the commands that run many episodes."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator
from statistics import mean, stdev
from typing import Any, TypeVar

from tqdm import tqdm

from rl_compaction.core.summary import EpisodeSummary

T = TypeVar("T")


def progress(items: Iterable[T], desc: str) -> Iterator[T]:
    """A tqdm bar on stderr (stdout stays clean for tables and JSON)."""
    return iter(tqdm(items, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True))


def progress_bar(total: int, desc: str) -> tqdm:
    """A tqdm bar on stderr to update by hand (episodes finish in batches)."""
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


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


def render_table(rows: list[list[str]], left: int = 1) -> str:
    """Aligned text table: the first row is the header; the first `left` columns are left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """95% normal interval of a mean (mean +- z * sd / sqrt(n)); the mean itself for fewer than two values."""
    if len(values) < 2:
        m = mean(values) if values else 0.0
        return (m, m)
    m, sd = mean(values), stdev(values)
    half = z * sd / math.sqrt(len(values))
    return (m - half, m + half)


def format_share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def episode_row(name: str, summaries: list[EpisodeSummary]) -> dict[str, Any]:
    """Aggregate end-of-episode summaries into one row of figures."""
    n = len(summaries)
    wins = sum(s.success for s in summaries)
    lo, hi = wilson_interval(wins, n)
    ledgers = [s.ledger for s in summaries]
    return {
        "strategy": name,
        "episodes": n,
        "success": wins / n if n else 0.0,
        "success_ci95": [lo, hi],
        "mean_score": mean(s.score for s in summaries) if n else 0.0,
        "mean_cost": mean(x.cost for x in ledgers) if n else 0.0,
        "cached_share": mean(x.cached_share for x in ledgers) if n else 0.0,
        "peak_context": mean(x.peak_context_tokens for x in ledgers) if n else 0.0,
        "compactions": mean(x.compactions for x in ledgers) if n else 0.0,
        "evolve_failures": mean(x.evolve_failures for x in ledgers) if n else 0.0,
        "selection_share": selection_share(summaries),
        "truncated": sum(s.truncated_reason is not None for s in summaries),
    }


def format_rows(rows: list[dict[str, Any]]) -> str:
    header = [
        "strategy",
        "success (95% CI)",
        "score",
        "cost (in-tok eq)",
        "cached",
        "peak ctx",
        "compactions",
        "select%",
        "evolve fail",
        "truncated",
    ]
    table = [header]
    for r in rows:
        lo, hi = r["success_ci95"]
        table.append(
            [
                r["strategy"],
                f"{r['success']:.0%} [{lo:.0%}, {hi:.0%}]",
                f"{r['mean_score']:.3f}",
                f"{r['mean_cost']:,.0f}",
                f"{r['cached_share']:.0%}",
                f"{r['peak_context']:,.0f}",
                f"{r['compactions']:.1f}",
                format_share(r["selection_share"]),
                f"{r['evolve_failures']:.1f}",
                f"{r['truncated']}/{r['episodes']}",
            ]
        )
    return render_table(table)


def oracle_table(family: str, split: str, window: int, results: dict[str, list[EpisodeSummary]]) -> str:
    rows = [episode_row(name, summaries) for name, summaries in results.items()]
    return f"oracle on {family} ({split} split), context window {window:,} tokens\n" + format_rows(rows)
