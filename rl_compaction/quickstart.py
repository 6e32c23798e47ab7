"""The main job on embedded defaults: a shortened CPU reproduction (`rl_compaction.reproduce`).

    rl-compaction quickstart [--output-dir DIR]

It runs the reproduction's recipe with configs/reproduce/quickstart.yaml: the `vault` toy, whose
log outgrows the window so the agent must compact; oracle demonstrations (targeted and imperfect
edits), an SFT warm start of the tiny model, a few GRPO steps on the task reward, and a held-out
eval of the checkpoint against the SFT-only model, the oracle under each fixed strategy and an
unlimited context. `rl-compaction reproduce` is the full-length run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl_compaction.reproduce import RECIPES, ReproduceConfig, run_reproduce

QUICKSTART_CONFIG = RECIPES / "quickstart.yaml"


def run_quickstart(
    output_dir: str | Path = "runs/quickstart", *, resume: bool = False, **overrides: Any
) -> dict[str, Any]:
    """Run the shortened reproduction into `output_dir` (`overrides`: ReproduceConfig fields, e.g. for a
    still shorter test run; `resume`: continue a run there); returns `run_reproduce`'s report."""
    config = ReproduceConfig.from_yaml(QUICKSTART_CONFIG, output_dir=str(output_dir), **overrides)
    return run_reproduce(config, resume=resume)
