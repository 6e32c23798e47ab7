"""Benchmark: one optimizer step of CompactionGRPOTrainer against TRL's plain GRPOTrainer.

Both train the tiny random model (`resolve_model("tiny")`) on CPU, side by side in one run,
with the same GRPO settings (num_generations, batch size, max_completion_length, loss_type,
learning rate, no vLLM, no gradient checkpointing) on the same prompts: our trainer runs
single-segment episodes (`max_turns=1`: one prompt + one completion = one row) of the
`probe` family, and TRL gets, for the same task seeds in the same dataset order, the env's
first observation rendered with `chat.render_prompt` as a plain-text prompt (TRL
tokenises it to the same ids as `chat.prompt_ids`; the script checks this on the
prompts each trainer actually generated from). TRL scores with a cheap length reward; ours
runs the episode and computes the episode reward.

The two trainers run in threads but never at once: they take optimizer steps in turn (TRL,
ours, TRL, ...), so load from elsewhere on the machine falls on both alike. Wall time per
optimizer step is the median over the steps after a warm-up step. Timers around
the trainers' own methods split it into phases: generation (`_generate_single_turn`, the same
code in both), the rest of `_generate_and_score_completions` (ours: env reset and step with
their token accounting, prompt rendering, completion parsing, reward, rows; TRL: prompt
tokenisation and rewards), and loss + backward + optimizer (the step minus generate-and-score).

    python scripts/bench_trainer.py [--steps 5] [--batch-size 8] [--num-generations 4]
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import tempfile
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
import transformers
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from rl_compaction import chat
from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.harness.env import CompactionEnv
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.models.registry import resolve_model
from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer, task_dataset

FAMILY = "probe"
EPISODE = EpisodeSpec(family=FAMILY, scale=0.06, level=1, context_window=6000, max_turns=1)


class Timers:
    """Seconds accumulated per phase name, plus what generation was asked to start from."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.prompts: list[list[int]] = []
        self.completion_tokens: list[int] = []

    def wrap(self, name: str, fn: Callable) -> Callable:
        """`fn` with its wall time added to phase `name` on every call."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[name] += time.perf_counter() - start

        return timed

    def wrap_generation(self, trainer: GRPOTrainer) -> None:
        """Time `_generate_single_turn` and keep the prompt ids and completion lengths it saw."""
        inner = trainer._generate_single_turn

        def generate(prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            completion_ids, logprobs = inner(prompt_ids, *args, **kwargs)
            self.total["generation"] += time.perf_counter() - start
            self.prompts.extend(list(p) for p in prompt_ids)
            self.completion_tokens.extend(len(c) for c in completion_ids)
            return completion_ids, logprobs

        trainer._generate_single_turn = generate


class Turnstile:
    """Lets trainers running in threads take optimizer steps strictly in turn, so that load from
    elsewhere on the machine falls on both alike and no two steps ever overlap."""

    def __init__(self, names: list[str]):
        self.names, self.turn, self.done = names, 0, set()
        self.cond = threading.Condition()

    def wait(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.names[self.turn] == name)

    def pass_on(self, name: str, finished: bool = False) -> None:
        """Hand the turn to the next trainer that has not finished (keep it if none is left)."""
        with self.cond:
            if finished:
                self.done.add(name)
            if self.names[self.turn] != name:
                return
            for step in range(1, len(self.names) + 1):
                candidate = (self.turn + step) % len(self.names)
                if self.names[candidate] not in self.done:
                    self.turn = candidate
                    break
            self.cond.notify_all()


class StepClock(TrainerCallback):
    """Wall time of each optimizer step (from taking the turn to the step's end) and the phase
    totals within it; hands the turn on after every step."""

    def __init__(self, label: str, timers: Timers, total_steps: int, turnstile: Turnstile):
        self.label, self.timers, self.total_steps, self.turnstile = label, timers, total_steps, turnstile
        self.steps: list[dict[str, float]] = []
        self._start = 0.0
        self._snapshot: dict[str, float] = {}

    def _take_turn(self) -> None:
        self.turnstile.wait(self.label)
        self._start, self._snapshot = time.perf_counter(), dict(self.timers.total)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._take_turn()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        phases = {k: v - self._snapshot.get(k, 0.0) for k, v in self.timers.total.items()}
        phases["step"] = time.perf_counter() - self._start
        self.steps.append(phases)
        kind = "warm-up" if len(self.steps) == 1 else "measured"
        print(
            f"  [{self.label}] step {len(self.steps)}/{self.total_steps} ({kind}): {phases['step']:.2f} s", flush=True
        )
        self.turnstile.pass_on(self.label)
        self._take_turn()


@dataclass
class Bench:
    """A trainer with its step clock and phase timers."""

    trainer: GRPOTrainer
    clock: StepClock
    timers: Timers


def length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A cheap reward for TRL (longer completions score higher), so its scoring costs next to nothing."""
    return [len(c) / 100.0 for c in completions]


def load(path: str) -> tuple[Any, Any]:
    """Fresh tokenizer and model from the same folder, so both trainers start from identical weights."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    return tokenizer, AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)


def first_prompts(tokenizer: Any, rows: Dataset) -> list[str]:
    """The env's first observation of each task row, rendered as the model sees it."""
    env = replace(EPISODE, split="train").make_env(counter=ChatTemplateCounter(tokenizer))
    texts = []
    for row in rows:
        obs, _ = env.reset(seed=int(row["task_seed"]))
        texts.append(chat.render_prompt(tokenizer, obs["instructions"], obs["tools"], obs["state"]))
    return texts


@contextmanager
def timed_module_functions(timers: Timers) -> Iterator[None]:
    """Time prompt rendering and completion parsing of our policy (module-level functions it calls),
    restoring them afterwards."""
    originals = {"prompt_ids": chat.prompt_ids, "parse_completion": chat.parse_completion}
    chat.prompt_ids = timers.wrap("prompt render + tokenise", chat.prompt_ids)
    chat.parse_completion = timers.wrap("completion parsing", chat.parse_completion)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(chat, name, fn)


def build_ours(path: str, common: dict[str, Any], steps: int, tasks: int, turnstile: Turnstile) -> Bench:
    """Our trainer on probe episodes, with timers around env, rendering, parsing, reward and rows."""
    tokenizer, model = load(path)
    args = CompactionGRPOConfig(**common, train_tasks=tasks)
    timers = Timers()
    clock = StepClock("ours", timers, steps, turnstile)
    trainer = CompactionGRPOTrainer(model, args, processing_class=tokenizer, callbacks=[clock], episode=EPISODE)
    timers.wrap_generation(trainer)
    trainer._generate_and_score_completions = timers.wrap("generate + score", trainer._generate_and_score_completions)
    trainer.reward_fn = timers.wrap("reward", trainer.reward_fn)
    trainer._rows_to_tensors = timers.wrap("rows + tensors", trainer._rows_to_tensors)
    trainer._log_episode_metrics = timers.wrap("episode metrics", trainer._log_episode_metrics)
    make_envs = trainer._make_envs

    def timed_envs(inputs: list[dict[str, Any]], split: str) -> list[CompactionEnv]:
        envs = make_envs(inputs, split)
        for env in envs:
            env.reset = timers.wrap("env reset (task + count)", env.reset)
            env.step = timers.wrap("env step (turn + ledger)", env.step)
        return envs

    trainer._make_envs = timers.wrap("env construction", timed_envs)
    return Bench(trainer, clock, timers)


def build_trl(path: str, common: dict[str, Any], steps: int, tasks: int, turnstile: Turnstile) -> Bench:
    """TRL's GRPOTrainer on the first observations of the same tasks, as plain-text prompts."""
    tokenizer, model = load(path)
    reference = CompactionGRPOConfig(**common, train_tasks=tasks)
    rows = task_dataset(EPISODE.families, EPISODE.family_weights, "train", reference.train_tasks, reference.seed)
    dataset = Dataset.from_dict({"prompt": first_prompts(tokenizer, rows)})
    timers = Timers()
    clock = StepClock("TRL", timers, steps, turnstile)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[length_reward],
        args=GRPOConfig(**common),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    timers.wrap_generation(trainer)
    trainer._generate_and_score_completions = timers.wrap("generate + score", trainer._generate_and_score_completions)
    trainer._tokenize_prompts = timers.wrap("prompt render + tokenise", trainer._tokenize_prompts)
    trainer._calculate_rewards = timers.wrap("reward", trainer._calculate_rewards)
    return Bench(trainer, clock, timers)


def train_in_turns(benches: list[Bench], turnstile: Turnstile) -> None:
    """Train all trainers in threads, one optimizer step at a time each, in turn."""
    errors: dict[str, BaseException] = {}

    def target(bench: Bench) -> None:
        try:
            bench.trainer.remove_callback(PrinterCallback)  # our clock prints the progress
            bench.trainer.train()
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread below
            errors[bench.clock.label] = error
        finally:
            turnstile.pass_on(bench.clock.label, finished=True)

    threads = [threading.Thread(target=target, args=(b,), name=b.clock.label) for b in benches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for label, error in errors.items():
        raise RuntimeError(f"the {label} trainer failed") from error


#: phases only our trainer has: the env (task build, token accounting, ledger) and episode bookkeeping
OURS_ONLY = (
    "env construction",
    "env reset (task + count)",
    "env step (turn + ledger)",
    "completion parsing",
    "reward",
    "rows + tensors",
    "episode metrics",
)


def median(steps: list[dict[str, float]], key: str) -> float:
    return statistics.median(s.get(key, 0.0) for s in steps)


def report(ours: Bench, trl: Bench) -> None:
    """Check the prompts were the same, then print the table of median phase times."""
    our_clock, our_timers, trl_clock, trl_timers = ours.clock, ours.timers, trl.clock, trl.timers
    if sorted(our_timers.prompts) != sorted(trl_timers.prompts):
        raise RuntimeError("the two trainers generated from different prompt ids; the comparison is not fair")
    lengths = [len(p) for p in our_timers.prompts]
    print(
        f"\nprompts: identical ids in both trainers, {len(lengths)} generations, "
        f"{min(lengths)}-{max(lengths)} tokens; completion tokens (mean): ours "
        f"{statistics.mean(our_timers.completion_tokens):.1f}, TRL {statistics.mean(trl_timers.completion_tokens):.1f}"
    )

    measured = {"ours": our_clock.steps[1:], "TRL": trl_clock.steps[1:]}
    for steps in measured.values():
        for s in steps:
            # every other timed phase runs inside generate + score, none inside another
            inner = sum(v for k, v in s.items() if k not in ("step", "generate + score"))
            s["rest of generate + score"] = s["generate + score"] - inner
            s["loss + backward + optimizer (+ trainer)"] = s["step"] - s["generate + score"]
    phases = [
        "step",
        "generation",
        "prompt render + tokenise",
        "env construction",
        "env reset (task + count)",
        "env step (turn + ledger)",
        "completion parsing",
        "reward",
        "rows + tensors",
        "episode metrics",
        "rest of generate + score",
        "loss + backward + optimizer (+ trainer)",
    ]
    n = len(measured["ours"])
    print(f"\nmedian over {n} measured steps (after 1 warm-up step), seconds")
    print(f"{'phase':<40} {'ours':>8} {'TRL':>8} {'ours - TRL':>11}")
    for phase in phases:
        a, b = median(measured["ours"], phase), median(measured["TRL"], phase)
        print(f"{phase:<40} {a:8.3f} {b:8.3f} {a - b:+11.3f}")
    ours_step, trl_step = median(measured["ours"], "step"), median(measured["TRL"], "step")
    paired = statistics.median(a["step"] / b["step"] for a, b in zip(measured["ours"], measured["TRL"], strict=True))
    extra = statistics.median(sum(s.get(k, 0.0) for k in OURS_ONLY) for s in measured["ours"])
    print(
        f"\nwall time per optimizer step, ours / TRL: {ours_step / trl_step:.2f}x "
        f"({ours_step:.2f} s / {trl_step:.2f} s); median of the ratios of steps taken back to back: {paired:.2f}x"
    )
    print(
        f"our env + accounting + parsing + reward + rows per step: {extra:.3f} s ({extra / ours_step:.1%} of our step)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="measured optimizer steps (after one warm-up step)")
    parser.add_argument("--batch-size", type=int, default=8, help="per-device train batch size (rows per step)")
    parser.add_argument("--num-generations", type=int, default=4, help="G, episodes per task")
    parser.add_argument("--max-completion-length", type=int, default=32)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.batch_size % args.num_generations:
        parser.error("--batch-size must be a multiple of --num-generations")

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("trl").setLevel(logging.ERROR)
    # transformers 5 renames gradient_checkpointing; the setting is still the one asked for
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
    path = str(resolve_model("tiny"))
    total = args.steps + 1
    tasks = total * args.batch_size // args.num_generations  # every step gets fresh tasks
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as out:
        common = dict(
            output_dir=out,
            use_cpu=True,
            seed=0,
            num_generations=args.num_generations,
            per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=1,
            max_completion_length=args.max_completion_length,
            temperature=1.0,
            learning_rate=1e-3,
            loss_type="dapo",
            beta=0.0,
            scale_rewards="group",
            max_steps=total,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16=False,
            gradient_checkpointing=False,
            use_vllm=False,
            disable_tqdm=True,
            log_completions=False,
        )
        print(
            f"tiny model, CPU ({torch.get_num_threads()} threads), {args.batch_size} rows/step, "
            f"G={args.num_generations}, max_completion_length={args.max_completion_length}, loss dapo, "
            f"{total} steps each",
            flush=True,
        )
        turnstile = Turnstile(["TRL", "ours"])
        trl = build_trl(path, common, total, tasks, turnstile)
        ours = build_ours(path, common, total, tasks, turnstile)
        print(
            "training both, one optimizer step each in turn (TRL: plain prompts, length reward; "
            "ours: probe episodes, max_turns=1, episode reward)",
            flush=True,
        )
        with timed_module_functions(ours.timers):
            train_in_turns([trl, ours], turnstile)
    report(ours, trl)


if __name__ == "__main__":
    main()
