"""`rl-compaction eval` outputs, resume, W&B offline logging, and rollout records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_compaction.accounting import COST_PARTS
from rl_compaction.evaluate import EvalConfig, run_eval, split_spec
from rl_compaction.oracle import OracleScriptedPolicy, make_env
from rl_compaction.rollout import EpisodeRecord, read_jsonl, rollout, write_jsonl
from rl_compaction.tasks import Difficulty

SMALL = dict(env="probe", scale=0.25, level=1, context_window=9000, compaction_threshold=6000)


def test_eval_writes_table_jsonl_metrics_plot_and_resumes(tmp_path: Path):
    out = tmp_path / "eval"
    config = EvalConfig(policies=["oracle@evolve", "oracle@none"], episodes=2, output_dir=str(out), **SMALL)
    result = run_eval(config)
    lines = (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["policies"]
    assert metrics["oracle@evolve"]["success_rate"] == 1.0
    assert metrics["oracle@none"]["success_rate"] == 0.0 and metrics["oracle@none"]["truncated"] == 2
    lo, hi = metrics["oracle@evolve"]["success_ci95"]
    assert 0 < lo < 1 and hi == 1.0
    assert (out / "success_vs_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "oracle@evolve" in result["table"] and "100% [" in result["table"]

    with pytest.raises(FileExistsError):
        run_eval(config)
    more = EvalConfig(policies=["oracle@evolve", "oracle@none"], episodes=3, output_dir=str(out), **SMALL)
    run_eval(more, resume=True)
    records = list(read_jsonl(out / "episodes.jsonl"))
    assert len(records) == 6  # only the new seed ran for each policy
    assert sorted(r.task_seed for r in records if r.policy == "oracle@evolve") == [0, 1, 2]


def test_resume_skips_a_truncated_last_line(tmp_path: Path):
    env = make_env("probe", split="test", difficulty=Difficulty(scale=0.06, level=1))
    records = rollout(OracleScriptedPolicy("none"), [env], [0])
    path = tmp_path / "e.jsonl"
    write_jsonl(path, records)
    with path.open("a", encoding="utf-8") as f:
        f.write('{"policy": "cut off mid-wri')
    assert [r.key for r in read_jsonl(path)] == [records[0].key]


def test_wandb_offline_run_is_written(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "eval"
    run_eval(EvalConfig(policies=["oracle@evolve"], episodes=1, output_dir=str(out), **SMALL), use_wandb=True)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_record_round_trip_keeps_exact_prompt_ids():
    record = EpisodeRecord("p", "probe", "test", 1, 0, {})
    from rl_compaction.rollout import Invocation

    prompts = [[1, 2, 3], [1, 2, 3, 9, 4, 5], [1, 7]]
    for i, p in enumerate(prompts):
        record.invocations.append(Invocation(i + 1, p, [9], [-0.5], "x", [], None, 0.1))
    data = json.loads(json.dumps(record.to_json()))
    assert [inv["prompt_shared"] for inv in data["invocations"]] == [0, 4, 1]
    assert [inv.prompt_ids for inv in EpisodeRecord.from_json(data).invocations] == prompts


def test_bad_specs_are_rejected(tmp_path: Path):
    assert split_spec("oracle@none", "evolve") == ("oracle", "none")
    assert split_spec("tiny", "evolve") == ("tiny", "evolve")
    with pytest.raises(ValueError, match="oracle takes strategies"):
        run_eval(EvalConfig(policies=["oracle@summary"], episodes=1, output_dir=str(tmp_path / "a"), **SMALL))
    with pytest.raises(ValueError, match="model policies take strategies"):
        run_eval(EvalConfig(policies=["tiny@magic"], episodes=1, output_dir=str(tmp_path / "b"), **SMALL))


@pytest.mark.parametrize(
    ("preset", "weighted"),
    [
        ("anthropic", ["uncached_input", "cached_input", "output", "cache_write"]),
        ("local", ["uncached_input", "output", "attention", "kv_read"]),
    ],
)
def test_cost_parts_add_up_to_the_cost_and_the_table_shows_each(tmp_path: Path, preset: str, weighted: list[str]):
    """The printed parts sum to the printed cost; a preset's weighted parts are all there."""
    config = EvalConfig(policies=["oracle@evolve"], episodes=1, output_dir=str(tmp_path), cache_preset=preset, **SMALL)
    result = run_eval(config)
    row = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))["policies"]["oracle@evolve"]
    parts = row["cost_parts"]
    assert all(parts[k] > 0 for k in weighted)
    assert all(parts[k] == 0 for k in set(parts) - set(weighted))
    assert sum(parts.values()) == pytest.approx(row["mean_cost"])
    header, _, values = result["table"].splitlines()[:3]
    assert header.split()[5:12] == ["cost", "uncached", "cached", "output", "write", "attention", "kv"]
    printed = values.split()[5:12]  # after the policy, "100% [x%, y%]" and the score
    expected = [row["mean_cost"], *(parts[k] for k in COST_PARTS)]
    assert printed == [f"{v:,.0f}" for v in expected]
    assert "cost = uncached + cached + output + write + attention + kv read" in result["table"]
