"""Cache models: which input tokens a provider serves from its prompt cache and what each token costs
(the presets in configs/accounting.yaml, and `local_cache_model` for a self-served model's shape)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class PresetError(ValueError):
    """The accounting presets file is missing, malformed or names no such preset."""


class CacheModel(BaseModel):
    """Which input tokens a provider serves from its prompt cache, and the price ratios.

    Weights are relative to one uncached input token. `cache_write_weight` is the surcharge
    on top of that for each token newly written to cache (Anthropic's 1.25x write price is
    0.25 here). `cache_outputs`: whether a request's generated tokens also become cacheable
    (vLLM's prefix cache keeps them; API prompt caches cache prompts).

    Context-length terms (zero for API price lists, derived by `local_cache_model`):
    `attention_weight`: extra cost of an uncached input token per token before it (prefill
    attention); `kv_read_weight`: extra cost of a generated token per token before it (each
    decode step reads the request's whole KV cache)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    block_size: int = Field(1, ge=1)
    min_cached_tokens: int = Field(0, ge=0)
    cache_read_weight: float = Field(ge=0)
    cache_write_weight: float = Field(0.0, ge=0)
    output_weight: float = Field(ge=0)
    cache_outputs: bool = False
    attention_weight: float = Field(0.0, ge=0)
    kv_read_weight: float = Field(0.0, ge=0)

    def cached(self, prefix_tokens: int) -> int:
        """Tokens served from cache for a shared prefix of `prefix_tokens`: whole blocks only,
        and none below the minimum."""
        n = prefix_tokens // self.block_size * self.block_size
        return n if n >= self.min_cached_tokens else 0

    def cost_parts(self, input_tokens: int, cached: int, output_tokens: int, written: int) -> dict[str, float]:
        """One invocation's cost by part (input-token equivalents); the cost is their sum.

        Positions count from 0: the uncached input tokens sit at positions cached .. input-1,
        the generated ones at input .. input+output-1."""
        uncached = input_tokens - cached
        return {
            "uncached_input": float(uncached),
            "cached_input": cached * self.cache_read_weight,
            "output": output_tokens * self.output_weight,
            "cache_write": written * self.cache_write_weight,
            "attention": self.attention_weight * _position_sum(cached, input_tokens),
            "kv_read": self.kv_read_weight * _position_sum(input_tokens, input_tokens + output_tokens),
        }


#: the parts of a cost, in the order reports show them
COST_PARTS = ("uncached_input", "cached_input", "output", "cache_write", "attention", "kv_read")


def _position_sum(start: int, stop: int) -> int:
    """start + (start + 1) + ... + (stop - 1)."""
    return (stop * (stop - 1) - start * (start - 1)) // 2


class ServingShape(BaseModel):
    """What a local-serving cost model is derived from: the model's shape and the accelerator.

    params: all parameters (every decode step reads them all); layers; attention_dim: query
    heads x head dim; kv_dim: key/value heads x head dim (GQA); bytes_per_param: 2 for bf16
    weights and KV cache; flops: the accelerator's dense bf16 FLOP/s; bandwidth: its memory
    bandwidth in bytes/s; decode_batch: sequences decoded together (they share one weight read)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    params: float = Field(gt=0)
    layers: int = Field(gt=0)
    attention_dim: int = Field(gt=0)
    kv_dim: int = Field(gt=0)
    bytes_per_param: float = Field(2.0, gt=0)
    flops: float = Field(gt=0)
    bandwidth: float = Field(gt=0)
    decode_batch: int = Field(64, gt=0)

    @classmethod
    def from_hf_config(cls, config: Any, **hardware: Any) -> ServingShape:
        """The shape of a transformers decoder (a `PretrainedConfig` or its dict): parameters
        counted as embeddings (+ an untied LM head) + per layer q/k/v/o and a gated MLP."""
        c = config if isinstance(config, dict) else config.to_dict()
        hidden, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
        head_dim = c.get("head_dim") or hidden // heads
        kv_heads = c.get("num_key_value_heads") or heads
        attn, kv = heads * head_dim, kv_heads * head_dim
        per_layer = hidden * (attn + 2 * kv) + attn * hidden + 3 * hidden * c["intermediate_size"]
        embed = c["vocab_size"] * hidden * (1 if c.get("tie_word_embeddings", True) else 2)
        return cls(params=embed + layers * per_layer, layers=layers, attention_dim=attn, kv_dim=kv, **hardware)


def local_cache_model(shape: ServingShape) -> CacheModel:
    """A cost model of serving `shape` yourself with prefix caching (vLLM, SGLang), in units of
    one uncached input token at position 0.

    Prefill is compute-bound: a token costs 2 x params FLOPs plus 4 x layers x attention_dim x t
    for attending to the t tokens before it (QK^T and AV, 2 FLOPs per multiply-add; Kaplan et al.
    2020, "Scaling Laws for Neural Language Models", Table 1). So one unit = 2 params / flops
    seconds, and attention_weight = 2 x layers x attention_dim / params.
    Decode is memory-bound: a step reads the weights once for the whole batch and the request's
    own KV cache (2 x layers x kv_dim x bytes per token: the cache the request holds for its
    life). Its time per generated token at position t is
    (weight bytes / decode_batch + t x KV bytes) / bandwidth, so output_weight =
    flops / (decode_batch x bandwidth) (for bf16) and kv_read_weight = KV bytes x flops /
    (2 x params x bandwidth). Cached prefix tokens are not recomputed: read weight 0."""
    unit_s = 2 * shape.params / shape.flops
    weight_bytes = shape.params * shape.bytes_per_param
    kv_bytes = 2 * shape.layers * shape.kv_dim * shape.bytes_per_param
    return CacheModel(
        block_size=1,
        min_cached_tokens=0,
        cache_read_weight=0.0,
        cache_write_weight=0.0,
        output_weight=weight_bytes / shape.decode_batch / shape.bandwidth / unit_s,
        cache_outputs=True,
        attention_weight=2 * shape.layers * shape.attention_dim / shape.params,
        kv_read_weight=kv_bytes / shape.bandwidth / unit_s,
    )


def default_presets_path() -> Path:
    """The presets the package ships: configs/accounting.yaml, installed as `rl_compaction_configs` and read
    with importlib.resources, so a wheel install has them too."""
    return Path(str(resources.files("rl_compaction_configs") / "accounting.yaml"))


def _read_presets(path: str | Path | None) -> tuple[str, dict[str, CacheModel]]:
    """Parsed once per file version: every env construction asks for the presets."""
    p = Path(path) if path is not None else default_presets_path()
    try:
        version = p.stat().st_mtime_ns
    except FileNotFoundError:
        raise PresetError(f"accounting presets file not found: {p}") from None
    except OSError as e:
        raise PresetError(f"cannot read accounting presets {p}: {e}") from None
    default, presets = _parse_presets(str(p), version)
    return default, dict(presets)


@functools.lru_cache(maxsize=16)
def _parse_presets(path: str, version: int) -> tuple[str, dict[str, CacheModel]]:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PresetError(f"accounting presets file not found: {p}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise PresetError(f"cannot read accounting presets {p}: {e}") from None
    if not isinstance(data, dict) or set(data) != {"default", "presets"}:
        raise PresetError(f"{p}: expected a mapping with exactly the keys 'default' and 'presets'")
    raw = data["presets"]
    if not isinstance(raw, dict) or not raw:
        raise PresetError(f"{p}: 'presets' must be a non-empty mapping of name -> cache model")
    presets = {}
    for name, fields in raw.items():
        if not isinstance(fields, dict):
            raise PresetError(f"{p}: preset {name!r} must be a mapping of fields")
        try:
            if "local" in fields:  # derived from a model shape and an accelerator
                if set(fields) != {"local"} or not isinstance(fields["local"], dict):
                    raise PresetError(f"{p}: preset {name!r}: 'local' takes a mapping of shape fields and stands alone")
                presets[str(name)] = local_cache_model(ServingShape(**fields["local"]))
            else:
                presets[str(name)] = CacheModel(**fields)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'preset'}: {err['msg']}" for err in e.errors())
            raise PresetError(f"{p}: preset {name!r}: {problems}") from None
    if data["default"] not in presets:
        raise PresetError(f"{p}: default preset {data['default']!r} is not one of {', '.join(presets)}")
    return data["default"], presets


def load_presets(path: str | Path | None = None) -> dict[str, CacheModel]:
    """Cache-model presets by name from `path` (default: `default_presets_path()`)."""
    return _read_presets(path)[1]


def get_cache_model(name: str | None = None, path: str | Path | None = None) -> CacheModel:
    """The preset `name`, or the file's `default` preset when `name` is None."""
    default, presets = _read_presets(path)
    key = default if name is None else name
    if key not in presets:
        raise PresetError(f"unknown cache model preset {key!r}; choose one of {', '.join(presets)}")
    return presets[key]
