"""The archive family: the third CPU toy, kept out of training to measure transfer.

The agent opens an archive's boxes one by one with `open` (no arguments) until it returns EMPTY,
then submits the word on its box's `label:` line. The label sits on a short box, the first or the
second; every other box is filler (at level 2 and 3, with labels of other boxes inside). As in
`vault` and `courier`, the boxes outgrow the context window and the label is shown once, so only an
edit that keeps it by its content lets the agent answer.

Its tool, wording, marker, filler and end text differ from both other toys, so a policy trained on
them meets it as a new family with the same need: `configs/reproduce/two-families-small.yaml`
trains on `vault` and `courier` and plays this one held out. Key words and split numbers are the
vault's, so it holds no token the policy has not seen.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from rl_compaction_envs.vault.family import KEY_WORDS, VAULT_NUMBERS, LogTask, log_ended

from rl_compaction.core.state import State, text_of
from rl_compaction.harness.tasks import Difficulty, Oracle, TaskFamily, function_tool, split_seed

FILLER = (
    "a dusty stack of old letters and faded photos sat under the stairs beside the broken chair and the "
    "cold stove in the quiet house at the far end of the lane"
).split()
OPEN_TOOL = function_tool("open", "Open the next box of the archive; returns EMPTY after the last box.", {}, [])
LABEL = re.compile(r'^label: box (\d+) holds "(\w+)"\.$', re.MULTILINE)
END_TEXT = "EMPTY: no boxes left."
#: boxes at scale 1.0 and filler words per box (about the tokens of a vault level-1 page)
BOXES, WORDS = 120, 250

INSTRUCTIONS = """\
Open the archive's boxes one by one with open() until it returns EMPTY, then call submit with the \
word your box's label holds, e.g. "silver". The labels of other boxes do not count."""


class ArchiveTask(LogTask):
    """One archive; the word is revealed only on its box's label and checked by `score`."""

    family: ClassVar[str] = "archive"
    instructions = INSTRUCTIONS
    tool = OPEN_TOOL
    end_text = END_TEXT

    def __init__(self, box: str, boxes: list[str], word: str):
        super().__init__(boxes)
        self.box = box
        self.word = word

    def initial_state(self) -> State:
        text = f"Look for box {self.box} in the archive. Open boxes with open() until EMPTY, then submit its word."
        return [{"type": "message", "role": "user", "content": text}]

    def score(self, answer: str) -> float:
        """1 for the word (case and surrounding spaces aside), else 0."""
        return float(isinstance(answer, str) and answer.strip().lower() == self.word)

    def oracle(self) -> Oracle:
        return ArchiveOracle()


def read_label(state: State) -> tuple[str | None, str | None]:
    """The box the task statement names and the word its label in the State holds."""
    box, word = None, None
    for item in state:
        if item.get("type", "message") == "message" and item.get("role") == "user" and box is None:
            m = re.search(r"Look for box (\d+)", text_of(item.get("content", "")))
            box = m.group(1) if m else None
        elif item.get("type") == "function_call_output":
            labels = LABEL.finditer(text_of(item.get("output", "")))
            word = next((m.group(2) for m in labels if m.group(1) == box), word)
    return box, word


#: the targeted edit: keep the task, every box with a label and the pending call; drop the rest
EVOLVE_CODE = (
    'return state.filter((x, i) => /label:|^Look/.test(x.content ?? x.output ?? state[i + 1]?.output ?? "label:"));'
)


class ArchiveOracle(Oracle):
    """Opens boxes until EMPTY is in its State, then submits the word its State still holds."""

    def act(self, state: State) -> list[dict[str, Any]]:
        if not log_ended(state, END_TEXT):
            return [self.function_call(state, "open", {})]
        return [self.function_call(state, "submit", {"answer": read_label(state)[1] or ""})]

    def evolve_code(self, state: State) -> str:
        return EVOLVE_CODE


def _filler(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(n))


def generate(rng: random.Random, split: str, difficulty: Difficulty) -> ArchiveTask:
    names = VAULT_NUMBERS[split]
    box, word = rng.choice(names), rng.choice(KEY_WORDS)
    others = [n for n in names if n != box]
    volume = BOXES * difficulty.scale  # filler boxes' worth of text
    count = max(2, round(volume))
    # below two boxes' worth the archive keeps two filler boxes and they get shorter, so the volume keeps scaling
    words = WORDS if round(volume) >= 2 else max(10, round(WORDS * volume / 2))
    boxes = [_filler(rng, words) for _ in range(count)]
    # decoys (levels 2-3): labels of other boxes at the end of the first filler boxes
    for i in range(difficulty.level - 1):
        boxes[i] += f'\nlabel: box {rng.choice(others)} holds "{rng.choice(KEY_WORDS)}".'
    boxes.insert(rng.randrange(2), f'{_filler(rng, 8)}\nlabel: box {box} holds "{word}".')
    return ArchiveTask(box, [f"box {i}\n{text}" for i, text in enumerate(boxes, start=1)], word)


class ArchiveFamily(TaskFamily):
    """Seeded generator of archives (see the module docstring)."""

    name: ClassVar[str] = "archive"
    description: ClassVar[str] = (
        "Carry a box's word, shown once on the first or second box of an archive, through many boxes of "
        "filler; the third CPU toy, held out of the two-family recipe."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> ArchiveTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        return generate(rng, split, difficulty)
