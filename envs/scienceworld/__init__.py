"""The scienceworld family: ScienceWorld's science tasks in its own simulator (optional extra [scienceworld])."""

from envs.scienceworld.family import ScienceWorldFamily

__all__ = ["ScienceWorldFamily"]
