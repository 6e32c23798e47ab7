"""The typed episode summary (`rl_compaction.core.summary`): it reads every info the env writes and writes
it back unchanged, it reads records from before the newer fields, and it refuses a record that is not one."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import gymnasium as gym
import pytest
from summaries import summary_info  # tests/ is on sys.path under pytest

from rl_compaction.accounting import COST_PARTS
from rl_compaction.core.stats import EpisodeStats, asked_share, selection_share
from rl_compaction.core.summary import CostParts, EpisodeSummary
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import OracleScriptedPolicy, make_env, run_oracle_episode
from rl_compaction.harness.rollout import read_jsonl, rollout, write_jsonl
from rl_compaction.harness.tasks import Difficulty


def test_a_real_episode_summary_round_trips_to_the_same_json():
    env = gym.make("rl_compaction/probe-v0")
    info = run_oracle_episode(env.unwrapped, 0, use_evolve=True)
    summary = EpisodeSummary.from_info(info)
    # the type knows every key the env writes, at every level
    assert summary.extra == {} and summary.ledger.extra == {} and summary.ledger.cost_parts.extra == {}
    assert json.dumps(summary.to_dict()) == json.dumps(info)  # same keys, same order, same values
    assert summary.success and summary.score == info["score"] and summary.truncated_reason is None
    assert summary.turns == summary.ledger.invocations == len(summary.ledger_rows)
    assert summary.model_edits == summary.ledger.compactions > 0
    parts = summary.ledger.cost_parts.to_dict()
    assert sum(parts.values()) == pytest.approx(summary.ledger.cost)
    assert tuple(f.name for f in fields(CostParts) if f.name != "extra") == COST_PARTS


def test_an_episodes_jsonl_record_reads_back_as_the_same_summary(tmp_path: Path):
    config = EnvConfig(context_window=9000, compaction_threshold=6000)
    env = make_env("probe", strategy="evolve", config=config, difficulty=Difficulty(scale=0.25, level=1))
    (record,) = rollout(OracleScriptedPolicy("evolve"), [env], [0])
    path = tmp_path / "episodes.jsonl"
    write_jsonl(path, [record])
    (back,) = read_jsonl(path)
    assert back.summary == record.summary
    line = path.read_text(encoding="utf-8")
    assert json.dumps({"info": back.summary.to_dict()}, ensure_ascii=False)[1:-1] in line


def test_an_old_record_loads_with_the_newer_fields_unset_and_writes_back_unchanged():
    """Records from before the edit counts and the cost parts (and one with a key this version does not know)."""
    old = summary_info(success=True, score=1.0, ledger={"cost": 5.0}, written_by="a later version")
    del old["ledger"]["cost_parts"]
    summary = EpisodeSummary.from_info(old)
    assert summary.model_edits is None and summary.asked_edits is None and summary.ledger.cost_parts is None
    assert summary.extra == {"written_by": "a later version"}
    assert json.dumps(summary.to_dict()) == json.dumps(old)
    # not counted is not zero: no share, rather than 0%
    assert selection_share([summary]) is None and asked_share([summary]) is None
    row = EpisodeStats.of([summary])
    assert (row.success_rate, row.mean_cost, row.truncated, row.cost_parts) == (1.0, 5.0, 0, None)


@pytest.mark.parametrize(
    ("drop", "named"),
    [(("score",), "'score'"), (("ledger", "cost"), "'ledger.cost'"), (("ledger", "cost_parts", "kv_read"), "kv_read")],
)
def test_a_record_missing_a_required_field_is_refused_by_name(drop: tuple[str, ...], named: str):
    info = summary_info()
    *parents, key = drop
    target = info
    for name in parents:
        target = target[name]
    del target[key]
    with pytest.raises(ValueError, match=f"episode summary is missing .*{named}"):
        EpisodeSummary.from_info(info)


def test_a_record_whose_ledger_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="field ledger: expected a JSON object"):
        EpisodeSummary.from_info({**summary_info(), "ledger": None})
    with pytest.raises(ValueError, match="expected a JSON object"):
        EpisodeSummary.from_info([1, 2])
