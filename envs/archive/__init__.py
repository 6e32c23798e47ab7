"""The archive family: a box's word on one of the first two boxes, needed after many boxes of filler."""

from rl_compaction_envs.archive.family import ArchiveFamily

__all__ = ["ArchiveFamily"]
