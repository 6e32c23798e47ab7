"""The test tiers hold under the installed pytest and pytest-xdist: the README's test command runs every test
on one torch thread, the learning tests on every worker at once, and the slowest tiers first.

Nothing but CI's time shows these: the learning tests pass whatever their schedule. When they ran on both
workers at two torch threads each on 2 cores, each took 1.6-2x its idle time; under `--dist load` all of
them landed on the first worker, one after another. This runs the real conftest on a suite of 45 tests
under the README's command at two workers and checks where, at how many threads and in what order they ran."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent

LEARNING_TESTS = """
import os
import time

import pytest
import torch


def record(name):
    with open(os.path.join(os.environ["WORKERS_OUT"], name), "w") as out:
        out.write(f"{os.environ['PYTEST_XDIST_WORKER']} {torch.get_num_threads()}")


@pytest.mark.parametrize("i", range(40))
def test_other(i):
    time.sleep(0.01)
    record(f"other-{i}")


@pytest.mark.slow
def test_slow():
    time.sleep(0.1)


@pytest.mark.learning
@pytest.mark.parametrize("i", range(4))
def test_learning(i):
    time.sleep(0.3)
    record(f"learning-{i}")
"""


def write_suite(root: Path) -> Path:
    """Four `learning` tests after a `slow` one and 40 others, under the real conftest."""
    suite = root / "suite"
    suite.mkdir()
    shutil.copy(TESTS / "conftest.py", suite / "conftest.py")
    (suite / "test_tiered.py").write_text(LEARNING_TESTS)
    return suite


def run_pytest(suite: Path, *args: str, out: Path) -> str:
    """pytest on `suite` in a process of its own (the learning tests write their worker under `out`): its output."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(suite)],
        capture_output=True,
        text=True,
        cwd=suite,
        timeout=120,
        env={**os.environ, "WORKERS_OUT": str(out)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def readme_xdist_flags() -> list[str]:
    """The README's test command's pytest flags, at two workers."""
    readme = (TESTS.parent / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if "pip install -e '.[dev]' && pytest" in line)
    return ["2" if flag == "auto" else flag for flag in command.split("&& pytest")[1].split()]


def test_every_test_runs_on_one_thread_and_the_learning_tests_on_both_workers(tmp_path: Path):
    run_pytest(write_suite(tmp_path), *readme_xdist_flags(), out=tmp_path)
    ran = {path.name: path.read_text().split() for path in tmp_path.iterdir() if path.is_file()}
    assert {threads for _, threads in ran.values()} == {"1"}, ran
    learning_workers = {worker for name, (worker, _) in ran.items() if name.startswith("learning")}
    assert len(learning_workers) == 2, f"the learning tests ran on {sorted(learning_workers)} only"


def test_the_slowest_tiers_are_collected_first(tmp_path: Path):
    collected = run_pytest(write_suite(tmp_path), "--collect-only", out=tmp_path)
    names = [line.split("::")[-1].split("[")[0] for line in collected.splitlines() if "::" in line]
    assert names == ["test_learning"] * 4 + ["test_slow"] + ["test_other"] * 40, names
