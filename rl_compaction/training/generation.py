"""Model turns for GRPO rollouts through TRL's generation (vLLM colocate or server, or transformers).

TRL generates once per batch of prompts; an episode here asks for a turn up to `max_turns` times, so what
TRL does around each call would be paid per turn. This module keeps it to once per generation phase:

- Colocated vLLM with sleep mode: TRL wakes the engine, pushes the weights and resets the prefix cache
  before every `generate`, and puts it to sleep (level 2: weights dropped) after it. `engine_awake` wakes
  and syncs once, keeps the engine awake (and its prefix cache, which the next turn's prompt extends)
  for all turns of the phase, and puts it to sleep once at the end, for the optimizer step.
- A process whose episodes have all ended still joins the collective generation while others run
  (ZeRO-3 / FSDP gather parameters in every forward; server mode gathers prompts): its dummy turn
  decodes one token, not `max_completion_length`.
- Server mode: TRL slices the server's answers as if every process sent as many prompts as this one; in a
  rollout they differ by process (episodes end at different turns). `server_generate` sends the gathered
  prompts, dummies left out, and hands each process its own answers by the gathered counts.

TRL's private members are reached through `rl_compaction.training.trl_compat`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from accelerate.utils import broadcast_object_list, gather_object

from rl_compaction.harness.policy import Policy, Turn, turns_from_ids
from rl_compaction.policies.prompts import PromptBuilder
from rl_compaction.training.trl_compat import generate_single_turn, sync_if_stale


def _sleeps(trainer: Any) -> bool:
    return bool(trainer.use_vllm and trainer.vllm_mode == "colocate" and trainer.vllm_generation.enable_sleep_mode)


@contextmanager
def engine_awake(trainer: Any) -> Iterator[None]:
    """One generation phase (all turns of a batch of episodes) with a colocated sleeping vLLM engine
    awake throughout: woken and synced once at the start, asleep again at the end. A no-op otherwise."""
    if not _sleeps(trainer):
        yield
        return
    generation = trainer.vllm_generation
    sync_if_stale(trainer)  # TRL's sync_weights wakes the weights first
    if getattr(generation, "_llm_weights_sleeping", False):  # synced this step, then put to sleep: push again
        generation.sync_weights()
    generation.llm.wake_up(tags=["kv_cache"])
    generation.enable_sleep_mode = False  # TRL's generate then neither wakes, syncs nor sleeps per turn
    try:
        yield
    finally:
        generation.enable_sleep_mode = True
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True


@contextmanager
def _one_token(trainer: Any) -> Iterator[None]:
    """Generation limited to one new token (an idle process's dummy turn)."""
    owner, name = (
        (trainer.vllm_generation, "max_completion_length")
        if trainer.use_vllm
        else (trainer.generation_config, "max_new_tokens")
    )
    before = getattr(owner, name)
    setattr(owner, name, 1)
    try:
        yield
    finally:
        setattr(owner, name, before)


def server_generate(trainer: Any, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
    """vLLM server mode for processes that send different numbers of prompts (none when idle): the main
    process sends every process's prompts in one request and returns each its own answers."""
    generation = trainer.vllm_generation
    sync_if_stale(trainer)  # a collective: every process takes part
    counts = gather_object([len(prompts)])
    everything = gather_object(prompts)
    payload: list[Any] = [None]
    if trainer.accelerator.is_main_process:
        answers: dict[str, Any] = {"completion_ids": [], "logprobs": []}
        if everything:
            answers = generation.vllm_client.generate(
                prompts=everything,
                n=1,
                repetition_penalty=generation.repetition_penalty,
                temperature=generation.temperature,
                top_p=generation.top_p,
                top_k=generation.top_k,
                min_p=0.0 if generation.min_p is None else generation.min_p,
                max_tokens=generation.max_completion_length,
                logprobs=generation.logprobs,
                structured_outputs_regex=generation.structured_outputs_regex,
                generation_kwargs=generation.generation_kwargs,
            )
        payload = [(answers["completion_ids"], answers["logprobs"])]
    broadcast_object_list(payload, from_process=0)
    completions, logprobs = payload[0]
    start = sum(counts[: trainer.accelerator.process_index])
    mine = slice(start, start + len(prompts))
    return completions[mine], [[lp[0] for lp in seq] for seq in logprobs[mine]]


def generate(trainer: Any, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
    """One turn per prompt through TRL's generation; with no prompt (this process is done, others are not)
    the process joins the collective generation with a one-token dummy turn and gets nothing back."""
    if trainer.use_vllm and trainer.vllm_mode == "server":
        return server_generate(trainer, prompts)
    if not prompts:
        with _one_token(trainer):
            generate_single_turn(trainer, [[trainer.processing_class.pad_token_id]])
        return [], []
    return generate_single_turn(trainer, prompts)


class TRLGenerationPolicy(Policy):
    """Samples turns through the trainer's own generation path (vLLM or transformers), so
    weight syncing, ZeRO-3 gathering and sampling settings are TRL's."""

    def __init__(self, trainer: Any):
        self.trainer, self.tokenizer, self.name = trainer, trainer.processing_class, "trl"
        # token in, token out: a prompt extends the episode's last prompt and sampled ids until an edit, so rows
        # are cut only there; the env's counter renders with the config's chat_template_kwargs, as the prompts must
        self.prompts = PromptBuilder(trainer.counter, {*trainer.eos_token_ids, self.tokenizer.pad_token_id})

    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        prompts = self.prompts.prompt_ids(observations)
        completions, logprobs = generate(self.trainer, prompts)
        if not prompts:  # this process is done but others are not: it joined the collective generation
            return []
        turns = turns_from_ids(self.tokenizer, prompts, completions, logprobs)
        self.prompts.remember(observations, turns)
        return turns


def mark_fsdp2_for_generation(model: Any) -> None:
    """transformers' generate syncs the processes of a sharded model (`synced_gpus`) only when it recognises
    FSDP: FSDP1's wrapper class, or the flag its own FSDP2 setup sets. accelerate's `fully_shard` sets no flag,
    so processes that sample different lengths would wait on each other's gathers forever; set it."""
    model._is_fsdp_managed_module = True
