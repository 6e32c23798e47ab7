"""The research task family: multi-hop questions over a generated web of fictional entities.

See `family` for the task and tools, `world` for the generator and search engine, `text` for
the page, question and answer formats, `oracle` for the context-bound solver and its targeted
compaction (`evolve.js`), and `pools` for the split-partitioned word pools.
"""

from rl_compaction_envs.research.family import ResearchFamily, ResearchTask
from rl_compaction_envs.research.oracle import ResearchOracle
from rl_compaction_envs.research.pools import POOLS

__all__ = ["POOLS", "ResearchFamily", "ResearchOracle", "ResearchTask"]
