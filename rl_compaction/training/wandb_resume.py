"""Resuming from a checkpoint continues the same W&B run, not a new one.

Each checkpoint records the id of the W&B run that wrote it (`wandb_run.json`); before a resumed
run starts, `continue_wandb_run` points W&B at that id (WANDB_RUN_ID, WANDB_RESUME=allow), which
transformers' WandbCallback passes through `wandb.init`. Online, the run's charts continue where the
checkpoint left them; offline, each process writes its own folder under the same id, and
`wandb sync` uploads them in order of start time into that one run.

`prepare_wandb` gives every W&B run of `train`, `sft` and `reproduce` the project evaluations log to
("rl-compaction", unless WANDB_PROJECT says otherwise; transformers' default is "huggingface") and a name
(the output folder's, unless `run_name` is set; transformers leaves it unnamed), in the mode of
`rl_compaction.core.wandb_settings`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rl_compaction.core.wandb_settings import wandb_mode, wandb_project

RUN_FILE = "wandb_run.json"


def prepare_wandb(args: TrainingArguments) -> None:
    """Before a trainer reporting to W&B starts: the project and mode (`rl_compaction.core.wandb_settings`),
    the run's name (`run_name`, default the output folder's name), its files beside the checkpoints
    (WANDB_DIR, default `output_dir`)."""
    if "wandb" not in (args.report_to or []):
        return
    os.environ["WANDB_PROJECT"] = wandb_project()
    os.environ.setdefault("WANDB_DIR", args.output_dir)  # not ./wandb
    os.environ["WANDB_MODE"] = wandb_mode()
    if not args.run_name:
        args.run_name = Path(args.output_dir).resolve().name


class WandbRunIdCallback(TrainerCallback):
    """Writes the live W&B run's id into every checkpoint the trainer saves."""

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        import wandb

        if not state.is_world_process_zero or wandb.run is None:
            return
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if checkpoint.is_dir():
            run = {"id": wandb.run.id, "project": wandb.run.project}
            (checkpoint / RUN_FILE).write_text(json.dumps(run) + "\n")


def continue_wandb_run(checkpoint: str | os.PathLike) -> str | None:
    """Set up the environment so that W&B resumes the run recorded in `checkpoint`; returns its id.

    An explicit WANDB_RUN_ID wins (the user chose a run); a checkpoint without the file (written
    with W&B off) changes nothing.
    """
    path = Path(checkpoint) / RUN_FILE
    if os.environ.get("WANDB_RUN_ID") or not path.is_file():
        return None
    try:
        run = json.loads(path.read_text())
        run_id = run["id"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a W&B run record ({e}); delete it to start a new W&B run") from e
    os.environ["WANDB_RUN_ID"] = run_id
    os.environ.setdefault("WANDB_RESUME", "allow")
    if run.get("project"):
        os.environ.setdefault("WANDB_PROJECT", run["project"])
    return run_id


def finish_wandb(args: TrainingArguments) -> None:
    """After a run reporting to W&B: close its run, so a later run in this process reads its W&B settings
    (run id, mode) afresh."""
    if "wandb" not in (args.report_to or []):
        return
    import wandb

    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()
