"""What a GPU run would hit, tested on CPU: fp32 master weights for full fine-tuning, no dense attention
masks in the loss, one engine wake and weight sync per generation phase (counted at TRL's own calls, with
a stand-in engine: vLLM's CPU build has no sleep mode), one-token dummy turns on idle processes, and
server-mode answers handed to the right process."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.models.registry import resolve_model
from rl_compaction.training import generation
from rl_compaction.training.precision import check_master_weights
from rl_compaction.training.segments import Segment
from rl_compaction.training.trainer import CompactionGRPOConfig, CompactionGRPOTrainer

CONFIGS = Path(__file__).parents[1] / "configs" / "train"


def _tiny_qwen2(dtype: torch.dtype = torch.float32) -> tuple[Qwen2ForCausalLM, object]:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(dtype), tokenizer


def _trainer(tmp_path, model, tokenizer, **overrides) -> CompactionGRPOTrainer:
    args = CompactionGRPOConfig(
        output_dir=str(tmp_path / "run"),
        use_cpu=True,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=8,
        activation_checkpointing=False,
        save_strategy="no",
        eval_strategy="no",
        **overrides,
    )
    trainer = CompactionGRPOTrainer(model, args, processing_class=tokenizer, episode=EpisodeSpec(max_turns=3))
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets
    return trainer


ROWS = [
    (Segment(list(range(5, 25)), list(range(30, 70)), [1] * 30 + [0] * 5 + [1] * 5, [0.0] * 40), 1.0),
    (Segment(list(range(5, 13)), list(range(40, 52)), [1] * 6 + [0] * 6, [0.0] * 12), -0.5),
]


# -- full fine-tuning keeps fp32 master weights ---------------------------------------------------------


def test_the_full_fine_tuning_config_moves_every_weight_in_three_steps(tmp_path):
    """The shipped full fine-tuning config's dtype and precision, three AdamW steps at its learning rate:
    with bf16 weights ~2% of them changed (updates round away); with fp32 master weights nearly all do."""
    config = yaml.safe_load((CONFIGS / "qwen2.5-1.5b-1gpu-full.yaml").read_text())
    assert not config.get("use_peft")
    model, tokenizer = _tiny_qwen2(getattr(torch, config["dtype"]))
    trainer = _trainer(tmp_path, model, tokenizer, learning_rate=config["learning_rate"], bf16=config["bf16"])
    check_master_weights(trainer.model, trainer.args, use_peft=False)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    optimizer = trainer.create_optimizer()
    for _ in range(3):
        optimizer.zero_grad()
        trainer._compute_loss(trainer.model, trainer._rows_to_tensors(ROWS, torch.device("cpu"))).backward()
        optimizer.step()
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(trainer.model.parameters(), before, strict=True))
    assert changed / sum(b.numel() for b in before) > 0.9


def test_half_precision_weights_are_refused_for_full_fine_tuning_only():
    model, _ = _tiny_qwen2(torch.bfloat16)
    args = SimpleNamespace(deepspeed=None, deepspeed_plugin=None)
    with pytest.raises(ValueError, match="bfloat16 weights.*dtype: float32"):
        check_master_weights(model, args, use_peft=False)
    check_master_weights(model, args, use_peft=True)  # LoRA's adapters are fp32
    check_master_weights(model, SimpleNamespace(deepspeed="zero3.json"), use_peft=False)  # its optimizer keeps fp32


# -- the loss builds no dense attention mask -------------------------------------------------------------


def test_the_loss_runs_row_by_row_without_a_mask_and_equals_the_padded_forward(tmp_path, monkeypatch):
    """A padded micro-batch made transformers build a B x 1 x W x W mask; each row now runs alone on its
    own tokens, with no mask at all, and the same log-probs, loss and gradient (float64)."""
    from trl import GRPOTrainer

    model, tokenizer = _tiny_qwen2()
    trainer = _trainer(tmp_path, model.double(), tokenizer)
    batch = trainer._rows_to_tensors(ROWS, torch.device("cpu"))
    masks: list[tuple | None] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        mask = kwargs.get("attn_mask")
        masks.append(None if mask is None else tuple(mask.shape))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)

    def loss_and_grad(get_logps) -> tuple[float, torch.Tensor]:
        trainer.model.zero_grad()
        monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", get_logps)
        loss = GRPOTrainer._compute_loss(trainer, trainer.model, batch)
        loss.backward()
        return loss.item(), torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    padded = loss_and_grad(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    assert any(m is not None and m[-1] == m[-2] > 1 for m in masks)  # the padded forward's W x W mask
    masks.clear()
    per_row = loss_and_grad(lambda *a, **k: CompactionGRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    assert masks and all(m is None for m in masks)
    # equal up to RoPE's angles, which transformers computes in float32 even in a float64 model: a left-padded
    # row's tokens sit at other absolute positions in the padded forward (relative ones are the same)
    assert abs(per_row[0] - padded[0]) < 1e-9 * abs(padded[0])
    assert (per_row[1] - padded[1]).norm() < 1e-6 * padded[1].norm()


# -- generation: one wake and sync per phase, one-token dummies, server answers by count -------------------


class FakeEngine:
    """vLLM's `LLM` as TRL's colocate path calls it: counts wakes, sleeps, weight loads and generate calls,
    and models the prefix cache (one token blocks, dropped by a reset or a sleep) to count prefill tokens."""

    def __init__(self, reply: list[int]):
        self.reply, self.calls, self.cached = reply, Counter(), []
        self.prefill = 0
        self.prompts: list[list[int]] = []
        self.max_tokens: list[int] = []
        model = SimpleNamespace(load_weights=lambda weights: self.calls.update(["load_weights"]))
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)))
        )

    def wake_up(self, tags):
        self.calls.update([f"wake_up:{tags[0]}"])

    def sleep(self, level):
        self.calls.update(["sleep"])
        self.cached = []

    def reset_prefix_cache(self):
        self.calls.update(["reset_prefix_cache"])
        self.cached = []

    def generate(self, prompts, sampling_params, use_tqdm):
        from rl_compaction.accounting import reusable_prefix

        self.calls.update(["generate"])
        self.max_tokens.append(sampling_params.max_tokens)
        outputs = []
        for prompt in prompts:
            ids = prompt["prompt_token_ids"]
            self.prompts.append(ids)
            self.prefill += len(ids) - max((reusable_prefix(c, ids) for c in self.cached), default=0)
            reply = self.reply[: sampling_params.max_tokens]
            self.cached.append(ids + reply)
            lps = [{t: SimpleNamespace(rank=1, logprob=-1.0)} for t in reply]
            outputs.append(
                SimpleNamespace(prompt_token_ids=ids, outputs=[SimpleNamespace(token_ids=reply, logprobs=lps)])
            )
        return outputs


def _vllm_colocate(trainer, monkeypatch, reply: list[int]) -> FakeEngine:
    """The trainer with TRL's real `VLLMGeneration` (colocate, sleep mode) driving a `FakeEngine`."""
    from trl.generation import vllm_generation

    monkeypatch.setattr(vllm_generation, "SamplingParams", SimpleNamespace, raising=False)
    engine = FakeEngine(reply)
    gen = vllm_generation.VLLMGeneration.__new__(vllm_generation.VLLMGeneration)
    gen.__dict__.update(
        mode="colocate",
        enable_sleep_mode=True,
        _llm_weights_sleeping=True,
        llm=engine,
        model=trainer.model,
        accelerator=trainer.accelerator,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        max_completion_length=trainer.args.max_completion_length,
        logprobs=0,
        generation_kwargs={},
        structured_outputs_regex=None,
        tensor_parallel_size=1,
    )
    gen._iter_named_params = lambda: iter([("w", torch.zeros(1))])
    trainer.use_vllm, trainer.vllm_mode, trainer.vllm_generation, trainer._last_loaded_step = (
        True,
        "colocate",
        gen,
        -1,
    )
    trainer.vllm_importance_sampling_correction = False
    return engine


def test_a_sleeping_engine_is_woken_and_synced_once_per_generation_phase(tmp_path, monkeypatch):
    model, tokenizer = _tiny_qwen2()
    trainer = _trainer(tmp_path, model, tokenizer)
    reply = tokenizer.encode("Let me think about it.") + [tokenizer.eos_token_id]
    engine = _vllm_colocate(trainer, monkeypatch, reply)
    trainer.model.train()
    trainer._generate_and_score_completions([{"family": "probe", "task_seed": 0}] * 2)
    calls = engine.calls
    assert calls["generate"] == 3  # every episode ran to its 3-turn limit
    assert calls["load_weights"] == 1 and calls["wake_up:weights"] == 1 and calls["wake_up:kv_cache"] == 1
    assert calls["sleep"] == 1 and calls["reset_prefix_cache"] == 1
    # each turn's prompt extends the previous one, whose KV cache stayed: at most the distinct prompt tokens
    # are prefilled (fewer: a sampled turn is cached as it is decoded)
    unique = len({tuple(p[:i]) for p in engine.prompts for i in range(1, len(p) + 1)})
    assert engine.prefill <= unique < sum(len(p) for p in engine.prompts)
    # the next phase (the next optimizer step) syncs again, once
    trainer.state.global_step += 1
    trainer._generate_and_score_completions([{"family": "probe", "task_seed": 1}] * 2)
    assert calls["load_weights"] == 2 and calls["sleep"] == 2 and calls["generate"] == 6


def test_an_idle_process_decodes_one_token(tmp_path, monkeypatch):
    model, tokenizer = _tiny_qwen2()
    trainer = _trainer(tmp_path, model, tokenizer)
    engine = _vllm_colocate(trainer, monkeypatch, list(range(5, 13)))
    assert generation.generate(trainer, []) == ([], [])
    assert engine.max_tokens == [1] and trainer.vllm_generation.max_completion_length == 8
    # transformers generation: the dummy turn samples one token too
    trainer.use_vllm = False
    seen = []
    original = trainer._generate_single_turn

    def spy(prompts, *args):
        completions, logprobs = original(prompts, *args)
        seen.append([len(c) for c in completions])
        return completions, logprobs

    monkeypatch.setattr(trainer, "_generate_single_turn", spy)
    generation.generate(trainer, [])
    assert seen == [[1]] and trainer.generation_config.max_new_tokens == 8


def test_server_mode_hands_each_process_its_own_answers(monkeypatch):
    """Three processes send 2, 0 (idle) and 3 prompts: one request holds the 5, and each process gets
    its own answers back (TRL's slicing assumed equal counts on every process)."""
    sent = []

    def fake_generate(prompts, **params):
        sent.append((prompts, params["max_tokens"]))
        return {"completion_ids": [[p[0] + 100] for p in prompts], "logprobs": [[[-0.5]] for _ in prompts]}

    per_process = [[[1], [2]], [], [[3], [4], [5]]]
    monkeypatch.setattr(generation, "gather_object", lambda x: [y for p in per_process for y in _gathered(x, p)])
    monkeypatch.setattr(generation, "broadcast_object_list", lambda payload, from_process: payload)
    answers = []
    for rank, prompts in enumerate(per_process):
        gen = SimpleNamespace(
            vllm_client=SimpleNamespace(generate=fake_generate),
            repetition_penalty=1.0,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            min_p=None,
            max_completion_length=64,
            logprobs=0,
            structured_outputs_regex=None,
            generation_kwargs={},
        )
        trainer = SimpleNamespace(
            vllm_generation=gen,
            state=SimpleNamespace(global_step=0),
            _last_loaded_step=0,
            accelerator=SimpleNamespace(is_main_process=True, process_index=rank),
        )
        answers.append(generation.server_generate(trainer, prompts))
    assert sent[0] == ([[1], [2], [3], [4], [5]], 64)
    assert [a[0] for a in answers] == [[[101], [102]], [], [[103], [104], [105]]]
    assert answers[0][1] == [[-0.5], [-0.5]]


def _gathered(local, mine):
    """What `gather_object` returns on every process: the counts or the prompts of all of them."""
    return [len(mine)] if isinstance(local, list) and local and isinstance(local[0], int) else mine


def test_fsdp2_models_sync_their_processes_in_generate():
    from transformers.distributed.fsdp import is_fsdp_managed_module

    model, _ = _tiny_qwen2()
    model = copy.deepcopy(model)
    assert not is_fsdp_managed_module(model)
    generation.mark_fsdp2_for_generation(model)
    assert is_fsdp_managed_module(model)


def test_an_fsdp_config_is_refused_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="FSDP cannot be rehearsed on CPU"):
        CompactionGRPOConfig(output_dir=str(tmp_path / "r"), use_cpu=True, report_to="none", num_generations=2)


def test_lora_runs_ddp_without_searching_for_unused_parameters(tmp_path):
    from peft import LoraConfig

    model, tokenizer = _tiny_qwen2()
    args = CompactionGRPOConfig(output_dir=str(tmp_path / "r"), use_cpu=True, report_to="none", num_generations=2)
    assert args.ddp_find_unused_parameters is None  # transformers would take True for a PeftModel
    trainer = CompactionGRPOTrainer(
        model, args, processing_class=tokenizer, peft_config=LoraConfig(r=4, target_modules="all-linear")
    )
    assert trainer.args.ddp_find_unused_parameters is False


def test_sampled_logprobs_never_leave_the_logits_device():
    """The local policy's logprobs: computed where the logits are (a meta tensor has no data to copy to the
    host), and equal to the log-softmax of the whole logits."""
    from rl_compaction.policies.local import sampled_logprobs

    torch.manual_seed(0)
    logits = tuple(torch.randn(3, 50) for _ in range(4))
    sampled = torch.randint(0, 50, (3, 4))
    dense = torch.log_softmax(torch.stack(logits, 1) / 0.7, -1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(sampled_logprobs(logits, sampled, 0.7), dense)
    on_meta = sampled_logprobs(tuple(x.to("meta") for x in logits), sampled.to("meta"), 0.7)
    assert on_meta.device.type == "meta" and on_meta.shape == (3, 4)


def test_models_merge_turns_a_lora_run_folder_into_a_model_folder(tmp_path, capsys):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rl_compaction.cli import main as cli_main

    base_dir, run = tmp_path / "base", tmp_path / "run"
    model, tokenizer = _tiny_qwen2()
    model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(r=4, target_modules="all-linear"))
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)  # a trained adapter (lora_B starts at zero)
    peft.save_pretrained(run)
    tokenizer.save_pretrained(run)
    assert cli_main(["models", "merge", str(run)]) == 0
    merged_dir = run / "merged"
    assert capsys.readouterr().out.strip() == str(merged_dir) and (merged_dir / "config.json").is_file()
    ids = torch.tensor([tokenizer.encode("merge the adapter")])
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    with torch.no_grad():
        expected, got = peft.eval()(ids).logits, merged.eval()(ids).logits
    assert (expected - AutoModelForCausalLM.from_pretrained(base_dir)(ids).logits).abs().max() > 1e-3
    assert torch.allclose(got, expected, atol=1e-5)
    # a second merge into the same folder, or a folder without an adapter, is refused with the reason
    assert cli_main(["models", "merge", str(run)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert cli_main(["models", "merge", str(base_dir)]) == 2
    assert "not a LoRA run folder" in capsys.readouterr().err
