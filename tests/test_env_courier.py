"""The courier toy: the vault's task in another form; only an edit that keeps the manifest line by its
content lets the agent answer."""

from __future__ import annotations

import json
import re

import pytest
from rl_compaction_envs.courier.family import EVOLVE_CODE, CourierFamily, read_password
from rl_compaction_envs.vault.family import KEY_WORDS

from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import evolve_options, make_env, run_oracle_episode
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.registry import resolve_model

TOY = Difficulty(scale=0.2, level=1)
MANIFEST_LINE = re.compile(r'manifest: parcel \d+ password \\*"\w+\\*"\.')


@pytest.fixture(scope="module")
def tiny_counter() -> str:
    return f"hf:{resolve_model('tiny')}"


def _run(strategy: str, window: int, counter: str, seed: int = 0, difficulty: Difficulty = TOY) -> dict:
    config = EnvConfig(context_window=window, compaction_threshold=min(3200, window), tokenizer=counter)
    env = make_env("courier", split="test", strategy=strategy, config=config, difficulty=difficulty)
    return run_oracle_episode(env, seed, **evolve_options(strategy))


@pytest.mark.parametrize("seed", [0, 1])
def test_only_the_targeted_edit_carries_the_password_through_the_window(tiny_counter: str, seed: int):
    unlimited = _run("none", 1_000_000, tiny_counter, seed)
    assert unlimited["success"] and unlimited["ledger"]["peak_context_tokens"] > 3 * 4500
    evolve = _run("evolve", 4500, tiny_counter, seed)
    assert evolve["success"] and evolve["ledger"]["compactions"] >= 5 and evolve["ledger"]["evolve_failures"] == 0
    assert evolve["ledger"]["peak_context_tokens"] <= 4500
    assert _run("none", 4500, tiny_counter, seed)["truncated_reason"] == "context_window"
    for lossy in ("sliding_window", "clear_tool_outputs", "evolve_lossy"):
        assert not _run(lossy, 4500, tiny_counter, seed)["success"], lossy


def test_the_manifest_sits_on_one_of_the_first_three_stops_and_not_always_the_first():
    at = []
    for seed in range(30):
        task = CourierFamily().make(seed, "train", TOY)
        at.append(next(i for i, stop in enumerate(task._pages) if "manifest:" in stop))
        assert sum("manifest:" in stop for stop in task._pages) == 1
    assert set(at) == {0, 1, 2}


def test_decoys_name_other_parcels_and_the_oracle_takes_its_own():
    task = CourierFamily().make(5, "test", Difficulty(scale=0.2, level=3))
    state = task.initial_state()
    for i in range(4):
        state += [
            {"type": "function_call", "call_id": f"c{i}", "name": "next", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": task.call_tool("next", {})},
        ]
    assert sum(item.get("output", "").count("manifest: parcel") for item in state) == 3
    assert read_password(state) == (task.parcel, task.password)


def test_score_takes_the_password_alone():
    task = CourierFamily().make(0, "test", TOY)
    assert task.score(task.password) == task.score(f" {task.password.upper()} ") == 1.0
    assert task.score(f"{task.password} extra") == task.score("") == task.score(None) == 0.0


def test_splits_use_disjoint_parcels_and_the_password_comes_from_the_shared_words():
    family = CourierFamily()
    splits = ("train", "validation", "test")
    parcels = {split: {family.make(s, split, TOY).parcel for s in range(30)} for split in splits}
    assert not (parcels["train"] & parcels["validation"] or parcels["train"] & parcels["test"])
    assert not parcels["validation"] & parcels["test"]
    words = {family.make(s, "test", TOY).password for s in range(40)}
    assert words <= set(KEY_WORDS) and len(words) > 30


def test_a_password_appears_nowhere_but_in_the_manifest(tiny_counter: str):
    """As in vault: the answer must be copied from the manifest line, so no key word sits anywhere else the
    model reads (instructions, tools, stops, harness messages, the oracle's edit)."""
    config = EnvConfig(context_window=9000, compaction_threshold=6000, tokenizer=tiny_counter)
    env = make_env("courier", split="validation", strategy="evolve", config=config, difficulty=Difficulty(0.2, 3))
    info = run_oracle_episode(env, 4, **evolve_options("evolve"))
    assert info["success"] and info["ledger"]["compactions"] >= 1
    seen = [i for i in env.history if not (i.get("type") == "function_call" and i.get("name") == "submit")]
    text = MANIFEST_LINE.sub("", "\n".join([env.instructions, json.dumps(env.tools), json.dumps(seen), EVOLVE_CODE]))
    for word in KEY_WORDS:
        assert not re.search(rf"\b{word}\b", text, re.IGNORECASE), word
