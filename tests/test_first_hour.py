"""A new user's first hour: what a fresh clone's commands did that surprised, each fixed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_compaction.cli import main

REPO = Path(__file__).resolve().parents[1]


# -- train and sft refuse a folder that holds a previous run --------------------------------------------


@pytest.mark.parametrize(
    ("command", "config"), [("train", "configs/train/tiny-cpu.yaml"), ("sft", "configs/sft/tiny-cpu.yaml")]
)
def test_a_folder_with_a_previous_run_is_refused_and_kept(tmp_path, capsys, command, config):
    run = tmp_path / "run"
    (run / "checkpoint-8").mkdir(parents=True)
    (run / "checkpoint-8" / "trainer_state.json").write_text("{}")
    (run / "model.safetensors").write_bytes(b"weights")
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert main([command, "--config", str(REPO / config), "--output_dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds a previous run (checkpoint-8, model.safetensors)" in err
    assert "--overwrite_output_dir true" in err and "--resume_from_checkpoint true" in err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert (run / "model.safetensors").read_bytes() == b"weights"


def test_overwrite_or_an_empty_folder_passes_the_check(tmp_path):
    from rl_compaction.core.outputs import check_no_previous_run

    run = tmp_path / "run"
    check_no_previous_run(run, resume=None, overwrite=False)  # missing
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    check_no_previous_run(run, resume=None, overwrite=False)  # no run in it
    (run / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds a previous run"):
        check_no_previous_run(run, resume=None, overwrite=False)
    check_no_previous_run(run, resume=None, overwrite=True)
    check_no_previous_run(run, resume=str(run / "checkpoint-2"), overwrite=False)


@pytest.mark.parametrize(("command", "first"), [("train", "--families"), ("sft", "--dataset_dir")])
def test_help_names_the_subcommand_and_lists_the_projects_fields_first(capsys, command, first):
    """`train --help` was 1,390 lines: a ~500-line usage line without the subcommand, then TRL's fields,
    the project's own last."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"usage: rl-compaction {command} [--config FILE.yaml] [--FIELD VALUE ...]"
    options = [line.split()[0] for line in lines if line.startswith("  --")]
    assert options[0] == first and "--overwrite_output_dir" in options[:20]
    assert out.index("rl-compaction:") < out.index("--output_dir")
