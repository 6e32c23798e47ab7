"""The codebase family: fix injected bugs in a generated JavaScript repository (tests run in QuickJS)."""

from __future__ import annotations

import random
from typing import ClassVar

from rl_compaction.harness.tasks import Difficulty, TaskFamily, split_seed

from .generator import POOLS, TEMPLATES, SplitPools, generate
from .oracle import CodebaseOracle
from .task import CodebaseTask

__all__ = ["POOLS", "TEMPLATES", "CodebaseFamily", "CodebaseOracle", "CodebaseTask", "SplitPools"]


class CodebaseFamily(TaskFamily):
    """Seeded JavaScript repositories with bugs in a few functions; scored by hidden tests."""

    name: ClassVar[str] = "codebase"
    description: ClassVar[str] = (
        "Fix the buggy functions of a generated multi-file JavaScript repository: long verbose test logs, "
        "paged file reads, specs revised in a distant CHANGELOG; scored by hidden tests run in QuickJS."
    )

    def make(self, seed: int, split: str = "train", difficulty: Difficulty | None = None) -> CodebaseTask:
        difficulty = difficulty or Difficulty()
        rng = random.Random(split_seed(self.name, split, seed))
        repo = generate(rng, split, difficulty.scale, difficulty.level)
        return CodebaseTask(repo, seed=seed, split=split, difficulty=difficulty, noise_seed=rng.getrandbits(32))
