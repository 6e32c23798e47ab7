"""CompactionEnv: the Gymnasium contract, malformed actions, limits, compaction, the ledger."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

from rl_compaction.core.state import validate_state
from rl_compaction.harness.env import USAGE_REPORT, CompactionEnv, EnvConfig, InvalidAction
from rl_compaction.harness.oracle import OWN_SHARE, OraclePolicy, evolve_options, make_env, run_oracle_episode
from rl_compaction.harness.tasks import Difficulty

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


def test_a_usage_report_follows_every_turn_that_called_a_tool_and_states_the_input_before_it():
    env = probe_env(usage_report=USAGE_REPORT, context_window=10_000)
    obs, _ = env.reset(seed=0)
    policy = OraclePolicy(env.task.oracle(), env)
    obs, *_ = env.step(policy.act(obs))
    report = obs["state"][-1]
    assert obs["state"][-2]["type"] == "function_call_output" and report["role"] == "user"
    before = env.counter.input_ids(obs["instructions"], obs["tools"], obs["state"][:-1])
    percent = round(100 * len(before) / 10_000)
    assert report["content"] == f"[harness] Your context holds {len(before)} of 10000 tokens ({percent}%)."
    obs, *_ = env.step([{"role": "assistant", "content": "thinking"}])
    assert obs["state"][-1]["content"] == EnvConfig().continue_nudge  # no call, no report
    assert probe_env().reset(seed=0)[0]["state"] == probe_env(usage_report="").reset(seed=0)[0]["state"]


def test_a_request_or_report_with_an_unknown_placeholder_is_refused_up_front():
    with pytest.raises(ValueError, match="usage_report may use only"):
        EnvConfig(usage_report="{used} tokens")
    with pytest.raises(ValueError, match="compaction_request may use only"):
        EnvConfig(compaction_request="compact at {limit}")


def test_the_own_oracle_compacts_unasked_once_the_context_holds_its_share_of_the_window():
    config = EnvConfig(**TIGHT, compaction_request="", usage_report=USAGE_REPORT)
    env = make_env("probe", split="test", strategy="evolve_own", difficulty=MEDIUM, config=config)
    info = run_oracle_episode(env, 0, **evolve_options("evolve_own"))
    edits = [e for e in info["events"] if e["event"] == "evolve"]
    assert info["success"] and not [e for e in info["events"] if e["event"] == "compaction_request"]
    assert edits and all(e["applied"] and not e["asked"] and e["context_share"] >= OWN_SHARE for e in edits)
    asked = make_env("probe", split="test", strategy="evolve", difficulty=MEDIUM, config=EnvConfig(**config.__dict__))
    assert not run_oracle_episode(asked, 0, **evolve_options("evolve"))["success"]  # it waits for a request


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


# -- hardening (issue 9) ----------------------------------------------------------------------


def snapshot(env: CompactionEnv) -> tuple:
    """Everything a step may change, compared by value."""
    return (
        json.dumps(env.state),
        json.dumps(env.history),
        env.turn,
        env.output_tokens,
        len(env.ledger.rows),
        json.dumps(env.events),
        len(env.state_versions),
        env.answer,
        env.score,
    )


@pytest.mark.parametrize(
    "action",
    [
        {"items": [call("next_batch", {"index": 1})], "input_ids": 5},
        {"items": [call("next_batch", {"index": 1})], "output_ids": 5},
        {"items": [call("next_batch", {"index": 1})], "input_ids": [1, -2]},
        {"items": [call("next_batch", {"index": 1})], "output_ids": ["a"]},
        {"items": [call("next_batch", {"index": 1})], "output_ids": [True]},
        {"items": 5},
        {"items": [], "logprobs": []},
        "hello",
    ],
    ids=["input_ids-int", "output_ids-int", "negative-id", "str-id", "bool-id", "items-int", "unknown-key", "str"],
)
def test_an_action_that_is_not_a_turn_is_rejected_and_changes_nothing(action):
    env = probe_env()
    env.reset(seed=0)
    before = snapshot(env)
    with pytest.raises(InvalidAction):
        env.step(action)
    assert snapshot(env) == before
    _, _, terminated, truncated, info = env.step([call("next_batch", {"index": 1})])
    assert info["turn"] == 1 and not terminated and not truncated


NO_NAME = {"type": "function_call", "call_id": "c1", "arguments": "{}"}
NO_ARGS = {"type": "function_call", "call_id": "c1", "name": "next_batch"}


@pytest.mark.parametrize(
    ("item", "error_words"),
    [
        (NO_NAME, "no tool name"),
        (NO_ARGS, "JSON object string"),
        (dict(NO_ARGS, name=5, arguments="{}"), "no tool name"),
        (dict(NO_ARGS, arguments=5), "JSON object string"),
        (dict(NO_ARGS, arguments={"index": 1}), "JSON object string"),
        (dict(NO_ARGS, arguments='{"a": ' + "[" * 5000 + "]" * 5000 + "}"), "nested deeper"),
        (dict(NO_ARGS, arguments='{"index": ' + "9" * 5000 + "}"), "more than 4300 digits"),
        (dict(NO_ARGS, arguments='{"index": NaN}'), "NaN is not valid JSON"),
        (dict(NO_ARGS, arguments='{"q": "\\ud800"}'), "lone surrogate"),
        (dict(NO_ARGS, arguments="{}", call_id=["x"]), "index"),
        (dict(NO_ARGS, arguments="{}", extra=float("nan")), "not valid JSON"),
        (dict(NO_ARGS, arguments="{}", extra=[[[[]]]] * 3 + [{"x": {1: 2}}]), "not valid JSON"),
    ],
    ids=[
        "no-name",
        "no-arguments",
        "int-name",
        "int-arguments",
        "dict-arguments",
        "5000-deep-arguments",
        "5000-digit-integer",
        "nan",
        "escaped-lone-surrogate",
        "list-call-id",
        "nan-field",
        "int-key",
    ],
)
def test_malformed_function_calls_are_answered_with_an_error(item, error_words):
    """README: malformed turns get an error tool output and never crash the env."""
    env = probe_env()
    obs, _ = env.reset(seed=0)
    before = obs["state"]
    obs, reward, terminated, truncated, info = env.step([item])
    assert info["turn"] == env.turn == 1 and not terminated
    new = validate_state(obs["state"])
    assert new[: len(before)] == before
    assert new[-1]["type"] == "function_call_output"
    assert error_words in json.loads(new[-1]["output"])["error"]


@pytest.mark.parametrize(
    "item",
    [
        {"role": "assistant", "content": "half an emoji \ud83d"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "\udc00"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": [[[[[[]]]]]] * 2 + [{"text": float("inf")}]},
        [["nested"] * 3] * 3,
    ],
)
def test_malformed_non_call_items_are_ignored_and_logged(item):
    env = probe_env()
    env.reset(seed=0)
    obs, *_ = env.step([item])
    validate_state(obs["state"])
    assert obs["state"][-1]["role"] == "user"  # the nudge: the turn had no call


def test_deeply_nested_message_content_does_not_crash():
    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    env = probe_env()
    env.reset(seed=0)
    obs, *_ = env.step([{"role": "assistant", "content": deep}, call("next_batch", {"index": 1})])
    validate_state(obs["state"])
    assert any(e["event"] == "malformed_action" for e in env.events)


def test_submit_the_checker_cannot_parse_ends_the_episode_with_score_zero():
    """A 5000-digit number in the answer makes the task's JSON parser raise: scored 0, episode over."""
    env = probe_env()
    env.reset(seed=0)
    answer = '{"a": ' + "9" * 5000 + "}"
    obs, reward, terminated, truncated, info = env.step([call("submit", {"answer": answer})])
    assert terminated and reward == 0.0 and info["score"] == 0.0
    assert any(e["event"] == "score_error" for e in env.events)
    assert obs["state"][-1]["output"] == "Answer submitted."


def test_a_step_that_fails_half_way_is_undone(monkeypatch):
    """A bug in a task or strategy raises out of step, but the env is left as it was."""
    env = probe_env()
    env.reset(seed=0)
    env.step([call("next_batch", {"index": 1})])
    before = snapshot(env)

    def broken(name, args):
        raise RuntimeError("task bug")

    monkeypatch.setattr(env.task, "call_tool", broken)
    with pytest.raises(RuntimeError, match="task bug"):
        env.step([{"role": "assistant", "content": "next"}, call("next_batch", {"index": 2}, "c2")])
    assert snapshot(env) == before


def test_a_strategy_that_fails_at_the_threshold_leaves_the_env_and_ledger_as_they_were():
    def broken(state, env):
        raise RuntimeError("strategy bug")

    env = CompactionEnv(
        "probe", split="test", difficulty=SMALL, config=EnvConfig(context_window=10**6, compaction_threshold=1)
    )
    env.reset(seed=0)
    env.strategy = broken
    before = snapshot(env)
    with pytest.raises(RuntimeError, match="strategy bug"):
        env.step([call("next_batch", {"index": 1})])
    assert snapshot(env) == before and env.ledger.totals()["invocations"] == 0


@pytest.mark.parametrize("how", ["submit", "max_turns"])
def test_step_after_the_episode_ended_raises_and_changes_nothing(how):
    env = probe_env(max_turns=1)
    env.reset(seed=0)
    action = [call("submit", {"answer": "{}"})] if how == "submit" else [{"role": "assistant", "content": "a"}]
    _, _, terminated, truncated, _ = env.step(action)
    assert terminated or truncated
    before = snapshot(env)
    for again in ([call("evolve", {"code": "return state;"}, "ev")], [call("submit", {"answer": "{}"}, "s2")]):
        with pytest.raises(gym.error.ResetNeeded):
            env.step(again)
    assert snapshot(env) == before
    env.reset(seed=0)
    env.step([{"role": "assistant", "content": "a"}])  # a new episode runs again


def test_the_env_declares_render_fps_and_runs_as_a_sync_vector_env():
    """Gymnasium details (issue 22, item 7): `check_env` has no render_fps warning, and two sub-envs'
    spaces compare equal, so `gymnasium.make_vec(..., "sync")` runs them side by side (observations and
    actions are tuples, one per sub-env)."""
    import warnings

    from rl_compaction.harness.tasks import Difficulty

    toy = {"split": "test", "difficulty": Difficulty(scale=0.02, level=1)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make("rl_compaction/vault-v0", **toy).unwrapped)
    assert not [w for w in caught if "render fps" in str(w.message)]
    vec = gym.make_vec("rl_compaction/vault-v0", num_envs=2, vectorization_mode="sync", **toy)
    obs, _ = vec.reset(seed=[0, 1])
    oracles = [env.unwrapped.task.oracle() for env in vec.envs]
    scores: list[float | None] = [None, None]
    for _ in range(20):
        obs, rewards, terminated, truncated, infos = vec.step(
            tuple(o.act(x["state"]) for o, x in zip(oracles, obs, strict=True))
        )
        for i in range(2):
            if (terminated[i] or truncated[i]) and scores[i] is None:
                scores[i] = float(rewards[i])
        if None not in scores:
            break
    vec.close()
    assert scores == [1.0, 1.0]


def test_step_after_close_raises_until_the_next_reset():
    env = probe_env()
    env.reset(seed=0)
    env.step([call("next_batch", {"index": 1})])
    env.close()
    with pytest.raises(ResetNeeded, match="closed"):
        env.step([call("next_batch", {"index": 2}, "c2")])
    env.reset(seed=0)
    env.step([call("next_batch", {"index": 1})])
