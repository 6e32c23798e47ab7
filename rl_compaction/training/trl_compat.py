"""Every use of TRL's private members, in one place, as read from TRL 1.16.0 (pinned in pyproject.toml).

TRL has no public API for what an episode-level GRPO needs: one sampled turn at a time, its metrics dict,
the weight sync of a colocated vLLM engine, the reference adapter. `CompactionGRPOTrainer` also overrides
three protected hooks of `GRPOTrainer` (`_generate_and_score_completions`, `_compute_loss`,
`_get_per_token_logps_and_entropies`). `PRIVATE_MEMBERS` lists what this module and those overrides rely on;
tests/test_trl_compat.py checks them against the installed TRL, so an upgrade fails there, in one test,
rather than mid-training.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: the TRL version these members were read from
TRL_VERSION = "1.16.0"
#: GRPOTrainer's members relied on: called here, or overridden by CompactionGRPOTrainer
PRIVATE_MEMBERS = (
    "_generate_single_turn",
    "_generate_and_score_completions",
    "_compute_loss",
    "_get_per_token_logps_and_entropies",
)


def log_metric(trainer: Any, mode: str, key: str, value: float) -> None:
    """Add a value to what TRL logs (means over the logging window) for `mode` ("train" or "eval")."""
    trainer._metrics[mode][key].append(value)


def set_metric(trainer: Any, mode: str, key: str, value: float) -> None:
    """Replace a logged value (TRL's own running totals, such as num_tokens)."""
    trainer._metrics[mode][key] = [value]


def generate_single_turn(trainer: Any, prompts: list[list[int]]) -> tuple[list[list[int]], Any]:
    """One turn per prompt (token ids) through TRL's generation: (completion ids, sampled logprobs or None)."""
    return trainer._generate_single_turn(prompts, None, {}, 1)


def sync_if_stale(trainer: Any) -> None:
    """TRL's rule: a vLLM engine gets the trained weights once per optimizer step."""
    if trainer.state.global_step != trainer._last_loaded_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


def replace_weight_sync(trainer: Any, sync: Any) -> None:
    """Have the colocated vLLM engine take the weights through `sync(generation)` instead of TRL's own."""
    generation = trainer.vllm_generation
    generation.sync_weights = lambda: sync(generation)


@contextmanager
def reference_adapter(model: Any) -> Iterator[None]:
    """A PEFT model with its reference adapter active (or every adapter off, TRL's reference without one)."""
    from trl.trainer.grpo_trainer import use_adapter

    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
        yield
