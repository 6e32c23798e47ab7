"""The command line, called as a user would: output JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_compaction.cli import _emit, main
from rl_compaction.protocol.example_runner import example_dirs

STATE = [
    {"type": "message", "role": "user", "content": "Find the founding year ’ 😀."},
    {"type": "function_call", "call_id": "s1", "name": "search", "arguments": '{"q": "founding"}'},
    {"type": "function_call_output", "call_id": "s1", "output": "1931 " + "noise " * 100},
]
PENDING = {"type": "function_call", "call_id": "ev9", "name": "evolve", "arguments": '{"code": ""}'}
DROP = "return state.filter(x => x.call_id !== 's1');"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_compaction.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "state": tmp_path / "state.json",
        "pending": tmp_path / "pending.json",
        "drop": tmp_path / "drop.js",
        "bad_js": tmp_path / "bad.js",
        "invalid": tmp_path / "invalid.json",
        "broken": tmp_path / "broken.json",
    }
    paths["state"].write_text(json.dumps(STATE, ensure_ascii=False), encoding="utf-8")
    paths["pending"].write_text(json.dumps(STATE + [PENDING]), encoding="utf-8")
    paths["drop"].write_text(DROP, encoding="utf-8")
    paths["bad_js"].write_text("return [{role: 'user'}];", encoding="utf-8")
    paths["invalid"].write_text(json.dumps([{"type": "function_call_output", "call_id": "x", "output": ""}]))
    paths["broken"].write_text("[{", encoding="utf-8")
    return paths


def test_evolve_applied_prints_state_and_metrics(files, tmp_path):
    out = tmp_path / "out.json"
    r = cli("evolve", str(files["state"]), str(files["drop"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["applied"] is True
    assert result["state"] == [STATE[0]]
    # no evolve call, so no receipt (the README says so): the edit's token counts under their own key
    assert set(result) == {"applied", "state", "tokens"}
    tokens = result["tokens"]
    assert set(tokens) == {"before_tokens", "after_tokens", "reusable_prefix_tokens", "cache_cost"}
    assert tokens["cache_cost"] == tokens["after_tokens"] - tokens["reusable_prefix_tokens"]
    assert json.loads(out.read_text(encoding="utf-8")) == [STATE[0]]
    assert json.loads(files["state"].read_text(encoding="utf-8")) == STATE  # input file untouched


def test_evolve_with_pending_call_adds_receipt(files):
    r = cli("evolve", str(files["pending"]), str(files["drop"]), "--pending-call-id", "ev9")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["state"][-2]["call_id"] == "ev9" and json.loads(result["state"][-2]["arguments"])["code"] == DROP
    receipt = json.loads(result["state"][-1]["output"])
    assert receipt["applied"] is True and result["receipt"] == receipt  # printed as the State holds it


def test_evolve_rejected_exits_1_and_writes_nothing(files, tmp_path):
    out = tmp_path / "never.json"
    r = cli("evolve", str(files["state"]), str(files["bad_js"]), "--out", str(out))
    assert r.returncode == 1
    result = json.loads(r.stdout)
    assert result == {"applied": False, "error": result["error"]} and "content" in result["error"]
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["evolve", "missing.json", "x.js"], "State file not found: missing.json"),
        (["evolve", "{invalid}", "{drop}"], "invalid State in"),
        (["evolve", "{broken}", "{drop}"], "not valid JSON"),
        (["evolve", "{state}", "nope.js"], "code file not found"),
        (["evolve", "{state}", "{drop}", "--tokenizer", "gpt-9"], "unknown token counter"),
        (["evolve", "{state}", "{drop}", "--pending-call-id", "zz"], "must end with the evolve call 'zz'"),
        (["cost", "{state}", "{broken}"], "not valid JSON"),
        (["cost", "{state}", "{state}", "--output-weight", "-1"], "--output-weight must be a finite number >= 0"),
        (["envs", "show", "nope"], "unknown task family 'nope'"),
    ],
)
def test_bad_input_exits_2_with_one_line(files, args, words):
    r = cli(*[a.format(**{k: str(v) for k, v in files.items()}) for a in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_bad_usage_exits_2():
    r = cli("evolve")
    assert r.returncode == 2 and "usage:" in r.stderr


def test_cost_reports_the_accounting(files, tmp_path):
    after = tmp_path / "after.json"
    after.write_text(json.dumps(STATE[:1]), encoding="utf-8")
    r = cli("cost", str(files["state"]), str(after), "--output-weight", "4", "--evolve-call-tokens", "10")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["tokenizer"] == "o200k_base" and m["output_weight"] == 4.0
    assert m["compaction_cost"] == 40 + m["cache_cost"]
    assert m["cache_cost"] == m["after_tokens"] - m["reusable_prefix_tokens"]
    r2 = cli("cost", str(files["state"]), str(after), "--tokenizer", "cl100k_base")
    assert json.loads(r2.stdout)["before_tokens"] != m["before_tokens"]


def test_cost_prices_output_as_the_default_preset_does(files, tmp_path):
    """`cost` priced an output token at 1.0 while the default `local` preset, which eval and training use,
    prices it at 3.2; a preset can be named."""
    from rl_compaction.accounting import get_cache_model

    after = tmp_path / "after.json"
    after.write_text(json.dumps(STATE[:1]), encoding="utf-8")
    m = json.loads(cli("cost", str(files["state"]), str(after), "--evolve-call-tokens", "10").stdout)
    assert m["output_weight"] == get_cache_model().output_weight != 1.0
    m = json.loads(cli("cost", str(files["state"]), str(after), "--cache-preset", "openai").stdout)
    assert m["output_weight"] == get_cache_model("openai").output_weight
    r = cli("cost", str(files["state"]), str(after), "--cache-preset", "nope")
    assert r.returncode == 2 and "unknown cache model preset 'nope'" in r.stderr


def test_examples_command_passes_all_four():
    r = cli("examples")
    assert r.returncode == 0, r.stdout + r.stderr
    for d in example_dirs():
        assert any(line.startswith(d.name) and "PASS" in line for line in r.stdout.splitlines())
    assert "4/4 examples passed" in r.stdout


def test_envs_list_and_show():
    r = cli("envs", "list")
    assert r.returncode == 0
    names = {line.split()[0] for line in r.stdout.splitlines() if line.strip()}
    assert {"probe", "ledger", "dialogue"} <= names
    r = cli("envs", "show", "probe", "--seed", "1", "--scale", "0.06")
    assert r.returncode == 0, r.stderr
    assert "Tracked keys" in r.stdout and "oracle score (no compaction, unlimited window): 1.000" in r.stdout
    # the prompt states the window every other command defaults to (it said 1,000,000,000 tokens)
    assert "Your context window is 32768 tokens" in r.stdout
    r = cli("envs", "show", "probe", "--seed", "1", "--scale", "0.06", "--context-window", "6000")
    assert "Your context window is 6000 tokens" in r.stdout


def test_envs_oracle_defaults_to_the_window_of_eval_and_training():
    """`envs oracle` defaulted to a 1,000,000-token window, where `--strategy none,evolve` gave equal rows."""
    from rl_compaction.cli import build_parser
    from rl_compaction.evaluation.evaluate import EvalConfig
    from rl_compaction.harness.env import EnvConfig
    from rl_compaction.harness.spec import EpisodeSpec

    windows = {
        build_parser().parse_args(["envs", "oracle", "probe"]).context_window,
        build_parser().parse_args(["envs", "show", "probe"]).context_window,
        EnvConfig().context_window,
        EpisodeSpec().context_window,
        EvalConfig(policies=["oracle"]).episode.context_window,
    }
    assert windows == {32_768}


def test_envs_oracle_table():
    r = cli("envs", "oracle", "probe", "--episodes", "2", "--scale", "0.06", "--strategy", "none,evolve")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[3:]}
    assert rows.keys() == {"none", "evolve"}
    assert "100% [" in rows["none"]


@pytest.mark.slow
def test_envs_oracle_all_skips_the_edits_a_family_does_not_have():
    """`--strategy all` crashed with a traceback on the first demonstration edit a family's oracle lacks
    (probe has no summary, early or recent edit); asked for by name, such an edit is a usage error."""
    window = ("--context-window", "6000", "--level", "1")  # the harness asks, so the edits are needed
    r = cli("envs", "oracle", "probe", "--episodes", "1", "--scale", "0.06", "--strategy", "all", *window)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0] for line in r.stdout.splitlines()[3:]}
    assert {"none", "evolve", "evolve_eager", "sliding_window"} <= rows
    assert not rows & {"evolve_summary", "evolve_early", "evolve_recent"}
    assert "skipped evolve_recent: ProbeOracle has no recent edit" in r.stderr
    r = cli("envs", "oracle", "probe", "--episodes", "1", "--scale", "0.06", "--strategy", "evolve_recent", *window)
    assert r.returncode == 2 and "has no recent edit" in r.stderr and "Traceback" not in r.stderr


def test_envs_oracle_max_turns_cuts_episodes_off():
    """Long sessions need more than the env's default 400 turns; a short limit truncates every episode."""
    r = cli("envs", "oracle", "probe", "--episodes", "2", "--scale", "0.06", "--max-turns", "2")
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[3]
    assert row.split()[0] == "none" and "0% [" in row and row.rstrip().endswith("2/2")


# -- hardening (issue 9): in-process, as the fuzz test does --------------------------------------


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, words: str) -> None:
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" + "9" * 5000 + "]", "more than 4300 digits"),
        ("[" * 100_000, "nested deeper"),
        (json.dumps([{"role": "user", "content": "x" * 700_000, "k" * 700_000: 1}]), "unknown field"),
        ('[{"role": "user", "content": "Note \\ud83d"}]', "lone surrogate"),
        (
            json.dumps(
                [{"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"x": NaN}'}]
                + [{"type": "function_call_output", "call_id": "c", "output": ""}]
            ),
            "JSON string of an object",
        ),
    ],
    ids=["5000-digits", "100k-brackets", "700k-key", "lone-surrogate", "nan-arguments"],
)
@pytest.mark.parametrize("command", ["evolve", "cost"])
def test_bad_state_files_exit_2_with_one_short_line(capsys, files, tmp_path, text, words, command):
    bad = tmp_path / "bad.json"
    bad.write_text(text, encoding="utf-8")
    args = [str(bad), str(files["drop"])] if command == "evolve" else [str(files["state"]), str(bad)]
    code, out, err = run_main(capsys, command, *args)
    assert_one_line_error(code, err, words)
    assert out == "" and len(err) < 1000


@pytest.mark.parametrize("where", ["directory", "missing-folder"])
def test_out_that_cannot_be_written_exits_2_before_running(capsys, files, tmp_path, where):
    out = tmp_path if where == "directory" else tmp_path / "no" / "such" / "out.json"
    code, stdout, err = run_main(capsys, "evolve", str(files["state"]), str(files["drop"]), "--out", str(out))
    assert_one_line_error(code, err, "--out")
    assert stdout == ""


@pytest.mark.parametrize("weight", ["nan", "inf", "-inf"])
def test_cost_refuses_a_non_finite_output_weight(capsys, files, weight):
    code, out, err = run_main(capsys, "cost", str(files["state"]), str(files["state"]), f"--output-weight={weight}")
    assert_one_line_error(code, err, "finite")


@pytest.mark.parametrize("which", ["state", "code"])
def test_input_reads_are_capped(capsys, files, which):
    args = ["/dev/zero", str(files["drop"])] if which == "state" else [str(files["state"]), "/dev/zero"]
    code, out, err = run_main(capsys, "evolve", *args)
    assert_one_line_error(code, err, "larger than 64 MiB")


def test_code_that_leaves_a_lone_surrogate_is_rejected_not_a_traceback(capsys, files):
    """'Note 😀 tail'.slice(0, 6) cuts the emoji in half: UTF-8 cannot print or store the result."""
    code_file = files["drop"].with_name("half.js")
    code_file.write_text("state[0].content = 'Note 😀 tail'.slice(0, 6); return state;", encoding="utf-8")
    code, out, err = run_main(capsys, "evolve", str(files["state"]), str(code_file))
    assert code == 1 and err == ""
    result = json.loads(out)
    assert result["applied"] is False and "lone surrogate" in result["error"]


def test_a_lone_surrogate_in_printed_json_becomes_its_escape(capsys):
    """An error message may quote the code's text; printing it must not raise UnicodeEncodeError."""
    _emit({"applied": False, "error": "half \ud83d, a \\ and ’"})
    out = capsys.readouterr().out
    assert "\\ud83d" in out and "’" in out
    assert json.loads(out)["error"] == "half \ud83d, a \\ and ’"


@pytest.mark.parametrize(
    "command",
    [
        [],
        *[[c] for c in ("evolve", "cost", "examples", "quickstart", "reproduce", "eval", "train", "sft", "demos")],
        ["models"],
        ["models", "fetch"],
        ["envs"],
        *[["envs", a] for a in ("list", "check", "show", "oracle")],
    ],
)
def test_help_works_on_every_subcommand(capsys, command):
    """`--help` prints usage and exits 0 everywhere; `train --help` once crashed on an unescaped % in a
    TRL-parsed help string (issue 22, item 1)."""
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out
    if command in (["train"], ["sft"]):  # the README's flag, which TRL's parser handles outside argparse
        assert "--config FILE.yaml" in out


def exit_code(argv: list[str]) -> int:
    """main's exit code, whether it returns it or argparse exits with it (its own flags' checks)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize(
    "command",
    [
        ["envs", "show", "vault", "--seed", "-1"],
        ["envs", "oracle", "vault", "--seed-start", "-3"],
        ["eval", "--policy", "oracle", "--env", "vault", "--seed-start", "-1"],
    ],
)
def test_a_negative_seed_is_a_usage_error_not_a_gymnasium_traceback(capsys, command):
    """Issue 22, item 11: Gymnasium refuses negative seeds deep inside reset; the command line refuses them first."""
    assert exit_code(command) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "(an integer >= 0)" in err and "Traceback" not in err


@pytest.mark.parametrize("scale", ["inf", "1e300", "nan", "0"])
@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--policy", "oracle", "--env", "probe", "--episodes", "1"],
        ["envs", "show", "probe"],
        ["envs", "oracle", "probe"],
        ["demos", "--families", "probe", "--episodes", "1"],
    ],
    ids=["eval", "envs-show", "envs-oracle", "demos"],
)
def test_a_non_finite_or_absurd_scale_is_refused_before_any_work(command, scale, tmp_path, capsys):
    """--scale inf crashed the generators with an OverflowError; 1e300 grew memory without end."""
    assert exit_code([*command, "--scale", scale]) == 2
    err = capsys.readouterr().err  # eval's config checks every number first: "scale must be a finite number"
    assert "difficulty scale must be" in err or "scale must be a finite number" in err


@pytest.mark.parametrize("scale", [float("inf"), 1e300, True, "1"])
def test_difficulty_refuses_non_finite_absurd_or_non_numeric_scales(scale):
    from rl_compaction.harness.tasks import Difficulty

    with pytest.raises(ValueError, match="difficulty scale must be"):
        Difficulty(scale=scale)


def _bad_output_dirs(tmp_path: Path) -> dict[str, Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return {"is-a-file": blocker, "inside-a-file": blocker / "out"}


OUTPUT_COMMANDS = {
    "demos": ["demos", "--families", "probe", "--episodes", "1", "--scale", "0.06"],
    "eval": ["eval", "--policy", "oracle", "--env", "probe", "--episodes", "1", "--scale", "0.06", "--output-dir"],
    "sft": ["sft", "--config", "configs/sft/tiny-cpu.yaml", "--output_dir"],
    "train": ["train", "--config", "configs/train/tiny-cpu.yaml", "--output_dir"],
    "reproduce": ["reproduce", "--config", "configs/reproduce/quickstart.yaml", "--output-dir"],
    "quickstart": ["quickstart", "--output-dir"],
}


@pytest.mark.parametrize("kind", ["is-a-file", "inside-a-file"])
@pytest.mark.parametrize("command", list(OUTPUT_COMMANDS))
def test_an_output_folder_that_cannot_be_one_is_one_line_and_exit_2_before_any_work(
    command, kind, tmp_path, capsys, monkeypatch
):
    """It was a traceback (exit 1), in demos only after all its episodes had run."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    out = _bad_output_dirs(tmp_path)[kind]
    if command == "demos":  # no episode may run first
        monkeypatch.setattr("rl_compaction.training.demos.make_env", lambda *a, **k: pytest.fail("made an env"))
    assert main([*OUTPUT_COMMANDS[command], str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"output folder {out}" in err


def test_an_empty_model_folder_is_named_as_such(tmp_path, capsys):
    """It said "install sentencepiece or tiktoken", though both are installed."""
    empty = tmp_path / "model"
    empty.mkdir()
    argv = ["eval", "--policy", str(empty), "--env", "probe", "--episodes", "1", "--scale", "0.06"]
    assert main([*argv, "--output-dir", str(tmp_path / "eval")]) == 2
    assert f"{empty} holds no model or tokenizer" in capsys.readouterr().err
    argv = ["train", "--config", "configs/train/tiny-cpu.yaml", "--model_name_or_path", str(empty)]
    assert main([*argv, "--output_dir", str(tmp_path / "train")]) == 2
    assert f"{empty} holds no model or tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("n", ["0", "1"])
def test_train_refuses_groups_of_fewer_than_two_episodes(n, tmp_path, capsys):
    """num_generations 0 was a ZeroDivisionError inside TRL."""
    argv = ["train", "--config", "configs/train/tiny-cpu.yaml", "--num_generations", n]
    assert main([*argv, "--output_dir", str(tmp_path / "train")]) == 2
    assert "num_generations must be >= 2" in capsys.readouterr().err


def _checkpoints(out: Path) -> None:
    """checkpoint-2 complete, checkpoint-4 as a kill during its save leaves it (weights cut off)."""
    import torch
    from safetensors.torch import save_file

    for step in (2, 4):
        folder = out / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text("{}")
        save_file({"w": torch.zeros(64, 64)}, str(folder / "model.safetensors"))
    weights = out / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


@pytest.mark.parametrize("command", ["train", "sft"])
@pytest.mark.parametrize("which", ["checkpoint-4", "true"])
def test_resuming_from_a_half_written_checkpoint_names_it_and_the_one_before(command, which, tmp_path, capsys):
    """It was a SafetensorError traceback."""
    out = tmp_path / "run"
    _checkpoints(out)
    resume = str(out / which) if which.startswith("checkpoint") else which
    argv = [command, "--config", f"configs/{command}/tiny-cpu.yaml", "--output_dir", str(out)]
    assert main([*argv, "--resume_from_checkpoint", resume]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {out / 'checkpoint-4'} is incomplete: model.safetensors is unreadable" in err
    assert f"resume from {out / 'checkpoint-2'} instead" in err and "Traceback" not in err


def test_a_complete_checkpoint_passes_the_check(tmp_path):
    from rl_compaction.core.outputs import check_checkpoint, resolve_resume

    _checkpoints(tmp_path)
    assert check_checkpoint(tmp_path / "checkpoint-2") == tmp_path / "checkpoint-2"
    assert resolve_resume(None, tmp_path) is None
    with pytest.raises(ValueError, match="no checkpoint in"):
        resolve_resume("true", tmp_path / "nothing-here")


def test_demos_shows_progress_over_its_oracle_episodes(tmp_path, capsys):
    assert main(["demos", str(tmp_path / "d"), "--families", "probe", "--episodes", "4", "--scale", "0.06"]) == 0
    err = capsys.readouterr().err
    assert "oracle demonstrations (probe)" in err and "4/4" in err


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_yaml_syntax_error_in_a_training_config_is_one_line(command, tmp_path, capsys):
    """It was a yaml ParserError traceback (exit 1)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nb: c: d\n")
    assert main([command, "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "is not valid YAML" in err and "Traceback" not in err
