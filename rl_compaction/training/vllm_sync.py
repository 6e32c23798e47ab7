"""Weight sync for colocated vLLM on its CPU backend (`use_vllm`, `vllm_mode: colocate`).

TRL pushes each trained tensor into the engine with `model.load_weights([(name, tensor)])`. On vLLM's
CPU backend that fails at the first linear layer, `'Parameter' object has no attribute
'weight_loader'` (vllm/model_executor/layers/linear.py): after loading, the CPU backend repacks every
linear weight for its GEMM kernels into a new Parameter, which has no loader. vLLM's own in-place
update, `reload_weights(weights_iterator=...)` (vllm/v1/worker/gpu_model_runner.py, which the CPU
model runner inherits), restores each layer's checkpoint layout, loads the new tensors through the
usual loaders and repacks them. This module makes TRL's sync use it.

One more thing the reload needs: with tied word embeddings the trainer's model lists the embedding
once, while vLLM keeps the output head as a layer of its own. A head left without weights keeps its
old kernel tensors (vLLM logs "ParallelLMHead: Failed to load weights"), so the head is sent too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def runs_on_cpu() -> bool:
    """Whether vLLM's platform here is its CPU backend (the one whose linear layers are repacked)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def tied_head_name(model: Any) -> str | None:
    """The vLLM name of the output head's weight when it is tied to the input embedding, else None."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embedding is None or head.weight is not embedding.weight:
        return None
    name = next(n for n, module in model.named_modules() if module is head)
    return name.removeprefix("base_model.model.") + ".weight"


def with_tied_head(weights: Iterator[tuple[str, torch.Tensor]], model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights` (TRL's named tensors, one at a time), plus the tied output head's weight beside the
    embedding it shares."""
    head = tied_head_name(model)
    embedding = model.get_input_embeddings().weight if head is not None else None
    for name, tensor in weights:
        yield name, tensor
        if embedding is not None and tensor.data_ptr() == embedding.data_ptr():
            yield head, tensor


def sync_weights_by_reload(generation: Any) -> None:
    """A `trl.generation.vllm_generation.VLLMGeneration.sync_weights` for colocate mode on CPU: the
    trainer's weights go into the engine through vLLM's `reload_weights`, then its prefix cache
    (computed with the old weights) is dropped."""
    if generation.enable_sleep_mode:
        raise ValueError("vllm_enable_sleep_mode is not supported by vLLM's CPU backend; set it to false")
    weights = with_tied_head(generation._iter_named_params(), generation.model)
    generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
    generation.llm.reset_prefix_cache()
