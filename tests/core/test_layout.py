"""The run arithmetic of ``shardinit._layout`` that the writer's local regions are built
from, on known answers (the placements tests check it end to end on real meshes)."""

from __future__ import annotations

from shardinit._layout import _chunk_runs, chunk_bounds, merge_runs


def test_merge_runs_joins_runs_that_continue_one_another_and_drops_empty_ones() -> None:
    """(``make mutants``: keeping empty runs, ``start <= stop``, survived every test.)"""
    runs = [(0, 0), (2, 2), (3, 5), (5, 7), (7, 7), (9, 12), (12, 12)]
    assert merge_runs(runs) == [(3, 7), (9, 12)]
    assert merge_runs([]) == []
    assert merge_runs([(4, 4)]) == []


def test_chunk_bounds_are_torch_chunks() -> None:
    """``torch.chunk``'s pieces: ceil(length / chunks) each, the last ones short or empty."""
    assert [chunk_bounds(10, 4, i) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [chunk_bounds(5, 4, i) for i in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert [chunk_bounds(0, 2, i) for i in range(2)] == [(0, 0), (0, 0)]


def test_a_chunk_of_an_index_list_spanning_runs() -> None:
    """``torch.chunk`` of the indices 0, 1, 2, 10, 11, 12, 13 (two runs) into 2: chunk 0
    is 0, 1, 2, 10 and chunk 1 is 11, 12, 13, the position in the list carried across
    runs (``make mutants``: ``start + low + position`` survived every selected test;
    only the gloo placement tests reach lists of several runs)."""
    runs = [(0, 3), (10, 14)]
    assert _chunk_runs(runs, 2, 0) == [(0, 3), (10, 11)]
    assert _chunk_runs(runs, 2, 1) == [(11, 14)]
    assert _chunk_runs(runs, 3, 2) == [(13, 14)]
