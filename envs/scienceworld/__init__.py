"""The scienceworld family: ScienceWorld's science tasks in its own simulator (optional extra [scienceworld])."""

from rl_compaction_envs.scienceworld.family import ScienceWorldFamily

__all__ = ["ScienceWorldFamily"]
