"""The State: an ordered list of OpenAI Responses API input items, and its one validator.

The schema below is the single source of truth: `validate_state` enforces it and
`typescript_declarations` renders it for the model, so the two cannot drift. It is a
strict subset of `openai.types.responses.ResponseInputParam`: every State accepted
here can be sent as `input` to the Responses API unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

State = list[dict[str, Any]]

MAX_DEPTH = 64
STATUSES = ("in_progress", "completed", "incomplete")
ROLES = ("user", "assistant", "system", "developer")


class StateError(ValueError):
    """A State broke a rule; says where (item index, field) and which rule."""

    def __init__(self, rule: str, index: int | None = None, field: str | None = None, kind: str | None = None):
        self.rule, self.index, self.field = rule, index, field
        where = []
        if index is not None:
            where.append(f"item {index}" + (f" ({kind})" if kind else ""))
        if field:
            where.append(f"field '{field}'")
        super().__init__(": ".join([*where, rule]))


@dataclass(frozen=True)
class Field:
    """One field of an item or part. `kind` is one of:
    str (any string), id (non-empty string), int, enum, json_object (a JSON string of an object),
    text_or_parts / parts (a string or list of parts of the group `group`), const."""

    name: str
    kind: str
    required: bool = True
    values: tuple[str, ...] = ()
    group: str = ""
    nullable: bool = False


def _f(name: str, kind: str, **kw: Any) -> Field:
    return Field(name, kind, **kw)


def _opt(name: str, kind: str, **kw: Any) -> Field:
    return Field(name, kind, required=False, **kw)


# Part groups: group name -> {part type -> fields (besides "type")}.
PART_GROUPS: dict[str, dict[str, tuple[Field, ...]]] = {
    "InputContent": {
        "input_text": (_f("text", "str"),),
        "input_image": (
            _f("detail", "enum", values=("low", "high", "auto", "original")),
            _opt("image_url", "str"),
            _opt("file_id", "id", nullable=True),
        ),
        "input_file": (
            _opt("file_id", "id", nullable=True),
            _opt("file_url", "str"),
            _opt("file_data", "str"),
            _opt("filename", "str"),
        ),
    },
    "OutputContent": {
        "output_text": (_f("text", "str"), _f("annotations", "parts", group="Annotation")),
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
    },
    "SummaryText": {"summary_text": (_f("text", "str"),)},
    "ReasoningText": {"reasoning_text": (_f("text", "str"),)},
}

# Item shapes: shape name -> (item type, fields). "message" has two shapes, told apart by `id`.
ITEM_SHAPES: dict[str, tuple[str, tuple[Field, ...]]] = {
    "InputMessage": (
        "message",
        (
            _opt("type", "const", values=("message",)),
            _f("role", "enum", values=ROLES),
            _f("content", "text_or_parts", group="InputContent"),
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


def check_json_value(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Reject anything JSON cannot carry exactly: NaN/Infinity, cycles, non-str keys, other types."""
    on_path: set[int] = set()

    def walk(v: Any, path: str, depth: int) -> None:
        if depth > max_depth:
            raise StateError(f"nesting deeper than {max_depth} levels at {path}")
        if v is None or isinstance(v, (bool, str, int)):
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                raise StateError(f"non-finite number {v!r} at {path}; JSON has no NaN or Infinity")
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
                        raise StateError(f"non-string key {k!r} at {path}")
                    walk(x, f"{path}.{k}", depth + 1)
            on_path.discard(id(v))
            return
        raise StateError(f"value of type {type(v).__name__} at {path} is not JSON")

    walk(value, "state", 0)


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
    raise StateError(f"unknown item type {kind!r}; known: {', '.join(ITEM_TYPES)}", index, "type")


def _check_fields(obj: dict, fields: tuple[Field, ...], where: dict[str, Any], prefix: str = "") -> None:
    known = {f.name for f in fields} | ({"type"} if prefix else set())
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
                parsed = json.loads(v)
            except json.JSONDecodeError as e:
                raise StateError(f"must be a JSON string of an object ({e.msg})", field=name, **where) from None
            if not isinstance(parsed, dict):
                raise StateError("must be a JSON string of an object", field=name, **where)
    elif f.kind == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            raise StateError("must be an integer", field=name, **where)
    elif f.kind in ("enum", "const"):
        if v not in f.values:
            raise StateError(f"must be one of {', '.join(map(repr, f.values))}, got {v!r}", field=name, **where)
    elif f.kind in ("parts", "text_or_parts"):
        if isinstance(v, str) and f.kind == "text_or_parts":
            return
        if not isinstance(v, list):
            allowed = "a string or a list of parts" if f.kind == "text_or_parts" else "a list of parts"
            raise StateError(f"must be {allowed}", field=name, **where)
        group = PART_GROUPS[f.group]
        for j, part in enumerate(v):
            pname = f"{name}[{j}]"
            if not isinstance(part, dict):
                raise StateError("must be an object", field=pname, **where)
            ptype = part.get("type")
            if ptype not in group:
                raise StateError(
                    f"unknown part type {ptype!r}; allowed here: {', '.join(group)}", field=pname + ".type", **where
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
                raise StateError(f"call_id {cid!r} already used by item {calls[cid]}", field="call_id", **where)
            calls[cid] = i
        elif item_type == "function_call_output":
            cid = item["call_id"]
            if cid not in calls:
                raise StateError(
                    f"output for call_id {cid!r} does not follow its function_call", field="call_id", **where
                )
            if cid in answered:
                raise StateError(f"second output for call_id {cid!r}", field="call_id", **where)
            answered.add(cid)
        out.append(item)
    for cid, i in calls.items():
        if cid not in answered and cid != pending_call_id:
            raise StateError(f"function_call {cid!r} has no function_call_output", index=i, kind="function_call")
    return out


def load_state(text: str, *, pending_call_id: str | None = None) -> State:
    """Parse and validate a State from JSON text (rejects NaN/Infinity literals)."""

    def bad_constant(name: str) -> Any:
        raise StateError(f"{name} is not valid JSON")

    try:
        data = json.loads(text, parse_constant=bad_constant)
    except json.JSONDecodeError as e:
        raise StateError(f"not valid JSON: {e}") from None
    return validate_state(data, pending_call_id=pending_call_id)


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
    elif f.kind == "int":
        t = "number"
    elif f.kind in ("enum", "const"):
        t = " | ".join(json.dumps(v) for v in f.values)
    elif f.kind == "parts":
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
            pname = _camel(ptype) + ("Part" if group != "Annotation" else "Annotation")
            names.append(pname)
            blocks.append(_ts_object(pname, ptype, fields))
        blocks.append(f"type {group} = {' | '.join(names)};")
    for shape, (_, fields) in ITEM_SHAPES.items():
        blocks.append(_ts_object(shape, None, fields))
    blocks.append(f"type Item = {' | '.join(ITEM_SHAPES)};")
    blocks.append("type State = Item[];")
    return "\n".join(blocks)
