"""Shared pytest configuration.

Hypothesis profiles, chosen with the environment variable ``HYPOTHESIS_PROFILE``:

* ``default`` (``make test``): few examples, so the whole suite stays fast on 2 cores;
* ``slow`` (``make test-slow``): many examples, for long runs.

``deadline=None`` everywhere: one example may wait on the core's thread pool or on a
busy machine, and wall time is not what these properties check.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "slow",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.slow`` tests run only when a marker expression is given (``make
    test-slow`` passes ``-m "slow or not slow"``); plain ``pytest`` skips them."""
    if config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="slow: run with `make test-slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
