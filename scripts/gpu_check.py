"""GPU check: the GPU paths measured in one short run, on randomly initialised models of real shapes.

No weights and no hub: the model shapes are configs written in the repo
(configs/models/qwen2.5-0.5b.json, qwen2.5-1.5b.json) and the tokenizer is the tiny byte-level
BPE with a Qwen2.5-style ChatML template that `rl_compaction.models.tiny` builds offline in a second.
The embedding keeps the real vocabulary (151936 rows), so the LM head costs what it costs;
ids the tokenizer does not know decode to nothing, which is what a random model's text is worth.

Per shape, on CUDA in bf16 (the order is the priority: a time budget skips what is left):
(a) rollouts: G episodes of one long-horizon task (`research`) through `TransformersPolicy`,
    in lockstep, from a context of 8k and 32k tokens (the task's oracle plays until the
    context holds that many tokens: a random model could never get there; its turns do not
    count against the model's `max_turns`);
(b) GRPO steps through the real trainer (`CompactionGRPOTrainer`, TRL's transformers
    generation), LoRA and full fine-tuning, activation checkpointing on, episodes starting
    from an 8k-token context;
(c) SFT steps (`rl_compaction.training.sft.build_trainer`) on oracle demonstrations;
(d) where vllm is installed (`[vllm]`): the same rollouts through `VLLMPolicy` (in-process engine,
    prefix caching on), and GRPO steps with `use_vllm` in colocate mode, full fine-tuning, so every
    step after the first syncs the weights into the engine (timed apart as `sync_weights`).
Each phase records generated tokens/s, step time, peak GPU memory and the share of the time
spent outside the model (env, sandbox, accounting, prompt rendering, parsing, rows); each training
phase also its tokens per optimizer step and MFU (`MFU_FORMULA`). The JSON file is rewritten after
every phase, so a run stopped early keeps what it measured. The check runs on the lent machine's
own transformers (5.17) as on ours (>= 5.23): see `checkpointing_on`.

`--dry-run` runs the same phases on CPU at toy sizes (2-layer shrink of each shape, its
vocabulary cut to the tokenizer's, short contexts, float32), so CI keeps the script working:
every shape is built and rolled out, and the training phases (the same code for every shape)
run on the first shape, which keeps the rehearsal well under a minute and a half on two cores.

    scripts/gpu_check.sh [--dry-run] [--out runs/gpu_check.json] [--budget-s 360] [--shapes qwen2.5-0.5b,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback

REPO = Path(__file__).resolve().parents[1]
SHAPES_DIR = REPO / "configs" / "models"
SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b")
FAMILY = "research"  # a long-horizon family: its oracle reaches 32k tokens in about 8 turns
LORA = {"lora_r": 32, "lora_alpha": 64, "lora_dropout": 0.0, "lora_target_modules": ["all-linear"]}


@dataclass(frozen=True)
class Plan:
    """Sizes of one run: the device run's, or the dry run's toy ones."""

    contexts: tuple[int, ...]
    group_size: int
    new_tokens: int
    rollout_turns: int
    grpo_context: int
    grpo_steps: int
    grpo_turns: int
    sft_context: int
    sft_steps: int
    difficulty_scale: float


DEVICE_PLAN = Plan(
    contexts=(8192, 32768),
    group_size=8,
    new_tokens=64,
    rollout_turns=2,
    grpo_context=8192,
    grpo_steps=3,
    grpo_turns=2,
    sft_context=8192,
    sft_steps=4,
    difficulty_scale=1.0,
)
#: CPU sizes that keep the dry run of one shape well under a minute on two busy cores. The contexts
#: lie above the task's first prompt (2469 tokens with the check's tokenizer), so the oracle plays
#: two turns (to 4119 tokens) before the model's first, as it plays 2 and 8 on the device (to 12163
#: and 34545 tokens); tests/test_gpu_check.py checks both plans' prefill.
DRY_PLAN = Plan(
    contexts=(4096,),
    group_size=2,
    new_tokens=4,
    rollout_turns=2,
    grpo_context=4096,
    grpo_steps=1,
    grpo_turns=1,
    sft_context=1536,
    sft_steps=2,
    difficulty_scale=0.1,
)
#: The dry run's shrink of every shape (vocabulary: the tokenizer's); 2 heads give head_dim 32, the
#: smallest vLLM's CPU attention takes (16 is refused), so the vLLM phases rehearse on CPU too.
TOY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}


# --------------------------------------------------------------------------- timing


class Timers:
    """Seconds per phase name; on CUDA each interval ends with a synchronize, so kernels count.
    `count` holds running totals of other quantities (tokens), read per step like the times."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.total: dict[str, float] = defaultdict(float)
        self.count: dict[str, float] = defaultdict(float)
        self.open: list[str] = []  # the spans running now, outermost first

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = self.now()
        self.open.append(name)
        try:
            yield
        finally:
            self.open.pop()
            self.total[name] += self.now() - start

    def wrap(self, name: str | Callable[[], str], fn: Callable) -> Callable:
        """`fn` timed under `name` (or under the name `name()` gives at each call)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(name if isinstance(name, str) else name()):
                return fn(*args, **kwargs)

        return timed


class StepTimes(TrainerCallback):
    """Wall time of each optimizer step, what the timers and counts gained during it, and the
    trainer's own figures for it (`LOGGED`, from the log written after the step)."""

    LOGGED = ("trained_tokens", "segments_per_episode", "num_tokens")

    def __init__(self, timers: Timers):
        self.timers, self.steps = timers, []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = self.timers.now()
        self._before, self._counted = dict(self.timers.total), dict(self.timers.count)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = {"step_s": self.timers.now() - self._start}
        for name, total in self.timers.total.items():
            step[name] = total - self._before.get(name, 0.0)
        for name, total in self.timers.count.items():
            step[f"count/{name}"] = total - self._counted.get(name, 0.0)
        self.steps.append(step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # logging_steps=1: the log after step n holds step n's metrics (TRL averages them per log)
        if self.steps and logs:
            self.steps[-1].update({f"log/{k}": float(logs[k]) for k in self.LOGGED if k in logs})


def measured(steps: list[dict[str, float]]) -> list[dict[str, float]]:
    """The steps after the first (it pays for warm-up: kernels, allocator, caches)."""
    return steps[1:] or steps


def peak_memory_gib(cuda: bool) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def reset_memory(cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


#: Dense bf16 tensor-core peak in TFLOP/s (NVIDIA's data sheets; the sheets' larger figures are with
#: 2:4 sparsity), by a part of the name `torch.cuda.get_device_name` gives, first match wins:
#: H100 SXM ("NVIDIA H100 80GB HBM3") and H200 989, the NVL cards 835, H100 PCIe 756.
PEAK_BF16_TFLOPS = (("NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0))
MFU_FORMULA = (
    "mfu = 6 * model_params * tokens_per_step / step_s / (peak_bf16_tflops * 1e12); tokens_per_step: the tokens "
    "the training forward and backward run through in one optimizer step (every row's prompt and completion, "
    "padding left out); model_params: all parameters, the tied embedding once (it is the LM head's matmul); "
    "6N per token counts neither attention's context-length term nor the recomputation of activation "
    "checkpointing, and with LoRA the frozen weights get no weight gradients (about 4N is done): a convention, "
    "comparable between runs, not the work done"
)


def peak_bf16_tflops(device_name: str | None) -> float | None:
    """The card's dense bf16 peak, or None for a card (or CPU) not in `PEAK_BF16_TFLOPS`."""
    for part, tflops in PEAK_BF16_TFLOPS:
        if device_name and part in device_name:
            return tflops
    return None


def throughput(steps: list[dict[str, float]], step_s: list[float], params: int, cuda: bool) -> dict[str, Any]:
    """Tokens per optimizer step (counted from the loss's inputs, and the trainer's logged
    `trained_tokens` where it logs them) and the MFU they give (`MFU_FORMULA`)."""
    tokens = [s.get("count/tokens", 0.0) for s in steps]
    logged = [s["log/trained_tokens"] for s in steps if "log/trained_tokens" in s]
    counted = [s["count/trained_tokens"] for s in steps if "count/trained_tokens" in s]
    from_log = bool(logged) and len(logged) == len(steps)
    trained = logged if from_log else counted
    device_name = torch.cuda.get_device_name(0) if cuda else None
    peak = peak_bf16_tflops(device_name)
    mfu = [6 * params * t / s / (peak * 1e12) for t, s in zip(tokens, step_s, strict=True)] if peak else None
    return {
        "model_params": params,
        "tokens_per_step": statistics.median(tokens),
        "tokens_each": tokens,
        "trained_tokens_per_step": statistics.median(trained) if trained else None,
        "trained_tokens_from": "trainer log" if from_log else "counted",
        "tokens_per_s": statistics.median(t / s for t, s in zip(tokens, step_s, strict=True)),
        "peak_bf16_tflops": peak,
        "mfu": statistics.median(mfu) if mfu else None,
        "mfu_each": [round(m, 5) for m in mfu] if mfu else None,
    }


def checkpointing_on(config_cls: type) -> dict[str, bool]:
    """Activation checkpointing on, under the name the installed transformers' TrainingArguments
    takes: `activation_checkpointing` from 5.23, `gradient_checkpointing` before it (the lent GPU
    machine has 5.17, where the new name is an unknown argument)."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": True}


def checkpointing_is_on(args: Any) -> bool:
    return bool(getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", None))


# --------------------------------------------------------------------------- model and envs


def shape_config(name: str, tokenizer: Any, dry_run: bool) -> Any:
    """The transformers config of shape `name` from configs/models, with the tokenizer's special ids."""
    fields = json.loads((SHAPES_DIR / f"{name}.json").read_text(encoding="utf-8"))
    model_type = fields.pop("model_type")
    fields.pop("architectures", None)
    fields.pop("torch_dtype", None)
    if dry_run:
        fields.update(TOY, vocab_size=len(tokenizer))
    config = AutoConfig.for_model(model_type, **fields)
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    return config


def save_random_model(name: str, folder: Path, dry_run: bool, device: str, dtype: torch.dtype) -> dict[str, Any]:
    """A random model of shape `name` with the tiny tokenizer, saved as a model folder that the
    project's loaders (`load_pretrained`, the trainers) read like any local model."""
    from rl_compaction.models.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(folder, "chatml")
    config = shape_config(name, tokenizer, dry_run)
    torch.manual_seed(0)
    with torch.device(device):  # random init on the GPU takes a second; on 16 CPU cores it takes many
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    del model
    return {
        "params": params,
        "vocab_size": config.vocab_size,
        "tokenizer_vocab": len(tokenizer),
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
    }


#: more oracle turns than any prefill takes (research reaches 32768 tokens in 8): a loop guard
PREFILL_MAX_TURNS = 200


def prefilled_env_class() -> type:
    """`CompactionEnv` whose reset() lets the task's oracle play until the context holds
    `prefill_tokens`. The oracle's turns are the check's set-up, not the model's: they run under
    the turn and output-token limits lifted, and the model then starts with its whole budget
    (turn 0 of `max_turns`, no output tokens spent, the wall clock restarted)."""
    from rl_compaction.harness.env import CompactionEnv
    from rl_compaction.harness.oracle import OraclePolicy

    class PrefilledEnv(CompactionEnv):
        def __init__(self, *args: Any, prefill_tokens: int, timers: Timers, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.prefill_tokens, self.timers = prefill_tokens, timers
            self.prefill_turns = 0

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
            with self.timers.span("oracle_prefill"):
                obs, info = super().reset(seed=seed, options=options)
                oracle = OraclePolicy(self.task.oracle(), self)
                tokens, turns, budget = info["input_tokens"], 0, self.config
                self.config = dataclasses.replace(budget, max_turns=PREFILL_MAX_TURNS, max_output_tokens=2**62)
                try:
                    while tokens < self.prefill_tokens:
                        if turns == PREFILL_MAX_TURNS:
                            raise RuntimeError(f"the oracle took {turns} turns and reached {tokens} tokens")
                        obs, _, terminated, truncated, step_info = self.step(oracle.act(obs))
                        turns += 1
                        if terminated or truncated:
                            why = "it ended" if terminated else step_info.get("truncated_reason")
                            raise RuntimeError(
                                f"the oracle's episode stopped ({why}) at {tokens} tokens, before"
                                f" {self.prefill_tokens}, after {turns} oracle turns"
                            )
                        tokens = step_info["input_tokens"]
                finally:
                    self.config = budget
                self.turn, self.output_tokens, self.started = 0, 0, time.monotonic()
                self.prefill_turns = turns
                return obs, {**info, "input_tokens": tokens, "prefill_turns": turns}

        def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
            with self.timers.span("env_step"):
                return super().step(action)

    return PrefilledEnv


def env_config(plan: Plan, context: int, turns: int) -> Any:
    from rl_compaction.harness.env import EnvConfig

    window = context * 2 + 4096  # the oracle's last page may overshoot the target; no episode hits the window
    return EnvConfig(context_window=window, compaction_threshold=window, max_turns=turns)


def make_envs(
    plan: Plan, context: int, turns: int, counter: Any, timers: Timers, n: int, split: str = "test"
) -> list[Any]:
    """The rollout phase's `n` envs of `FAMILY` at the plan's difficulty, each starting (at reset)
    from a `context`-token State with `turns` model turns ahead."""
    from rl_compaction.harness.tasks import Difficulty

    env_cls = prefilled_env_class()
    return [
        env_cls(
            FAMILY,
            split=split,
            difficulty=Difficulty(plan.difficulty_scale, 2),
            config=env_config(plan, context, turns),
            counter=counter,
            prefill_tokens=context,
            timers=timers,
        )
        for _ in range(n)
    ]


# --------------------------------------------------------------------------- phases


def rollout_phase(
    folder: Path, plan: Plan, context: int, device: str, dtype: torch.dtype, backend: str = "transformers"
) -> dict[str, Any]:
    """(a) G lockstep episodes through TransformersPolicy from a `context`-token State; (d) the same
    through VLLMPolicy with `backend="vllm"`."""
    from rl_compaction.accounting import ChatTemplateCounter
    from rl_compaction.models.registry import load_pretrained
    from rl_compaction.policies.local import TransformersPolicy

    cuda = device == "cuda"
    timers = Timers(cuda)
    if backend == "vllm":
        from rl_compaction.policies.vllm import VLLMPolicy

        window = env_config(plan, context, plan.rollout_turns).context_window
        engine = {"dtype": str(dtype).removeprefix("torch."), "max_model_len": window + plan.new_tokens, "seed": 0}
        engine.update({"gpu_memory_utilization": 0.5} if cuda else {"enforce_eager": True})
        if not cuda:  # vLLM's CPU KV cache, in GiB (its default takes a large share of memory)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # the 32k context's window passes the shapes' max_position_embeddings (32768), which vLLM
        # refuses unless told; a random model's positions past it cost the same
        os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
        policy = VLLMPolicy(str(folder), max_new_tokens=plan.new_tokens, engine_kwargs=engine)
        policy.engine.generate = timers.wrap("generate", policy.engine.generate)
        tokenizer = policy.tokenizer
    else:
        model, tokenizer = load_pretrained(str(folder), dtype=dtype)
        policy = TransformersPolicy(
            model, tokenizer, max_new_tokens=plan.new_tokens, max_batch_size=plan.group_size, device=device
        )
        policy.model.generate = timers.wrap("generate", policy.model.generate)
        policy._shared_prefix = timers.wrap("generate", policy._shared_prefix)  # the model prefilling a shared start
    counter = ChatTemplateCounter(tokenizer)
    envs = make_envs(plan, context, plan.rollout_turns, counter, timers, plan.group_size)
    observations = [env.reset(seed=0)[0] for env in envs]
    prompt_tokens = counter.count(envs[0].instructions, envs[0].tools, observations[0]["state"])
    reset_memory(cuda)
    generated, turn_times = 0, []
    for _ in range(plan.rollout_turns):
        start, before = timers.now(), timers.total["generate"]
        turns = policy.act(observations)
        for i, (env, turn) in enumerate(zip(envs, turns, strict=True)):
            observations[i] = env.step(turn.as_action())[0]
            generated += len(turn.completion_ids or [])
        turn_times.append({"turn_s": timers.now() - start, "generate_s": timers.total["generate"] - before})
    total = sum(t["turn_s"] for t in turn_times)
    model_s = sum(t["generate_s"] for t in turn_times)
    result = {
        "backend": backend,
        "context_tokens": context,
        "prompt_tokens": prompt_tokens,
        "group_size": plan.group_size,
        "turns": plan.rollout_turns,
        "max_new_tokens": plan.new_tokens,
        "generated_tokens": generated,
        "generated_tokens_per_s": generated / model_s,
        "turn_s": [round(t["turn_s"], 4) for t in turn_times],
        "generate_s": model_s,
        "outside_model_s": total - model_s,
        "outside_model_share": (total - model_s) / total,
        "oracle_prefill_s": timers.total["oracle_prefill"],
        "prefill_turns": envs[0].prefill_turns,
        "peak_gpu_memory_gib": peak_memory_gib(cuda),
    }
    if backend == "vllm":  # the last turn's prompt tokens the engine served from its prefix cache
        result["last_turn_cached_tokens"] = [t.usage["cached_tokens"] for t in turns]
        del policy  # one engine at a time
        gc.collect()
    return result


def grpo_phase(folder: Path, plan: Plan, mode: str, device: str, dry_run: bool, out_dir: Path) -> dict[str, Any]:
    """(b) optimizer steps of CompactionGRPOTrainer: one group of G episodes per step."""
    from trl import ModelConfig, get_peft_config

    from rl_compaction.models.registry import load_pretrained
    from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer

    cuda = device == "cuda"
    timers = Timers(cuda)
    env_cls = prefilled_env_class()

    class CheckTrainer(CompactionGRPOTrainer):
        """The real trainer; its episodes start from a `grpo_context`-token State."""

        def _make_envs(self, inputs: list[dict[str, Any]], split: str) -> list[Any]:
            specs = [self.episode.sample(int(x["task_seed"]), x["family"]) for x in inputs]
            return [
                env_cls(
                    spec.family,
                    split=split,
                    difficulty=spec.difficulty,
                    config=spec.env_config(),
                    counter=self.counter,
                    prefill_tokens=plan.grpo_context,
                    timers=timers,
                )
                for spec in specs
            ]

    args = CompactionGRPOConfig(**grpo_config_kwargs(plan, mode, out_dir, dry_run, CompactionGRPOConfig))
    model_args = ModelConfig(
        model_name_or_path=str(folder), use_peft=mode == "lora", **(LORA if mode == "lora" else {})
    )
    model, tokenizer = load_pretrained(str(folder), dtype=torch.float32 if dry_run else torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())  # before LoRA adds its adapters
    step_times = StepTimes(timers)
    trainer = CheckTrainer(
        model,
        args,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[step_times],
        episode=grpo_episode(plan),
    )
    trainer._generate_single_turn = timers.wrap("generate", trainer._generate_single_turn)
    if mode == "vllm_colocate":  # inside generate: the weights pushed into the engine after a step
        generation = trainer.vllm_generation
        generation.sync_weights = timers.wrap("sync_weights", generation.sync_weights)

    # Log-prob forwards while rows are built (old policy, reference) vs. those of the loss itself.
    def logps_name() -> str:
        return "rows_logps" if "generate_and_score" in timers.open else "loss_logps"

    trainer._get_per_token_logps_and_entropies = timers.wrap(logps_name, trainer._get_per_token_logps_and_entropies)
    trainer._generate_and_score_completions = timers.wrap("generate_and_score", trainer._generate_and_score_completions)

    # The tokens each micro-batch of the loss runs through (TRL's _compute_loss gets the rows'
    # prompt and completion masks), and those in the loss (completion tokens the model wrote).
    def count_loss_tokens(inputs: dict[str, Any]) -> None:
        completion = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        timers.count["tokens"] += float(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        timers.count["trained_tokens"] += float(completion.sum())

    trainer._compute_loss = counting(count_loss_tokens, trainer._compute_loss)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    reset_memory(cuda)
    trainer.train()
    rows = trainer.last_records
    steps = measured(step_times.steps)
    step_s = [s["step_s"] - s.get("oracle_prefill", 0.0) for s in steps]
    # Outside the model: generate-and-score less the model's generation and log-prob forwards, less
    # the oracle's warm start (the check's artefact). Loss, backward and optimizer are the model's.
    outside = [
        s.get("generate_and_score", 0.0)
        - s.get("generate", 0.0)
        - s.get("rows_logps", 0.0)
        - s.get("oracle_prefill", 0.0)
        for s in steps
    ]
    generated = sum(len(inv.completion_ids or []) for r in rows for inv in r.invocations)
    result = {
        "mode": mode,
        "activation_checkpointing": checkpointing_is_on(args),
        "trainable_params": trainable,
        "context_tokens": plan.grpo_context,
        "episodes_per_step": plan.group_size,
        "turns_per_episode": plan.grpo_turns,
        "max_completion_length": plan.new_tokens,
        "steps": len(step_times.steps),
        "measured_steps": len(steps),
        "step_s": statistics.median(step_s),
        "step_s_each": [round(s, 4) for s in step_s],
        "generate_s": statistics.median(s.get("generate", 0.0) for s in steps),
        "sync_weights_s": statistics.median(s.get("sync_weights", 0.0) for s in steps),
        "generated_tokens_last_step": generated,
        "generated_tokens_per_s": generated / steps[-1]["generate"] if steps[-1].get("generate") else None,
        "outside_model_s": statistics.median(outside),
        "outside_model_share": statistics.median(o / s for o, s in zip(outside, step_s, strict=True)),
        "oracle_prefill_s": statistics.median(s.get("oracle_prefill", 0.0) for s in steps),
        "peak_gpu_memory_gib": peak_memory_gib(cuda),
        "loss": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        **throughput(steps, step_s, params, cuda),
    }
    del trainer, model
    return result


def counting(count: Callable[[dict[str, Any]], None], fn: Callable) -> Callable:
    """`fn(model, inputs, ...)` that first counts what `inputs` holds."""

    def counted(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        count(inputs)
        return fn(model, inputs, *args, **kwargs)

    return counted


def grpo_episode(plan: Plan) -> Any:
    """The GRPO phase's EpisodeSpec: the plan's family, length, window and turns."""
    from rl_compaction.harness.spec import EpisodeSpec

    cfg = env_config(plan, plan.grpo_context, plan.grpo_turns)
    return EpisodeSpec(
        family=FAMILY,
        scale=plan.difficulty_scale,
        level=2,
        context_window=cfg.context_window,
        compaction_threshold=cfg.compaction_threshold,
        max_turns=plan.grpo_turns,
    )


def grpo_config_kwargs(plan: Plan, mode: str, out_dir: Path, dry_run: bool, config_cls: type) -> dict[str, Any]:
    """The GRPO phase's CompactionGRPOConfig arguments (`config_cls` names activation checkpointing)."""
    cfg = env_config(plan, plan.grpo_context, plan.grpo_turns)
    vllm = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_max_model_length": cfg.context_window + plan.new_tokens,
        "vllm_importance_sampling_mode": "token_truncate",
    }
    return {
        "output_dir": str(out_dir),
        "train_tasks": 4 * plan.grpo_steps,
        "num_generations": plan.group_size,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": plan.group_size,
        "max_completion_length": plan.new_tokens,
        "learning_rate": 1e-5,
        "loss_type": "dapo",
        "beta": 0.0,
        "max_steps": plan.grpo_steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "log_episodes": 0,
        "bf16": not dry_run,
        "use_cpu": dry_run,
        **checkpointing_on(config_cls),
        "seed": 0,
        **(vllm if mode == "vllm_colocate" else {}),
    }


def sft_config_kwargs(plan: Plan, work: Path, dry_run: bool, config_cls: type) -> dict[str, Any]:
    """The SFT phase's SFTConfig arguments (`config_cls` names activation checkpointing)."""
    return {
        "output_dir": str(work / "sft"),
        "max_length": plan.sft_context + 1024,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 1,
        "learning_rate": 1e-5,
        "max_steps": plan.sft_steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "bf16": not dry_run,
        "use_cpu": dry_run,
        **checkpointing_on(config_cls),
        "seed": 0,
    }


def sft_phase(folder: Path, plan: Plan, device: str, dry_run: bool, work: Path) -> dict[str, Any]:
    """(c) SFT steps on oracle demonstrations (full fine-tuning, activation checkpointing on)."""
    from trl import ModelConfig, SFTConfig

    from rl_compaction.harness.spec import EpisodeSpec
    from rl_compaction.training.demos import write_demos
    from rl_compaction.training.sft import SFTScriptArguments, build_trainer

    cuda = device == "cuda"
    timers = Timers(cuda)
    demos = work / "demos"
    episode = EpisodeSpec(
        family=FAMILY, scale=plan.difficulty_scale, context_window=plan.sft_context, tokenizer=f"hf:{folder}"
    )
    write_demos(demos, episode, 1, ["none"], keep_failed=["none"])
    args = SFTConfig(**sft_config_kwargs(plan, work, dry_run, SFTConfig))
    model_args = ModelConfig(model_name_or_path=str(folder), dtype="float32" if dry_run else "bfloat16")
    trainer = build_trainer(SFTScriptArguments(dataset_dir=str(demos)), args, model_args)
    step_times = StepTimes(timers)
    trainer.add_callback(step_times)
    params = sum(p.numel() for p in trainer.model.parameters())
    lengths = [len(r["input_ids"]) for r in trainer.train_dataset]

    # The tokens each micro-batch runs through (padding-free batches have no attention mask), and
    # those with a label (in the loss).
    def count_loss_tokens(inputs: dict[str, Any]) -> None:
        mask = inputs.get("attention_mask")
        timers.count["tokens"] += float(mask.sum() if mask is not None else inputs["input_ids"].numel())
        if inputs.get("labels") is not None:
            timers.count["trained_tokens"] += float((inputs["labels"] != -100).sum())

    trainer.compute_loss = counting(count_loss_tokens, trainer.compute_loss)
    reset_memory(cuda)
    trainer.train()
    steps = measured(step_times.steps)
    step_s = [s["step_s"] for s in steps]
    result = {
        "activation_checkpointing": checkpointing_is_on(args),
        "rows": len(lengths),
        "row_tokens_mean": statistics.mean(lengths),
        "row_tokens_max": max(lengths),
        "steps": len(step_times.steps),
        "step_s": statistics.median(step_s),
        "step_s_each": [round(s["step_s"], 4) for s in step_times.steps],
        "peak_gpu_memory_gib": peak_memory_gib(cuda),
        "loss": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        **throughput(steps, step_s, params, cuda),
    }
    del trainer
    return result


# --------------------------------------------------------------------------- driver


#: why the vLLM phases cannot run on the lent GPU machine (configs/README.md, "GPU check")
VLLM_CANNOT_TRAVEL = (
    "vllm is not installed (the [vllm] extra); it cannot be carried to the lent GPU machine, whose image has no "
    "vLLM: the vllm 0.30.0 wheel alone is 315 MB against the 64 MiB that travels with a run"
)


def environment(device: str) -> dict[str, Any]:
    import accelerate
    import datasets
    import huggingface_hub
    import peft
    import pyarrow
    import transformers
    import trl

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "peft": peft.__version__,
        "accelerate": accelerate.__version__,
        "huggingface_hub": huggingface_hub.__version__,
        "datasets": datasets.__version__,
        "pyarrow": pyarrow.__version__,
        "vllm": importlib.util.find_spec("vllm") is not None,
        "device": device,
        "cpu_count": os.cpu_count(),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    return info


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def run(shapes: list[str], out: Path, dry_run: bool, budget_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run for the CPU rehearsal")
    device = "cpu" if dry_run else "cuda"
    dtype = torch.float32 if dry_run else torch.bfloat16
    plan = DRY_PLAN if dry_run else DEVICE_PLAN
    report: dict[str, Any] = {
        "dry_run": dry_run,
        "plan": asdict(plan),
        "family": FAMILY,
        "environment": environment(device),
        "mfu_formula": MFU_FORMULA,
        "shapes": {},
        "errors": [],
        "skipped": [],
    }

    def phase(shape: str, name: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Run one phase; a failure or the time budget is recorded and the next phase runs."""
        elapsed = time.perf_counter() - started
        if elapsed > budget_s:
            report["skipped"].append(f"{shape}/{name}: time budget of {budget_s:g} s spent ({elapsed:.0f} s)")
        else:
            print(f"[gpu_check] {shape} {name} ...", file=sys.stderr, flush=True)
            t = time.perf_counter()
            try:
                result = fn()
                result["phase_wall_s"] = time.perf_counter() - t
                report["shapes"][shape].setdefault("phases", {})[name] = result
                print(f"[gpu_check] {shape} {name}: {json.dumps(headline(result))}", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - one failed phase must not cost the others' figures
                report["errors"].append(
                    {
                        "phase": f"{shape}/{name}",
                        "error": f"{type(e).__name__}: {e}",
                        "traceback": traceback.format_exc(),
                    }
                )
                print(f"[gpu_check] {shape} {name} FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            reset_memory(device == "cuda")
        report["wall_s"] = time.perf_counter() - started
        write_json(out, report)

    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = Path(tmp)
        for shape in shapes:
            folder = work / shape
            report["shapes"][shape] = {}
            phase(shape, "model", partial(save_random_model, shape, folder, dry_run, device, dtype))
            if "model" not in report["shapes"][shape].get("phases", {}):
                report["skipped"].append(f"{shape}/*: no model")
                continue
            for context in plan.contexts:
                phase(shape, f"rollout_{context}", partial(rollout_phase, folder, plan, context, device, dtype))
            if dry_run and shape != shapes[0]:  # the training phases' code is the same for every shape
                report["skipped"].append(f"{shape}/grpo, sft: the dry run trains the first shape only")
                continue
            for mode in ("lora", "full"):
                phase(shape, f"grpo_{mode}", partial(grpo_phase, folder, plan, mode, device, dry_run, work / mode))
            phase(shape, "sft", partial(sft_phase, folder, plan, device, dry_run, work / f"sft_{shape}"))
            if importlib.util.find_spec("vllm") is None:
                report["skipped"].append(f"{shape}/vllm_*: {VLLM_CANNOT_TRAVEL}")
                continue
            for context in plan.contexts:
                rollout = partial(rollout_phase, folder, plan, context, device, dtype, "vllm")
                phase(shape, f"vllm_rollout_{context}", rollout)
            mode = "vllm_colocate"
            phase(shape, f"grpo_{mode}", partial(grpo_phase, folder, plan, mode, device, dry_run, work / mode))
    report["wall_s"] = time.perf_counter() - started
    write_json(out, report)
    return report


def headline(result: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "params",
        "prefill_turns",
        "generated_tokens_per_s",
        "step_s",
        "tokens_per_step",
        "mfu",
        "peak_gpu_memory_gib",
        "outside_model_share",
    )
    return {k: round(result[k], 4) if isinstance(result[k], float) else result[k] for k in keys if k in result}


#: the report's default path: under runs/, which git ignores, so a dry run leaves the working tree clean
DEFAULT_OUT = Path("runs") / "gpu_check.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, toy sizes: the CI rehearsal of the same code")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON report (default {DEFAULT_OUT})")
    parser.add_argument("--budget-s", type=float, default=360.0, help="start no phase after this many seconds")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, from {', '.join(SHAPES)}")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        parser.error(f"unknown shapes {unknown}; choose from {', '.join(SHAPES)}")
    report = run(shapes, args.out, args.dry_run, args.budget_s)
    summary = {s: {p: headline(r) for p, r in v.get("phases", {}).items()} for s, v in report["shapes"].items()}
    print(json.dumps(summary, indent=1))
    print(f"[gpu_check] wrote {args.out} in {report['wall_s']:.0f} s; {len(report['errors'])} phase(s) failed")
    if report["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
