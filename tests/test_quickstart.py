"""The README's main job runs end to end (shortened further: one SFT and one GRPO step, one episode)."""

from __future__ import annotations

import json

import pytest

from rl_compaction.quickstart import run_quickstart
from rl_compaction.reproduce import ReproduceConfig


def test_quickstart_runs_all_stages(tmp_path, monkeypatch):
    import wandb

    wandb.teardown()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "qs"
    short = {
        "demo_episodes": 2,
        "sft": {"max_steps": 1},
        "grpo": {"max_steps": 1},
        "eval_episodes": 1,
        "eval_max_turns": 10,
    }
    report = run_quickstart(out, **short)
    assert (out / "demos" / "demos_summary.json").exists()
    assert (out / "sft" / "config.json").exists() and (out / "grpo" / "model.safetensors").exists()
    metrics = json.loads((out / "eval" / "metrics.json").read_text())["policies"]
    assert f"{out / 'grpo'}@evolve" in metrics and f"{out / 'sft'}@evolve" in metrics
    unlimited = json.loads((out / "eval_unlimited" / "metrics.json").read_text())["policies"]["oracle@none"]
    assert unlimited["success_rate"] == 1.0 and unlimited["peak_context"] > 4500  # the task needs compaction
    table = report["table"]
    for row in ("learned (GRPO)", "SFT-only", "oracle@sliding_window", "oracle@none (window 1,000,000)"):
        assert row in table
    assert report["verdict"][0].startswith("learned (GRPO checkpoint)")
    assert any("vs SFT-only" in line for line in report["verdict"])
    assert (out / "success_vs_cost.png").exists() and (out / "learning_curve.png").exists()
    assert list((out / "eval" / "wandb").glob("offline-run-*"))
    with pytest.raises(FileExistsError):
        run_quickstart(out)


def test_reproduce_config_rejects_unknown_fields(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("family: vault\nwindow: 4500\n")
    with pytest.raises(ValueError, match="unknown field\\(s\\) window; valid: .*context_window"):
        ReproduceConfig.from_yaml(path)
    with pytest.raises(FileNotFoundError, match="reproduce config not found"):
        ReproduceConfig.from_yaml(tmp_path / "missing.yaml")
    path.write_text("family: vault\nsft: {max_steps: 5, learning_rate: 0.01}\n")
    config = ReproduceConfig.from_yaml(path, sft={"max_steps": 3})
    assert config.sft == {"max_steps": 3, "learning_rate": 0.01}  # overrides update the file's settings
    with pytest.raises(ValueError, match="unknown override\\(s\\) window"):
        ReproduceConfig.from_yaml(path, window=3)
