"""The GPU check (scripts/gpu_check.sh): its dry run on CPU writes every promised figure, the
model shapes in configs/models are the published models' shapes, the device plan's envs reach
their contexts, the check passes no argument the lent machine's transformers (5.17) lacks, and
what it carries there fits in what travels."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainingArguments

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


@pytest.mark.slow
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
    vllm_skip = [] if has_vllm else [f"{first}/vllm_*: {gpu_check.VLLM_CANNOT_TRAVEL}"]
    assert report["skipped"] == vllm_skip + [f"{s}/grpo, sft: the dry run trains the first shape only" for s in others]
    params = None
    for shape, result in report["shapes"].items():
        phases = result["phases"]
        trained = {"grpo_lora", "grpo_full", "sft", *vllm_phases} if shape == first else set()
        assert set(phases) == {"model", *rollouts, *trained}, shape
        model = phases.pop("model")
        params = model["params"] if shape == first else params
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
            assert rollout["prefill_turns"] >= 2  # the context lies above the first prompt: the oracle played
    phases = report["shapes"][first]["phases"]
    for mode in ("lora", "full", *(["vllm_colocate"] if has_vllm else [])):
        grpo = phases[f"grpo_{mode}"]
        assert grpo["steps"] == plan.grpo_steps and grpo["generated_tokens_per_s"] > 0
        assert 0 <= grpo["outside_model_share"] < 1
        # every episode starts above grpo_context: each step trains rows at least that long
        assert grpo["tokens_per_step"] >= plan.group_size * plan.grpo_context
        assert grpo["trained_tokens_from"] == "trainer log" and 0 < grpo["trained_tokens_per_step"]
    assert phases["grpo_lora"]["trainable_params"] < phases["grpo_full"]["trainable_params"]
    assert phases["sft"]["steps"] == plan.sft_steps and phases["sft"]["rows"] >= 1
    assert phases["sft"]["tokens_per_step"] > 0 and phases["sft"]["trained_tokens_per_step"] > 0
    for name in ("grpo_lora", "grpo_full", "sft"):
        assert phases[name]["activation_checkpointing"] is True, name
        assert phases[name]["model_params"] == params, name
        assert phases[name]["peak_bf16_tflops"] is None and phases[name]["mfu"] is None, name  # CPU: no peak
    assert report["mfu_formula"].startswith("mfu = 6 * model_params * tokens_per_step / step_s")


# --------------------------------------------------------------------------- the device's transformers

#: transformers 5.17.0's TrainingArguments fields, recorded there (the lent GPU machine's version)
FIELDS_5_17 = {
    line.strip()
    for line in (REPO / "tests" / "data" / "transformers-5.17.0-training-arguments.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
TrainingArguments517 = dataclasses.make_dataclass(
    "TrainingArguments517", [(name, Any, dataclasses.field(default=None)) for name in sorted(FIELDS_5_17)]
)


def test_the_training_phases_pass_no_argument_transformers_5_17_lacks(tmp_path):
    """On the device (transformers 5.17) every GRPO and SFT phase failed with "unexpected keyword
    argument 'activation_checkpointing'" (added in 5.23); the check now names checkpointing as the
    installed TrainingArguments does, and passes nothing else 5.17's lacks."""
    from trl import SFTConfig

    from rl_compaction.training.trainer import CompactionGRPOConfig

    assert "gradient_checkpointing" in FIELDS_5_17 and "activation_checkpointing" not in FIELDS_5_17
    ours = {f.name for f in dataclasses.fields(TrainingArguments)}
    plan = gpu_check.DEVICE_PLAN
    grpo = gpu_check.grpo_config_kwargs(plan, "full", tmp_path, False, TrainingArguments517)
    sft = gpu_check.sft_config_kwargs(plan, tmp_path, False, TrainingArguments517)
    for config_cls, kwargs in ((CompactionGRPOConfig, grpo), (SFTConfig, sft)):
        beyond = {f.name for f in dataclasses.fields(config_cls)} - ours  # TRL's and our own fields
        assert set(kwargs) <= FIELDS_5_17 | beyond, set(kwargs) - FIELDS_5_17 - beyond
        assert kwargs["gradient_checkpointing"] is True
    # under the installed transformers (>= 5.23) the new name, and the built config has it on
    kwargs = gpu_check.grpo_config_kwargs(gpu_check.DRY_PLAN, "full", tmp_path, True, CompactionGRPOConfig)
    assert kwargs["activation_checkpointing"] is True and "gradient_checkpointing" not in kwargs
    assert gpu_check.checkpointing_is_on(CompactionGRPOConfig(**kwargs))


# --------------------------------------------------------------------------- the device plan's prefill


def test_the_device_plan_prefill_reaches_its_contexts_with_the_model_turn_budget_intact(tmp_path):
    """The device plan's envs, with the tokenizer the check uses: the oracle plays until the context
    holds 8192 / 32768 tokens (it stopped at 4380 tokens when its turns counted against the model's
    max_turns = 2), and the model then has all its turns, the last one truncating the episode."""
    from rl_compaction.accounting import ChatTemplateCounter
    from rl_compaction.models.registry import load_pretrained

    folder = tmp_path / "model"  # the toy shrink: the same tokenizer and model type as the device run's
    gpu_check.save_random_model(gpu_check.SHAPES[0], folder, dry_run=True, device="cpu", dtype=torch.float32)
    counter = ChatTemplateCounter(load_pretrained(str(folder))[1])
    plan = gpu_check.DEVICE_PLAN
    cases = [(context, plan.rollout_turns) for context in plan.contexts] + [(plan.grpo_context, plan.grpo_turns)]
    assert {c for c, _ in cases} == {8192, 32768}
    reached = {}
    for context, turns in cases:
        envs = gpu_check.make_envs(plan, context, turns, counter, gpu_check.Timers(False), plan.group_size)
        for env in envs:
            obs, info = env.reset(seed=0)
            assert info["input_tokens"] >= context and info["prefill_turns"] >= 2, (context, info)
            assert counter.count(env.instructions, env.tools, obs["state"]) >= context
            assert (env.turn, env.output_tokens, env.config.max_turns) == (0, 0, turns)
            for turn in range(1, turns + 1):
                obs, _, terminated, truncated, step_info = env.step([{"role": "assistant", "content": "Thinking."}])
                assert not terminated and truncated == (turn == turns), (context, turn, step_info)
            assert step_info["truncated_reason"] == "max_turns"
        reached[context] = info["input_tokens"]
    assert reached[8192] < 2 * 8192 and reached[32768] < 2 * 32768  # inside the env's window


# --------------------------------------------------------------------------- MFU


def test_mfu_is_six_params_tokens_over_step_time_and_the_card_peak(monkeypatch):
    assert gpu_check.peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_check.peak_bf16_tflops("NVIDIA H200") == 989.0
    assert gpu_check.peak_bf16_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_check.peak_bf16_tflops("NVIDIA H100 NVL") == 835.0
    assert gpu_check.peak_bf16_tflops("NVIDIA A100-SXM4-80GB") is None and gpu_check.peak_bf16_tflops(None) is None
    steps = [
        {"count/tokens": 65536.0, "log/trained_tokens": 1024.0},
        {"count/tokens": 70000.0, "log/trained_tokens": 900.0},
    ]
    on_cpu = gpu_check.throughput(steps, [2.0, 2.0], 494_032_768, cuda=False)
    assert on_cpu["mfu"] is None and on_cpu["tokens_per_step"] == 67768.0
    assert on_cpu["trained_tokens_per_step"] == 962.0 and on_cpu["trained_tokens_from"] == "trainer log"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    on_h100 = gpu_check.throughput(steps, [2.0, 2.0], 494_032_768, cuda=True)
    expected = [6 * 494_032_768 * t / 2.0 / 989e12 for t in (65536.0, 70000.0)]
    assert on_h100["mfu"] == pytest.approx(sum(expected) / 2) and on_h100["peak_bf16_tflops"] == 989.0


# --------------------------------------------------------------------------- what travels

MIB_64 = 64 * 2**20


def carried_wheels() -> dict[str, int]:
    lines = (REPO / "scripts" / "gpu_check_wheels.txt").read_text().splitlines()
    return {spec: int(size) for spec, size in (line.split() for line in lines if line and not line.startswith("#"))}


def test_the_carried_wheels_and_the_tracked_tree_fit_in_what_travels():
    """What travels with a device run (the tracked tree and the .whl/ folder) is limited to 64 MiB;
    the wheel list with its measured sizes is scripts/gpu_check_wheels.txt, which the README's
    download command and CI's device-versions environment read."""
    wheels = carried_wheels()
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    tree = sum((REPO / name).stat().st_size for name in files.decode().split("\0") if (REPO / name).is_file())
    assert sum(wheels.values()) + tree < MIB_64, (sum(wheels.values()), tree)
    readme = (REPO / "configs" / "README.md").read_text()
    assert (
        "scripts/gpu_check_wheels.txt" in readme
        and "scripts/gpu_check_wheels.txt" in (REPO / ".ci" / "run").read_text()
    )
    for spec in wheels:  # the doc names each, with its size
        assert spec.split("==")[0] in readme, spec
