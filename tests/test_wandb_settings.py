"""One W&B rule for training, evaluation and the recipes' report (it was written out three times, and the
eval spelled the project by hand): WANDB_PROJECT else "rl-compaction"; WANDB_MODE, else online with an API
key, else offline."""

from __future__ import annotations

import os

import pytest

from rl_compaction.core.wandb_settings import wandb_mode, wandb_project

SETTINGS = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_DIR")


def _clear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset W&B's variables for the test, and restore them after it even where the code under test sets them."""
    for name in SETTINGS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("env", "project", "mode"),
    [
        ({}, "rl-compaction", "offline"),
        ({"WANDB_API_KEY": "k"}, "rl-compaction", "online"),
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "disabled", "WANDB_PROJECT": "mine"}, "mine", "disabled"),
        ({"WANDB_MODE": "online"}, "rl-compaction", "online"),
    ],
)
def test_the_project_and_mode_follow_one_rule(monkeypatch, env, project, mode):
    _clear(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (wandb_project(), wandb_mode()) == (project, mode)


def test_every_wandb_init_here_takes_the_rule(monkeypatch, tmp_path):
    """The eval's and the report's `wandb.init` calls, and the trainer's environment (transformers' callback
    reads it), all say what the rule says."""
    import wandb

    from rl_compaction.recipes.report import log_plots_to_wandb
    from rl_compaction.training.trainer import CompactionGRPOConfig
    from rl_compaction.training.wandb_resume import prepare_wandb

    _clear(monkeypatch)
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    seen = {}

    class Run:
        def log(self, *a, **k): ...
        def finish(self): ...

    monkeypatch.setattr(wandb, "init", lambda **kw: seen.update(kw) or Run())
    monkeypatch.setattr(wandb, "Image", lambda path: path)
    log_plots_to_wandb(tmp_path, {}, {})
    assert (seen["project"], seen["mode"]) == ("mine", "offline")
    args = CompactionGRPOConfig(output_dir=str(tmp_path / "g"), use_cpu=True, report_to=["wandb"])
    monkeypatch.setenv("WANDB_API_KEY", "k")
    prepare_wandb(args)
    assert (os.environ["WANDB_PROJECT"], os.environ["WANDB_MODE"]) == ("mine", "online")
