"""The State: an ordered list of OpenAI Responses API input items, and its one validator.

The schema below is the single source of truth: `validate_state` enforces it and
`typescript_declarations` renders it for the model, so the two cannot drift. It is a
strict subset of `openai.types.responses.ResponseInputParam`: every State accepted
here can be sent as `input` to the Responses API unchanged.

Why one module of ~540 lines: the schema table, the validator that enforces it and the TypeScript
declarations rendered from it change together; apart, they could drift.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

State = list[dict[str, Any]]

MAX_DEPTH = 64
#: Longest error message a StateError carries: errors end up in receipts inside the State, so a
#: quoted 700k-character value must not make the State itself too big to edit.
MAX_ERROR_CHARS = 400
#: Largest integer magnitude (in bits, about 4000 digits): Python refuses to print longer ones
#: as JSON text, and JSON readers in other languages lose them anyway.
MAX_INT_BITS = 13_000
_SURROGATE = re.compile("[\ud800-\udfff]")
STATUSES = ("in_progress", "completed", "incomplete")
ROLES = ("user", "assistant", "system", "developer")


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` cut to at most `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text):,} chars)"
    return text[: max(0, limit - len(tail))] + tail


def quote(value: Any, limit: int = 60) -> str:
    """`repr(value)` for an error message, clipped: offending values can be huge."""
    if isinstance(value, str) and len(value) > limit:  # no repr of a huge string only to cut it
        return f"{value[:limit]!r}... ({len(value):,} chars)"
    return clip(repr(value), limit + 20)


class StateError(ValueError):
    """A State broke a rule; says where (item index, field) and which rule, in a bounded message."""

    def __init__(self, rule: str, index: int | None = None, field: str | None = None, kind: str | None = None):
        self.rule, self.index, self.field = rule, index, None if field is None else clip(field, 120)
        where = []
        if index is not None:
            where.append(f"item {index}" + (f" ({kind})" if kind else ""))
        if self.field:
            where.append(f"field '{self.field}'")
        super().__init__(clip(": ".join([*where, rule])))


@dataclass(frozen=True)
class Field:
    """One field of an item or part. `kind` is one of:
    str (any string), id (non-empty string), int, number, bool, ints (a list of int), enum, const,
    json_object (a JSON string of an object), text_or_parts / parts (a string or list of parts of
    the group `group`), part (one part of `group`), record / records (one or a list of objects of
    the untyped shape `group` in RECORDS).
    `api_only`: metadata the Responses API adds to its output items (phase, logprobs, caching hints);
    accepted so States built from real API output validate, but left out of the model's TypeScript
    view, which stays short: the model keeps such fields by keeping the item, never writes them."""

    name: str
    kind: str
    required: bool = True
    values: tuple[str, ...] = ()
    group: str = ""
    nullable: bool = False
    api_only: bool = False


def _f(name: str, kind: str, **kw: Any) -> Field:
    return Field(name, kind, **kw)


def _opt(name: str, kind: str, **kw: Any) -> Field:
    return Field(name, kind, required=False, **kw)


# What the Responses API may ask to cache up to a part (openai's PromptCacheBreakpoint).
_CACHE_BREAKPOINT = _opt("prompt_cache_breakpoint", "record", group="PromptCacheBreakpoint", api_only=True)
_PHASE = _opt("phase", "enum", values=("commentary", "final_answer"), nullable=True, api_only=True)
_CALLER = _opt("caller", "part", group="Caller", nullable=True, api_only=True)

# Untyped records: name -> fields (objects without a "type" discriminator).
RECORDS: dict[str, tuple[Field, ...]] = {
    "PromptCacheBreakpoint": (_f("mode", "const", values=("explicit",)), _opt("ttl", "enum", values=("30m", "12h"))),
    "TopLogprob": (_f("token", "str"), _f("bytes", "ints"), _f("logprob", "number")),
    "Logprob": (
        _f("token", "str"),
        _f("bytes", "ints"),
        _f("logprob", "number"),
        _f("top_logprobs", "records", group="TopLogprob"),
    ),
}

# Part groups: group name -> {part type -> fields (besides "type")}.
PART_GROUPS: dict[str, dict[str, tuple[Field, ...]]] = {
    "InputContent": {
        "input_text": (_f("text", "str"), _CACHE_BREAKPOINT),
        "input_image": (
            _f("detail", "enum", values=("low", "high", "auto", "original")),
            _opt("image_url", "str"),
            _opt("file_id", "id", nullable=True),
            _CACHE_BREAKPOINT,
        ),
        "input_file": (
            _opt("file_id", "id", nullable=True),
            _opt("file_url", "str"),
            _opt("file_data", "str"),
            _opt("filename", "str"),
            _opt("detail", "enum", values=("auto", "low", "high"), api_only=True),
            _CACHE_BREAKPOINT,
        ),
    },
    "OutputContent": {
        "output_text": (
            _f("text", "str"),
            _f("annotations", "parts", group="Annotation"),
            _opt("logprobs", "records", group="Logprob", api_only=True),
        ),
        "refusal": (_f("refusal", "str"),),
    },
    "Annotation": {
        "url_citation": (
            _f("url", "str"),
            _f("title", "str"),
            _f("start_index", "int"),
            _f("end_index", "int"),
        ),
        "file_citation": (_f("file_id", "id"), _f("filename", "str"), _f("index", "int")),
        "file_path": (_f("file_id", "id"), _f("index", "int")),
        "container_file_citation": (
            _f("container_id", "id"),
            _f("file_id", "id"),
            _f("filename", "str"),
            _f("start_index", "int"),
            _f("end_index", "int"),
        ),
    },
    "Caller": {"direct": (), "program": (_f("caller_id", "id"),)},
    "SummaryText": {"summary_text": (_f("text", "str"),)},
    "ReasoningText": {"reasoning_text": (_f("text", "str"),)},
}

# Part types the API may send that the model's TypeScript view leaves out (see `Field.api_only`).
API_ONLY_PARTS = {"container_file_citation", "direct", "program"}

# Item shapes: shape name -> (item type, fields). "message" has two shapes, told apart by `id`.
ITEM_SHAPES: dict[str, tuple[str, tuple[Field, ...]]] = {
    "InputMessage": (
        "message",
        (
            _opt("type", "const", values=("message",)),
            _f("role", "enum", values=ROLES),
            _f("content", "text_or_parts", group="InputContent"),
            _PHASE,
        ),
    ),
    "OutputMessage": (
        "message",
        (
            _f("type", "const", values=("message",)),
            _f("id", "id"),
            _f("role", "const", values=("assistant",)),
            _f("status", "enum", values=STATUSES),
            _f("content", "parts", group="OutputContent"),
            _PHASE,
        ),
    ),
    "FunctionCall": (
        "function_call",
        (
            _f("type", "const", values=("function_call",)),
            _f("call_id", "id"),
            _f("name", "id"),
            _f("arguments", "json_object"),
            _opt("id", "id"),
            _opt("status", "enum", values=STATUSES),
            _opt("namespace", "str", api_only=True),
            _CALLER,
            _opt("async", "bool", api_only=True),
        ),
    ),
    "FunctionCallOutput": (
        "function_call_output",
        (
            _f("type", "const", values=("function_call_output",)),
            _f("call_id", "id"),
            _f("output", "text_or_parts", group="InputContent"),
            _opt("id", "id", nullable=True),
            _opt("status", "enum", values=STATUSES, nullable=True),
            _opt("name", "str", nullable=True, api_only=True),
            _opt("namespace", "str", nullable=True, api_only=True),
            _CALLER,
        ),
    ),
    "Reasoning": (
        "reasoning",
        (
            _f("type", "const", values=("reasoning",)),
            _f("id", "id"),
            _f("summary", "parts", group="SummaryText"),
            _opt("content", "parts", group="ReasoningText"),
            _opt("encrypted_content", "str", nullable=True),
            _opt("status", "enum", values=STATUSES),
        ),
    ),
}

ITEM_TYPES = tuple(dict.fromkeys(t for t, _ in ITEM_SHAPES.values()))


# --------------------------------------------------------------------------- JSON values


def check_text(text: str, path: str = "text") -> None:
    """Reject a lone surrogate: UTF-8 cannot encode it, so text holding one could not be written
    to a file, printed or tokenised. (The one rule for the whole State boundary: reject, never
    silently replace.)"""
    if not text.isascii() and (m := _SURROGATE.search(text)):
        raise StateError(
            f"lone surrogate U+{ord(m.group()):04X} at {clip(path, 200)} (character {m.start()}); "
            "text must be valid Unicode"
        )


def check_json_value(value: Any, *, max_depth: int = MAX_DEPTH, root: str = "state") -> None:
    """Reject anything JSON cannot carry exactly: NaN/Infinity, cycles, non-str keys, other types,
    integers too long to print, and lone surrogates (see `check_text`)."""
    on_path: set[int] = set()

    def walk(v: Any, path: str, depth: int) -> None:
        if depth > max_depth:
            raise StateError(f"nesting deeper than {max_depth} levels at {clip(path, 200)}")
        if v is None or isinstance(v, bool):
            return
        if isinstance(v, str):
            check_text(v, path)
            return
        if isinstance(v, int):
            if v.bit_length() > MAX_INT_BITS:
                raise StateError(
                    f"integer of about {v.bit_length() * 3 // 10:,} digits at {clip(path, 200)} is too large"
                )
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                raise StateError(f"non-finite number {v!r} at {clip(path, 200)}; JSON has no NaN or Infinity")
            return
        if isinstance(v, (list, dict)):
            if id(v) in on_path:
                raise StateError(f"cycle at {path}; a State must be a tree of JSON values")
            on_path.add(id(v))
            if isinstance(v, list):
                for i, x in enumerate(v):
                    walk(x, f"{path}[{i}]", depth + 1)
            else:
                for k, x in v.items():
                    if not isinstance(k, str):
                        raise StateError(f"non-string key {quote(k)} at {clip(path, 200)}")
                    check_text(k, f"a key of {path}")
                    walk(x, f"{path}.{k}", depth + 1)
            on_path.discard(id(v))
            return
        raise StateError(f"value of type {type(v).__name__} at {clip(path, 200)} is not JSON")

    walk(value, root, 0)


def loads_json(text: str, *, max_depth: int = MAX_DEPTH, root: str = "state") -> Any:
    """Parse JSON text by the State's rules, raising only StateError: no NaN/Infinity literals,
    bounded depth and integer size, no lone surrogates (JSON's "\\ud800" escape decodes to one)."""

    def bad_constant(name: str) -> Any:
        raise StateError(f"{name} is not valid JSON")

    try:
        data = json.loads(text, parse_constant=bad_constant)
    except json.JSONDecodeError as e:
        raise StateError(f"not valid JSON: {e}") from None
    except RecursionError:
        raise StateError(f"not valid JSON here: nested deeper than {max_depth} levels") from None
    except StateError:
        raise
    except ValueError:  # the only other failure: an integer past Python's int/str conversion limit
        raise StateError("not valid JSON here: an integer literal of more than 4300 digits") from None
    check_json_value(data, max_depth=max_depth, root=root)
    return data


# --------------------------------------------------------------------------- validation


def _shape_of(index: int, item: Any) -> str:
    if not isinstance(item, dict):
        raise StateError(f"must be an object, got {type(item).__name__}", index)
    kind = item.get("type", "message" if "role" in item else None)
    if kind is None:
        raise StateError("has neither 'type' nor 'role'", index)
    if kind == "message":
        return "OutputMessage" if "id" in item else "InputMessage"
    for shape, (item_type, _) in ITEM_SHAPES.items():
        if item_type == kind:
            return shape
    raise StateError(f"unknown item type {quote(kind)}; known: {', '.join(ITEM_TYPES)}", index, "type")


def _check_fields(
    obj: dict, fields: tuple[Field, ...], where: dict[str, Any], prefix: str = "", typed: bool = True
) -> None:
    known = {f.name for f in fields} | ({"type"} if prefix and typed else set())
    for key in obj:
        if key not in known:
            raise StateError(f"unknown field; allowed: {', '.join(sorted(known))}", field=prefix + key, **where)
    for f in fields:
        name = prefix + f.name
        if f.name not in obj:
            if f.required:
                raise StateError("is required", field=name, **where)
            continue
        v = obj[f.name]
        if v is None and f.nullable:
            continue
        _check_value(f, v, name, where)


def _check_value(f: Field, v: Any, name: str, where: dict[str, Any]) -> None:
    if f.kind in ("str", "id", "json_object"):
        if not isinstance(v, str):
            raise StateError(f"must be a string, got {type(v).__name__}", field=name, **where)
        if f.kind == "id" and not v:
            raise StateError("must be a non-empty string", field=name, **where)
        if f.kind == "json_object":
            try:
                parsed = loads_json(v, root=name)
            except StateError as e:
                raise StateError(f"must be a JSON string of an object ({e.rule})", field=name, **where) from None
            if not isinstance(parsed, dict):
                raise StateError("must be a JSON string of an object", field=name, **where)
    elif f.kind == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            raise StateError("must be an integer", field=name, **where)
    elif f.kind == "number":
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise StateError("must be a number", field=name, **where)
    elif f.kind == "bool":
        if not isinstance(v, bool):
            raise StateError("must be true or false", field=name, **where)
    elif f.kind == "ints":
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise StateError("must be a list of integers", field=name, **where)
    elif f.kind in ("record", "records"):
        records = v if f.kind == "records" else [v]
        if f.kind == "records" and not isinstance(v, list):
            raise StateError("must be a list of objects", field=name, **where)
        for j, record in enumerate(records):
            rname = f"{name}[{j}]" if f.kind == "records" else name
            if not isinstance(record, dict):
                raise StateError("must be an object", field=rname, **where)
            _check_fields(record, RECORDS[f.group], where, prefix=rname + ".", typed=False)
    elif f.kind in ("enum", "const"):
        if v not in f.values:
            raise StateError(f"must be one of {', '.join(map(repr, f.values))}, got {quote(v)}", field=name, **where)
    elif f.kind in ("parts", "text_or_parts", "part"):
        if isinstance(v, str) and f.kind == "text_or_parts":
            return
        if not isinstance(v, list) and f.kind != "part":
            allowed = "a string or a list of parts" if f.kind == "text_or_parts" else "a list of parts"
            raise StateError(f"must be {allowed}", field=name, **where)
        group = PART_GROUPS[f.group]
        for j, part in enumerate([v] if f.kind == "part" else v):
            pname = name if f.kind == "part" else f"{name}[{j}]"
            if not isinstance(part, dict):
                raise StateError("must be an object", field=pname, **where)
            ptype = part.get("type")
            if ptype not in group:
                raise StateError(
                    f"unknown part type {quote(ptype)}; allowed here: {', '.join(group)}",
                    field=pname + ".type",
                    **where,
                )
            _check_fields(part, group[ptype], where, prefix=pname + ".")
    else:  # pragma: no cover - schema bug
        raise AssertionError(f"unknown field kind {f.kind}")


def normalize_item(item: dict[str, Any]) -> dict[str, Any]:
    """A message given with a `role` and no `type` gets `"type": "message"` (a copy is returned)."""
    if isinstance(item, dict) and "type" not in item and "role" in item:
        return {"type": "message", **item}
    return item


def validate_state(state: Any, *, pending_call_id: str | None = None, max_depth: int = MAX_DEPTH) -> State:
    """Check every rule and return the normalised State (a new list; the input is not changed).

    `pending_call_id` names the one function call that may still be unanswered (the evolve
    call being executed)."""
    if not isinstance(state, list):
        raise StateError(f"a State must be a list of items, got {type(state).__name__}")
    check_json_value(state, max_depth=max_depth)
    out: State = []
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, raw in enumerate(state):
        shape = _shape_of(i, raw)
        item_type, fields = ITEM_SHAPES[shape]
        where = {"index": i, "kind": item_type}
        item = normalize_item(raw)
        if shape == "InputMessage" and item.get("role") == "assistant" and isinstance(item.get("content"), list):
            if any(isinstance(p, dict) and p.get("type") in PART_GROUPS["OutputContent"] for p in item["content"]):
                raise StateError(
                    "an assistant message with output_text/refusal parts needs 'id' and 'status' "
                    "(an output message); or give its content as a string",
                    field="content",
                    **where,
                )
        _check_fields(item, fields, where)
        if item_type == "function_call":
            cid = item["call_id"]
            if cid in calls:
                raise StateError(f"call_id {quote(cid)} already used by item {calls[cid]}", field="call_id", **where)
            calls[cid] = i
        elif item_type == "function_call_output":
            cid = item["call_id"]
            if cid not in calls:
                raise StateError(
                    f"output for call_id {quote(cid)} does not follow its function_call", field="call_id", **where
                )
            if cid in answered:
                raise StateError(f"second output for call_id {quote(cid)}", field="call_id", **where)
            answered.add(cid)
        out.append(item)
    for cid, i in calls.items():
        if cid not in answered and cid != pending_call_id:
            raise StateError(f"function_call {quote(cid)} has no function_call_output", index=i, kind="function_call")
    return out


def load_state(text: str, *, pending_call_id: str | None = None) -> State:
    """Parse and validate a State from JSON text; every failure is a StateError."""
    return validate_state(loads_json(text), pending_call_id=pending_call_id)


def dumps_state(state: State, indent: int | None = None) -> str:
    """Serialise a State exactly (Unicode kept as is, no NaN)."""
    return json.dumps(state, ensure_ascii=False, allow_nan=False, indent=indent)


def text_of(content: str | Iterable[dict[str, Any]]) -> str:
    """Plain text of a message content or function output (non-text parts as short markers)."""
    if isinstance(content, str):
        return content
    pieces = []
    for part in content:
        t = part.get("type")
        if t in ("input_text", "output_text", "summary_text", "reasoning_text"):
            pieces.append(part["text"])
        elif t == "refusal":
            pieces.append(part["refusal"])
        elif t == "input_image":
            pieces.append(f"[image {part.get('image_url') or part.get('file_id') or ''}]".replace(" ]", "]"))
        elif t == "input_file":
            pieces.append(f"[file {part.get('filename') or part.get('file_id') or part.get('file_url') or ''}]")
    return "\n".join(pieces)


# --------------------------------------------------------------------------- TypeScript view


def _ts_type(f: Field) -> str:
    if f.kind in ("str", "id", "json_object"):
        t = "string"
    elif f.kind in ("int", "number"):
        t = "number"
    elif f.kind == "bool":
        t = "boolean"
    elif f.kind == "ints":
        t = "number[]"
    elif f.kind in ("enum", "const"):
        t = " | ".join(json.dumps(v) for v in f.values)
    elif f.kind in ("part", "record"):
        t = f.group
    elif f.kind in ("parts", "records"):
        t = f"{f.group}[]"
    else:
        t = f"string | {f.group}[]"
    return f"{t} | null" if f.nullable else t


_TS_COMMENTS = {
    "json_object": "JSON string of an object",
    "id": "non-empty",
}


def _ts_object(name: str, type_literal: str | None, fields: tuple[Field, ...]) -> str:
    lines = [f"type {name} = {{"]
    if type_literal is not None:
        lines.append(f"  type: {json.dumps(type_literal)};")
    for f in fields:
        if f.api_only:
            continue
        comment = _TS_COMMENTS.get(f.kind)
        lines.append(f"  {f.name}{'' if f.required else '?'}: {_ts_type(f)};" + (f"  // {comment}" if comment else ""))
    lines.append("};")
    return "\n".join(lines)


def _camel(s: str) -> str:
    return "".join(w.capitalize() for w in s.split("_"))


def typescript_declarations() -> str:
    """The State types as TypeScript, rendered from the same schema the validator enforces."""
    blocks = []
    for group, parts in PART_GROUPS.items():
        names = []
        for ptype, fields in parts.items():
            if ptype in API_ONLY_PARTS:
                continue
            pname = _camel(ptype) + ("Part" if group != "Annotation" else "Annotation")
            names.append(pname)
            blocks.append(_ts_object(pname, ptype, fields))
        if names:
            blocks.append(f"type {group} = {' | '.join(names)};")
    for shape, (_, fields) in ITEM_SHAPES.items():
        blocks.append(_ts_object(shape, None, fields))
    blocks.append(f"type Item = {' | '.join(ITEM_SHAPES)};")
    blocks.append("type State = Item[];")
    return "\n".join(blocks)
