"""Integer spans and exactness (``_program.exact``) on the program nodes themselves (no
torch capture): the bounds of an expression's values over a box hold every value torch
computes there, by enumeration, exactly where the interval arithmetic is exact (each
coordinate read once); and an integer step that may pass 2**53 is refused, naming the
dtype and the reach."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from shardinit._program.cannot import Cannot
from shardinit._program.exact import (
    EXACT_INTEGERS,
    check_exact_integers,
    exact_integers,
    integer_span,
    stored,
)
from shardinit._program.nodes import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Round,
    Source,
    Table,
    TableData,
    Unary,
)
from shardinit.init import Normal, TruncNormal, Uniform


def _values(expr: Expr, ranges: list[tuple[int, int]]) -> torch.Tensor:
    """Every value of ``expr`` (coordinates, constants, + - * // %, neg, abs, floor)
    over ``ranges``, as torch computes it in float64 (the known answer)."""
    grids = torch.meshgrid(
        *(torch.arange(start, stop, dtype=torch.float64) for start, stop in ranges),
        indexing="ij",
    )
    return _at(expr, grids)


def _at(expr: Expr, grids: tuple[torch.Tensor, ...]) -> torch.Tensor:
    if isinstance(expr, Const):
        return torch.full_like(grids[0], expr.value)
    if isinstance(expr, Coord):
        return grids[expr.dim]
    if isinstance(expr, Unary):
        unary = {"neg": torch.neg, "abs": torch.abs, "floor": torch.floor}
        return unary[expr.op](_at(expr.x, grids))
    assert isinstance(expr, Binary)
    a, b = _at(expr.a, grids), _at(expr.b, grids)
    binary = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul,
        "floordiv": torch.floor_divide, "mod": torch.remainder,
        "min": torch.minimum, "max": torch.maximum,
    }  # fmt: skip
    return binary[expr.op](a, b)


def _random_expr(rng: random.Random, depth: int, dims: int) -> Expr:
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.5:
            return Coord(rng.randrange(dims))
        return Const(float(rng.randint(-7, 7)))
    if rng.random() < 0.2:
        return Unary(rng.choice(["neg", "abs", "floor"]), _random_expr(rng, depth - 1, dims))
    op = rng.choice(["add", "sub", "mul", "floordiv", "mod", "min", "max"])
    a = _random_expr(rng, depth - 1, dims)
    if op in ("floordiv", "mod"):  # by a nonzero constant, as index arithmetic divides
        return Binary(op, a, Const(float(rng.choice([-5, -2, 2, 3, 4]))))
    return Binary(op, a, _random_expr(rng, depth - 1, dims))


def test_spans_hold_every_value_torch_computes() -> None:
    rng = random.Random(51)
    for _ in range(300):
        ranges = [(start, start + rng.randint(1, 5)) for start in rng.choices(range(-4, 6), k=2)]
        expr = _random_expr(rng, 4, 2)
        low, high = integer_span(expr, ranges)
        values = _values(expr, ranges)
        assert low <= float(values.min()) and float(values.max()) <= high, (expr, ranges)


@pytest.mark.parametrize(
    ("expr", "ranges"),
    [
        (Binary("sub", Binary("mul", Coord(0), Const(3.0)), Coord(1)), [(0, 4), (2, 5)]),
        (Binary("add", Unary("neg", Coord(0)), Const(10.0)), [(3, 9)]),
        (Binary("mul", Coord(0), Coord(1)), [(-3, 2), (-2, 4)]),
        (Unary("abs", Binary("sub", Coord(0), Const(4.0))), [(0, 10)]),
        (Binary("max", Coord(0), Binary("min", Coord(1), Const(2.0))), [(-5, -1), (0, 6)]),
    ],
)
def test_spans_are_exact_where_each_coordinate_is_read_once(
    expr: Expr, ranges: list[tuple[int, int]]
) -> None:
    values = _values(expr, ranges)
    assert integer_span(expr, ranges) == (float(values.min()), float(values.max()))


def test_spans_of_leaves_and_wraps() -> None:
    table = Table(TableData(torch.tensor([4.0, -2.5, 9.0], dtype=torch.float64)), Coord(0))
    assert integer_span(table, [(0, 3)]) == (-2.5, 9.0)
    nan = Table(TableData(torch.tensor([1.0, math.nan], dtype=torch.float64)), Coord(0))
    assert integer_span(nan, [(0, 2)]) == (-math.inf, math.inf)
    assert integer_span(Coord(0), [(5, 5)]) == (5.0, 5.0)  # an empty range: its start
    big = Binary("mul", Coord(0), Const(100.0))
    assert integer_span(Round(big, torch.int8), [(0, 2)]) == (0.0, 100.0)  # within: kept
    assert integer_span(Round(big, torch.int8), [(0, 3)]) == (-128.0, 127.0)  # wrapped


def test_a_stored_integer_constant_is_wrapped_as_torch_wraps_it() -> None:
    for value, dtype in itertools.product((300, -129, 2**40 + 7, 255), (torch.int8, torch.uint8)):
        eager = torch.tensor(value, dtype=torch.int64).to(dtype)
        assert stored(Const(float(value)), dtype) == Const(float(eager))
    assert stored(Coord(0), torch.int16) == Round(Coord(0), torch.int16)
    assert stored(Coord(0), torch.float64) == Coord(0)


def test_integer_steps_past_two_to_the_53_are_refused_naming_the_reach() -> None:
    square = Binary("mul", Coord(0), Coord(0))
    limit = math.isqrt(int(EXACT_INTEGERS))
    within = exact_integers(square, torch.int64, [(0, limit + 1)])
    assert within == Round(square, torch.int64)
    past = exact_integers(square, torch.int64, [(0, limit + 2)])
    assert isinstance(past, Bad)
    assert f"int64 values in [0, {(limit + 1) ** 2}]" in past.why and "2**53" in past.why
    unbounded = exact_integers(Unary("exp", Coord(0)), torch.int32, [(0, 4)])
    assert isinstance(unbounded, Bad) and "int32 values unbounded" in unbounded.why
    check_exact_integers(Round(square, torch.int64), [(0, limit + 1)])
    with pytest.raises(Cannot, match="beyond 2\\*\\*53"):
        check_exact_integers(Round(square, torch.int64), [(0, limit + 2)])


def test_the_span_of_a_floor_division_is_the_dividends_reach_and_one() -> None:
    """By a divisor of magnitude one at least, ``a // b`` lies within ``|a|`` and one
    (the floor of a negative quotient): the known bound, not a wider one."""
    assert integer_span(Binary("floordiv", Coord(0), Const(3.0)), [(0, 10)]) == (-10.0, 10.0)
    assert integer_span(Binary("floordiv", Coord(0), Const(-2.0)), [(-4, 3)]) == (-5.0, 5.0)
    # A divisor that may be 0 (or between -1 and 1): no bound.
    unbounded = (-math.inf, math.inf)
    assert integer_span(Binary("floordiv", Const(9.0), Coord(0)), [(0, 3)]) == unbounded


def test_a_span_holds_the_values_rounded_to_the_dtype() -> None:
    # 0.1 lies between two float32 values: a draw below 0.1 may round to the one above,
    # and a float64 table's 0.1 cast to float32 is that one; the span must hold it.
    above = float(torch.tensor(0.1).float())
    assert above > 0.1
    uniform = Source(Uniform(0.0, 0.1), torch.float32, 1, (Coord(0),))
    assert integer_span(uniform, [(0, 4)]) == (0.0, above)
    table = Table(TableData(torch.tensor([0.05, 0.1], dtype=torch.float64)), Coord(0))
    assert integer_span(Round(table, torch.float32), [(0, 2)]) == (0.05000000074505806, above)


def test_only_sources_bounded_by_their_stream_have_a_span() -> None:
    # trunc_normal is clamped to [a, b] (stream-format.md §4); a normal is not bounded.
    clamped = Source(TruncNormal(0.0, 1.0, -2.0, 2.0), torch.float32, 2, (Coord(0),))
    assert integer_span(clamped, [(0, 4)]) == (-2.0, 2.0)
    unbounded = Source(Normal(0.0, 1.0), torch.float32, 3, (Coord(0),))
    assert integer_span(unbounded, [(0, 4)]) == (-math.inf, math.inf)
