"""Which W&B project and mode every run here logs to: training, evaluation and the recipes' plots.

One rule, so that a recipe's GRPO run, its eval and its report land side by side: the project is
WANDB_PROJECT, else "rl-compaction" (transformers' default would be "huggingface"); the mode is
WANDB_MODE, else online with an API key (WANDB_API_KEY), else offline (no account needed; `wandb sync`
uploads later). The mode is said at each `wandb.init` rather than left to W&B's process-wide settings,
which an earlier run in the same process may have fixed.
"""

from __future__ import annotations

import os

#: the W&B project of every run here unless WANDB_PROJECT names another
DEFAULT_PROJECT = "rl-compaction"


def wandb_project() -> str:
    return os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT


def wandb_mode() -> str:
    return os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
