"""The whole pipeline at toy scale on CPU, with embedded defaults:

    oracle demonstrations -> SFT warm start -> a few GRPO steps -> `eval` of the checkpoint
    against the oracle under the harness strategies (W&B in offline mode)

It uses the tiny random model (built offline) and the `probe` family at small scale, so it runs
in minutes on a laptop CPU; the same stages scale up through `rl-compaction demos`, `sft`,
`train` and `eval` with the configs under configs/.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rl_compaction.demos import write_demos
from rl_compaction.evaluate import EvalConfig, run_eval
from rl_compaction.sft import train_sft
from rl_compaction.train import main as train_main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
#: the toy task: probe at small scale in a window that forces compaction
TASK = {"env": "probe", "scale": 0.06, "level": 1, "context_window": 6000, "compaction_threshold": 4000}


def _stage(n: int, title: str) -> float:
    print(f"\n[{n}/4] {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def run_quickstart(output_dir: str | Path = "runs/quickstart", *, grpo_steps: int = 4, eval_episodes: int = 4) -> dict:
    """Run the four stages into `output_dir`; returns what `run_eval` returns (table, plot, ...)."""
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; choose another --output-dir or remove it")
    os.environ.setdefault("WANDB_MODE", "offline")  # no account needed; `wandb sync` uploads later
    os.environ.setdefault("WANDB_DIR", str(out))
    timings = {}

    start = _stage(1, "oracle demonstrations (context-bound oracle, varied compaction strategies)")
    write_demos(
        out / "demos",
        [TASK["env"]],
        6,
        ["evolve", "none", "clear_tool_outputs"],
        scale=TASK["scale"],
        level=TASK["level"],
        context_window=TASK["context_window"],
        compaction_threshold=TASK["compaction_threshold"],
        tokenizer_name_or_path="tiny",
    )
    timings["demos"] = time.perf_counter() - start

    start = _stage(2, "SFT warm start of the tiny model on the demonstrations (TRL SFTTrainer)")
    train_sft(
        out / "demos",
        "tiny",
        out / "sft",
        use_cpu=True,
        max_length=8192,
        per_device_train_batch_size=2,
        learning_rate=3e-3,
        lr_scheduler_type="constant",
        max_steps=8,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
    )
    timings["sft"] = time.perf_counter() - start

    start = _stage(3, f"{grpo_steps} GRPO steps from the SFT checkpoint (W&B offline)")
    train_main(
        [
            "--config",
            str(CONFIGS / "train" / "tiny-cpu.yaml"),
            "--model_name_or_path",
            str(out / "sft"),
            "--output_dir",
            str(out / "grpo"),
            "--max_steps",
            str(grpo_steps),
            "--save_strategy",
            "no",
            "--report_to",
            "wandb",
            "--context_window",
            str(TASK["context_window"]),
            "--compaction_threshold",
            str(TASK["compaction_threshold"]),
        ]
    )
    timings["grpo"] = time.perf_counter() - start

    start = _stage(4, "evaluation on held-out test tasks: the checkpoint against the oracle strategies")
    policies = [
        f"{out / 'grpo'}@evolve",
        "oracle@none",
        "oracle@evolve",
        "oracle@clear_tool_outputs",
        "oracle@sliding_window",
    ]
    # Window, threshold and cost in the model's own tokens, for the oracle rows too.
    result = run_eval(
        EvalConfig(
            policies=policies,
            episodes=eval_episodes,
            max_turns=12,
            max_new_tokens=48,
            batch_size=eval_episodes,
            tokenizer=str(out / "grpo"),
            output_dir=str(out / "eval"),
            **TASK,
        ),
        use_wandb=True,
    )
    timings["eval"] = time.perf_counter() - start
    result["timings"] = timings
    return result
