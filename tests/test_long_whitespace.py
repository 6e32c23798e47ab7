"""A long run of whitespace through every path that counts tokens (issue 22, red team 2).

tiktoken's o200k encoder overflows its stack on about 1M whitespace characters and panics; pyo3's
PanicException derives from BaseException, so it escaped every guard. 1 MB of text is well under
the State cap, and a 100-byte evolve call can build it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_compaction.accounting import get_counter
from rl_compaction.cli import main
from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.tasks import Difficulty
from rl_compaction.protocol.evolve import apply_evolve

SPACES = " " * 1_000_000  # panicked whole (a State's JSON keeps spaces as they are; tabs become \\t)
BUILD = 'return [...state.slice(0, -1), {type: "message", role: "user", content: " ".repeat(1000000)}, state.at(-1)];'


def _call(name: str, arguments: dict, call_id: str = "c1") -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}


def test_the_counter_counts_a_long_whitespace_run_close_to_a_whole_encode():
    counter = get_counter("o200k_base")
    assert counter.text_tokens(SPACES) > 0 and counter.text_tokens(" \t" * 500_000) > 0
    state = [{"type": "message", "role": "user", "content": SPACES}]
    assert len(counter.input_ids("", [], state)) == len(counter.input_ids_full("", [], state))
    # a run that is long enough to be split, short enough to encode whole: nearly the same count
    text = "word" + " " * 300_000 + "word"
    whole = len(counter.encoding.encode_ordinary(text))
    assert abs(counter.text_tokens(text) - whole) <= 8
    assert counter.output_tokens([{"type": "message", "role": "assistant", "content": SPACES}]) > 0


def test_an_evolve_call_that_builds_a_long_whitespace_message_is_applied():
    state = [{"type": "message", "role": "user", "content": "Go."}, _call("evolve", {"code": BUILD}, "ev1")]
    outcome = apply_evolve(state, counter=get_counter("o200k_base"))
    assert outcome.applied, outcome.receipt
    assert any(item.get("content") == SPACES for item in outcome.state)


@pytest.mark.parametrize("action", ["message", "evolve"])
def test_env_step_takes_a_long_whitespace_turn(action: str):
    env = CompactionEnv(
        "probe", split="test", difficulty=Difficulty(scale=0.06, level=1), config=EnvConfig(context_window=10**7)
    )
    env.reset(seed=0)
    turn = (
        [{"type": "message", "role": "assistant", "content": SPACES}]
        if action == "message"
        else [_call("evolve", {"code": BUILD})]
    )
    obs, _, _, _, info = env.step(turn)
    assert any(item.get("content") == SPACES for item in obs["state"])


def test_cost_and_evolve_commands_read_a_state_with_a_long_whitespace_run(tmp_path: Path, capsys):
    state = [{"type": "message", "role": "user", "content": SPACES}]
    (tmp_path / "before.json").write_text(json.dumps(state))
    (tmp_path / "after.json").write_text(json.dumps(state[:1] + [{"type": "message", "role": "user", "content": "x"}]))
    (tmp_path / "code.js").write_text("return state;")
    assert main(["cost", str(tmp_path / "before.json"), str(tmp_path / "after.json")]) == 0
    assert json.loads(capsys.readouterr().out)["before_tokens"] > 0
    assert main(["evolve", str(tmp_path / "before.json"), str(tmp_path / "code.js")]) == 0
