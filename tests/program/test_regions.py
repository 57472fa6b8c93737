"""Region arithmetic (``_program.regions``) against torch's own indexing: the boxes of a
flat range tile it in order, and a box's flat runs are its elements in row-major order
(the writer of a flat range and the capture's copies rest on both)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardinit._layout import Box
from shardinit._program.cannot import Cannot
from shardinit._program.regions import (
    box_runs,
    contains,
    cut_by,
    flat_range_boxes,
    map_runs,
    map_runs_from,
    view_region,
    view_runs,
)
from shardinit._program.selection import first_unwritten
from shardinit._program.selection import positions as strided_positions
from shardinit._program.tables import index_values

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


@st.composite
def flat_ranges(draw: st.DrawFn) -> tuple[tuple[int, ...], int, int]:
    shape = draw(shapes)
    start = draw(st.integers(0, math.prod(shape)))
    return shape, start, draw(st.integers(start, math.prod(shape)))


@st.composite
def boxes(draw: st.DrawFn) -> tuple[tuple[int, ...], Box]:
    shape = draw(shapes)
    box = []
    for size in shape:
        start = draw(st.integers(0, size))
        box.append((start, draw(st.integers(start, size))))
    return shape, tuple(box)


@settings(max_examples=200)  # cheap: no core, no torch op but indexing
@given(flat_ranges())
@example(((3, 4), 2, 9))  # a partial first row, a whole row, a partial last row
@example(((2, 3, 4), 5, 19))
def test_the_boxes_of_a_flat_range_tile_it_in_order(case: tuple[tuple[int, ...], int, int]) -> None:
    shape, start, stop = case
    indices = _indices(shape)
    covered: list[int] = []
    for offset, box in flat_range_boxes(shape, start, stop):
        assert offset == len(covered)
        covered += indices[tuple(slice(a, b) for a, b in box)].reshape(-1).tolist()
    assert covered == list(range(start, stop))


@settings(max_examples=200)
@given(boxes())
@example(((3, 4), ((0, 2), (1, 3))))  # rows of a partial last dim: one run per row
@example(((2, 3, 4), ((0, 2), (1, 3), (0, 4))))
@example(((1,), ((0, 1),)))  # one element
@example(((), ()))  # a 0-d tensor: one run of its one element
def test_the_runs_of_a_box_are_its_elements_in_row_major_order(
    case: tuple[tuple[int, ...], Box],
) -> None:
    shape, region = case
    elements = _indices(shape)[tuple(slice(a, b) for a, b in region)].reshape(-1).tolist()
    assert box_runs(region, shape) == _runs_of(elements)
    base = torch.zeros(shape)
    view = base[tuple(slice(a, b) for a, b in region)]
    assert view_runs(view, base) == _runs_of(elements)
    if view.numel():
        assert view_region(view, base)[0] == region


positions = st.lists(st.integers(0, 40), min_size=1, max_size=20, unique=True).map(sorted)


@settings(max_examples=200)
@given(positions, st.data())
def test_runs_copied_land_where_their_elements_go(source: list[int], data: st.DataObject) -> None:
    """A copy of the view with runs ``source`` into one with runs ``target`` (element k to
    element k, in the views' order): ``map_runs`` of a piece of the source's base gives
    the target positions of the piece's elements, in order; ``map_runs_from`` pairs each
    with the source position its first element comes from."""
    target = sorted(
        data.draw(
            st.lists(st.integers(0, 40), min_size=len(source), max_size=len(source), unique=True)
        )
    )
    low = data.draw(st.integers(0, 41))
    piece = (low, data.draw(st.integers(low, 41)))
    into = dict(zip(source, target, strict=True))
    expected = [into[k] for k in source if piece[0] <= k < piece[1]]
    mapped = list(map_runs(_runs_of(source), piece, _runs_of(target)))
    assert [k for start, stop in mapped for k in range(start, stop)] == expected
    pairs = list(map_runs_from(_runs_of(source), piece, _runs_of(target)))
    assert [run for _, run in pairs] == mapped
    for at, (start, stop) in pairs:
        assert [into[at + k] for k in range(stop - start)] == list(range(start, stop))


def test_a_reshaped_whole_tensor_covers_it_and_a_strided_slice_is_refused() -> None:
    """A view that is every element in order but no box dim by dim (``view(2, 6)`` of a
    (3, 4) tensor) covers the whole tensor along no dim of it; a strided slice is no
    box: refused."""
    base = torch.zeros(3, 4)
    assert view_region(base.view(2, 6), base) == (((0, 3), (0, 4)), (None, None))
    with pytest.raises(Cannot, match="runs along no dim"):
        view_region(base[:, ::2], base)


def test_a_whole_tensor_is_its_own_region_each_dim_along_itself() -> None:
    base = torch.zeros(2, 1, 3)
    assert view_region(base, base) == (((0, 2), (0, 1), (0, 3)), (0, None, 2))
    # A view dim that runs across whole dims: the flat view, rows of it.
    assert view_region(base.view(-1), base)[0] == ((0, 2), (0, 1), (0, 3))
    assert view_region(base[1:].reshape(-1), base)[0] == ((1, 2), (0, 1), (0, 3))
    rows = torch.zeros(4, 2, 3)
    assert view_region(rows[1:3].view(2, 6), rows) == (((1, 3), (0, 2), (0, 3)), (0, None))


def test_a_view_that_lies_outside_its_tensor_is_refused() -> None:
    storage = torch.zeros(20)
    base = storage[5:15]
    for view in (storage[0:3], storage[12:18]):  # before its first element, past its last
        with pytest.raises(Cannot, match="outside the tensor"):
            view_runs(view, base)


def test_a_box_is_cut_along_the_regions_up_to_the_most_parts() -> None:
    parts = [((0, 1),), ((1, 2),), ((2, 3),), ((3, 4),)]
    assert cut_by(((0, 4),), [((1, 2),), ((3, 9),)], max_parts=4) == parts
    assert cut_by(((0, 4),), [((1, 2),), ((3, 9),)], max_parts=3) is None


def test_a_box_contains_the_boxes_inside_it_edges_included() -> None:
    assert contains(((0, 4), (2, 6)), ((1, 4), (2, 6)))  # sharing the outer's edges
    assert not contains(((0, 4), (2, 6)), ((1, 5), (2, 6)))
    assert not contains(((0, 4), (2, 6)), ((0, 4), (1, 6)))


def test_a_view_holding_a_box_in_another_order_covers_that_box() -> None:
    """``unfold`` with its step equal to its size tiles the tensor: each element once, in
    another order than the base's (a dim split into tiles and their rows, the rows moved
    last); so does a permuted ``view``. Their region is the box they hold; a view dim
    runs along a base dim only where it alone spans it. Overlapping windows and expanded
    views hold elements twice: refused, naming why."""
    base = torch.zeros(12, 5)
    assert view_region(base.unfold(0, 3, 3), base) == (((0, 12), (0, 5)), (None, 1, None))
    assert view_region(base.unfold(1, 5, 5), base) == (((0, 12), (0, 5)), (0, None, 1))
    assert view_region(base.view(3, 4, 5).permute(1, 0, 2), base) == (
        ((0, 12), (0, 5)),
        (None, None, 1),
    )
    assert view_region(base[4:8].unfold(0, 2, 2), base) == (((4, 8), (0, 5)), (None, 1, None))
    with pytest.raises(Cannot, match="more than once"):
        view_region(base.unfold(0, 4, 2), base)
    with pytest.raises(Cannot, match="runs along no dim"):  # gaps between the windows
        view_region(base.unfold(0, 2, 3), base)
    with pytest.raises(Cannot, match="more than once"):
        view_region(base[:, :1].expand(12, 3).t(), base)


@st.composite
def row_loops(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[object, ...], int, int]:
    """A base shape, the index of a view into one row (or a block of rows, every
    ``step``-th) by slices of the other dims (steps, which make no box, included), how
    many rows it takes and its step along them."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple))
    step = draw(st.integers(1, 2))
    block = draw(st.integers(1, (shape[0] - 1) // step + 1))
    index: list[object] = []
    for size in shape[1:]:
        start = draw(st.integers(0, size - 1))
        index.append(slice(start, draw(st.integers(start + 1, size)), draw(st.integers(1, 3))))
    return shape, tuple(index), block, step


@settings(max_examples=150)  # cheap: indexing only
@given(row_loops())
def test_a_view_moved_along_rows_keeps_its_region_and_positions(
    case: tuple[tuple[int, ...], tuple[object, ...], int, int],
) -> None:
    """A row loop's views (the same view some rows further, ``w[i, ::2]``) are kept once
    per layout and start in the row (``regions.row_shift``): each row's answer is its
    own elements, as torch's indexing says. A box holds exactly the view's elements; a
    strided slice's condition, over its box, names exactly them (both asked of every
    row in turn, so the later rows take the kept answer, moved)."""
    shape, index, block, step = case
    base = _indices(shape)
    rows = (block - 1) * step + 1
    for row in range(shape[0] - rows + 1):
        view = base[(slice(row, row + rows, step), *index)]
        elements = sorted(view.flatten().tolist())
        try:
            box, _ = view_region(view, base)
        except Cannot:
            box = None
        if box is not None:
            assert sorted(base[tuple(slice(a, b) for a, b in box)].flatten().tolist()) == elements
            continue
        around, cond = strided_positions(view, base)
        values = index_values(cond, around)
        assert values is not None
        inside = base[tuple(slice(a, b) for a, b in around)]
        held = inside[(values != 0).expand(inside.shape)]
        assert sorted(held.tolist()) == elements, (row, around, cond)


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_first_unwritten_is_the_first_element_no_write_holds_in_a_box(data: st.DataObject) -> None:
    """``first_unwritten``, over the whole tensor or a box of it (``within``, asked of a
    temporary's coverage), against a mask of what boxes and strided slices hold."""
    shape = (data.draw(st.integers(1, 6)), data.draw(st.integers(1, 7)))
    base = torch.zeros(shape)
    held = torch.zeros(shape, dtype=torch.bool)
    writes: list[tuple[Box, object]] = []
    for _ in range(data.draw(st.integers(0, 3))):
        rows = sorted(data.draw(st.lists(st.integers(0, shape[0]), min_size=2, max_size=2)))
        cols = sorted(data.draw(st.lists(st.integers(0, shape[1]), min_size=2, max_size=2)))
        step = data.draw(st.integers(1, 3))
        view = base[rows[0] : rows[1], cols[0] : cols[1] : step]
        if view.numel() == 0:
            continue
        held[rows[0] : rows[1], cols[0] : cols[1] : step] = True
        if step == 1:
            writes.append((((rows[0], rows[1]), (cols[0], cols[1])), None))
        else:
            writes.append(strided_positions(view, base))
    r0 = data.draw(st.integers(0, shape[0] - 1))
    c0 = data.draw(st.integers(0, shape[1] - 1))
    within = ((r0, data.draw(st.integers(r0 + 1, shape[0]))), (c0, shape[1]))
    for area in (None, within):
        box = area or ((0, shape[0]), (0, shape[1]))
        missing = (~held[box[0][0] : box[0][1], box[1][0] : box[1][1]]).nonzero()
        want = (
            None
            if not len(missing)
            else (int(missing[0][0]) + box[0][0], int(missing[0][1]) + box[1][0])
        )
        assert first_unwritten(writes, shape, area) == want  # type: ignore[arg-type]


@settings(max_examples=150)  # cheap: indexing only
@given(st.data())
def test_a_flat_step_across_rows_names_exactly_its_elements(data: st.DataObject) -> None:
    """A 1-D view of flat step ``k`` (``t.view(-1)[a:b:k]``, across rows): its box and
    condition (``selection.positions``) name exactly its elements, none after the last
    even where the box around them holds more (each asked at every start in turn)."""
    shape = (data.draw(st.integers(2, 6)), data.draw(st.integers(2, 7)))
    base = _indices(shape)
    step = data.draw(st.integers(2, 9))
    count = data.draw(st.integers(2, 5))
    for start in range(base.numel() - step * (count - 1)):
        view = base.view(-1)[start : start + step * (count - 1) + 1 : step]
        around, cond = strided_positions(view, base)
        values = index_values(cond, around)
        assert values is not None
        inside = base[tuple(slice(a, b) for a, b in around)]
        held = inside[(values != 0).expand(inside.shape)]
        assert sorted(held.tolist()) == sorted(view.tolist()), (start, around)
