"""Prompt direction: instructions + tools + State -> chat messages (`rl_compaction.core.render`) -> the
tokenizer's chat template in the format `detect_format` finds -> prompt text and ids."""

from __future__ import annotations

from typing import Any

from rl_compaction.chat.formats import resolve
from rl_compaction.core.render import chat_messages
from rl_compaction.core.state import State


def render_prompt(
    tokenizer: Any,
    instructions: str,
    tools: list[dict[str, Any]],
    state: State,
    *,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The prompt text a local model receives for instructions + tools + State, through its chat
    template in the format `detect_format` finds (tools passed natively, or as text for the
    fallback format)."""
    fmt, _ = resolve(tokenizer)
    messages, template_tools = fmt.prepare(chat_messages(instructions, state), tools)
    return tokenizer.apply_chat_template(
        messages,
        tools=template_tools,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **(template_kwargs or {}),
    )


def prompt_ids(
    tokenizer: Any,
    instructions: str,
    tools: list[dict[str, Any]],
    state: State,
    *,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of `render_prompt` (generation prompt included), as ``apply_chat_template``
    would tokenise them: the template writes any BOS itself, so none is added."""
    text = render_prompt(tokenizer, instructions, tools, state, template_kwargs=template_kwargs)
    return list(tokenizer.encode(text, add_special_tokens=False))
