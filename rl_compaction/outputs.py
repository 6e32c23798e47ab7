"""Output folders, checked before any work: a folder that cannot be one fails in one line at once,
not with a traceback after the episodes or the training it was meant to hold."""

from __future__ import annotations

import os
from pathlib import Path


def check_output_dir(path: str | Path) -> Path:
    """`path` as a Path if it is a folder or could be created as one; else ValueError saying why
    (it is a file, it lies inside a file, or the nearest existing folder above it is not writable).
    Creates nothing."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output folder {path} is a file")
    nearest = folder
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ValueError(f"output folder {path} cannot be created: {nearest} is a file")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(f"output folder {path} cannot be created: {nearest} is not writable")
    return folder
