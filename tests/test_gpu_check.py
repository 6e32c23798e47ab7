"""The GPU check (scripts/gpu_check.sh): its dry run on CPU writes every promised figure, and the
model shapes in configs/models are the published models' shapes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_check  # noqa: E402

#: Parameter counts of the published checkpoints (Qwen2.5-0.5B-Instruct, Qwen2.5-1.5B-Instruct).
PUBLISHED_PARAMS = {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304}


class _Ids:
    bos_token_id, eos_token_id, pad_token_id = None, 2, 0


@pytest.mark.parametrize("shape", gpu_check.SHAPES)
def test_model_configs_have_the_published_shapes(shape):
    config = gpu_check.shape_config(shape, _Ids(), dry_run=False)
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMS[shape]
    assert config.vocab_size == 151_936 and config.max_position_embeddings == 32_768


def test_the_report_goes_under_the_ignored_runs_folder_by_default(tmp_path):
    """A dry run without --out must not write into the working tree (issue 22, item 8): the default is
    runs/gpu_check.json (git ignores runs/), and its folder is made when missing."""
    assert gpu_check.build_parser().parse_args([]).out == Path("runs") / "gpu_check.json"
    assert subprocess.run(["git", "check-ignore", "-q", "runs/gpu_check.json"], cwd=REPO).returncode == 0
    out = tmp_path / "runs" / "gpu_check.json"
    gpu_check.write_json(out, {"dry_run": True})
    assert json.loads(out.read_text()) == {"dry_run": True}


def test_dry_run_writes_every_promised_figure(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        [str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] is True and report["errors"] == []
    assert report["environment"]["device"] == "cpu"
    assert list(report["shapes"]) == list(gpu_check.SHAPES)
    plan = gpu_check.DRY_PLAN
    rollouts = {f"rollout_{c}" for c in plan.contexts}
    first, *others = gpu_check.SHAPES
    # the vLLM phases run on the first shape where vllm is installed (CI's vLLM venv), else say why not
    has_vllm = importlib.util.find_spec("vllm") is not None
    vllm_rollouts = {f"vllm_rollout_{c}" for c in plan.contexts} if has_vllm else set()
    vllm_phases = vllm_rollouts | ({"grpo_vllm_colocate"} if has_vllm else set())
    vllm_skip = [] if has_vllm else [f"{first}/vllm_*: vllm is not installed (the [vllm] extra)"]
    assert report["skipped"] == vllm_skip + [f"{s}/grpo, sft: the dry run trains the first shape only" for s in others]
    for shape, result in report["shapes"].items():
        phases = result["phases"]
        trained = {"grpo_lora", "grpo_full", "sft", *vllm_phases} if shape == first else set()
        assert set(phases) == {"model", *rollouts, *trained}, shape
        model = phases.pop("model")
        assert model["params"] > 0 and model["vocab_size"] == model["tokenizer_vocab"]  # the toy shrink
        for name, phase in phases.items():
            assert phase["step_s" if "turn_s" not in phase else "generate_s"] > 0, name
            assert "peak_gpu_memory_gib" in phase and phase["peak_gpu_memory_gib"] is None  # CPU: no GPU figure
        for name in rollouts | (vllm_rollouts if shape == first else set()):
            rollout = phases[name]
            assert rollout["generated_tokens"] == plan.group_size * plan.rollout_turns * plan.new_tokens
            assert rollout["generated_tokens_per_s"] > 0
            assert 0 <= rollout["outside_model_share"] < 1
            assert rollout["prompt_tokens"] >= plan.contexts[0]
    phases = report["shapes"][first]["phases"]
    for mode in ("lora", "full", *(["vllm_colocate"] if has_vllm else [])):
        grpo = phases[f"grpo_{mode}"]
        assert grpo["steps"] == plan.grpo_steps and grpo["generated_tokens_per_s"] > 0
        assert 0 <= grpo["outside_model_share"] < 1
    assert phases["grpo_lora"]["trainable_params"] < phases["grpo_full"]["trainable_params"]
    assert phases["sft"]["steps"] == plan.sft_steps and phases["sft"]["rows"] >= 1
