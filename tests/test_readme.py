"""The README's examples run as written (issue 21, item 7): its Python code, its command-line
synopsis, and the worked examples' table in their own README, checked against the code they describe."""

from __future__ import annotations

import argparse
import io
import json
import re
import shlex
from contextlib import redirect_stdout
from pathlib import Path

import yaml

from rl_compaction.accounting import get_counter
from rl_compaction.cli import build_parser, main
from rl_compaction.core.sandbox import run_evolve
from rl_compaction.protocol.example_runner import example_dirs, run_example

REPO = Path(__file__).parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
#: the worked examples' own README, where their printed table lives
EXAMPLES_README = (REPO / "rl_compaction/protocol/examples/README.md").read_text(encoding="utf-8")


def blocks(language: str, text: str = README) -> list[str]:
    """The fenced code blocks of `language` ("" for unlabelled ones) in `text`, in order. Fences are
    paired in order: a bare ``` line opens an unlabelled block or closes the open one."""
    found, open_language, lines = [], None, []
    for line in text.splitlines():
        if not line.startswith("```"):
            lines.append(line)
        elif open_language is None:
            open_language, lines = line[3:].strip(), []
        else:
            if open_language == language:
                found.append("\n".join(lines) + "\n")
            open_language = None
    return found


def test_every_python_example_runs_and_prints_what_it_promises():
    python = blocks("python")
    assert python, "the README has no Python example"
    for block in python:
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - our own documentation
        score, cost = out.getvalue().split()  # the Gymnasium example prints the score and the cost
        assert 0.0 <= float(score) <= 1.0 and float(cost) > 0


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf subcommand of the parser, as a tuple of words (`("envs", "list")`)."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        return {prefix}
    return {leaf for name, sub in actions[0].choices.items() for leaf in subcommands(sub, (*prefix, name))}


def test_the_command_line_synopsis_lists_every_subcommand_and_no_other():
    synopsis = next(b for b in blocks("bash") if "rl-compaction evolve" in b)
    documented = set()
    for line in synopsis.splitlines():
        words = [w for w in line.split()[1:] if re.fullmatch(r"[a-z]+", w)]
        documented.add(tuple(words[:2]) if words[0] in ("envs", "models") else (words[0],))
    assert documented == subcommands(build_parser())


def test_the_worked_examples_table_is_what_the_examples_command_prints():
    table = next(b for b in blocks("", EXAMPLES_README) if b.startswith("example "))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["examples"]) == 0
    printed = out.getvalue()
    assert table.strip() in printed, printed


def test_the_receipt_example_is_the_first_worked_examples_receipt():
    applied, rejected = (json.loads(line) for line in blocks("json")[0].replace("\n ", " ").splitlines())
    result = run_example(example_dirs()[0], get_counter("o200k_base"))
    assert applied == {"applied": True, **result.metrics}
    returned_an_object = run_evolve([{"type": "message", "role": "user", "content": "x"}], "return {};")
    assert rejected == {"applied": False, "error": returned_an_object.error}


def command_lines(block: str) -> list[list[str]]:
    """The commands of a bash block as words: continuations joined, comments and `[optional]` words dropped."""
    joined = block.replace("\\\n", " ")
    lines = [shlex.split(line.split(" #")[0]) for line in joined.splitlines() if line.strip()]
    return [[w for w in words if not w.startswith("[")] for words in lines]


def flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_the_training_chain_hands_each_stage_its_output():
    """GRPO started from the random `tiny` model, not from the chain's SFT output, so the chain learned nothing."""
    block = next(b for b in blocks("bash") if b.startswith("rl-compaction demos"))
    demos, sft, grpo, evaluation = command_lines(block)
    sft_config = yaml.safe_load((REPO / flag(sft, "--config")).read_text())
    grpo_config = yaml.safe_load((REPO / flag(grpo, "--config")).read_text())
    assert demos[:2] == ["rl-compaction", "demos"] and demos[2] == sft_config["dataset_dir"]
    assert flag(grpo, "--model_name_or_path") == sft_config["output_dir"]
    assert f"{grpo_config['output_dir']}@evolve" in evaluation
    assert "smoke test" in README[README.index("## Training") :].split("##")[1]


def test_every_eval_example_lets_the_oracle_finish(tmp_path, capsys):
    """The eval example showed the oracle at 0%: `--max-turns 12` was one short of the 13 turns it needs."""
    lines = [w for b in blocks("bash") for w in command_lines(b) if w[:2] == ["rl-compaction", "eval"]]
    examples = [w for w in lines if "oracle@evolve" in w]  # not the synopsis
    assert len(examples) >= 2
    for i, words in enumerate(examples):
        args, policies = [], []
        rest = iter(words[2:])
        for word in rest:
            if word == "--policy":
                policies.append(next(rest))
            elif word == "--output-dir":
                next(rest)
            else:
                args.append(word)
        out = tmp_path / str(i)  # the oracle's edits solve every task the example's settings allow
        assert main(["eval", "--policy", "oracle@evolve", *args, "--episodes", "2", "--output-dir", str(out)]) == 0
        metrics = json.loads((out / "metrics.json").read_text())
        assert [row["success_rate"] for row in metrics["policies"].values()] == [1.0], capsys.readouterr().out


def test_the_readme_gives_one_figure_per_claim_from_the_results_document():
    """One figure per claim: the suite's time once, from one run, and each success figure of the README's
    results table as the results document records it (the README once gave the suite's time as 25, 27 and
    38.6 min, and one run's success as 38% and 39%)."""
    suite_times = re.findall(r"(?:pytest|suite|test run)\D{0,30}?(\d+(?:\.\d+)? min(?: \d+ s)?)", README)
    assert len(suite_times) == 1, suite_times
    results = (REPO / "configs/reproduce/RESULTS.md").read_text(encoding="utf-8")
    section = README.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "%" in line]
    assert rows, "the README's Results section has no table"
    for row in rows:
        for figure in re.findall(r"\d+% \[\d+%, \d+%\]", row):
            assert figure in results, f"{figure} (README: {row[:40]}...) is not in RESULTS.md"


def test_the_readme_says_where_the_quickstart_writes(monkeypatch, tmp_path):
    """The README pointed at runs/quickstart/, while `rl-compaction quickstart` writes a new dated folder
    per run (runs/quickstart-DATE-TIME/)."""
    seen = {}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rl_compaction.recipes.quickstart.run_quickstart", lambda out, **k: seen.update(out=out) or 0)
    monkeypatch.setattr("rl_compaction.cli._print_report", lambda report: None)
    assert main(["quickstart"]) == 0
    assert re.fullmatch(r"runs/quickstart-\d{8}-\d{6}", seen["out"])
    assert "runs/quickstart-DATE-TIME/" in README and "runs/quickstart/" not in README
