"""Seeded fuzzing of the two doors hostile input comes through: model turns into `env.step`, and
State files into the command line. Invariants: no exception except the documented ones, nothing
changes on a rejection, the State stays valid. Bounded: a fixed number of cases, well under 60 s."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from test_env import snapshot  # tests/ is on sys.path under pytest

from rl_compaction.cli import main
from rl_compaction.core.state import validate_state
from rl_compaction.harness.env import CompactionEnv, EnvConfig, InvalidAction
from rl_compaction.harness.tasks import Difficulty

SEEDS = range(6)
STEPS_PER_SEED = 120
FILES_PER_SEED = 40

GOOD_STATE = [
    {"role": "user", "content": "Track the totals ’ 😀."},
    {"type": "function_call", "call_id": "c1", "name": "next_batch", "arguments": '{"index": 1}'},
    {"type": "function_call_output", "call_id": "c1", "output": "a=1 b=2 " * 20},
]


# -- generators ---------------------------------------------------------------------------------


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def junk_text(rng: random.Random) -> str:
    return rng.choice(
        [
            "",
            "plain",
            "half an emoji \ud83d",
            "\udc00",
            "x" * rng.choice([1, 1000, 100_000]),
            "NUL \u0000 and ’ 😀",
            "[" * 2000,
            '{"answer": ' + "9" * 5000 + "}",
        ]
    )


def junk_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(11)
    if kind == 0 or depth > 3:
        return junk_text(rng)
    if kind == 1:
        return rng.choice([0, -1, 10**30, 10**5000, True, None])
    if kind == 2:
        return rng.choice([float("nan"), float("inf"), 1.5])
    if kind == 3:
        return nested(rng.choice([5, 70, 3000]))
    if kind == 4:
        return {rng.choice(["a", "\ud800", "k" * 500]): junk_value(rng, depth + 1)}
    if kind == 5:
        return {1: "int key"}
    if kind == 6:
        return {"x"}  # a set: not JSON
    return [junk_value(rng, depth + 1) for _ in range(rng.randrange(3))]


def junk_arguments(rng: random.Random) -> Any:
    return rng.choice(
        [
            lambda: json.dumps({"index": rng.choice([0, 1, 2, -4, 10**30, True, "1", None])}),
            lambda: json.dumps({"answer": rng.choice(["{}", '{"a": 1}', junk_text(rng)])}),
            lambda: json.dumps({"code": rng.choice(EVOLVE_CODES)}),
            lambda: '{"x": NaN}',
            lambda: '{"x": ' + "9" * 5000 + "}",
            lambda: '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
            lambda: "{bad",
            lambda: "[1]",
            lambda: '{"q": "\\ud800"}',
            lambda: junk_value(rng),
        ]
    )()


EVOLVE_CODES = [
    "return state;",
    "return [];",
    "throw new Error('x'.repeat(100000));",
    "state[0].content = 'Note 😀 tail'.slice(0, 6); return state;",
    "state[0].content = 'y'.repeat(700000); return state;",
    "state.splice(0, 1); return state;",
    "state[0].role = 'x'.repeat(700000); return state;",
    "return 5;",
]


def junk_item(rng: random.Random) -> Any:
    kind = rng.randrange(10)
    if kind < 5:
        item: dict[str, Any] = {"type": "function_call"}
        if rng.random() < 0.85:
            item["name"] = rng.choice(["next_batch", "submit", "evolve", "teleport", "", 5, None, "n" * 1000])
        if rng.random() < 0.85:
            item["arguments"] = junk_arguments(rng)
        if rng.random() < 0.8:
            item["call_id"] = rng.choice(["c1", "c2", "dup", "", 7, None])
        if rng.random() < 0.1:
            item[rng.choice(["extra", "\ud800"])] = junk_value(rng)
        return item
    if kind < 8:
        content = junk_text(rng) if rng.random() < 0.6 else junk_value(rng)
        return {"role": rng.choice(["assistant", "user", 5]), "content": content}
    if kind == 8:
        return {"type": rng.choice(["reasoning", "mystery", None, ["x"]])}
    return junk_value(rng)


def lone_evolve_call(rng: random.Random) -> dict[str, Any]:
    """A well-formed evolve call, so that the protocol runs often (random items rarely get there)."""
    code = rng.choice(EVOLVE_CODES)
    return {
        "type": "function_call",
        "call_id": f"ev{rng.randrange(10**6)}",
        "name": "evolve",
        "arguments": json.dumps({"code": code}),
    }


def junk_action(rng: random.Random) -> Any:
    if rng.random() < 0.2:
        return [lone_evolve_call(rng)]
    items = [junk_item(rng) for _ in range(rng.randrange(0, 4))]
    roll = rng.random()
    if roll < 0.6:
        return items
    if roll < 0.7:
        return rng.choice([5, "text", None, {"items": 5}, {"items": items, "extra": 1}])
    action: dict[str, Any] = {"items": items}
    for key in ("input_ids", "output_ids"):
        if rng.random() < 0.5:
            action[key] = rng.choice([[1, 2, 3], list(range(50)), 5, [-1], ["a"], [True], None, [1.5]])
    return action


# -- the env ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_model_turns_never_break_the_env(seed: int):
    rng = random.Random(seed)
    env = CompactionEnv(
        "probe", split="test", difficulty=Difficulty(scale=0.06, level=1), config=EnvConfig(max_turns=25)
    )
    env.reset(seed=seed)
    ended, started = False, time.monotonic()
    for _ in range(STEPS_PER_SEED):
        before = snapshot(env)
        action = junk_action(rng)
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except (InvalidAction, gym.error.ResetNeeded) as e:
            assert isinstance(e, gym.error.ResetNeeded) == ended, e
            assert snapshot(env) == before, "a rejected action changed the env"
            if ended:
                env.reset(seed=rng.randrange(100))
                ended = False
            continue
        assert not ended, "a step after the end was accepted"
        state = validate_state(env.state)
        assert obs["state"] == state
        assert env.turn == before[2] + 1
        assert json.dumps(env.history).startswith(before[1][:-1]), "history is append-only"
        ended = terminated or truncated
    assert time.monotonic() - started < 45


# -- the command line ---------------------------------------------------------------------------


def junk_state_text(rng: random.Random) -> str | bytes:
    text = json.dumps(GOOD_STATE, ensure_ascii=rng.random() < 0.5)
    kind = rng.randrange(12)
    if kind == 0:
        return text[: rng.randrange(len(text))]
    if kind == 1:
        return "[" * rng.choice([100, 100_000]) + text
    if kind == 2:
        return text.replace('"index": 1', '"index": ' + "9" * rng.choice([10, 5000]))
    if kind == 3:
        return text.replace('"index": 1', '"index": NaN').replace("1}", "Infinity}")
    if kind == 4:
        return text.replace("Track", "Tr\\ud83dack")
    if kind == 5:
        return text.encode("utf-8")[: rng.randrange(1, 60)] + b"\xff\xfe" + text.encode("utf-8")
    if kind == 6:
        return text.replace('"user"', json.dumps("r" * 700_000))
    if kind == 7:
        return text.replace('"c1"', '"' + "c" * 100_000 + '"', 1)
    if kind == 8:
        return json.dumps([junk_value(rng) for _ in range(3)], default=str, allow_nan=True)
    if kind == 9:
        return text.replace("Track", "Tr" + "\\u0000" * 3 + "ack")
    if kind == 10:
        return json.dumps(nested(rng.choice([60, 65, 900])))
    return text


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_state_files_get_exit_codes_not_tracebacks(seed: int, tmp_path: Path, capsys):
    rng = random.Random(seed)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD_STATE), encoding="utf-8")
    code = tmp_path / "code.js"
    bad = tmp_path / "bad.json"
    started = time.monotonic()
    for _ in range(FILES_PER_SEED):
        data = junk_state_text(rng)
        bad.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        code.write_text(rng.choice(EVOLVE_CODES), encoding="utf-8")
        for args in (["cost", str(good), str(bad)], ["evolve", str(bad), str(code)]):
            rc = main(args)
            out, err = capsys.readouterr()
            assert rc in (0, 1, 2), (args, rc)
            if rc == 2:
                assert out == "" and len(err.strip().splitlines()) == 1 and len(err) < 2000, err[:300]
            else:
                assert err == "" and isinstance(json.loads(out), dict)
                out.encode("utf-8")  # printable: no lone surrogate reached stdout
    assert json.loads(good.read_text(encoding="utf-8")) == GOOD_STATE
    assert time.monotonic() - started < 45
