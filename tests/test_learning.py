"""GRPO learns from the real task reward (issue 8, item 6).

A deliberately weak start on the vault toy: a small random model (4 layers, hidden 128) after SFT on
oracle demonstrations of the protocol (read, the targeted edit when the harness asks, submit), then
five small steps on demonstrations that ignore the request and read on into the context window.
When it does not answer the request, the episode ends at the window (reward -0.2). The model cannot
copy the key word (a random start does not learn that in minutes; README, status), so no episode
succeeds by more than a guess: what GRPO can learn from the reward is to answer the request.

The measure is the policy itself on validation tasks: at the first compaction request of each of 32
validation episodes (the oracle's, so every model is asked the same thing), the log-odds of the
targeted edit's turn against a read turn, teacher-forced. It is exact, where sampled validation
reward at this size is not (one checkpoint's window rate was 2/32 to 9/32 depending on batching).
Measured on the CPU machine: mean log-odds 2.38 before, 3.55 after ten GRPO steps; with the
advantage sign flipped 1.00, with the mask inverted (the harness's tokens trained, not the model's)
2.45, and with each episode given another's advantage (reversed within its group) 1.59: each of
these errors fails the test (README, status, has the table).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.demos import turn_kind, write_demos
from rl_compaction.models import build_tiny_model
from rl_compaction.reproduce import ReproduceConfig, run_grpo
from rl_compaction.sft import render_turn, train_sft

#: vault level 1 with two filler pages (~590 tiny tokens each): the request comes after the
#: first; ignoring it, the second page crosses the window
TASK = {"scale": 0.02, "level": 1, "context_window": 2700, "compaction_threshold": 2150}
TEMPERATURE = 0.7  # GRPO sampling: the edit's long call stays intact, the decision stays open


def first_request_turns(tokenizer_dir: Path, out: Path) -> list[tuple[str, str, str]]:
    """(prompt, targeted-edit turn, read turn) at the first compaction request of 32 validation tasks,
    rendered with the model's chat template from the oracle's own episodes."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rows = write_demos(
        out, ["vault"], 32, ["evolve"], split="validation", tokenizer_name_or_path=str(tokenizer_dir), **TASK
    )
    edits: dict[int, tuple[str, str]] = {}
    reads: dict[int, str] = {}
    for row in rows:
        kind, seed = turn_kind(row), row["task_seed"]
        if kind == "evolve" and seed not in edits:
            edits[seed] = render_turn(tokenizer, row)
        elif kind == "read" and seed not in reads:
            reads[seed] = render_turn(tokenizer, row)[1]
    return [(prompt, edit, reads[seed]) for seed, (prompt, edit) in sorted(edits.items())]


def answer_log_odds(model_dir: Path, turns: list[tuple[str, str, str]]) -> float:
    """Mean log P(targeted edit) - log P(read) over the turns: how strongly the policy answers a request."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def logp(prompt: str, completion: str) -> float:
        p = tokenizer.encode(prompt, add_special_tokens=False)
        c = tokenizer.encode(completion, add_special_tokens=False)
        with torch.no_grad():
            logps = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1].log_softmax(-1)
        return logps.gather(1, torch.tensor(c)[:, None]).sum().item()

    return statistics.mean(logp(prompt, edit) - logp(prompt, read) for prompt, edit, read in turns)


#: ten GRPO steps, each on one training task's group of 8 episodes (`CompactionGRPOConfig` fields)
GRPO = {
    "seed": 0,
    "max_turns": 10,
    "train_tasks": 64,
    "num_generations": 8,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 8,
    "max_completion_length": 96,
    "temperature": TEMPERATURE,
    "learning_rate": 1e-4,  # at 1e-3 the first steps broke the evolve calls and it stopped compacting
    "lr_scheduler_type": "constant",
    "loss_type": "dapo",
    "scale_rewards": "group",
    "beta": 0.0,
    "max_steps": 10,
    "logging_steps": 1,
    "disable_tqdm": True,
}


def weak_start(tmp_path: Path) -> tuple[Path, Path]:
    """(model, tokenizer dir): the protocol from 1,000 SFT steps, then 5 steps toward ignoring the request."""
    start = build_tiny_model(tmp_path / "random", hidden_size=128, layers=4)
    sft = {
        "use_cpu": True,
        "save_strategy": "no",
        "report_to": "none",
        "bf16": False,
        "activation_checkpointing": False,
        "max_length": 4096,
        "per_device_train_batch_size": 1,
        "num_train_epochs": 100,
        "seed": 0,
        "disable_tqdm": True,
    }
    demos = {"tokenizer_name_or_path": str(start), **TASK}
    write_demos(tmp_path / "demos", ["vault"], 64, ["evolve", "ignore"], keep_failed=["ignore"], **demos)
    train_sft(
        tmp_path / "demos",
        str(start),
        tmp_path / "sft",
        balance_turns=True,
        learning_rate=2e-3,
        lr_scheduler_type="linear",
        warmup_steps=10,
        max_steps=1000,
        **sft,
    )
    # balanced SFT answers nearly every request; a nudge toward the ignoring demonstrations makes it
    # answer about half of them (5 steps at 1e-4; 10 at 2e-4 already answer almost none)
    write_demos(tmp_path / "ignoring", ["vault"], 32, ["ignore"], keep_failed=["ignore"], **demos)
    train_sft(
        tmp_path / "ignoring",
        str(tmp_path / "sft"),
        tmp_path / "weak",
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        max_steps=5,
        **sft,
    )
    return tmp_path / "weak", start


def test_grpo_learns_to_answer_compaction_requests_from_the_task_reward(tmp_path: Path, capsys):
    def say(message: str) -> None:  # this test runs for minutes: show where it is, even when captured
        with capsys.disabled():
            print(f"\n[learning test {time.strftime('%H:%M:%S')}] {message}", flush=True)

    say("demonstrations, then the weak SFT start (1,000 + 5 steps)")
    weak, tokenizer = weak_start(tmp_path)
    turns = first_request_turns(tokenizer, tmp_path / "validation")
    before = answer_log_odds(weak, turns)
    say(f"log-odds before GRPO {before:.2f}; GRPO, {GRPO['max_steps']} steps")
    config = ReproduceConfig(family="vault", **TASK, grpo=GRPO)
    history = run_grpo(config, weak, tmp_path / "grpo")  # the reproduction's own GRPO stage
    after = answer_log_odds(tmp_path / "grpo", turns)
    say(f"log-odds after GRPO {after:.2f}")
    rewards = [h["reward/reward"] for h in history if "reward/reward" in h]
    print(
        f"validation log-odds of answering the request: {before:.2f} before GRPO, {after:.2f} after; rewards {rewards}"
    )
    assert len(rewards) == 10
    assert after >= before + 0.5, (before, after)
