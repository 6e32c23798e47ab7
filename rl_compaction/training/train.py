"""GRPO training entry point, TRL style:

    accelerate launch --config_file configs/accelerate/cpu.yaml --num_cpu_threads_per_process 2 \\
        -m rl_compaction.training.train --config configs/train/tiny-cpu.yaml [--max_steps 2 ...]
    rl-compaction train --config configs/train/tiny-cpu.yaml

The YAML holds `CompactionGRPOConfig` fields (TRL's GRPOConfig plus reward settings), `EpisodeSpec`
fields (families, window, threshold, turn limit, difficulty; a list or {low, high} there draws one value per
episode) and TRL's `ModelConfig` fields (model_name_or_path, dtype, use_peft, lora_*); command-line flags
override it. The model is any local path or a name `rl_compaction.models.registry.resolve_model` knows.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from trl import GRPOConfig, ModelConfig, TrlParser, get_peft_config

from rl_compaction.core.configs import TRL_USAGE, hide_flags, own_fields_first
from rl_compaction.core.outputs import check_no_previous_run, lock_on_main_process, resolve_resume
from rl_compaction.harness.spec import EpisodeSpec, episode_fields
from rl_compaction.models.registry import load_pretrained
from rl_compaction.training.precision import check_master_weights
from rl_compaction.training.reward import RewardFn
from rl_compaction.training.sft import write_model_card
from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer
from rl_compaction.training.wandb_resume import continue_wandb_run, finish_wandb, prepare_wandb


def build_trainer(
    args: CompactionGRPOConfig, episode: EpisodeSpec, model_args: ModelConfig, reward_fn: RewardFn | None = None
) -> CompactionGRPOTrainer:
    """The trainer for `args` on `model_args`' model, playing `episode`; `reward_fn` as the trainer takes it."""
    model, tokenizer = load_pretrained(
        model_args.model_name_or_path, dtype=model_args.dtype, attn_implementation=model_args.attn_implementation
    )
    check_master_weights(model, args, model_args.use_peft)
    peft_config = get_peft_config(model_args)
    return CompactionGRPOTrainer(
        model, args, processing_class=tokenizer, peft_config=peft_config, reward_fn=reward_fn, episode=episode
    )


#: what `--help` says first: TrlParser's --config flag is not an argparse option, so it lists nowhere else
CONFIG_HELP = (
    "Fields come from TRL's dataclasses below; --config FILE.yaml reads them from a YAML file "
    "(configs/), and flags given after it override the file's values."
)


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = TrlParser(
        (CompactionGRPOConfig, EpisodeSpec, ModelConfig), description=CONFIG_HELP, prog=prog, usage=TRL_USAGE
    )
    own = {f.name for f in fields(CompactionGRPOConfig)} - {f.name for f in fields(GRPOConfig)}
    own_fields_first(parser, "rl-compaction: episodes (EpisodeSpec), training and reward", own | episode_fields())
    hide_flags(parser, {"sandbox"})  # a nested dataclass: no flag sets it
    args, episode, model_args = parser.parse_args_and_config(argv if argv is not None else sys.argv[1:])
    if model_args.model_name_or_path is None:
        parser.error("model_name_or_path is required (in the YAML or as --model_name_or_path)")
    args.resume_from_checkpoint = resolve_resume(args.resume_from_checkpoint, args.output_dir)
    check_no_previous_run(args.output_dir, resume=args.resume_from_checkpoint, overwrite=args.overwrite_output_dir)
    with lock_on_main_process(args.output_dir):  # one run at a time trains into the folder
        if "wandb" in (args.report_to or []) and args.resume_from_checkpoint:
            continue_wandb_run(args.resume_from_checkpoint)  # first: the checkpoint's project wins over the default
        prepare_wandb(args)
        trainer = build_trainer(args, episode, model_args)
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        trainer.save_model(args.output_dir)  # a PEFT run saves its adapter, as TRL's scripts do
        if trainer.accelerator.is_main_process:
            write_model_card(trainer, Path(args.output_dir), model_args.model_name_or_path)
        finish_wandb(args)
        if trainer.accelerator.is_main_process:
            print(f"saved the trained model to {args.output_dir}")


if __name__ == "__main__":
    main()
