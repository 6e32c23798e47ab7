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

The recipe's settings are `rl_compaction.recipes.recipe`, its report (curve, verdict, plots)
`rl_compaction.recipes.report`; this module is the stages and the run, read top to bottom.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rl_compaction.core.outputs import LOCK_FILE, lock_output_dir, write_text_atomic
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.wandb_settings import wandb_mode
from rl_compaction.evaluation.evaluate import run_eval
from rl_compaction.evaluation.report import format_metrics, plot_success_vs_cost, plot_title
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.models.registry import MARKER
from rl_compaction.recipes.recipe import ReproduceConfig, check_configs, eval_configs, grpo_settings
from rl_compaction.recipes.report import check_lines, log_plots_to_wandb, plot_checks, plot_learning_curve, verdict
from rl_compaction.training.demos import write_demos
from rl_compaction.training.reward import RewardFn
from rl_compaction.training.sft import train_sft, write_model_card
from rl_compaction.training.wandb_resume import finish_wandb, prepare_wandb


def _stage(n: int, total: int, title: str) -> float:
    print(f"\n[{n}/{total}] {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _log(message: str) -> None:
    print(f"[rl-compaction reproduce] {message}", file=sys.stderr, flush=True)


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
    checked = {name: run_eval(c, resume=resume) for name, c in check_configs(config, out, [learned, sft]).items()}
    _done(out, timings, "eval", start)

    _stage(5, 5, "table, plots and verdict")
    rows = dict(windowed["metrics"]["policies"])
    unlimited_name = f"oracle@none (window {config.unlimited_window:,})"
    rows[unlimited_name] = {**unlimited["metrics"]["policies"]["oracle@none"], "policy": unlimited_name}
    names = {learned: "learned (GRPO)", sft: "SFT-only"}
    check_rows = {
        f"{names[spec]}, {name}": result["metrics"]["policies"][spec]
        for name, result in checked.items()
        for spec in names
    }
    table_rows = [{**r, "policy": names.get(k, k)} for k, r in {**rows, **check_rows}.items()]
    table = format_metrics(table_rows)
    title = plot_title(windowed_config, note=f"unlimited row: {config.unlimited_window:,}")
    plot = plot_success_vs_cost(table_rows, out / "success_vs_cost.png", title)
    curve = plot_learning_curve(history, out / "learning_curve.png")
    images = {"success_vs_cost": plot, "learning_curve": curve}
    pairs = {
        name: tuple(EpisodeStats.from_dict(result["metrics"]["policies"][spec]) for spec in (learned, sft))
        for name, result in checked.items()
    }
    if pairs:  # success at the eval's setting and under each check, learned beside SFT-only
        own = tuple(EpisodeStats.from_dict(rows[spec]) for spec in (learned, sft))
        images["checks"] = plot_checks({"the recipe's eval setting": own, **pairs}, out / "checks.png", title)
    if config.wandb:
        log_plots_to_wandb(out, images, asdict(config))
    lines = verdict({k: EpisodeStats.from_dict(r) for k, r in rows.items()}, learned, sft, unlimited_name)
    lines += check_lines(EpisodeStats.from_dict(rows[learned]), pairs)
    report = {
        "table": table,
        "verdict": lines,
        "timings": timings,
        "rows": {**rows, **check_rows},
        "plot": str(plot),
        "learning_curve": str(curve),
        "checks_plot": str(images["checks"]) if pairs else None,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "report.md").write_text(table + "\n\n" + "\n".join(f"- {x}" for x in lines) + "\n", encoding="utf-8")
    return report
