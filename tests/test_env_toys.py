"""The CPU toys beside vault: `courier` (trained on with vault) and `archive` (held out). Each is the vault's
task in another form; only an edit that keeps the fact's line by its content lets the agent answer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from rl_compaction_envs.archive import family as archive
from rl_compaction_envs.courier import family as courier
from rl_compaction_envs.vault.family import KEY_WORDS

from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import evolve_options, make_env, run_oracle_episode
from rl_compaction.harness.tasks import Difficulty, get_family
from rl_compaction.models.registry import resolve_model

TOY = Difficulty(scale=0.2, level=1)


@dataclass(frozen=True)
class Toy:
    name: str
    module: Any
    tool: str
    entity: str  # the task's attribute naming its parcel or box (split-specific)
    answer: str  # the task's attribute holding the word to submit
    line: re.Pattern  # the fact's line, as json.dumps writes it inside a tool output
    first: int  # the fact sits on one of the first `first` pages

    def read(self, state):
        return (self.module.read_password if self.name == "courier" else self.module.read_label)(state)


MANIFEST = re.compile(r'manifest: parcel \d+ password \\*"\w+\\*"\.')
LABEL = re.compile(r'label: box \d+ holds \\*"\w+\\*"\.')
TOYS = [
    Toy("courier", courier, "next", "parcel", "password", MANIFEST, 3),
    Toy("archive", archive, "open", "box", "word", LABEL, 2),
]
BY_NAME = pytest.mark.parametrize("toy", TOYS, ids=[t.name for t in TOYS])


@pytest.fixture(scope="module")
def tiny_counter() -> str:
    return f"hf:{resolve_model('tiny')}"


def _run(toy: Toy, strategy: str, window: int, counter: str, seed: int = 0) -> dict:
    config = EnvConfig(context_window=window, compaction_threshold=min(3200, window), tokenizer=counter)
    env = make_env(toy.name, split="test", strategy=strategy, config=config, difficulty=TOY)
    return run_oracle_episode(env, seed, **evolve_options(strategy))


@BY_NAME
@pytest.mark.parametrize("seed", [0, 1])
def test_only_the_targeted_edit_carries_the_answer_through_the_window(toy: Toy, tiny_counter: str, seed: int):
    unlimited = _run(toy, "none", 1_000_000, tiny_counter, seed)
    assert unlimited["success"] and unlimited["ledger"]["peak_context_tokens"] > 3 * 4500
    evolve = _run(toy, "evolve", 4500, tiny_counter, seed)
    assert evolve["success"] and evolve["ledger"]["compactions"] >= 5 and evolve["ledger"]["evolve_failures"] == 0
    assert evolve["ledger"]["peak_context_tokens"] <= 4500
    assert _run(toy, "none", 4500, tiny_counter, seed)["truncated_reason"] == "context_window"
    for lossy in ("sliding_window", "clear_tool_outputs", "evolve_lossy"):
        assert not _run(toy, lossy, 4500, tiny_counter, seed)["success"], lossy


@BY_NAME
def test_the_fact_sits_on_one_of_the_first_pages_and_not_always_the_first(toy: Toy):
    at = []
    for seed in range(30):
        task = get_family(toy.name).make(seed, "train", TOY)
        lines = [len(toy.line.findall(json.dumps(page))) for page in task._pages]
        assert sum(lines) == 1
        at.append(lines.index(1))
    assert set(at) == set(range(toy.first))


@BY_NAME
def test_decoys_name_others_and_the_oracle_takes_its_own(toy: Toy):
    task = get_family(toy.name).make(5, "test", Difficulty(scale=0.2, level=3))
    state = task.initial_state()
    for i in range(4):
        state += [
            {"type": "function_call", "call_id": f"c{i}", "name": toy.tool, "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": task.call_tool(toy.tool, {})},
        ]
    assert sum(len(toy.line.findall(json.dumps(item.get("output", "")))) for item in state) == 3
    assert toy.read(state) == (getattr(task, toy.entity), getattr(task, toy.answer))


@BY_NAME
def test_score_takes_the_word_alone(toy: Toy):
    task = get_family(toy.name).make(0, "test", TOY)
    word = getattr(task, toy.answer)
    assert task.score(word) == task.score(f" {word.upper()} ") == 1.0
    assert task.score(f"{word} extra") == task.score("") == task.score(None) == 0.0


@BY_NAME
def test_splits_use_disjoint_entities_and_the_word_comes_from_the_shared_pool(toy: Toy):
    family = get_family(toy.name)
    splits = ("train", "validation", "test")
    seen = {split: {getattr(family.make(s, split, TOY), toy.entity) for s in range(30)} for split in splits}
    assert not (seen["train"] & seen["validation"] or seen["train"] & seen["test"] or seen["validation"] & seen["test"])
    words = {getattr(family.make(s, "test", TOY), toy.answer) for s in range(40)}
    assert words <= set(KEY_WORDS) and len(words) > 30


@BY_NAME
def test_the_word_appears_nowhere_but_in_its_line(toy: Toy, tiny_counter: str):
    """As in vault: the answer must be copied from the fact's line, so no key word sits anywhere else the
    model reads (instructions, tools, pages, harness messages, the oracle's edit)."""
    config = EnvConfig(context_window=9000, compaction_threshold=6000, tokenizer=tiny_counter)
    env = make_env(toy.name, split="validation", strategy="evolve", config=config, difficulty=Difficulty(0.2, 3))
    info = run_oracle_episode(env, 4, **evolve_options("evolve"))
    assert info["success"] and info["ledger"]["compactions"] >= 1
    seen = [i for i in env.history if not (i.get("type") == "function_call" and i.get("name") == "submit")]
    text = "\n".join([env.instructions, json.dumps(env.tools), json.dumps(seen), toy.module.EVOLVE_CODE])
    text = toy.line.sub("", text)
    for word in KEY_WORDS:
        assert not re.search(rf"\b{word}\b", text, re.IGNORECASE), word
