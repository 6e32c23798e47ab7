"""SFT warm start: oracle demos as per-turn rows, the loss mask, and a short real SFT run on the tiny model.

Everything runs offline on the tiny random model (`rl_compaction.models.registry`) and the probe family at
scale 0.06, whose oracle episodes fit a 6000-token window of the tiny tokenizer.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from datasets import Dataset, load_from_disk
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction import chat
from rl_compaction.core.render import chat_messages
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import make_env
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.models.registry import resolve_model
from rl_compaction.training.demos import SUMMARY_FILE, row_messages, row_observation, turn_kind, write_demos
from rl_compaction.training.sft import (
    SFTScriptArguments,
    build_trainer,
    prepare_dataset,
    render_turn,
    run_sft,
    tokenize_row,
)

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "sft" / "tiny-cpu.yaml"
DEMOS = EpisodeSpec(family="probe", scale=0.06, level=1, context_window=6000, tokenizer="tiny")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private model cache, so the tests build their own tiny model and never touch the user's."""
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RL_COMPACTION_HOME", str(path))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield path


@pytest.fixture(scope="module")
def tokenizer(home: Path):
    return AutoTokenizer.from_pretrained(resolve_model("tiny"), local_files_only=True)


@pytest.fixture(scope="module")
def demos_dir(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos")
    write_demos(out, DEMOS, 2, ["evolve", "none"])
    return out


@pytest.fixture(scope="module")
def demos(demos_dir: Path) -> Dataset:
    return load_from_disk(str(demos_dir))


def _subset(demos: Dataset, indices: list[int], path: Path) -> Path:
    demos.select(indices).save_to_disk(str(path))
    return path


def test_demos_rows_columns_summary_and_evolve_turns(demos_dir: Path, demos: Dataset) -> None:
    assert set(demos.column_names) == {"messages", "tools", "family", "strategy", "task_seed", "turn", "is_evolve"}
    summary = json.loads((demos_dir / SUMMARY_FILE).read_text())
    assert summary["rows"] == len(demos) and summary["successful_episodes"] == 2
    assert set(demos["strategy"]) == {"evolve", "none"}
    evolve = [r for r in demos if r["is_evolve"]]
    assert evolve and summary["evolve_rows"] == len(evolve)
    assert all(r["strategy"] == "evolve" for r in evolve)
    for row in demos:
        messages = row_messages(row)
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "assistant"
        calls = messages[-1].get("tool_calls", [])
        assert row["is_evolve"] == any(c["function"]["name"] == "evolve" for c in calls)
    # turns of one episode are numbered 1, 2, ... and the episode ends with submit
    episode = sorted((r for r in demos if r["strategy"] == "none"), key=lambda r: r["turn"])
    assert [r["turn"] for r in episode] == list(range(1, len(episode) + 1))
    assert row_messages(episode[-1])[-1]["tool_calls"][0]["function"]["name"] == "submit"


def test_a_kept_failed_episode_keeps_its_edits_but_not_its_wrong_answer(home: Path, tmp_path: Path) -> None:
    """The lossy edit is kept as an imperfect demonstration; the answer it forces (the key is gone) is not,
    so SFT never trains an answer the task scores wrong."""
    episode = EpisodeSpec(family="vault", scale=0.2, level=1, context_window=4500, compaction_threshold=3200)
    rows = write_demos(
        tmp_path, replace(episode, tokenizer="tiny"), 2, ["evolve", "evolve_lossy"], keep_failed=["evolve_lossy"]
    )
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())["per_family"]["vault"]
    assert summary["evolve"]["successful"] == 1 and summary["evolve_lossy"]["successful"] == 0
    kinds = {s: Counter(turn_kind(r) for r in rows if r["strategy"] == s) for s in ("evolve", "evolve_lossy")}
    assert kinds["evolve"]["submit"] == 1 and kinds["evolve"]["evolve"] >= 2
    assert (
        kinds["evolve_lossy"]["submit"] == 0 and kinds["evolve_lossy"]["evolve"] >= 2 and kinds["evolve_lossy"]["read"]
    )
    assert summary["evolve_lossy"]["rows"] == sum(kinds["evolve_lossy"].values())


def test_weights_give_each_strategy_its_share_of_distinct_tasks(home: Path, tmp_path: Path) -> None:
    rows = write_demos(tmp_path / "w", DEMOS, 3, ["evolve", "none"], weights=[2, 1])
    summary = json.loads((tmp_path / "w" / SUMMARY_FILE).read_text())
    assert {s: v["episodes"] for s, v in summary["per_family"]["probe"].items()} == {"evolve": 2, "none": 1}
    seeds = {s: {r["task_seed"] for r in rows if r["strategy"] == s} for s in ("evolve", "none")}
    assert seeds == {"evolve": {0, 1}, "none": {2}}
    for weights, words in (([1], "one integer >= 1 per strategy"), ([2, 0], "one integer >= 1"), ([3, 1], "one cycle")):
        with pytest.raises(ValueError, match=words):
            write_demos(tmp_path / "bad", DEMOS, 3, ["evolve", "none"], weights=weights)
    assert not (tmp_path / "bad").exists()


def test_evolve_row_holds_the_state_the_oracle_saw(demos: Dataset) -> None:
    """The row after an edit shows the edited State (with the receipt), not the append-only history."""
    episode = sorted((r for r in demos if r["strategy"] == "evolve"), key=lambda r: r["turn"])
    k = next(i for i, r in enumerate(episode) if r["is_evolve"])
    before, after = episode[k], episode[k + 1]
    assert "Compact it now" in before["messages"][-2]["content"]  # the env's compaction request
    _, _, state_before, turn = row_observation(before)
    _, _, state_after, _ = row_observation(after)
    call, receipt = state_after[-2], json.loads(state_after[-1]["output"])
    assert call["name"] == "evolve" and call["arguments"] == turn[0]["arguments"] and receipt["applied"] is True
    assert len(json.dumps(state_after[:-2])) < len(json.dumps(state_before))  # the edit shrank the context


def test_rows_match_a_replayed_episode(demos: Dataset, home: Path) -> None:
    """Replaying the oracle with the rows' turns gives exactly the rows' observations."""
    rows = sorted((r for r in demos if r["strategy"] == "evolve"), key=lambda r: r["turn"])
    config = EnvConfig(context_window=6000, tokenizer=f"hf:{resolve_model('tiny')}")
    env = make_env("probe", split="train", strategy="evolve", config=config, difficulty=Difficulty(0.06, 1))
    obs, _ = env.reset(seed=rows[0]["task_seed"])
    for row in rows:
        instructions, _, state, turn = row_observation(row)
        assert chat_messages(instructions, state) == chat_messages(obs["instructions"], obs["state"])
        obs, *_ = env.step(turn)
    assert env.answer is not None and env.score == 1.0


def test_rows_render_for_native_and_fallback_templates(demos: Dataset, tokenizer, home: Path) -> None:
    row = next(r for r in demos if r["is_evolve"])
    instructions, tools, state, turn = row_observation(row)
    prompt, completion = render_turn(tokenizer, row)
    assert prompt == chat.render_prompt(tokenizer, instructions, tools, state)
    assert completion.startswith("<tool_call>\n") and completion.endswith("</tool_call><|im_end|>")
    parsed = chat.parse_completion(completion, tokenizer)
    assert [(x["name"], x["arguments"]) for x in parsed.items] == [(x["name"], x["arguments"]) for x in turn]
    # A template without tool support gets the fallback format's system text and call blocks.
    plain = AutoTokenizer.from_pretrained(resolve_model("tiny"), local_files_only=True)
    plain.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    assert chat.detect_format(plain) == "fallback"
    prompt, completion = render_turn(plain, row)
    assert chat.fallback_tools_text(tools) in prompt
    assert completion.startswith('<tool_call>\n{"name": "evolve"') and completion.endswith("<|im_end|>")


def test_loss_mask_covers_exactly_the_assistant_tokens(demos: Dataset, tokenizer, home: Path, tmp_path: Path) -> None:
    evolve = next(i for i, r in enumerate(demos) if r["is_evolve"])
    first = next(i for i, r in enumerate(demos) if r["turn"] == 1)
    subset = _subset(demos, [first, evolve], tmp_path / "demos")
    args = main_args(tmp_path, subset)
    trainer = build_trainer(*args)
    prepared = trainer.train_dataset
    assert len(prepared) == 2
    for i, index in enumerate([first, evolve]):
        row = demos[index]
        instructions, tools, state, _ = row_observation(row)
        prompt_ids = chat.prompt_ids(tokenizer, instructions, tools, state)
        _, completion = render_turn(tokenizer, row)
        ids, labels = prepared[i]["input_ids"], prepared[i]["labels"]
        assert ids[: len(prompt_ids)] == prompt_ids  # the prompt is token for token the policy's prompt
        trained = [k for k, label in enumerate(labels) if label != -100]
        assert trained == list(range(len(prompt_ids), len(ids)))  # exactly the assistant turn, nothing else
        assert [ids[k] for k in trained] == labels[len(prompt_ids) :]
        assert tokenizer.decode([ids[k] for k in trained], skip_special_tokens=False) == completion
        assert ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")  # the model learns to stop


def test_balance_turns_samples_every_kind_equally_and_drops_none(demos: Dataset, tokenizer) -> None:
    kinds = Counter(turn_kind(r) for r in demos)
    assert len(kinds) >= 3 and len(set(kinds.values())) > 1  # reads outnumber evolve calls and answers
    plain = prepare_dataset(demos, tokenizer, None)
    balanced = prepare_dataset(demos, tokenizer, None, balance_turns=True, seed=0)
    assert len(plain) == len(demos)
    # "all_exhausted": each kind repeats until the largest is used up once
    assert len(balanced) == len(kinds) * max(kinds.values())
    by_ids = {tuple(r["input_ids"]): turn_kind(d) for r, d in zip(plain, demos, strict=True)}
    seen = Counter(by_ids[tuple(r["input_ids"])] for r in balanced)
    assert set(seen.values()) == {max(kinds.values())}
    assert {tuple(r["input_ids"]) for r in balanced} == set(by_ids)  # every row still trained


def test_turn_kinds_keeps_only_those_turns_and_names_what_the_demos_hold(demos: Dataset, tokenizer) -> None:
    answers = prepare_dataset(demos, tokenizer, None, turn_kinds=["submit"])
    want = [tokenize_row(tokenizer, r)["input_ids"] for r in demos if turn_kind(r) == "submit"]
    assert len(want) == 2 and answers["input_ids"] == want
    with pytest.raises(ValueError, match=r"no demo turn is of the kinds \['answer'\].*'submit'"):
        prepare_dataset(demos, tokenizer, None, turn_kinds=["answer"])


def main_args(tmp_path: Path, dataset_dir: Path, *extra: str):
    """The tiny-cpu config parsed as the entry point parses it, pointed at `dataset_dir`."""
    from trl import ModelConfig, SFTConfig, TrlParser

    parser = TrlParser((SFTScriptArguments, SFTConfig, ModelConfig))
    return parser.parse_args_and_config(
        ["--config", str(CONFIG), "--dataset_dir", str(dataset_dir), "--output_dir", str(tmp_path / "out"), *extra]
    )


def _completion_loss(model, ids: list[int], n_prompt: int) -> float:
    labels = torch.tensor([[-100] * n_prompt + ids[n_prompt:]])
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), labels=labels).loss.item()


@pytest.mark.slow
def test_short_sft_run_memorises_and_saves_a_loadable_model(
    demos: Dataset, tokenizer, home: Path, tmp_path: Path
) -> None:
    """One short row (a first turn) repeated: the completion loss must fall clearly; the saved folder is a model
    and tokenizer that load offline, with the trained (not the initial) weights."""
    short = [i for i, r in enumerate(demos) if r["turn"] == 1][:1]  # the shortest prompt: the task statement
    subset = _subset(demos, short, tmp_path / "demos")
    out = tmp_path / "out"
    trainer = run_sft(
        *main_args(
            tmp_path, subset, "--max_steps", "10", "--learning_rate", "1e-2", "--per_device_train_batch_size", "1"
        )
    )
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 10 and sum(losses[-3:]) / 3 < 0.5 * losses[0], losses
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    reloaded = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert chat.detect_format(reloaded) == "hermes" and reloaded.chat_template == tokenizer.chat_template
    initial = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), local_files_only=True)
    row = tokenize_row(tokenizer, demos[short[0]])
    n_prompt = row["completion_mask"].index(1)
    before = _completion_loss(initial, row["input_ids"], n_prompt)
    after = _completion_loss(model, row["input_ids"], n_prompt)
    assert after < 0.5 * before, (before, after)
    card = (out / "README.md").read_text()  # the project's card (TRL's read "[None]"), with the demos' settings
    assert "None" not in card and "SFT on oracle demonstrations" in card and "Task families: probe" in card
