"""Between a State and a local model's text: prompts in, tool calls out.

Prompt direction: instructions + tools + State -> chat messages (`rl_compaction.core.render`) ->
the tokenizer's chat template with the tools and ``add_generation_prompt=True`` -> prompt text
(`render_prompt`) and ids (`prompt_ids`). `ChatTemplateCounter` renders through
`render_prompt`, so token accounting sees exactly the prompt the model sees.

Completion direction (`parse_completion`): generated text -> Responses output items, one
assistant message holding all free text (first) and one ``function_call`` per tool call, with
``arguments`` a JSON object string. When the tokenizer carries a transformers
``response_template`` (transformers >= 5.13, ``tokenizer.parse_response``), that parser is
used first; when it has none or fails, the parser for the template's format below runs.
Decode generated ids with ``skip_special_tokens=False`` so markers such as
``<|python_tag|>`` survive; the text is cut at the first end-of-turn marker
(``<|im_end|>``, ``<|eot_id|>``, ``</s>``, the tokenizer's eos, ...). A
``<think>...</think>`` block that opens the turn (Qwen3; the opening tag may end the prompt)
is returned as `ParsedCompletion.reasoning`, not as an item (the env takes no reasoning
items). Model output never raises: if any call in the turn is malformed (truncated or bad
JSON, unknown structure) the whole turn becomes one assistant message with the raw text, and
`ParsedCompletion.parse_errors` says why, so callers can count malformed calls. JSON strings
may contain raw newlines (``json.loads(strict=False)``), and argument values survive exactly
(quotes, backslashes, newlines, unicode). call_ids are ``call_<hash of the text>_<i>``:
deterministic and unique within a turn; the env repairs collisions across turns.

Formats (`detect_format`, from the chat template text):
- ``"hermes"`` (Qwen2.5, Qwen3, Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call; tool outputs in ``<tool_response>`` blocks.
- ``"llama3_json"`` (Llama 3.1/3.2): a JSON object ``{"name": ..., "parameters": {...}}`` starting
  a line, optionally after ``<|python_tag|>``; several calls on separate lines or split by ``;``.
- ``"mistral"``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` or the newer
  ``[TOOL_CALLS]name[ARGS]{...}``. Mistral templates demand 9-character alphanumeric call ids,
  so prompts carry a stable 9-hex-digit digest of each call_id.
- ``"fallback"``: for templates without tool support (no ``tools`` variable or no
  ``tool_calls`` rendering, e.g. SmolLM2-135M-Instruct's plain ChatML), and for tool-capable
  templates whose call syntax is none of the above. The template gets no ``tools``; instead
  (`fallback_messages`) the tool definitions go into the system message as text
  (`fallback_tools_text`), with the instruction to answer with
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; earlier assistant tool calls
  are written into the assistant message content in that same form; tool outputs become user
  messages ``<tool_response>\\n...\\n</tool_response>`` (consecutive outputs share one user
  message, one block each). Completions are parsed as in ``"hermes"``.

Round trip (`parse_conversation`): a rendered prompt (ChatML or Llama-3 turn markers) back to
State items, leaving out the first system turn (instructions and tools). Templates do not
render call_ids (Hermes, Llama 3, fallback), so calls get fresh ids ``call_0``, ``call_1``, ...
in order, and links are restored by order: the k-th tool response answers the k-th still
unanswered call. What templates drop stays dropped: reasoning items, content-part structure,
the developer role (rendered as system) and whitespace that the template trims.

Why one module of ~550 lines: each tool-call format has a rendering half and a parsing half that
must agree token for token; they stay side by side, one format after another.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rl_compaction.core.render import chat_messages, chat_tools
from rl_compaction.core.state import State

FORMATS = ("hermes", "llama3_json", "mistral", "fallback")

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

_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_CALLS, _MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
_DECODER = json.JSONDecoder(strict=False)  # strict=False: raw newlines/tabs inside strings, as models write code
_LLAMA_CALL_START = re.compile(r'(?:^|(?<=\n)|(?<=<\|python_tag\|>))[ \t]*(?=\{\s*"name"\s*:)')
_TOOL_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


# --------------------------------------------------------------------------- format detection


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
    "hermes", "llama3_json", "mistral" or "fallback" (see the module docstring)."""
    if isinstance(tokenizer_or_template, str):
        if not tokenizer_or_template:
            raise ValueError("detect_format needs a chat template, got an empty string")
        return _detect(tokenizer_or_template)
    return _detect(_template_text(tokenizer_or_template))


def _resolve(tokenizer_or_format: Any) -> tuple[str, Any]:
    """(format, tokenizer or None) from a tokenizer or a format name."""
    if isinstance(tokenizer_or_format, str):
        if tokenizer_or_format not in FORMATS:
            raise ValueError(f"unknown chat format {tokenizer_or_format!r}; choose one of {', '.join(FORMATS)}")
        return tokenizer_or_format, None
    return detect_format(tokenizer_or_format), tokenizer_or_format


# --------------------------------------------------------------------------- prompt direction


def _tojson(value: Any) -> str:
    """JSON as chat templates' ``tojson`` writes it (transformers: ensure_ascii=False)."""
    return json.dumps(value, ensure_ascii=False)


def fallback_tools_text(tools: list[dict[str, Any]]) -> str:
    """The tool section that the fallback format appends to the system message."""
    lines = "\n".join(_tojson(t) for t in chat_tools(tools))
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
    return f"{_TOOL_CALL_OPEN}\n{_tojson({'name': name, 'arguments': arguments})}\n{_TOOL_CALL_CLOSE}"


def fallback_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages with tools, calls and outputs written as text, for templates without tool
    support: tools into the first (system) message, calls into the assistant content, tool
    outputs into user messages of ``<tool_response>`` blocks (consecutive ones merged)."""
    out: list[dict[str, Any]] = []
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


def mistral_call_id(call_id: str) -> str:
    """A stable 9-character alphanumeric stand-in for `call_id` (Mistral templates reject others)."""
    return hashlib.sha1(call_id.encode()).hexdigest()[:9]


def _mistral_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [{**c, "id": mistral_call_id(c["id"])} for c in message["tool_calls"]]
        if message["role"] == "tool":
            message["tool_call_id"] = mistral_call_id(message["tool_call_id"])
        out.append(message)
    return out


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
    fmt = detect_format(tokenizer)
    messages = chat_messages(instructions, state)
    template_tools = chat_tools(tools) or None
    if fmt == "fallback":
        messages, template_tools = fallback_messages(messages, tools), None
    elif fmt == "mistral":
        messages = _mistral_messages(messages)
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


# --------------------------------------------------------------------------- completion direction


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


class _Malformed(ValueError):
    """A tool call in the text that cannot be read."""


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


def _call_from_json(obj: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(name, arguments) from a decoded call object; arguments may be an object or its JSON string."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise _Malformed(f"{where}: expected an object with a non-empty string 'name', got {str(obj)[:80]}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _DECODER.decode(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise _Malformed(f"{where}: arguments string is not JSON ({e.msg} at {e.pos})") from None
    if not isinstance(args, dict):
        raise _Malformed(f"{where}: arguments must be a JSON object, got {type(args).__name__}")
    return obj["name"], args


def _decode_at(text: str, pos: int, where: str) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as e:
        raise _Malformed(f"{where}: invalid JSON ({e.msg} at char {e.pos})") from None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _hermes_calls(text: str) -> tuple[list[str], list[tuple[str, dict]]]:
    """Free-text pieces and calls of ``<tool_call>{json}</tool_call>`` blocks. The JSON is decoded
    from the opening tag, so a ``</tool_call>`` inside a string argument cannot end the block; a
    missing closing tag is accepted at the very end of the text (generation stopped there)."""
    texts, calls, pos = [], [], 0
    while (start := text.find(_TOOL_CALL_OPEN, pos)) != -1:
        texts.append(text[pos:start])
        where = f"tool call {len(calls)}"
        body = _skip_ws(text, start + len(_TOOL_CALL_OPEN))
        obj, end = _decode_at(text, body, where)
        calls.append(_call_from_json(obj, where))
        end = _skip_ws(text, end)
        if text.startswith(_TOOL_CALL_CLOSE, end):
            pos = end + len(_TOOL_CALL_CLOSE)
        elif end == len(text):
            pos = end
        else:
            raise _Malformed(f"{where}: expected {_TOOL_CALL_CLOSE} after the JSON, got {text[end : end + 30]!r}")
    if _TOOL_CALL_CLOSE in text[pos:]:
        raise _Malformed(f"{_TOOL_CALL_CLOSE} without an opening {_TOOL_CALL_OPEN}")
    texts.append(text[pos:])
    return texts, calls


def _llama3_calls(text: str) -> tuple[list[str], list[tuple[str, dict]]]:
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
            raise _Malformed(f"{where}: a JSON object that starts a line needs 'name' and 'parameters'")
        calls.append(_call_from_json(obj, where))
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


def _mistral_calls(text: str) -> tuple[list[str], list[tuple[str, dict]]]:
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
                raise _Malformed(f"{where}: [TOOL_CALLS] must be followed by a JSON list")
            calls += [_call_from_json(c, f"tool call {len(calls) + k}") for k, c in enumerate(obj)]
        else:
            name, sep, tail = chunk[pos:].partition(_MISTRAL_ARGS)
            if not sep or not name.strip():
                raise _Malformed(f"{where}: expected a JSON list or name[ARGS]{{...}} after [TOOL_CALLS]")
            args, end = _decode_at(tail, _skip_ws(tail, 0), where)
            calls.append(_call_from_json({"name": name.strip(), "arguments": args}, where))
            pos, chunk = end, tail
        if chunk[pos:].strip():
            raise _Malformed(f"{where}: unexpected text after the calls: {chunk[pos : pos + 30].strip()!r}")
    return [head], calls


_PARSERS = {"hermes": _hermes_calls, "fallback": _hermes_calls, "llama3_json": _llama3_calls, "mistral": _mistral_calls}


def _items(text: str, calls: list[tuple[str, dict]], seed: str) -> list[dict[str, Any]]:
    digest = hashlib.sha1(seed.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    items: list[dict[str, Any]] = []
    if text or not calls:
        items.append({"type": "message", "role": "assistant", "content": text})
    for i, (name, args) in enumerate(calls):
        items.append(
            {"type": "function_call", "call_id": f"call_{digest}_{i}", "name": name, "arguments": _tojson(args)}
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
        raise _Malformed(f"parse_response returned {type(message).__name__}, not a message dict")
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise _Malformed(f"parse_response gave non-text content ({type(content).__name__})")
    raw_calls = message.get("tool_calls") or []
    flat = [c for group in raw_calls for c in (group if isinstance(group, list) else [group])]
    calls = []
    for k, call in enumerate(flat):
        fn = call.get("function", call) if isinstance(call, dict) else call
        calls.append(_call_from_json(fn, f"tool call {k}"))
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
    fmt, tokenizer = _resolve(tokenizer_or_format)
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
        texts, calls = _PARSERS[fmt](body)
    except _Malformed as e:
        return ParsedCompletion(_items(body.strip(), [], raw), fmt, [*errors, str(e)], reasoning)
    # The library parser failed but ours read the turn: it is well formed, so no error is reported.
    return ParsedCompletion(_items(_join(texts), calls, raw), fmt, [], reasoning)


# --------------------------------------------------------------------------- round trip


def _turns(text: str) -> list[tuple[str, str]]:
    """(role, body) of each complete turn of a ChatML or Llama-3 rendering; a final open turn
    (the generation prompt) is kept only when it has text."""
    if "<|im_start|>" in text:
        opener, closers = "<|im_start|>", ("<|im_end|>",)
    elif "<|start_header_id|>" in text:
        opener, closers = "<|start_header_id|>", ("<|eot_id|>", "<|eom_id|>")
    else:
        raise ValueError("parse_conversation reads ChatML (<|im_start|>) or Llama-3 (<|start_header_id|>) turns")
    turns = []
    for chunk in text.split(opener)[1:]:
        if opener == "<|im_start|>":
            role, _, rest = chunk.partition("\n")
        else:
            role, _, rest = chunk.partition("<|end_header_id|>")
            rest = rest.removeprefix("\n\n")
        ends = [i for c in closers if (i := rest.find(c)) != -1]
        if ends:
            turns.append((role.strip(), rest[: min(ends)]))
        elif rest.strip():
            turns.append((role.strip(), rest))
    return turns


def _tool_responses(body: str) -> list[str] | None:
    """The outputs of a user turn made only of <tool_response> blocks, else None."""
    outputs = _TOOL_RESPONSE.findall(body)
    if outputs and not _TOOL_RESPONSE.sub("", body).strip():
        return outputs
    return None


def parse_conversation(text: str, tokenizer_or_format: Any) -> State:
    """A rendered conversation back to State items (the first system turn, which holds the
    instructions and tools, is left out). Call ids are re-created as ``call_<k>`` and each tool
    response answers the oldest unanswered call; see the module docstring for what is lost."""
    fmt, _ = _resolve(tokenizer_or_format)
    if fmt == "mistral":
        raise ValueError("parse_conversation reads hermes, llama3_json and fallback renderings, not mistral")
    turns = _turns(text)
    if turns and turns[0][0] == "system":
        turns = turns[1:]
    state: State = []
    open_calls: list[str] = []
    n_calls = 0

    def answer(output: str, turn: int) -> None:
        if not open_calls:
            raise ValueError(f"turn {turn}: a tool response answers no open call")
        state.append({"type": "function_call_output", "call_id": open_calls.pop(0), "output": output})

    for t, (role, body) in enumerate(turns):
        outputs = _tool_responses(body) if role in ("user", "tool") and fmt != "llama3_json" else None
        if role in ("tool", "ipython") and outputs is None:
            outputs = [body]
        if outputs is not None:
            for output in outputs:
                answer(output, t)
        elif role == "assistant":
            try:
                texts, calls = _PARSERS[fmt](body)
            except _Malformed as e:
                raise ValueError(f"turn {t}: unreadable assistant turn: {e}") from None
            if _join(texts) or not calls:
                state.append({"type": "message", "role": "assistant", "content": _join(texts)})
            for name, args in calls:
                call_id = f"call_{n_calls}"
                n_calls += 1
                open_calls.append(call_id)
                state.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": _tojson(args)})
        elif role in ("user", "system"):
            state.append({"type": "message", "role": role, "content": body})
        else:
            raise ValueError(f"turn {t}: unknown role {role!r}")
    return state
