"""Each family's tool JSON schemas (what the model is shown) agree with the argument checks its
`call_tool` makes (`rl_compaction.harness.tasks.check_arguments`): the two are written apart, so this test
holds them together (issue 22, item 6). A call the schema allows is never refused for its shape;
a call the schema forbids (a missing required key, an extra key, a wrong type) always is."""

from __future__ import annotations

import pytest

from rl_compaction.harness.tasks import Difficulty, ToolError, get_family

FAMILIES = ["probe", "research", "ledger", "dialogue", "codebase", "vault", "courier", "archive"]
SHAPE_ERRORS = ("missing required argument", "unexpected argument", " must be ")
SAMPLES = {"string": "x", "integer": 1}
WRONG = {"string": 1, "integer": "1"}


def _tools(family: str):
    task = get_family(family).make(0, "test", Difficulty(scale=0.06, level=1))
    return task, task.tools()


def _refusal(task, name: str, arguments: dict) -> str | None:
    try:
        task.call_tool(name, arguments)
    except ToolError as e:
        return str(e)
    return None


@pytest.mark.parametrize("family", FAMILIES)
def test_every_tool_schema_agrees_with_its_argument_check(family: str) -> None:
    task, tools = _tools(family)
    assert tools
    for tool in tools:
        name, schema = tool["name"], tool["parameters"]
        props, required = schema.get("properties", {}), schema.get("required", [])
        assert set(required) <= set(props) and schema.get("additionalProperties") is False, name
        valid = {key: props[key].get("enum", [SAMPLES[props[key]["type"]]])[0] for key in required}
        refusal = _refusal(task, name, dict(valid))
        assert refusal is None or not any(s in refusal for s in SHAPE_ERRORS), (name, refusal)
        assert "unexpected argument" in (_refusal(task, name, {**valid, "zzz_extra": 1}) or ""), name
        for key in required:
            missing = {k: v for k, v in valid.items() if k != key}
            assert f"missing required argument {key!r}" in (_refusal(task, name, missing) or ""), (name, key)
            wrong = {**valid, key: WRONG[props[key]["type"]]}
            assert f"{key!r} must be" in (_refusal(task, name, wrong) or ""), (name, key)
            if "enum" in props[key]:  # a value outside the enum is refused too
                assert _refusal(task, name, {**valid, key: "not-in-the-enum"}) is not None, (name, key)
