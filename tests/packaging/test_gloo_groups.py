"""The shared gloo groups of tests/helpers/gloo_groups.py, without starting processes:
which scenarios join the group of a world size, and a scenario that raises on a rank
stops that rank's run instead of letting later scenarios run out of step."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gloo_groups
import pytest


def passing(rank: int, world: int) -> dict[str, Any]:
    return {"ok": None, "where": [rank, world]}


def raising(rank: int, world: int) -> dict[str, Any]:
    raise RuntimeError(f"boom on {rank} of {world}")


def _argv(scenario: Any) -> list[str]:
    return gloo_groups._entry(scenario).argv()


def test_a_raising_scenario_ends_the_ranks_run() -> None:
    ok, bad = gloo_groups._entry(passing).key, gloo_groups._entry(raising).key
    results = gloo_groups._run_scenarios([_argv(passing), _argv(raising)], 1, 3)
    assert results[ok] == {"ok": None, "where": [1, 3]}
    assert "boom on 1 of 3" in results[bad]["<scenario>"]
    results = gloo_groups._run_scenarios([_argv(raising), _argv(passing)], 0, 2)
    assert "boom on 0 of 2" in results[bad]["<scenario>"]
    assert results[ok]["<scenario>"].startswith(f"not run: {bad} raised on rank 0 first")


def test_run_group_merges_ranks_and_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    per_rank = [{"a": None, "b": "bad"}, {"a": "worse", "b": None}]
    monkeypatch.setattr(gloo_groups, "rank_results", lambda world, scenario: per_rank)
    merged = gloo_groups.run_group(2, passing)
    assert merged == {"a": ["rank 1: worse"], "b": ["rank 0: bad"]}
    with pytest.raises(AssertionError, match="rank 0: bad"):
        gloo_groups.assert_check_passed(merged, "b")
    with pytest.raises(AssertionError, match="did not run"):
        gloo_groups.assert_check_passed(merged, "c")


def _item(path: Path, world: int | None, markers: tuple[str, ...] = ()) -> Any:
    callspec = None if world is None else SimpleNamespace(params={"world": world})
    marks = [SimpleNamespace(name=name) for name in markers]
    return SimpleNamespace(path=path, callspec=callspec, iter_markers=lambda: iter(marks))


def test_groups_run_only_the_selected_scenarios(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    files = {name: str((tmp_path / f"{name}.py").resolve()) for name in "abc"}
    entries = {
        "a": gloo_groups._Entry(files["a"], "scenario", "a", frozenset({1, 2})),
        "b": gloo_groups._Entry(files["b"], "scenario", "b", frozenset({2, 4})),
        "c": gloo_groups._Entry(files["c"], "scenario", "c", frozenset({2})),
    }
    monkeypatch.setattr(gloo_groups, "_REGISTRY", {e.key: e for e in entries.values()})
    monkeypatch.setattr(gloo_groups, "_SELECTED", None)
    assert gloo_groups._members(2, entries["a"]) == sorted(entries.values())  # no selection
    # a: world 1 only (parametrized); b: a test without a world; c: not selected
    items = [_item(Path(files["a"]), 1), _item(Path(files["b"]), None), _item(Path(files["b"]), 2)]
    gloo_groups.select(items)
    assert gloo_groups._members(2, entries["b"]) == [entries["b"]]
    assert gloo_groups._members(1, entries["a"]) == [entries["a"]]
    assert gloo_groups._members(4, entries["b"]) == [entries["b"]]
    # the asking scenario always runs, selected or not
    assert gloo_groups._members(2, entries["c"]) == [entries["b"], entries["c"]]


def test_prefetched_groups_are_the_ones_tests_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """prefetch starts each world's group once, with the members the lazy path would
    start and the environment as it was at prefetch; rank_results reads that group."""
    file = str((tmp_path / "a.py").resolve())
    entry = gloo_groups._Entry(file, "passing", "a", frozenset({1, 3}))
    monkeypatch.setattr(gloo_groups, "_REGISTRY", {entry.key: entry})
    monkeypatch.setattr(gloo_groups, "_GROUPS", {})
    monkeypatch.setattr(gloo_groups, "_PENDING", {})
    monkeypatch.setattr(gloo_groups, "_entry", lambda scenario, worlds=(): entry)
    launched: list[tuple[int, list[Any], str | None]] = []

    def launch(world: int, members: list[Any], timeout: float, environ: Any = None) -> Any:
        launched.append((world, members, (environ or {}).get("PREFETCH_PROBE")))
        return {entry.key: [{"ok": None}] * world}

    monkeypatch.setattr(gloo_groups, "_launch", launch)
    monkeypatch.setenv("PREFETCH_PROBE", "before")
    items = [_item(Path(file), 3)]
    gloo_groups.select(items)
    gloo_groups.prefetch(items)
    monkeypatch.setenv("PREFETCH_PROBE", "after")
    assert gloo_groups.run_group(3, passing) == {"ok": []}
    assert gloo_groups.run_group(3, passing) == {"ok": []}
    assert launched == [(3, [entry], "before")]  # world 1 is not selected


def test_a_scenario_behind_a_marker_runs_only_with_its_marked_tests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A scenario declared with ``marker`` joins only where a selected test of its module
    carries the marker (its tests behind an opt-in option that make test skips); the
    module's other scenario joins for any of its tests."""
    file = str((tmp_path / "eco.py").resolve())
    plain = gloo_groups._Entry(file, "plain", "eco", frozenset({1, 2}))
    marked = gloo_groups._Entry(file, "marked", "eco", frozenset({1, 2}), "ecosystem")
    monkeypatch.setattr(gloo_groups, "_REGISTRY", {e.key: e for e in (plain, marked)})
    monkeypatch.setattr(gloo_groups, "_SELECTED", None)
    gloo_groups.select([_item(Path(file), 1), _item(Path(file), 2, ("parametrize",))])
    assert gloo_groups._members(1, None) == [plain]
    assert gloo_groups._members(2, None) == [plain]
    gloo_groups.select([_item(Path(file), 1), _item(Path(file), 2, ("ecosystem",))])
    assert gloo_groups._members(1, None) == [plain]  # its marked tests ask for world 2 only
    assert gloo_groups._members(2, None) == sorted([plain, marked])
    # the asking scenario always runs, selected or not
    gloo_groups.select([_item(Path(file), 1)])
    assert gloo_groups._members(1, marked) == sorted([plain, marked])
