"""Completion direction: a model's generated turn -> Responses output items (`parse_completion`).

Transformers' own parser runs first when the tokenizer carries a ``response_template``; otherwise, or
when it fails, the parser of the template's format (`rl_compaction.chat.formats`). Model output never
raises: a turn with any unreadable call becomes one assistant message holding the raw text, and
`ParsedCompletion.parse_errors` says why."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from rl_compaction.chat.formats import Malformed, call_from_json, resolve, tojson
from rl_compaction.core.render import chat_tools

#: Markers after which a model's turn is over; the text is cut at the first one.
END_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "</s>",
    "<|end|>",
    "<end_of_turn>",
    "<|return|>",
    "<|im_start|>",
    "<|start_header_id|>",
)


@dataclass
class ParsedCompletion:
    """One generated turn as Responses output items, plus what parsing noticed."""

    #: an assistant message (all free text, first; present when there is text or no call) and function calls
    items: list[dict[str, Any]]
    #: which parser produced the items: "response_template" or a format name
    parser: str
    #: why the turn's tool calls could not be parsed (then `items` is one message with the raw text)
    parse_errors: list[str] = field(default_factory=list)
    #: text of a leading <think>...</think> block, kept out of the items
    reasoning: str | None = None

    @property
    def error(self) -> str | None:
        """The parse errors as one line (None for a well-formed turn), for rollout records."""
        return "; ".join(self.parse_errors) or None


def _cut_at_end(text: str, extra: tuple[str, ...] = ()) -> str:
    cut = len(text)
    for marker in END_MARKERS + extra:
        if marker and (i := text.find(marker)) != -1:
            cut = min(cut, i)
    return text[:cut]


def _split_reasoning(text: str, opened_in_prompt: bool) -> tuple[str | None, str]:
    """(reasoning, rest): a Qwen3-style ``<think>...</think>`` block that opens the turn, or one
    whose opening tag ended the prompt. Anywhere else (e.g. inside a call's code) it is text."""
    if opened_in_prompt:
        head, closed, rest = text.partition("</think>")
    else:
        stripped = text.lstrip()
        if not stripped.startswith("<think>"):
            return None, text
        head, closed, rest = stripped[len("<think>") :].partition("</think>")
    if not closed:
        return None, text
    return head.strip(), rest


def _items(text: str, calls: list[tuple[str, dict]], seed: str) -> list[dict[str, Any]]:
    """Output items; call_ids are ``call_<hash of the text>_<i>``: deterministic and unique within
    a turn (the env repairs collisions across turns)."""
    digest = hashlib.sha1(seed.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    items: list[dict[str, Any]] = []
    if text or not calls:
        items.append({"type": "message", "role": "assistant", "content": text})
    for i, (name, args) in enumerate(calls):
        items.append(
            {"type": "function_call", "call_id": f"call_{digest}_{i}", "name": name, "arguments": tojson(args)}
        )
    return items


def _join(texts: list[str]) -> str:
    return "\n".join(t.strip() for t in texts if t.strip())


def _from_response_template(
    tokenizer: Any, text: str, prompt: str, tools: list[dict[str, Any]] | None
) -> tuple[str, list[tuple[str, dict]], str | None]:
    """(text, calls, reasoning) from transformers' own parser; raises on anything unexpected."""
    message = tokenizer.parse_response(text, prefix=prompt, tools=chat_tools(tools) if tools else None)
    if not isinstance(message, dict):
        raise Malformed(f"parse_response returned {type(message).__name__}, not a message dict")
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise Malformed(f"parse_response gave non-text content ({type(content).__name__})")
    raw_calls = message.get("tool_calls") or []
    flat = [c for group in raw_calls for c in (group if isinstance(group, list) else [group])]
    calls = []
    for k, call in enumerate(flat):
        fn = call.get("function", call) if isinstance(call, dict) else call
        calls.append(call_from_json(fn, f"tool call {k}"))
    reasoning = message.get("reasoning_content") or message.get("thinking")
    return content.strip(), calls, reasoning if isinstance(reasoning, str) else None


def parse_completion(
    text: str,
    tokenizer_or_format: Any,
    *,
    prompt: str = "",
    tools: list[dict[str, Any]] | None = None,
) -> ParsedCompletion:
    """Generated text -> Responses output items; never raises on the model's text.

    `tokenizer_or_format`: a tokenizer (its template decides the format; its
    ``response_template``, if any, is tried first) or a format name from `FORMATS`.
    `prompt`/`tools`: the prompt text and tools of the turn, which transformers' parser uses
    (the prompt may open the assistant turn, e.g. with ``<think>``)."""
    if not isinstance(text, str):
        raise ValueError(f"parse_completion needs the generated text as a string, got {type(text).__name__}")
    fmt, tokenizer = resolve(tokenizer_or_format)
    extra = tuple(t for t in (getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)) if t)
    raw = _cut_at_end(text, extra)
    errors: list[str] = []
    if tokenizer is not None and getattr(tokenizer, "response_template", None) is not None:
        try:
            content, calls, reasoning = _from_response_template(tokenizer, raw, prompt, tools)
            return ParsedCompletion(_items(content, calls, raw), "response_template", [], reasoning)
        except Exception as e:  # noqa: BLE001 - any failure of the library parser falls back to ours
            errors.append(f"response_template: {type(e).__name__}: {str(e)[:200]}")
    reasoning, body = _split_reasoning(raw, prompt.rstrip().endswith("<think>"))
    try:
        texts, calls = fmt.parse_calls(body)
    except Malformed as e:
        return ParsedCompletion(_items(body.strip(), [], raw), fmt.name, [*errors, str(e)], reasoning)
    # The library parser failed but ours read the turn: it is well formed, so no error is reported.
    return ParsedCompletion(_items(_join(texts), calls, raw), fmt.name, [], reasoning)
