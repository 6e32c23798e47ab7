"""Benchmark: lockstep batched rollouts against the same episodes one at a time, on the tiny model.

G episodes of one task (`probe`, the trainer's default family) run through `TransformersPolicy`
on CPU, greedy, so both runs make the same turns: once in lockstep (one batched `generate` per
turn for all running episodes, as `rollout` and the trainer do) and once sequentially (batch 1,
episode after episode). Side by side in one run; the speed-up is sequential / lockstep wall time.
Each run is split into the model's work (`generate`, and the policy's prefill of a batch's shared
start) and everything else (prompt rendering and
tokenisation, completion parsing, env steps with their accounting), because only the first part
can gain from batching. The plain prefill of the first turn's prompts (one forward pass, no cache)
is timed batched and one by one as well: batching alone does not shrink its work, only the
per-step overhead of decoding; the policy's shared-start prefill does (rl_compaction.policies.local).

    python scripts/bench_rollout.py [--group-size 8] [--max-new-tokens 32] [--turns 4]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.rollout import rollout
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.registry import load_pretrained
from rl_compaction.policies.local import TransformersPolicy

FAMILY = "probe"


def run(policy: TransformersPolicy, args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """Wall time of G episodes with `batch` of them generated together, and its split."""
    spent = {"generate": 0.0}
    # The model's work: generate, and the prefill of a batch's shared start that precedes it.
    originals = {"generate": policy.model.generate, "prefix": policy._shared_prefix}

    def timed(fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent["generate"] += time.perf_counter() - start

        return call

    policy.model.generate = timed(originals["generate"])
    policy._shared_prefix = timed(originals["prefix"])
    config = EnvConfig(context_window=16_384, max_turns=args.turns, tokenizer="o200k_base")

    def make_env() -> CompactionEnv:
        return CompactionEnv(FAMILY, split="test", difficulty=Difficulty(0.1, 1), config=config, counter=args.counter)

    start = time.perf_counter()
    try:
        if batch > 1:
            records = rollout(policy, [make_env() for _ in range(args.group_size)], [0] * args.group_size)
        else:
            records = [rollout(policy, [make_env()], [0])[0] for _ in range(args.group_size)]
    finally:
        del policy.model.generate, policy._shared_prefix
    wall = time.perf_counter() - start
    turns = sum(len(r.invocations) for r in records)
    tokens = sum(len(inv.completion_ids or []) for r in records for inv in r.invocations)
    other = wall - spent["generate"]
    return {
        "wall": wall,
        "generate": spent["generate"],
        "other": other,
        "turns": turns,
        "tokens": tokens,
        "first_prompts": [r.invocations[0].prompt_ids for r in records],
    }


@torch.no_grad()
def prefill_s(model: Any, prompts: list[list[int]], batch: int) -> float:
    """Seconds of one forward pass over `prompts` (equal lengths), `batch` at a time."""
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        model(input_ids=torch.tensor(prompts[i : i + batch]), logits_to_keep=1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4, help="model turns per episode")
    args = parser.parse_args()
    model, tokenizer = load_pretrained("tiny")
    from rl_compaction.accounting import ChatTemplateCounter

    args.counter = ChatTemplateCounter(tokenizer)  # the trainer's choice: the model's own template
    policy = TransformersPolicy(
        model, tokenizer, max_new_tokens=args.max_new_tokens, do_sample=False, max_batch_size=args.group_size
    )
    run(policy, args, args.group_size)  # warm-up: kernels, caches
    lockstep = run(policy, args, args.group_size)
    sequential = run(policy, args, 1)
    assert lockstep["tokens"] == sequential["tokens"], "greedy runs must make the same turns"
    print(f"G={args.group_size}, {lockstep['turns']} turns, {lockstep['tokens']} generated tokens in each run")
    print(f"{'':<11} {'wall s':>8} {'generate s':>11} {'other s':>8} {'other share':>12}")
    for label, r in (("lockstep", lockstep), ("sequential", sequential)):
        print(
            f"{label:<11} {r['wall']:>8.2f} {r['generate']:>11.2f} {r['other']:>8.2f} {r['other'] / r['wall']:>12.1%}"
        )
    ratio = {k: sequential[k] / lockstep[k] for k in ("wall", "generate", "other")}
    print(
        f"speed-up sequential / lockstep: {ratio['wall']:.2f}x wall, {ratio['generate']:.2f}x generate, "
        f"{ratio['other']:.2f}x other"
    )
    prompts = lockstep["first_prompts"]
    batched, single = prefill_s(policy.model, prompts, len(prompts)), prefill_s(policy.model, prompts, 1)
    print(
        f"plain prefill of the first turn's prompts ({len(prompts)} x {len(prompts[0])} tokens, no shared start): "
        f"batched {batched:.2f} s, one by one {single:.2f} s"
    )


if __name__ == "__main__":
    main()
