"""Cut an episode into training rows ("segments").

Consecutive model turns share a row while each new prompt extends the previous prompt +
completion token for token: the row is then ``prompt | c1 t1 c2 t2 c3`` where the c's are the
sampled completions (trained, mask 1) and the t's are what the harness put in between (tool
outputs, receipts, user messages, the next turn's header: masked, mask 0). An edit, or any
re-rendering that breaks the prefix, starts a new row whose prompt is that turn's prompt.

The ids are the ones the policy really used (sampled ids, exact prompt ids), never re-tokenised
text, and the sampling logprobs ride along for importance weighting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Segment:
    """One training row: `prompt_ids`, then `completion_ids` with a per-token `mask` (1 = model
    token, trained) and `logprobs` (the sampling logprob for model tokens, 0.0 elsewhere)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    #: indices of the episode's invocations that this row covers
    turns: list[int] = field(default_factory=list)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


def build_segments(
    invocations: Sequence[tuple[Sequence[int], Sequence[int], Sequence[float] | None]],
    trained: Sequence[bool] | None = None,
) -> list[Segment]:
    """Rows from (prompt_ids, completion_ids, logprobs) per model invocation, in episode order.
    `trained[i]` False keeps invocation i's tokens in its row but out of the loss (mask 0), as TRL's
    `mask_truncated_completions` does for a turn cut off at the token budget."""
    rows: list[Segment] = []
    current: Segment | None = None
    for index, (prompt, completion, logprobs) in enumerate(invocations):
        bit = 1 if trained is None or trained[index] else 0
        prompt, completion = list(prompt), list(completion)
        logprobs = list(logprobs) if logprobs is not None else [0.0] * len(completion)
        if len(logprobs) != len(completion):
            raise ValueError(f"invocation {index}: {len(logprobs)} logprobs for {len(completion)} sampled tokens")
        if current is not None:
            so_far = current.prompt_ids + current.completion_ids
            if len(prompt) >= len(so_far) and prompt[: len(so_far)] == so_far:
                between = prompt[len(so_far) :]
                current.completion_ids += between + completion
                current.mask += [0] * len(between) + [bit] * len(completion)
                current.logprobs += [0.0] * len(between) + logprobs
                current.turns.append(index)
                continue
        current = Segment(prompt, completion, [bit] * len(completion), logprobs, [index])
        rows.append(current)
    return rows
