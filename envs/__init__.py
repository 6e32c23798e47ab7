"""Task families shipped with rl-compaction; each subpackage is one plug-in (see README.md here)."""
