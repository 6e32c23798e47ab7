"""Prerequisites that are not Python packages. ScienceWorld's simulator runs on Java 8+: without `java`
on PATH its tests are skipped with that reason (they failed, and one crashed pytest), except the ones
marked `without_java`, which check the error a user without Java gets."""

from __future__ import annotations

import shutil

import pytest

JAVA_REASON = "ScienceWorld's simulator needs Java 8+ on PATH (e.g. apt install openjdk-17-jre-headless)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "without_java: a ScienceWorld test that runs whether or not Java is there")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shutil.which("java") is not None:
        return
    skip = pytest.mark.skip(reason=JAVA_REASON)
    for item in items:
        if "scienceworld" in item.nodeid and item.get_closest_marker("without_java") is None:
            item.add_marker(skip)
