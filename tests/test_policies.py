"""The local transformers backend on a tiny model, and rollout records that line up exactly."""

from __future__ import annotations

import math
import time

import pytest
from transformers import AutoTokenizer

from rl_compaction import chat
from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.rollout import rollout
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.registry import resolve_model
from rl_compaction.policies.local import TransformersPolicy
from rl_compaction.training.segments import build_segments


@pytest.fixture(scope="module")
def policy():
    return TransformersPolicy("tiny", max_new_tokens=12, temperature=1.0, max_batch_size=3)


def make_envs(n, tokenizer):
    from rl_compaction.accounting import ChatTemplateCounter

    counter = ChatTemplateCounter(tokenizer)
    return [
        CompactionEnv(
            "probe",
            split="test",
            difficulty=Difficulty(0.06, 1),
            counter=counter,
            config=EnvConfig(context_window=8000, max_turns=3),
        )
        for _ in range(n)
    ]


def test_batched_turns_carry_exact_prompt_ids_sampled_ids_and_logprobs(policy):
    envs = make_envs(3, policy.tokenizer)
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    turns = policy.act(obs)
    assert len(turns) == 3
    for o, turn in zip(obs, turns, strict=True):
        assert turn.prompt_ids == chat.prompt_ids(policy.tokenizer, o["instructions"], o["tools"], o["state"])
        assert 0 < len(turn.completion_ids) <= 12
        assert len(turn.logprobs) == len(turn.completion_ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in turn.logprobs)
        assert turn.text == policy.tokenizer.decode(turn.completion_ids, skip_special_tokens=False)
        assert turn.items, "every turn yields at least an assistant message"
        assert turn.extra["finish_reason"] in ("stop", "length")


def test_rollout_records_line_up_with_the_env_ledger_and_segments(policy):
    envs = make_envs(2, policy.tokenizer)
    start = time.perf_counter()
    records = rollout(policy, envs, [0, 0])
    batch_s = time.perf_counter() - start
    # each episode's wall time is its share of the lockstep batch (it read as the whole batch's)
    assert records[0].wall_s == records[1].wall_s and 0 < sum(r.wall_s for r in records) <= batch_s
    for record in records:
        assert record.info["truncated_reason"] == "max_turns" and len(record.invocations) == 3
        rows = record.info["ledger_rows"]
        assert [r["input_tokens"] for r in rows] == [len(inv.prompt_ids) for inv in record.invocations]
        assert [r["output_tokens"] for r in rows] == [len(inv.completion_ids) for inv in record.invocations]
        # Every sampled token is trained exactly once across the episode's segments.
        segments = build_segments([(i.prompt_ids, i.completion_ids, i.logprobs) for i in record.invocations])
        assert sum(s.trained_tokens for s in segments) == sum(len(i.completion_ids) for i in record.invocations)
        # Each prompt extends the last prompt and sampled ids (turns cut at 12 tokens included): rows are cut
        # only where an edit applied (a fresh rendering of the State made one row per turn here).
        edits = sum(v["reason"] == "evolve" for v in record.state_versions)
        assert len(segments) == 1 + edits
        assert record.state_versions[0]["reason"] == "reset"


def test_bad_arguments_are_rejected():
    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        TransformersPolicy("tiny", tokenizer=tok, temperature=0)
    with pytest.raises(ValueError, match="neither an existing model directory nor a known model name"):
        TransformersPolicy("no-such-model")
