"""Layer 2, accounting: every token count, cache figure and cost in reports comes from here.

A model input is the system instructions + tool definitions + rendered State, tokenised as
the model receives it: through the chat template and tokenizer of a local model
(`ChatTemplateCounter`), or, for an API model, as a documented tiktoken estimate
(`TiktokenCounter`, see `rl_compaction.core.render`).

Formulas (the design notes' names):
- reusable prefix(a, b) = length of the longest common initial token sequence;
- Cache Cost = tokens(new input) - reusable prefix(old input, new input);
- Compaction Cost = evolve-call tokens x output weight + Cache Cost, in input-token
  equivalents (output weight = output price / uncached input price);
- task cost = sum over model invocations of uncached input x 1 + cached input x cache-read
  weight + output x output weight + tokens newly written to cache x cache-write weight
  + attention x (sum of the positions of the uncached input tokens) + kv-read x (sum of the
  positions of the generated tokens). Which input tokens are cached is a `CacheModel`: the
  longest prefix shared with any earlier request, rounded down to whole blocks, and nothing
  below a minimum length. The last two terms are zero for API price lists; the `local`
  preset derives them from a model's shape (`local_cache_model`): a long context costs
  attention in every prefill and a read of the whole KV cache for every generated token.

Counting one more turn costs about the new tokens, not the whole context: counters cache
token ids per rendered piece and `Ledger` keeps earlier requests in a hashed prefix index.

Modules, one job each: `prefix` (the prefix arithmetic and the index of earlier requests),
`counters` (token counters), `cache_models` (the cache models and their presets) and `ledger` (the
cost of each turn, and an edit's receipt). This package re-exports their public names. It imports
only `rl_compaction.core`: model names are resolved above it (`rl_compaction.models.registry.counter_name`).
"""

from rl_compaction.accounting.cache_models import (
    COST_PARTS,
    CacheModel,
    PresetError,
    ServingShape,
    default_presets_path,
    get_cache_model,
    load_presets,
    local_cache_model,
)
from rl_compaction.accounting.counters import ChatTemplateCounter, TiktokenCounter, TokenCounter, get_counter
from rl_compaction.accounting.ledger import Ledger, TurnCost, edit_metrics
from rl_compaction.accounting.prefix import PrefixIndex, cache_cost, compaction_cost, reusable_prefix

__all__ = [
    "COST_PARTS",
    "CacheModel",
    "ChatTemplateCounter",
    "Ledger",
    "PrefixIndex",
    "PresetError",
    "ServingShape",
    "TiktokenCounter",
    "TokenCounter",
    "TurnCost",
    "cache_cost",
    "compaction_cost",
    "default_presets_path",
    "edit_metrics",
    "get_cache_model",
    "get_counter",
    "load_presets",
    "local_cache_model",
    "reusable_prefix",
]
