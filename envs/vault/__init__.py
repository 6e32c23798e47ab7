"""The vault family: a key word shown once on the first page, needed after many pages of filler."""

from envs.vault.family import VaultFamily

__all__ = ["VaultFamily"]
