"""The merged union of written boxes (``_program.coverage.Coverage``) against the plain
truth, a boolean grid with each box set in it, on random boxes; its merged form (rows
written one by one are one interval, in any order); and the writer, which sweeps the
operations of a record back with it, against the last write of each element. The map of
a value per piece (``BoxMap``) against a grid holding each element's value."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shardinit import init, shard
from shardinit._program import CapturedOp, ParamRecord
from shardinit._program.actions import Fill
from shardinit._program.coverage import BoxMap, Coverage, box_union_covers

Box = tuple[tuple[int, int], ...]


@st.composite
def boxes_of(draw: st.DrawFn, shape: tuple[int, ...], most: int = 12) -> list[Box]:
    """Up to ``most`` boxes of ``shape``, now and then an empty one."""
    count = draw(st.integers(0, most))
    boxes = []
    for _ in range(count):
        box = []
        for size in shape:
            start = draw(st.integers(0, size - 1))
            box.append((start, draw(st.integers(start + 1, size))))
        if draw(st.integers(0, 9)) == 0:
            box[0] = (box[0][0], box[0][0])
        boxes.append(tuple(box))
    return boxes


@st.composite
def union_case(draw: st.DrawFn) -> tuple[tuple[int, ...], list[Box], list[Box]]:
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    return shape, draw(boxes_of(shape)), draw(boxes_of(shape, most=8))


def grid_of(shape: tuple[int, ...], boxes: list[Box]) -> torch.Tensor:
    grid = torch.zeros(shape, dtype=torch.bool)
    for box in boxes:
        grid[tuple(slice(a, b) for a, b in box)] = True
    return grid


def grid_covers(grid: torch.Tensor, box: Box) -> bool:
    return bool(grid[tuple(slice(a, b) for a, b in box)].all())


def check_against_grid(shape: tuple[int, ...], boxes: list[Box], queries: list[Box]) -> None:
    """After each box added, every query, every box so far, every single element and the
    whole tensor are answered as the grid of the boxes so far answers them (``covers``
    and ``meets``)."""
    union = Coverage(len(shape))
    whole = tuple((0, size) for size in shape)
    cells = [tuple((i, i + 1) for i in at) for at in itertools.product(*map(range, shape))]
    for count, box in enumerate(boxes, 1):
        union.add(box)
        grid = grid_of(shape, boxes[:count])
        for query in [whole, *boxes[:count], *queries, *cells]:
            assert union.covers(query) == grid_covers(grid, query), (boxes[:count], query)
            # ``meets``: some element of the query is in the union, as the grid says.
            met = bool(grid[tuple(slice(a, b) for a, b in query)].any())
            assert union.meets(query) == met, ("meets", boxes[:count], query)
    assert box_union_covers(boxes, shape) == grid_covers(grid_of(shape, boxes), whole)


@given(union_case())
def test_covers_is_the_grid(case: tuple[tuple[int, ...], list[Box], list[Box]]) -> None:
    check_against_grid(*case)


def test_covers_is_the_grid_on_many_random_unions() -> None:
    # Hypothesis draws few examples by default (make test): 300 seeded unions besides.
    rng = random.Random(51)
    for _ in range(300):
        shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
        boxes = []
        for _ in range(rng.randint(1, 10)):
            starts = [(rng.randrange(size), size) for size in shape]
            boxes.append(tuple((a, rng.randint(a + 1, size)) for a, size in starts))
        check_against_grid(shape, boxes, [])


@given(union_case(), st.randoms(use_true_random=False))
def test_merged_form_is_canonical(
    case: tuple[tuple[int, ...], list[Box], list[Box]], rng: random.Random
) -> None:
    # The same set, whatever boxes and order made it, has the same form: the union of
    # the boxes in another order, and the union of the grid's single elements.
    shape, boxes, _ = case
    shuffled = list(boxes)
    rng.shuffle(shuffled)
    cells = [
        tuple((i, i + 1) for i in index)
        for index in itertools.product(*(range(s) for s in shape))
        if grid_of(shape, boxes)[index]
    ]
    forms = {repr(Coverage(len(shape), order)._level) for order in (boxes, shuffled, cells[::-1])}
    assert len(forms) == 1


@pytest.mark.parametrize("order", ["forward", "backward", "shuffled"])
def test_rows_merge_into_one_interval(order: str) -> None:
    # 4096 rows of a (4096, 64) weight, then per-expert slices of a 3-d tensor: one
    # interval per dim, whatever order wrote them.
    rows = list(range(4096))
    if order == "backward":
        rows.reverse()
    elif order == "shuffled":
        random.Random(0).shuffle(rows)
    union = Coverage(2)
    for row in rows:
        assert not union.covers(((0, 4096), (0, 64)))
        union.add(((row, row + 1), (0, 64)))
        assert order == "shuffled" or union.intervals() == 2  # in order: one run all along
    assert union.covers(((0, 4096), (0, 64)))
    assert union.intervals() == 2
    experts = Coverage(3, [((e, e + 1), (0, 8), (0, 16)) for e in range(1024)])
    assert experts.intervals() == 3 and experts.covers(((0, 1024), (0, 8), (0, 16)))
    columns = Coverage(2, [((0, 64), (c, c + 1)) for c in range(0, 32)])
    assert columns.intervals() == 2 and not columns.covers(((0, 64), (0, 33)))


def test_known_answers() -> None:
    union = Coverage(2, [((0, 2), (0, 4)), ((2, 4), (0, 2))])
    assert union.covers(((0, 4), (0, 2)))
    assert not union.covers(((0, 4), (0, 3)))
    assert union.covers(((1, 1), (0, 9)))  # an empty box is covered
    union.add(((2, 4), (2, 4)))
    assert union.covers(((0, 4), (0, 4))) and union.intervals() == 2
    scalar = Coverage(0)
    assert not scalar.covers(())
    scalar.add(())
    assert scalar.covers(())
    with pytest.raises(ValueError, match="a box of 1 dims"):
        union.add(((0, 1),))


@given(union_case(), st.integers(0, 2**32))
def test_writer_gives_each_element_its_last_write(
    case: tuple[tuple[int, ...], list[Box], list[Box]], seed: int
) -> None:
    # Constant fills of random boxes, the first of all of it: each element holds the
    # constant of the last box covering it, over the whole tensor and over parts.
    shape, boxes, queries = case
    whole = tuple((0, size) for size in shape)
    regions = [whole, *(b for b in boxes if all(a < z for a, z in b))]
    ops = tuple(
        CapturedOp(region, Fill(init.constant(float(k))), "fill_", "test")
        for k, region in enumerate(regions)
    )
    record = ParamRecord("w", shape, torch.float32, ops)
    expected = torch.zeros(shape)
    for k, region in enumerate(regions):
        expected[tuple(slice(a, b) for a, b in region)] = float(k)
    writer = shard.writer()
    for query in [whole, *(q for q in queries if all(a < z for a, z in q))]:
        got = writer.box(record, seed, query)
        assert torch.equal(got, expected[tuple(slice(a, b) for a, b in query)]), query


def _elements(box: Box) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(a, b) for a, b in box)))


@given(union_case())
def test_box_map_is_the_grid(case: tuple[tuple[int, ...], list[Box], list[Box]]) -> None:
    # Each box appends its number to the value of the elements it covers; after each,
    # the pieces met by every query (and the whole tensor) tile it, once each element,
    # with the grid's value of each element.
    shape, boxes, queries = case
    pieces = BoxMap(shape, ())
    grid = {at: () for at in _elements(tuple((0, size) for size in shape))}
    for number, box in enumerate(boxes):
        pieces.update(box, lambda old, number=number: (*old, number))
        for at in _elements(box):
            grid[at] = (*grid[at], number)
        for query in [*queries, tuple((0, size) for size in shape)]:
            seen: dict[tuple[int, ...], object] = {}
            for piece, value in pieces.pieces(query):
                for at in _elements(piece):
                    assert at not in seen
                    seen[at] = value
            assert seen == {at: grid[at] for at in _elements(query)}


def test_box_map_rows_are_one_piece_each_and_join() -> None:
    pieces = BoxMap((4096, 64), "never")
    for row in range(4096):
        pieces.update(((row, row + 1), (0, 64)), lambda old, row=row: row)
    assert len(pieces.pieces(((0, 4096), (0, 64)))) == 4096
    assert pieces.pieces(((7, 8), (3, 9))) == [(((7, 8), (3, 9)), 7)]
    pieces.update(((0, 4096), (0, 64)), lambda old: "all")
    assert pieces.pieces(((0, 4096), (0, 64))) == [(((0, 4096), (0, 64)), "all")]
