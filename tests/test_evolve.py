"""The evolve protocol boundary: receipts, the pending call, failure isolation, the examples."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rl_compaction.accounting import get_counter
from rl_compaction.core.sandbox import SandboxLimits, SandboxResult
from rl_compaction.core.state import StateError, load_state, typescript_declarations, validate_state
from rl_compaction.protocol import evolve
from rl_compaction.protocol.evolve import (
    EVOLVE_TOOL,
    MAX_RECEIPT_CHARS,
    ProtocolError,
    apply_evolve,
    evolve_code_of,
    is_selection,
    system_message,
    system_suffix,
)
from rl_compaction.protocol.example_runner import EXAMPLES_DIR, example_dirs, run_example

RECEIPT_KEYS = {
    "applied",
    "before_tokens",
    "after_tokens",
    "reusable_prefix_tokens",
    "evolve_call_tokens",
    "cache_cost",
    "compaction_cost",
}


def evolve_call(code: str, cid: str = "ev1") -> dict:
    return {"type": "function_call", "call_id": cid, "name": "evolve", "arguments": json.dumps({"code": code})}


BASE = [
    {"type": "message", "role": "user", "content": "Summarise the three reports. Keep the figures exact."},
    {"type": "function_call", "call_id": "r1", "name": "read", "arguments": '{"id": 1}'},
    {"type": "function_call_output", "call_id": "r1", "output": "Report 1: revenue 1,204.50 € ’ " + "filler " * 200},
    {"type": "message", "role": "assistant", "content": "Report 1 read; revenue 1,204.50 €."},
]

DROP_REPORT = """
const i = state.findIndex(x => x.type === "function_call" && x.name === "read");
const id = state[i].call_id;
return state.filter(x => x.call_id !== id);
"""


def receipt_of(state: list[dict]) -> dict:
    return json.loads(state[-1]["output"])


def test_success_replaces_state_and_appends_one_receipt():
    state = BASE + [evolve_call(DROP_REPORT)]
    pristine = copy.deepcopy(state)
    outcome = apply_evolve(state)
    assert state == pristine
    assert outcome.applied
    assert outcome.state[:-1] == [BASE[0], BASE[3], state[-1]]
    receipt = receipt_of(outcome.state)
    assert set(receipt) == RECEIPT_KEYS and receipt == outcome.receipt
    assert outcome.state[-1]["call_id"] == "ev1" and outcome.state[-1]["type"] == "function_call_output"
    assert receipt["after_tokens"] < receipt["before_tokens"]
    assert receipt["cache_cost"] == receipt["after_tokens"] - receipt["reusable_prefix_tokens"]
    assert receipt["compaction_cost"] == receipt["evolve_call_tokens"] * 1.0 + receipt["cache_cost"]
    validate_state(outcome.state)


@pytest.mark.parametrize(
    "code, selection",
    [
        (DROP_REPORT, True),  # drops a call and its output: every kept item is the one it was
        ("return state.slice(0, 1).concat(state.slice(3));", True),
        ("return [...state].reverse().reverse();", True),  # a reordering that ends where it began
        # an item rebuilt from the State's own values is the same item (judged by the result)
        ('return [{type: "message", role: "user", content: state[0].content}, state[state.length - 1]];', True),
        # editing an item in place or writing a new one generates content
        ('state[3].content += " (checked)"; return state;', False),
        ('return [state[0], {type: "message", role: "user", content: "revenue 1,204.50"}, state.at(-1)];', False),
    ],
)
def test_an_edit_is_a_selection_when_it_keeps_every_item_it_returns_unchanged(code, selection):
    """The cheap-edit share (issue 19): selecting keeps material exactly and generates nothing."""
    outcome = apply_evolve(BASE + [evolve_call(code)])
    assert outcome.applied and outcome.selection is selection
    assert not apply_evolve(BASE + [evolve_call("throw new Error('x')")]).selection  # a failure selects nothing
    assert is_selection(BASE, BASE[:1]) and not is_selection(BASE[:1], BASE)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("return state.slice(0, -1);", "pending evolve call was removed"),
        ('state[state.length - 1].arguments = \'{"code": "x"}\'; return state;', "must stay unchanged"),
        ("const p = state.pop(); state.unshift(p); return state;", "must stay unchanged as the last item"),
        ("return state.filter(x => x.type !== 'function_call_output');", "invalid State: item 1"),
        ("state.splice(1, 0, {type: 'message', role: 'robot', content: 'x'}); return state;", "field 'role'"),
        ("while (true) {}", "time limit"),
        ("throw new Error('not found');", "Error: not found"),
        ("return state +;", "SyntaxError"),
    ],
)
def test_any_failure_keeps_the_previous_state_exactly(code, words):
    state = BASE + [evolve_call(code)]
    outcome = apply_evolve(state, limits=SandboxLimits(time_s=0.05))
    assert not outcome.applied
    assert outcome.state[:-1] == state
    receipt = receipt_of(outcome.state)
    assert receipt["applied"] is False and words in receipt["error"]
    assert set(receipt) == {"applied", "error"}


@pytest.mark.parametrize("arguments", ['{"code": 5}', '{"code": "", "extra": 1}', "{}"])
def test_arguments_must_be_exactly_code(arguments):
    state = BASE + [{"type": "function_call", "call_id": "ev1", "name": "evolve", "arguments": arguments}]
    outcome = apply_evolve(state)
    assert not outcome.applied and "exactly" in outcome.receipt["error"]


def test_harness_misuse_raises():
    with pytest.raises(ProtocolError):
        apply_evolve(BASE)
    with pytest.raises(StateError):
        apply_evolve([BASE[1], evolve_call("return state;")])  # unanswered non-pending call


def test_earlier_evolve_round_trips_can_be_removed_later():
    first = apply_evolve(BASE + [evolve_call("return state;", "ev1")]).state
    assert first[-2]["name"] == "evolve"
    code = "return state.filter(x => x.call_id !== 'ev1');"
    second = apply_evolve(first + [evolve_call(code, "ev2")])
    assert second.applied
    assert not any(x.get("call_id") == "ev1" for x in second.state)
    # Removing only the old receipt leaves its call unanswered: rejected.
    half = "return state.filter(x => !(x.call_id === 'ev1' && x.type === 'function_call_output'));"
    rejected = apply_evolve(first + [evolve_call(half, "ev3")])
    assert not rejected.applied and "'ev1' has no function_call_output" in rejected.receipt["error"]


def test_receipt_uses_given_evolve_tokens_and_output_weight():
    outcome = apply_evolve(BASE + [evolve_call(DROP_REPORT)], evolve_call_tokens=100, output_weight=4.0)
    r = outcome.receipt
    assert r["evolve_call_tokens"] == 100
    assert r["compaction_cost"] == 400 + r["cache_cost"]


def test_append_only_edit_keeps_the_whole_prefix():
    code = "state.splice(state.length - 1, 0, {type: 'message', role: 'assistant', content: 'note'}); return state;"
    r = apply_evolve(BASE + [evolve_call(code)]).receipt
    assert r["after_tokens"] > r["before_tokens"]
    # Only the generation prompt at the very end of the old input differs.
    assert r["before_tokens"] - r["reusable_prefix_tokens"] <= 5
    early = "state[0].content = 'Summarise.'; return state;"
    e = apply_evolve(BASE + [evolve_call(early)]).receipt
    assert e["reusable_prefix_tokens"] < r["reusable_prefix_tokens"] and e["cache_cost"] > r["cache_cost"]


def test_tool_definition_and_system_suffix():
    assert EVOLVE_TOOL["name"] == "evolve"
    assert EVOLVE_TOOL["parameters"]["properties"].keys() == {"code"}
    assert EVOLVE_TOOL["parameters"]["required"] == ["code"]
    assert EVOLVE_TOOL["parameters"]["additionalProperties"] is False
    suffix = system_suffix()
    assert typescript_declarations() in suffix  # one source for validator and model view
    assert "250 ms" in suffix and "16 MiB" in suffix
    assert system_message("Solve the task.").startswith("Solve the task.\n\n")
    assert evolve_code_of(evolve_call("return state;")) == "return state;"


def test_unicode_survives_protocol_exactly():
    state = BASE + [evolve_call("state[0].content += ' ✓ 😀 \\u2019'; return state;")]
    outcome = apply_evolve(state)
    assert outcome.state[0]["content"] == BASE[0]["content"] + " ✓ 😀 ’"
    assert outcome.state[2]["output"] == BASE[2]["output"]


# -- the four worked examples ------------------------------------------------------------------


def test_there_are_four_examples_each_complete():
    dirs = example_dirs()
    assert [d.name[:2] for d in dirs] == ["01", "02", "03", "04"]
    readme = (EXAMPLES_DIR / "README.md").read_text(encoding="utf-8")
    for d in dirs:
        assert {p.name for p in d.iterdir()} >= {"before.json", "evolve.js", "after.json"}
        assert d.name in readme


@pytest.mark.parametrize("path", example_dirs(), ids=lambda p: p.name)
def test_example_reproduces_after_json(path: Path):
    result = run_example(path, get_counter("o200k_base"))
    assert result.passed, result.detail
    assert result.metrics["after_tokens"] < result.metrics["before_tokens"]


def test_example_runner_detects_a_wrong_result(tmp_path: Path):
    src = example_dirs()[3]
    for name in ("before.json", "evolve.js"):
        (tmp_path / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")
    after = load_state((src / "after.json").read_text(encoding="utf-8"))
    after[0]["content"] = "tampered"
    (tmp_path / "after.json").write_text(json.dumps(after), encoding="utf-8")
    result = run_example(tmp_path, get_counter("o200k_base"))
    assert not result.passed and "differs from after.json" in result.detail


# -- hostile code and bounded receipts (issue 9) -----------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "return state; }; return 'null'; const _z = function(){",  # closes the function body early
        """
        let reads = 0;
        const deep = () => { let a = []; for (let i = 0; i < 990; i++) a = [a]; return a; };
        state[0] = { type: 'message', role: 'user', get content() { return reads++ ? deep() : 'x'; } };
        return state;
        """,  # 990 nested arrays only when serialised
        "return [];\u0000",  # a NUL outside a literal
    ],
    ids=["leaves-its-body", "deep-when-serialised", "nul"],
)
def test_hostile_results_are_rejections_not_exceptions(code):
    state = BASE + [evolve_call(code)]
    outcome = apply_evolve(state)
    assert not outcome.applied and outcome.state[:-1] == state
    validate_state(outcome.state)


def test_a_result_the_protocol_cannot_check_is_a_rejection(monkeypatch):
    """Whatever the sandbox hands back (here no State at all), checking it never raises."""
    monkeypatch.setattr(evolve, "run_evolve", lambda *a: SandboxResult(None, None, 0.0))
    state = BASE + [evolve_call("return state;")]
    outcome = apply_evolve(state)
    assert not outcome.applied and outcome.state[:-1] == state
    assert "could not be checked" in outcome.receipt["error"]


@pytest.mark.parametrize(
    "error",
    ["x" * 1_000_000, "quote \ud800 " * 100_000],
    ids=["huge", "lone-surrogates"],
)
def test_the_receipt_is_small_and_valid_whatever_the_error(monkeypatch, error):
    monkeypatch.setattr(evolve, "run_evolve", lambda *a: SandboxResult(None, error, 0.0))
    outcome = apply_evolve(BASE + [evolve_call("return state;")])
    assert len(outcome.state[-1]["output"]) <= MAX_RECEIPT_CHARS
    assert json.loads(outcome.state[-1]["output"]) == outcome.receipt
    validate_state(outcome.state)
    outcome.state[-1]["output"].encode("utf-8")


def test_a_huge_invalid_value_does_not_make_the_state_too_big_to_edit():
    code = "state.splice(1, 0, {type: 'message', role: 'r'.repeat(700000), content: 'x'}); return state;"
    outcome = apply_evolve(BASE + [evolve_call(code)])
    assert not outcome.applied and len(outcome.state[-1]["output"]) <= MAX_RECEIPT_CHARS
    again = apply_evolve(outcome.state + [evolve_call("return state;", "ev2")])
    assert again.applied
