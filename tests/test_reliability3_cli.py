"""Faults of the third reliability round in the command line's runs: what `reproduce` says of a bad value,
when `eval` checks its policies, resuming a moved run, old records' cost parts and two runs on one folder.
Each was refused, misreported or accepted before its fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rl_compaction.cli import main
from rl_compaction.harness.spec import EpisodeSpec

# -- a bad `reproduce` value names its field ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"eval_episodes": 0}, "eval_episodes must be an integer >= 1, got 0"),
        ({"demo_episodes": 2}, "demo_episodes (2) must cover one cycle"),
        ({"demo_strategies": ["bogus"]}, "demo_strategies must be from"),
        ({"demo_weights": [0, 1, 1]}, "demo_weights must be one integer >= 1 per strategy"),
        ({"episode": {"family": "nosuch"}}, "episode: unknown task families ['nosuch']"),
        ({"episode": {"level": 9}}, "episode: difficulty level must be 1, 2 or 3, got 9"),
        ({"eval_episode": {"scale": -1.0}}, "eval_episode: difficulty scale must be in"),
        ({"eval_temperature": -1.0}, "eval_temperature must be a number >= 0"),
        ({"model": "nosuch"}, "model: 'nosuch' is neither"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else None,
)
def test_a_bad_reproduce_value_names_its_field_not_the_file(settings, words, tmp_path, capsys):
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "out"), **settings}))
    assert main(["reproduce", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert "expected a mapping" not in err and "episodes_per_family" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_reproduce_file_that_is_no_mapping_is_still_named_as_such(tmp_path, capsys):
    config = tmp_path / "recipe.yaml"
    config.write_text("- a\n- list\n")
    assert main(["reproduce", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{config}: expected a mapping of ReproduceConfig fields" in err


# -- every `eval --policy` spec is checked before any episode runs --------------------------------------------

EVAL = ["--env", "probe", "--scale", "0.06", "--level", "1", "--context_window", "9000", "--episodes", "1"]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("oracle@bogus", "the oracle takes strategies"),
        ("tiny@magic", "model policies take strategies"),
        ("no-such-model-folder", "is neither an existing model directory nor a known model name"),
        ("openai:", "names no model"),
        ("@evolve", "empty policy spec"),
    ],
)
def test_a_bad_later_policy_spec_is_refused_before_the_first_row_runs(bad, words, tmp_path, capsys, monkeypatch):
    import rl_compaction.evaluation.evaluate as evaluate

    ran = []
    monkeypatch.setattr(evaluate, "rollout", lambda *a, **k: ran.append(1) or pytest.fail("an episode ran"))
    out = tmp_path / "eval"
    assert main(["eval", *EVAL, "--policy", "oracle@none", "--policy", bad, "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err and repr(bad) in err, err
    assert not ran and not (out / "episodes.jsonl").exists() and not (out / "metrics.json").exists()


# -- a resumed eval compares the paths it recorded relative to its folder -------------------------------------


@pytest.mark.slow
def test_an_eval_resumes_from_another_cwd_and_after_its_run_folder_moved(tmp_path, monkeypatch):
    """Reproduce's stage 4 evaluates RUN/grpo with RUN/grpo as its tokenizer into RUN/eval: a resume spelled
    another way (absolute, another working directory, a moved RUN) was refused as "other settings"."""
    import shutil

    import rl_compaction.evaluation.evaluate as evaluate
    from rl_compaction.evaluation.evaluate import EvalConfig, run_eval

    shutil.copytree(Path(evaluate.__file__).parents[1] / "weights" / "tiny-recall", tmp_path / "run" / "grpo")
    spec = EpisodeSpec(family="probe", scale=0.06, level=1, context_window=9000, max_turns=3)
    small = dict(episodes=1, max_new_tokens=8)

    def config(run: str) -> EvalConfig:
        return EvalConfig(
            policies=[f"{run}/grpo@evolve", "oracle@none"],
            episode=replace(spec, tokenizer=f"{run}/grpo"),
            output_dir=f"{run}/eval",
            **small,
        )

    monkeypatch.chdir(tmp_path)
    first = run_eval(config("run"))["metrics"]["policies"]
    monkeypatch.setattr(evaluate, "rollout", lambda *a, **k: pytest.fail("a finished episode ran again"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = run_eval(config(str(tmp_path / "run")), resume=True)["metrics"]["policies"]
    assert again[f"{tmp_path}/run/grpo@evolve"]["mean_cost"] == first["run/grpo@evolve"]["mean_cost"]
    shutil.move(tmp_path / "run", tmp_path / "moved")
    moved = run_eval(config("../moved"), resume=True)["metrics"]["policies"]
    assert moved["../moved/grpo@evolve"]["mean_cost"] == first["run/grpo@evolve"]["mean_cost"]
    assert len((tmp_path / "moved" / "eval" / "episodes.jsonl").read_text().splitlines()) == 2


# -- records from before the cost parts show them as unknown, not 0 -------------------------------------------


def _old_records(n: int, cost: float, parts: bool) -> list:
    from summaries import summary_info

    from rl_compaction.harness.rollout import EpisodeRecord

    records = []
    for seed in range(n):
        record = EpisodeRecord("oracle@evolve", "probe", "test", seed, 0, {})
        record.info = summary_info(success=True, score=1.0, ledger={"cost": cost})
        if not parts:
            del record.info["ledger"]["cost_parts"]
        records.append(record)
    return records


def test_records_without_cost_parts_show_them_as_unknown_not_zero():
    from rl_compaction.accounting import COST_PARTS
    from rl_compaction.evaluation.report import format_metrics, policy_metrics

    row = policy_metrics("oracle@evolve", _old_records(2, 28_614.0, parts=False))
    assert row["mean_cost"] == 28_614.0 and row["cost_parts"] is None
    mixed = policy_metrics("oracle@evolve", _old_records(1, 1.0, parts=False) + _old_records(1, 1.0, parts=True))
    assert mixed["cost_parts"] is None  # parts of some episodes beside the cost of all would not add up
    assert policy_metrics("oracle@evolve", _old_records(2, 0.0, parts=True))["cost_parts"] == dict.fromkeys(
        COST_PARTS, 0.0
    )
    values = format_metrics([row]).splitlines()[-1]  # the cost parts table's row
    assert values.split()[1:] == ["28,614", *["n/a"] * 6]


# -- one run at a time in an output folder ----------------------------------------------------------------------


def test_a_second_eval_on_a_folder_in_use_exits_2_and_writes_nothing(tmp_path, capsys):
    import os

    from rl_compaction.core.outputs import lock_output_dir

    out = tmp_path / "eval"
    with lock_output_dir(out):  # as a first run holds it while its episodes run
        assert main(["eval", *EVAL, "--policy", "oracle@none", "--output_dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and f"{out} is in use by another run (pid {os.getpid()})" in err
        assert not (out / "episodes.jsonl").exists()
        recipe = ["reproduce", "--output_dir", str(tmp_path / "eval")]
        assert main(recipe) == 2 and "is in use by another run" in capsys.readouterr().err
    assert main(["eval", *EVAL, "--policy", "oracle@none", "--output_dir", str(out)]) == 0  # released


def test_resume_checks_the_settings_of_every_record_not_one_per_episode(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", *EVAL, "--policy", "oracle@none", "--output_dir", str(out)]
    assert main(argv) == 0
    path = out / "episodes.jsonl"
    line = path.read_text(encoding="utf-8").splitlines()[0]
    path.write_text(line.replace('"max_turns": 100', '"max_turns": 7') + "\n" + line + "\n", encoding="utf-8")
    assert main([*argv, "--resume"]) == 2  # the second record of the episode hid the first's other settings
    assert "max_turns=7" in capsys.readouterr().err


def test_demos_hold_their_folder_and_a_failed_run_leaves_no_folder(tmp_path):
    from rl_compaction.core.outputs import lock_output_dir
    from rl_compaction.training.demos import write_demos

    out = tmp_path / "demos"
    with lock_output_dir(out), pytest.raises(ValueError, match="is in use by another run"):
        write_demos(out, EpisodeSpec(family="probe", scale=0.06, level=1, context_window=6000), 1, ["evolve"])
    assert not out.exists()  # created for the lock, and nothing was written: gone again
    with pytest.raises(ValueError, match="no oracle episode succeeded"):
        write_demos(out, EpisodeSpec(family="probe", scale=0.06, level=1, context_window=1000), 1, ["evolve"])
    assert not out.exists()
    with lock_output_dir(out):
        (out / "mine.txt").write_text("kept")
    assert (out / "mine.txt").exists()  # a folder with anything in it stays
