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
