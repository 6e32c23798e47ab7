"""Recall pretraining (rl_compaction.models.recall) and the `tiny-recall` model it builds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models import registry as models
from rl_compaction.models.recall import RecallCorpus, last_logits, recall_accuracy, train_recall
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
