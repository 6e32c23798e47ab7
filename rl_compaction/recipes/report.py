"""What a reproduction reports: the learning curve of GRPO's logged metrics, the verdict (whether the learned
row beat each other row, in sentences), and the plots logged to W&B."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.wandb_settings import wandb_mode, wandb_project

#: the learning curve's panels: (key in the GRPO trainer's logged metrics, title); the trainer logs
#: the edit shares only for steps whose episodes applied an edit
CURVE_PANELS = (
    ("reward/reward", "episode reward"),
    ("success_rate", "success rate"),
    ("mean_cost", "cost per episode"),
    ("targeted_share", "cheap-edit share (the targeted edit)"),
    ("compactions_per_episode", "compactions per episode"),
)
#: the panels' keys in histories logged before GRPO logged `EpisodeStats` names (a run resumed at its eval)
OLD_CURVE_KEYS = {"success_rate": "success", "mean_cost": "cost/total", "compactions_per_episode": "compactions"}
#: the panels drawn only at steps whose episodes applied an edit
EDIT_PANELS = ("targeted_share",)


def learning_curve(history: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    """(steps, values) of each `CURVE_PANELS` metric in TRL's log history (means over each step's
    episodes); a ValueError when the history holds none of them, so an empty plot is never drawn."""

    def named(h: dict[str, Any], key: str) -> str:
        return key if key in h or key not in OLD_CURVE_KEYS else OLD_CURVE_KEYS[key]

    series = {
        key: (
            [h["step"] for h in history if named(h, key) in h],
            [h[named(h, key)] for h in history if named(h, key) in h],
        )
        for key, _ in CURVE_PANELS
    }
    if not any(steps for steps, _ in series.values()):
        raise ValueError(f"the GRPO log history has none of {', '.join(k for k, _ in CURVE_PANELS)} to plot")
    return series


#: the smallest y-range a learning-curve panel shows (rates always show 0-1), so that noise of a
#: few thousandths does not look like a trend and an all-zero series sits on an honest axis
_MIN_SPAN = {"reward/reward": 0.5, "compactions_per_episode": 2.0}
_RATES = ("success_rate", *EDIT_PANELS)


def _curve_limits(key: str, values: list[float]) -> tuple[float, float]:
    if key in _RATES:
        return -0.05, 1.05
    lo, hi = (min(values), max(values)) if values else (0.0, 0.0)
    span = max(hi - lo, _MIN_SPAN.get(key, 0.2 * max(abs(lo), abs(hi), 1.0)))
    middle = (lo + hi) / 2
    return middle - 0.55 * span, middle + 0.55 * span


def plot_learning_curve(history: list[dict[str, Any]], path: Path) -> Path:
    """Reward, success, cost and compactions per GRPO step (`learning_curve`), one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = learning_curve(history)
    fig, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(17, 3.2))
    for ax, (key, label) in zip(axes, CURVE_PANELS, strict=True):
        ax.plot(*series[key], marker="o", markersize=3)
        ax.set_ylim(*_curve_limits(key, series[key][1]))
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def verdict(rows: dict[str, EpisodeStats], learned: str, sft: str, unlimited: str) -> list[str]:
    """Plain sentences: what the learned row is, and whether it beat each other row."""
    me = rows[learned]
    lo, hi = me.success_ci95

    def share(row: EpisodeStats) -> str:
        return "" if row.targeted_share is None else f", cheap-edit share {row.targeted_share:.0%}"

    lines = [
        f"learned (GRPO checkpoint): success {me.success_rate:.0%} [{lo:.0%}, {hi:.0%}], "
        f"mean cost {me.mean_cost:,.0f}{share(me)}"
    ]
    for name, row in rows.items():
        if name == learned:
            continue
        olo, ohi = row.success_ci95
        points = round(100 * (me.success_rate - row.success_rate))
        ratio = me.mean_cost / max(row.mean_cost, 1e-9)
        if me.success_rate == 0 and row.success_rate == 0:
            outcome = "neither succeeds, so cost says nothing"
        elif lo > ohi:
            outcome = f"beaten on success by {points:+d} points, beyond the 95% intervals (cost ratio {ratio:.2f}x)"
        elif hi < olo:
            outcome = f"better on success than the learned policy by {-points:d} points, beyond the 95% intervals"
        elif ratio <= 0.8:
            outcome = f"intervals overlap on success ({points:+d} points); the learned policy costs {ratio:.2f}x"
        else:
            outcome = f"not beaten beyond the intervals (success {points:+d} points; cost ratio {ratio:.2f}x)"
        role = "SFT-only" if name == sft else "unlimited context" if name == unlimited else "baseline"
        lines.append(
            f"vs {role} {name}: {row.success_rate:.0%} [{olo:.0%}, {ohi:.0%}], "
            f"cost {row.mean_cost:,.0f}{share(row) if name == sft else ''} -> {outcome}"
        )
    lines.append(solved_cost_line(me, rows[sft]))
    ratio = me.mean_cost / rows[unlimited].mean_cost
    same = me.success_rate >= rows[unlimited].success_rate
    lines.append(
        f"learned cost / unlimited-context cost = {ratio:.2f} (target <= 0.5 at the same success"
        + ("" if same else f"; not met: success {me.success_rate:.0%} vs {rows[unlimited].success_rate:.0%}")
        + ")"
    )
    return lines


def check_lines(learned: EpisodeStats, checks: dict[str, tuple[EpisodeStats, EpisodeStats]]) -> list[str]:
    """One sentence per eval check: the learned and SFT-only rows under the check's settings (`checks`: name ->
    (learned, SFT-only)), the learned success as a share of its success at the recipe's settings (`learned`),
    and whether learned beats SFT-only beyond the 95% intervals."""
    lines = []
    for name, (me, sft) in checks.items():
        (lo, hi), (slo, shi) = me.success_ci95, sft.success_ci95
        kept = f"{me.success_rate / learned.success_rate:.0%}" if learned.success_rate else "-"
        if lo > shi:
            outcome = "learned beats SFT-only beyond the 95% intervals"
        elif hi < slo:
            outcome = "SFT-only beats learned beyond the 95% intervals"
        else:
            outcome = "the intervals overlap"
        lines.append(
            f"{name}: learned {me.success_rate:.0%} [{lo:.0%}, {hi:.0%}] ({kept} of its success at the recipe's "
            f"settings), SFT-only {sft.success_rate:.0%} [{slo:.0%}, {shi:.0%}] -> {outcome}"
        )
    return lines


def plot_checks(settings: dict[str, tuple[EpisodeStats, EpisodeStats]], path: Path, title: str = "") -> Path:
    """Success with its 95% interval, learned beside SFT-only, at the recipe's own setting and under each eval
    check (`settings`: label -> (learned, SFT-only), the recipe's setting first): how far the policy holds
    outside what it was trained on (another window, length or request schedule)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(settings)), 4.2))
    for index, (label, color, offset) in enumerate((("learned (GRPO)", "C0", -0.12), ("SFT-only", "C1", 0.12))):
        stats = [pair[index] for pair in settings.values()]
        rates = [100 * row.success_rate for row in stats]
        low = [rate - 100 * row.success_ci95[0] for rate, row in zip(rates, stats, strict=True)]
        high = [100 * row.success_ci95[1] - rate for rate, row in zip(rates, stats, strict=True)]
        x = [i + offset for i in range(len(settings))]
        ax.errorbar(x, rates, yerr=[low, high], fmt="o", capsize=4, color=color, label=label)
    ax.set_xticks(range(len(settings)), [textwrap.fill(name, 18) for name in settings], fontsize=8)
    ax.set_ylabel("success, % (95% CI)")
    ax.set_ylim(-3, 103)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "success at the recipe's setting and under each eval check", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def solved_cost_line(me: EpisodeStats, sft: EpisodeStats) -> str:
    """Cost at equal success: the learned and SFT-only rows' mean cost over the episodes each solved, with
    95% intervals, and whether the learned one is lower beyond them."""
    if me.mean_cost_solved is None or sft.mean_cost_solved is None:
        return "cost at equal success (over solved episodes): not comparable, a row solved none"
    (lo, hi), (slo, shi) = me.cost_solved_ci95, sft.cost_solved_ci95
    ratio = me.mean_cost_solved / sft.mean_cost_solved
    outcome = "lower beyond the 95% intervals" if hi < slo else "intervals overlap"
    return (
        f"cost at equal success (over solved episodes): learned {me.mean_cost_solved:,.0f} [{lo:,.0f}, {hi:,.0f}] "
        f"vs SFT-only {sft.mean_cost_solved:,.0f} [{slo:,.0f}, {shi:,.0f}] = {ratio:.2f}x ({1 - ratio:+.0%} "
        f"saved), {outcome}"
    )


def log_plots_to_wandb(out: Path, images: dict[str, Path], recipe: dict[str, Any]) -> None:
    """The plots of the recipe run in `out` as W&B images, in a run of their own (job type "report",
    named after `out`) in the project of the recipe's GRPO and eval runs."""
    import wandb

    run = wandb.init(
        project=wandb_project(),
        name=f"{Path(out).resolve().name}-report",
        job_type="report",
        dir=str(out),
        mode=wandb_mode(),
        config={"recipe": recipe},
    )
    run.log({key: wandb.Image(str(path)) for key, path in images.items()})
    run.finish()
