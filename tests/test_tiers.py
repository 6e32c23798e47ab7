"""The test tiers hold under the installed pytest and pytest-xdist: CI's `pytest -n auto --dist loadgroup`
runs the learning tests on one worker, one after another, and starts them first.

When they ran on both workers at once, each at torch's default threads on 2 cores, CI took 33 minutes and
passed, so nothing but the time showed it: pytest-xdist 3.8 groups a test by rewriting `item._nodeid`,
which pytest 9.2 no longer reads. This runs the real conftest on four `learning` tests under xdist and
checks where they ran, and the order they are collected in."""

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


@pytest.mark.parametrize("i", range(4))
def test_other(i):
    time.sleep(0.1)


@pytest.mark.learning
@pytest.mark.parametrize("i", range(4))
def test_learning(i):
    time.sleep(0.3)  # the other worker is free to take one, if the group does not hold
    with open(os.path.join(os.environ["WORKERS_OUT"], f"worker-{i}"), "w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])
"""


def write_suite(root: Path) -> Path:
    """A suite of four `learning` tests after four others, under the real conftest."""
    suite = root / "suite"
    suite.mkdir()
    shutil.copy(TESTS / "conftest.py", suite / "conftest.py")
    (suite / "test_grouped.py").write_text(LEARNING_TESTS)
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


def test_learning_tests_share_one_worker_under_loadgroup(tmp_path: Path):
    run_pytest(write_suite(tmp_path), "-n", "2", "--dist", "loadgroup", out=tmp_path)
    workers = {(tmp_path / f"worker-{i}").read_text() for i in range(4)}
    assert len(workers) == 1, f"the learning tests ran on workers {sorted(workers)}"


def test_learning_tests_are_collected_first(tmp_path: Path):
    collected = run_pytest(write_suite(tmp_path), "--collect-only", out=tmp_path)
    names = [line.split("::")[-1].split("[")[0] for line in collected.splitlines() if "::" in line]
    assert names == ["test_learning"] * 4 + ["test_other"] * 4, names
