"""The vault toy: the facts are shown once, so only an edit that keeps them lets the agent answer."""

from __future__ import annotations

import re

import pytest
from rl_compaction_envs.vault.family import EVOLVE_CODE, KEY_WORDS, VaultFamily, read_key

from rl_compaction.harness.checker import check_family
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.labels import LabelEdits
from rl_compaction.harness.oracle import evolve_options, make_env, run_oracle_episode
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.registry import resolve_model

TOY = Difficulty(scale=0.2, level=1)
#: a note line with its key word, as json.dumps writes it inside a tool output, or escaped further
#: where the summary edit retypes it into evolve code (inside a call's JSON arguments)
NOTE_LINE = re.compile(r'note: vault \d+ opens with the word \\*"\w+\\*"\.')


@pytest.fixture(scope="module")
def tiny_counter() -> str:
    return f"hf:{resolve_model('tiny')}"


def _pair(strategies: tuple[str, str], window: int, threshold: int, counter: str, seed: int, difficulty=TOY):
    """Two oracle strategies' episodes on the same validation task."""
    config = EnvConfig(context_window=window, compaction_threshold=threshold, tokenizer=counter)
    runs = []
    for strategy in strategies:
        env = make_env("vault", split="validation", strategy=strategy, config=config, difficulty=difficulty)
        runs.append(run_oracle_episode(LabelEdits(env), seed, **evolve_options(strategy)))  # targeted edits counted
    return tuple(runs)


def _run(strategy: str, window: int, counter: str, seed: int = 0, threshold: int | None = 3200) -> dict:
    config = EnvConfig(context_window=window, compaction_threshold=min(threshold or window, window), tokenizer=counter)
    env = make_env("vault", split="test", strategy=strategy, config=config, difficulty=TOY)
    return run_oracle_episode(env, seed, **evolve_options(strategy))


def test_the_family_passes_the_task_contract():
    report = check_family(VaultFamily(), difficulty=TOY)
    assert all(e.score == 1.0 for e in report.episodes.values())


@pytest.mark.parametrize("seed", [0, 1])
def test_only_the_targeted_edit_carries_the_key_through_the_window(tiny_counter: str, seed: int):
    """The toy's promise: unlimited context and the targeted edit succeed; no compaction, a sliding window,
    cleared tool outputs and the lossy edit all fail, because the key was shown once."""
    unlimited = _run("none", 1_000_000, tiny_counter, seed)
    assert unlimited["success"] and unlimited["ledger"]["peak_context_tokens"] > 3 * 4500
    evolve = _run("evolve", 4500, tiny_counter, seed)
    assert evolve["success"] and evolve["ledger"]["compactions"] >= 5 and evolve["ledger"]["evolve_failures"] == 0
    assert evolve["ledger"]["peak_context_tokens"] <= 4500
    assert _run("none", 4500, tiny_counter, seed)["truncated_reason"] == "context_window"
    for lossy in ("sliding_window", "clear_tool_outputs", "evolve_lossy"):
        assert not _run(lossy, 4500, tiny_counter, seed)["success"], lossy


@pytest.mark.parametrize("seed", [0, 1])
def test_the_summary_edit_succeeds_as_often_as_the_targeted_edit_and_costs_clearly_more(tiny_counter: str, seed):
    """The cost axis of the demonstrations (issue 19): retyping the task and notes into one new message
    keeps the key as well as selecting the note pages does, but pays output tokens for every fact
    and breaks the cached prefix at its new first item. At the training length the targeted edit
    is at least 20% cheaper per episode (measured: 31,453 vs 42,776 on 8 validation tasks, 26%)."""
    cheap, summary = _pair(("evolve", "evolve_summary"), 4500, 3200, tiny_counter, seed)
    assert cheap["success"] and summary["success"]
    assert cheap["ledger"]["compactions"] == summary["ledger"]["compactions"] >= 5
    assert cheap["model_edits"] == cheap["selection_edits"] == cheap["ledger"]["compactions"]
    assert summary["model_edits"] == summary["ledger"]["compactions"] and summary["selection_edits"] == 0
    assert cheap["ledger"]["cost"] <= 0.8 * summary["ledger"]["cost"], (cheap["ledger"], summary["ledger"])
    assert cheap["ledger"]["evolve_tokens"] < 0.6 * summary["ledger"]["evolve_tokens"]


def test_the_early_edit_keeps_what_the_targeted_edit_keeps_and_pays_for_the_broken_cache(tiny_counter: str):
    """The same selection behind an annotation inserted as the first item: the first such edit re-processes
    the whole State after the system message (a cache cost the targeted edit does not pay); later ones
    write the same annotation again, which keeps the cache (measured on 32 validation tasks at the
    learning test's short setting: 5,986 vs 6,993)."""
    cheap, early = _pair(("evolve", "evolve_early"), 2700, 2200, tiny_counter, 0, Difficulty(0.02, 1))
    assert cheap["success"] and early["success"] and cheap["model_edits"] == early["model_edits"] == 2
    assert (cheap["selection_edits"], early["selection_edits"]) == (2, 1)
    receipts = [[e for e in run["events"] if e["event"] == "evolve"] for run in (cheap, early)]
    assert receipts[0][0]["cache_cost"] < receipts[1][0]["cache_cost"] - 100
    assert cheap["ledger"]["cost"] <= 0.9 * early["ledger"]["cost"]


@pytest.mark.parametrize("seed", [0, 1])
def test_compacting_after_every_page_succeeds_as_often_and_costs_clearly_more(tiny_counter: str, seed: int):
    """The timing axis of the demonstrations (issue 19): level 1's short pages leave the window room for
    several, so the harness asks every few pages; an agent that edits unasked after every page keeps the
    key as well, but pays an evolve call and its receipt at every page (measured on 4 validation tasks at
    scale 0.2, window 4,500 / 3,800: 30,529 vs 41,379, 1.36x)."""
    asked, eager = _pair(("evolve", "evolve_eager"), 4500, 3800, tiny_counter, seed)
    assert asked["success"] and eager["success"]
    assert asked["asked_edits"] == asked["model_edits"] >= 4  # every edit answers a request
    assert eager["model_edits"] >= 3 * asked["model_edits"] and eager["asked_edits"] == 0  # never asked: it is early
    assert eager["selection_edits"] == eager["model_edits"]  # the same targeted selection, only more often
    assert asked["ledger"]["cost"] <= 0.8 * eager["ledger"]["cost"], (asked["ledger"], eager["ledger"])


@pytest.mark.parametrize("seed", [0, 1])
def test_keeping_the_newest_pages_succeeds_as_often_and_costs_clearly_more(tiny_counter: str, seed: int):
    """The cost axis of the demonstrations (issue 19): the conservative edit keeps what the targeted edit
    keeps plus the last two pages read. It keeps the key as well, but every later turn pays for the
    larger context and the next request comes sooner (measured on 8 validation tasks at scale 0.2, window
    4,500 / 3,800: 30,529 vs 56,375, 1.85x; at the cost test's scale 0.05, 4,000 / 3,000: 1.76x). Only the
    targeted edit's results count as targeted edits, the cheap-edit share."""
    cheap, recent = _pair(("evolve", "evolve_recent"), 4500, 3800, tiny_counter, seed)
    assert cheap["success"] and recent["success"]
    assert cheap["targeted_edits"] == cheap["model_edits"] >= 4 and recent["targeted_edits"] == 0
    assert recent["model_edits"] > cheap["model_edits"] and recent["selection_edits"] == recent["model_edits"]
    assert recent["ledger"]["peak_context_tokens"] <= 4500
    assert cheap["ledger"]["cost"] <= 0.7 * recent["ledger"]["cost"], (cheap["ledger"], recent["ledger"])


def test_ignoring_the_request_runs_into_the_window(tiny_counter: str):
    """The "ignore" strategy (an imperfect demonstration) differs from "none": the harness asks, the oracle reads on."""
    ignored = _run("ignore", 4500, tiny_counter)
    assert ignored["truncated_reason"] == "context_window" and not ignored["success"]
    requests = [e for e in ignored["events"] if e["event"] == "compaction_request"]
    assert len(requests) == 1 and ignored["ledger"]["compactions"] == 0
    assert not [e for e in _run("none", 4500, tiny_counter)["events"] if e["event"] == "compaction_request"]


def test_the_targeted_edit_is_short_and_keeps_the_note_exactly(tiny_counter: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_counter[3:])
    assert len(tokenizer(EVOLVE_CODE)["input_ids"]) <= 60
    task = VaultFamily().make(3, "test", TOY)
    first_page = task.call_tool("read", {})
    state = task.initial_state() + [
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": first_page},
    ]
    assert read_key(state) == (task.vault, task._key)


def test_score_gives_partial_credit_in_order_and_no_credit_for_padding():
    task = VaultFamily().make(0, "test", Difficulty(scale=0.2, level=3))
    word, dial, turn = task._key
    assert task.score(f"{word} {dial} {turn}") == 1.0
    assert task.score(f" {word.upper()}  {dial} {turn} ") == 1.0
    assert task.score(word) == pytest.approx(1 / 3)
    assert task.score(f"{dial} {word} {turn}") == pytest.approx(1 / 3)
    assert task.score(f"{word} {dial} {turn} extra") < 1.0
    assert task.score("") == 0.0


def test_splits_use_disjoint_vault_numbers_and_the_key_comes_from_the_shared_words():
    family = VaultFamily()
    vaults = {split: {family.make(s, split, TOY).vault for s in range(30)} for split in ("train", "validation", "test")}
    assert not (vaults["train"] & vaults["validation"] or vaults["train"] & vaults["test"])
    assert not vaults["validation"] & vaults["test"]
    assert len(set(KEY_WORDS)) == len(KEY_WORDS) >= 200  # a guess is right well under 1% of the time
    for split in ("train", "test"):
        words = {family.make(s, split, TOY)._key[0] for s in range(40)}
        assert words <= set(KEY_WORDS) and len(words) > 30, split  # drawn from the whole pool


def test_decoys_at_level_3_name_other_vaults_and_the_oracle_ignores_them():
    task = VaultFamily().make(5, "test", Difficulty(scale=0.2, level=3))
    pages = [task.call_tool("read", {}) for _ in range(5)]
    assert sum(p.count("note: vault") for p in pages) == 5  # word, dial, turn and two decoys
    state = task.initial_state()
    for i, page in enumerate(pages):
        state += [
            {"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": page},
        ]
    assert read_key(state)[1] == task._key


@pytest.mark.parametrize("split", ["validation", "train"])
def test_a_key_word_appears_nowhere_but_in_the_note(tiny_counter: str, split: str):
    """The key must be copied from the note: no key word may sit anywhere else in what the model
    reads (instructions, the harness's system text, tools, pages, receipts, the oracle's edits), or
    a model could answer with it without carrying the note through its edits. Each key word is one
    tiny-model token between the note's quotes, so a copy is one token."""
    import json

    from transformers import AutoTokenizer

    config = EnvConfig(context_window=9000, compaction_threshold=6000, tokenizer=tiny_counter)
    seen = []
    for strategy in ("evolve", "evolve_summary", "evolve_early"):
        env = make_env("vault", split=split, strategy=strategy, config=config, difficulty=Difficulty(0.2, 3))
        info = run_oracle_episode(env, 4, **evolve_options(strategy))
        assert info["success"] and info["ledger"]["compactions"] >= 1
        seen += [i for i in env.history if not (i.get("type") == "function_call" and i.get("name") == "submit")]
    text = NOTE_LINE.sub("", "\n".join([env.instructions, json.dumps(env.tools), json.dumps(seen), EVOLVE_CODE]))
    for word in KEY_WORDS:
        assert not re.search(rf"\b{word}\b", text, re.IGNORECASE), word
    tokenizer = AutoTokenizer.from_pretrained(tiny_counter.removeprefix("hf:"))
    for word in KEY_WORDS:
        assert len(tokenizer.encode(f' "{word}"', add_special_tokens=False)) == 3, word


def test_below_two_pages_worth_the_filler_pages_get_shorter():
    """Scale keeps scaling the log's volume below the two-filler-page minimum: same pages, fewer words."""

    def filler_words(scale: float) -> list[int]:
        task = VaultFamily().make(0, "test", Difficulty(scale=scale, level=1))
        return [len(page.split()) - 2 for page in task._pages[1:]]  # minus the "page N" header

    assert filler_words(0.02) == [300, 300]  # round(120 x 0.02) = 2 pages of full length (level 1: 300 words)
    assert filler_words(0.01) == [180, 180]  # 1.2 pages' worth, over the two pages
    assert filler_words(0.2) == [300] * 24
    task = VaultFamily().make(0, "test", Difficulty(scale=0.01, level=1))
    assert task._key[0] in task._pages[0]  # the note page is unchanged
