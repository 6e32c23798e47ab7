"""A wheel built from this tree works without the repository: installed into its own folder and run
from elsewhere, it finds its presets, recipes, examples, weights and task families (a wheel install
used to fail at `gym.make` because configs/accounting.yaml was not in it)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMOKE = """
import sys, gymnasium as gym, rl_compaction
from rl_compaction.harness.env import CompactionEnv
from rl_compaction.models.registry import resolve_model
from rl_compaction.harness.oracle import run_oracle_episode
from rl_compaction.recipes.recipe import RECIPES, ReproduceConfig
from rl_compaction.harness.tasks import Difficulty
assert rl_compaction.__file__.startswith(sys.argv[1]), rl_compaction.__file__
import rl_compaction_envs.vault
assert rl_compaction_envs.vault.__file__.startswith(sys.argv[1]), rl_compaction_envs.vault.__file__
env = gym.make("rl_compaction/probe-v0", split="test", difficulty=Difficulty(scale=0.06, level=1))
env.reset(seed=0)
info = run_oracle_episode(env.unwrapped, 0, use_evolve=True)
assert info["success"], info
ReproduceConfig.from_yaml(RECIPES / "quickstart.yaml", output_dir="qs")
assert str(resolve_model("tiny-recall")).startswith(sys.argv[1])
assert str(RECIPES).startswith(sys.argv[1]), RECIPES
print("ok")
"""


@pytest.mark.slow
def test_a_wheel_installed_without_the_repository_runs(tmp_path: Path) -> None:
    wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("rl_compaction-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(target), "RL_COMPACTION_HOME": str(tmp_path / "home")}

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    assert run("-c", SMOKE, str(target)).strip().endswith("ok")
    assert "4/4 examples passed" in run("-m", "rl_compaction.cli", "examples")
    families = run("-m", "rl_compaction.cli", "envs", "list")
    assert all(name in families for name in ("probe", "vault", "codebase", "ledger"))


def test_the_package_list_names_every_package_folder() -> None:
    """pyproject.toml lists the packages (setuptools maps envs/ to `rl_compaction_envs` only for listed ones):
    a new layer or family folder missing from the list would be missing from every wheel."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    roots = {
        "rl_compaction": ROOT / "rl_compaction",
        "rl_compaction_envs": ROOT / "envs",
        "rl_compaction_configs": ROOT / "configs",
    }
    folders = {
        ".".join((name, *init.parent.relative_to(folder).parts))
        for name, folder in roots.items()
        for init in folder.rglob("__init__.py")
    }
    assert sorted(listed) == sorted(folders)
