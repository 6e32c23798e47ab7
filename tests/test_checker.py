"""The task-contract checker: every shipped family and the README example pass; families that
break one rule each fail with a message naming that rule."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from test_envs_readme import readme_namespace  # tests/ is on sys.path under pytest

from rl_compaction.harness.checker import FamilyCheckError, check_family
from rl_compaction.harness.tasks import Difficulty, family_names

NS = readme_namespace()
RecallFamily, RecallTask, RecallOracle = NS["RecallFamily"], NS["RecallTask"], NS["RecallOracle"]
FAST = Difficulty(scale=0.25)  # 10 pages instead of 40


@pytest.mark.parametrize("name", family_names())
def test_every_shipped_family_passes(name):
    report = check_family(name)
    assert list(report.episodes) == [0, 1]
    assert all(e.score == 1.0 and e.success for e in report.episodes.values())
    assert report.stats.success_rate == 1.0 and report.stats.episodes == 2
    assert report.warnings == []  # at the default difficulty, every family outgrows a 32k window


def test_the_readme_family_passes_with_a_warning_at_small_scale():
    report = check_family(RecallFamily(), difficulty=FAST)
    assert len(report.episodes) == 2
    assert report.warnings and "compaction is never needed" in report.warnings[0]


class Unseeded(RecallFamily):
    def make(self, seed, split="train", difficulty=None):
        return RecallTask("fjord", 10, random.Random())  # filler drawn from an unseeded RNG


class SplitBlind(RecallFamily):
    def make(self, seed, split="train", difficulty=None):
        return RecallTask("fjord", 10, random.Random(seed))


class CrashingTool(RecallTask):
    def call_tool(self, name, arguments):
        return self.text[arguments["n"] - 1] if name == "page" else "END"  # KeyError when n is missing


class ClashingTool(RecallTask):
    def tools(self):
        return [{**super().tools()[0], "name": "submit"}]


class BadOpening(RecallTask):
    def initial_state(self):
        return [{"type": "message", "role": "user"}]  # no content


class Lenient(RecallTask):
    def score(self, answer):
        return 1.0


class WrongOracle(RecallOracle):
    def act(self, state):
        [call] = super().act(state)
        if call["name"] == "submit":
            call = dict(call, arguments=json.dumps({"answer": "wrong"}))
        return [call]


class Forgetful(RecallTask):
    def oracle(self):
        return WrongOracle()


def family_of(task_class):
    class Family(RecallFamily):
        def make(self, seed, split="train", difficulty=None):
            task = super().make(seed, split, difficulty)
            broken = task_class.__new__(task_class)
            broken.__dict__.update(task.__dict__)
            return broken

    return Family()


@pytest.mark.parametrize(
    ("family", "words"),
    [
        (Unseeded(), "recall/train/seed 0: the task is not deterministic"),
        (SplitBlind(), "recall/seed 0: two splits give the same task"),
        (family_of(CrashingTool), "called without its required arguments raised KeyError"),
        (family_of(ClashingTool), "is named 'submit', which the env reserves"),
        (family_of(BadOpening), "initial_state() is not a valid State"),
        (family_of(Lenient), "score('') must be a number in [0, 1)"),
        (family_of(Forgetful), "recall/test/seed 0: the oracle did not solve the task"),
    ],
)
def test_a_family_that_breaks_one_rule_is_named_with_it(family, words):
    with pytest.raises(FamilyCheckError) as caught:
        check_family(family, difficulty=FAST)
    assert words in str(caught.value)


def test_cli_check_passes_a_shipped_family():
    proc = subprocess.run(
        [sys.executable, "-m", "rl_compaction.cli", "envs", "check", "probe", "--scale", "0.06"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "PASS probe" in proc.stdout and "oracle, test seed 1: score 1.00" in proc.stdout
