"""Token and cache accounting: every token count, cache figure and cost in reports comes from here.

A model input is the system instructions + tool definitions + rendered State, tokenised as
the model receives it: through the chat template and tokenizer of a local model
(`ChatTemplateCounter`), or, for an API model, as a documented tiktoken estimate
(`TiktokenCounter`, see `rl_compaction.render`).

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
"""

from __future__ import annotations

import bisect
import functools
import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rl_compaction.chat_format import render_prompt
from rl_compaction.render import estimate_pieces
from rl_compaction.state import State, text_of
from rl_compaction.tiktoken_offline import OFFLINE_ENCODINGS, get_encoding

TokenIds = Sequence[int]

# --------------------------------------------------------------------------- prefix arithmetic


def _as_list(ids: Any) -> list[int]:
    if isinstance(ids, list):
        return ids
    if hasattr(ids, "tolist"):  # numpy arrays and torch tensors
        return ids.tolist()
    return list(ids)


def reusable_prefix(a: TokenIds, b: TokenIds) -> int:
    """Length of the longest common initial token sequence of `a` and `b` (see `_common_prefix`)."""
    return _common_prefix(_as_list(a), _as_list(b))


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the common start of two lists or two strings.

    Compares slices in C: one comparison settles the common case (one sequence extends the
    other). Otherwise windows that double in size from the start find the first difference and
    a bisection inside the last window pins it, so the work after that first comparison grows
    with the common prefix, not with the sequences' length (an edit near the start of a long
    context is found at once)."""
    if len(a) > len(b):
        a, b = b, a
    n = len(a)
    if a == b[:n]:
        return n
    lo, width = 0, 256  # a[:lo] == b[:lo]; the first difference is at an index in [lo, n)
    while True:
        hi = min(n, lo + width)
        if a[lo:hi] != b[lo:hi]:
            break
        lo, width = hi, width * 2
    while hi - lo > 1:  # the first difference is at an index in [lo, hi)
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def cache_cost(old_ids: TokenIds, new_ids: TokenIds) -> int:
    """Tokens of the new input that the old input's cache cannot serve."""
    return len(new_ids) - reusable_prefix(old_ids, new_ids)


def compaction_cost(evolve_call_tokens: int, cache_cost: int, output_weight: float) -> float:
    """Compaction Cost in input-token equivalents: writing the edit plus re-reading what it broke."""
    if evolve_call_tokens < 0 or cache_cost < 0:
        raise ValueError(
            f"token counts must be >= 0, got evolve_call_tokens={evolve_call_tokens}, cache_cost={cache_cost}"
        )
    if not output_weight >= 0:
        raise ValueError(f"output_weight must be >= 0, got {output_weight}")
    return evolve_call_tokens * output_weight + cache_cost


# --------------------------------------------------------------------------- counters


class _ChunkCache:
    """Bounded LRU from a hashable key (a text piece, a frozen State item) to its token ids;
    misses are encoded together in one batch. `size(key, ids)` is what an entry counts against
    `max_chars` (default: the key's length)."""

    def __init__(
        self,
        encode_batch: Callable[[list[Any]], list[list[int]]],
        max_entries: int,
        max_chars: int,
        size: Callable[[Any, list[int]], int] = lambda key, ids: len(key),
    ):
        if max_entries < 1 or max_chars < 1:
            raise ValueError("cache bounds must be >= 1")
        self._encode_batch = encode_batch
        self._size = size
        self._entries: OrderedDict[Any, list[int]] = OrderedDict()
        self._chars = 0
        self.max_entries, self.max_chars = max_entries, max_chars

    def encode(
        self,
        keys: list[Any],
        values: list[Any] | None = None,
        out: list[int] | None = None,
        lengths: list[int] | None = None,
    ) -> list[int]:
        """The ids of `keys` concatenated, appended to `out` (a new list by default); each key's id
        count is appended to `lengths` when given. A miss is encoded from its key, or from the
        matching element of `values` (the object the key was made from)."""
        entries = self._entries
        missing: dict[Any, Any] = {}
        for key, value in zip(keys, keys if values is None else values, strict=True):
            if key not in entries and key not in missing:
                missing[key] = value
        fresh = dict(zip(missing, self._encode_batch(list(missing.values())), strict=True)) if missing else {}
        out = [] if out is None else out
        for key in keys:
            ids = fresh.get(key)
            if ids is None:
                ids = entries[key]
                entries.move_to_end(key)
            out.extend(ids)
            if lengths is not None:
                lengths.append(len(ids))
        for key, ids in fresh.items():
            entries[key] = ids
            self._chars += self._size(key, ids)
        while len(entries) > self.max_entries or (self._chars > self.max_chars and len(entries) > 1):
            key, ids = entries.popitem(last=False)
            self._chars -= self._size(key, ids)
        return out


class _NotFreezable(Exception):
    """A value holds something other than plain JSON types (or a str subclass, a non-str key)."""


def _frozen(value: Any) -> Any:
    """A hashable key for a JSON value such that equal keys always render the same JSON: str and
    None stand for themselves; a dict is ("d", k1, v1, k2, v2, ...) and a list ("l", v1, ...)
    (one tuple each: few allocations, so little garbage-collector work per call); other scalars
    are tagged by type (so 1, 1.0 and True differ) and floats go by repr (so 0.0 and -0.0
    differ). Raises _NotFreezable for anything else."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict:
        flat: list[Any] = ["d"]
        for k, v in value.items():
            if type(k) is not str:
                raise _NotFreezable
            flat.append(k)
            flat.append(v if type(v) is str else _frozen(v))
        return tuple(flat)
    if kind is list:
        return ("l", *map(_frozen, value))
    if kind is int or kind is bool:
        return (kind.__name__, value)
    if kind is float:
        return ("f", repr(value))
    raise _NotFreezable


class TokenCounter(ABC):
    """Tokenises a whole model input exactly as one model receives it.

    `input_ids` is incremental (cached per piece) and must always equal `input_ids_full`,
    the uncached reference path."""

    name: str

    @abstractmethod
    def input_ids(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        """The model input's token ids, generation prompt included."""

    @abstractmethod
    def input_ids_full(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        """Same ids as `input_ids`, tokenised from scratch without any cache."""

    @abstractmethod
    def output_tokens(self, items: list[dict[str, Any]]) -> int:
        """Tokens the model emits to produce `items` (one model turn: messages and calls)."""

    def call_tokens(self, item: dict[str, Any]) -> int:
        """Tokens the model emitted for one generated function_call item."""
        if not isinstance(item, dict) or item.get("type") != "function_call":
            raise ValueError(f"call_tokens needs a function_call item, got {str(item)[:80]}")
        return self.output_tokens([item])

    @abstractmethod
    def text_tokens(self, text: str) -> int:
        """Tokens of a bare text (no template framing), e.g. a tool output's share of the input."""

    def count(self, instructions: str, tools: list[dict[str, Any]], state: State) -> int:
        """Number of tokens of the model input."""
        return len(self.input_ids(instructions, tools, state))


#: Whitespace runs at least this long are encoded in pieces: tiktoken's regex overflows its stack
#: (a Rust panic, which is a BaseException and escapes every ``except Exception``) on a run of
#: about 1M whitespace characters, 1 MB of text that a State or a model turn may well hold.
_LONG_WHITESPACE = re.compile(r"\s{65536,}")
_WHITESPACE_PIECE = 16_384
#: the end of a long run stays with the text after it, so that boundary tokenizes as it would whole
_WHITESPACE_TAIL = 256


def encode_ordinary_safely(encoding: Any, text: str) -> list[int]:
    """`encoding.encode_ordinary(text)`, with whitespace runs over 64k characters encoded in 16k pieces
    (a run of whitespace is whitespace tokens either way; the count differs by a few tokens per
    64k characters at most). A panic of the encoder on any other text becomes a ValueError."""
    pieces, pos = [], 0
    for match in _LONG_WHITESPACE.finditer(text):
        start, end = match.start(), match.end() - _WHITESPACE_TAIL
        pieces.append(text[pos:start])
        pieces.extend(text[i : min(i + _WHITESPACE_PIECE, end)] for i in range(start, end, _WHITESPACE_PIECE))
        pos = end
    pieces.append(text[pos:])
    ids: list[int] = []
    for piece in pieces:
        try:
            ids.extend(encoding.encode_ordinary(piece))
        except BaseException as e:  # pyo3's PanicException derives from BaseException
            if type(e).__name__ != "PanicException":
                raise
            raise ValueError(f"the {encoding.name} tokenizer failed on a text of {len(piece):,} characters") from None
    return ids


class TiktokenCounter(TokenCounter):
    """The documented tiktoken estimate for API models (`rl_compaction.render.estimate_pieces`).

    Each piece (header, one per item, generation prompt) is encoded on its own with
    `encode_ordinary` (text that looks like a special token counts as text) and cached, so an
    appended turn only encodes its new items. Items are cached by their content (`_frozen`), so
    a known item costs a hash lookup instead of its JSON serialisation: per turn that is most of
    the work, and an evolve result (new objects, mostly unchanged items) reuses the counts of
    every unchanged item. `output_tokens` counts a function call as tokens(name) +
    tokens(arguments) and a message or reasoning item as the tokens of its text: the provider's
    per-call framing is not public and is left out."""

    def __init__(self, encoding_name: str = "o200k_base", *, max_entries: int = 16_384, max_chars: int = 64 << 20):
        self.encoding = get_encoding(encoding_name)
        self.name = encoding_name
        self._cache = _ChunkCache(lambda pieces: self._encode_batch(pieces), max_entries, max_chars)
        self._items = _ChunkCache(self._encode_items, max_entries, max_chars, size=lambda key, ids: 4 * len(ids) + 64)

    def _encode_batch(self, pieces: list[str]) -> list[list[int]]:
        return [encode_ordinary_safely(self.encoding, p) for p in pieces]

    def _encode_items(self, items: list[dict[str, Any]]) -> list[list[int]]:
        return self._encode_batch(estimate_pieces("", [], items)[1:-1])

    def input_ids(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        header, generation_prompt = estimate_pieces(instructions, tools, [])
        try:
            keys = [_frozen(item) for item in state]
            ids = self._cache.encode([header])
            self._items.encode(keys, state, out=ids)
        except (_NotFreezable, ValueError):  # unusual values take the piece path; a bad item raises there
            return self._cache.encode(estimate_pieces(instructions, tools, state))
        return self._cache.encode([generation_prompt], out=ids)

    def input_ids_full(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        ids: list[int] = []
        for piece in estimate_pieces(instructions, tools, state):
            ids.extend(encode_ordinary_safely(self.encoding, piece))
        return ids

    def text_tokens(self, text: str) -> int:
        return len(encode_ordinary_safely(self.encoding, text))

    def output_tokens(self, items: list[dict[str, Any]]) -> int:
        def enc(text: str) -> list[int]:
            return encode_ordinary_safely(self.encoding, text)

        total = 0
        for i, item in enumerate(items):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind == "function_call":
                total += len(enc(item["name"])) + len(enc(item["arguments"]))
            elif kind == "message":
                total += len(enc(text_of(item["content"])))
            elif kind == "reasoning":
                total += len(enc(text_of(item.get("content") or item.get("summary") or [])))
            else:
                raise ValueError(f"output item {i}: a model emits messages, function calls or reasoning, not {kind!r}")
        return total


# Rust's char::is_whitespace, which `tokenizers` uses for an added token's lstrip/rstrip.
_RUST_WS = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


@dataclass(frozen=True)
class _Encoded:
    """A text the counter encoded, its ids, and where each added-token match in it ends
    (in chars, and in ids up to there)."""

    text: str
    ends: list[int]
    id_ends: list[int]
    ids: list[int]


class ChatTemplateCounter(TokenCounter):
    """A local model's exact input: its chat template rendered and its tokenizer applied.

    Incremental path: a fast (Rust) tokenizer first splits text at added tokens that match
    on the raw text and then tokenises each stretch between them on its own, so encoding
    those stretches separately and concatenating gives the same ids. The counter splits
    the rendered text the same way and caches ids per stretch; an appended turn encodes
    only its new stretches. It also keeps its last few texts with their ids: a new text reuses
    the ids of the one it shares the longest start with, up to the last added token that ends
    inside the shared start, and splits and looks up only the rest (see `_encode`).
    A probe at construction checks the equality for this
    tokenizer (it fails e.g. for a Metaspace pre-tokenizer that marks only the first
    word); when it fails, or for a slow tokenizer, every call takes the full path.
    The Jinja rendering itself is redone each call (templates are not decomposable); it
    is string work, much cheaper than tokenising, and at ~100k tokens most of what a call costs."""

    #: texts kept for reuse: about the episodes that share one counter in lockstep (G)
    RECENT = 16

    def __init__(
        self,
        tokenizer: Any,
        *,
        name: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        max_entries: int = 16_384,
        max_chars: int = 64 << 20,
    ):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template")
        self.tokenizer = tokenizer
        self.name = name or f"hf:{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}"
        self.template_kwargs = dict(template_kwargs or {})
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = None
        if backend is not None:
            # An independent copy, so truncation/padding set on the shared tokenizer cannot leak in.
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(backend.to_str())
            self._backend.no_truncation()
            self._backend.no_padding()
            self._backend.encode_special_tokens = backend.encode_special_tokens
        self._split = self._added_token_splitter()
        self._cache = _ChunkCache(lambda texts: self._encode_batch(texts), max_entries, max_chars)
        self.incremental = self._split is not None and self._probe_chunking()
        # `_encode`'s reuse needs every split-out added token to hold a non-whitespace character.
        self._reuse = self.incremental and all(
            t.content.strip() for t in self._backend.get_added_tokens_decoder().values()
        )
        self._recent: list[_Encoded] = []

    # -- tokenisation

    def _added_token_splitter(self) -> re.Pattern[str] | None:
        """A regex matching what the Rust tokenizer extracts before normalising: added tokens
        with normalized=False (with their lstrip/rstrip whitespace); None if not applicable."""
        if self._backend is None:
            return None
        alternatives = []
        for tok in self._backend.get_added_tokens_decoder().values():
            if tok.single_word:
                return None
            if tok.normalized or (tok.special and self._backend.encode_special_tokens):
                continue
            pattern = re.escape(tok.content)
            if tok.lstrip:
                pattern = _RUST_WS + "*" + pattern
            if tok.rstrip:
                pattern += _RUST_WS + "*"
            alternatives.append((len(tok.content), pattern))
        if not alternatives:
            return None
        alternatives.sort(key=lambda x: -x[0])  # longest first, as the tokenizer's leftmost-longest match
        return re.compile("(" + "|".join(p for _, p in alternatives) + ")")

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def _chunks(self, text: str) -> list[str]:
        return [c for c in self._split.split(text) if c]

    def _probe_chunking(self) -> bool:
        added = [
            t.content for t in self._backend.get_added_tokens_decoder().values() if self._split.fullmatch(t.content)
        ]
        probe = "Hello world\n" + "".join(f"{t}user\n x  y {t} z\n\n{t}\n’é🙂 w" for t in added[:8])
        chunked = [i for c in self._chunks(probe) for i in self._encode_batch([c])[0]]
        return chunked == self.encode_text(probe)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` as `apply_chat_template(tokenize=True)` makes them (no added BOS/EOS)."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def text_tokens(self, text: str) -> int:
        return len(self.encode_text(text))

    def _encode(self, text: str) -> list[int]:
        """Ids of `text`, from the cache of stretches, reusing a recent text's ids for the start
        they share.

        Why the reuse is exact: the splitter's matches that end at an index e < shared (the
        common start's length) are the same in both texts, because whether and where each one
        matches depends only on the text up to and including index e (a match's trailing
        whitespace stops at e); scanning resumes at e either way. Every added token the splitter
        knows holds a non-whitespace character, so no new match can begin before e and run past
        it. So the ids up to the last such match end are the recent text's ids up to there."""
        if not self.incremental:
            return self.encode_text(text)
        base, shared = None, 0
        for record in self._recent if self._reuse else ():  # a few texts: one per episode in lockstep
            n = _common_prefix(record.text, text)
            if n > shared:
                base, shared = record, n
        ids: list[int] = []
        ends: list[int] = []  # char index where each added-token match ends
        id_ends: list[int] = []  # id count of the text up to there
        start = 0
        if base is not None:
            k = bisect.bisect_left(base.ends, shared)  # base.ends[:k] < shared
            if k:
                start = base.ends[k - 1]
                ids = base.ids[: base.id_ends[k - 1]]
                ends, id_ends = base.ends[:k], base.id_ends[:k]
        pieces, is_match = [], []
        pos = start
        for m in self._split.finditer(text, start):
            if m.start() > pos:
                pieces.append(text[pos : m.start()])
                is_match.append(0)
            pieces.append(m.group())
            is_match.append(m.end())
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:])
            is_match.append(0)
        lengths: list[int] = []
        self._cache.encode(pieces, out=ids, lengths=lengths)
        total = len(ids) - sum(lengths)
        for length, end in zip(lengths, is_match, strict=True):
            total += length
            if end:
                ends.append(end)
                id_ends.append(total)
        record = _Encoded(text, ends, id_ends, ids)
        if base is not None and shared * 2 >= len(base.text):  # the same conversation, moved on
            self._recent.remove(base)
        self._recent.append(record)
        del self._recent[: -self.RECENT]
        return list(ids)

    # -- rendering

    def render(
        self, instructions: str, tools: list[dict[str, Any]], state: State, *, add_generation_prompt: bool = True
    ) -> str:
        """The chat template's text for instructions + tools + state: exactly the prompt a local
        policy sends (`rl_compaction.chat_format.render_prompt`, fallback format included)."""
        return render_prompt(
            self.tokenizer,
            instructions,
            tools,
            state,
            add_generation_prompt=add_generation_prompt,
            template_kwargs=self.template_kwargs,
        )

    def input_ids(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        return self._encode(self.render(instructions, tools, state))

    def input_ids_full(self, instructions: str, tools: list[dict[str, Any]], state: State) -> list[int]:
        return self.encode_text(self.render(instructions, tools, state))

    def output_tokens(self, items: list[dict[str, Any]]) -> int:
        """Tokens of the assistant turn the template renders for `items`, after the generation
        prompt and up to its end-of-turn token (whitespace the template puts after that token
        is not generated and not counted). Measured as the ids of a one-turn conversation
        beyond their common prefix with the same conversation's generation prompt."""
        for i, item in enumerate(items):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind not in ("function_call", "message", "reasoning") or (
                kind == "message" and item.get("role") != "assistant"
            ):
                raise ValueError(
                    f"output item {i}: a model emits assistant messages, function calls or "
                    f"reasoning, not {str(item)[:80]}"
                )
        opening: State = [{"type": "message", "role": "user", "content": "."}]
        prompt = self.encode_text(self.render("", [], opening))
        turn = self.render("", [], opening + list(items), add_generation_prompt=False).rstrip()
        ids = self.encode_text(turn)
        return len(ids) - reusable_prefix(prompt, ids)


@functools.cache
def _shared_tiktoken_counter(name: str) -> TiktokenCounter:
    return TiktokenCounter(name)


def get_counter(name: str) -> TokenCounter:
    """A counter by name: "o200k_base" or "cl100k_base" (tiktoken estimate; one shared counter per
    encoding and process, so every env and `apply_evolve` reuse the same cached counts, which
    always equal the uncached path's), a known model name
    (`rl_compaction.models.KNOWN_MODELS`), or "hf:PATH" / an existing directory (a local tokenizer
    with a chat template; never downloads)."""
    if name in OFFLINE_ENCODINGS:
        return _shared_tiktoken_counter(name)
    from rl_compaction.models import KNOWN_MODELS, resolve_model

    if name in KNOWN_MODELS:
        name = str(resolve_model(name))
    is_hf = name.startswith("hf:")
    path = name[3:] if is_hf else name
    if is_hf or (name and Path(name).is_dir()):
        if not path:
            raise ValueError("hf: needs a path, e.g. hf:/models/Qwen2.5-0.5B-Instruct")
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"cannot load a tokenizer from {path!r} with local files only (the hub is never contacted): {e}"
            ) from e
        return ChatTemplateCounter(tokenizer, name=f"hf:{path}")
    raise ValueError(
        f"unknown token counter {name!r}; choose one of: {', '.join(OFFLINE_ENCODINGS)}, "
        "hf:PATH (a local tokenizer directory or cached model), or an existing directory"
    )


# --------------------------------------------------------------------------- cache models


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
    """The presets the package ships (rl_compaction/data/accounting.yaml, read with importlib.resources,
    so a wheel install has them too); configs/accounting.yaml is the user-facing copy, kept equal by a test."""
    return Path(str(resources.files("rl_compaction") / "data" / "accounting.yaml"))


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


# --------------------------------------------------------------------------- evolve receipt


def edit_metrics(
    counter: TokenCounter,
    instructions: str,
    tools: list[dict[str, Any]],
    before_state: State,
    after_state: State,
    evolve_call_tokens: int,
    output_weight: float | None = None,
) -> dict[str, Any]:
    """The receipt numbers of an evolve edit: the model inputs rendered from the State before
    and after the edit, their reusable prefix, Cache Cost and Compaction Cost.
    `output_weight` defaults to the default preset's (configs/accounting.yaml)."""
    if output_weight is None:
        output_weight = get_cache_model().output_weight
    before = counter.input_ids(instructions, tools, before_state)
    after = counter.input_ids(instructions, tools, after_state)
    prefix = reusable_prefix(before, after)
    cost = len(after) - prefix
    return {
        "before_tokens": len(before),
        "after_tokens": len(after),
        "reusable_prefix_tokens": prefix,
        "evolve_call_tokens": evolve_call_tokens,
        "cache_cost": cost,
        "compaction_cost": compaction_cost(evolve_call_tokens, cost, output_weight),
    }


# --------------------------------------------------------------------------- ledger


class PrefixIndex:
    """Earlier token sequences ("branches") and the longest prefix a new one shares with any.

    A sequence that extends a branch replaces it, so no branch is a prefix of another: an
    append-only episode keeps one branch and each edit adds one. Each branch is hashed in
    blocks of `GRAIN` tokens as a hash chain (as vLLM's prefix cache does); a lookup finds
    the last chain hash it shares with any branch, confirms the match by comparison and
    compares the rest within one block, so results are exact even under hash collisions.
    Chain hashes are reused from the previous sequence up to their common prefix, so a
    lookup hashes only new tokens."""

    GRAIN = 64

    def __init__(self) -> None:
        self._seqs: dict[int, list[int]] = {}
        self._chains: dict[int, list[int]] = {}
        self._by_hash: dict[int, set[int]] = {}
        self._next_id = 0
        self._last: int | None = None

    def __len__(self) -> int:
        return len(self._seqs)

    @staticmethod
    def _block_hash(previous: int, block: list[int]) -> int:
        """Chain hash of one block: depends on the block and on every block before it."""
        return hash((previous, *block))

    def _chain(self, seq: list[int]) -> tuple[list[int], int]:
        """Chain hashes of seq's full blocks, and how many leading blocks are known (by
        comparison) to equal the last branch's."""
        g = self.GRAIN
        chain: list[int] = []
        if self._last is not None:
            chain = self._chains[self._last][: reusable_prefix(self._seqs[self._last], seq) // g]
        verified = len(chain)
        h = chain[-1] if chain else 0
        for start in range(len(chain) * g, len(seq) - g + 1, g):
            h = self._block_hash(h, seq[start : start + g])
            chain.append(h)
        return chain, verified

    def _match(self, seq: list[int], chain: list[int], verified: int) -> tuple[int, int | None]:
        """(longest shared prefix, id of a branch that is a prefix of seq or None)."""
        k = 0
        while k < len(chain) and chain[k] in self._by_hash:
            k += 1
        base = k * self.GRAIN
        candidates = self._by_hash[chain[k - 1]] if k else self._seqs.keys()
        best, prefix_of = 0, None
        for b in candidates:
            s = self._seqs[b]
            # A hash match is confirmed by comparison (the last branch's was compared in _chain).
            if k and not (b == self._last and k <= verified) and s[:base] != seq[:base]:
                return self._brute_force(seq)  # a hash collision: not seen in practice, still exact
            n = base + reusable_prefix(s[base : base + self.GRAIN], seq[base : base + self.GRAIN])
            best = max(best, n)
            if n == len(s):
                prefix_of = b
        return best, prefix_of

    def _brute_force(self, seq: list[int]) -> tuple[int, int | None]:
        best, prefix_of = 0, None
        for b, s in self._seqs.items():
            n = reusable_prefix(s, seq)
            best = max(best, n)
            if n == len(s):
                prefix_of = b
        return best, prefix_of

    def longest(self, seq: TokenIds) -> int:
        """Longest prefix `seq` shares with any branch."""
        seq = _as_list(seq)
        return self._match(seq, *self._chain(seq))[0]

    def extend(self, seq: TokenIds, *, copy: bool = True) -> int:
        """Longest prefix `seq` shares with any branch; then `seq` is recorded as a branch
        (`copy=False`: the caller hands the list over and will not change it)."""
        seq = list(seq) if copy or not isinstance(seq, list) else seq
        chain, verified = self._chain(seq)
        best, prefix_of = self._match(seq, chain, verified)
        if best == len(seq):
            return best  # already covered by a branch
        if prefix_of is None:
            bid, known = self._next_id, 0
            self._next_id += 1
        else:  # seq extends that branch: it takes the branch's place and keeps its hashes
            bid, known = prefix_of, len(self._chains[prefix_of])
        self._seqs[bid], self._chains[bid] = seq, chain
        for h in chain[known:]:
            self._by_hash.setdefault(h, set()).add(bid)
        self._last = bid
        return best


@dataclass(frozen=True)
class TurnCost:
    """One model invocation's tokens and cost (input-token equivalents)."""

    index: int
    input_tokens: int
    cached_tokens: int
    uncached_tokens: int
    output_tokens: int
    cache_write_tokens: int
    #: longest prefix shared with the previous invocation's input (no block rounding)
    reusable_prefix: int
    evolve_call_tokens: int
    #: None: no evolve call in this turn; True/False: the edit was applied / failed
    evolve_applied: bool | None
    cost: float
    #: the cost by part (`COST_PARTS`); they sum to `cost`
    cost_parts: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Ledger:
    """Per-episode record of model invocations under one `CacheModel`."""

    def __init__(self, cache_model: CacheModel):
        if not isinstance(cache_model, CacheModel):
            raise TypeError(f"Ledger needs a CacheModel, got {type(cache_model).__name__}")
        self.cache_model = cache_model
        self._rows: list[TurnCost] = []
        self._index = PrefixIndex()
        self._previous_input: list[int] = []
        self._harness_edits: list[bool] = []

    @property
    def rows(self) -> list[TurnCost]:
        return list(self._rows)

    def record(
        self,
        input_ids: TokenIds,
        output: TokenIds | int,
        *,
        evolve_call_tokens: int = 0,
        evolve_applied: bool | None = None,
    ) -> TurnCost:
        """Account one invocation: its exact input ids and its output ids, or only the output
        token count (a provider's usage report, an estimate). Generated tokens can join the
        cache (`cache_outputs`) only when their ids are given."""
        cm = self.cache_model
        inputs = _as_list(input_ids)
        if isinstance(output, bool) or not isinstance(output, int):
            output_ids: list[int] | None = _as_list(output)
            n_out = len(output_ids)
        elif output < 0:
            raise ValueError(f"output token count must be >= 0, got {output}")
        else:
            output_ids, n_out = None, output
        if isinstance(evolve_call_tokens, bool) or not isinstance(evolve_call_tokens, int) or evolve_call_tokens < 0:
            raise ValueError(f"evolve_call_tokens must be an int >= 0, got {evolve_call_tokens!r}")
        if evolve_applied not in (None, True, False):
            raise ValueError(f"evolve_applied must be None, True or False, got {evolve_applied!r}")
        if evolve_call_tokens and evolve_applied is None:
            raise ValueError("evolve_call_tokens given without evolve_applied: say whether the edit was applied")

        cacheable = inputs + output_ids if cm.cache_outputs and output_ids is not None else list(inputs)
        shared = self._index.extend(cacheable, copy=False)
        cached = cm.cached(min(shared, len(inputs)))
        written = max(0, cm.cached(len(cacheable)) - cm.cached(shared))
        uncached = len(inputs) - cached
        parts = cm.cost_parts(len(inputs), cached, n_out, written)
        row = TurnCost(
            index=len(self._rows),
            input_tokens=len(inputs),
            cached_tokens=cached,
            uncached_tokens=uncached,
            output_tokens=n_out,
            cache_write_tokens=written,
            reusable_prefix=reusable_prefix(self._previous_input, inputs),
            evolve_call_tokens=evolve_call_tokens,
            evolve_applied=evolve_applied,
            cost=sum(parts.values()),
            cost_parts=parts,
        )
        self._previous_input = cacheable[: len(inputs)] if len(cacheable) > len(inputs) else cacheable
        self._rows.append(row)
        return row

    def record_harness_edit(self, applied: bool) -> None:
        """An edit the harness made itself (a fixed strategy at the threshold): no model
        invocation and no generated tokens, but it counts as a compaction or a failure."""
        self._harness_edits.append(bool(applied))

    def totals(self) -> dict[str, Any]:
        """Sums over all invocations, plus peak context (largest input), compactions (evolve
        edits applied, by the model or the harness), evolve failures, evolve tokens and the
        cached share of input."""
        rows = self._rows
        total_input = sum(r.input_tokens for r in rows)
        total_cached = sum(r.cached_tokens for r in rows)
        return {
            "invocations": len(rows),
            "input_tokens": total_input,
            "cached_tokens": total_cached,
            "uncached_tokens": sum(r.uncached_tokens for r in rows),
            "output_tokens": sum(r.output_tokens for r in rows),
            "cache_write_tokens": sum(r.cache_write_tokens for r in rows),
            "cost": sum(r.cost for r in rows),
            "cost_parts": {k: sum(r.cost_parts[k] for r in rows) for k in COST_PARTS},
            "peak_context_tokens": max((r.input_tokens for r in rows), default=0),
            "compactions": sum(r.evolve_applied is True for r in rows) + sum(self._harness_edits),
            "evolve_failures": sum(r.evolve_applied is False for r in rows) + sum(not a for a in self._harness_edits),
            "harness_compactions": sum(self._harness_edits),
            "evolve_tokens": sum(r.evolve_call_tokens for r in rows),
            "cached_share": total_cached / total_input if total_input else 0.0,
        }


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
