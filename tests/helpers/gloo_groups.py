"""Multi-process test harness: gloo process groups on CPU, shared by every test module
that asks for the same world size.

Starting ranks is the expensive part of a multi-rank test on a 2-core machine (each rank
imports torch, and transformers for tests/clients). So a test module does not start its
own processes: it declares a *scenario* and the world sizes it needs, and the first test
that asks for a world size starts ONE group of that size, which runs every declared
scenario of the selected tests in turn and reports each one's results.

How to use it (see tests/materialize/test_materialize_fsdp2.py)::

    from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group

    @gloo_scenario(2, 3)            # module level; the world sizes this module needs
    def my_scenario(rank: int, world: int) -> Checks:
        checks: Checks = {}         # runs on every rank, the gloo group already joined
        check(checks, "bits", lambda: _check_bits(world))  # one entry per property
        return checks

    @pytest.mark.parametrize("world", [2, 3])
    def test_bits(world: int) -> None:
        assert_check_passed(run_group(world, my_scenario), "bits")

Rules for a scenario:

* A module-level function ``(rank, world) -> dict``, JSON-serializable. With
  :func:`check` the dict maps check names to ``None`` (passed) or the error text, and
  :func:`run_group` merges the ranks' dicts; a scenario may instead return any JSON
  object per rank and read them with :func:`rank_results`.
* Runs in a rank process that may already have run other modules' scenarios: build
  your own meshes and models, leave global state (default dtype/device, torch's
  threads, monkeypatches) as you found it, and run the same collectives on every rank.
  A failing ``check`` must not skip collectives: each check is self-contained.
* A scenario that raises ends its rank's run: the scenario reads ``<scenario>`` and the
  scenarios after it on that rank read "not run", so a crash never passes for a pass.
* A scenario that needs its own environment (variables read at import, a separate
  process tree) is not decorated: :func:`run_group` then starts a group for it alone.

Which scenarios join a group: the decorated ones whose module has selected tests that
run (so ``pytest -k fsdp1`` starts no clients models, and a skipped test starts nothing);
for a module whose tests are parametrized by ``world``, only the selected world sizes. A
scenario read only by tests behind an opt-in marker says so, ``@gloo_scenario(1, 2,
marker="ecosystem")``: it joins only where its module has such a test that runs (so
``make test``, which skips them, does not run it in every rank). ``tests/conftest.py``
passes the selection (:func:`select`); without it (a plain import) every declared
scenario joins.

When the groups start: ``tests/conftest.py`` calls :func:`prefetch` once collection is
done, which starts the selected groups one after another (by world size) in a background
thread, and moves the tests marked ``distributed`` to the end of the run. So on 2 cores
the ranks run while this process runs its own tests, instead of each waiting for the
other; the results are the same (a group's result does not depend on when it ran).
``SHARDINIT_TEST_PREFETCH=0`` starts each group at its first test instead.

The ranks are started by the CLI's launcher (:func:`shardinit.cli._launch.launch`, the
project's one launcher); each runs this file as a script, joins the gloo group, runs the
scenarios and writes one JSON file.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import faulthandler
import importlib.util
import inspect
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

Checks = dict[str, str | None]
Scenario = Callable[[int, int], Any]

#: A group runs several modules' scenarios: a longer limit than one module's launch.
GROUP_TIMEOUT_S = 1200.0


@dataclass(frozen=True, order=True)
class _Entry:
    file: str  # resolved path of the scenario's module
    qualname: str
    module: str
    worlds: frozenset[int]
    marker: str | None = None  # joins only where a running test of its module has it

    @property
    def key(self) -> str:
        return f"{self.file}::{self.qualname}"

    @property
    def selection_key(self) -> str:
        """Its key in a :func:`_selection`: its module, or its module's tests with its
        marker."""
        return self.file if self.marker is None else _marked(self.file, self.marker)

    def argv(self) -> list[str]:
        return [self.file, self.module, self.qualname]


_REGISTRY: dict[str, _Entry] = {}
#: file (and file with a marker, :func:`_marked`) -> world sizes its selected tests that
#: run ask for (None: any); None before `select`.
_SELECTED: dict[str, set[int] | None] | None = None
#: world -> {scenario key: per-rank results}, or the error that ended the group's launch.
_GROUPS: dict[int, dict[str, list[Any]] | Exception] = {}
#: world -> the group started by :func:`prefetch`, until a test takes its result.
_PENDING: dict[int, concurrent.futures.Future[dict[str, list[Any]]]] = {}


def _entry(scenario: Scenario, worlds: Iterable[int] = (), marker: str | None = None) -> _Entry:
    file = str(Path(inspect.getfile(scenario)).resolve())
    return _Entry(file, scenario.__qualname__, scenario.__module__, frozenset(worlds), marker)


def _marked(file: str, marker: str) -> str:
    return f"{file}::@{marker}"


def gloo_scenario(*worlds: int, marker: str | None = None) -> Callable[[Scenario], Scenario]:
    """Declares a module-level scenario for the shared groups of ``worlds`` (returns it
    unchanged); with ``marker``, only for the tests of its module that carry it."""

    def register(scenario: Scenario) -> Scenario:
        entry = _entry(scenario, worlds, marker)
        _REGISTRY[entry.key] = entry
        return scenario

    return register


def select(items: Iterable[pytest.Item]) -> None:
    """Records which modules (and world sizes) the selected tests that run use (called by
    tests/conftest.py once collection is done, with the tests that are not skipped)."""
    global _SELECTED
    _SELECTED = _selection(items)


def _selection(items: Iterable[pytest.Item]) -> dict[str, set[int] | None]:
    """Per test file, and per test file and marker of its tests (:func:`_marked`), the
    world sizes its ``items`` ask for (None: any)."""
    selected: dict[str, set[int] | None] = {}
    for item in items:
        file = str(Path(item.path).resolve())
        callspec = getattr(item, "callspec", None)
        world = callspec.params.get("world") if callspec is not None else None
        keys = {file} | {_marked(file, mark.name) for mark in item.iter_markers()}
        for key in keys:
            if not isinstance(world, int) or selected.get(key, set()) is None:
                selected[key] = None
            else:
                worlds = selected.setdefault(key, set())
                assert worlds is not None
                worlds.add(world)
    return selected


def _wanted(entry: _Entry, world: int, selected: dict[str, set[int] | None] | None) -> bool:
    if world not in entry.worlds:
        return False
    if selected is None:
        return True
    if entry.selection_key not in selected:
        return False
    worlds = selected[entry.selection_key]
    return worlds is None or world in worlds


def _members(world: int, wanted: _Entry | None) -> list[_Entry]:
    """The scenarios that the group of ``world`` runs: the declared ones that the
    selected tests use, and ``wanted``."""
    members = {entry for entry in _REGISTRY.values() if _wanted(entry, world, _SELECTED)}
    if wanted is not None:
        members.add(wanted)
    return sorted(members)


def prefetch(running: Iterable[pytest.Item]) -> None:
    """Starts, in a background thread and one after another, the group of each world
    size that the tests in ``running`` (the selected tests that are not skipped) use;
    :func:`rank_results` takes the results (call after :func:`select`)."""
    selected = _selection(running)
    worlds = sorted(
        {w for entry in _REGISTRY.values() for w in entry.worlds if _wanted(entry, w, selected)}
    )
    if not worlds:
        return
    # The environment as it is now: tests may change os.environ or sys.path meanwhile.
    environ = _environment()
    executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gloo-groups")
    for world in worlds:
        members = _members(world, None)
        _PENDING[world] = executor.submit(_launch, world, members, GROUP_TIMEOUT_S, environ)
    executor.shutdown(wait=False)


def cancel_prefetch() -> None:
    """Drops the groups :func:`prefetch` has not started yet (the session ends early)."""
    for pending in _PENDING.values():
        pending.cancel()


def _environment() -> dict[str, str]:
    """The ranks' environment: this process's, with its sys.path as ``PYTHONPATH`` (the
    ranks import the scenarios' modules)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}


def _launch(
    world: int, members: list[_Entry], timeout: float, environ: dict[str, str] | None = None
) -> dict[str, list[Any]]:
    from shardinit.cli._launch import launch

    scenarios = json.dumps([entry.argv() for entry in members])
    per_rank = launch(
        str(Path(__file__).resolve()),
        world,
        ["--scenarios", scenarios],
        timeout=timeout,
        env=_environment() if environ is None else environ,
    )
    return {entry.key: [rank[entry.key] for rank in per_rank] for entry in members}


def rank_results(world: int, scenario: Scenario) -> list[Any]:
    """What ``scenario`` returned on each rank of a group of ``world`` ranks (by rank).

    Raises:
        shardinit.cli._launch.LaunchError: a rank of the group crashed or hung (raised
            again for every later test of that world size).
    """
    wanted = _entry(scenario)
    declared = _REGISTRY.get(wanted.key)
    if declared is None or world not in declared.worlds:
        return _launch(world, [wanted], GROUP_TIMEOUT_S / 2)[wanted.key]
    if world not in _GROUPS:
        pending = _PENDING.pop(world, None)
        try:
            if pending is not None and not pending.cancelled():
                _GROUPS[world] = pending.result()
            else:
                _GROUPS[world] = _launch(world, _members(world, declared), GROUP_TIMEOUT_S)
        except Exception as error:
            _GROUPS[world] = error
    group = _GROUPS[world]
    if isinstance(group, Exception):
        raise group
    if declared.key not in group:  # declared after the group started (a late import)
        return _launch(world, [declared], GROUP_TIMEOUT_S / 2)[declared.key]
    return group[declared.key]


def run_group(world: int, scenario: Scenario) -> dict[str, list[str]]:
    """Runs ``scenario`` (checks made with :func:`check`) on ``world`` ranks, in the
    shared group of that size when the scenario is declared for it; returns, per check,
    the errors of all ranks (an empty list when every rank passed)."""
    merged: dict[str, list[str]] = {}
    for rank, checks in enumerate(rank_results(world, scenario)):
        for name, error in checks.items():
            merged.setdefault(name, [])
            if error is not None:
                merged[name].append(f"rank {rank}: {error}")
    return merged


def assert_check_passed(outcome: dict[str, list[str]], name: str) -> None:
    """Fails unless the scenario ran to its end and check ``name`` passed on every rank
    (``outcome`` as :func:`run_group` returns it)."""
    assert "<scenario>" not in outcome, "\n".join(outcome["<scenario>"])
    assert name in outcome, f"check {name} did not run: {sorted(outcome)}"
    assert outcome[name] == [], "\n".join(outcome[name])


def check(checks: Checks, name: str, fn: Callable[[], None]) -> None:
    """Runs ``fn``; records its assertion error (or any exception) under ``name``.

    Every rank must run the same collectives in the same order, so a failing check must
    not skip later ones: each check is self-contained.
    """
    try:
        fn()
        checks[name] = None
    except Exception:
        checks[name] = traceback.format_exc(limit=6)


# --------------------------------------------------------------------------- rank side


def _load(file: str, module_name: str, qualname: str) -> Scenario:
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__file__", None) != file:
        spec = importlib.util.spec_from_file_location(module_name, file)
        assert spec is not None and spec.loader is not None, file
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    scenario: Scenario = getattr(module, qualname)
    return scenario


def _run_scenarios(scenarios: list[list[str]], rank: int, world: int) -> dict[str, Any]:
    """Each scenario's result on this rank, by key; after one raises, the rest read
    "not run" (its collectives may be out of step with the other ranks')."""
    results: dict[str, Any] = {}
    failed: str | None = None
    for file, module_name, qualname in scenarios:
        key = f"{file}::{qualname}"
        if failed is not None:
            results[key] = {"<scenario>": f"not run: {failed} raised on rank {rank} first"}
            continue
        try:
            results[key] = _load(file, module_name, qualname)(rank, world)
        except Exception:
            results[key] = {"<scenario>": traceback.format_exc()}
            failed = key
    return results


def _rank_main(argv: list[str]) -> None:
    """One rank of a group (``RANK``/``WORLD_SIZE``/``MASTER_PORT`` from the launcher)."""
    import torch
    import torch.distributed as dist

    import shardinit
    from shardinit.cli._launch import exit_worker

    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", required=True, help="JSON: [[file, module, qualname]]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    faulthandler.enable()  # a native abort prints every thread's Python stack
    torch.set_num_threads(1)
    shardinit.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = _run_scenarios(json.loads(args.scenarios), rank, world)
        Path(args.out, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
    exit_worker(0)


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
