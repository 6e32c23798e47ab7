"""vLLM as a policy (GPU, optional extra `pip install 'rl-compaction[vllm]'`).

Two ways in, one interface: an in-process engine (`vllm.LLM`, given a model path) or a running
`trl vllm-serve` server (given `base_url`), reached with TRL's own `VLLMClient`. Either way the
prompt is rendered and tokenised here with the model's chat template (`rl_compaction.chat_format`)
and sent as token ids, so the recorded prompt ids are exactly what the model saw, and the sampled
ids come back with their logprobs.
"""

from __future__ import annotations

import time
from typing import Any

from rl_compaction import chat_format
from rl_compaction.policies.base import Policy, Turn, turns_from_ids


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

        from rl_compaction.models import resolve_model

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
                raise ImportError("the vLLM backend needs vllm (a GPU): pip install 'rl-compaction[vllm]'") from e
            self.client, self.engine = None, LLM(model=path, **(engine_kwargs or {}))

    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        started = time.perf_counter()
        prompts = [
            chat_format.prompt_ids(self.tokenizer, o["instructions"], o["tools"], o["state"]) for o in observations
        ]
        if self.client is not None:
            out = self.client.generate(
                prompts, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens, logprobs=0
            )
            completions = out["completion_ids"]
            logprobs = [[lp[0] for lp in seq] for seq in out["logprobs"]]
        else:
            from vllm import SamplingParams, TokensPrompt

            params = SamplingParams(
                temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens, logprobs=0
            )
            results = self.engine.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
            completions = [list(r.outputs[0].token_ids) for r in results]
            logprobs = [
                [step[tok].logprob for step, tok in zip(r.outputs[0].logprobs, r.outputs[0].token_ids, strict=True)]
                for r in results
            ]
        return turns_from_ids(self.tokenizer, prompts, completions, logprobs, time.perf_counter() - started)
