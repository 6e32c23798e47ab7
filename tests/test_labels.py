"""`CompactionEnv.step` does no analysis: judging an edit against the task oracle's own (the `targeted`
label) is the opt-in `LabelEdits` wrapper's, a step validates the State once, and a step that raises
half-way is undone from one snapshot."""

from __future__ import annotations

import pytest

from rl_compaction.harness.labels import LabelEdits
from rl_compaction.harness.oracle import run_oracle_episode
from rl_compaction.harness.spec import EpisodeSpec

SPEC = EpisodeSpec(
    family="vault", split="validation", scale=0.06, level=1, context_window=3300, compaction_threshold=2150
)


def _count(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(__import__(module, fromlist=[name]), name)
    monkeypatch.setattr(f"{module}.{name}", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_only_the_wrapper_runs_the_oracle_edit_and_labels_the_edits(monkeypatch):
    labelled = _count(monkeypatch, "rl_compaction.harness.labels", "run_evolve")
    plain = run_oracle_episode(SPEC.make_env(), 0, use_evolve=True)
    edits = [e for e in plain["events"] if e["event"] == "evolve"]
    assert len(edits) >= 3 and not labelled  # the env ran no edit but the model's
    assert all("targeted" not in e for e in edits) and "targeted_edits" not in plain  # unknown, not 0
    wrapped = run_oracle_episode(LabelEdits(SPEC.make_env()), 0, use_evolve=True)
    assert len(labelled) == len(edits) and wrapped["targeted_edits"] == wrapped["model_edits"] == len(edits)
    assert [e["targeted"] for e in wrapped["events"] if e["event"] == "evolve"] == [True] * len(edits)
    assert wrapped["ledger"] == plain["ledger"]  # the label changes nothing the episode did


def test_a_step_with_an_edit_validates_the_state_once(monkeypatch):
    """The env's own State was validated when it became the State: apply_evolve checks the edit's result only
    (a step once validated it three times: the input, the output and the label's rerun)."""
    env = SPEC.make_env()
    validations = _count(monkeypatch, "rl_compaction.protocol.evolve", "validate_state")
    info = run_oracle_episode(LabelEdits(env), 1, use_evolve=True)
    assert len(validations) == info["model_edits"] >= 3


def test_a_step_that_raises_half_way_is_undone_from_its_snapshot(monkeypatch):
    env = SPEC.make_env()
    obs, _ = env.reset(seed=2)
    before = (env.state, env.turn, len(env.history), len(env.events), env.compaction_requests, env._input_ids)
    monkeypatch.setattr(env.task, "call_tool", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("task bug")))
    call = {"type": "function_call", "call_id": "c1", "name": env.tools[0]["name"], "arguments": "{}"}
    with pytest.raises(RuntimeError, match="task bug"):
        env.step([call])
    after = (env.state, env.turn, len(env.history), len(env.events), env.compaction_requests, env._input_ids)
    assert after == before
