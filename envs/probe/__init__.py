"""The probe task family: exact running totals of a few keys over a long, noisy update stream.

A cheap diagnostic of lossy memory for fast tests (see `family` for the task, `stream` for
the text formats, `oracle` for the context-bound solver and its targeted compaction).
"""

from rl_compaction_envs.probe.family import KEY_POOLS, ProbeFamily, ProbeTask
from rl_compaction_envs.probe.oracle import EVOLVE_JS, ProbeOracle

__all__ = ["EVOLVE_JS", "KEY_POOLS", "ProbeFamily", "ProbeOracle", "ProbeTask"]
