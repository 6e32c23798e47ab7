"""Settings every test module shares: the suite runs under pytest-xdist (`-n auto --dist worksteal`, in
pyproject.toml), and its two learning tests take most of its time, so they must run side by side."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Split the cores between the xdist workers: torch gives every process all of them, and two workers
    running two threads each on two cores wait on each other (an SFT step beside another such process took
    about 4x as long as alone)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the `long` tests at both ends of the run: worksteal first gives each worker one contiguous part of
    the collection, so the first and the last test start on different workers (adjacent, they shared one)."""
    long = [item for item in items if item.get_closest_marker("long")]
    if len(long) < 2:
        return
    rest = [item for item in items if not item.get_closest_marker("long")]
    items[:] = [long[0], *rest, *long[1:]]
