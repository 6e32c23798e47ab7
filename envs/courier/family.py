"""The courier family: the second CPU toy, the vault's task in another form.

The agent follows a courier's route stop by stop with `next` (no arguments) until it returns
ARRIVED, then submits its parcel's password: the word on the parcel's `manifest:` line. That
line sits on a short stop among the first three, after a few words of filler, not always the
first (so an edit that keeps "the first page" loses it); every other stop is long filler. As in `vault`, the route
outgrows the context window and the line is shown once, so only an edit that keeps it by its
content (keep the stops with a manifest line, drop the rest) lets the agent answer.

What differs from `vault`, so that a policy trained on both has learned more than one template:
the tool's name, the task's wording, the marker of the fact, where the fact sits, the filler and
the end text. What is shared: the key words (one tiny-model token each, drawn by every split)
and the split-specific entity numbers, so a model meets no unseen token on held-out tasks.

Levels: the number of decoy manifest lines about other parcels (0, 1, 2), on other early stops.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from rl_compaction_envs.vault.family import KEY_WORDS, VAULT_NUMBERS, LogTask, log_ended

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import (
    Difficulty,
    Oracle,
    TaskFamily,
    function_tool,
    split_seed,
)

#: parcel numbers per split: the vault's split-specific numbers (disjoint across splits, same digits)
PARCEL_NUMBERS = VAULT_NUMBERS
FILLER = (
    "the van turned past the market and the driver checked the list again while the radio hummed and "
    "the wipers swept the glass on the wet road down to the depot by the river"
).split()
NEXT_TOOL = function_tool("next", "Go to the next stop of the route; returns ARRIVED after the last stop.", {}, [])
MANIFEST = re.compile(r'^manifest: parcel (\d+) password "(\w+)"\.$', re.MULTILINE)
END_TEXT = "ARRIVED at the last stop."
#: stops at scale 1.0 and filler words per stop (about the tokens of a vault level-1 page: its filler words are longer)
STOPS, WORDS = 120, 250

INSTRUCTIONS = """\
Follow the courier's route stop by stop with next() until it returns ARRIVED, then call submit with \
your parcel's password: the word its manifest gives, e.g. "silver". The manifests of other parcels \
do not count."""


class CourierTask(LogTask):
    """One route; the password is revealed only on one stop and checked by `score`."""

    family: ClassVar[str] = "courier"
    instructions = INSTRUCTIONS
    tool = NEXT_TOOL
    end_text = END_TEXT

    def __init__(self, parcel: str, stops: list[str], password: str):
        super().__init__(stops)
        self.parcel = parcel
        self.password = password

    def initial_state(self) -> State:
        text = f"Deliver parcel {self.parcel}. Follow the route with next() until ARRIVED, then submit its password."
        return [{"type": "message", "role": "user", "content": text}]

    def score(self, answer: str) -> float:
        """1 for the password (case and surrounding spaces aside), else 0: it is one word."""
        return float(isinstance(answer, str) and answer.strip().lower() == self.password)

    def oracle(self) -> Oracle:
        return CourierOracle()


def read_password(state: State) -> tuple[str | None, str | None]:
    """The parcel the task statement names and the password its manifest line in the State gives."""
    parcel, password = None, None
    for item in state:
        if item.get("type", "message") == "message" and item.get("role") == "user" and parcel is None:
            m = re.search(r"Deliver parcel (\d+)", text_of(item.get("content", "")))
            parcel = m.group(1) if m else None
        elif item.get("type") == "function_call_output":
            for m in MANIFEST.finditer(text_of(item.get("output", ""))):
                if m.group(1) == parcel:
                    password = m.group(2)
    return parcel, password


#: the targeted edit: keep the task, every stop with a manifest line and the pending call (a call is
#: judged by its output, which follows it); drop filler stops, harness messages and old evolve round trips
EVOLVE_CODE = (
    "return state.filter((x, i) => "
    '/manifest:|^Deliver/.test(x.content ?? x.output ?? state[i + 1]?.output ?? "manifest:"));'
)


class CourierOracle(Oracle):
    """Goes on until ARRIVED is in its State, then submits the password its State still holds."""

    def act(self, state: State) -> list[dict[str, Any]]:
        if not log_ended(state, END_TEXT):
            return [self.function_call(state, "next", {})]
        return [self.function_call(state, "submit", {"answer": read_password(state)[1] or ""})]

    def evolve_code(self, state: State) -> str:
        return EVOLVE_CODE


def _filler(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(n))


def generate(rng: random.Random, split: str, difficulty: Difficulty) -> CourierTask:
    names = PARCEL_NUMBERS[split]
    parcel = rng.choice(names)
    password = rng.choice(KEY_WORDS)
    others = [n for n in names if n != parcel]
    decoys = difficulty.level - 1
    lines = [f'manifest: parcel {parcel} password "{password}".'] + [
        f'manifest: parcel {rng.choice(others)} password "{rng.choice(KEY_WORDS)}".' for _ in range(decoys)
    ]
    volume = STOPS * difficulty.scale  # filler stops' worth of text
    count = max(3, round(volume))
    # below three stops' worth the route keeps three stops and they get shorter, so the volume keeps scaling
    words = WORDS if round(volume) >= 3 else max(10, round(WORDS * volume / 3))
    stops = [_filler(rng, words) for _ in range(count)]
    # each line is a short stop of its own (a few words, then the line), placed among the first three stops
    for line, at in sorted(zip(lines, rng.sample(range(3), len(lines)), strict=True), key=lambda x: x[1]):
        stops.insert(at, _filler(rng, 12) + "\n" + line)
    return CourierTask(parcel, [f"stop {i}\n{text}" for i, text in enumerate(stops, start=1)], password)


class CourierFamily(TaskFamily):
    """Seeded generator of courier routes (see the module docstring)."""

    name: ClassVar[str] = "courier"
    description: ClassVar[str] = (
        "Carry a parcel's password, shown once on one of the first stops of a route, through many stops "
        "of filler; the second CPU toy, the vault's task in another form."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> CourierTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        return generate(rng, split, difficulty)
