"""The probe family: keep exact running totals of a few keys across a long, noisy update stream.

A cheap diagnostic of lossy memory: the values needed at the end are shown once each, far
apart, among many irrelevant keys (some one character away from a tracked key), and late
corrections replace earlier values, so a summary that kept only running totals or dropped a
batch gets the answer wrong.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from rl_compaction_envs.probe import stream
from rl_compaction_envs.probe.oracle import ProbeOracle

from rl_compaction.core.state import State
from rl_compaction.harness.tasks import (
    Difficulty,
    Oracle,
    Task,
    TaskFamily,
    ToolError,
    check_arguments,
    function_tool,
    parse_json_answer,
    split_seed,
)

# Keys are LETTER DIGIT LETTER (no I or O, which read like 1 and 0). The first letter is
# split-specific, so no key of one split can occur in another.
_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
_FIRST_LETTERS = {"train": "ABCDEFGH", "validation": "JKLMNPQR", "test": "STUVWXYZ"}
KEY_POOLS: dict[str, tuple[str, ...]] = {
    split: tuple(f"{a}{d}{b}" for a in firsts for d in "0123456789" for b in _LETTERS)
    for split, firsts in _FIRST_LETTERS.items()
}
#: most distinct keys one batch may hold (noise keys are drawn without replacement per batch).
_MAX_LINES_PER_BATCH = 1000
_VALUES = [v for v in range(-40, 91) if v != 0]


@dataclass(frozen=True)
class _Level:
    """What difficulty level adds: keys to track, look-alike keys, revisions, stream length."""

    tracked: int
    near_miss: int
    corrections: int  # corrections of tracked keys' updates
    rechained: int  # of those, how many get corrected a second time later
    noise_corrections: int  # corrections of untracked (often look-alike) keys
    batches: int  # batch count at scale 1.0
    lines: int  # total body lines at scale 1.0 (about 6 o200k tokens each)


_LEVELS = {
    1: _Level(tracked=3, near_miss=0, corrections=2, rechained=0, noise_corrections=2, batches=30, lines=6800),
    2: _Level(tracked=5, near_miss=2, corrections=4, rechained=1, noise_corrections=4, batches=36, lines=7500),
    3: _Level(tracked=8, near_miss=4, corrections=8, rechained=3, noise_corrections=8, batches=44, lines=9000),
}
_TRACKED_RATE = 0.6  # chance that a tracked (or look-alike) key is updated in a given batch

NEXT_BATCH_TOOL = function_tool(
    "next_batch",
    "Return batch `index` (1-based) of the update stream, or END once index is one past the last batch.",
    {"index": {"type": "integer", "description": "Batch number, starting at 1."}},
    ["index"],
)

INSTRUCTIONS = """\
You keep exact running totals of a few keys across a long stream of updates.
Read the stream with the next_batch tool: next_batch(index=1), next_batch(index=2), ... until it \
returns END. Each batch lists updates KEY=VALUE: add VALUE (an integer, possibly negative) to \
KEY's total. A key appears at most once per batch. Most keys are noise; a key that differs from \
a tracked key by one character is a different key. A line \
"correction: KEY at batch I should have been V" replaces the value of KEY's update in batch I \
by V; if the same update is corrected more than once, the latest correction wins.
When you have read every batch, call submit once with answer set to a JSON object that maps \
every tracked key to its integer total, e.g. {"<first key>": 12, "<second key>": -4}."""


class ProbeTask(Task):
    """One generated stream. `_outputs` (batch texts) are revealed only through next_batch and
    `_expected` (the true totals) only through score; the oracle is built without either."""

    family: ClassVar[str] = "probe"
    instructions = INSTRUCTIONS

    def __init__(self, keys: list[str], outputs: list[str], expected: dict[str, int]):
        self.keys = keys
        self._outputs = outputs
        self._expected = expected

    @property
    def n_batches(self) -> int:
        return len(self._outputs)

    def tools(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(NEXT_BATCH_TOOL)]

    def initial_state(self) -> State:
        statement = "\n".join(
            [
                stream.tracked_line(self.keys),
                "Compute the final total of each tracked key over the whole update stream.",
                "Read it with next_batch(index=1), next_batch(index=2), ... until a call returns END.",
                "KEY=VALUE adds VALUE to KEY's total; every other key, including look-alikes that differ "
                "by one character, is noise.",
                '"correction: KEY at batch I should have been V" replaces the value of KEY\'s update in '
                "batch I by V (the latest correction wins).",
                "Submit answer = JSON object of every tracked key's integer total, e.g. {\"" + self.keys[0] + '": 12}.',
            ]
        )
        return [{"type": "message", "role": "user", "content": statement}]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name != NEXT_BATCH_TOOL["name"]:
            raise ToolError(f"unknown tool {name!r}; this task's tool is next_batch")
        index = check_arguments(name, arguments, {"index": int})["index"]
        if index < 1:
            raise ToolError(f"batch index {index} is out of range; batches start at 1")
        if index > self.n_batches + 1:
            raise ToolError(
                f"batch index {index} is out of range: the stream has {self.n_batches} batches "
                f"and next_batch({self.n_batches + 1}) returns END"
            )
        if index == self.n_batches + 1:
            return stream.end_text(self.n_batches)
        return self._outputs[index - 1]

    def score(self, answer: str) -> float:
        """Fraction of tracked keys whose submitted total is exactly right; 0 if unparsable."""
        parsed = parse_json_answer(answer)
        if parsed is None:
            return 0.0
        right = sum(1 for k, v in self._expected.items() if _is_int(parsed.get(k)) and parsed[k] == v)
        return right / len(self._expected)

    def oracle(self) -> Oracle:
        return ProbeOracle()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _near_misses(rng: random.Random, tracked: list[str], pool: set[str], count: int) -> list[str]:
    """Keys one character (digit or last letter) away from a tracked key, all within `pool`."""
    found: list[str] = []
    while len(found) < count:
        a, d, b = rng.choice(tracked)
        if rng.random() < 0.5:
            cand = a + rng.choice([x for x in "0123456789" if x != d]) + b
        else:
            cand = a + d + rng.choice([x for x in _LETTERS if x != b])
        if cand in pool and cand not in tracked and cand not in found:
            found.append(cand)
    return found


def generate(rng: random.Random, split: str, difficulty: Difficulty) -> ProbeTask:
    """Build one instance: batches of updates, corrections placed in later batches, the truth."""
    lv = _LEVELS[difficulty.level]
    pool = KEY_POOLS[split]
    pool_set = set(pool)
    total_lines = lv.lines * difficulty.scale
    n_batches = max(3, round(lv.batches * math.sqrt(difficulty.scale)), math.ceil(total_lines / _MAX_LINES_PER_BATCH))
    tracked = rng.sample(pool, lv.tracked)
    near = _near_misses(rng, tracked, pool_set, lv.near_miss)
    noise_pool = [k for k in pool if k not in tracked and k not in near]
    lines_per_batch = min(_MAX_LINES_PER_BATCH, max(lv.tracked + lv.near_miss + 4, round(total_lines / n_batches)))

    # values[(key, batch)] = original update; every tracked key gets at least one update.
    values: dict[tuple[str, int], int] = {}
    batch_keys: list[list[str]] = []
    for _ in range(n_batches):
        keys = [k for k in tracked + near if rng.random() < _TRACKED_RATE]
        keys += rng.sample(noise_pool, max(0, lines_per_batch - len(keys)))
        batch_keys.append(keys)
    for k in tracked:
        if not any(k in keys for keys in batch_keys):
            batch_keys[rng.randrange(n_batches)].append(k)
    for b, keys in enumerate(batch_keys, start=1):
        for k in keys:
            values[(k, b)] = rng.choice(_VALUES)

    # Corrections: (key, target batch) corrected in a strictly later batch; some twice.
    extra: list[list[str]] = [[] for _ in range(n_batches)]
    final = dict(values)
    correctable = [(k, b) for (k, b) in values if b < n_batches]
    tracked_targets = [kb for kb in correctable if kb[0] in tracked]
    near_targets = [kb for kb in correctable if kb[0] in near]
    other_targets = [kb for kb in correctable if kb[0] not in tracked and kb[0] not in near]
    n_near = min(len(near_targets), lv.noise_corrections // 2)
    chosen = rng.sample(tracked_targets, min(lv.corrections, len(tracked_targets)))
    chosen += rng.sample(near_targets, n_near) + rng.sample(other_targets, lv.noise_corrections - n_near)
    for i, (key, target) in enumerate(chosen):
        if i < lv.rechained and target <= n_batches - 2:
            first = rng.randint(target + 1, n_batches - 1)
            at_batches = [first, rng.randint(first + 1, n_batches)]
        else:
            at_batches = [rng.randint(target + 1, n_batches)]
        for at in at_batches:
            value = rng.choice([v for v in _VALUES if v != final[(key, target)]])
            final[(key, target)] = value
            extra[at - 1].append(stream.correction_line(key, target, value))

    outputs = []
    for b, keys in enumerate(batch_keys, start=1):
        lines = [stream.update_line(k, values[(k, b)]) for k in keys] + extra[b - 1]
        rng.shuffle(lines)
        outputs.append(stream.render_batch(b, lines))
    expected = dict.fromkeys(tracked, 0)
    for (k, _), v in final.items():
        if k in expected:
            expected[k] += v
    return ProbeTask(tracked, outputs, expected)


class ProbeFamily(TaskFamily):
    """Seeded generator of probe tasks (see the module docstring)."""

    name: ClassVar[str] = "probe"
    description: ClassVar[str] = (
        "Running totals of a few keys over a long noisy update stream with look-alike keys and "
        "late corrections; answer is a JSON object of exact totals."
    )
    key_pools: ClassVar[dict[str, tuple[str, ...]]] = KEY_POOLS

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> ProbeTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        return generate(rng, split, difficulty)
