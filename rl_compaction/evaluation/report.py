"""What an eval reports: each policy's row (`EpisodeStats` plus what only records hold), the table printed
on stdout, the success-vs-cost plot and the W&B log."""

from __future__ import annotations

import os
import textwrap
from functools import partial
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from rl_compaction.accounting import COST_PARTS
from rl_compaction.core.reports import format_share, render_table
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.wandb_settings import wandb_mode, wandb_project
from rl_compaction.harness.rollout import EpisodeRecord

if TYPE_CHECKING:
    from rl_compaction.evaluation.evaluate import EvalConfig


def policy_metrics(name: str, records: list[EpisodeRecord]) -> dict[str, Any]:
    """A row of the table and metrics.json: the episodes' `EpisodeStats`, plus what only records hold (time
    per episode, and the tokens a provider reported)."""
    usage = [inv.usage for r in records for inv in r.invocations if isinstance(inv.usage, dict)]
    return {
        "policy": name,
        **EpisodeStats.of([r.summary for r in records]).to_dict(),
        "mean_wall_s": mean(r.wall_s for r in records) if records else 0.0,
        "provider_usage": {
            # a count that is not an int (a server's bad usage, kept by an older version) is skipped
            k: sum(v for u in usage if isinstance(v := u.get(k), int) and not isinstance(v, bool))
            for k in ("input_tokens", "cached_tokens", "output_tokens")
        }
        if usage
        else None,
    }


def _amount(value: float | None) -> str:
    """A cost in the table; n/a where the records do not say (older records have no cost parts)."""
    return "n/a" if value is None else f"{value:,.0f}"


#: why episodes ended, as the table names it: an answer, or the env's `truncated_reason`
ENDINGS = {
    "answer": "answer",
    "context_window": "window",
    "max_turns": "turns",
    "max_output_tokens": "output",
    "max_wall_s": "time",
}


def format_endings(ended: dict[str, int] | None) -> str:
    """`{"answer": 3, "max_turns": 1}` as "3 answer, 1 turns" ("-" for rows recorded without it)."""
    if not ended:
        return "-"
    return ", ".join(f"{n} {ENDINGS.get(k, k)}" for k, n in sorted(ended.items(), key=lambda kv: -kv[1]))


def format_metrics(rows: list[dict[str, Any]]) -> str:
    """Three tables: the outcome per policy, its edits, and its cost per episode split into parts; a short legend
    under each."""
    outcome = [
        ["policy", "success (95% CI)", "score", "ended", "cost", "cost|solved", "cache%", "peak ctx", "wall s/ep"]
    ]
    edits = [
        [
            "policy",
            "compact/ep",
            "edit@ctx",
            "targeted%",
            "select%",
            "asked%",
            "evolve fail",
            "malformed",
            "req ignored",
            "answer ok",
        ]
    ]
    parts_table = [["policy", "cost", "= uncached", "+ cached", "+ output", "+ write", "+ attention", "+ kv read"]]
    for r in rows:
        lo, hi = r["success_ci95"]
        outcome.append(
            [
                r["policy"],
                f"{r['success_rate']:.0%} [{lo:.0%}, {hi:.0%}]",
                f"{r['mean_score']:.3f}",
                format_endings(r.get("ended")),
                f"{r['mean_cost']:,.0f}",
                "-" if r.get("mean_cost_solved") is None else f"{r['mean_cost_solved']:,.0f}",
                f"{r['cached_share']:.0%}",
                f"{r['peak_context']:,.0f}",
                f"{r['mean_wall_s']:.1f}",
            ]
        )
        edits.append(
            [
                r["policy"],
                f"{r['compactions_per_episode']:.1f}",
                format_share(r.get("edit_context_share")),
                format_share(r.get("targeted_share")),
                format_share(r.get("selection_share")),
                format_share(r.get("asked_share")),
                f"{r['evolve_failure_rate']:.0%}",
                format_share(r.get("malformed_turn_rate")),
                format_share(r.get("ignored_request_rate")),
                format_share(r.get("answer_accuracy")),
            ]
        )
        parts = r["cost_parts"] or {}  # None: episodes recorded before the cost was split into parts
        parts_table.append([r["policy"], f"{r['mean_cost']:,.0f}", *(_amount(parts.get(k)) for k in COST_PARTS)])
    legends = [
        "ended: why episodes ended (an answer, or the window, turn, output or time limit); cost|solved: mean cost of "
        "the solved episodes; cache%: share of input tokens read from the cache",
        "compact/ep: edits per episode; edit@ctx: the context each of the model's edits was made at, as a share of the "
        "window (mean); targeted%: the edits that left what the oracle's cheap edit leaves; select%: those that only "
        "selected items; asked%: those that answered a compaction request; malformed: the model's turns whose call "
        "was malformed or refused for its form; req ignored: requests not answered by an evolve call; answer ok: the "
        "share of submitted answers that were right",
        "cost per episode, in input-token equivalents (tokens x the cost preset's weights; attention: prefill tokens "
        "attending to the context before them; kv read: generated tokens reading its KV cache)",
    ]
    wrap = partial(textwrap.fill, width=110, subsequent_indent="  ")
    return "\n".join(
        [
            render_table(outcome),
            wrap(legends[0]),
            "",
            render_table(edits),
            wrap(legends[1]),
            "",
            wrap(legends[2]),
            render_table(parts_table),
        ]
    )


def plot_title(config: EvalConfig, note: str = "") -> str:
    """What every point of the plot depends on: family, split, episodes, window, turn limit, tokenizer, preset."""
    episode = config.episode
    tokenizer = f"{Path(episode.tokenizer).name}/" if os.sep in episode.tokenizer else episode.tokenizer
    return (
        f"{episode.family} ({episode.split}), {config.episodes} episodes, window {episode.context_window:,}"
        f"{f' ({note})' if note else ''}, {episode.max_turns} turns\n"
        f"tokens of {tokenizer}, cost preset {episode.cache_preset}"
    )


def plot_success_vs_cost(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The legend sits below the axes: policy names (checkpoint paths) are long, and points at equal
    # success would have their labels collide inside the plot.
    fig, ax = plt.subplots(figsize=(7, 4.2 + 0.22 * len(rows)))
    for i, r in enumerate(rows):
        lo, hi = r["success_ci95"]
        y = r["success_rate"]
        # hollow markers, each a size smaller than the one before: rows at the same point (a learned
        # row equal to its warm start) stay visible one inside the other
        ax.errorbar(
            r["mean_cost"],
            y,
            yerr=[[y - lo], [hi - y]],
            fmt="os^Dv"[i % 5],
            capsize=4,
            markersize=max(4.0, 11.0 - 1.5 * i),
            markerfacecolor="none",
            markeredgewidth=1.8,
            label=r["policy"],
        )
    ax.set_xlabel("mean total cost per episode (input-token equivalents)")
    ax.set_ylabel("success rate (95% Wilson interval)")
    ax.set_ylim(-0.05, 1.05)
    # from 0: matplotlib zoomed to the points' range (0.6% wide once), which made equal costs look far apart
    ax.set_xlim(0, 1.08 * max([r["mean_cost"] for r in rows] + [1.0]))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def log_to_wandb(config: EvalConfig, rows: list[dict[str, Any]], plot: Path, episodes: Path) -> None:
    """Log the comparison to Weights & Biases; offline (no account needed) unless WANDB_MODE says otherwise."""
    import wandb

    run = wandb.init(
        project=wandb_project(),
        name=Path(config.output_dir).resolve().name,
        job_type="eval",
        mode=wandb_mode(),
        config=config.to_dict(),
        dir=config.output_dir,
    )
    columns = [
        "policy",
        "success_rate",
        "ci_low",
        "ci_high",
        "mean_score",
        "mean_cost",
        "cached_share",
        "peak_context",
        "compactions_per_episode",
        "targeted_share",
        "selection_share",
        "asked_share",
        "evolve_failure_rate",
        "mean_wall_s",
    ]
    table = wandb.Table(columns=columns)
    for r in rows:
        table.add_data(
            r["policy"],
            r["success_rate"],
            *r["success_ci95"],
            r["mean_score"],
            r["mean_cost"],
            r["cached_share"],
            r["peak_context"],
            r["compactions_per_episode"],
            r.get("targeted_share"),
            r["selection_share"],
            r.get("asked_share"),
            r["evolve_failure_rate"],
            r["mean_wall_s"],
        )
        run.summary[f"{r['policy']}/success_rate"] = r["success_rate"]
        run.summary[f"{r['policy']}/mean_cost"] = r["mean_cost"]
    run.log({"eval/policies": table, "eval/success_vs_cost": wandb.Image(str(plot))})
    artifact = wandb.Artifact(f"eval-{config.episode.family}-{config.episode.split}", type="episodes")
    artifact.add_file(str(episodes))
    run.log_artifact(artifact)
    run.finish()
