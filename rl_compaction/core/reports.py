"""Progress bars and result tables shared by the commands that run many episodes (the figures: `core.stats`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.summary import EpisodeSummary

T = TypeVar("T")


def progress(items: Iterable[T], desc: str) -> Iterator[T]:
    """A tqdm bar on stderr (stdout stays clean for tables and JSON)."""
    return iter(tqdm(items, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True))


def progress_bar(total: int, desc: str) -> tqdm:
    """A tqdm bar on stderr to update by hand (episodes finish in batches)."""
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def render_table(rows: list[list[str]], left: int = 1) -> str:
    """Aligned text table: the first row is the header; the first `left` columns are left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def format_rows(rows: dict[str, Any]) -> str:
    """The oracle table: one row per strategy (name -> its `EpisodeStats`)."""
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
    for name, r in rows.items():
        lo, hi = r.success_ci95
        table.append(
            [
                name,
                f"{r.success_rate:.0%} [{lo:.0%}, {hi:.0%}]",
                f"{r.mean_score:.3f}",
                f"{r.mean_cost:,.0f}",
                f"{r.cached_share:.0%}",
                f"{r.peak_context:,.0f}",
                f"{r.compactions_per_episode:.1f}",
                format_share(r.selection_share),
                f"{r.evolve_failures_per_episode:.1f}",
                f"{r.truncated}/{r.episodes}",
            ]
        )
    return render_table(table)


def oracle_table(family: str, split: str, window: int, results: dict[str, list[EpisodeSummary]]) -> str:
    rows = {name: EpisodeStats.of(summaries) for name, summaries in results.items()}
    return f"oracle on {family} ({split} split), context window {window:,} tokens\n" + format_rows(rows)
