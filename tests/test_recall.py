"""Recall pretraining (rl_compaction.models.recall) and the `tiny-recall` model it builds."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models import registry as models
from rl_compaction.models.recall import (
    CUES,
    STEP_TOKENS,
    RecallCorpus,
    chat_recall_accuracy,
    last_logits,
    recall_accuracy,
    train_chat_recall,
    train_recall,
)
from rl_compaction.models.registry import MARKER, build_tiny_model, resolve_model, shipped_dir


@pytest.fixture(scope="module")
def tiny() -> Path:
    return resolve_model("tiny")


def test_a_recall_row_holds_its_value_once_and_ends_at_the_query(tiny: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny)
    corpus = RecallCorpus(tok, seed=3)
    filler_ids = {tok.convert_tokens_to_ids(w) for w in corpus.filler}
    for length in (32, 512):
        ids, value = corpus.example(length)
        assert ids.count(value) == 1 and value not in filler_ids  # only the note holds it: copy, not guess
        assert tok.decode(ids).rstrip().endswith('"') and length <= len(ids) <= 3 * length
    ids, mask, target = corpus.batch(4, 64)
    assert ids.shape[0] == mask.shape[0] == target.shape[0] == 4
    ends = mask.sum(1) - 1
    assert all(ids[i, ends[i]].item() != tok.pad_token_id for i in range(4))
    assert all(target[i].item() in ids[i, : ends[i]].tolist() for i in range(4))


def test_a_chat_recall_row_is_a_rendered_state_whose_answer_is_the_cued_word(tiny: Path) -> None:
    """Chat rows end inside the submit call's answer, in the tokenizer's template; the value sits in the
    note after its cue, among quoted harness words and calls to tools named by rare words (so a rare
    quoted word alone is not the answer); long rows carry the harness's system text and tools; a chat
    step fills about STEP_TOKENS with whole rows."""
    tok = AutoTokenizer.from_pretrained(tiny)
    corpus = RecallCorpus(tok, seed=3)
    filler_ids = {tok.convert_tokens_to_ids(w) for w in corpus.filler}
    distractors, rare_names = 0, 0
    for length in (32, 512):
        for _ in range(8):
            ids, value = corpus.chat_example(length)
            text = tok.decode(ids)
            assert value not in filler_ids
            assert text.endswith('<tool_call>\n{"name": "submit", "arguments": {"answer": "')
            assert re.search(rf'note: \w+ \d+ ({"|".join(CUES)}) "{tok.convert_ids_to_tokens(value)}"\.', text)
            assert ("# Your working context" in text) == (length >= 256) and text.startswith("<|im_start|>system")
            distractors += len(re.findall(r'<tool_response>[^<]*"[a-z]+"', text))
            names = re.findall(r'"name": "(\w+)"', text)[:-1]  # the last is submit's
            assert tok.convert_ids_to_tokens(value) not in names
            rare_names += sum(name in corpus.values for name in names)
    assert distractors > 0 and rare_names > 0
    ids, mask, _ = corpus.chat_batch(512)
    assert ids.shape[0] >= 2 and mask.sum() >= STEP_TOKENS and mask.sum() - mask.sum(1)[-1] < STEP_TOKENS


def test_last_logits_reads_each_rows_last_real_token(tiny: Path) -> None:
    """Right padding must not move the prediction: a row alone and in a padded batch agree."""
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    ids, mask, _ = RecallCorpus(tok, seed=0).batch(4, 64)
    with torch.no_grad():
        batched = last_logits(model, ids, mask)
        short = int(mask.sum(1).argmin())
        n = int(mask[short].sum())
        alone = last_logits(model, ids[short : short + 1, :n], mask[short : short + 1, :n])
    torch.testing.assert_close(batched[short], alone[0], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_train_recall_updates_the_model_and_rejects_bad_steps(tiny: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    before = model.model.embed_tokens.weight.detach().clone()
    losses = train_recall(model, tok, steps=4)
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(before, model.model.embed_tokens.weight)
    with pytest.raises(ValueError, match="steps must be >= 2"):
        train_recall(model, tok, steps=1)


@pytest.mark.slow
def test_chat_recall_passes_each_restart_the_rows_and_reject_bad_passes(tiny: Path) -> None:
    """Each pass replays the seed's rows from their start (the schedule the results measured): two passes
    of one step equal one step twice from the same model, each with a fresh optimiser."""
    tok = AutoTokenizer.from_pretrained(tiny)
    model, twin = (AutoModelForCausalLM.from_pretrained(tiny) for _ in range(2))
    losses = train_chat_recall(model, tok, passes=(1, 1))
    for _ in range(2):
        train_chat_recall(twin, tok, passes=(1,))
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert 0.0 <= chat_recall_accuracy(model, tok, 32, rows=4) <= 1.0
    for passes in ((), (3, 0)):
        with pytest.raises(ValueError, match="one or more positive step counts"):
            train_chat_recall(model, tok, passes=passes)


@pytest.mark.slow
def test_a_model_with_a_base_continues_the_built_base_on_chat_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec with a `base` starts from that model's built folder (built first, reused after), trains its
    chat passes and keeps both builds' accuracies in its marker; other passes are another model."""
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path))
    base = models.ModelSpec(description="base", source="tiny", template="chatml", recall_steps=2, hidden_size=32)
    child = dataclasses.replace(base, description="child", base="test-base", chat_recall_passes=(1, 1))
    monkeypatch.setitem(models.KNOWN_MODELS, "test-base", base)
    monkeypatch.setitem(models.KNOWN_MODELS, "test-child", child)
    folder = resolve_model("test-child")
    marker = json.loads((folder / MARKER).read_text())
    assert marker["base"] == "test-base" and marker["chat_recall_passes"] == [1, 1]
    assert {"recall_accuracy@1024", "chat_recall_accuracy@128"} <= marker.keys()
    base_weights = AutoModelForCausalLM.from_pretrained(resolve_model("test-base")).model.embed_tokens.weight
    child_weights = AutoModelForCausalLM.from_pretrained(folder).model.embed_tokens.weight
    assert base_weights.shape == child_weights.shape and not torch.equal(base_weights, child_weights)
    monkeypatch.setattr(models, "_train_recall", lambda *a, **k: pytest.fail("built again"))
    assert resolve_model("test-child") == folder
    monkeypatch.setitem(models.KNOWN_MODELS, "test-child", dataclasses.replace(child, chat_recall_passes=(2,)))
    with pytest.raises(pytest.fail.Exception, match="built again"):
        resolve_model("test-child")


@pytest.mark.slow
def test_a_recall_model_is_built_once_with_its_accuracy_in_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path))
    # shipped, but the package's copy (800 steps, hidden 64) does not match this spec, so it is built
    spec = models.ModelSpec(
        description="test", source="tiny", template="chatml", recall_steps=2, shipped=True, hidden_size=96, layers=3
    )
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny-recall", spec)
    folder = resolve_model("tiny-recall")
    marker = json.loads((folder / MARKER).read_text())
    assert marker["recall_steps"] == 2 and 0.0 <= marker["recall_accuracy@4096"] <= 1.0
    assert (marker["hidden_size"], marker["layers"], marker["recall_lr"]) == (96, 3, models.TINY_RECALL_LR)
    config = AutoModelForCausalLM.from_pretrained(folder).config
    assert (config.hidden_size, config.num_hidden_layers) == (96, 3)
    monkeypatch.setattr(models, "build_tiny_model", lambda *a, **k: pytest.fail("built again"))
    assert resolve_model("tiny-recall") == folder
    # another shape or rate under the same name is another model: not reused, also where the other one
    # is the default (a marker without a setting means its default; this one holds hidden 96)
    for changed in ({"recall_lr": 1e-3}, {"hidden_size": models.TINY_HIDDEN_SIZE}):
        monkeypatch.setitem(models.KNOWN_MODELS, "tiny-recall", dataclasses.replace(spec, **changed))
        with pytest.raises(pytest.fail.Exception, match="built again"):
            resolve_model("tiny-recall")


def test_the_shipped_tiny_recall_is_used_without_a_build_and_matches_the_tiny_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's copy is what `tiny-recall` resolves to (nothing built on first use), and it is
    current: its tokenizer files and model shape are what the tiny build makes today. If this fails,
    rerun scripts/build_tiny_recall.py and commit the folder."""
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(models, "build_tiny_model", lambda *a, **k: pytest.fail("built although shipped"))
    shipped = shipped_dir("tiny-recall")
    assert resolve_model("tiny-recall") == shipped
    assert sum(f.stat().st_size for f in shipped.iterdir()) <= 5 * 2**20
    fresh = build_tiny_model(tmp_path / "fresh", template="chatml")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (shipped / name).read_bytes() == (fresh / name).read_bytes(), name

    def shape(folder: Path) -> dict:  # the model's shape, not which transformers release wrote the file
        config = json.loads((folder / "config.json").read_text())
        config.pop("transformers_version")
        return config

    assert shape(shipped) == shape(fresh)


@pytest.mark.slow
def test_the_shipped_tiny_recall_copies_a_word_from_4k_tokens_back() -> None:
    """The weights are recall-pretrained, not the random init: held-out recall, chance ~1/200."""
    folder = shipped_dir("tiny-recall")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert recall_accuracy(model, tok, 4096, rows=16) >= 0.85
