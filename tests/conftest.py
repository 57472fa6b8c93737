"""Shared pytest configuration.

Opt-in markers: tests marked ``slow`` or ``wheel`` are collected but skipped unless their
option is given, whatever ``-m`` expression selects them (so ``-m distributed`` never
pulls in a slow test by accident):

* ``--runslow`` (``make test-slow``): long runs, e.g. KS tests at ten million samples;
* ``--runwheel`` (its own CI step, ``pytest --runwheel -m wheel``): builds the release
  wheel with maturin and installs it into a fresh virtual env;
* ``--runzoo`` (its own CI step, ``make test-zoo``): Megatron-core and DeepSpeed ZeRO-3 on
  gloo, minutes of runs plus DeepSpeed's one-time op build, kept out of ``make test``
  (which does not even install them: the zoo layer of requirements is ``make test-zoo``'s);
* ``--runoracle`` (``make test-oracle``): torch's whole OpInfo database through the
  capture (tests/capture/test_capture_oracle.py; ``make test`` runs a fixed sample);
* ``--runprocesses`` (its own CI step, ``make test-processes``): the examples, the
  two-world demo and the seed-checkpoint runs that are killed, fill a disk or measure a
  writer's peak memory, each in fresh Python processes that import torch and
  transformers (seconds each; about 70 s in all, kept out of ``make test``'s 8 minutes);
* ``--runeco`` (its own CI step, ``make test-ecosystem``): every ecosystem setup of
  tests/clients/test_ecosystem.py at world 1 and at worlds 1-3 under FSDP2 (each rank
  imports timm, diffusers, ...: minutes); ``make test`` checks every other setup at
  world 1 and one model per library under FSDP2.

Hypothesis profiles, chosen with the environment variable ``HYPOTHESIS_PROFILE``:

* ``default`` (``make test``): few examples, so the whole suite stays fast on 2 cores;
* ``slow`` (``make test-slow``): many examples, for long runs.

Multi-rank tests share one gloo group per world size (``tests/helpers/gloo_groups.py``,
whose docstring says how to use it); once collection is done, the groups learn which
tests were selected and are not skipped, so that they run only those tests' scenarios
(a scenario behind an opt-in marker only when its tests run), and start in the
background while the tests marked ``distributed``, which read their results, are moved
to the end of the run.

``deadline=None`` everywhere: one example may wait on the core's thread pool or on a
busy machine, and wall time is not what these properties check.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

# torch's OpenMP (and MKL's) worker threads sleep when idle instead of spinning: on 2
# cores each small torch op left the other thread spinning out its wait, CPU taken from
# the gloo groups and the Rust build beside pytest (tests/core, cli and checkpoint: 45 s
# of the main process's CPU against 34 s; a clients subset 34 s against 12 s; measured
# 2026-12-06). Values do not depend on it. Set before torch is imported (the OpenMP
# runtime reads it once), so here; the subprocesses and ranks inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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

# marker -> the command-line option that opts into running its tests.
OPT_IN_MARKERS = {
    "slow": ("--runslow", "run tests marked slow (make test-slow)"),
    "wheel": ("--runwheel", "run tests marked wheel: build and install the release wheel"),
    "zoo": ("--runzoo", "run tests marked zoo: real Megatron-core and DeepSpeed (make test-zoo)"),
    "oracle": (
        "--runoracle",
        "run tests marked oracle: torch's whole OpInfo database through the capture "
        "(make test-oracle)",
    ),
    "processes": (
        "--runprocesses",
        "run tests marked processes: the examples, the demo and the seed-checkpoint faults "
        "in fresh Python processes (make test-processes)",
    ),
    "ecosystem": (
        "--runeco",
        "run tests marked ecosystem: every timm/diffusers/peft/OLMo-core/open_clip/litgpt "
        "setup at world 1 and under FSDP2 at worlds 1-3 (make test-ecosystem)",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    for option, help_text in OPT_IN_MARKERS.values():
        parser.addoption(option, action="store_true", default=False, help=help_text)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (option, _) in OPT_IN_MARKERS.items():
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=f"{marker}: run with `pytest {option}`")
        for item in items:
            # The marker itself, not `item.keywords`: keywords also hold test names and
            # parametrize ids, so a case named "wheel" or "slow" would be skipped too.
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
    # Tests that read the gloo groups' results last: the groups run meanwhile.
    items.sort(key=lambda item: item.get_closest_marker("distributed") is not None)


def _skipped(item: pytest.Item) -> bool:
    if item.get_closest_marker("skip") is not None:
        return True
    return any(mark.args and mark.args[0] is True for mark in item.iter_markers("skipif"))


def pytest_collection_finish(session: pytest.Session) -> None:
    groups = sys.modules.get("gloo_groups")  # imported by the multi-rank test modules
    if groups is not None:
        running = [item for item in session.items if not _skipped(item)]
        groups.select(running)
        if os.environ.get("SHARDINIT_TEST_PREFETCH", "1") != "0":
            groups.prefetch(running)


def pytest_sessionfinish(session: pytest.Session) -> None:
    groups = sys.modules.get("gloo_groups")
    if groups is not None:
        groups.cancel_prefetch()
