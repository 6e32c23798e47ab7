"""The tool-call formats, one after another, each with its two halves side by side: how the chat
template is given the conversation (`ChatFormat.prepare`) and how a model's turn in that format is read
back (`ChatFormat.parse_calls`). The halves must agree token for token, so they are kept together.

`detect_format` picks the format from the tokenizer's chat template; the package docstring lists what
each format looks like."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rl_compaction.core.render import chat_tools

Messages = list[dict[str, Any]]
#: (free-text pieces, (name, arguments) per call) of one assistant turn
Calls = tuple[list[str], list[tuple[str, dict[str, Any]]]]


@dataclass(frozen=True)
class ChatFormat:
    """One tool-call format: what the chat template is given, and how a turn is read back."""

    name: str
    #: (chat messages, tools) -> (the messages the template renders, the tools it is given or None)
    prepare: Callable[[Messages, list[dict[str, Any]]], tuple[Messages, list[dict[str, Any]] | None]]
    #: an assistant turn's text -> its free text and calls; raises `Malformed` on a call it cannot read
    parse_calls: Callable[[str], Calls]


# --------------------------------------------------------------------------- shared by the parsers


class Malformed(ValueError):
    """A tool call in the text that cannot be read."""


_DECODER = json.JSONDecoder(strict=False)  # strict=False: raw newlines/tabs inside strings, as models write code


def tojson(value: Any) -> str:
    """JSON as chat templates' ``tojson`` writes it (transformers: ensure_ascii=False)."""
    return json.dumps(value, ensure_ascii=False)


def call_from_json(obj: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(name, arguments) from a decoded call object; arguments may be an object or its JSON string."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise Malformed(f"{where}: expected an object with a non-empty string 'name', got {str(obj)[:80]}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _DECODER.decode(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise Malformed(f"{where}: arguments string is not JSON ({e.msg} at {e.pos})") from None
    if not isinstance(args, dict):
        raise Malformed(f"{where}: arguments must be a JSON object, got {type(args).__name__}")
    return obj["name"], args


def _decode_at(text: str, pos: int, where: str) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as e:
        raise Malformed(f"{where}: invalid JSON ({e.msg} at char {e.pos})") from None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _native(messages: Messages, tools: list[dict[str, Any]]) -> tuple[Messages, list[dict[str, Any]] | None]:
    """The template renders tools and calls itself."""
    return messages, chat_tools(tools) or None


# --------------------------------------------------------------------------- hermes (Qwen2.5, Qwen3, Hermes)

_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def _hermes_calls(text: str) -> Calls:
    """Free-text pieces and calls of ``<tool_call>{json}</tool_call>`` blocks. The JSON is decoded
    from the opening tag, so a ``</tool_call>`` inside a string argument cannot end the block; a
    missing closing tag is accepted at the very end of the text (generation stopped there)."""
    texts, calls, pos = [], [], 0
    while (start := text.find(_TOOL_CALL_OPEN, pos)) != -1:
        texts.append(text[pos:start])
        where = f"tool call {len(calls)}"
        body = _skip_ws(text, start + len(_TOOL_CALL_OPEN))
        obj, end = _decode_at(text, body, where)
        calls.append(call_from_json(obj, where))
        end = _skip_ws(text, end)
        if text.startswith(_TOOL_CALL_CLOSE, end):
            pos = end + len(_TOOL_CALL_CLOSE)
        elif end == len(text):
            pos = end
        else:
            raise Malformed(f"{where}: expected {_TOOL_CALL_CLOSE} after the JSON, got {text[end : end + 30]!r}")
    if _TOOL_CALL_CLOSE in text[pos:]:
        raise Malformed(f"{_TOOL_CALL_CLOSE} without an opening {_TOOL_CALL_OPEN}")
    texts.append(text[pos:])
    return texts, calls


HERMES = ChatFormat("hermes", _native, _hermes_calls)


# --------------------------------------------------------------------------- fallback (templates without tools)


def fallback_tools_text(tools: list[dict[str, Any]]) -> str:
    """The tool section that the fallback format appends to the system message."""
    lines = "\n".join(tojson(t) for t in chat_tools(tools))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the task. Function signatures, "
        f"one JSON object per line, within <tools></tools> tags:\n<tools>\n{lines}\n</tools>\n\n"
        "To call a function, reply with a JSON object with its name and arguments within "
        "<tool_call></tool_call> tags, one block per call:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "Results come back in a user message, one <tool_response></tool_response> block per call, "
        "in the order of the calls."
    )


def _tool_call_block(name: str, arguments: dict[str, Any]) -> str:
    return f"{_TOOL_CALL_OPEN}\n{tojson({'name': name, 'arguments': arguments})}\n{_TOOL_CALL_CLOSE}"


def fallback_messages(messages: Messages, tools: list[dict[str, Any]]) -> Messages:
    """Chat messages with tools, calls and outputs written as text, for templates without tool
    support: tools into the first (system) message, calls into the assistant content, tool
    outputs into user messages of ``<tool_response>`` blocks (consecutive ones merged)."""
    out: Messages = []
    for i, message in enumerate(messages):
        role = message["role"]
        if i == 0 and role == "system" and tools:
            out.append({"role": "system", "content": f"{message['content']}\n\n{fallback_tools_text(tools)}"})
        elif role == "assistant" and message.get("tool_calls"):
            parts = [message["content"]] if message["content"] else []
            parts += [
                _tool_call_block(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            block = f"<tool_response>\n{message['content']}\n</tool_response>"
            if i > 0 and messages[i - 1]["role"] == "tool":
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append(dict(message))
    if tools and (not out or out[0]["role"] != "system"):
        raise ValueError("the fallback format needs the system message first to carry the tools")
    return out


# Completions are written in the hermes syntax that the tool section asks for.
FALLBACK = ChatFormat("fallback", lambda messages, tools: (fallback_messages(messages, tools), None), _hermes_calls)


# --------------------------------------------------------------------------- llama3_json (Llama 3.1/3.2)

_PYTHON_TAG = "<|python_tag|>"
_LLAMA_CALL_START = re.compile(r'(?:^|(?<=\n)|(?<=<\|python_tag\|>))[ \t]*(?=\{\s*"name"\s*:)')


def _llama3_calls(text: str) -> Calls:
    """Free text and the JSON calls that start a line (or follow ``<|python_tag|>``), separated by
    whitespace or ``;``; text after the last call is free text too."""
    m = _LLAMA_CALL_START.search(text)
    if m is None:
        return [text.replace(_PYTHON_TAG, "")], []
    texts, calls = [text[: m.start()].replace(_PYTHON_TAG, "")], []
    pos = m.end()
    while True:
        where = f"tool call {len(calls)}"
        obj, pos = _decode_at(text, pos, where)
        if not isinstance(obj, dict) or not ({"parameters", "arguments"} & obj.keys()):
            raise Malformed(f"{where}: a JSON object that starts a line needs 'name' and 'parameters'")
        calls.append(call_from_json(obj, where))
        nxt = pos
        while nxt < len(text) and (text[nxt].isspace() or text[nxt] == ";"):
            nxt += 1
        if text.startswith(_PYTHON_TAG, nxt):
            nxt += len(_PYTHON_TAG)
        if not re.match(r'\{\s*"name"\s*:', text[nxt:]):
            break
        pos = nxt
    texts.append(text[pos:].lstrip(" \t;"))
    return texts, calls


LLAMA3_JSON = ChatFormat("llama3_json", _native, _llama3_calls)


# --------------------------------------------------------------------------- mistral

_MISTRAL_CALLS, _MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"


def mistral_call_id(call_id: str) -> str:
    """A stable 9-character alphanumeric stand-in for `call_id` (Mistral templates reject others)."""
    return hashlib.sha1(call_id.encode()).hexdigest()[:9]


def _mistral_messages(messages: Messages, tools: list[dict[str, Any]]) -> tuple[Messages, list[dict[str, Any]] | None]:
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [{**c, "id": mistral_call_id(c["id"])} for c in message["tool_calls"]]
        if message["role"] == "tool":
            message["tool_call_id"] = mistral_call_id(message["tool_call_id"])
        out.append(message)
    return out, chat_tools(tools) or None


def _mistral_calls(text: str) -> Calls:
    """Free text before ``[TOOL_CALLS]``, then a JSON list of calls or ``name[ARGS]{...}`` pieces."""
    head, marker, rest = text.partition(_MISTRAL_CALLS)
    if not marker:
        return [text], []
    calls: list[tuple[str, dict]] = []
    for chunk in rest.split(_MISTRAL_CALLS):
        pos = _skip_ws(chunk, 0)
        where = f"tool call {len(calls)}"
        if chunk.startswith("[", pos):
            obj, pos = _decode_at(chunk, pos, where)
            if not isinstance(obj, list):
                raise Malformed(f"{where}: [TOOL_CALLS] must be followed by a JSON list")
            calls += [call_from_json(c, f"tool call {len(calls) + k}") for k, c in enumerate(obj)]
        else:
            name, sep, tail = chunk[pos:].partition(_MISTRAL_ARGS)
            if not sep or not name.strip():
                raise Malformed(f"{where}: expected a JSON list or name[ARGS]{{...}} after [TOOL_CALLS]")
            args, end = _decode_at(tail, _skip_ws(tail, 0), where)
            calls.append(call_from_json({"name": name.strip(), "arguments": args}, where))
            pos, chunk = end, tail
        if chunk[pos:].strip():
            raise Malformed(f"{where}: unexpected text after the calls: {chunk[pos : pos + 30].strip()!r}")
    return [head], calls


MISTRAL = ChatFormat("mistral", _mistral_messages, _mistral_calls)


# --------------------------------------------------------------------------- detection

BY_NAME = {f.name: f for f in (HERMES, LLAMA3_JSON, MISTRAL, FALLBACK)}
FORMATS = tuple(BY_NAME)


def _template_text(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: apply_chat_template(tools=...) prefers "tool_use"
        template = template.get("tool_use") or template.get("default")
    if not isinstance(template, str) or not template:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template")
    return template


@lru_cache(maxsize=64)
def _detect(template: str) -> str:
    if not re.search(r"\btools\b", template) or "tool_calls" not in template:
        return "fallback"
    if _TOOL_CALL_OPEN in template and "<function=" not in template:
        return "hermes"
    if _MISTRAL_CALLS in template:
        return "mistral"
    if '"parameters"' in template or _PYTHON_TAG in template:
        return "llama3_json"
    return "fallback"


def detect_format(tokenizer_or_template: Any) -> str:
    """The tool-call format of a tokenizer's chat template (or of a template string):
    "hermes", "llama3_json", "mistral" or "fallback" (see the package docstring)."""
    if isinstance(tokenizer_or_template, str):
        if not tokenizer_or_template:
            raise ValueError("detect_format needs a chat template, got an empty string")
        return _detect(tokenizer_or_template)
    return _detect(_template_text(tokenizer_or_template))


def resolve(tokenizer_or_format: Any) -> tuple[ChatFormat, Any]:
    """(format, tokenizer or None) from a tokenizer or a format name."""
    if isinstance(tokenizer_or_format, str):
        if tokenizer_or_format not in BY_NAME:
            raise ValueError(f"unknown chat format {tokenizer_or_format!r}; choose one of {', '.join(FORMATS)}")
        return BY_NAME[tokenizer_or_format], None
    return BY_NAME[detect_format(tokenizer_or_format)], tokenizer_or_format
