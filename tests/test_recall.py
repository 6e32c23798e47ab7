"""Recall pretraining (rl_compaction.models.recall) and the `tiny-recall` model it builds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models import registry as models
from rl_compaction.models.recall import (
    CallCorpus,
    RecallCorpus,
    call_accuracy,
    last_logits,
    recall_accuracy,
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


def test_a_call_row_ends_where_only_the_last_calls_name_decides_the_next_token(tiny: Path) -> None:
    """The row is the chat template's own rendering, cut inside the last call: the next token opens its
    arguments (empty or not, as that tool takes them) or is their first key (the harness's, or the key the
    same tool took earlier in the row)."""
    tok = AutoTokenizer.from_pretrained(tiny)
    corpus = CallCorpus(tok, seed=5)
    harness = dict(corpus.harness)
    targets, copied, wanted = set(), [], []
    for _ in range(80):
        ids, target = corpus.example(128)
        text = tok.decode(ids)
        calls = [json.loads(c.split("</tool_call>")[0]) for c in text.split("<tool_call>")[1:-1]]
        last = text[text.rfind("<tool_call>") :]
        name = last.split('"name": "')[1].split('"')[0]
        keys = harness.get(name) or next((list(c["arguments"]) for c in calls if c["name"] == name), [])
        opening = tok.decode([target])
        if last.endswith('"arguments":'):
            assert opening == (' {"' if keys else " {")
        else:
            assert last.endswith('"arguments": {"') and keys[0].startswith(opening)
        usual = max(sorted({c["name"] for c in calls}), key=[c["name"] for c in calls].count)
        copied.append(bool(harness.get(usual) or next(c["arguments"] for c in calls if c["name"] == usual)))
        wanted.append(bool(keys))
        targets.add(opening)
    assert {" {", ' {"', "code", "answer"} <= targets  # every kind of next token occurs
    # copying the most frequent earlier call's arguments would often be wrong: only the name decides
    assert sum(c != w for c, w in zip(copied, wanted, strict=True)) >= 12
    ids, mask, target = corpus.batch(3, 64)
    assert ids.shape[0] == target.shape[0] == 3 and bool((mask.sum(1) >= 64).all())


def test_call_accuracy_is_a_share_of_held_out_rows(tiny: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    assert 0.0 <= call_accuracy(model, tok, 64, rows=8) <= 1.0


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
    losses = train_recall(model, tok, steps=4, calls=True)  # steps 1 and 3 are call rows
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    with pytest.raises(ValueError, match="steps must be >= 2"):
        train_recall(model, tok, steps=1)


@pytest.mark.slow
def test_a_recall_model_is_built_once_with_its_accuracy_in_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path))
    # shipped, but the package's copy (800 steps) does not match this spec, so it is built
    spec = models.ModelSpec(description="test", source="tiny", template="chatml", recall_steps=2, shipped=True)
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny-recall", spec)
    folder = resolve_model("tiny-recall")
    marker = json.loads((folder / MARKER).read_text())
    assert marker["recall_steps"] == 2 and 0.0 <= marker["recall_accuracy@4096"] <= 1.0
    assert AutoModelForCausalLM.from_pretrained(folder) is not None
    monkeypatch.setattr(models, "build_tiny_model", lambda *a, **k: pytest.fail("built again"))
    assert resolve_model("tiny-recall") == folder


@pytest.mark.slow
def test_a_protocol_model_is_built_with_call_rows_and_its_call_accuracy_in_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path))
    spec = replace(models.KNOWN_MODELS["tiny-protocol"], recall_steps=2)
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny-protocol", spec)
    folder = resolve_model("tiny-protocol")
    marker = json.loads((folder / MARKER).read_text())
    assert marker["call_pretraining"] is True and 0.0 <= marker["call_accuracy@4096"] <= 1.0
    # a folder built without call rows is another model: built again, not reused
    marker["call_pretraining"] = False
    (folder / MARKER).write_text(json.dumps(marker))
    assert not models._is_complete(folder, "tiny-protocol", models._tiny_record(spec))


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
