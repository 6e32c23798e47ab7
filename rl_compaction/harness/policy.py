"""The policy interface: a batch of observations in, a batch of model turns out.

An observation is what `CompactionEnv` returns: ``{"instructions", "tools", "state"}``. A
`Turn` is the model's answer as Responses output items, plus what training and accounting
need: the exact prompt ids, the sampled ids and their logprobs (where the backend has them),
provider-reported usage (HTTP backends) and latency.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One model invocation's result."""

    #: Responses output items: an assistant message and/or function calls.
    items: list[dict[str, Any]]
    #: the raw generated text (None for backends that return structured output only)
    text: str | None = None
    #: exact prompt token ids the model saw, sampled token ids, and one logprob per sampled id
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    #: provider-reported usage, e.g. {"input_tokens", "cached_tokens", "output_tokens"}
    usage: dict[str, Any] | None = None
    latency_s: float = 0.0
    #: anything backend-specific worth keeping in the rollout record (finish reason, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_action(self) -> dict[str, Any]:
        """The env action: items plus the token ids the policy really used, when known."""
        action: dict[str, Any] = {"items": self.items}
        if self.prompt_ids is not None:
            action["input_ids"] = self.prompt_ids
        if self.completion_ids is not None:
            action["output_ids"] = self.completion_ids
        return action

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Policy(ABC):
    """Maps observations to model turns. Implementations batch where they can."""

    name: str = "policy"

    @abstractmethod
    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        """One turn per observation, in order."""

    def close(self) -> None:  # noqa: B027 - a no-op unless the backend holds resources
        """Release resources (servers, GPU memory)."""


class ScriptedPolicy(ABC):
    """A policy that reads its task from the env (the oracle); rollouts call it per env."""

    name: str = "scripted"

    @abstractmethod
    def act_env(self, env: Any, observation: dict[str, Any]) -> Turn:
        """The next turn for `env`, whose current observation is `observation`."""


def stop_token_ids(generation_eos: int | list[int] | None, tokenizer: Any) -> set[int]:
    """The ids a turn ends at: the model's generation eos id(s) and the tokenizer's eos id."""
    ids = set(
        generation_eos if isinstance(generation_eos, list) else [generation_eos] if generation_eos is not None else []
    )
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def turns_from_ids(
    tokenizer: Any,
    prompts: list[list[int]],
    completions: list[list[int]],
    logprobs: list[list[float]] | None,
    latency_s: float = 0.0,
    stop_ids: set[int] | None = None,
) -> list[Turn]:
    """Turns from token-level generation (any local backend): decode the sampled ids, parse them
    into Responses items with the model's chat format, keep ids and logprobs exactly."""
    from rl_compaction import chat

    turns = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        completion = list(completion)
        text = tokenizer.decode(completion, skip_special_tokens=False)
        parsed = chat.parse_completion(text, tokenizer)
        extra: dict[str, Any] = {"parse_error": parsed.error}
        if stop_ids is not None:
            extra["finish_reason"] = "stop" if completion and completion[-1] in stop_ids else "length"
        turns.append(
            Turn(
                items=parsed.items,
                text=text,
                prompt_ids=list(prompt),
                completion_ids=completion,
                logprobs=list(logprobs[i]) if logprobs is not None else None,
                latency_s=latency_s,
                extra=extra,
            )
        )
    return turns
