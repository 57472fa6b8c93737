"""Index arithmetic of init programs (``_program.index``: a row-major flat index, a box's
flat positions) run by the core's register machine: the values are the indices torch
gives, for every dim size (1, whose coordinate is always 0, and 2 among them)."""

from __future__ import annotations

import itertools
import math
import operator

import pytest
import torch

from shardinit import _fill, init
from shardinit._program.compile import compile_program
from shardinit._program.exact import integer_span
from shardinit._program.index import Lin, _decide, contiguous_index, flat_of_box, unravel
from shardinit._program.nodes import Binary, Const, Coord
from shardinit.spec import ParamSpec

SHAPES = [(2, 3, 2), (1, 2, 1, 3), (2, 2), (5,), (3, 1)]


def _values(expr: object, shape: tuple[int, ...]) -> torch.Tensor:
    compiled = compile_program(expr, shape)  # type: ignore[arg-type]
    assert isinstance(compiled, _fill.Registers)
    spec = ParamSpec("i", shape, torch.float32, init.zeros(), seed=0)
    out = torch.full(shape, float("nan"))
    whole = tuple((0, size) for size in shape)
    _fill.fill(spec, whole, out, threads=1, chunk_bytes=1 << 20, registers=compiled)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_contiguous_index_is_the_row_major_flat_index(shape: tuple[int, ...]) -> None:
    expected = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    assert torch.equal(_values(contiguous_index(shape), shape), expected)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_flat_positions_of_a_box_start_at_its_offset(shape: tuple[int, ...]) -> None:
    expected = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) + 7
    assert torch.equal(_values(flat_of_box(shape, 7), shape), expected)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unravelling_the_flat_index_gives_each_coordinate(shape: tuple[int, ...]) -> None:
    ranges = [(0, size) for size in shape]
    coords = unravel(contiguous_index(shape), shape, ranges)
    grid = torch.meshgrid(
        *(torch.arange(size, dtype=torch.float32) for size in shape), indexing="ij"
    )
    for dim, coord in enumerate(coords):
        if shape[dim] == 1:  # the coordinate along a dim of size 1 is the constant 0
            assert coord == Const(0.0)
            continue
        assert torch.equal(_values(coord, shape), grid[dim]), dim


COMPARISONS = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_a_comparison_with_zero_is_decided_only_when_every_value_agrees(op: str) -> None:
    """``x <op> 0`` over [low, high]: True when it holds for every x, False for none,
    None (left to the run) otherwise."""
    for low, high in itertools.combinations_with_replacement(range(-3, 4), 2):
        holds = {COMPARISONS[op](x, 0) for x in range(low, high + 1)}
        expected = True if holds == {True} else False if holds == {False} else None
        assert _decide(op, low, high) is expected, (op, low, high)


@pytest.mark.parametrize("op", ["min", "max", "add", "sub", "mul"])
def test_the_span_of_two_coordinates_bounds_their_values_exactly(op: str) -> None:
    """Interval arithmetic over coordinates [0, 3) x [2, 6): the exact bounds (each
    operand's extremes are reached together here)."""
    ranges = [(0, 3), (2, 6)]
    apply = {"min": min, "max": max, "add": operator.add, "sub": operator.sub,
             "mul": operator.mul}[op]  # fmt: skip
    values = [apply(x, y) for x in range(0, 3) for y in range(2, 6)]
    assert integer_span(Binary(op, Coord(0), Coord(1)), ranges) == (min(values), max(values))


@pytest.mark.parametrize(
    ("lin", "ranges"),
    [
        (Lin(3, ((0, 2), (1, -3))), [(1, 4), (0, 5)]),
        (Lin(-1, ((0, 5),)), [(2, 3)]),  # one value
        (Lin(0, ((0, -1), (1, 7))), [(0, 2), (3, 9)]),
    ],
)
def test_the_span_of_an_affine_index_is_its_smallest_and_largest_value(
    lin: Lin, ranges: list[tuple[int, int]]
) -> None:
    values = [
        lin.offset + sum(coef * point[dim] for dim, coef in lin.coefs)
        for point in itertools.product(*(range(start, stop) for start, stop in ranges))
    ]
    assert lin.span(ranges) == (min(values), max(values))


@pytest.mark.parametrize("op", ["floordiv", "mod"])
def test_the_span_of_a_division_by_a_positive_divisor_bounds_its_values(op: str) -> None:
    """Divisors in [1, 3): the span is finite and holds every value."""
    apply = {"floordiv": operator.floordiv, "mod": operator.mod}[op]
    values = [apply(x, y) for x in range(-4, 5) for y in range(1, 3)]
    low, high = integer_span(Binary(op, Coord(0), Coord(1)), [(-4, 5), (1, 3)])
    assert low <= min(values) and max(values) <= high
    assert math.isfinite(low) and math.isfinite(high)
