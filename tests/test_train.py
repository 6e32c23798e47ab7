"""GRPO training: segments, advantages, rewards, loss normalisation, a real run with checkpoint
and resume, W&B offline files, and a learning test."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from summaries import summary_info  # tests/ is on sys.path under pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.models.registry import resolve_model
from rl_compaction.training.microbatch import trim_micro_batch, unpadded_logps
from rl_compaction.training.reward import RewardConfig, episode_reward
from rl_compaction.training.segments import build_segments
from rl_compaction.training.train import main as train_main
from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer, group_advantages

TINY_CONFIG = str(Path(__file__).parents[1] / "configs" / "train" / "tiny-cpu.yaml")


# -- segments ------------------------------------------------------------------------------------


def test_append_only_turns_merge_into_one_row_with_exact_masks():
    p1, c1 = [1, 2, 3], [10, 11]
    p2 = p1 + c1 + [7, 8]  # harness added a tool output (7, 8)
    c2 = [12]
    p3 = p2 + c2 + [9]
    c3 = [13, 14]
    rows = build_segments([(p1, c1, [-0.1, -0.2]), (p2, c2, [-0.3]), (p3, c3, None)])
    assert len(rows) == 1
    row = rows[0]
    assert row.prompt_ids == p1
    assert row.completion_ids == [10, 11, 7, 8, 12, 9, 13, 14]
    assert row.mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert row.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, 0.0, 0.0, 0.0]
    assert row.turns == [0, 1, 2] and row.trained_tokens == 5


def test_an_edit_forks_a_new_row():
    p1, c1 = [1, 2, 3, 4], [10]
    p2 = [1, 2, 99, 4, 10, 5]  # an evolve edit rewrote the context: no longer an extension
    c2 = [11, 12]
    p3 = p2 + c2 + [6]
    rows = build_segments([(p1, c1, None), (p2, c2, None), (p3, [13], None)])
    assert [r.prompt_ids for r in rows] == [p1, p2]
    assert rows[1].completion_ids == [11, 12, 6, 13] and rows[1].mask == [1, 1, 0, 1]
    assert [r.turns for r in rows] == [[0], [1, 2]]


def test_a_prompt_that_drops_the_previous_completion_forks():
    rows = build_segments([([1, 2], [3, 4], None), ([1, 2, 3], [5], None)])  # re-rendered turn lost token 4
    assert len(rows) == 2


def test_logprob_count_must_match():
    with pytest.raises(ValueError, match="2 logprobs for 1 sampled tokens"):
        build_segments([([1], [2], [-1.0, -2.0])])


# -- advantages and rewards ---------------------------------------------------------------------------


def test_group_advantages_normalise_within_groups():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 5.0, 5.0, 5.0, 5.0])
    adv = group_advantages(rewards, 4, "group")
    assert torch.allclose(adv[:4], torch.tensor([0.5, -0.5, 0.5, -0.5]) / (0.57735 + 1e-4), atol=1e-4)  # unbiased std
    assert torch.all(adv[4:] == 0)  # a group with one outcome teaches nothing
    none = group_advantages(rewards, 4, "none")
    assert torch.allclose(none[:4], torch.tensor([0.5, -0.5, 0.5, -0.5]))
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(rewards, 3)


def _info(score=0.0, success=False, cost=0.0, failures=0, events=(), truncated=None):
    return summary_info(
        score=score,
        success=success,
        truncated_reason=truncated,
        events=list(events),
        ledger={"cost": cost, "evolve_failures": failures},
    )


def test_reward_components_and_success_dominates():
    c = RewardConfig()
    solved_expensive = episode_reward(_info(1.0, True, cost=10**9, failures=9, events=[{"event": "tool_error"}] * 9), c)
    unsolved_cheap = episode_reward(_info(0.99, False, cost=0), c)
    assert solved_expensive["reward"] == pytest.approx(1.0)
    assert solved_expensive["reward"] > unsolved_cheap["reward"]
    parts = episode_reward(
        _info(0.5, False, cost=100_000, failures=1, events=[{"event": "malformed_action"}], truncated="context_window"),
        c,
    )
    assert parts == pytest.approx(
        {
            "score": 0.5,
            "success": 0.0,
            "cost": -0.1,
            "evolve_failures": -0.05,
            "malformed_calls": -0.025,
            "context_window": -0.2,
            "limits": 0.0,
            "reward": 0.125,
        }
    )
    # idling until the turn limit costs what hitting the window costs: no escape by stalling
    stalled = episode_reward(_info(0.0, False, cost=0, truncated="max_turns"), c)
    at_window = episode_reward(_info(0.0, False, cost=0, truncated="context_window"), c)
    assert stalled["limits"] == pytest.approx(-0.2) and stalled["reward"] == pytest.approx(at_window["reward"])
    with pytest.raises(ValueError, match="must be >= 0"):
        RewardConfig(cost_weight=-1)


def test_reward_of_the_typed_summary_is_the_reward_of_its_dict():
    info = _info(0.5, False, cost=100_000, failures=1, events=[{"event": "tool_error"}], truncated="max_turns")
    assert episode_reward(EpisodeSummary.from_info(info)) == episode_reward(info)
    with pytest.raises(ValueError, match="'ledger.cost'"):
        episode_reward({**info, "ledger": {"evolve_failures": 1}})


# -- loss normalisation: segments must not weigh an episode -----------------------------------------


@pytest.fixture(scope="module")
def tiny_trainer(tmp_path_factory):
    path = resolve_model("tiny")
    args = CompactionGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("norm")),
        use_cpu=True,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=8,
        activation_checkpointing=False,
        save_strategy="no",
        eval_strategy="no",
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    return CompactionGRPOTrainer(model, args, processing_class=AutoTokenizer.from_pretrained(path))


def test_trl_generation_prompts_extend_the_last_turn_until_an_edit(tiny_trainer):
    """TRL's own generation gets token-in, token-out prompts (`rl_compaction.policies.prompts`): each prompt
    extends the last prompt and sampled ids, turns cut at max_completion_length included, so an episode is
    one row until an edit (with a fresh rendering of the State, turns here started rows of their own)."""
    from rl_compaction.harness.env import CompactionEnv, EnvConfig
    from rl_compaction.harness.rollout import closing_envs, rollout
    from rl_compaction.harness.tasks import Difficulty
    from rl_compaction.training.trainer import TRLGenerationPolicy

    config = EnvConfig(context_window=8000, max_turns=3)
    difficulty = Difficulty(0.06, 1)
    envs = [CompactionEnv("probe", difficulty=difficulty, config=config, counter=tiny_trainer.counter) for _ in "ab"]
    with closing_envs(envs):
        records = rollout(TRLGenerationPolicy(tiny_trainer), envs, [0, 0])
    for record in records:
        assert len(record.invocations) == 3
        edits = sum(v["reason"] == "evolve" for v in record.state_versions)
        rows = build_segments([(i.prompt_ids, i.completion_ids, i.logprobs) for i in record.invocations])
        assert len(rows) == 1 + edits


def _grad_of(trainer, rows):
    from rl_compaction.training.segments import Segment

    trainer.model.zero_grad()
    batch = trainer._rows_to_tensors([(Segment(p, c, m, [0.0] * len(c)), a) for p, c, m, a in rows], "cpu")
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()


def test_one_row_and_the_same_tokens_in_two_segments_give_the_same_gradient(tiny_trainer):
    prompt, c1, tool, c2 = [5, 6, 7, 8], [20, 21, 22], [30, 31], [23, 24]
    one_row = [(prompt, c1 + tool + c2, [1, 1, 1, 0, 0, 1, 1], 1.0)]
    two_rows = [(prompt, c1, [1, 1, 1], 1.0), (prompt + c1 + tool, c2, [1, 1], 1.0)]
    g1, g2 = _grad_of(tiny_trainer, one_row), _grad_of(tiny_trainer, two_rows)
    # Equal up to the numerical effect of left padding (the two-row batch pads its shorter prompt).
    assert (g1 - g2).norm() / g1.norm() < 0.01
    # A per-row mean would give the short second segment the weight of a whole episode.
    tiny_trainer.loss_type = "grpo"
    try:
        assert (_grad_of(tiny_trainer, two_rows) - g1).norm() / g1.norm() > 0.1
    finally:
        tiny_trainer.loss_type = "dapo"


def test_pad_to_multiple_of_is_honoured(tiny_trainer):
    """TRL's option pads every tensor's length to a multiple; the override used to ignore it."""
    from rl_compaction.training.segments import Segment

    rows = [(Segment([5, 6, 7], [20, 21, 22, 23, 24], [1, 1, 1, 0, 1], [0.0] * 5), 1.0)]
    tiny_trainer.pad_to_multiple_of = 8
    try:
        batch = tiny_trainer._rows_to_tensors(rows, torch.device("cpu"))
    finally:
        tiny_trainer.pad_to_multiple_of = None
    assert batch["prompt_ids"].shape[1] == 8 and batch["completion_ids"].shape[1] == 8
    assert batch["tool_mask"].shape == batch["completion_mask"].shape == (1, 8)
    assert batch["tool_mask"].sum() == 4 and batch["num_items_in_batch"] == 4  # padding is never trained


#: a micro-batch as TRL splits it: one long episode, a short segment whose tail is harness output, and
#: two empty rows that even out the micro-batches (prompt, completion, loss mask, advantage)
PADDED_ROWS = [
    (list(range(5, 25)), list(range(30, 70)), [1] * 30 + [0] * 5 + [1] * 5, 1.0),
    (list(range(5, 13)), list(range(40, 52)), [1] * 6 + [0] * 6, -0.5),
    ([0], [0], [0], 0.0),
    ([0], [0], [0], 0.0),
]


def _padded_batch(trainer) -> dict:
    from rl_compaction.training.segments import Segment

    segments = [(Segment(p, c, m, [0.0] * len(c)), a) for p, c, m, a in PADDED_ROWS]
    return trainer._rows_to_tensors(segments, torch.device("cpu"))


def test_trimming_the_micro_batch_keeps_the_loss_and_its_gradient(tiny_trainer):
    """TRL pads a micro-batch to the generation batch's longest row; the trainer drops the rows and
    columns that cannot change the loss (trim_micro_batch). The loss and every gradient stay the same."""
    from trl import GRPOTrainer

    batch = _padded_batch(tiny_trainer)
    batch = {**batch, "completion_ids": torch.nn.functional.pad(batch["completion_ids"], (0, 7))}  # wider, as TRL's
    for key in ("completion_mask", "tool_mask"):
        batch[key] = torch.nn.functional.pad(batch[key], (0, 7))
    trimmed = trim_micro_batch(batch)
    assert trimmed["prompt_ids"].shape == (2, 20) and trimmed["completion_ids"].shape == (2, 40)
    assert trimmed["advantages"].tolist() == [1.0, -0.5] and trimmed["num_items_in_batch"] == 41

    # in float64: in float32 a padding mask alone moves this random model's gradient by ~1e-3 (another kernel)
    model = copy.deepcopy(tiny_trainer.model).double()

    def loss_and_grad(compute) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        loss = compute(model, batch)
        loss.backward()
        return loss.item(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    full_loss, full_grad = loss_and_grad(lambda model, b: GRPOTrainer._compute_loss(tiny_trainer, model, b))
    loss, grad = loss_and_grad(tiny_trainer._compute_loss)
    assert full_loss != 0 and abs(loss - full_loss) < 1e-9 * abs(full_loss)
    assert full_grad.norm() > 0 and (grad - full_grad).norm() < 1e-9 * full_grad.norm()


def test_old_and_reference_log_probs_skip_the_padding_too(tiny_trainer):
    """The no-grad forwards (old log-probs under vLLM or several iterations, the reference model's for
    the KL) also run chunk by chunk without padding; where a token is trained they are the padded ones."""
    from trl import GRPOTrainer

    batch = _padded_batch(tiny_trainer)
    model = copy.deepcopy(tiny_trainer.model).double()

    def logps_of(input_ids, attention_mask, logits_to_keep, batch_size):
        return GRPOTrainer._get_per_token_logps_and_entropies(
            tiny_trainer, model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
        )[0]

    with torch.no_grad():
        padded = logps_of(
            torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1),
            batch["completion_ids"].size(1),
            4,
        )
        for chunk in (1, 2, 4):
            unpadded = unpadded_logps(logps_of, batch, chunk)
            assert unpadded.shape == padded.shape
            trained = (batch["completion_mask"] * batch["tool_mask"]).bool()
            assert (unpadded - padded)[trained].abs().max() < 1e-9
        # a chunk with a trained row never runs its empty rows (zeros, which every use masks)
        assert not unpadded_logps(logps_of, batch, 4)[2:].any()


def test_trimming_keeps_enough_rows_and_the_padding_multiple():
    def rows(masks: list[list[int]]) -> dict:
        n, width = len(masks), len(masks[0])
        return {
            "prompt_ids": torch.zeros(n, 6, dtype=torch.long),
            "prompt_mask": torch.tensor([[0, 0, 0, 0, 1, 1]] * n),
            "completion_ids": torch.zeros(n, width, dtype=torch.long),
            "completion_mask": torch.ones(n, width, dtype=torch.long),
            "tool_mask": torch.tensor(masks),
            "advantages": torch.arange(n, dtype=torch.float32),
            "num_items_in_batch": torch.tensor(sum(map(sum, masks))),
        }

    empty = trim_micro_batch(rows([[0, 0, 0, 0]] * 3))  # nothing trained: one row still runs a forward
    assert empty["completion_ids"].shape == (1, 1) and empty["prompt_ids"].shape == (1, 2)
    kept = trim_micro_batch(rows([[0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]]), multiple=4)
    assert kept["advantages"].tolist() == [1.0]
    assert kept["prompt_ids"].shape == (1, 4) and kept["completion_ids"].shape == (1, 4)
    # with several processes, each keeps as many rows as the one that keeps most (TRL gathers per-row values),
    # untrained ones after the trained, in their order
    padded = trim_micro_batch(rows([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]]), min_rows=3)
    assert padded["advantages"].tolist() == [0.0, 1.0, 2.0] and padded["completion_ids"].shape == (3, 2)


def test_a_turn_cut_off_at_the_budget_can_be_left_out_of_the_loss():
    """TRL's mask_truncated_completions: the cut turn stays in its row (context) with mask 0."""
    p1, c1, p2_extra, c2 = [1, 2], [10, 11], [7], [12, 13]
    calls = [(p1, c1, None), (p1 + c1 + p2_extra, c2, None)]
    (row,) = build_segments(calls, trained=[True, False])
    assert row.completion_ids == [10, 11, 7, 12, 13] and row.mask == [1, 1, 0, 0, 0]
    assert build_segments(calls)[0].mask == [1, 1, 0, 1, 1]


def test_per_row_losses_are_rejected_in_config(tmp_path):
    with pytest.raises(ValueError, match="number of segments"):
        CompactionGRPOConfig(output_dir=str(tmp_path), loss_type="grpo", use_cpu=True)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"family": ["probe", "bogus"]}, "unknown task families ['bogus']"),
        ({"family": []}, "unknown task families (none given)"),
        ({"family": ["probe", "ledger"], "family_weights": [1.0]}, "one weight per family"),
        ({"family_weights": [-1.0]}, "positive sum"),
        ({"level": 7}, "difficulty level must be 1, 2 or 3"),
        ({"context_window": 1000, "compaction_threshold": 2000}, "compaction_threshold"),
        ({"cache_preset": "nope"}, "unknown cache model preset 'nope'"),
        ({"context_window": [3000, 0]}, "context_window: context_window must be > 0"),
        ({"scale": {"low": 0.1}}, "scale: a range is {low: A, high: B}"),
        ({"tokenizer": ["a", "b"]}, "tokenizer takes one value, not a distribution"),
    ],
)
def test_bad_episode_settings_fail_before_a_model_loads(settings, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        EpisodeSpec(**settings)


def test_too_few_train_tasks_fail_at_config_time(tmp_path):
    with pytest.raises(ValueError, match="train_tasks"):
        CompactionGRPOConfig(output_dir=str(tmp_path), use_cpu=True, train_tasks=0)


# -- a real run: checkpoint, resume, W&B offline -----------------------------------------------------


@pytest.mark.slow
def test_two_steps_write_a_checkpoint_and_resume_continues(tmp_path, monkeypatch):
    import wandb

    wandb.teardown()  # settings of an earlier run in this process must not leak into this one
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for name in ("WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(name, raising=False)  # restored after the test; the resume sets them
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    out = tmp_path / "run"
    common = [
        "--config",
        TINY_CONFIG,
        "--output_dir",
        str(out),
        "--save_steps",
        "1",
        "--report_to",
        "wandb",
        "--log_episodes",
        "2",
    ]
    train_main([*common, "--max_steps", "2"])
    assert (out / "checkpoint-2" / "trainer_state.json").exists()
    assert (out / "model.safetensors").exists()
    train_main([*common, "--max_steps", "3", "--resume_from_checkpoint", str(out / "checkpoint-2")])
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    steps = [h["step"] for h in state["log_history"] if "reward/reward" in h]
    assert steps == [1, 2, 3]  # the history of the first run is carried on
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(list(r.glob("*.wandb")) for r in runs)  # offline with no account
    run_id = json.loads((out / "checkpoint-2" / "wandb_run.json").read_text())["id"]
    assert [r.name.rsplit("-", 1)[1] for r in runs] == [run_id, run_id]  # the resume continues that run
    assert json.loads((out / "checkpoint-3" / "wandb_run.json").read_text())["id"] == run_id
    tables = list(runs[0].glob("files/media/table/episodes_*.table.json"))
    assert tables and json.loads(tables[0].read_text())["columns"][-3:] == [
        "evolve_code",
        "state_before",
        "state_after",
    ]
    logged = {k for h in state["log_history"] for k in h}
    assert {
        "reward/score",
        "reward/cost",
        "success_rate",  # EpisodeStats' names, as in the eval table
        "mean_cost",
        "cached_share",
        "peak_context",
        "compactions_per_episode",
        "evolve_failures_per_episode",
        "mean_turns",
        "segments_per_episode",
        # TRL's own GRPO metrics, which the override used to drop
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "rewards/episode_reward_func/mean",
        "completions/mean_length",
        "completions/clipped_ratio",
        "num_tokens",
    } <= logged
    assert state["num_input_tokens_seen"] > 0


def test_resume_reads_the_run_id_and_an_explicit_one_wins(tmp_path, monkeypatch):
    from rl_compaction.training.wandb_resume import RUN_FILE, continue_wandb_run

    for name in ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    assert continue_wandb_run(tmp_path) is None and "WANDB_RUN_ID" not in os.environ  # W&B was off
    (tmp_path / RUN_FILE).write_text('{"id": "abc123", "project": "p"}')
    assert continue_wandb_run(tmp_path) == "abc123"
    assert (os.environ["WANDB_RUN_ID"], os.environ["WANDB_RESUME"], os.environ["WANDB_PROJECT"]) == (
        "abc123",
        "allow",
        "p",
    )
    monkeypatch.setenv("WANDB_RUN_ID", "mine")
    assert continue_wandb_run(tmp_path) is None and os.environ["WANDB_RUN_ID"] == "mine"
    monkeypatch.delenv("WANDB_RUN_ID")
    (tmp_path / RUN_FILE).write_text("not json")
    with pytest.raises(ValueError, match="not a W&B run record"):
        continue_wandb_run(tmp_path)
    assert "WANDB_RUN_ID" not in os.environ


@pytest.mark.slow
def test_lora_with_a_reference_model_and_activation_checkpointing_trains_the_adapter(tmp_path):
    """The GPU configs' combination (bf16 weights and autocast, LoRA on every linear layer, KL to
    the reference model, activation checkpointing), vLLM aside: the adapter trains."""
    out = tmp_path / "lora"
    lora = ["--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16", "--lora_target_modules", "all-linear"]
    train_main(
        ["--config", TINY_CONFIG, "--output_dir", str(out), "--max_steps", "1", "--learning_rate", "1e-2"]
        + [*lora, "--beta", "0.04", "--activation_checkpointing", "true", "--report_to", "none"]
        + ["--bf16", "true", "--dtype", "bfloat16"]
    )
    from peft import PeftModel
    from safetensors.torch import load_file

    adapter = load_file(out / "adapter_model.safetensors")
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b)  # B starts at zero: nonzero means it trained
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"))
    reference = {k: v.clone() for k, v in base.state_dict().items()}
    merged = PeftModel.from_pretrained(base, out).merge_and_unload()
    assert any(not torch.equal(v, reference[k]) for k, v in merged.state_dict().items())
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert "kl" in state["log_history"][0]
    card = (out / "README.md").read_text()
    assert "[None]" not in card and card.startswith('---\nbase_model: "tiny"\n')  # the project's card


@pytest.mark.slow
def test_two_processes_with_different_row_counts_stay_in_step(tmp_path):
    """Rows per process differ (episodes differ in edits); TRL gathers per-row values and FSDP /
    ZeRO-3 gather parameters per forward, so every process must see as many rows as the others."""
    out = tmp_path / "uneven"
    script = Path(__file__).parent / "uneven_ranks_train.py"
    # --multi_gpu starts real distributed processes (gloo on CPU, as the config says use_cpu); --cpu alone runs one
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--mixed_precision", "no", str(script)]
    command += ["--config", TINY_CONFIG, "--output_dir", str(out), "--max_steps", "1", "--report_to", "none"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    # rank 0's figure (rank 1 doubles its rows): an episode without an edit is one row (rl_compaction.policies.prompts)
    assert state["global_step"] == 1 and state["log_history"][0]["segments_per_episode"] >= 1


# -- learning test ----------------------------------------------------------------------------------------


@pytest.mark.learning
def test_reward_rises_on_a_trivially_learnable_task(tmp_path):
    """Reward = share of sampled tokens with an id below 1000 (about 40% for the random model).
    A sign error would drive it down, a mask that hides the model's tokens would leave it flat."""
    path = resolve_model("tiny")
    args = CompactionGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        seed=0,
        train_tasks=64,
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=16,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        loss_type="dapo",
        beta=0.0,
        max_steps=24,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        eval_strategy="no",
    )

    def low_ids(record, config):
        assert config == args.reward_config  # a reward_fn gets the run's reward weights
        ids = [t for inv in record.invocations for t in inv.completion_ids]
        return {"reward": sum(t < 1000 for t in ids) / max(1, len(ids))}

    trainer = CompactionGRPOTrainer(
        AutoModelForCausalLM.from_pretrained(path),
        args,
        processing_class=AutoTokenizer.from_pretrained(path),
        reward_fn=low_ids,
        episode=EpisodeSpec(family="probe", scale=0.06, level=1, context_window=6000, max_turns=1),
    )
    trainer.train()
    rewards = [h["reward/reward"] for h in trainer.state.log_history if "reward/reward" in h]
    assert len(rewards) == 24
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.12, rewards
