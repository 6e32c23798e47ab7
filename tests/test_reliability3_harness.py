"""Faults of the third reliability round in the harness: what a task plug-in hands the env (its score, its
tool output and user replies), a reset that raises half-way, and evolve code that read the host's time zone.
Each was accepted, or mixed two episodes, before its fix."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest
from gymnasium.error import ResetNeeded
from test_env import snapshot  # tests/ is on sys.path under pytest

from rl_compaction.core import sandbox
from rl_compaction.core.render import function_tool
from rl_compaction.core.sandbox import run_evolve
from rl_compaction.harness.env import CompactionEnv, PluginError
from rl_compaction.harness.tasks import Oracle, Task, TaskFamily, ToolError


class TinyOracle(Oracle):
    def act(self, state):
        return [self.function_call(state, "submit", {"answer": "ok"})]


class TinyTask(Task):
    """One tool (`echo`), a fixed answer; what the plug-in returns is set by its family."""

    family = "tiny"
    instructions = "Call echo, then submit ok."

    def __init__(self, seed, settings):
        self.seed, self.settings = seed, settings

    def tools(self):
        if self.settings.get("fail") == ("tools", self.seed):
            raise RuntimeError("tools bug")
        return [function_tool("echo", "Echo a text.", {"text": {"type": "string"}}, ["text"])]

    def initial_state(self):
        if self.settings.get("fail") == ("initial_state", self.seed):
            raise RuntimeError("initial_state bug")
        if self.settings.get("fail") == ("invalid_state", self.seed):
            return [{"type": "message", "role": "user"}]  # no content
        return [{"type": "message", "role": "user", "content": f"Task {self.seed}: call echo, then submit ok."}]

    def call_tool(self, name, arguments):
        if name != "echo" or not isinstance(arguments.get("text"), str):
            raise ToolError("call echo with a text")
        return self.settings.get("tool_output", arguments["text"])

    def user_reply(self, text):
        return self.settings.get("reply")

    def score(self, answer):
        return self.settings.get("score", float(answer == "ok"))

    def oracle(self):
        return TinyOracle()


class TinyFamily(TaskFamily):
    name = "tiny"

    def __init__(self, **settings):
        self.settings = settings

    def make(self, seed, split="train", difficulty=None):
        if self.settings.get("fail") == ("make", seed):
            raise RuntimeError("make bug")
        return TinyTask(seed, self.settings)


def call(name: str, args: dict, cid: str) -> dict:
    return {"type": "function_call", "call_id": cid, "name": name, "arguments": json.dumps(args)}


# -- a plug-in's score must be a number in [0, 1] ------------------------------------------------------------


@pytest.mark.parametrize("score", [float("nan"), float("inf"), float("-inf"), 7.5, -3, 1.0000001, "1.0", None, [1]])
def test_a_score_outside_0_1_is_a_score_error_not_a_reward(score):
    """NaN, inf or 7.5 became the reward as they were, and inf and 7.5 counted as success."""
    env = CompactionEnv(TinyFamily(score=score))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step([call("submit", {"answer": "ok"}, "c1")])
    assert terminated and reward == 0.0 and info["score"] == 0.0 and info["success"] is False
    [error] = [e["error"] for e in env.events if e["event"] == "score_error"]
    assert "task family 'tiny'" in error and "score() returned" in error and "finite number in [0, 1]" in error
    assert "\n" not in error
    assert obs["state"][-1]["output"] == "Answer submitted."


@pytest.mark.parametrize("score", [0, 1, 0.5, True, False, Fraction(1, 4)])
def test_a_score_in_0_1_is_the_reward(score):
    env = CompactionEnv(TinyFamily(score=score))
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step([call("submit", {"answer": "ok"}, "c1")])
    assert terminated and reward == info["score"] == float(score) and type(reward) is float
    assert info["success"] is (score == 1)
    assert not any(e["event"] == "score_error" for e in env.events)


# -- a reset that raises half-way leaves no episode to play ---------------------------------------------------


@pytest.mark.parametrize("where", ["make", "tools", "initial_state", "invalid_state"])
def test_after_a_failed_reset_step_raises_reset_needed_and_the_old_episode_is_untouched(where):
    """The env kept the new task and seed with the old State, ledger and turn count, and step played on."""
    env = CompactionEnv(TinyFamily(fail=(where, 1)))
    env.reset(seed=0)
    env.step([call("echo", {"text": "hello"}, "c1")])
    old_task, before = env.task, snapshot(env)
    with pytest.raises(Exception, match="bug|content"):
        env.reset(seed=1)
    assert env.task is old_task and env.task_seed == 0 and snapshot(env) == before
    with pytest.raises(ResetNeeded, match="reset"):
        env.step([call("submit", {"answer": "ok"}, "c2")])
    assert snapshot(env) == before
    env.reset(seed=2)  # a reset that succeeds starts a clean episode
    assert env.task_seed == 2 and env.turn == 0 and len(env.ledger.rows) == 0
    _, reward, terminated, _, _ = env.step([call("submit", {"answer": "ok"}, "c1")])
    assert terminated and reward == 1.0


def test_a_first_reset_that_fails_also_needs_a_reset():
    env = CompactionEnv(TinyFamily(fail=("make", 0)))
    with pytest.raises(RuntimeError, match="make bug"):
        env.reset(seed=0)
    with pytest.raises(ResetNeeded):
        env.step([call("submit", {"answer": "ok"}, "c1")])


# -- text a plug-in hands the State is checked where it enters --------------------------------------------------


def _evolve_still_works(env: CompactionEnv) -> None:
    """After the refused step, a valid evolve is applied (a bad text in the State made every one raise)."""
    obs, *_ = env.step([call("evolve", {"code": "return state;"}, "e1")])
    assert json.loads(obs["state"][-1]["output"])["applied"] is True


@pytest.mark.parametrize(
    ("output", "words"),
    [
        ("bad \ud800 text", "lone surrogate U+D800"),
        ({"a": 1}, "must return a string, got dict"),
        (None, "got NoneType"),
    ],
)
def test_a_tool_output_that_is_not_valid_text_fails_the_step_and_is_undone(output, words):
    env = CompactionEnv(TinyFamily(tool_output=output))
    env.reset(seed=0)
    before = snapshot(env)
    with pytest.raises(PluginError) as caught:
        env.step([call("echo", {"text": "hi"}, "c1")])
    message = str(caught.value)
    assert "task family 'tiny'" in message and "call_tool('echo')" in message and words in message
    assert "\n" not in message and snapshot(env) == before
    _evolve_still_works(env)


@pytest.mark.parametrize(
    ("reply", "words"),
    [(5, "must return a string or None, got int"), (["hi"], "got list"), ("a \udfff", "lone surrogate U+DFFF")],
)
def test_a_user_reply_that_is_not_a_string_fails_the_step_and_is_undone(reply, words):
    env = CompactionEnv(TinyFamily(reply=reply))
    env.reset(seed=0)
    before = snapshot(env)
    with pytest.raises(PluginError) as caught:
        env.step([{"role": "assistant", "content": "Hello?"}])
    message = str(caught.value)
    assert "task family 'tiny'" in message and "user_reply()" in message and words in message
    assert "\n" not in message and snapshot(env) == before
    _evolve_still_works(env)


def test_a_string_user_reply_is_the_next_user_message():
    env = CompactionEnv(TinyFamily(reply="Fine, thanks."))
    env.reset(seed=0)
    obs, *_ = env.step([{"role": "assistant", "content": "Hello?"}])
    assert obs["state"][-1] == {"type": "message", "role": "user", "content": "Fine, thanks."}


# -- evolve code does not read the host's time zone -----------------------------------------------------------

TZ_CODE = (
    "return [new Date(0).getHours(), String(new Date(0)), new Date(0).getTimezoneOffset(), Date(), "
    "new Date(2020, 0, 1).getTime(), new Date(0).toLocaleString()];"
)


def _in_time_zone(monkeypatch, tz: str) -> list:
    """TZ_CODE's result from a worker started while this process runs in `tz`."""
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    sandbox._worker.close()  # the next run starts a worker with this environment
    result = run_evolve([], TZ_CODE)
    assert result.error is None, result.error
    return result.state


def test_evolve_results_do_not_depend_on_the_hosts_time_zone(monkeypatch):
    """`Date()`, `getHours()` and dates from local fields followed the host's TZ, against the determinism promise."""
    try:
        utc = _in_time_zone(monkeypatch, "UTC")
        assert utc[:3] == [0, "Thu Jan 01 1970 00:00:00 GMT+0000", 0] and utc[4] == 1577836800000
        for tz in ("Asia/Kolkata", "IST-5:30", "America/St_Johns"):
            assert _in_time_zone(monkeypatch, tz) == utc, tz
    finally:
        monkeypatch.undo()
        time.tzset()
        sandbox._worker.close()
