"""How a State reaches a model: chat messages for Hugging Face chat templates, and the
serialisation behind the tiktoken estimate for API models.

Both views start from the same three inputs (system instructions, tool definitions, the
State), so every token count in the project is of the whole model input, not of the State
alone.

Chat messages (`chat_messages`), for ``tokenizer.apply_chat_template(messages, tools=...)``:
- the system instructions become the first message, role ``system``;
- ``user``/``assistant``/``system`` messages keep their role; ``developer`` becomes
  ``system`` (chat templates know no developer role); content parts are flattened with
  `text_of`;
- ``function_call`` items join the assistant message right before them (an assistant
  message or earlier calls of the same turn) as OpenAI chat ``tool_calls`` with the
  arguments parsed to a dict, which is what templates render with ``tojson``; a call with
  no assistant message before it opens one with empty content;
- ``function_call_output`` becomes a ``tool`` message with ``tool_call_id`` and the name of
  its call;
- ``reasoning`` items are skipped: chat templates of open models have no slot for an
  earlier turn's opaque reasoning, and providers drop it from later prompts as well.

API estimate (`estimate_pieces`): API providers do not publish their prompt serialisation,
so the count for an API model is an *estimate*: a JSON header line with the instructions
and tool definitions, then each State item as one compact JSON line, then a fixed
generation prompt. Each piece is tokenised on its own and the ids concatenated, which is
what lets accounting cache per piece. The estimate is kept apart from provider-reported
usage and is meant for comparing strategies, not for reconciling an invoice.
"""

from __future__ import annotations

import json
from typing import Any

from rl_compaction.core.state import State, text_of

#: The last piece of the API estimate: the model's turn begins.
ESTIMATE_GENERATION_PROMPT = "assistant:"

_ROLE_MAP = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _item_type(item: dict[str, Any], index: int) -> str:
    if not isinstance(item, dict):
        raise ValueError(f"cannot render item {index}: expected an object, got {type(item).__name__}")
    kind = item.get("type", "message" if "role" in item else None)
    if kind is None:
        raise ValueError(f"cannot render item {index}: it has neither 'type' nor 'role'")
    return kind


def _parsed_arguments(item: dict[str, Any], index: int) -> dict[str, Any]:
    try:
        args = json.loads(item["arguments"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(
            f"cannot render item {index} (function_call): arguments must be a JSON object string ({e})"
        ) from None
    if not isinstance(args, dict):
        raise ValueError(f"cannot render item {index} (function_call): arguments must be a JSON object string")
    return args


def chat_messages(instructions: str, state: State) -> list[dict[str, Any]]:
    """The chat-completions messages a chat template renders for `instructions` + `state`."""
    if not isinstance(instructions, str):
        raise ValueError(f"instructions must be a string, got {type(instructions).__name__}")
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
    call_names: dict[str, str] = {}
    # True while the last message is an assistant turn that later calls may still join.
    open_turn = False
    for i, item in enumerate(state):
        kind = _item_type(item, i)
        if kind == "message":
            role = _ROLE_MAP.get(item.get("role"))
            if role is None:
                raise ValueError(f"cannot render item {i}: unknown role {item.get('role')!r}")
            messages.append({"role": role, "content": text_of(item["content"])})
            open_turn = role == "assistant"
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": _parsed_arguments(item, i)},
            }
            call_names[item["call_id"]] = item["name"]
            if not open_turn:
                messages.append({"role": "assistant", "content": ""})
                open_turn = True
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            message = {"role": "tool", "tool_call_id": item["call_id"], "content": text_of(item["output"])}
            if item["call_id"] in call_names:
                message["name"] = call_names[item["call_id"]]
            messages.append(message)
            open_turn = False
        elif kind != "reasoning":
            raise ValueError(f"cannot render item {i}: unknown item type {kind!r}")
    return messages


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses API function tools -> chat-completions tools (``{"type": "function",
    "function": {name, description, parameters}}``) for ``apply_chat_template(tools=...)``.

    ``strict`` is dropped: it tells the API to constrain decoding and is not shown to the
    model. Tools already in chat-completions form pass through unchanged."""
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ValueError(f"tool {i}: only function tools are supported, got {tool!r:.80}")
        if isinstance(tool.get("function"), dict):
            out.append(tool)
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ValueError(f"tool {i}: a function tool needs a non-empty 'name'")
        function = {"name": tool["name"]}
        for key in ("description", "parameters"):
            if key in tool:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def estimate_header(instructions: str, tools: list[dict[str, Any]]) -> str:
    """First piece of the API estimate: one JSON line with the instructions and tools."""
    return _compact_json({"instructions": instructions, "tools": tools}) + "\n"


def estimate_item(item: dict[str, Any]) -> str:
    """One State item as a piece of the API estimate: its compact JSON and a newline."""
    return _compact_json(item) + "\n"


def estimate_pieces(instructions: str, tools: list[dict[str, Any]], state: State) -> list[str]:
    """The API estimate's pieces, in order: header, one line per item, generation prompt."""
    if not isinstance(instructions, str):
        raise ValueError(f"instructions must be a string, got {type(instructions).__name__}")
    for i, item in enumerate(state):
        _item_type(item, i)
    return [estimate_header(instructions, tools), *map(estimate_item, state), ESTIMATE_GENERATION_PROMPT]


def function_tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A Responses API function tool definition."""
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
        "strict": True,
    }
