"""The README's main job runs end to end (shortened: one GRPO step, one episode per policy)."""

from __future__ import annotations

import json

import pytest

from rl_compaction.quickstart import run_quickstart


def test_quickstart_runs_all_stages(tmp_path, monkeypatch):
    import wandb

    wandb.teardown()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "qs"
    result = run_quickstart(out, grpo_steps=1, eval_episodes=1)
    assert (out / "demos" / "demos_summary.json").exists()
    assert (out / "sft" / "config.json").exists() and (out / "grpo" / "model.safetensors").exists()
    metrics = json.loads((out / "eval" / "metrics.json").read_text())["policies"]
    assert f"{out / 'grpo'}@evolve" in metrics and metrics["oracle@evolve"]["success_rate"] == 1.0
    assert result["plot"].exists() and "oracle@sliding_window" in result["table"]
    assert list((out / "eval" / "wandb").glob("offline-run-*"))
    with pytest.raises(FileExistsError):
        run_quickstart(out)
