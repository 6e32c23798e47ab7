"""The vault family: a key word shown once on the first page, needed after many pages of filler."""

from rl_compaction_envs.vault.family import VaultFamily

__all__ = ["VaultFamily"]
