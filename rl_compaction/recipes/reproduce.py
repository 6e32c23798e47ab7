"""Reproduce learning on CPU: from a tiny model to a held-out comparison, in one command.

    rl-compaction reproduce --config configs/reproduce/vault-tiny-cpu.yaml [--output-dir DIR]

A recipe to read top to bottom; each stage is the library's own entry point:

1. demonstrations: the context-bound oracle plays train tasks under its targeted edit and under
   imperfect strategies (a lossy edit, ignoring the request), which are kept although they fail,
   so the warm-started policy errs the way a real model does and RL has something to fix;
2. SFT warm start on them (TRL's SFTTrainer, `rl_compaction.training.sft`): optionally first on the answer
   turns alone (`sft_answers`), so the model learns to copy the answer from its context before
   the rest of the protocol (trained the other way round, a small model fits the answers' prior
   instead and never learns to copy), then on every turn;
3. GRPO from the SFT checkpoint on the real task reward (`CompactionGRPOTrainer`);
4. `eval` on held-out test seeds: the GRPO checkpoint, the SFT-only checkpoint and the oracle
   under every fixed strategy at the same window, then the oracle with an unlimited window;
5. one table, the success-vs-cost plot, the learning curve and a verdict: whether the learned
   policy beat each row. Nothing is selected on test seeds: the recipe takes the last checkpoint.

Why one module of ~630 lines: a recipe is read top to bottom (config, stages, curve, verdict, the
run itself), the way torchtune's are; split, its order would be lost.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rl_compaction.core.configs import as_mapping, check_counts, check_numbers, help_field
from rl_compaction.core.outputs import LOCK_FILE, check_output_dir, lock_output_dir, write_text_atomic
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.wandb_settings import wandb_mode, wandb_project
from rl_compaction.evaluation.evaluate import EvalConfig, format_metrics, plot_success_vs_cost, plot_title, run_eval
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.models.registry import MARKER, check_model
from rl_compaction.training.demos import check_demo_settings, write_demos
from rl_compaction.training.reward import RewardFn
from rl_compaction.training.sft import train_sft, write_model_card
from rl_compaction.training.wandb_resume import finish_wandb, prepare_wandb

#: The recipes: configs/reproduce/, installed as `rl_compaction_configs` and read with importlib.resources
#: (a wheel install has them too)
RECIPES = Path(str(resources.files("rl_compaction_configs") / "reproduce"))


#: the fields that hold TRL config overrides: a mapping in YAML, a JSON object on the command line (typed
#: `dict | str | None`, as TRL types its own dict fields, so that TrlParser reads the flag as a string)
TRL_SECTIONS = ("sft", "sft_answers", "grpo")
#: the EpisodeSpec mappings of a recipe
EPISODE_SECTIONS = ("episode", "eval_episode")


#: `check_demo_settings`' names of the settings, as this recipe's fields call them
DEMO_SETTING_NAMES = {
    "families": "family",
    "episodes_per_family": "demo_episodes",
    "strategies": "demo_strategies",
    "weights": "demo_weights",
}

#: the fields handed to stage 4's EvalConfig under their own names less the `eval_` prefix
EVAL_FIELDS = ("eval_episodes", "eval_max_new_tokens", "eval_temperature", "eval_batch_size")


@contextmanager
def _naming(field: str) -> Iterator[None]:
    """Prefix a ValueError raised inside with the field whose value it refused ("level: ...")."""
    try:
        yield
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None


@dataclass
class ReproduceConfig:
    """Every setting of the recipe: configs/reproduce/*.yaml map one-to-one onto these fields, and
    `rl-compaction reproduce --config FILE --FIELD VALUE` overrides any of them (TRL's `TrlParser`)."""

    output_dir: str = help_field(
        "where every stage writes (refused when not empty, unless resuming)", default="runs/reproduce"
    )
    model: str = help_field(
        "the model to start from: a known name (tiny, tiny-recall, smollm2-135m) or a folder", default="tiny"
    )
    episode: dict[str, Any] | str | None = help_field(
        "EpisodeSpec fields of every stage: the task family (one), its scale and level, the window (in the "
        "model's own tokens), the threshold and the turn limit (YAML mapping; JSON on the command line)",
        default_factory=dict,
    )
    demo_episodes: int = help_field("oracle episodes played for the demonstrations (train seeds)", default=60)
    demo_strategies: list[str] = help_field(
        "the oracle's strategies in the demonstrations, played in turn",
        default_factory=lambda: ["evolve", "evolve_lossy", "none"],
    )
    demo_weights: list[int] | None = help_field(
        "episodes of each cycle each strategy plays (default: one each)", default=None
    )
    keep_failed: list[str] = help_field(
        "the imperfect strategies whose failed episodes are kept (without their wrong answer)",
        default_factory=lambda: ["evolve_lossy", "none"],
    )
    balance_turns: bool = help_field("SFT samples read, evolve and submit turns equally often", default=True)
    sft: dict[str, Any] | str | None = help_field(
        "TRL SFTConfig fields of the SFT on every turn (YAML mapping; JSON on the command line)", default_factory=dict
    )
    sft_answers: dict[str, Any] | str | None = help_field(
        "SFTConfig fields of a first SFT phase on the answer turns alone (`submit` calls); empty: no such phase",
        default_factory=dict,
    )
    grpo: dict[str, Any] | str | None = help_field(
        "CompactionGRPOConfig fields (TRL's GRPOConfig plus env and reward) of the GRPO stage", default_factory=dict
    )
    eval_episodes: int = help_field("held-out test episodes per row (seeds 0..n-1)", default=32)
    eval_episode: dict[str, Any] | str | None = help_field(
        "EpisodeSpec fields the eval plays differently from `episode` (e.g. a longer scale: the edits must hold "
        "over more compactions)",
        default_factory=dict,
    )
    eval_max_new_tokens: int = help_field("tokens a model row may generate per turn", default=96)
    eval_temperature: float = help_field("sampling temperature of the model rows", default=1.0)
    eval_batch_size: int = help_field("eval episodes run together (one batched model call)", default=16)
    baselines: list[str] = help_field(
        "policy specs evaluated beside the checkpoints at the same window",
        default_factory=lambda: ["oracle@none", "oracle@sliding_window", "oracle@clear_tool_outputs", "oracle@evolve"],
    )
    unlimited_window: int = help_field(
        'the window of the extra "unlimited context" row (oracle, no compaction)', default=1_000_000
    )
    wandb: bool = help_field("log GRPO and the eval to Weights & Biases (offline without an account)", default=False)
    warm_start: str | None = help_field(
        "a finished SFT checkpoint of this recipe (`build_warm_start`): stages 1-2 are skipped, GRPO starts "
        "from it and it is the SFT-only row",
        default=None,
    )

    def __post_init__(self) -> None:
        """Check every setting now, before stage 1, so a bad value is not found after 30 minutes of work."""
        check_numbers(self)
        from rl_compaction.evaluation.evaluate import MODEL_STRATEGIES, split_spec
        from rl_compaction.harness.oracle import ORACLE_STRATEGIES
        from rl_compaction.training.sft import SFTConfig
        from rl_compaction.training.trainer import CompactionGRPOConfig

        for section in TRL_SECTIONS + EPISODE_SECTIONS:
            setattr(self, section, as_mapping(section, getattr(self, section)))
        check_counts(self, ("demo_episodes", "eval_episodes", "eval_max_new_tokens", "eval_batch_size"))
        check_counts(self, ("unlimited_window",))
        for section in EPISODE_SECTIONS:
            try:
                spec = self.spec if section == "episode" else self.eval_spec
            except (TypeError, ValueError) as e:  # an unknown key is a TypeError of the dataclass
                raise ValueError(f"{section}: {e}") from None
            if spec.is_distribution:
                raise ValueError(f"{section}: a recipe plays one family at fixed settings, not a distribution")
        check_output_dir(self.output_dir)
        if self.warm_start is not None and not (Path(self.warm_start) / "config.json").is_file():
            raise ValueError(f"warm_start {self.warm_start!r} is not a model folder (no config.json there)")
        check_demo_settings(
            self.spec.families,
            self.demo_episodes,
            self.demo_strategies,
            self.keep_failed,
            self.demo_weights,
            names=DEMO_SETTING_NAMES,
        )
        for spec in self.baselines:
            name, strategy = split_spec(spec, "evolve")
            allowed = ORACLE_STRATEGIES if name == "oracle" else MODEL_STRATEGIES
            if strategy not in allowed:
                raise ValueError(f"baseline {spec!r}: strategy {strategy!r} is not one of {', '.join(allowed)}")
        for section, config_class in zip(TRL_SECTIONS, (SFTConfig, SFTConfig, CompactionGRPOConfig), strict=True):
            known = {f.name for f in fields(config_class)}
            unknown = sorted(set(getattr(self, section)) - known)
            if unknown:
                raise ValueError(
                    f"unknown key(s) under {section}: {', '.join(unknown)} ({config_class.__name__} fields)"
                )
        # stages 3 and 4 build these configs after hours of work: build them now, so their checks run now
        out = Path(self.output_dir)
        try:
            CompactionGRPOConfig(**grpo_settings(self, out / "grpo"))
        except ValueError as e:
            raise ValueError(f"grpo: {e}") from None
        try:
            eval_configs(self, out, self.baselines or ["oracle@none"])
        except ValueError as e:  # EvalConfig names its own fields: `temperature` is this config's `eval_temperature`
            field, _, rest = str(e).partition(" ")
            raise ValueError(f"eval_{field} {rest}" if f"eval_{field}" in EVAL_FIELDS else str(e)) from None
        if self.warm_start is None:
            with _naming("model"):
                check_model(self.model)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> ReproduceConfig:
        """Read a YAML file of these fields with TRL's parser; an unknown key is an error naming the valid
        ones. `overrides` set fields after the file; under sft / grpo they update the file's mapping."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown override(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        config, _ = parse_reproduce_args(["--config", str(path)])
        changes = {
            key: {**getattr(config, key), **value} if isinstance(value, dict) else value
            for key, value in overrides.items()
            if value is not None
        }
        return replace(config, **changes) if changes else config

    @property
    def spec(self) -> EpisodeSpec:
        """What demos, GRPO and the eval play (the eval with `eval_episode`'s changes)."""
        return EpisodeSpec(**self.episode)

    @property
    def eval_spec(self) -> EpisodeSpec:
        return replace(self.spec, **self.eval_episode)


@dataclass
class ReproduceRunArguments:
    """What the command line adds to a recipe: whether to continue a run."""

    resume: bool = help_field("continue a failed or killed run in output_dir (same config)", default=False)


#: what `--help` says first: TrlParser's --config flag is not an argparse option, so it lists nowhere else
CONFIG_HELP = (
    "Every field below is a ReproduceConfig field; --config FILE.yaml reads them from a recipe "
    "(default: the packaged configs/reproduce/vault-tiny-cpu.yaml), and flags after it override the file's values."
)


def parse_reproduce_args(argv: list[str]) -> tuple[ReproduceConfig, bool]:
    """(config, resume) from `rl-compaction reproduce` arguments, parsed by TRL's `TrlParser` as TRL's own
    scripts parse theirs. A missing, unreadable or non-YAML recipe, or a key that is no field, is a
    ValueError or FileNotFoundError saying so; a bad flag exits as argparse does."""
    from trl import TrlParser

    argv = list(argv)
    if "--config" not in argv:
        argv = ["--config", str(RECIPES / "vault-tiny-cpu.yaml"), *argv]
    elif argv.index("--config") == len(argv) - 1:
        raise ValueError("--config needs a YAML file")
    path = Path(argv[argv.index("--config") + 1])
    if path.is_dir():
        raise ValueError(f"{path} is a folder; --config takes a YAML file")
    if not path.is_file():
        raise FileNotFoundError(f"reproduce config not found: {path}")
    parser = TrlParser(
        (ReproduceConfig, ReproduceRunArguments), prog="rl-compaction reproduce", description=CONFIG_HELP
    )
    try:
        with _composed(path) as recipe:  # TRL's parser reads the recipe with its base's settings merged in
            argv[argv.index("--config") + 1] = str(recipe)
            config, run, from_file, _ = parser.parse_args_and_config(
                argv, return_remaining_strings=True, separate_remaining_strings=True
            )
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    except ValueError as e:  # TRL's words for a file that is no mapping, or a bad value's own (names its field)
        if "must contain a YAML mapping" in str(e) or "`env` field" in str(e):
            raise ValueError(f"{path}: expected a mapping of ReproduceConfig fields ({e})") from None
        raise
    unknown = [key.removeprefix("--") for key in from_file[::2]]
    if unknown:
        valid = ", ".join(sorted(f.name for f in fields(ReproduceConfig)))
        raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}; valid: {valid}")
    return config, run.resume


def compose_recipe(path: Path, seen: tuple[Path, ...] = ()) -> Any:
    """A recipe's settings with those of its `base` (a recipe file, relative to this one) underneath: a key
    the recipe gives replaces the base's, a mapping (episode, sft, grpo, ...) key by key. A file that is no
    mapping comes back as it is, for the parser to refuse."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "base" not in data:
        return data
    base = path.parent / str(data.pop("base"))
    if base.resolve() in seen or base.resolve() == path.resolve():
        raise ValueError(f"{path}: its base {base} is itself or one of its own bases")
    if not base.is_file():
        raise FileNotFoundError(f"{path}: its base recipe {base} does not exist")
    under = compose_recipe(base, (*seen, path.resolve()))
    if not isinstance(under, dict):
        raise ValueError(f"{base} (the base of {path}) is not a mapping of ReproduceConfig fields")
    return {
        **under,
        **{
            k: {**under[k], **v} if isinstance(v, dict) and isinstance(under.get(k), dict) else v
            for k, v in data.items()
        },
    }


@contextmanager
def _composed(path: Path) -> Iterator[Path]:
    """`path` itself, or, for a recipe with a `base`, a temporary file of the composed settings."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or "base" not in raw:
        yield path
        return
    data = compose_recipe(path)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8", delete=False) as f:
        yaml.safe_dump(data, f, sort_keys=False)
    try:
        yield Path(f.name)
    finally:
        os.unlink(f.name)


def _stage(n: int, total: int, title: str) -> float:
    print(f"\n[{n}/{total}] {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _log(message: str) -> None:
    print(f"[rl-compaction reproduce] {message}", file=sys.stderr, flush=True)


def grpo_settings(config: ReproduceConfig, out: Path) -> dict[str, Any]:
    """The `CompactionGRPOConfig` fields of stage 3: the recipe's task, on CPU, then its `grpo` section."""
    return {
        "output_dir": str(out),
        "use_cpu": True,
        "save_strategy": "no",
        "report_to": "wandb" if config.wandb else "none",
        "run_name": f"{Path(config.output_dir).resolve().name}-grpo",  # W&B's name of the run
        "bf16": False,
        "activation_checkpointing": False,
        **config.grpo,
    }


def eval_configs(config: ReproduceConfig, out: Path, policies: list[str]) -> tuple[EvalConfig, EvalConfig]:
    """Stage 4's two evals: `policies` at the recipe's window, and the oracle at the unlimited window."""
    # held-out test seeds, counted in the trained model's tokens (as GRPO counted)
    spec = replace(config.eval_spec, split="test", tokenizer=str(out / "grpo"))
    common = {
        "episodes": config.eval_episodes,
        "max_new_tokens": config.eval_max_new_tokens,
        "temperature": config.eval_temperature,
        "batch_size": config.eval_batch_size,
    }
    windowed = EvalConfig(policies=policies, output_dir=str(out / "eval"), episode=spec, **common)
    unlimited_spec = replace(spec, context_window=config.unlimited_window, compaction_threshold=None)
    unlimited = EvalConfig(
        policies=["oracle@none"], output_dir=str(out / "eval_unlimited"), episode=unlimited_spec, **common
    )
    return windowed, unlimited


def run_grpo(
    config: ReproduceConfig, model_dir: Path, out: Path, reward_fn: RewardFn | None = None
) -> list[dict[str, Any]]:
    """GRPO from `model_dir` with the config's overrides; saves the model to `out`, returns TRL's log
    history. `reward_fn` replaces the default reward (`CompactionGRPOTrainer`), e.g. for an ablation."""
    from trl import ModelConfig

    from rl_compaction.training.train import build_trainer
    from rl_compaction.training.trainer import CompactionGRPOConfig

    model_args = ModelConfig(model_name_or_path=str(model_dir))
    args = CompactionGRPOConfig(**grpo_settings(config, out))
    prepare_wandb(args)
    trainer = build_trainer(args, config.spec, model_args, reward_fn=reward_fn)
    trainer.train()
    trainer.save_model(str(out))
    write_model_card(trainer, out, str(model_dir))
    finish_wandb(args)
    history = trainer.state.log_history
    (out / "log_history.json").write_text(json.dumps(history, indent=1), encoding="utf-8")
    return history


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


#: Written into the output folder after each stage: the stages done and their timings, so that a
#: run that failed or was killed can be resumed (`resume=True`) from the first stage not done.
PROGRESS_FILE = "progress.json"


def _open_output(config: ReproduceConfig, resume: bool) -> tuple[Path, dict[str, float]]:
    """The output folder, and the timings of the stages a resumed run already finished."""
    out = Path(config.output_dir)
    settings = json.loads(json.dumps(asdict(config)))  # as config.json holds it
    if out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
        if not resume:
            raise FileExistsError(
                f"{out} is not empty; pass --resume to continue a run there with the same config, "
                "or choose another --output-dir or remove it"
            )
        try:
            saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ValueError(f"{out} holds no readable config.json of a reproduce run; it cannot be resumed") from None
        changed = sorted(k for k in set(saved) | set(settings) if k != "output_dir" and saved.get(k) != settings.get(k))
        if changed:
            raise ValueError(
                f"{out} was run with another config ({', '.join(changed[:6])} differ); resume it with the "
                "same config, or choose another --output-dir"
            )
        return out, _read_progress(out / PROGRESS_FILE)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.json", json.dumps(settings, indent=2))
    return out, {}


def _read_progress(path: Path) -> dict[str, float]:
    """The stages done: none if the run stopped before its first stage ended. An unreadable file is refused,
    not read as "none done": the resume would delete the finished stages' folders and start again."""
    if not path.exists():
        return {}
    try:
        timings = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(timings, dict) or not all(isinstance(v, (int, float)) for v in timings.values()):
            raise ValueError("not an object of stage timings")
        return timings
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{path} is unreadable ({e}); it records which stages are done. Fix or remove it by hand: removed, "
            "the resume runs every stage again"
        ) from None


def _done(out: Path, timings: dict[str, float], stage: str, start: float) -> None:
    timings[stage] = time.perf_counter() - start
    write_text_atomic(out / PROGRESS_FILE, json.dumps(timings, indent=2))


def _fresh(*folders: Path) -> None:
    """Remove what an interrupted stage left, so that it starts clean."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _demos_and_sft(config: ReproduceConfig, out: Path, timings: dict[str, float]) -> None:
    """Stages 1-2 into `out` (demos/, sft_answers/, sft/), skipping those `timings` records as done."""
    if "demos" not in timings:
        start = _stage(1, 5, f"oracle demonstrations on {config.spec.family} ({', '.join(config.demo_strategies)})")
        _fresh(out / "demos")
        write_demos(
            out / "demos",
            replace(config.spec, tokenizer=config.model),
            config.demo_episodes,
            config.demo_strategies,
            keep_failed=config.keep_failed,
            weights=config.demo_weights,
        )
        _done(out, timings, "demos", start)

    if "sft" not in timings:
        start = _stage(2, 5, f"SFT warm start of {config.model} (TRL SFTTrainer)")
        _fresh(out / "sft_answers", out / "sft")
        base = {
            "use_cpu": True,
            "save_strategy": "no",
            "report_to": "none",
            "bf16": False,  # fp32 on CPU, as in GRPO (TRL turns bf16 on by default)
            "activation_checkpointing": False,
        }
        start_model = config.model
        if config.sft_answers:
            _log("SFT phase 1: the answer turns alone")
            train_sft(
                out / "demos",
                start_model,
                out / "sft_answers",
                turn_kinds=[SUBMIT_TOOL["name"]],
                **{**base, **config.sft_answers},
            )
            start_model = str(out / "sft_answers")
            _log("SFT phase 2: every turn")
        train_sft(out / "demos", start_model, out / "sft", balance_turns=config.balance_turns, **{**base, **config.sft})
        _done(out, timings, "sft", start)


#: the settings stages 1-2 depend on: a warm start built with other values of these is another model
#: (the episode's settings under their names in the markers of warm starts built before the `episode` section)
WARM_START_EPISODE = ("family", "scale", "level", "context_window", "compaction_threshold")
WARM_START_FIELDS = (
    "model",
    "demo_episodes",
    "demo_strategies",
    "demo_weights",
    "keep_failed",
    "balance_turns",
    "sft_answers",
    "sft",
)
#: what a warm-start folder holds besides the marker: the model and its tokenizer, nothing of the run
WARM_START_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def warm_start_record(config: ReproduceConfig) -> dict[str, Any]:
    """The recipe's stage 1-2 settings as its warm start's marker records them (JSON values)."""
    spec = config.spec
    record = {"model": config.model, **{name: getattr(spec, name) for name in WARM_START_EPISODE}}
    record |= {name: getattr(config, name) for name in WARM_START_FIELDS[1:]}
    return json.loads(json.dumps(record))


def matching_warm_start(config: ReproduceConfig, folder: Path) -> Path | None:
    """`folder` if it holds a warm start built (`build_warm_start`) with this config's stage 1-2 settings."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    complete = all((folder / name).is_file() for name in WARM_START_FILES)
    return folder if complete and marker.get("recipe") == warm_start_record(config) else None


def build_warm_start(config: ReproduceConfig, dest: Path) -> Path:
    """Run stages 1-2 of `config` (oracle demonstrations of train tasks, SFT) in a scratch folder and install
    the SFT checkpoint's model and tokenizer in `dest`, with a marker recording the settings it was built with,
    so that a run of the same recipe can start GRPO from it (`warm_start`)."""
    with tempfile.TemporaryDirectory(prefix="warm-start-") as scratch:
        out = Path(scratch)
        timings: dict[str, float] = {}
        _demos_and_sft(config, out, timings)
        staging = out / "install"
        staging.mkdir()
        for name in WARM_START_FILES:
            shutil.copy2(out / "sft" / name, staging / name)
        marker = {"name": dest.name, "recipe": warm_start_record(config), "build_seconds": timings}
        (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, dest)
    return dest


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


def run_reproduce(config: ReproduceConfig, *, resume: bool = False) -> dict[str, Any]:
    """Run the five stages into `config.output_dir`; returns the table, verdict, paths and timings.
    With `resume`, a folder holding a run of the same config continues from its first unfinished
    stage (the eval also keeps its finished episodes). One run at a time holds the folder (`lock_output_dir`)."""
    with lock_output_dir(config.output_dir):
        return _run_reproduce(config, resume)


def _run_reproduce(config: ReproduceConfig, resume: bool) -> dict[str, Any]:
    out, timings = _open_output(config, resume)
    os.environ["WANDB_MODE"] = wandb_mode()  # no account: offline, `wandb sync` later
    os.environ.setdefault("WANDB_DIR", str(out))
    if timings:
        _log(f"resuming {out}: done already: {', '.join(timings)}")

    if config.warm_start is not None:
        warm = Path(config.warm_start)
        _log(f"stages 1-2 skipped: GRPO starts from the warm start {warm} (this recipe's demos and SFT, built before)")
    else:
        warm = out / "sft"
        _demos_and_sft(config, out, timings)

    if "grpo" not in timings:
        start = _stage(3, 5, "GRPO from the SFT checkpoint on the task reward")
        _fresh(out / "grpo")
        run_grpo(config, warm, out / "grpo")
        _done(out, timings, "grpo", start)
    history = json.loads((out / "grpo" / "log_history.json").read_text(encoding="utf-8"))

    start = _stage(4, 5, f"eval on {config.eval_episodes} held-out test tasks")
    learned, sft = f"{out / 'grpo'}@evolve", f"{warm}@evolve"
    windowed_config, unlimited_config = eval_configs(config, out, [learned, sft, *config.baselines])
    windowed = run_eval(windowed_config, resume=resume, use_wandb=config.wandb)
    unlimited = run_eval(unlimited_config, resume=resume)
    _done(out, timings, "eval", start)

    _stage(5, 5, "table, plots and verdict")
    rows = dict(windowed["metrics"]["policies"])
    unlimited_name = f"oracle@none (window {config.unlimited_window:,})"
    rows[unlimited_name] = {**unlimited["metrics"]["policies"]["oracle@none"], "policy": unlimited_name}
    names = {learned: "learned (GRPO)", sft: "SFT-only"}
    table_rows = [{**r, "policy": names.get(k, k)} for k, r in rows.items()]
    table = format_metrics(table_rows)
    title = plot_title(windowed_config, note=f"unlimited row: {config.unlimited_window:,}")
    plot = plot_success_vs_cost(table_rows, out / "success_vs_cost.png", title)
    curve = plot_learning_curve(history, out / "learning_curve.png")
    if config.wandb:
        log_plots_to_wandb(out, {"success_vs_cost": plot, "learning_curve": curve}, asdict(config))
    lines = verdict({k: EpisodeStats.from_dict(r) for k, r in rows.items()}, learned, sft, unlimited_name)
    report = {
        "table": table,
        "verdict": lines,
        "timings": timings,
        "rows": rows,
        "plot": str(plot),
        "learning_curve": str(curve),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "report.md").write_text(table + "\n\n" + "\n".join(f"- {x}" for x in lines) + "\n", encoding="utf-8")
    return report
