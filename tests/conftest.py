"""Test tiers and prerequisites that are not Python packages.

Tiers (markers): `learning` (GRPO runs whose figures are the point, minutes each), `scienceworld` (the Java
simulator), `vllm` (vLLM's CPU build, in its own environment) and `slow` (over ~4 s here, which all three
imply). `pytest -m "not slow" -n 2` is the fast tier a developer runs; CI runs everything on every core
(`pytest -n auto --dist loadgroup`): the learning tests share one worker and keep torch's default threads, with
which their figures were measured; every other test runs on one thread, so the workers do not oversubscribe.

ScienceWorld's simulator runs on Java 8+: without `java` on PATH its tests are skipped with that reason
(they failed, and one crashed pytest), except the ones marked `without_java`, which check the error a user
without Java gets."""

from __future__ import annotations

import os
import shutil

import pytest

JAVA_REASON = "ScienceWorld's simulator needs Java 8+ on PATH (e.g. apt install openjdk-17-jre-headless)"
MARKERS = {
    "slow": "over ~4 s on 2 cores; deselect with -m 'not slow' for the fast tier",
    "learning": "a GRPO run whose learning figures are checked (minutes); implies slow",
    "scienceworld": "needs ScienceWorld's Java simulator; implies slow",
    "vllm": "needs vLLM's CPU build (README: vLLM on CPU); implies slow",
    "without_java": "a ScienceWorld test that runs whether or not Java is there",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (`--dist loadgroup`)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_java = shutil.which("java") is None
    for item in items:
        if "scienceworld" in item.nodeid and item.get_closest_marker("without_java") is None:
            item.add_marker(pytest.mark.scienceworld)
            if no_java:
                item.add_marker(pytest.mark.skip(reason=JAVA_REASON))
        if item.path.name == "test_vllm.py":
            item.add_marker(pytest.mark.vllm)
        if any(item.get_closest_marker(m) for m in ("learning", "scienceworld", "vllm")):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("learning"):
            # under `pytest -n 2 --dist loadgroup` the GRPO runs take one worker, one after another, and the
            # other tests the other: two at once would each get half the cores
            item.add_marker(pytest.mark.xdist_group("learning"))
    # the learning tests first: their worker starts on them at once, and the other worker takes every other
    # test as it frees up (pytest-xdist hands out work in collection order), rather than the learning tests
    # starting only when the queue reaches them, half way, and running on alone at the end
    items.sort(key=lambda item: item.get_closest_marker("learning") is None)


_DEFAULT_THREADS: list[int] = []


@pytest.fixture(autouse=True)
def _one_thread_per_worker(request: pytest.FixtureRequest) -> None:
    """Under xdist: one torch thread for each test, the default for the learning tests (see the module)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    import torch

    if not _DEFAULT_THREADS:
        _DEFAULT_THREADS.append(torch.get_num_threads())
    torch.set_num_threads(_DEFAULT_THREADS[0] if request.node.get_closest_marker("learning") else 1)
