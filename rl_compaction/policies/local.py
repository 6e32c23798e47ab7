"""A local transformers model as a policy: batched sampling on CPU or GPU, with the exact
prompt ids, sampled ids and per-token logprobs that training needs.

Prompts are built token in, token out (`rl_compaction.policies.prompts`): an episode's prompt is
its previous prompt, the ids sampled there and the harness's answers, until an edit rewrites the
context, so training rows are cut only at edits and the model sees exactly what it sampled.

Logprobs follow TRL's convention: log-softmax of the raw logits divided by the sampling
temperature (top-p / top-k filtering changes what can be sampled, not these values).

Prompts of one batch that share a long start (the G episodes of a group share the system
message, the tools and the task's opening; at the first turn their prompts are identical) have
that start prefilled once and its KV cache copied to every row: the prefill, most of a turn's
work at long contexts, then costs one sequence instead of G. Rows are laid out as
[shared start][padding][own rest], the padding masked, so positions stay those of the plain
prompt; sampled ids and logprobs equal the plain path's up to float rounding.
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from rl_compaction.accounting import ChatTemplateCounter, reusable_prefix
from rl_compaction.harness.policy import Policy, Turn, stop_token_ids, turns_from_ids
from rl_compaction.policies.prompts import PromptBuilder

#: A shared start shorter than this is prefilled with each row (a separate pass is not worth it).
MIN_SHARED_PREFIX = 64


def sampled_logprobs(logits: tuple[torch.Tensor, ...], sampled: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits_t / temperature)[sampled_t] for each generated position t, as a (batch, new tokens)
    tensor on the logits' device: only that tensor leaves the device, never the (batch, new tokens, vocab)
    logits (8 x 128 x 151,936 floats for a Qwen turn, 9 s a turn on the host)."""
    return torch.stack(
        [
            torch.log_softmax(step.float() / temperature, dim=-1).gather(-1, sampled[:, t : t + 1]).squeeze(-1)
            for t, step in enumerate(logits)
        ],
        dim=1,
    )


def cache_argument(model: Any) -> str:
    """The name under which `model.forward` takes a KV cache: transformers 5.x renames `past_key_values` to
    `cache`, and a model may take either."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class TransformersPolicy(Policy):
    """Sample turns from a causal LM with its chat template (tools rendered by the template, or
    the documented fallback format for templates without tool support)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        do_sample: bool = True,
        max_batch_size: int = 8,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        name: str | None = None,
    ):
        if isinstance(model, (str, Path)):
            from rl_compaction.models.registry import load_pretrained

            name = name or str(model)
            model, loaded_tokenizer = load_pretrained(
                str(model), dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype
            )
            tokenizer = tokenizer or loaded_tokenizer
        if tokenizer is None:
            raise ValueError("a tokenizer is needed when the model is passed as an object")
        if temperature <= 0 and do_sample:
            raise ValueError("temperature must be > 0 when sampling (use do_sample=False for greedy)")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "local")
        self.max_new_tokens, self.temperature, self.top_p, self.top_k = max_new_tokens, temperature, top_p, top_k
        self.do_sample, self.max_batch_size = do_sample, max_batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = stop_token_ids(self.model.generation_config.eos_token_id, tokenizer)
        self._counter = ChatTemplateCounter(tokenizer)
        # an episode's prompt extends its previous prompt and sampled ids until an edit (`prompts`)
        self.prompts = PromptBuilder(self._counter, self.stop_ids)
        self._cache_kwarg = cache_argument(self.model)

    def prompt_ids(self, observation: dict[str, Any]) -> list[int]:
        """`chat.prompt_ids` of the observation (the whole State rendered), tokenised
        incrementally: only a turn's new text is tokenised (the ids are the same)."""
        return self._counter.input_ids(observation["instructions"], observation["tools"], observation["state"])

    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        prompts = self.prompts.prompt_ids(observations)
        turns: list[Turn] = []
        for start in range(0, len(prompts), self.max_batch_size):
            turns.extend(self._generate(prompts[start : start + self.max_batch_size]))
        self.prompts.remember(observations, turns)
        return turns

    def _shared_prefix(self, prompts: list[list[int]]) -> dict[str, Any]:
        """The KV cache of the batch's shared start, prefilled once and copied to every row, and its
        length; {} when the rows share less than MIN_SHARED_PREFIX tokens (or there is one row).
        The last token of the shortest prompt is left out, so every row feeds the model at least
        one token and gets its first logits from the generation itself."""
        if len(prompts) < 2:
            return {}
        shared = min(min(len(p) for p in prompts) - 1, *(reusable_prefix(prompts[0], p) for p in prompts[1:]))
        if shared < MIN_SHARED_PREFIX:
            return {}
        cache = DynamicCache(config=self.model.config)
        start = torch.tensor([prompts[0][:shared]], device=self.device)
        self.model(input_ids=start, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache})
        cache.batch_repeat_interleave(len(prompts))
        return {"cache": cache, "length": shared}

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]]) -> list[Turn]:
        started = time.perf_counter()
        prefix = self._shared_prefix(prompts)
        shared = prefix.get("length", 0)
        rest = max(len(p) for p in prompts) - shared
        width = shared + rest
        # [shared start][left padding][own rest]: every prompt's last token sits at the same position.
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, :shared] = torch.tensor(p[:shared], dtype=torch.long)
            mask[i, :shared] = 1
            input_ids[i, width - (len(p) - shared) :] = torch.tensor(p[shared:], dtype=torch.long)
            mask[i, width - (len(p) - shared) :] = 1
        cache = {self._cache_kwarg: prefix["cache"]} if prefix else {}
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            max_new_tokens=self.max_new_tokens,
            do_sample=self.do_sample,
            temperature=self.temperature if self.do_sample else None,
            top_p=self.top_p if self.do_sample else None,
            top_k=self.top_k if self.do_sample else None,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.stop_ids) or None,
            return_dict_in_generate=True,
            output_logits=True,
            **cache,
        )
        new = out.sequences[:, width:]
        logps = sampled_logprobs(out.logits, new, self.temperature if self.do_sample else 1.0).cpu()
        new = new.cpu()
        completions, logprobs = [], []
        for i in range(len(prompts)):
            ids = new[i].tolist()
            end = next((j + 1 for j, t in enumerate(ids) if t in self.stop_ids), len(ids))
            completions.append(ids[:end])
            logprobs.append(logps[i, :end].tolist())
        return turns_from_ids(
            self.tokenizer, prompts, completions, logprobs, time.perf_counter() - started, self.stop_ids
        )
