"""Micro-batches without their padding, for GRPO's forwards (`CompactionGRPOTrainer`).

TRL pads the whole generation batch to its longest row before it splits the batch into micro-batches, so
a micro-batch of one 2,400-token episode and two empty rows ran as 3 x 3,636 tokens under a padding mask,
~10x the attention work on CPU. Only the rows with a trained token and the columns they use can change
the loss, so each forward runs on those alone, with the same loss and gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: what a forward reads of a micro-batch
SEQUENCE_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask")
#: the micro-batch tensors with a completion column per token (trimmed with the completion); `prompt_ids` and
#: `prompt_mask` are trimmed on the left, every other tensor with a row per row only loses rows
COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
)


def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    return inputs["completion_mask"] * inputs.get("tool_mask", 1)


def trained_rows(inputs: dict[str, Any]) -> int:
    """How many rows of the micro-batch hold a trained token."""
    return int((_loss_mask(inputs).sum(dim=1) > 0).sum())


def micro_batch_extent(
    inputs: dict[str, Any], multiple: int | None = None, min_rows: int = 1
) -> tuple[torch.Tensor, int, int]:
    """(rows, prompt columns, completion columns) of the micro-batch that can change TRL's token-level loss:
    the rows with a trained token, then untrained ones up to `min_rows` (at least one, so that every process
    still runs one forward per micro-batch, as FSDP and ZeRO-3 need; with several processes, as many as the
    others keep, since TRL gathers per-row metrics), in their order; the last prompt columns up to the first
    real token of a kept row; the completion columns up to the last trained token. `multiple` keeps TRL's
    `pad_to_multiple_of`."""
    mask = _loss_mask(inputs)
    trained = mask.sum(dim=1) > 0
    first = torch.argsort((~trained).int(), stable=True)  # the trained rows first, each group in order
    rows = first[: min(mask.size(0), max(min_rows, 1, int(trained.sum())))].sort().values
    prompt_width, completion_width = inputs["prompt_ids"].size(1), mask.size(1)
    used = mask[rows].any(dim=0).nonzero()
    end = int(used.max()) + 1 if used.numel() else 1
    prompt_used = inputs["prompt_mask"][rows].any(dim=0).nonzero()
    keep_prompt = prompt_width - (int(prompt_used.min()) if prompt_used.numel() else prompt_width - 1)
    if multiple:
        end = min(completion_width, -(-end // multiple) * multiple)
        keep_prompt = min(prompt_width, -(-keep_prompt // multiple) * multiple)
    return rows, keep_prompt, end


def trim_micro_batch(inputs: dict[str, Any], multiple: int | None = None, min_rows: int = 1) -> dict[str, Any]:
    """The micro-batch without what cannot change TRL's token-level loss (`micro_batch_extent`): the rows
    with no trained token (the padding rows that even out the micro-batches; segments whose turns were all
    cut off) and the columns that are padding in every kept row, or that come after the last trained token.

    Exact: a dropped row adds nothing to the loss's sum, whose normaliser is the generation batch's
    trained-token count (`num_items_in_batch`, or the micro-batch's for `bnpo`, unchanged); causal attention
    never lets a later column change an earlier logit; and a left-padded column is masked for every key,
    while RoPE scores depend on relative positions only."""
    rows, keep_prompt, end = micro_batch_extent(inputs, multiple, min_rows)
    n, prompt_width, completion_width = (
        inputs["prompt_ids"].size(0),
        inputs["prompt_ids"].size(1),
        inputs["completion_ids"].size(1),
    )
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.size(0) != n:
            out[key] = value
            continue
        value = value[rows]
        if key in ("prompt_ids", "prompt_mask"):
            value = value[:, prompt_width - keep_prompt :]
        elif key in COMPLETION_KEYS and value.dim() > 1 and value.size(1) == completion_width:
            value = value[:, :end]
        out[key] = value
    return out


def unpadded_logps(
    logps_of: Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor],
    batch: dict[str, Any],
    batch_size: int,
    multiple: int | None = None,
) -> torch.Tensor:
    """`logps_of(input_ids, attention_mask, logits_to_keep, batch_size)` (a no-grad forward: old or reference
    log-probs) over the batch's completion columns, `batch_size` rows at a time, each chunk without its
    padding (`micro_batch_extent`); zero where nothing is trained, which every use of these log-probs masks."""
    n, width = batch["completion_ids"].shape
    out: torch.Tensor | None = None
    for start in range(0, n, batch_size):
        chunk = {key: batch[key][start : start + batch_size] for key in SEQUENCE_KEYS}
        rows, keep_prompt, end = micro_batch_extent(chunk, multiple)
        input_ids = torch.cat([chunk["prompt_ids"][rows, -keep_prompt:], chunk["completion_ids"][rows, :end]], 1)
        attention_mask = torch.cat([chunk["prompt_mask"][rows, -keep_prompt:], chunk["completion_mask"][rows, :end]], 1)
        logps = logps_of(input_ids, attention_mask, end, len(rows))
        if out is None:
            out = torch.zeros(n, width, dtype=logps.dtype, device=logps.device)
        out[start + rows, :end] = logps
    assert out is not None  # a batch always has a row (the padding rows at least)
    return out


def per_row_logps(
    forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """TRL's `_get_per_token_logps_and_entropies` (`forward`, same arguments and results) run one row at a time
    on that row's own tokens: a padded batch makes transformers build a dense B x 1 x W x W attention mask
    (~10 GB as bool at 5 x 45k tokens) and keeps SDPA off its flash path; a row without padding needs no mask.
    A row's tokens are contiguous (left-padded prompt, right-padded completion); its columns outside them are 0,
    which every use masks. The same log-probs as the padded forward (RoPE sees relative positions only).
    Always one forward per row, even without padding: DDP broadcasts buffers and ZeRO-3 / FSDP gather weights
    in every forward, so processes holding as many rows must run as many forwards, or they wait forever."""
    width = input_ids.size(1)
    first_kept = width - logits_to_keep
    logps, entropies, aux = [], [], []
    for row in range(input_ids.size(0)):
        real = attention_mask[row].nonzero()
        start, end = int(real.min()), int(real.max()) + 1
        keep = end - max(start, first_kept)  # the row's own completion columns (TRL pads every row to one)
        if keep <= 0:
            raise ValueError(f"row {row} has no completion token")
        ids, mask = input_ids[row : row + 1, start:end], attention_mask[row : row + 1, start:end]
        row_logps, row_entropy, row_aux = forward(ids, mask, keep, **{**kwargs, "batch_size": 1})
        pad = (max(0, start - first_kept), width - end)
        logps.append(torch.nn.functional.pad(row_logps, pad))
        if row_entropy is not None:
            entropies.append(torch.nn.functional.pad(row_entropy, pad))
        if row_aux is not None:
            aux.append(row_aux)
    return torch.cat(logps), torch.cat(entropies) if entropies else None, torch.stack(aux).mean() if aux else None
