"""Models that work offline: a tiny randomly initialised model for fast tests, and (see
`fetch_model`) packaged real weights converted once to a local transformers folder.

Anywhere a model is expected, a local path works; `resolve_model` also knows the names of
the models this module can build or fetch.
"""

from __future__ import annotations

from pathlib import Path

from rl_compaction.tiny import build_tiny_tokenizer


def build_tiny_model(path: str | Path, *, template: str = "chatml", hidden_size: int = 64, layers: int = 2,
                     seed: int = 0) -> Path:
    """Save a tiny random Llama-architecture causal LM with the tiny tokenizer (a real chat
    template with tool calls) to `path`; loads with `AutoModelForCausalLM.from_pretrained`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tokenizer = build_tiny_tokenizer(path, template=template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32_768,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    return path
