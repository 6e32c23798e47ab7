"""GRPO over whole episodes, on TRL.

TRL's GRPOTrainer samples one completion per prompt (its tool loop only appends), so it
cannot express an edit of the context. We keep everything else of it (losses, KL to a
reference model, PEFT, vLLM colocate/server generation, accelerate/DeepSpeed/FSDP, checkpoints,
logging) and replace one method, `_generate_and_score_completions`:

1. Each dataset row names a task (family, seed); the RepeatSampler gives each task G rows, so
   G episodes of the same instance form a group. All episodes of the batch run in lockstep in
   `CompactionEnv`, sampled through TRL's own generation (`_generate_single_turn`: vLLM when
   `use_vllm`, else transformers), so the prompt ids and sampled ids are exact.
2. Episode reward r_i = `episode_reward(info)` (score, success bonus, cost, penalties), and one
   advantage per episode, normalised within its group of G (as TRL's `scale_rewards`):
       A_i = (r_i - mean_group(r)) / (std_group(r) + 1e-4)      ("group"; "batch": std over the batch)
3. The episode is cut into segments (`rl_compaction.training.segments`): rows whose prompt is the first
   prompt of the row and whose "completion" holds the sampled tokens (trained) interleaved with
   what the harness added (masked through TRL's `tool_mask`). Every row carries A_i.
4. TRL's loss then runs unchanged, on each micro-batch without the rows and columns that hold no
   trained token (`rl_compaction.training.microbatch`). Only token-level losses are allowed (`dapo`, `cispo`, `bnpo`):
       L = - sum_{rows, t} mask_t * min(rho_t A, clip(rho_t) A) / (number of trained tokens)
   so an episode weighs by its trained tokens, never by how many segments an edit cut it into
   (per-sequence means, as in `grpo`, would weight every segment like an episode).

Why one module of ~500 lines: the trainer's overrides of TRL are the steps above in order, with the
config whose fields they read; split, the algorithm would read in pieces.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import torch
from accelerate.utils import gather_object
from datasets import Dataset
from peft import PeftModel
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad

from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.core.configs import check_numbers
from rl_compaction.core.outputs import check_output_dir
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.harness.labels import LabelEdits
from rl_compaction.harness.rollout import EpisodeRecord, closing_envs, rollout
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.training.generation import TRLGenerationPolicy, engine_awake, mark_fsdp2_for_generation
from rl_compaction.training.microbatch import per_row_logps, trained_rows, trim_micro_batch, unpadded_logps
from rl_compaction.training.precision import default_bf16, default_checkpointing
from rl_compaction.training.reward import RewardConfig, RewardFn, record_reward
from rl_compaction.training.segments import Segment, build_segments
from rl_compaction.training.trl_compat import log_metric, reference_adapter, replace_weight_sync, set_metric
from rl_compaction.training.wandb_resume import WandbRunIdCallback

TOKEN_LEVEL_LOSSES = ("dapo", "cispo", "bnpo")

# TRL 1.16 (pinned) calls the model's deprecated `is_gradient_checkpointing`, `gradient_checkpointing_disable`
# and `_enable` around every generation (trl.models.utils._unwrap_model_for_generation); transformers'
# FutureWarnings about them reprinted at every step and checkpoint save. Our own code uses the new names
# (`checkpointing_off`); a user's deprecated config field still warns (another message).
warnings.filterwarnings(
    "ignore",
    message="`(is_gradient_checkpointing|gradient_checkpointing_disable|gradient_checkpointing_enable)` is deprecated",
    category=FutureWarning,
    module="transformers.modeling_utils",
)


@contextmanager
def checkpointing_off(model: Any, kwargs: dict | None = None):
    """Activation checkpointing off for no-grad forwards, restored after (TRL's `disable_gradient_checkpointing`
    under transformers' new names, which do not warn; transformers before 5.23, as on the lent GPU machine,
    has only the old ones)."""
    new_names = hasattr(model, "is_activation_checkpointing")
    was_on = model.is_activation_checkpointing if new_names else model.is_gradient_checkpointing
    if was_on:
        (model.activation_checkpointing_disable if new_names else model.gradient_checkpointing_disable)()
    try:
        yield
    finally:
        if was_on and new_names:  # as transformers' Trainer enables it: two keys are the method's own arguments
            kwargs = dict(kwargs or {})
            every_n_layers, offload = kwargs.pop("every_n_layers", 1), kwargs.pop("offload", False)
            model.activation_checkpointing_enable(kwargs or None, every_n_layers=every_n_layers, offload=offload)
        elif was_on:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@dataclass
class CompactionGRPOConfig(GRPOConfig):
    """GRPOConfig plus the environment and reward settings (all TRL fields keep their meaning;
    `max_completion_length` is the token budget of one model turn, `num_generations` is G)."""

    train_tasks: int = field(default=256, metadata={"help": "Task seeds drawn from the train split."})
    eval_tasks: int = field(default=16, metadata={"help": "Task seeds from the validation split for evaluation."})
    reward_score_weight: float = field(default=1.0, metadata={"help": "Weight of the task score."})
    reward_success_bonus: float = field(default=0.5, metadata={"help": "Bonus for a successful episode."})
    reward_cost_weight: float = field(default=0.2, metadata={"help": "Weight of min(cost / cost_scale, 1)."})
    reward_cost_scale: float = field(default=200_000.0, metadata={"help": "Cost (input-token eq.) that costs 1."})
    reward_evolve_failure_penalty: float = field(default=0.05, metadata={"help": "Per rejected evolve call."})
    reward_malformed_call_penalty: float = field(default=0.025, metadata={"help": "Per malformed tool call."})
    reward_window_penalty: float = field(default=0.2, metadata={"help": "When the context window was hit."})
    reward_limit_penalty: float = field(
        default=0.2, metadata={"help": "When the turn, output or time limit ended the episode unsubmitted."}
    )
    log_episodes: int = field(default=4, metadata={"help": "Sample episodes logged as a table per generation."})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train into an output_dir holding a previous run (checkpoints, a model); else refused."},
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated alias of `activation_checkpointing` (on unless either is set false)."},
    )

    def __post_init__(self) -> None:
        check_numbers(self)  # before TRL's own checks, which do arithmetic on these
        if isinstance(self.num_generations, int) and self.num_generations < 2:
            # TRL divides by it (a ZeroDivisionError for 0); a group of one has no baseline either
            raise ValueError(f"num_generations must be >= 2 (episodes per task group), got {self.num_generations}")
        default_bf16(self)
        default_checkpointing(self)
        super().__post_init__()
        check_output_dir(self.output_dir)
        if self.loss_type not in TOKEN_LEVEL_LOSSES:
            raise ValueError(
                f"loss_type {self.loss_type!r} normalises per row, so the number of segments of an episode would "
                f"weight it; use one of {', '.join(TOKEN_LEVEL_LOSSES)}"
            )
        if self.importance_sampling_level != "token":
            raise ValueError("importance_sampling_level must be 'token' (a segment is not a whole sequence)")
        if (
            self.use_vllm
            and self.vllm_importance_sampling_correction
            and (self.vllm_importance_sampling_mode != "token_truncate")
        ):
            raise ValueError(
                "vllm_importance_sampling_mode must be 'token_truncate': the ratio is applied per sampled token "
                "(a segment is not a whole sequence)"
            )
        if self.use_cpu and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true"):
            raise ValueError(
                "an FSDP accelerate config with use_cpu: accelerate would run it as plain data parallelism (no "
                "sharding, unsharded checkpoints), so FSDP cannot be rehearsed on CPU; use configs/accelerate/cpu.yaml"
            )
        if self.log_completions:
            raise ValueError("log_completions logs TRL's single-turn completions; use log_episodes for episodes")
        self._check_tasks()
        _ = self.reward_config  # validates the reward weights now, not at the first step

    def _check_tasks(self) -> None:
        """Task settings fail here, before a model is loaded, rather than at the first rollout."""
        if self.train_tasks <= 0 or self.eval_tasks <= 0:
            raise ValueError("train_tasks and eval_tasks must be > 0")
        # TRL's sampler yields only whole generation batches: with fewer tasks than one needs, no step runs,
        # and the untouched start would be saved as the trained model
        needed = self.generation_batch_size // self.num_generations
        if self.train_tasks < needed:
            raise ValueError(
                f"train_tasks ({self.train_tasks}) is fewer than the distinct tasks of one generation batch "
                f"({needed} = per_device_train_batch_size x processes x steps_per_generation / num_generations): "
                "no training step would run"
            )

    @property
    def reward_config(self) -> RewardConfig:
        return RewardConfig(
            score_weight=self.reward_score_weight,
            success_bonus=self.reward_success_bonus,
            cost_weight=self.reward_cost_weight,
            cost_scale=self.reward_cost_scale,
            evolve_failure_penalty=self.reward_evolve_failure_penalty,
            malformed_call_penalty=self.reward_malformed_call_penalty,
            window_penalty=self.reward_window_penalty,
            limit_penalty=self.reward_limit_penalty,
        )


def task_dataset(families: list[str], weights: list[float] | None, split: str, n: int, seed: int) -> Dataset:
    """Rows naming tasks: (family, task_seed) drawn with the mixture weights; `prompt` is for TRL's bookkeeping."""
    rng = random.Random(seed)
    picks = rng.choices(families, weights=weights, k=n)
    rows = [
        {"prompt": [{"role": "user", "content": f"{family} task {i}"}], "family": family, "task_seed": i}
        for i, family in enumerate(picks)
    ]
    return Dataset.from_list(rows)


def episode_metrics(stats: EpisodeStats) -> dict[str, float]:
    """The figures GRPO logs at a step: every number of `stats` (a share that is None, where no model edit
    applied, is left out), the cost by part as cost_parts/PART, and how episodes ended as shares, ended/REASON."""
    flat = {k: float(v) for k, v in stats.to_dict().items() if isinstance(v, (int, float)) and k != "episodes"}
    flat |= {f"cost_parts/{k}": v for k, v in (stats.cost_parts or {}).items()}
    flat |= {f"ended/{k}": n / stats.episodes for k, n in stats.ended.items()}
    return flat


def _ended(completion: list[int], stop_ids: set[int]) -> bool:
    """Whether a sampled turn ended on its own (EOS) rather than at the token budget."""
    return bool(completion) and completion[-1] in stop_ids


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
    """A_i = (r_i - mean of its group) / (std + 1e-4); std of the group ("group"), of the whole
    batch ("batch"), or none ("none"). Consecutive `group_size` rewards form a group."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.view(-1, group_size)
    advantages = rewards - grouped.mean(dim=1).repeat_interleave(group_size)
    if scale == "group":
        advantages = advantages / (grouped.std(dim=1).repeat_interleave(group_size) + 1e-4)
    elif scale == "batch":
        advantages = advantages / (rewards.std() + 1e-4)
    elif scale != "none":
        raise ValueError(f"unknown scale_rewards {scale!r}; use group, batch or none")
    return advantages


def episode_reward_func(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    """TRL's GRPOTrainer takes reward functions; here the reward is of a whole episode
    (`CompactionGRPOTrainer.reward_fn`), computed once it ends, so TRL never calls this. Its name
    names the reward in TRL's metrics (``rewards/episode_reward_func/mean`` and ``/std``)."""
    raise RuntimeError("episode rewards come from CompactionGRPOTrainer.reward_fn; TRL does not score turns here")


class CompactionGRPOTrainer(GRPOTrainer):
    """GRPO on whole `CompactionEnv` episodes (see the module docstring for the algorithm)."""

    def __init__(
        self,
        model: Any,
        args: CompactionGRPOConfig,
        *,
        train_dataset: Dataset | None = None,
        eval_dataset: Dataset | None = None,
        processing_class: Any = None,
        peft_config: Any = None,
        callbacks: list | None = None,
        reward_fn: RewardFn | None = None,
        episode: EpisodeSpec | None = None,
    ):
        """`episode` is what every episode plays (default `EpisodeSpec()`), or a distribution drawn per task:
        training plays its train split and evaluation its validation split, whatever its `split` says.
        `reward_fn(record, args.reward_config) -> {"reward": r, <term>: value, ...}` replaces the default
        `record_reward` (extra terms, ablations, controls); each term is logged under reward/."""
        self.episode = episode if episode is not None else EpisodeSpec()
        families, weights = self.episode.families, self.episode.family_weights
        if train_dataset is None:
            train_dataset = task_dataset(families, weights, "train", args.train_tasks, args.seed)
        if eval_dataset is None and args.eval_strategy != "no":
            eval_dataset = task_dataset(families, weights, "validation", args.eval_tasks, args.seed + 1)
        if args.ddp_find_unused_parameters is None and (peft_config is not None or isinstance(model, PeftModel)):
            # every adapter takes part in every forward; transformers would search for unused parameters after each
            # backward (a graph walk per step) because a PeftModel is not a PreTrainedModel
            args.ddp_find_unused_parameters = False
        super().__init__(
            model=model,
            reward_funcs=[episode_reward_func],
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=callbacks,
        )
        if self.use_vllm and args.vllm_mode == "colocate":
            from rl_compaction.training.vllm_sync import runs_on_cpu, sync_weights_by_reload

            if runs_on_cpu():  # TRL's per-tensor load fails there; vLLM's reload does not (vllm_sync)
                replace_weight_sync(self, sync_weights_by_reload)
        if self.is_fsdp_enabled and getattr(self.accelerator.state.fsdp_plugin, "fsdp_version", 1) == 2:
            mark_fsdp2_for_generation(self.model)
        if "wandb" in (args.report_to or []):
            self.add_callback(WandbRunIdCallback())  # a resumed run continues this W&B run
        # The env counts with the model's own chat template, so thresholds and the ledger see real ids.
        self.counter = ChatTemplateCounter(self.processing_class, template_kwargs=args.chat_template_kwargs)
        self.last_records: list[EpisodeRecord] = []
        self.reward_fn: RewardFn = reward_fn or record_reward

    # -------------------------------------------------------------- rollouts and rows

    def _make_envs(self, inputs: list[dict[str, Any]], split: str) -> list[gym.Env]:
        episode = dataclasses.replace(self.episode, split=split)
        # labelled: the targeted share (the cheap edit by content) is logged and drawn in the learning curve
        return [
            LabelEdits(episode.make_env(int(x["task_seed"]), family=x["family"], counter=self.counter)) for x in inputs
        ]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        args: CompactionGRPOConfig = self.args
        split = "train" if mode == "train" else "validation"
        with closing_envs(self._make_envs(inputs, split)) as envs, engine_awake(self):
            records = rollout(
                TRLGenerationPolicy(self),
                envs,
                [int(x["task_seed"]) for x in inputs],
                settings={"mode": mode, "step": self.state.global_step},
                any_active=self._any_active,
            )
        self.last_records = records
        rewards = [self.reward_fn(r, self.args.reward_config) for r in records]

        # One advantage per episode, normalised within its group of G (groups may span processes).
        local = torch.tensor([r["reward"] for r in rewards], dtype=torch.float32, device=device)
        G = self.num_generations if mode == "train" else self.num_generations_eval
        advantages = group_advantages(self.accelerator.gather(local), G, self.scale_rewards)
        start = self.accelerator.process_index * len(inputs)
        advantages = advantages[start : start + len(inputs)]

        rows: list[tuple[Segment, float]] = []
        stop_ids = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        for record, advantage in zip(records, advantages.tolist(), strict=True):
            calls = [(inv.prompt_ids, inv.completion_ids, inv.logprobs) for inv in record.invocations]
            # TRL's mask_truncated_completions: a turn cut off at max_completion_length is not trained
            trained = [not self.mask_truncated_completions or _ended(c, stop_ids) for _, c, _ in calls]
            rows.extend((s, advantage) for s in build_segments(calls, trained))
        # Episodes yield different numbers of rows on each process. Every process must run the same
        # number of forward passes (FSDP and ZeRO-3 gather parameters in each one, so a process with
        # fewer chunks would leave the others waiting), and TRL splits the batch into
        # steps_per_generation equal micro-batches: pad with empty rows (nothing trained) to a common
        # count that steps_per_generation divides.
        target = int(self.accelerator.gather(torch.tensor([len(rows)], device=device)).max().item())
        if mode == "train":
            target = -(-target // args.steps_per_generation) * args.steps_per_generation
        pad_id = self._tokenizer.pad_token_id
        rows += [(Segment([pad_id], [pad_id], [0], [0.0]), 0.0)] * (target - len(rows))
        batch = self._rows_to_tensors(rows, device)
        self._log_episode_metrics(mode, records, rewards, rows)
        self._log_trl_metrics(mode, records, self.accelerator.gather(local), G)
        return batch

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss, on the micro-batch without its padding (`trim_micro_batch`: the same loss). Every
        process keeps as many rows as the one that keeps most: TRL gathers per-row clip ratios."""
        most = 1
        if self.accelerator.num_processes > 1:
            rows = torch.tensor([trained_rows(inputs)], device=self.accelerator.device)
            most = int(self.accelerator.gather(rows).max())
        return super()._compute_loss(model, trim_micro_batch(inputs, self.pad_to_multiple_of, most))

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        """TRL's, one row at a time on the row's own tokens (`per_row_logps`): no dense attention mask."""
        forward = partial(super()._get_per_token_logps_and_entropies, model)
        return per_row_logps(forward, input_ids, attention_mask, logits_to_keep, **kwargs)

    def _log_trl_metrics(self, mode: str, records: list[EpisodeRecord], rewards: torch.Tensor, group: int) -> None:
        """The metrics TRL's own GRPO logs, over episodes (rewards) and model turns (completions)."""
        mean, std = rewards.mean().item(), rewards.std().item() if rewards.numel() > 1 else 0.0
        zero_std = (rewards.view(-1, group).std(dim=1) < 1e-6).float().mean().item()
        for key, value in (("reward", mean), ("reward_std", std), ("frac_reward_zero_std", zero_std)):
            log_metric(self, mode, key, value)
        log_metric(self, mode, "rewards/episode_reward_func/mean", mean)
        log_metric(self, mode, "rewards/episode_reward_func/std", std)
        stop_ids = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        turns = [(len(inv.prompt_ids), inv.completion_ids) for r in records for inv in r.invocations]
        local = [(p, len(c), not _ended(c, stop_ids)) for p, c in turns]
        gathered = gather_object(local)
        if mode == "train":
            self.state.num_input_tokens_seen += sum(p + n for p, n, _ in gathered)
        set_metric(self, mode, "num_tokens", self.state.num_input_tokens_seen)
        if not gathered:
            return
        lengths = [n for _, n, _ in gathered]
        ended = [n for _, n, cut in gathered if not cut] or [0]
        for name, values in (("", lengths), ("_terminated", ended)):
            log_metric(self, mode, f"completions/mean{name}_length", sum(values) / len(values))
            log_metric(self, mode, f"completions/min{name}_length", float(min(values)))
            log_metric(self, mode, f"completions/max{name}_length", float(max(values)))
        log_metric(self, mode, "completions/clipped_ratio", sum(cut for *_, cut in gathered) / len(gathered))

    def _any_active(self, local: bool) -> bool:
        if self.accelerator.num_processes == 1:
            return local
        flag = torch.tensor([int(local)], device=self.accelerator.device)
        return bool(self.accelerator.gather(flag).sum().item())

    def _rows_to_tensors(self, rows: list[tuple[Segment, float]], device: torch.device) -> dict[str, Any]:
        pad_id = self._tokenizer.pad_token_id

        def padded(seqs: list[list], value: float, side: str, dtype: torch.dtype = torch.long) -> torch.Tensor:
            tensors = [torch.tensor(x, dtype=dtype) for x in seqs]
            return pad(tensors, padding_value=value, padding_side=side, pad_to_multiple_of=self.pad_to_multiple_of).to(
                device
            )

        prompt_ids = padded([s.prompt_ids for s, _ in rows], pad_id, "left")
        prompt_mask = padded([[1] * len(s.prompt_ids) for s, _ in rows], 0, "left")
        completion_ids = padded([s.completion_ids for s, _ in rows], pad_id, "right")
        completion_mask = padded([[1] * len(s.completion_ids) for s, _ in rows], 0, "right")
        tool_mask = padded([s.mask for s, _ in rows], 0, "right")
        advantages = torch.tensor([a for _, a in rows], dtype=torch.float32, device=device)
        loss_mask = completion_mask * tool_mask
        output: dict[str, Any] = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "tool_mask": tool_mask,
            "advantages": advantages,
            # token-level normalisation over the whole generation batch, all processes
            "num_items_in_batch": self.accelerator.gather(loss_mask.sum()).sum(),
        }
        batch_size = (
            self.args.per_device_train_batch_size if self.model.training else self.args.per_device_eval_batch_size
        )
        # TRL's own context: no gradient checkpointing for these no-grad forwards
        kwargs = getattr(self.args, "activation_checkpointing_kwargs", self.args.gradient_checkpointing_kwargs)
        with torch.no_grad(), checkpointing_off(self.model, kwargs):
            generate_every = self.args.steps_per_generation * self.num_iterations
            multiple = self.pad_to_multiple_of
            if self.args.gradient_accumulation_steps % generate_every != 0 or self.use_vllm:
                output["old_per_token_logps"] = unpadded_logps(self._policy_logps, output, batch_size, multiple)
            if self.beta != 0.0:
                output["ref_per_token_logps"] = unpadded_logps(self._reference_logps, output, batch_size, multiple)
        if self.use_vllm and self.vllm_importance_sampling_correction:
            sampled = padded([s.logprobs for s, _ in rows], 0.0, "right", torch.float32)
            # a logprob vLLM could not give (NaN) gets a zero difference: ratio 1, as in TRL
            diff = torch.nan_to_num((output["old_per_token_logps"] - sampled) * loss_mask, nan=0.0)
            output["sampling_per_token_logps"] = torch.nan_to_num(sampled, nan=0.0)
            ratio = torch.exp(diff)
            output["importance_sampling_ratio"] = torch.clamp(
                ratio, min=self.vllm_importance_sampling_clip_min, max=self.vllm_importance_sampling_clip_max
            )
        return output

    def _policy_logps(self, input_ids, attention_mask, logits_to_keep, batch_size):
        return self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
        )[0]

    def _reference_logps(self, input_ids, attention_mask, logits_to_keep, batch_size):
        if self.ref_model is not None:
            return self._get_per_token_logps_and_entropies(
                self.ref_model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
            )[0]
        with reference_adapter(self.accelerator.unwrap_model(self.model)):
            return self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
            )[0]

    # -------------------------------------------------------------- logging

    def _log_episode_metrics(
        self,
        mode: str,
        records: list[EpisodeRecord],
        rewards: list[dict[str, float]],
        rows: list[tuple[Segment, float]],
    ) -> None:
        """The step's `EpisodeStats` over every process's episodes (success, cost and its parts, cache, context,
        edits and their shares, how episodes ended), and the mean of each reward term, under the names the eval
        table uses. A share is logged only at steps whose episodes applied a model edit."""
        gathered = gather_object([(record.summary, reward) for record, reward in zip(records, rewards, strict=True)])
        for key in gathered[0][1] if gathered else []:
            log_metric(self, mode, f"reward/{key}", sum(reward[key] for _, reward in gathered) / len(gathered))
        if gathered:
            for key, value in episode_metrics(EpisodeStats.of([summary for summary, _ in gathered])).items():
                log_metric(self, mode, key, value)
        trained = sum(s.trained_tokens for s, _ in rows)
        log_metric(
            self, mode, "segments_per_episode", len([r for r in rows if r[0].trained_tokens]) / max(1, len(records))
        )
        log_metric(self, mode, "trained_tokens", float(trained))
        if mode == "train" and self.accelerator.is_main_process and self.args.log_episodes:
            self._log_episode_table(records[: self.args.log_episodes], rewards[: self.args.log_episodes])

    def _log_episode_table(self, records: list[EpisodeRecord], rewards: list[dict[str, float]]) -> None:
        """A W&B table of sample episodes: evolve code and the State before and after each edit."""
        if "wandb" not in (self.args.report_to or []):
            return
        import wandb

        if wandb.run is None:
            return
        table = wandb.Table(
            columns=[
                "step",
                "family",
                "task_seed",
                "reward",
                "score",
                "edit",
                "evolve_code",
                "state_before",
                "state_after",
            ]
        )
        for record, reward in zip(records, rewards, strict=True):
            score, versions = record.summary.score, record.state_versions
            edits = [(versions[i - 1], v) for i, v in enumerate(versions) if i and v["reason"] == "evolve"]
            for k, (before, after) in enumerate(edits or [(versions[0], versions[-1])]):
                table.add_data(
                    self.state.global_step,
                    record.family,
                    record.task_seed,
                    reward["reward"],
                    score,
                    k if edits else -1,
                    after.get("code", ""),
                    json.dumps(before["state"], ensure_ascii=False)[:20_000],
                    json.dumps(after["state"], ensure_ascii=False)[:20_000],
                )
        wandb.log({"episodes": table}, commit=False)
