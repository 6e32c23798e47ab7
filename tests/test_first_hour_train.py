"""What a new user met in their first hour of training: defaults that fail on CPU, W&B runs scattered
across projects, warnings on every run, and TRL's boilerplate model card."""

from __future__ import annotations

import pytest

from rl_compaction.cli import main as cli_main

# -- bf16 on a machine without a bf16 GPU ---------------------------------------------------------------


@pytest.fixture
def no_bf16_gpu(monkeypatch):
    """Whatever this machine has, transformers sees no bf16 accelerator."""
    import transformers.training_args

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: False)


def test_bf16_unset_means_fp32_without_a_bf16_gpu(tmp_path, no_bf16_gpu):
    from rl_compaction.training.sft import SFTConfig
    from rl_compaction.training.trainer import CompactionGRPOConfig

    assert CompactionGRPOConfig(output_dir=str(tmp_path / "grpo")).bf16 is False  # was: "Your setup doesn't..."
    assert SFTConfig(output_dir=str(tmp_path / "sft")).bf16 is False
    # use_cpu keeps TRL's default, bf16 autocast on the CPU, which the CPU recipes' figures were measured with
    assert CompactionGRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True).bf16 is True


def test_bf16_unset_keeps_trl_default_on_a_bf16_gpu(tmp_path, monkeypatch):
    import transformers.training_args

    from rl_compaction.training.trainer import CompactionGRPOConfig

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    assert CompactionGRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True).bf16 is True


@pytest.mark.parametrize("command", ["train", "sft"])
def test_bf16_asked_without_a_bf16_gpu_is_one_clear_line(tmp_path, capsys, no_bf16_gpu, command):
    extra = ["--dataset_dir", str(tmp_path / "demos")] if command == "sft" else []
    argv = [command, "--model_name_or_path", "tiny", "--output_dir", str(tmp_path / "out"), "--bf16", "true"]
    assert cli_main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"rl-compaction {command}: error: bf16: true needs a GPU with bf16 support"), err
    assert "use_cpu: true" in err[-1]


# -- W&B: one project, named runs --------------------------------------------------------------------------


class _Stop(Exception):
    """Raised in place of building the trainer: the entry point's set-up is what is checked."""


@pytest.fixture
def clean_wandb_env(monkeypatch, tmp_path):
    for name in ("WANDB_PROJECT", "WANDB_MODE", "WANDB_DIR", "WANDB_API_KEY", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.setenv(name, "x")  # so that the test's end restores the variable, whatever the code set
        monkeypatch.delenv(name)


def _stop_at_build(monkeypatch, module: str) -> dict:
    import os

    seen = {}

    def build_trainer(*args, **kwargs):
        config = next(a for a in args if hasattr(a, "run_name"))
        seen.update(run_name=config.run_name, project=os.environ.get("WANDB_PROJECT"))
        seen.update(mode=os.environ.get("WANDB_MODE"), dir=os.environ.get("WANDB_DIR"))
        raise _Stop

    monkeypatch.setattr(f"rl_compaction.training.{module}.build_trainer", build_trainer)
    return seen


def test_train_logs_to_the_rl_compaction_project_under_the_folder_name(tmp_path, monkeypatch, clean_wandb_env):
    from rl_compaction.training.train import main as train_main

    seen = _stop_at_build(monkeypatch, "train")
    out = tmp_path / "my-first-run"
    with pytest.raises(_Stop):
        train_main(["--model_name_or_path", "tiny", "--output_dir", str(out), "--report_to", "wandb", "--use_cpu"])
    # was: project "huggingface" (transformers' default), no name
    assert seen == {"run_name": "my-first-run", "project": "rl-compaction", "mode": "offline", "dir": str(out)}


def test_sft_logs_like_train_and_the_user_choices_win(tmp_path, monkeypatch, clean_wandb_env):
    from rl_compaction.training.sft import main as sft_main

    seen = _stop_at_build(monkeypatch, "sft")
    out = tmp_path / "warm-start"
    common = ["--dataset_dir", str(tmp_path), "--model_name_or_path", "tiny", "--report_to", "wandb", "--use_cpu"]
    with pytest.raises(_Stop):
        sft_main([*common, "--output_dir", str(out)])
    assert (seen["project"], seen["run_name"], seen["mode"]) == ("rl-compaction", "warm-start", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    with pytest.raises(_Stop):
        sft_main([*common, "--output_dir", str(tmp_path / "other"), "--run_name", "named"])
    assert (seen["project"], seen["run_name"]) == ("mine", "named")


def test_the_recipe_plots_are_logged_as_wandb_images(tmp_path, monkeypatch, clean_wandb_env):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import wandb

    from rl_compaction.recipes.report import log_plots_to_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    out = tmp_path / "vault-recipe"
    out.mkdir()
    images = {}
    for key in ("success_vs_cost", "learning_curve"):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [0, 1])
        fig.savefig(out / f"{key}.png")
        plt.close(fig)
        images[key] = out / f"{key}.png"
    log_plots_to_wandb(out, images, {"family": "vault"})
    wandb.teardown()
    (run,) = (out / "wandb").glob("offline-run-*")
    logged = sorted(p.name.split("_")[0] for p in run.glob("files/media/images/*.png"))
    assert logged == ["learning", "success"], logged
    record = next(run.glob("*.wandb")).read_bytes()
    assert b"vault-recipe-report" in record and b"rl-compaction" in record


# -- warnings: checkpointing's deprecated name, accelerate's thread count --------------------------------------


def test_configs_put_the_checkpointing_default_on_the_new_name_without_a_warning(tmp_path, recwarn):
    from rl_compaction.training.sft import SFTConfig
    from rl_compaction.training.trainer import CompactionGRPOConfig

    grpo = CompactionGRPOConfig(output_dir=str(tmp_path / "g"), use_cpu=True)
    sft = SFTConfig(output_dir=str(tmp_path / "s"), use_cpu=True)
    deprecated = [str(w.message) for w in recwarn if "deprecated" in str(w.message)]
    assert deprecated == []  # was: "`gradient_checkpointing` is deprecated ..." for each
    assert grpo.activation_checkpointing is True and sft.activation_checkpointing is True  # TRL's default, kept
    off = CompactionGRPOConfig(output_dir=str(tmp_path / "o"), use_cpu=True, activation_checkpointing=False)
    assert off.activation_checkpointing is False and off.gradient_checkpointing is False


@pytest.mark.slow
def test_a_cpu_launch_with_checkpointing_and_saves_prints_no_warning(tmp_path):
    """The header command of configs/train/tiny-cpu.yaml, two steps with a save each and activation
    checkpointing on: accelerate guesses nothing and no deprecation warning is printed."""
    import os
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    header = (root / "configs" / "train" / "tiny-cpu.yaml").read_text().splitlines()
    (launch,) = [line.lstrip("# ").strip() for line in header if line.startswith("#   accelerate launch")]
    argv = shlex.split(launch)
    argv[:2] = [sys.executable, "-m", "accelerate.commands.launch"]
    argv += ["--output_dir", str(tmp_path / "run"), "--max_steps", "2", "--save_steps", "1"]
    argv += ["--activation_checkpointing", "true"]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONWARNINGS")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoint-2").is_dir()
    lines = [line for line in done.stderr.splitlines() if "Warning" in line or "warn" in line.lower()]
    assert lines == [], lines


# -- the model card -------------------------------------------------------------------------------------------


def test_the_card_after_a_training_run_is_the_projects_own(tmp_path, monkeypatch):
    from rl_compaction.training.train import main as train_main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = tmp_path / "card-run"
    train_main(
        ["--config", str(root / "configs" / "train" / "tiny-cpu.yaml"), "--output_dir", str(out)]
        + ["--max_steps", "1", "--save_strategy", "no"]
    )
    card = (out / "README.md").read_text()
    assert card.startswith('---\nbase_model: "tiny"\nlibrary_name: transformers\n'), card[:200]
    for text in ("Task families: probe", "window 6000 tokens", "turn limit 2", "GRPO", "rl-compaction eval --policy"):
        assert text in card, text
    for text in ("None", "time machine", "licence: license"):  # TRL's boilerplate
        assert text not in card, text
