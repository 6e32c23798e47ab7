"""Full fine-tuning keeps fp32 master weights.

torch's AdamW updates a parameter in its own dtype. With bf16 weights (8 bits of mantissa) an update
smaller than ~1/256 of the weight rounds away: at the learning rates of RL fine-tuning (1e-6) three
GRPO steps on a tiny Qwen2 changed 2% of the weights in bf16 and 99.98% in fp32. So a full fine-tune
loads its weights in fp32 and computes in bf16 under autocast (`bf16: true`). LoRA is unaffected (PEFT
creates its adapters in fp32), and so is DeepSpeed, whose bf16/fp16 optimizer keeps an fp32 master copy.
"""

from __future__ import annotations

from typing import Any

import torch

HALF = (torch.bfloat16, torch.float16)


def check_master_weights(model: Any, args: Any, use_peft: bool) -> None:
    """Refuse a full fine-tune whose optimizer would update half-precision weights (module docstring)."""
    if use_peft or getattr(args, "deepspeed_plugin", None) is not None or getattr(args, "deepspeed", None):
        return
    trainable = [p.dtype for p in model.parameters() if p.requires_grad]
    half = sorted({str(d).removeprefix("torch.") for d in trainable if d in HALF})
    if half:
        raise ValueError(
            f"full fine-tuning with {'/'.join(half)} weights: AdamW would update them in {half[0]}, where "
            "updates below ~1/256 of a weight round away (at lr 1e-6 most of them). Load the weights in fp32 "
            "(`dtype: float32`) and keep `bf16: true` (autocast computes in bf16), or train LoRA (`use_peft: true`)"
        )


def bf16_supported() -> bool:
    """Whether this machine has an accelerator that computes in bf16 (transformers' own test, looked up
    at call time so a test can stand in for a GPU)."""
    from transformers import training_args

    return training_args.is_torch_bf16_gpu_available() or training_args.is_torch_xla_available()


def default_bf16(args: Any) -> None:
    """Settle `bf16` before TrainingArguments checks it. TRL's configs leave it None and then default it
    to True, which on a machine without a bf16 GPU stopped every run that did not say `bf16: false`
    ("Your setup doesn't support bf16/gpu"). Unset, it is now True only where a bf16 GPU exists or under
    `use_cpu` (bf16 autocast on the CPU, TRL's default there, which the shipped CPU recipes were measured
    with); set to true where neither holds, the error says what to do in one line."""
    if args.bf16 is None:
        args.bf16 = not args.fp16 and (args.use_cpu or bf16_supported())
    elif args.bf16 and not args.use_cpu and not bf16_supported():
        raise ValueError(
            "bf16: true needs a GPU with bf16 support and this machine has none; "
            "drop bf16 (fp32 here), or set use_cpu: true for bf16 autocast on the CPU"
        )


def default_checkpointing(args: Any) -> None:
    """TRL's configs default the deprecated `gradient_checkpointing` to True, so transformers (>= 5.23) warned
    that the name is deprecated for every config built without `activation_checkpointing`, a user's or not.
    Our configs leave `gradient_checkpointing` unset (None) and put TRL's default on the new name instead;
    a user who sets the old name still gets transformers' warning."""
    if args.gradient_checkpointing is not None:
        return
    if not hasattr(args, "activation_checkpointing"):  # transformers before 5.23 has only the old name
        args.gradient_checkpointing = True
    elif args.activation_checkpointing is None:
        args.activation_checkpointing = True
