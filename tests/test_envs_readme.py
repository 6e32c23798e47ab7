"""The smallest complete task family in envs/README.md runs as documented."""

from __future__ import annotations

import re
from pathlib import Path

from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.oracle import OraclePolicy, run_oracle_episode
from rl_compaction.harness.tasks import Difficulty

README = Path(__file__).parents[1] / "envs" / "README.md"


def readme_namespace() -> dict:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace


def test_readme_family_runs_and_survives_its_own_compaction():
    ns = readme_namespace()
    family = ns["RecallFamily"]()
    small = CompactionEnv(
        family,
        split="test",
        difficulty=Difficulty(scale=1.0),
        config=EnvConfig(context_window=9000, compaction_threshold=6000),
    )
    info = run_oracle_episode(small, 0, use_evolve=True)
    assert info["success"] and info["ledger"]["compactions"] >= 1
    none = CompactionEnv(family, split="test", config=EnvConfig(context_window=9000, compaction_request=""))
    assert run_oracle_episode(none, 0)["truncated_reason"] == "context_window"
    policy = OraclePolicy(family.make(0, "test").oracle(), small)
    assert policy.act({"state": [{"type": "message", "role": "user", "content": "x"}]})[0]["name"] == "page"
