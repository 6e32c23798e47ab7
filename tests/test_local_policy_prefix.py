"""TransformersPolicy prefills a batch's shared start once: the turns equal one-by-one generation."""

from __future__ import annotations

import pytest
import torch

from rl_compaction.models.registry import load_pretrained
from rl_compaction.policies.local import MIN_SHARED_PREFIX, TransformersPolicy


@pytest.fixture(scope="module")
def tiny():
    return load_pretrained("tiny")


def observation(extra: list[str]) -> dict:
    state = [{"type": "message", "role": "user", "content": "Find the invoice paid twice and submit its id."}]
    state += [{"type": "message", "role": "user", "content": text} for text in extra]
    return {"instructions": "You are a careful agent. " * 20, "tools": [], "state": state}


def test_a_shared_start_gives_the_same_turns_as_one_by_one(tiny):
    model, tokenizer = tiny
    # Rows of different lengths: the padding sits between the shared start and each row's rest.
    observations = [observation([]), observation(["more"]), observation(["a longer follow-up, " * 3]), observation([])]
    batched = TransformersPolicy(model, tokenizer, max_new_tokens=12, do_sample=False, max_batch_size=4)
    single = TransformersPolicy(model, tokenizer, max_new_tokens=12, do_sample=False, max_batch_size=1)
    prompts = [batched.prompt_ids(o) for o in observations]
    prefix = batched._shared_prefix(prompts)
    assert prefix["length"] >= MIN_SHARED_PREFIX and prefix["cache"].get_seq_length() == prefix["length"]
    together, alone = batched.act(observations), single.act(observations)
    for a, b in zip(together, alone, strict=True):
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids and a.items == b.items
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_no_shared_pass_for_one_row_or_a_short_common_start(tiny):
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=4, do_sample=False)
    assert policy._shared_prefix([list(range(200))]) == {}
    assert policy._shared_prefix([list(range(200)), [1] + list(range(200))]) == {}


def test_incremental_prompt_ids_equal_the_chat_template_path(tiny):
    from rl_compaction import chat

    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=4, do_sample=False)
    extra: list[str] = []
    for text in ["first", "a <tool_call> in text  ", "", "last\n\n"]:  # growing, as turns do
        extra.append(text)
        obs = observation(extra)
        plain = chat.prompt_ids(tokenizer, obs["instructions"], obs["tools"], obs["state"])
        assert policy.prompt_ids(obs) == plain
