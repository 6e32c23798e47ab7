"""TRL's private members are reached through one module (`training.trl_compat`), read from one TRL version:
an upgrade that moved any of them fails here, by name, rather than mid-training."""

from __future__ import annotations

import ast
from pathlib import Path

import trl
from trl import GRPOTrainer

from rl_compaction.training import trl_compat

PACKAGE = Path(__file__).parents[1] / "rl_compaction"


def test_the_installed_trl_is_the_one_the_members_were_read_from_and_has_them():
    assert trl.__version__ == trl_compat.TRL_VERSION
    missing = [name for name in trl_compat.PRIVATE_MEMBERS if not callable(getattr(GRPOTrainer, name, None))]
    assert not missing
    from trl.trainer.grpo_trainer import use_adapter  # noqa: F401  (reference_adapter's)


def test_no_other_module_touches_trls_private_members():
    """`_metrics` was touched 12 times in the trainer, `_generate_single_turn` and `_last_loaded_step` in the
    generation module; now only trl_compat does (the trainer's overrides of the hooks it lists aside)."""
    private = {"_metrics", "_generate_single_turn", "_last_loaded_step", "use_adapter"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "trl_compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in private:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
    assert not found
