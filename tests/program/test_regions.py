"""Region arithmetic (``_program.regions``) against torch's own indexing: the boxes of a
flat range tile it in order, and a box's flat runs are its elements in row-major order
(the writer of a flat range and the capture's copies rest on both)."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from shardinit._program.regions import box_runs, flat_range_boxes, view_region, view_runs

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def _indices(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.arange(math.prod(shape)).reshape(shape)


def _runs_of(values: list[int]) -> list[tuple[int, int]]:
    """``values`` (increasing) as runs ``[start, stop)`` of consecutive integers."""
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and runs[-1][1] == value:
            runs[-1] = (runs[-1][0], value + 1)
        else:
            runs.append((value, value + 1))
    return runs


@given(shapes, st.data())
def test_the_boxes_of_a_flat_range_tile_it_in_order(
    shape: tuple[int, ...], data: st.DataObject
) -> None:
    numel = math.prod(shape)
    start = data.draw(st.integers(0, numel))
    stop = data.draw(st.integers(start, numel))
    indices = _indices(shape)
    covered: list[int] = []
    for offset, box in flat_range_boxes(shape, start, stop):
        assert offset == len(covered)
        covered += indices[tuple(slice(a, b) for a, b in box)].reshape(-1).tolist()
    assert covered == list(range(start, stop))


@given(shapes, st.data())
def test_the_runs_of_a_box_are_its_elements_in_row_major_order(
    shape: tuple[int, ...], data: st.DataObject
) -> None:
    box = []
    for size in shape:
        start = data.draw(st.integers(0, size))
        box.append((start, data.draw(st.integers(start, size))))
    region = tuple(box)
    elements = _indices(shape)[tuple(slice(a, b) for a, b in region)].reshape(-1).tolist()
    assert box_runs(region, shape) == _runs_of(elements)
    base = torch.zeros(shape)
    view = base[tuple(slice(a, b) for a, b in region)]
    assert view_runs(view, base) == _runs_of(elements)
    if view.numel():
        assert view_region(view, base)[0] == region
