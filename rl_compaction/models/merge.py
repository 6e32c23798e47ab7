"""Merge a LoRA run folder into its base model, so it loads as a plain model folder everywhere."""

from __future__ import annotations

from pathlib import Path

from rl_compaction.models.registry import resolve_model


def merge_adapter(run_dir: str | Path, output_dir: str | Path | None = None) -> Path:
    """A LoRA run folder (PEFT adapter + tokenizer) merged into its base model and saved as a plain model
    folder (default RUN/merged), which any backend loads, `vllm:` too (vLLM needs a config.json)."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir = Path(run_dir)
    if not (run_dir / "adapter_config.json").is_file():
        raise ValueError(f"{run_dir} holds no adapter_config.json: not a LoRA run folder (a full model needs no merge)")
    output_dir = Path(output_dir) if output_dir is not None else run_dir / "merged"
    if output_dir.exists() and any(output_dir.iterdir()):
        raise ValueError(f"{output_dir} exists and is not empty; remove it or pass another --output")
    base = PeftConfig.from_pretrained(str(run_dir)).base_model_name_or_path
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base), local_files_only=True, dtype="auto")
    merged = PeftModel.from_pretrained(model, str(run_dir), local_files_only=True).merge_and_unload()
    tokenizer_dir = run_dir if (run_dir / "tokenizer_config.json").is_file() else resolve_model(base)
    merged.save_pretrained(output_dir)
    AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True).save_pretrained(output_dir)
    return output_dir
