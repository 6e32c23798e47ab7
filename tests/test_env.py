"""CompactionEnv: the Gymnasium contract, malformed actions, limits, compaction, the ledger."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from rl_compaction.env import CompactionEnv, EnvConfig
from rl_compaction.oracle import OraclePolicy, make_env, run_oracle_episode
from rl_compaction.state import validate_state
from rl_compaction.tasks import Difficulty

SMALL = Difficulty(scale=0.06, level=1)
# At this scale the probe oracle's episode peaks near 8.5k tokens without compaction.
MEDIUM = Difficulty(scale=0.25, level=1)
TIGHT = dict(context_window=9000, compaction_threshold=6000)


def call(name: str, args: dict | str, cid: str = "c1") -> dict:
    return {
        "type": "function_call",
        "call_id": cid,
        "name": name,
        "arguments": args if isinstance(args, str) else json.dumps(args),
    }


def probe_env(**config) -> CompactionEnv:
    return CompactionEnv("probe", split="test", difficulty=SMALL, config=EnvConfig(**config))


def test_gymnasium_registration_and_env_checker():
    env = gym.make("rl_compaction/probe-v0", split="test", difficulty=SMALL)
    assert isinstance(env.unwrapped, CompactionEnv)
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_is_deterministic_and_observation_is_the_model_input():
    env = probe_env()
    a, info = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    c, _ = env.reset(seed=4)
    assert a == b and a != c
    assert set(a) == {"instructions", "tools", "state"}
    assert {t["name"] for t in a["tools"]} >= {"evolve", "submit", "next_batch"}
    assert "type State = Item[];" in a["instructions"]
    assert info["input_tokens"] == len(env.counter.input_ids(a["instructions"], a["tools"], a["state"]))


@pytest.mark.parametrize(
    ("action", "error_words"),
    [
        ([call("teleport", {})], "unknown tool 'teleport'"),
        ([call("next_batch", "{not json")], "not a JSON object"),
        ([call("next_batch", "[1]")], "not a JSON object"),
        (
            [call("evolve", {"code": "return state;"}), call("next_batch", {"index": 1}, "c2")],
            "evolve must be the only tool call",
        ),
        ([call("submit", {"answer": 5})], "submit takes one argument: answer, a string"),
        ([call("next_batch", {"index": -4})], "index"),
    ],
)
def test_malformed_actions_get_an_error_output_and_never_crash(action, error_words):
    env = probe_env()
    obs, _ = env.reset(seed=0)
    before = obs["state"]
    obs, reward, terminated, truncated, _ = env.step(action)
    assert not terminated and reward == 0.0
    new = validate_state(obs["state"])
    assert new[: len(before)] == before
    outputs = [x["output"] for x in new[len(before) :] if x["type"] == "function_call_output"]
    assert any(error_words in o for o in outputs), outputs


def test_garbage_items_and_duplicate_call_ids_are_repaired():
    env = probe_env()
    env.reset(seed=0)
    obs, *_ = env.step([42, {"type": "mystery"}, call("next_batch", {"index": 1}, cid="dup")])
    obs, *_ = env.step([call("next_batch", {"index": 2}, cid="dup")])
    ids = [x["call_id"] for x in obs["state"] if x["type"] == "function_call"]
    assert len(ids) == len(set(ids)) == 2
    assert any(e["event"] == "malformed_action" for e in env.events)


def test_submit_terminates_with_score_and_full_summary():
    env = probe_env()
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step([call("submit", {"answer": "{}"})])
    assert terminated and not truncated
    assert reward == info["score"] == 0.0 and info["success"] is False
    assert info["ledger"]["invocations"] == 1 and len(info["ledger_rows"]) == 1


def test_plain_message_gets_a_nudge_for_non_interactive_tasks():
    env = probe_env()
    obs, _ = env.reset(seed=1)
    obs, *_ = env.step([{"role": "assistant", "content": "Let me think."}])
    assert obs["state"][-2] == {"type": "message", "role": "assistant", "content": "Let me think."}
    assert obs["state"][-1]["role"] == "user" and "[harness]" in obs["state"][-1]["content"]


def test_oracle_solves_and_ledger_adds_up():
    env = make_env("probe", split="test", difficulty=SMALL)
    info = run_oracle_episode(env, 0)
    assert info["success"] and info["score"] == 1.0
    rows, totals = info["ledger_rows"], info["ledger"]
    assert totals["invocations"] == len(rows) == info["turns"]
    for key in ("input_tokens", "cached_tokens", "output_tokens"):
        assert totals[key] == sum(r[key] for r in rows)
    assert totals["cost"] == pytest.approx(sum(r["cost"] for r in rows))
    assert totals["peak_context_tokens"] == max(r["input_tokens"] for r in rows)
    assert len(env.history) >= len(env.state)


def test_history_is_append_only_while_state_is_edited():
    env = make_env("probe", split="test", strategy="clear_tool_outputs", difficulty=MEDIUM, config=EnvConfig(**TIGHT))
    info = run_oracle_episode(env, 0)
    assert info["ledger"]["compactions"] >= 1
    outputs_in_history = [x["output"] for x in env.history if x["type"] == "function_call_output"]
    assert not any("cleared by the harness" in o for o in outputs_in_history)
    assert any(
        "cleared by the harness" in x.get("output", "") for x in env.state if x["type"] == "function_call_output"
    )
    assert any(v["reason"] == "evolve" for v in env.state_versions)


def test_window_truncates_without_compaction():
    env = make_env("probe", split="test", strategy="none", difficulty=MEDIUM, config=EnvConfig(**TIGHT))
    info = run_oracle_episode(env, 0)
    assert info["truncated_reason"] == "context_window" and not info["success"]


def test_turn_limit_truncates():
    env = probe_env(max_turns=2)
    env.reset(seed=0)
    env.step([{"role": "assistant", "content": "a"}])
    *_, truncated, info = env.step([{"role": "assistant", "content": "b"}])
    assert truncated and info["truncated_reason"] == "max_turns"


def test_compaction_request_is_appended_once_and_oracle_evolve_answers_it():
    env = make_env("probe", split="test", strategy="evolve", difficulty=MEDIUM, config=EnvConfig(**TIGHT))
    info = run_oracle_episode(env, 0, use_evolve=True)
    requests = [e for e in info["events"] if e["event"] == "compaction_request"]
    evolves = [e for e in info["events"] if e["event"] == "evolve"]
    assert requests and evolves and all(e["applied"] for e in evolves)
    assert info["success"]
    assert info["ledger"]["evolve_tokens"] > 0


def test_text_beside_a_lone_evolve_call_is_allowed():
    env = probe_env()
    obs, _ = env.reset(seed=0)
    note = {"role": "assistant", "content": "Compacting now."}
    obs, *_ = env.step([note, call("evolve", {"code": "return state;"}, cid="ev1")])
    assert json.loads(obs["state"][-1]["output"])["applied"] is True
    assert obs["state"][-3] == {"type": "message", "role": "assistant", "content": "Compacting now."}


def test_rejected_evolve_leaves_state_and_records_failure():
    env = probe_env()
    obs, _ = env.reset(seed=0)
    before = obs["state"]
    obs, *_ = env.step([call("evolve", {"code": "return [];"}, cid="ev1")])
    assert obs["state"][: len(before)] == before
    receipt = json.loads(obs["state"][-1]["output"])
    assert receipt["applied"] is False and "pending evolve call" in receipt["error"]
    assert env.ledger.totals()["evolve_failures"] == 1


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="compaction_threshold"):
        EnvConfig(context_window=100, compaction_threshold=200)
    with pytest.raises(ValueError, match="unknown cache model preset"):
        CompactionEnv("probe", config=EnvConfig(cache_preset="nope"))
    with pytest.raises(KeyError, match="unknown task family"):
        CompactionEnv("nope")


def test_oracle_policy_ignores_requests_without_evolve():
    env = make_env("probe", split="test", difficulty=SMALL, config=EnvConfig(context_window=10**6))
    obs, _ = env.reset(seed=0)
    policy = OraclePolicy(env.task.oracle(), env, use_evolve=False)
    assert policy.act(obs)[0]["name"] == "next_batch"
