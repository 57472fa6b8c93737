"""Reindexing an init program (``_program.rewrite.reindex``) moves it to the coordinates of
a view, a transpose, a reshape or a broadcast, on the program nodes themselves (no torch
capture): the values, written by the floor's own evaluator, are torch's view of the same
values, computed by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from shardinit._program.index import (
    as_lin,
    box_index,
    broadcast_coords,
    contiguous_index,
    strided_coords,
    unravel,
)
from shardinit._program.nodes import Bad, Binary, Const, Coord, Expr, Source, Table, TableData
from shardinit._program.rewrite import combine, reindex, simplify, where
from shardinit._program.writer import evaluate_whole
from shardinit.init import Uniform


def _table(values: torch.Tensor) -> Table:
    """``values`` (binary64) as a program over a tensor of their shape."""
    flat = values.to(torch.float64).reshape(-1).clone()
    return Table(TableData(flat), contiguous_index(tuple(values.shape)))


def _whole(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(0, size) for size in shape]


BASE = torch.arange(24.0, dtype=torch.float64).mul(1.5).sub(7.0).view(4, 6)


def test_a_table_program_evaluates_to_its_values() -> None:
    assert torch.equal(evaluate_whole(_table(BASE), (4, 6)), BASE)


def test_a_transpose_is_a_table_read_at_swapped_coordinates() -> None:
    moved = reindex(_table(BASE), [Coord(1), Coord(0)], _whole((6, 4)))
    assert isinstance(moved, Table) and as_lin(moved.index) is not None  # still affine
    assert torch.equal(evaluate_whole(moved, (6, 4)), BASE.T)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t[1:3, ::2],
        lambda t: t[:, 5:],
        lambda t: t.view(-1)[3:20:4],
        lambda t: t.T[2:5],
        lambda t: t.view(2, 2, 6)[:, 1, 1:4],
    ],
)
def test_a_strided_view_reads_the_base_where_torch_does(
    view: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    seen = view(BASE)
    shape = tuple(seen.shape)
    coords, repeats = strided_coords(shape, seen.stride(), seen.storage_offset(), (4, 6))
    assert repeats is None
    moved = reindex(_table(BASE), coords, _whole(shape))
    assert torch.equal(evaluate_whole(moved, shape), seen)


def test_a_reshape_across_rows_gathers_the_values_it_reads() -> None:
    # (4, 6) read as (3, 8): flat k = 8 i + j, at (k // 6, k % 6) of the base (not affine).
    coords = unravel(contiguous_index((3, 8)), (4, 6), _whole((3, 8)))
    moved = reindex(_table(BASE), coords, _whole((3, 8)))
    assert isinstance(moved, Table) and as_lin(moved.index) is not None
    assert torch.equal(moved.data.values, BASE.reshape(-1))
    assert torch.equal(evaluate_whole(moved, (3, 8)), BASE.reshape(3, 8))


def test_an_expression_of_coordinates_is_reindexed_as_torch_computes_it() -> None:
    # w[i, j] = 3 i - j + 0.5, read at the view w[1:, ::2].T: (a, b) -> (b + 1, 2 a).
    expr: Expr = Binary(
        "add", Binary("sub", Binary("mul", Coord(0), Const(3.0)), Coord(1)), Const(0.5)
    )
    rows = torch.arange(4.0, dtype=torch.float64).view(4, 1)
    cols = torch.arange(6.0, dtype=torch.float64).view(1, 6)
    eager = rows * 3 - cols + 0.5
    seen = eager[1:, ::2].T
    coords = [combine("add", Coord(1), Const(1.0)), combine("mul", Coord(0), Const(2.0))]
    moved = reindex(expr, coords, _whole(tuple(seen.shape)))
    assert torch.equal(evaluate_whole(moved, tuple(seen.shape)), seen)


def test_a_broadcast_reads_the_same_row_for_every_row() -> None:
    row = torch.tensor([[2.0, -3.0, 5.5]], dtype=torch.float64)
    coords, stretched = broadcast_coords((1, 3), (4, 3))
    assert coords == (Const(0.0), Coord(1)) and stretched
    moved = reindex(_table(row), coords, _whole((4, 3)))
    assert torch.equal(evaluate_whole(moved, (4, 3)), row.expand(4, 3))


def test_a_random_source_read_twice_is_bad_naming_the_reason() -> None:
    source = Source(Uniform(-1.0, 1.0), torch.float32, 7, (Coord(0),))
    coords, stretched = broadcast_coords((3,), (2, 3))
    assert stretched
    moved = reindex(source, coords, _whole((2, 3)), repeats="expanded")
    assert moved == Bad("expanded")
    once = reindex(source, [Coord(1)], _whole((2, 3)))  # a plain read: the source moved
    assert once == Source(Uniform(-1.0, 1.0), torch.float32, 7, (Coord(1),))


def test_the_identity_is_the_expression_itself_unless_asked_to_rebuild() -> None:
    expr = _table(BASE)
    assert reindex(expr, [Coord(0), Coord(1)], _whole((4, 6))) is expr
    # Folded over a box: a condition decided there is gone, one that is not stays.
    cond = Binary("lt", Coord(0), Const(2.0))
    assert simplify(cond, ((0, 2), (0, 6))) == Const(1.0)
    assert simplify(cond, ((2, 4), (0, 6))) == Const(0.0)
    assert simplify(cond, ((1, 3), (0, 6))) == cond


def test_a_condition_shared_by_programs_folds_over_each_box_as_a_fresh_one() -> None:
    # A strided row loop's programs share one condition object (kept folded per box
    # on it): over each box it folds as the same condition built afresh does.
    def cond() -> Expr:
        return Binary("eq", Binary("mod", Coord(1), Const(2.0)), Const(0.0))

    def program(condition: Expr) -> Expr:
        source = Source(Uniform(-1.0, 1.0), torch.float32, 7, (Coord(0), Coord(1)))
        return where(condition, source, Const(5.0))

    shared = cond()
    boxes = [((0, 1), (0, 1)), ((0, 1), (1, 2)), ((2, 3), (0, 4)), ((2, 3), (1, 2))]
    for box in boxes + boxes[::-1]:
        assert simplify(program(shared), box) == simplify(program(cond()), box)
    source = Source(Uniform(-1.0, 1.0), torch.float32, 7, (Coord(0), Coord(1)))
    assert simplify(program(shared), ((3, 4), (0, 1))) == source  # decided: taken
    assert simplify(program(shared), ((3, 4), (1, 2))) == Const(5.0)  # decided: not


@pytest.mark.parametrize(
    ("shape", "ranges"),
    [
        ((3, 4), [(0, 3), (0, 4)]),
        ((2, 5), [(1, 3), (3, 8)]),
        ((1, 4, 1), [(2, 3), (0, 4), (5, 6)]),
        ((6,), [(4, 10)]),
        ((1, 1), [(3, 4), (2, 3)]),
        ((0, 3), [(2, 2), (0, 3)]),
    ],
)
def test_a_box_index_is_the_row_major_index_shifted_to_the_box(
    shape: tuple[int, ...], ranges: list[tuple[int, int]]
) -> None:
    shifted = [combine("sub", Coord(d), Const(float(start))) for d, (start, _) in enumerate(ranges)]
    assert box_index(shape, ranges) == reindex(contiguous_index(shape), shifted, ranges)
    # Read at the box's own coordinates, it counts the box's elements row-major.
    at_box = [combine("add", Coord(d), Const(float(start))) for d, (start, _) in enumerate(ranges)]
    moved = reindex(box_index(shape, ranges), at_box, _whole(shape))
    count = torch.arange(float(torch.Size(shape).numel()), dtype=torch.float64).view(shape)
    assert torch.equal(evaluate_whole(moved, shape), count)
