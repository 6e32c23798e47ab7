"""Faults found by the third reliability round: each was accepted (or crashed) before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_compaction.cli import main

REPO = Path(__file__).resolve().parents[1]


def _yaml(tmp_path: Path, source: str, **overrides: object) -> str:
    config = yaml.safe_load((REPO / source).read_text())
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**config, **overrides}))
    return str(path)


# -- non-finite numbers in configs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reward_score_weight", float("nan")),  # trained a model of NaNs, exit 0
        ("reward_cost_scale", float("inf")),
        ("reward_cost_scale", float("nan")),
        ("max_turns", float("nan")),  # no episode ever ended at the turn limit
        ("context_window", float("inf")),  # tracebacks
        ("train_tasks", float("inf")),
        ("max_turns", 2.5),
        ("learning_rate", float("nan")),
    ],
)
def test_train_refuses_a_non_finite_or_fractional_number_before_loading_a_model(field, value, tmp_path, capsys):
    config = _yaml(tmp_path, "configs/train/tiny-cpu.yaml", **{field: value})
    argv = ["train", "--config", config, "--model_name_or_path", str(tmp_path / "no-such-model")]
    assert main([*argv, "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and field in err and ("finite" in err or "integer" in err)


def test_sft_and_eval_refuse_non_finite_numbers(tmp_path, capsys):
    config = _yaml(tmp_path, "configs/sft/tiny-cpu.yaml", learning_rate=float("nan"))
    assert main(["sft", "--config", config, "--output_dir", str(tmp_path / "sft")]) == 2
    assert "learning_rate must be a finite number" in capsys.readouterr().err
    argv = ["eval", "--policy", "oracle", "--env", "probe", "--episodes", "1", "--temperature", "nan"]
    assert main([*argv, "--output-dir", str(tmp_path / "eval")]) == 2
    assert "temperature must be a finite number" in capsys.readouterr().err
