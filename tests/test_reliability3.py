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


def test_train_refuses_fewer_tasks_than_one_generation_batch_before_loading_a_model(tmp_path, capsys):
    """8 distinct tasks per generation batch (4 rows x 4 accumulation steps / 2 per group), 4 to draw from:
    TRL's sampler yields no batch, and train saved the untrained start as "trained" after 0 steps."""
    config = _yaml(tmp_path, "configs/train/tiny-cpu.yaml", train_tasks=4, gradient_accumulation_steps=4)
    argv = ["train", "--config", config, "--num_generations", "2", "--model_name_or_path", str(tmp_path / "none")]
    assert main([*argv, "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "train_tasks (4) is fewer than the distinct tasks of one generation batch (8" in err
    assert not (tmp_path / "run").exists()


# -- progress.json: written whole, and a torn one never restarts a finished run ---------------------------


def test_a_torn_progress_file_is_refused_not_read_as_no_stage_done(tmp_path):
    from rl_compaction.recipes.recipe import ReproduceConfig
    from rl_compaction.recipes.reproduce import PROGRESS_FILE, _done, _open_output

    config = ReproduceConfig(output_dir=str(tmp_path / "run"), model="tiny")
    out, timings = _open_output(config, resume=False)
    _done(out, timings, "demos", 0.0)
    (out / "demos").mkdir()
    assert set(_open_output(config, resume=True)[1]) == {"demos"}
    (out / PROGRESS_FILE).write_text("")  # what a kill during a truncate-then-write left
    with pytest.raises(ValueError, match=f"{PROGRESS_FILE} is unreadable"):
        _open_output(config, resume=True)
    assert (out / "demos").is_dir()  # nothing was deleted


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    import os

    from rl_compaction.core.outputs import write_text_atomic

    path = tmp_path / "progress.json"
    write_text_atomic(path, '{"demos": 1.0}')

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, '{"demos": 1.0, "sft": 2.0}')
    assert path.read_text() == '{"demos": 1.0}'
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]


# -- output folders that os.access approves but that cannot be created ------------------------------------


@pytest.mark.parametrize("folder", ["/proc/rl-compaction-out", "/sys/rl-compaction-out"])
def test_an_output_folder_that_cannot_be_created_is_refused_up_front(folder):
    from rl_compaction.core.outputs import check_output_dir

    with pytest.raises(ValueError, match="cannot be created"):
        check_output_dir(folder)
    assert not Path(folder).exists()


# -- reproduce checks every stage's settings before stage 1 -----------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"eval_temperature": float("nan")}, "eval_temperature must be a finite number"),
        ({"eval_temperature": -1.0}, "temperature must be a number >= 0"),
        ({"unlimited_window": 0}, "unlimited_window must be an integer >= 1"),
        ({"grpo": {"num_generations": 1}}, "grpo: num_generations must be >= 2"),
        ({"grpo": {"max_turns": 0}}, "grpo: max_turns"),
        ({"grpo": {"train_tasks": 1, "per_device_train_batch_size": 8, "num_generations": 2}}, "grpo: train_tasks"),
        ({"model": "no-such-model"}, "'no-such-model' is neither an existing model directory nor a known model"),
    ],
)
def test_reproduce_refuses_a_late_stage_setting_before_writing_anything(settings, message, tmp_path):
    from rl_compaction.recipes.recipe import ReproduceConfig

    with pytest.raises(ValueError, match=message):
        ReproduceConfig(output_dir=str(tmp_path / "run"), **{"model": "tiny", **settings})
    assert list(tmp_path.iterdir()) == []


def test_temperature_0_is_greedy_for_local_models(tmp_path):
    from rl_compaction.evaluation.evaluate import EvalConfig, make_policy

    config = EvalConfig(policies=["tiny"], output_dir=str(tmp_path), temperature=0)
    assert make_policy("tiny", "evolve", config).do_sample is False
    assert make_policy("tiny", "evolve", EvalConfig(policies=["tiny"], output_dir=str(tmp_path))).do_sample
