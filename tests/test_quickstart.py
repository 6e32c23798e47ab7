"""The README's main job runs end to end (shortened further: one SFT and one GRPO step, one episode)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import yaml

from rl_compaction.core.stats import EpisodeStats
from rl_compaction.recipes.quickstart import QUICKSTART_CONFIG, run_quickstart
from rl_compaction.recipes.recipe import RECIPES, ReproduceConfig, check_configs, compose_recipe, parse_reproduce_args
from rl_compaction.recipes.report import CURVE_PANELS, EDIT_PANELS, check_lines, learning_curve, verdict


@pytest.mark.learning
def test_quickstart_runs_all_stages(tmp_path, monkeypatch):
    import wandb

    wandb.teardown()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "qs"
    short = {
        # six pages; one step of two short episodes: a near-random model's GRPO step stays cheap
        "episode": {"scale": 0.05, "max_turns": 6},
        "demo_episodes": 4,  # one cycle of the demo weights
        "sft_answers": {"max_steps": 1},
        "sft": {"max_steps": 1},
        "grpo": {"max_steps": 1, "num_generations": 2, "gradient_accumulation_steps": 2},
        "eval_episodes": 1,
        "eval_episode": {"max_turns": 20},  # the unlimited oracle's episode fits
    }
    report = run_quickstart(out, **short)
    assert (out / "demos" / "demos_summary.json").exists()
    assert (out / "sft" / "config.json").exists() and (out / "grpo" / "model.safetensors").exists()
    metrics = json.loads((out / "eval" / "metrics.json").read_text())["policies"]
    assert f"{out / 'grpo'}@evolve" in metrics and f"{out / 'sft'}@evolve" in metrics
    unlimited = json.loads((out / "eval_unlimited" / "metrics.json").read_text())["policies"]["oracle@none"]
    window = ReproduceConfig.from_yaml(QUICKSTART_CONFIG).spec.context_window
    assert unlimited["success_rate"] == 1.0 and unlimited["peak_context"] > window  # the task needs compaction
    table = report["table"]
    for row in ("learned (GRPO)", "SFT-only", "oracle@sliding_window", "oracle@none (window 1,000,000)"):
        assert row in table
    # the quickstart's checks: each checkpoint again without requests, and at its own unlimited window
    for check in ("no requests", "own unlimited window, no requests"):
        assert f"learned (GRPO), {check}" in table and f"SFT-only, {check}" in table
        assert any(line.startswith(f"{check}: learned") for line in report["verdict"])
    own = json.loads((out / "eval_check_own_unlimited_window_no_requests" / "metrics.json").read_text())
    own = own["config"]["episode"]
    assert own["context_window"] == 1_000_000 and own["compaction_request"] == ""
    assert report["verdict"][0].startswith("learned (GRPO checkpoint)")
    assert any("vs SFT-only" in line for line in report["verdict"])
    assert (out / "success_vs_cost.png").exists() and (out / "learning_curve.png").exists()
    assert report["checks_plot"] == str(out / "checks.png") and (out / "checks.png").stat().st_size > 0
    # the curve is drawn from what GRPO logged: every panel has the step's point (the cheap-edit shares
    # have one exactly when the step's episodes applied an edit)
    history = json.loads((out / "grpo" / "log_history.json").read_text())
    edited = [h["step"] for h in history if h.get("model_edits_per_episode")]
    expected = {k: edited if k in EDIT_PANELS else [1] for k, _ in CURVE_PANELS}
    assert {key: series[0] for key, series in learning_curve(history).items()} == expected
    with pytest.raises(ValueError, match="none of reward/reward"):
        learning_curve([{"step": 1, "loss": 0.1}])
    assert list((out / "eval" / "wandb").glob("offline-run-*"))
    with pytest.raises(FileExistsError, match="pass --resume"):
        run_quickstart(out)
    # a run that died in GRPO resumes there, with the same config: demos and SFT are not redone
    progress = json.loads((out / "progress.json").read_text())
    assert list(progress) == ["demos", "sft", "grpo", "eval"]
    (out / "progress.json").write_text(json.dumps({k: progress[k] for k in ("demos", "sft")}))
    shutil.rmtree(out / "grpo")
    monkeypatch.setattr("rl_compaction.recipes.reproduce.write_demos", lambda *a, **k: pytest.fail("demos redone"))
    monkeypatch.setattr("rl_compaction.recipes.reproduce.train_sft", lambda *a, **k: pytest.fail("SFT redone"))
    again = run_quickstart(out, resume=True, **short)
    assert (out / "grpo" / "model.safetensors").exists() and again["timings"]["sft"] == progress["sft"]
    assert list(json.loads((out / "progress.json").read_text())) == ["demos", "sft", "grpo", "eval"]
    with pytest.raises(ValueError, match="was run with another config .*eval_episodes"):
        run_quickstart(out, resume=True, **{**short, "eval_episodes": 2})


def test_reproduce_config_rejects_unknown_fields(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("episode: {family: vault}\nwindow: 4500\n")
    with pytest.raises(ValueError, match="unknown field\\(s\\) window; valid: .*episode"):
        ReproduceConfig.from_yaml(path)
    with pytest.raises(FileNotFoundError, match="reproduce config not found"):
        ReproduceConfig.from_yaml(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="is a folder; --config takes a YAML file"):  # was an IsADirectoryError
        ReproduceConfig.from_yaml(tmp_path)
    (tmp_path / "broken.yaml").write_text("model: [tiny\n")
    with pytest.raises(ValueError, match="broken.yaml is not valid YAML"):  # was a yaml ParserError
        ReproduceConfig.from_yaml(tmp_path / "broken.yaml")
    path.write_text("episode: {family: vault}\nsft: {max_steps: 5, learning_rate: 0.01}\n")
    config = ReproduceConfig.from_yaml(path, sft={"max_steps": 3})
    assert config.sft == {"max_steps": 3, "learning_rate": 0.01}  # overrides update the file's settings
    with pytest.raises(ValueError, match="unknown override\\(s\\) window"):
        ReproduceConfig.from_yaml(path, window=3)


def test_reproduce_reads_recipes_the_trl_way(tmp_path):
    """TRL's TrlParser reads every shipped recipe exactly as its YAML says (it replaced a hand-written
    reader, issue 22 item 3), and any field given as a flag after --config overrides the file's value."""
    for path in sorted(RECIPES.glob("*.yaml")):
        data = compose_recipe(path)
        config, resume = parse_reproduce_args(["--config", str(path)])
        assert {key: getattr(config, key) for key in data} == data and not resume, path.name
    flags = ["--output-dir", str(tmp_path / "o"), "--eval_episodes", "8", "--grpo", '{"max_steps": 2}', "--resume"]
    config, resume = parse_reproduce_args(["--config", str(QUICKSTART_CONFIG), *flags])
    assert (config.output_dir, config.eval_episodes, config.grpo, resume) == (
        str(tmp_path / "o"),
        8,
        {"max_steps": 2},  # a JSON object replaces the file's mapping, as TRL's dict flags do
        True,
    )
    assert config.sft == ReproduceConfig.from_yaml(QUICKSTART_CONFIG).sft  # what no flag names stays the file's
    assert parse_reproduce_args([])[0] == ReproduceConfig.from_yaml(RECIPES / "vault-tiny-cpu.yaml")  # the default
    with pytest.raises(ValueError, match="grpo must be a JSON object on the command line"):
        parse_reproduce_args(["--grpo", "{max_steps: 2"])
    with pytest.raises(ValueError, match="sft must be a mapping"):
        parse_reproduce_args(["--sft", "[1]"])
    with pytest.raises(ValueError, match="--config needs a YAML file"):
        parse_reproduce_args(["--config"])


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"eval_episodes": 0}, "eval_episodes must be an integer >= 1"),
        ({"eval_batch_size": 0}, "eval_batch_size must be an integer >= 1"),
        ({"baselines": ["oracle@nope"]}, "baseline 'oracle@nope'"),
        ({"grpo": {"learning_rat": 1e-4}}, "unknown key\\(s\\) under grpo: learning_rat"),
        ({"sft_answers": {"max_step": 3}}, "unknown key\\(s\\) under sft_answers: max_step"),
        ({"episode": {"scale": float("inf")}}, "episode: difficulty scale must be in \\(0, 1000\\], got inf"),
        ({"episode": {"famiy": "vault"}}, "episode: .*unexpected keyword argument 'famiy'"),
        ({"eval_episode": {"level": 7}}, "eval_episode: difficulty level must be 1, 2 or 3"),
        ({"episode": {"family": ["vault", "probe"]}}, "eval_episode: the eval compares policies at one setting"),
        ({"eval_checks": {"no requests": {"compaction_requst": ""}}}, "eval_checks: no requests: .*compaction_requst"),
        ({"eval_check_episodes": 0}, "eval_check_episodes must be an integer >= 1"),
        (
            {"eval_checks": {"windows": {"context_window": [3000, 4000]}}},
            "eval_checks: windows: an eval plays one family at fixed settings",
        ),
        ({"keep_failed": ["ignore"]}, "keep_failed"),
    ],
)
def test_reproduce_refuses_a_bad_setting_before_any_stage(tmp_path, capsys, bad, message):
    """Issue 22, red team item 5: `eval_episodes: 0` used to run demos, SFT, GRPO and eval (~30 min), then die
    in the verdict; every setting is now checked when the config is made, and nothing is written."""
    with pytest.raises(ValueError, match=message):
        ReproduceConfig(**bad)
    import yaml

    from rl_compaction.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", **bad}))
    assert main(["reproduce", "--config", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_recipe_trains_on_a_distribution_and_evaluates_one_setting_with_its_checks(tmp_path):
    episode = {"family": "vault", "level": 1, "scale": 0.03, "context_window": {"low": 3000, "high": 3600}}
    episode["compaction_request"] = ["[harness] Compact now ({tokens} of {window} tokens).", ""]
    checks = {"no requests": {"compaction_request": ""}, "Window 1,000,000!": {"context_window": 1_000_000}}
    config = ReproduceConfig(
        model="tiny",
        output_dir=str(tmp_path / "out"),
        episode=episode,
        eval_episode={"context_window": 3300, "compaction_request": "Compact ({tokens})."},
        eval_checks=checks,
        demo_strategies=["evolve_own"],
        keep_failed=[],
    )
    assert config.spec.is_distribution and not config.eval_spec.is_distribution
    made = check_configs(config, tmp_path / "out", ["learned@evolve"])
    assert list(made) == list(checks)
    assert made["no requests"].episode.compaction_request == "" and made["no requests"].episode.context_window == 3300
    assert made["Window 1,000,000!"].episode.context_window == 1_000_000
    assert made["Window 1,000,000!"].output_dir == str(tmp_path / "out" / "eval_check_window_1_000_000")
    assert made["no requests"].episode.split == "test" and made["no requests"].policies == ["learned@evolve"]
    assert made["no requests"].episodes == config.eval_episodes  # by default, as many as the main rows
    for episodes, checks, expected in ((32, 8, 8), (4, 8, 4)):  # at most eval_episodes: a short run stays short
        fewer = dataclasses.replace(config, eval_episodes=episodes, eval_check_episodes=checks)
        assert {c.episodes for c in check_configs(fewer, tmp_path / "out", ["learned@evolve"]).values()} == {expected}


def test_each_check_is_one_sentence_learned_against_sft_only_and_its_own_setting():
    lines = check_lines(
        _row(0.8, 1.0, (0.7, 0.88)),
        {
            "no requests": (_row(0.6, 1.0, (0.5, 0.7)), _row(0.1, 1.0, (0.05, 0.2))),
            "far": (_row(0.1, 1.0, (0.05, 0.2)),) * 2,
        },
    )
    assert (
        lines[0].startswith("no requests: learned 60% [50%, 70%] (75% of its success") and "beyond the 95%" in lines[0]
    )
    assert lines[1].endswith("the intervals overlap")


def _row(success: float, cost: float, ci: tuple[float, float]) -> EpisodeStats:
    return EpisodeStats(success_rate=success, mean_cost=cost, success_ci95=list(ci))


def test_the_verdict_compares_cost_only_where_a_row_succeeds():
    rows = {
        "learned": _row(0.0, 1000.0, (0.0, 0.11)),
        "sft": _row(0.0, 5000.0, (0.0, 0.11)),
        "oracle@none": _row(0.05, 2000.0, (0.01, 0.2)),
        "unlimited": _row(1.0, 9000.0, (0.89, 1.0)),
    }
    lines = verdict(rows, "learned", "sft", "unlimited")
    assert "neither succeeds" in lines[1] and "0.20x" not in lines[1]
    assert "costs 0.50x" in lines[2]  # overlapping intervals, a cheaper learned row
    assert "better on success than the learned policy" in lines[3]
    assert "not comparable" in lines[4]  # cost at equal success needs solved episodes in both rows
    assert "not met: success 0% vs 100%" in lines[5]


def test_the_verdict_compares_cost_at_equal_success_over_solved_episodes():
    """Target (b) of issue 19: the learned row's cost over its solved episodes against SFT-only's, with intervals."""
    from rl_compaction.recipes.report import solved_cost_line

    learned = EpisodeStats(mean_cost_solved=20_000.0, cost_solved_ci95=[19_000.0, 21_000.0])
    line = solved_cost_line(learned, EpisodeStats(mean_cost_solved=30_000.0, cost_solved_ci95=[28_000.0, 32_000.0]))
    assert "0.67x (+33% saved), lower beyond the 95% intervals" in line
    line = solved_cost_line(learned, EpisodeStats(mean_cost_solved=22_000.0, cost_solved_ci95=[20_500.0, 23_500.0]))
    assert line.endswith("intervals overlap")


def test_learning_curve_axes_do_not_magnify_noise():
    """A 0.008 change in reward looked steep, and all-zero series got a +-0.04 axis."""
    from rl_compaction.recipes.report import _curve_limits

    lo, hi = _curve_limits("reward/reward", [-0.213, -0.221])
    assert hi - lo >= 0.5 and lo < -0.221 and hi > -0.213
    lo, hi = _curve_limits("compactions_per_episode", [0.0, 0.0])
    assert hi - lo >= 2.0
    assert _curve_limits("success_rate", [0.0, 0.0]) == (-0.05, 1.05)
    lo, hi = _curve_limits("mean_cost", [25_000.0, 26_000.0])
    assert hi - lo >= 5_000  # 20% of the level at least
    lo, hi = _curve_limits("reward/reward", [-1.0, 2.0])  # a real trend keeps its own range
    assert lo <= -1.0 and hi >= 2.0 and hi - lo < 3.5


def test_the_shipped_warm_start_is_the_quickstart_recipes_own():
    """The quickstart starts GRPO from a warm start that ships in the package (~11 minutes of demos and SFT
    saved). It must be current: built with the recipe's demo and SFT settings (scripts/build_quickstart_start.py
    rebuilds it), small, and in the start model's tokenizer."""
    from rl_compaction.models.registry import shipped_dir
    from rl_compaction.recipes.quickstart import SHIPPED_START, quickstart_config
    from rl_compaction.recipes.reproduce import matching_warm_start

    config = ReproduceConfig.from_yaml(QUICKSTART_CONFIG)
    assert matching_warm_start(config, SHIPPED_START) == SHIPPED_START
    assert sum(f.stat().st_size for f in SHIPPED_START.iterdir()) <= 5 * 2**20
    assert config.model == "tiny-recall"  # which ships too, so its tokenizer can be compared
    start = shipped_dir(config.model)
    assert (SHIPPED_START / "tokenizer.json").read_bytes() == (start / "tokenizer.json").read_bytes()
    marker = json.loads((SHIPPED_START / "rl_compaction_model.json").read_text())
    assert marker["build_seconds"]["sft"] > 0  # what the shipped start saves a quickstart
    assert quickstart_config("unused").warm_start == str(SHIPPED_START)
    # an override of a stage 1-2 setting is another warm start: the quickstart then builds its own
    assert quickstart_config("unused", sft={"max_steps": 1}).warm_start is None
    assert quickstart_config("unused", grpo={"max_steps": 1}).warm_start == str(SHIPPED_START)


@pytest.mark.slow
def test_a_built_warm_start_records_the_settings_it_was_built_with(tmp_path):
    from rl_compaction.recipes.reproduce import WARM_START_FILES, build_warm_start, matching_warm_start

    config = ReproduceConfig(
        output_dir=str(tmp_path / "unused"),
        model="tiny",
        episode={"family": "vault", "scale": 0.02, "level": 1, "context_window": 4500},
        demo_episodes=2,
        demo_strategies=["evolve"],
        keep_failed=[],
        sft={"max_steps": 1, "max_length": 4096},
    )
    dest = build_warm_start(config, tmp_path / "start")
    assert sorted(p.name for p in dest.iterdir()) == sorted([*WARM_START_FILES, "rl_compaction_model.json"])
    assert matching_warm_start(config, dest) == dest
    other = dataclasses.replace(config, sft={"max_steps": 2, "max_length": 4096})
    assert matching_warm_start(other, dest) is None
    with pytest.raises(ValueError, match="warm_start .* is not a model folder"):
        ReproduceConfig(output_dir=str(tmp_path / "unused"), warm_start=str(tmp_path / "missing"))
    (dest / "model.safetensors").unlink()  # an incomplete folder is never used
    assert matching_warm_start(config, dest) is None


@pytest.mark.slow
def test_the_quickstart_starts_grpo_from_the_shipped_warm_start(tmp_path, monkeypatch):
    """With only GRPO and eval settings overridden, no demos are written and no SFT runs: GRPO starts from the
    shipped warm start, which is also the SFT-only row."""
    import wandb

    from rl_compaction.recipes.quickstart import SHIPPED_START

    wandb.teardown()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr("rl_compaction.recipes.reproduce.write_demos", lambda *a, **k: pytest.fail("demos written"))
    monkeypatch.setattr("rl_compaction.recipes.reproduce.train_sft", lambda *a, **k: pytest.fail("SFT run"))
    out = tmp_path / "qs"
    short = {
        "grpo": {"max_steps": 1, "num_generations": 2, "gradient_accumulation_steps": 2},
        "eval_episodes": 1,
        "baselines": ["oracle@evolve"],
        "wandb": False,
    }
    report = run_quickstart(out, **short)
    assert not (out / "demos").exists() and not (out / "sft").exists()
    assert (out / "grpo" / "model.safetensors").exists()
    assert set(report["rows"]) >= {f"{out / 'grpo'}@evolve", f"{SHIPPED_START}@evolve"}
    assert list(json.loads((out / "progress.json").read_text())) == ["grpo", "eval"]


@pytest.mark.parametrize("recipe", ["quickstart.yaml", "vault-tiny-cpu.yaml"])
def test_a_recipe_states_its_episode_once_for_every_stage(recipe, tmp_path):
    """GRPO and the eval play the recipe's one `episode` (the eval on test seeds, in the trained model's
    tokens), `eval_episode` changes the eval's alone, and the turn limit leaves the oracle room: the
    quickstart's 9 turns hold the oracle's 7 at its length, the reproduction's 13 its 11."""
    from rl_compaction.harness.oracle import evolve_options, make_env, run_oracle_episode
    from rl_compaction.models.registry import counter_name
    from rl_compaction.recipes.recipe import eval_configs

    config = ReproduceConfig.from_yaml(RECIPES / recipe, output_dir=str(tmp_path / "out"))
    spec = config.spec
    windowed, unlimited = eval_configs(config, tmp_path, ["oracle@evolve"])
    assert windowed.episode == dataclasses.replace(spec, split="test", tokenizer=str(tmp_path / "grpo"))
    assert unlimited.episode == dataclasses.replace(
        windowed.episode, context_window=config.unlimited_window, compaction_threshold=None
    )
    longer = dataclasses.replace(config, eval_episode={"scale": 0.05})
    assert eval_configs(longer, tmp_path, ["oracle@evolve"])[0].episode.scale == 0.05 and longer.spec == spec
    counted = dataclasses.replace(spec, tokenizer=counter_name(config.model))
    env = make_env(
        spec.family, split="train", strategy="evolve", config=counted.env_config(), difficulty=spec.difficulty
    )
    turns = max(run_oracle_episode(env, seed, **evolve_options("evolve"))["turns"] for seed in range(8))
    assert turns + 2 == spec.max_turns  # the oracle's turns, and two to spare


def test_a_history_logged_under_the_old_names_still_draws():
    """GRPO logs `EpisodeStats`' names since they replaced its own (`success`, `cost/total`, `compactions`); a
    run resumed at its eval stage from a history logged before still gets its learning curve."""
    old = [{"step": 1, "reward/reward": 0.1, "success": 0.5, "cost/total": 900.0, "compactions": 2.0}]
    series = learning_curve(old)
    assert series["success_rate"] == ([1], [0.5]) and series["mean_cost"] == ([1], [900.0])
    assert series["compactions_per_episode"] == ([1], [2.0])


def test_the_quickstart_is_the_reproduction_recipe_with_a_few_changes(tmp_path):
    """quickstart.yaml was a copy of vault-tiny-cpu.yaml differing in five values; it now names it as its
    `base` and gives only what differs (a mapping key by key); a base that is missing or loops is refused."""
    quick, full = (ReproduceConfig.from_yaml(RECIPES / name) for name in ("quickstart.yaml", "vault-tiny-cpu.yaml"))
    differ = {f.name for f in dataclasses.fields(ReproduceConfig) if getattr(quick, f.name) != getattr(full, f.name)}
    assert differ == {"output_dir", "episode", "wandb", "eval_checks", "eval_check_episodes"}
    assert {k for k in quick.episode if quick.episode[k] != full.episode[k]} == {"scale", "max_turns"}
    assert "base" in yaml.safe_load(QUICKSTART_CONFIG.read_text()) and len(QUICKSTART_CONFIG.read_text()) < 1500
    (tmp_path / "a.yaml").write_text("base: b.yaml\nmodel: tiny\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match="itself or one of its own bases"):
        ReproduceConfig.from_yaml(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(FileNotFoundError, match="its base recipe .*nowhere.yaml does not exist"):
        ReproduceConfig.from_yaml(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text(f"base: {RECIPES / 'quickstart.yaml'}\nepisode: {{scale: 0.05}}\n")
    assert ReproduceConfig.from_yaml(tmp_path / "d.yaml").episode == {**quick.episode, "scale": 0.05}
    # the checks are replaced whole, not merged: a recipe runs the checks it states and no others
    (tmp_path / "e.yaml").write_text(f"base: {RECIPES / 'quickstart.yaml'}\neval_checks: {{mine: {{scale: 0.05}}}}\n")
    assert len(quick.eval_checks) == 2 and ReproduceConfig.from_yaml(tmp_path / "e.yaml").eval_checks == {
        "mine": {"scale": 0.05}
    }
