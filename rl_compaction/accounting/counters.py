"""Token counters: a model input (instructions + tools + rendered State) as token ids, through a local
model's chat template (`ChatTemplateCounter`) or as a tiktoken estimate (`TiktokenCounter`)."""

from __future__ import annotations

import bisect
import functools
import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_compaction.accounting.prefix import _common_prefix, reusable_prefix
from rl_compaction.chat import render_prompt
from rl_compaction.core.render import estimate_pieces
from rl_compaction.core.state import State, text_of
from rl_compaction.core.tiktoken_offline import OFFLINE_ENCODINGS, get_encoding


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
    """The documented tiktoken estimate for API models (`rl_compaction.core.render.estimate_pieces`).

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
        policy sends (`rl_compaction.chat.render_prompt`, fallback format included)."""
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
    always equal the uncached path's), or "hf:PATH" / an existing directory (a local tokenizer
    with a chat template; never downloads). Model names are the models layer's to resolve
    (`rl_compaction.models.registry.counter_name`): accounting sits below it."""
    if name in OFFLINE_ENCODINGS:
        return _shared_tiktoken_counter(name)
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
