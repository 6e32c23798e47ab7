"""The main job on embedded defaults: a shortened CPU reproduction (`rl_compaction.recipes.reproduce`).

    rl-compaction quickstart [--output-dir DIR]

It runs the reproduction's recipe with configs/reproduce/quickstart.yaml: the `vault` toy at two pages,
where the harness asks for compaction (the log would still fit the window unedited: the run shows RL
choosing among edits, not that compacting pays); oracle demonstrations (the targeted edit, a
conservative edit that costs more, a lossy edit that fails), an SFT warm start of `tiny-recall`, GRPO
on the task reward, and a held-out eval of the GRPO checkpoint against the SFT-only model, the oracle
under each fixed strategy and an unlimited context. `rl-compaction reproduce` is the full-length run.

To fit in minutes, stages 1-2 (demos and SFT, ~11 minutes) come from the package: the recipe's own warm
start, built from train tasks only by scripts/build_quickstart_start.py and shipped like the
`tiny-recall` weights. Where it does not match the recipe's settings (an override of a stage 1-2
field), the quickstart runs those stages itself.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from rl_compaction.models.registry import shipped_dir
from rl_compaction.recipes.recipe import RECIPES, ReproduceConfig
from rl_compaction.recipes.reproduce import matching_warm_start, run_reproduce

QUICKSTART_CONFIG = RECIPES / "quickstart.yaml"
#: the quickstart recipe's warm start (model and tokenizer, ~1 MB), rebuilt by scripts/build_quickstart_start.py
SHIPPED_START = shipped_dir("quickstart-sft")


def quickstart_config(output_dir: str | Path = "runs/quickstart", **overrides: Any) -> ReproduceConfig:
    """The recipe with `overrides`, starting from the shipped warm start where that was built with its settings."""
    config = ReproduceConfig.from_yaml(QUICKSTART_CONFIG, output_dir=str(output_dir), **overrides)
    start = matching_warm_start(config, SHIPPED_START)
    if start is None:
        print(
            "[rl-compaction quickstart] the shipped warm start was built with other demo or SFT settings: "
            "running demos and SFT too",
            file=sys.stderr,
            flush=True,
        )
        return config
    return dataclasses.replace(config, warm_start=str(start))


def run_quickstart(
    output_dir: str | Path = "runs/quickstart", *, resume: bool = False, **overrides: Any
) -> dict[str, Any]:
    """Run the shortened reproduction into `output_dir` (`overrides`: ReproduceConfig fields, e.g. for a
    still shorter test run; `resume`: continue a run there); returns `run_reproduce`'s report."""
    return run_reproduce(quickstart_config(output_dir, **overrides), resume=resume)
