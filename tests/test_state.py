"""The State validator, rule by rule, and its agreement with the openai package's types."""

from __future__ import annotations

import copy
import json
import random

import pytest
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter, ValidationError

from rl_compaction.core.state import (
    API_ONLY_PARTS,
    ITEM_SHAPES,
    MAX_ERROR_CHARS,
    PART_GROUPS,
    RECORDS,
    Field,
    StateError,
    dumps_state,
    load_state,
    typescript_declarations,
    validate_state,
)

OPENAI = TypeAdapter(ResponseInputParam)


def call(cid: str, name: str = "search", args: str = '{"q": "x"}') -> dict:
    return {"type": "function_call", "call_id": cid, "name": name, "arguments": args}


def out(cid: str, output="ok") -> dict:
    return {"type": "function_call_output", "call_id": cid, "output": output}


GOOD = [
    {"role": "user", "content": "Find the year."},
    {"type": "message", "role": "assistant", "content": "Searching."},
    call("c1"),
    out("c1", [{"type": "input_text", "text": '{"results": []}'}, {"type": "input_text", "text": "note ’ 😀"}]),
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "1931", "annotations": []}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,AAAA"}],
    },
]


def test_good_state_normalises_and_is_openai_valid():
    before = copy.deepcopy(GOOD)
    state = validate_state(GOOD)
    assert GOOD == before, "validation must not change its input"
    assert state[0] == {"type": "message", "role": "user", "content": "Find the year."}
    OPENAI.validate_python(state)


@pytest.mark.parametrize(
    ("state", "index", "field", "words"),
    [
        ("not a list", None, None, "must be a list"),
        ([42], 0, None, "must be an object"),
        ([{"content": "x"}], 0, None, "neither 'type' nor 'role'"),
        ([{"type": "web_search_call"}], 0, "type", "unknown item type"),
        ([{"role": "user", "content": "x", "name": "bob"}], 0, "name", "unknown field"),
        ([{"role": "robot", "content": "x"}], 0, "role", "must be one of"),
        ([{"role": "user"}], 0, "content", "is required"),
        ([{"role": "user", "content": 5}], 0, "content", "a string or a list of parts"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], 0, "content[0].type", "unknown part type"),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": "a", "x": 1}]}],
            0,
            "content[0].x",
            "unknown field",
        ),
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
            0,
            "content[0].detail",
            "is required",
        ),
        (
            [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]}],
            0,
            "content",
            "needs 'id' and 'status'",
        ),
        (
            [{"type": "message", "id": "m", "role": "assistant", "status": "done", "content": []}],
            0,
            "status",
            "must be one of",
        ),
        ([call("")], 0, "call_id", "non-empty"),
        ([call("c", name="")], 0, "name", "non-empty"),
        ([call("c", args="{bad")], 0, "arguments", "JSON string of an object"),
        ([call("c", args="[1, 2]")], 0, "arguments", "JSON string of an object"),
        (
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"q": 1}}],
            0,
            "arguments",
            "must be a string",
        ),
        ([call("c"), out("c"), call("c"), out("c")], 2, "call_id", "already used"),
        ([out("c"), call("c")], 0, "call_id", "does not follow"),
        ([call("c"), out("c"), out("c")], 2, "call_id", "second output"),
        ([call("c")], 0, None, "has no function_call_output"),
        ([call("a"), call("b"), out("b")], 0, None, "has no function_call_output"),
        ([{"type": "reasoning", "id": "r", "summary": "text"}], 0, "summary", "a list of parts"),
        ([{"role": "user", "content": [{"type": "input_text", "text": 3}]}], 0, "content[0].text", "must be a string"),
    ],
)
def test_rule_violations_name_item_field_and_rule(state, index, field, words):
    with pytest.raises(StateError) as err:
        validate_state(state)
    assert err.value.index == index
    assert err.value.field == field
    assert words in str(err.value)
    if index is not None:
        assert f"item {index}" in str(err.value)


def test_pending_call_is_the_only_unanswered_call_allowed():
    state = [{"role": "user", "content": "x"}, call("c1"), out("c1"), call("ev", name="evolve", args='{"code": ""}')]
    assert validate_state(state, pending_call_id="ev")[-1]["call_id"] == "ev"
    with pytest.raises(StateError, match="'c1' has no function_call_output"):
        validate_state(state[:2] + state[3:], pending_call_id="ev")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (float("nan"), "non-finite"),
        (float("inf"), "non-finite"),
        ({1: "a"}, "non-string key"),
        (b"bytes", "not JSON"),
        ((1, 2), "not JSON"),
    ],
)
def test_non_json_values_rejected(value, words):
    with pytest.raises(StateError, match=words):
        validate_state([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "extra": value}])


def test_cycles_and_depth_rejected():
    parts: list = [{"type": "input_text", "text": "x"}]
    parts.append(parts)
    with pytest.raises(StateError, match="cycle"):
        validate_state([{"role": "user", "content": parts}])
    deep: object = "x"
    for _ in range(80):
        deep = [deep]
    with pytest.raises(StateError, match="deeper than 64"):
        validate_state([{"role": "user", "content": deep}])


def test_load_state_rejects_nan_literal_and_bad_json():
    with pytest.raises(StateError, match="NaN is not valid JSON"):
        load_state('[{"role": "user", "content": NaN}]')
    with pytest.raises(StateError, match="not valid JSON"):
        load_state("[{")


def test_unicode_preserved_exactly():
    text = 'emoji 😀, apostrophe ’, escapes \\n \\u2019 " \t and a NUL \u0000'
    state = load_state(json.dumps([{"role": "user", "content": text}], ensure_ascii=True))
    assert state[0]["content"] == text


# -- every accepted State is a valid openai ResponseInputParam --------------------------------


def _random_value(f: Field, rng: random.Random, depth: int = 0):
    if f.nullable and rng.random() < 0.2:
        return None
    if f.kind == "str":
        return rng.choice(["", "plain", "’quote’ 😀", "line\nbreak", '{"json": true}'])
    if f.kind == "id":
        return rng.choice(["id_1", "call-xyz", "msg_" + str(rng.randrange(10**6))])
    if f.kind == "int":
        return rng.randrange(0, 1000)
    if f.kind == "number":
        return rng.choice([0, -1.5, -0.001])
    if f.kind == "bool":
        return rng.random() < 0.5
    if f.kind == "ints":
        return [rng.randrange(256) for _ in range(rng.randrange(4))]
    if f.kind == "record":
        return _random_object(RECORDS[f.group], rng, {})
    if f.kind == "records":
        return [_random_object(RECORDS[f.group], rng, {}) for _ in range(rng.randrange(3))]
    if f.kind == "part":
        ptype = rng.choice(list(PART_GROUPS[f.group]))
        return _random_object(PART_GROUPS[f.group][ptype], rng, {"type": ptype})
    if f.kind == "json_object":
        return json.dumps({"q": rng.choice(["a", "’", "😀"]), "n": rng.randrange(5)})
    if f.kind in ("enum", "const"):
        return rng.choice(f.values)
    if f.kind == "text_or_parts" and rng.random() < 0.4:
        return rng.choice(["", "text ’", "😀"])
    group = PART_GROUPS[f.group]
    parts = []
    for _ in range(rng.randrange(0, 4)):
        ptype = rng.choice(list(group))
        parts.append(_random_object(group[ptype], rng, {"type": ptype}))
    return parts


def _random_object(fields, rng, base):
    obj = dict(base)
    for f in fields:
        if f.required or rng.random() < 0.5:
            obj[f.name] = _random_value(f, rng)
    return obj


def random_state(rng: random.Random) -> list[dict]:
    state, n = [], 0
    for _ in range(rng.randrange(1, 12)):
        shape = rng.choice(list(ITEM_SHAPES))
        item = _random_object(ITEM_SHAPES[shape][1], rng, {})
        if shape == "FunctionCall":
            n += 1
            item["call_id"] = f"call_{n}"
            state.append(item)
            item = _random_object(ITEM_SHAPES["FunctionCallOutput"][1], rng, {})
            item["call_id"] = f"call_{n}"
        elif shape == "FunctionCallOutput":
            continue
        state.append(item)
    return state


def test_every_accepted_state_is_an_openai_response_input():
    rng = random.Random(7)
    accepted = 0
    for _ in range(400):
        state = random_state(rng)
        try:
            valid = validate_state(state)
        except StateError:
            continue
        accepted += 1
        OPENAI.validate_python(valid)
    assert accepted > 300


def test_openai_rejects_what_we_reject_for_assistant_output_parts():
    bad = [{"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": []}]}]
    with pytest.raises(ValidationError):
        OPENAI.validate_python(bad)
    with pytest.raises(StateError):
        validate_state(bad)


def test_typescript_declarations_cover_the_schema():
    ts = typescript_declarations()
    for shape, (_, fields) in ITEM_SHAPES.items():
        assert f"type {shape} = {{" in ts
        for f in fields:
            assert (f"  {f.name}{'' if f.required else '?'}: " in ts) != f.api_only
    for _group, parts in PART_GROUPS.items():
        for ptype in parts:
            assert (f'type: "{ptype}";' in ts) != (ptype in API_ONLY_PARTS)
    assert "type State = Item[];" in ts


# -- hardening (issue 9): every failure is a short StateError ---------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "text",
    [
        "[" + "9" * 5000 + "]",
        "[" * 100_000,
        _nested(5000),
        json.dumps([call("c", args='{"n": ' + "9" * 5000 + "}"), out("c")]),
        json.dumps([call("c", args='{"a": ' + _nested(1000) + "}"), out("c")]),
        json.dumps([call("c", args='{"a": ' + _nested(100) + "}"), out("c")]),
    ],
    ids=["huge-int", "100k-open-brackets", "deep-state", "huge-int-arguments", "deep-arguments", "arguments-past-64"],
)
def test_huge_integers_and_deep_nesting_are_state_errors(text):
    with pytest.raises(StateError) as err:
        load_state(text)
    assert len(str(err.value)) <= MAX_ERROR_CHARS


def test_python_values_too_large_to_print_are_state_errors():
    with pytest.raises(StateError, match="too large"):
        validate_state([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "x": 10**5000}])


@pytest.mark.parametrize(
    "state",
    [
        [{"role": "x" * 700_000, "content": "hi"}],
        [{"type": "x" * 700_000}],
        [{"role": "user", "content": "hi", "k" * 700_000: 1}],
        [out("c" * 700_000)],
        [{"role": "user", "content": [{"type": "t" * 700_000}]}],
        [{"role": "user", "content": {"k" * 700_000: float("nan")}}],
        [call("c", args="{" + "x" * 700_000)],
    ],
    ids=["role", "type", "field", "call_id", "part-type", "key-path", "arguments"],
)
def test_errors_quote_offending_values_clipped(state):
    """A receipt carries the error into the State: a quoted 700k-character value would brick it."""
    with pytest.raises(StateError) as err:
        validate_state(state)
    assert len(str(err.value)) <= MAX_ERROR_CHARS


@pytest.mark.parametrize(
    "state",
    [
        [{"role": "user", "content": "Note \ud83d"}],
        [{"role": "user", "content": [{"type": "input_text", "text": "\udfff"}]}],
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "x": {"\ud800": 1}}],
        [call("c", args='{"q": "\\ud800"}'), out("c")],
    ],
    ids=["content", "part", "key", "escaped-in-arguments"],
)
def test_lone_surrogates_are_rejected(state):
    """One rule at the boundary: text that UTF-8 cannot encode is rejected, never replaced."""
    with pytest.raises(StateError, match="lone surrogate"):
        validate_state(state)


def test_lone_surrogate_escape_in_a_state_file_is_rejected_and_pairs_are_kept():
    with pytest.raises(StateError, match="lone surrogate U\\+D83D"):
        load_state('[{"role": "user", "content": "Note \\ud83d tail"}]')
    state = load_state('[{"role": "user", "content": "Note \\ud83d\\ude00 tail"}]')
    assert state[0]["content"] == "Note 😀 tail"
    dumps_state(state).encode("utf-8")


@pytest.mark.parametrize("args", ['{"x": NaN}', '{"x": -Infinity}', '{"x": Infinity}'])
def test_nan_and_infinity_in_arguments_fail_the_json_object_rule(args):
    with pytest.raises(StateError, match="JSON string of an object"):
        validate_state([call("c", args=args), out("c")])


RESPONSES_API_FIELDS = [
    {"type": "message", "role": "assistant", "content": "Working.", "phase": "commentary"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "phase": "final_answer",
        "content": [
            {
                "type": "output_text",
                "text": "See the file.",
                "annotations": [
                    {
                        "type": "container_file_citation",
                        "container_id": "cntr_1",
                        "file_id": "file_1",
                        "filename": "a.csv",
                        "start_index": 0,
                        "end_index": 3,
                    }
                ],
                "logprobs": [
                    {
                        "token": "See",
                        "bytes": [83, 101, 101],
                        "logprob": -0.25,
                        "top_logprobs": [{"token": "See", "bytes": [83, 101, 101], "logprob": -0.25}],
                    }
                ],
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Read it.", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}},
            {
                "type": "input_file",
                "file_id": "file_1",
                "detail": "low",
                "prompt_cache_breakpoint": {"mode": "explicit"},
            },
            {
                "type": "input_image",
                "detail": "auto",
                "image_url": "u",
                "prompt_cache_breakpoint": {"mode": "explicit"},
            },
        ],
    },
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "read",
        "arguments": "{}",
        "namespace": "files",
        "caller": {"type": "program", "caller_id": "p1"},
    },
    {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "ok",
        "name": "read",
        "namespace": "files",
        "caller": {"type": "direct"},
    },
]


def test_fields_the_responses_api_sends_are_accepted():
    """States built from real Responses API output validate here and against the openai types."""
    state = validate_state(RESPONSES_API_FIELDS)
    OPENAI.validate_python(state)


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ({"type": "input_file", "detail": "original"}, "content[0].detail"),
        ({"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "auto"}}, None),
        ({"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit", "x": 1}}, None),
    ],
)
def test_responses_api_fields_are_checked_too(part, field):
    with pytest.raises(StateError) as err:
        validate_state([{"role": "user", "content": [part]}])
    if field:
        assert err.value.field == field
