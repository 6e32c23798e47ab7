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

The second test is the same for the cost term of the reward (issue 19, item 5). Its warm start (a new
random model of that shape after 1,000 SFT steps on demonstrations of two edits, 1:1) answers requests
with the targeted edit or the conservative one (`evolve_recent`: the targeted edit that also keeps the
last pages read); both succeed here, the conservative at 1.29x the cost, and the start writes both
cleanly at temperature 0.7. Where a group holds no failed edit and no guessed key (most groups), its
episodes differ in cost alone, so the group-normalised advantage is the cost term's ranking whatever its
weight; with the term zeroed those groups have zero advantage and nothing moves, and with its sign
flipped GRPO moves toward the expensive edit. The measure is exact again: at every compaction request of
32 validation episodes, the log-odds of the targeted edit's first token that differs from the
conservative edit's (the choice itself, teacher-forced). Measured on the CPU machine: 0.45 before, 1.79
after eight GRPO steps with the default reward; 0.96 with the term zeroed, -0.66 with its sign flipped
(README, status).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import rl_compaction_envs.vault.family as vault
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models.registry import build_tiny_model
from rl_compaction.recipes.reproduce import ReproduceConfig, run_grpo
from rl_compaction.training.demos import turn_kind, write_demos
from rl_compaction.training.sft import render_turn, train_sft

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


#: SFT settings of both tests' warm starts (`SFTConfig` fields)
SFT = {
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


def weak_start(tmp_path: Path) -> tuple[Path, Path]:
    """(model, tokenizer dir): the protocol from 1,000 SFT steps, then 5 steps toward ignoring the request."""
    start = build_tiny_model(tmp_path / "random", hidden_size=128, layers=4)
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
        **SFT,
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
        **SFT,
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


#: the same two short pages in a window that also holds the conservative edit's extra page, so both
#: edits succeed (oracle, 8 validation seeds: targeted 5,692, conservative 7,322, both 100%)
COST_TASK = {**TASK, "context_window": 3300}
#: eight steps of the first test's GRPO, with room for the conservative edit's longer call
COST_GRPO = {**GRPO, "max_completion_length": 128, "max_steps": 8}
#: log-odds the cost term must add at the decision points: measured +1.34 with the default reward, +0.51
#: with the cost term zeroed, -1.11 with its sign flipped (README, status)
COST_MARGIN = 0.9


def decision_points(tokenizer_dir: Path, out: Path) -> list[tuple[list[int], int, int]]:
    """(context ids, targeted token, conservative token) at every compaction request of 32 validation
    tasks: the prompt and the targeted edit's turn up to the first token where the conservative edit's
    turn (the same call with `RECENT_EDIT_CODE`) differs."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rows = write_demos(
        out, ["vault"], 32, ["evolve"], split="validation", tokenizer_name_or_path=str(tokenizer_dir), **COST_TASK
    )
    points = []
    for row in rows:
        if turn_kind(row) != "evolve":
            continue
        prompt, targeted = render_turn(tokenizer, row)
        conservative = targeted.replace(json.dumps(vault.EVOLVE_CODE)[1:-1], json.dumps(vault.RECENT_EDIT_CODE)[1:-1])
        assert conservative != targeted
        p, a, b = (tokenizer.encode(t, add_special_tokens=False) for t in (prompt, targeted, conservative))
        k = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        points.append((p + a[:k], a[k], b[k]))
    return points


def choice_log_odds(model_dir: Path, points: list[tuple[list[int], int, int]]) -> float:
    """Mean log P(targeted token) - log P(conservative token) at the decision points."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logps = [model(torch.tensor([ids])).logits[0, -1].log_softmax(-1) for ids, _, _ in points]
    return statistics.mean((lp[a] - lp[b]).item() for lp, (_, a, b) in zip(logps, points, strict=True))


def test_grpo_cost_term_moves_the_choice_to_the_cheaper_edit(tmp_path: Path, capsys):
    def say(message: str) -> None:
        with capsys.disabled():
            print(f"\n[cost learning test {time.strftime('%H:%M:%S')}] {message}", flush=True)

    say("demonstrations of both edits (1:1), then SFT (1,000 steps)")
    start = build_tiny_model(tmp_path / "random", hidden_size=128, layers=4)
    demos = {"tokenizer_name_or_path": str(start), **COST_TASK}
    write_demos(tmp_path / "demos", ["vault"], 64, ["evolve", "evolve_recent"], **demos)
    schedule = {"learning_rate": 2e-3, "lr_scheduler_type": "linear", "warmup_steps": 10, "max_steps": 1000}
    train_sft(tmp_path / "demos", str(start), tmp_path / "sft", balance_turns=True, **schedule, **SFT)
    points = decision_points(start, tmp_path / "validation")
    before = choice_log_odds(tmp_path / "sft", points)
    steps = COST_GRPO["max_steps"]
    say(f"{len(points)} decision points, log-odds of the targeted edit {before:.2f}; GRPO, {steps} steps")
    config = ReproduceConfig(family="vault", **COST_TASK, grpo=COST_GRPO)  # the default reward
    history = run_grpo(config, tmp_path / "sft", tmp_path / "grpo")
    after = choice_log_odds(tmp_path / "grpo", points)
    logged = [h for h in history if "reward/reward" in h]
    shares = [round(h.get("targeted_share", float("nan")), 2) for h in logged]  # absent: no edit applied
    costs = [round(h["cost/total"]) for h in logged]
    say(f"log-odds after GRPO {after:.2f}; sampled targeted share per step {shares}, mean cost {costs}")
    assert len(logged) == steps
    assert after >= before + COST_MARGIN, (before, after)
