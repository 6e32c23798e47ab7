"""Test tiers and prerequisites that are not Python packages.

Tiers (markers): `learning` (GRPO runs whose figures are the point, minutes each), `scienceworld` (the Java
simulator), `vllm` (vLLM's CPU build, in its own environment) and `slow` (over ~4 s here, which all three
imply). `pytest -m "not slow" -n 2` is the fast tier a developer runs; CI runs everything on every core
(`pytest -n auto --dist loadgroup`). Under pytest-xdist every test runs on one torch thread, so two workers
never share a core (at two threads each on 2 cores, the GRPO tests took 1.6-2x their idle time); the
learning tests' figures are the same at one thread as at two, to the digit. The slowest tiers are
collected first, and `--dist loadgroup` (no test here is grouped, so each test is its own unit) hands them
out one at a time as workers free up: the learning tests start at once on every worker and the short tests
fill in around them. The default `--dist load` sends each worker a block of consecutive tests up front,
which put every learning test on the first worker.

ScienceWorld's simulator runs on Java 8+: without `java` on PATH its tests are skipped with that reason
(they failed, and one crashed pytest), except the ones marked `without_java`, which check the error a user
without Java gets. Its JVM runs here with C1's JIT alone and the serial collector (unless JAVA_TOOL_OPTIONS
is set already): each test's session is short, and with them the ScienceWorld tests took 158 CPU-s instead
of 212 (7 Dec, the same wall time alone), CPU that the other worker gets."""

from __future__ import annotations

import os
import shutil

import pytest

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
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
    os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)  # read by every JVM a test starts (the module says why)


@pytest.hookimpl(tryfirst=True)  # the markers before any other plugin reads them
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
    # longest first (pytest-xdist hands out work in collection order): the learning tests, then the other slow
    # ones, then the rest, so no GRPO run starts half way and runs on alone at the end
    items.sort(key=lambda item: (item.get_closest_marker("learning") is None, item.get_closest_marker("slow") is None))


@pytest.fixture(autouse=True)
def _one_thread_per_worker() -> None:
    """Under pytest-xdist: one torch thread for each test (see the module)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    import torch

    torch.set_num_threads(1)
