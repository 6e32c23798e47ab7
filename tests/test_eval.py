"""`rl-compaction eval` outputs, resume, W&B offline logging, and rollout records."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from summaries import summary_info  # tests/ is on sys.path under pytest

from rl_compaction.accounting import COST_PARTS
from rl_compaction.core.stats import wilson_interval
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.evaluation.evaluate import EvalConfig, run_eval, split_spec
from rl_compaction.evaluation.report import plot_success_vs_cost, policy_metrics
from rl_compaction.harness.oracle import OracleScriptedPolicy, make_env
from rl_compaction.harness.rollout import EpisodeRecord, read_jsonl, rollout, write_jsonl
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.tasks import Difficulty

EPISODE = EpisodeSpec(family="probe", scale=0.25, level=1, context_window=9000, compaction_threshold=6000)
SMALL = dict(episode=EPISODE)


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


@pytest.mark.slow
def test_wandb_offline_run_is_written(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "eval"
    run_eval(EvalConfig(policies=["oracle@evolve"], episodes=1, output_dir=str(out), **SMALL), use_wandb=True)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_record_round_trip_keeps_exact_prompt_ids():
    record = EpisodeRecord("p", "probe", "test", 1, 0, {})
    from rl_compaction.harness.rollout import Invocation

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
    episode = replace(EPISODE, cache_preset=preset)
    config = EvalConfig(policies=["oracle@evolve"], episodes=1, output_dir=str(tmp_path), episode=episode)
    result = run_eval(config)
    row = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))["policies"]["oracle@evolve"]
    parts = row["cost_parts"]
    assert all(parts[k] > 0 for k in weighted)
    assert all(parts[k] == 0 for k in set(parts) - set(weighted))
    assert sum(parts.values()) == pytest.approx(row["mean_cost"])
    lines = result["table"].splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("policy") and "= uncached" in line)
    header, values = lines[at], lines[at + 2]  # the cost parts table, below the outcome table
    assert header.split()[1:] == ["cost", "=", "uncached", "+", "cached", "+", "output", "+", "write", "+"] + [
        "attention",
        "+",
        "kv",
        "read",
    ]
    expected = [row["mean_cost"], *(parts[k] for k in COST_PARTS)]
    assert values.split()[1:] == [f"{v:,.0f}" for v in expected]


# -- hardening (issue 9) ----------------------------------------------------------------------


def test_resume_after_a_kill_mid_write_repairs_the_file_and_is_idempotent(tmp_path: Path):
    """A run killed while writing a record leaves half a line; resume must not glue the next record to it."""
    out = tmp_path / "eval"
    path = out / "episodes.jsonl"
    config = EvalConfig(policies=["oracle@none"], episodes=1, output_dir=str(out), **SMALL)
    run_eval(config)
    complete = path.read_bytes()
    line = complete.splitlines()[0]
    with path.open("ab") as f:
        f.write(line[: len(line) // 2])  # the kill: half of the next record
    more = EvalConfig(policies=["oracle@none"], episodes=2, output_dir=str(out), **SMALL)
    run_eval(more, resume=True)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and lines[0] == line
    assert [r.task_seed for r in read_jsonl(path)] == [0, 1]
    after = path.read_bytes()
    run_eval(more, resume=True)  # nothing left to run: the file stays as it is
    assert path.read_bytes() == after
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["policies"]["oracle@none"]["episodes"] == 2


def test_resume_refuses_a_file_written_with_other_settings(tmp_path: Path):
    out = tmp_path / "eval"
    run_eval(EvalConfig(policies=["oracle@none"], episodes=1, output_dir=str(out), **SMALL))
    before = (out / "episodes.jsonl").read_bytes()
    for change in ({"scale": 0.5}, {"context_window": 12_000}, {"max_turns": 7}, {"tokenizer": "cl100k_base"}):
        other = EvalConfig(
            policies=["oracle@none"], episodes=2, output_dir=str(out), episode=replace(EPISODE, **change)
        )
        with pytest.raises(ValueError, match=f"other settings: {next(iter(change))}="):
            run_eval(other, resume=True)
        assert (out / "episodes.jsonl").read_bytes() == before


def test_resume_reports_a_corrupt_line_clearly(tmp_path: Path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "episodes.jsonl").write_text('{"policy": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 is not an episode record"):
        run_eval(EvalConfig(policies=["oracle@none"], episodes=1, output_dir=str(out), **SMALL), resume=True)


@pytest.mark.parametrize("n", range(1, 40))
def test_wilson_interval_contains_the_rate(n: int):
    for wins in range(n + 1):
        lo, hi = wilson_interval(wins, n)
        assert 0.0 <= lo <= wins / n <= hi <= 1.0


def test_edit_shares_and_cost_intervals():
    """The cheap-edit shares count the model's applied edits of each kind over all episodes; a row with no
    edit has no share (not 0%), and files written before a kind was counted give none either."""
    from rl_compaction.core.stats import asked_share, mean_interval, selection_share, targeted_share

    def summary(**counts: int) -> EpisodeSummary:
        return EpisodeSummary.from_info(summary_info(**counts))

    infos = [
        summary(model_edits=3, selection_edits=3, asked_edits=2, targeted_edits=1),
        summary(model_edits=1, selection_edits=0, asked_edits=1, targeted_edits=1),
        summary(model_edits=0, selection_edits=0, asked_edits=0, targeted_edits=0),
    ]
    assert (selection_share(infos), asked_share(infos), targeted_share(infos)) == (0.75, 0.75, 0.5)
    assert targeted_share(infos[2:]) is None and targeted_share([summary(model_edits=2, selection_edits=2)]) is None
    lo, hi = mean_interval([10.0, 12.0, 14.0, 16.0])
    assert lo < 13.0 < hi and abs((hi - 13.0) - 1.96 * 2.582 / 2) < 1e-3
    assert mean_interval([7.0]) == (7.0, 7.0)


def test_plot_and_metrics_at_100_and_0_percent(tmp_path: Path):
    """At 11/11 the upper bound came out 0.9999999999999999 < 1.0: a negative error bar, no plot."""
    records = []
    for success in (True, False):
        record = EpisodeRecord(f"p{success}", "probe", "test", 0, 0, {})
        ledger = {"cost": 1.0, "cost_parts": dict.fromkeys(COST_PARTS, 0.0), "cached_share": 0.0}
        ledger.update(peak_context_tokens=1, compactions=0, evolve_failures=0)
        record.info = summary_info(success=success, score=float(success), ledger=ledger, ledger_rows=[])
        record.info.update(truncated_reason=None, turns=1)
        records.append([record] * 11)
    rows = [policy_metrics(r[0].policy, r) for r in records]
    assert rows[0]["success_ci95"][1] == 1.0 and rows[1]["success_ci95"][0] == 0.0
    png = plot_success_vs_cost(rows, tmp_path / "plot.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_lone_surrogate_in_raw_model_output_is_written_and_read_back_exactly(tmp_path: Path):
    from rl_compaction.harness.rollout import Invocation

    record = EpisodeRecord("p", "probe", "test", 1, 0, {})
    record.invocations.append(Invocation(1, [1], [2], None, "half an emoji \ud83d, a \\ and \udc00", [], None, 0.1))
    path = tmp_path / "e.jsonl"
    write_jsonl(path, [record])
    assert [r.invocations[0].text for r in read_jsonl(path)] == ["half an emoji \ud83d, a \\ and \udc00"]


def test_eval_closes_every_env_it_made(tmp_path: Path, monkeypatch):
    """A family may hold a process per env (scienceworld's simulator): eval must end each one."""
    from rl_compaction.harness.env import CompactionEnv

    closed: list[int] = []
    monkeypatch.setattr(CompactionEnv, "close", lambda self: closed.append(id(self)))
    run_eval(EvalConfig(policies=["oracle@none"], episodes=3, batch_size=2, output_dir=str(tmp_path), **SMALL))
    assert len(set(closed)) == 3


def test_eval_settings_are_parsed_the_trl_way(tmp_path: Path):
    """`rl-compaction eval` reads EvalConfig with TRL's TrlParser (issue 22, item 3): the old flags still
    work (repeated --policy, dashed names, --request-timeout), a YAML file gives the same settings, flags
    after it override the file, and a key or value that is wrong is refused before any episode runs."""
    from rl_compaction.cli import UsageError, parse_eval_args

    flags = ["--policy", "oracle", "--policy", "tiny@none", "--env", "vault", "--seed-start", "3"]
    config, run = parse_eval_args([*flags, "--request-timeout", "5", "--resume"])
    assert (config.policies, config.episode.family, config.seed_start, config.request_timeout_s) == (
        ["oracle", "tiny@none"],
        "vault",
        3,
        5.0,
    )
    assert run.resume and not run.wandb
    path = tmp_path / "eval.yaml"
    path.write_text("policies: [oracle, tiny@none]\nfamily: vault\nseed_start: 3\nextra: {run: a}\n")
    from_file, _ = parse_eval_args(["--config", str(path), "--episodes", "7"])
    assert from_file.policies == config.policies and from_file.seed_start == 3 and from_file.episodes == 7
    assert from_file.extra == {"run": "a"} and parse_eval_args([*flags, "--extra", '{"run": "b"}'])[0].extra == {
        "run": "b"
    }
    path.write_text("policies: [oracle]\nepisodez: 3\n")
    with pytest.raises(UsageError, match="Unknown arguments from config file.*--episodez"):
        parse_eval_args(["--config", str(path)])
    path.write_text("policies: [oracle]\nepisode: {scale: 0.1}\n")
    with pytest.raises(UsageError, match="episode's fields as flags or keys of their own"):
        parse_eval_args(["--config", str(path)])
    assert parse_eval_args([*flags, "--scale", "0.1", "--context-window", "5000"])[0].episode == EpisodeSpec(
        family="vault", scale=0.1, context_window=5000
    )
    for bad, message in [
        (["--episodes", "0"], "episodes must be an integer >= 1"),
        (["--request-timeout", "inf"], "request_timeout_s must be a finite number"),
        (["--request-timeout", "0"], "request_timeout_s must be a positive number"),
        (["--extra", "[1]"], "extra must be a mapping"),
        (["--level", "7"], "difficulty level must be 1, 2 or 3"),
        (["--env", "nope"], "unknown task families \\['nope'\\]"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_eval_args([*flags, *bad])
    with pytest.raises(UsageError, match="cannot read the --config file"):
        parse_eval_args(["--config", str(tmp_path / "missing.yaml")])


def test_every_config_field_says_what_it_is_for():
    """`--help` lists every field of the configs TrlParser reads, each with its own text."""
    from dataclasses import fields

    from rl_compaction.cli import EvalRunArguments
    from rl_compaction.recipes.recipe import ReproduceConfig, ReproduceRunArguments

    for config in (EvalConfig, EpisodeSpec, EvalRunArguments, ReproduceConfig, ReproduceRunArguments):
        missing = [f.name for f in fields(config) if len(f.metadata.get("help", "")) < 10]
        assert missing == [], config.__name__


def test_a_folder_written_before_env_became_family_still_resumes(tmp_path: Path):
    """EvalConfig's `env` is now `family` (TRL's parser keeps a top-level YAML `env` for environment
    variables); episodes recorded under the old name still count as run with the same settings."""
    out = tmp_path / "eval"
    run_eval(EvalConfig(policies=["oracle@none"], episodes=1, output_dir=str(out), **SMALL))
    path = out / "episodes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        record["settings"] = {"env" if k == "family" else k: v for k, v in record["settings"].items()}
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    more = run_eval(EvalConfig(policies=["oracle@none"], episodes=2, output_dir=str(out), **SMALL), resume=True)
    assert more["metrics"]["policies"]["oracle@none"]["episodes"] == 2
    assert len(path.read_text().splitlines()) == 2  # the old episode kept, one new one run


@pytest.mark.slow
def test_a_model_row_samples_the_same_episodes_whatever_rows_ran_before_it(tmp_path: Path):
    """Each batch's sampling is seeded (sampling_seed + its first task seed), so a row does not depend
    on the rows run before it, and a checkpoint compared with its warm start is compared fairly."""
    from rl_compaction.models.registry import shipped_dir

    model = f"{shipped_dir('quickstart-sft')}@evolve"
    settings = dict(episodes=2, batch_size=1, max_new_tokens=12, temperature=1.0, episode=replace(EPISODE, max_turns=2))

    def sampled(policies: list[str], out: str, **seed: int) -> list[list[int]]:
        run_eval(EvalConfig(policies=policies, output_dir=str(tmp_path / out), **settings, **seed))
        records = read_jsonl(tmp_path / out / "episodes.jsonl")
        return [inv.completion_ids for r in records if r.policy == model for inv in r.invocations]

    alone = sampled([model], "alone")
    assert alone == sampled([model.replace("@evolve", "@none"), model], "second")
    assert alone != sampled([model], "other_seed", sampling_seed=1)
    with pytest.raises(ValueError, match=r"sampling_seed must be a seed \(an integer >= 0\)"):
        EvalConfig(policies=[model], sampling_seed=-1)
