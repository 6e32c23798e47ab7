"""A new user's first hour: what a fresh clone's commands did that surprised, each fixed here."""

from __future__ import annotations

from dataclasses import replace
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


@pytest.mark.parametrize(("command", "first"), [("train", "--train_tasks"), ("sft", "--dataset_dir")])
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
    if command == "train":  # the episode's fields (EpisodeSpec) are in the project's group
        assert {"--family", "--context_window", "--max_turns"} <= set(options[:40])
    assert out.index("rl-compaction:") < out.index("--output_dir")


# -- eval's table and plot ----------------------------------------------------------------------------------


def test_the_eval_table_says_why_episodes_ended_and_keeps_cost_parts_apart(tmp_path):
    """The table was ~230 characters wide with a ~700-character footnote, "cached 0" (a cost part) beside
    "cache% 82%" (a share of tokens), and no column for why episodes ended (the oracle's 0% was its turn limit)."""
    from rl_compaction.evaluation.evaluate import EvalConfig, run_eval
    from rl_compaction.harness.spec import EpisodeSpec

    spec = EpisodeSpec(family="probe", scale=0.06, level=1, context_window=4500)
    small = {"episodes": 2, "policies": ["oracle@evolve"]}
    result = run_eval(EvalConfig(episode=replace(spec, max_turns=5), output_dir=str(tmp_path / "a"), **small))
    outcome = result["table"].split("\n\n")[0].splitlines()
    assert outcome[0].split()[:6] == ["policy", "success", "(95%", "CI)", "score", "ended"]
    assert "2 turns" in outcome[2] and "cached" not in outcome[0]
    assert max(len(line) for line in result["table"].splitlines()) <= 150
    result = run_eval(EvalConfig(episode=replace(spec, max_turns=16), output_dir=str(tmp_path / "b"), **small))
    assert "2 answer" in result["table"]


def test_the_plot_starts_its_cost_axis_at_zero_and_names_its_settings(tmp_path, monkeypatch):
    import matplotlib.axes
    import matplotlib.figure

    from rl_compaction.evaluation.evaluate import EvalConfig
    from rl_compaction.evaluation.report import plot_success_vs_cost, plot_title

    seen = {}
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, t, **kw: seen.update(title=t))
    real_savefig = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda fig, *a, **kw: (seen.update(xlim=fig.axes[0].get_xlim()), real_savefig(fig, *a, **kw))[1],
    )
    rows = [
        {"policy": p, "success_rate": 0.5, "success_ci95": [0.2, 0.8], "mean_cost": c}
        for p, c in (("a", 10_000), ("b", 10_060))  # 0.6% apart: the axis zoomed to that range
    ]
    from rl_compaction.harness.spec import EpisodeSpec

    episode = EpisodeSpec(family="probe", max_turns=40, tokenizer="cl100k_base")
    config = EvalConfig(policies=["oracle@evolve"], episode=episode)
    plot_success_vs_cost(rows, tmp_path / "p.png", plot_title(config))
    assert seen["xlim"][0] == 0 and seen["xlim"][1] > 10_060
    assert all(s in seen["title"] for s in ("40 turns", "cl100k_base", "cost preset local", "window 32,768"))


@pytest.mark.parametrize(
    ("command", "config"), [("train", "configs/train/tiny-cpu.yaml"), ("sft", "configs/sft/tiny-cpu.yaml")]
)
def test_a_folder_another_run_trains_into_is_refused(tmp_path, capsys, monkeypatch, command, config):
    """Two trainings into one folder overwrote each other's checkpoints; the launch's other processes (RANK > 0)
    write under the main process's lock and take none."""
    from rl_compaction.core.outputs import lock_on_main_process, lock_output_dir

    run = tmp_path / "run"
    with lock_output_dir(run):
        assert main([command, "--config", str(REPO / config), "--output_dir", str(run)]) == 2
        assert f"{run} is in use by another run" in capsys.readouterr().err
        monkeypatch.setenv("RANK", "1")
        with lock_on_main_process(run):  # no lock of its own: it would wait on its own launch's main process
            pass


# -- prerequisites -------------------------------------------------------------------------------------------


def test_without_java_scienceworld_tests_are_skipped_saying_why(monkeypatch):
    """Without `java` on PATH, 31 ScienceWorld tests failed and one crashed pytest (INTERNALERROR)."""
    import shutil
    from types import SimpleNamespace

    import conftest  # tests/ is on sys.path under pytest

    class Item(SimpleNamespace):
        def add_marker(self, mark):
            self.marks.append(mark.mark if hasattr(mark, "mark") else mark)

        def get_closest_marker(self, name):
            return next((m for m in self.marks if m.name == name), None)

    def items():
        return [
            Item(nodeid=f"tests/test_env_scienceworld.py::{n}", path=REPO / "tests/test_env_scienceworld.py", marks=m)
            for n, m in (("test_plays", []), ("test_without_java_the_error_says_so", [pytest.mark.without_java.mark]))
        ]

    monkeypatch.setattr(shutil, "which", lambda name: None)
    plays, without = found = items()
    conftest.pytest_collection_modifyitems(None, found)
    skip = plays.get_closest_marker("skip")
    assert skip is not None and "Java 8+ on PATH" in skip.kwargs["reason"]
    assert without.get_closest_marker("skip") is None  # the test of the error a user without Java gets runs
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/java")
    plays, _ = found = items()
    conftest.pytest_collection_modifyitems(None, found)
    assert plays.get_closest_marker("skip") is None and plays.get_closest_marker("scienceworld") is not None


def test_the_readme_says_how_to_get_torchs_cpu_or_cuda_build():
    """`pip install torch==2.13.0` takes the CPU build only on machines with a local wheel folder; on PyPI for
    Linux it is the CUDA build (several GB)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme and "CUDA build" in readme
    assert "Java 8+" in readme
