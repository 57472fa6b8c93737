"""Affine index arithmetic over an element's coordinates: integer forms
``offset + sum(coef * Coord(d))`` (:class:`Lin`), the index operations folded where
exact (:func:`index_op`: ``+ - *``, ``//`` and ``%`` by a constant that stay affine,
comparisons decided over the coordinates' ranges), and the coordinates of views,
broadcasts and row-major flat indices as such expressions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from .._caches import cached
from .nodes import COMPARE, Binary, Const, Coord, Expr, kept

__all__ = [
    "Lin",
    "as_lin",
    "box_index",
    "broadcast_coords",
    "contiguous_index",
    "flat_of_box",
    "in_box",
    "index_op",
    "lin_expr",
    "strided_coords",
    "unravel",
]


@dataclass(frozen=True)
class Lin:
    """``offset + sum(coefs[d] * Coord(d))`` with integer coefficients."""

    offset: int
    coefs: tuple[tuple[int, int], ...]  # (dim, coef), coef != 0, sorted by dim

    def span(self, ranges: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """Smallest and largest value over the half-open coordinate ``ranges``."""
        low = high = self.offset
        for dim, coef in self.coefs:
            start, stop = ranges[dim]
            if stop <= start:
                return (0, -1)
            low += min(coef * start, coef * (stop - 1))
            high += max(coef * start, coef * (stop - 1))
        return low, high


def _lin(offset: int, terms: dict[int, int]) -> Lin:
    return Lin(offset, tuple(sorted((d, c) for d, c in terms.items() if c)))


def as_lin(expr: Expr) -> Lin | None:
    """``expr`` as an affine integer form, or None (kept on the node, as
    :func:`random_key`: index arithmetic asks it of each operand it combines)."""
    return cast("Lin | None", kept(expr, "_as_lin", _as_lin))


def _as_lin(expr: Expr) -> Lin | None:
    if isinstance(expr, Const) and float(expr.value).is_integer():
        return Lin(int(expr.value), ())
    if isinstance(expr, Coord):
        return Lin(0, ((expr.dim, 1),))
    if isinstance(expr, Binary) and expr.op in ("add", "sub", "mul"):
        a, b = as_lin(expr.a), as_lin(expr.b)
        if a is None or b is None:
            return None
        if expr.op == "mul":
            if a.coefs and b.coefs:
                return None
            scale, form = (a.offset, b) if not a.coefs else (b.offset, a)
            return _lin(scale * form.offset, {d: scale * c for d, c in form.coefs})
        sign = 1 if expr.op == "add" else -1
        terms = dict(a.coefs)
        for d, c in b.coefs:
            terms[d] = terms.get(d, 0) + sign * c
        return _lin(a.offset + sign * b.offset, terms)
    return None


def lin_expr(lin: Lin, coord: Callable[[int], Expr] = Coord) -> Expr:
    """The expression of an affine form (integer constants and coordinates), each
    coordinate ``d`` written as ``coord(d)``."""
    expr: Expr | None = None
    for dim, coef in lin.coefs:
        at = coord(dim)
        term: Expr = at if coef == 1 else Binary("mul", at, Const(float(coef)))
        expr = term if expr is None else Binary("add", expr, term)
    if expr is None:
        return Const(float(lin.offset))
    return expr if lin.offset == 0 else Binary("add", expr, Const(float(lin.offset)))


def _divmod(op: str, lin: Lin, q: int, ranges: Sequence[tuple[int, int]]) -> Lin | None:
    """``lin // q`` or ``lin % q`` as an affine form over ``ranges``, where exact."""
    if q <= 0:
        return None
    whole, rest = divmod(lin.offset, q)
    keep: dict[int, int] = {}
    low: dict[int, int] = {}
    for dim, coef in lin.coefs:
        (keep if coef % q == 0 else low)[dim] = coef
    remainder = _lin(rest, low)
    span = remainder.span(ranges)
    if not (span[0] >= 0 and span[1] < q):
        return None
    if op == "floordiv":
        return _lin(whole, {d: c // q for d, c in keep.items()})
    return remainder


def index_op(op: str, a: Expr, b: Expr, ranges: Sequence[tuple[int, int]] | None) -> Expr:
    """``a <op> b``, folded where exact: integer affine arithmetic, ``//`` and ``%`` by a
    constant that stay affine over ``ranges``, comparisons decided over ``ranges``."""
    la, lb = as_lin(a), as_lin(b)
    if la is not None and lb is not None:
        if op in ("add", "sub") or (op == "mul" and not (la.coefs and lb.coefs)):
            folded = as_lin(Binary(op, lin_expr(la), lin_expr(lb)))
            if folded is not None:
                return lin_expr(folded)
        if op in ("floordiv", "mod") and not lb.coefs and ranges is not None:
            exact = _divmod(op, la, lb.offset, ranges)
            if exact is not None:
                return lin_expr(exact)
        if op in COMPARE and ranges is not None:
            diff = as_lin(Binary("sub", lin_expr(la), lin_expr(lb)))
            assert diff is not None
            low, high = diff.span(ranges)
            decided = _decide(op, low, high)
            if decided is not None:
                return Const(float(decided))
    return Binary(op, a, b)


def _decide(op: str, low: int, high: int) -> bool | None:
    """Whether ``x <op> 0`` holds for every (True) or no (False) x in [low, high]."""
    if low > high:
        return True
    tests: dict[str, Callable[[int], bool]] = {
        "lt": lambda x: x < 0, "le": lambda x: x <= 0, "gt": lambda x: x > 0,
        "ge": lambda x: x >= 0, "eq": lambda x: x == 0, "ne": lambda x: x != 0,
    }  # fmt: skip
    test = tests[op]
    if low == high:
        return test(low)
    if op in ("eq", "ne"):
        return None if low <= 0 <= high else op == "ne"
    at_low, at_high = test(low), test(high)
    return at_low if at_low == at_high else None


def in_box(box: Sequence[tuple[int, int]], shape: Sequence[int]) -> Expr:
    """1.0 inside ``box`` (of a tensor of ``shape``), else 0.0."""
    boxed = tuple((int(start), int(stop)) for start, stop in box)
    return _in_box(boxed, tuple(int(size) for size in shape))


@cached  # a fold asks it at each write, of a model's few boxes: one expression each
def _in_box(box: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> Expr:
    """:func:`in_box` of hashable arguments (the expression is immutable, so shared)."""
    cond: Expr = Const(1.0)
    for dim, ((start, stop), size) in enumerate(zip(box, shape, strict=True)):
        for op, bound, trivial in (("ge", start, start <= 0), ("lt", stop, stop >= size)):
            if trivial:
                continue
            test = Binary(op, Coord(dim), Const(float(bound)))
            cond = test if cond == Const(1.0) else Binary("mul", cond, test)
    return cond


def contiguous_index(shape: Sequence[int]) -> Expr:
    """The row-major flat index of an element of a tensor of ``shape``."""
    stride, terms = 1, {}
    for dim in range(len(shape) - 1, -1, -1):
        terms[dim] = stride
        stride *= max(int(shape[dim]), 1)
    return lin_expr(_lin(0, {d: c for d, c in terms.items() if shape[d] != 1}))


def box_index(shape: Sequence[int], ranges: Sequence[tuple[int, int]]) -> Expr:
    """The row-major flat index in a tensor of ``shape`` of the element at ``Coord(0..)``,
    coordinates that run over ``ranges`` (the tensor holds the box they span): the
    expression :func:`.rewrite.reindex` makes of ``contiguous_index(shape)`` read at
    ``Coord(d) - start``, node for node (each step keeps its operands: they are affine,
    and only a step that folds to a constant or a coordinate is replaced)."""
    form = as_lin(contiguous_index(shape))
    assert form is not None and form.offset == 0  # a sum of coordinates times strides

    def shifted(dim: int) -> Expr:
        start = int(ranges[dim][0])
        return Coord(dim) if start == 0 else Binary("sub", Coord(dim), Const(float(start)))

    return lin_expr(form, shifted)


def unravel(
    flat: Expr, shape: Sequence[int], ranges: Sequence[tuple[int, int]]
) -> tuple[Expr, ...]:
    """The coordinates in a row-major tensor of ``shape`` of flat index ``flat``."""
    coords: list[Expr] = []
    stride = 1
    strides = []
    for size in reversed(shape):
        strides.append(stride)
        stride *= max(int(size), 1)
    for size, step in zip(shape, reversed(strides), strict=True):
        if size == 1:
            coords.append(Const(0.0))
            continue
        quotient = index_op("floordiv", flat, Const(float(step)), ranges)
        coords.append(index_op("mod", quotient, Const(float(size)), ranges))
    return tuple(coords)


@cached  # every read of a followed tensor asks it, of a model's few layouts
def strided_coords(
    shape: Sequence[int], stride: Sequence[int], offset: int, base_shape: Sequence[int]
) -> tuple[tuple[Expr, ...], str | None]:
    """The coordinates in a contiguous ``base_shape`` tensor of the element of a view
    (``shape``, ``stride``, ``offset`` in elements) at ``Coord(0..)``; and, when the view
    may read some base element more than once (``expand``, ``unfold``), a reason.
    Cached: the answer is immutable expressions of its hashable arguments."""
    ranges = [(0, int(size)) for size in shape]
    flat: Expr = Const(float(offset))
    for dim, (size, step) in enumerate(zip(shape, stride, strict=True)):
        if size == 1:
            continue
        flat = index_op("add", flat, index_op("mul", Coord(dim), Const(float(step)), None), None)
    return unravel(flat, base_shape, ranges), None if _injective(shape, stride) else "repeats"


def _injective(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether a view never reads one element twice (sufficient: each dim's stride,
    smallest first, steps over everything the smaller ones span; no zero strides)."""
    span = 0
    dims = [(abs(int(t)), int(s)) for s, t in zip(shape, stride, strict=True) if s > 1]
    for step, size in sorted(dims):
        if step <= span:
            return False
        span += step * (size - 1)
    return True


def flat_of_box(shape: Sequence[int], delta: int) -> Expr:
    """``delta`` plus the row-major flat index of a tensor of ``shape`` at ``Coord(0..)``."""
    return index_op("add", contiguous_index(shape), Const(float(delta)), None)


def broadcast_coords(shape: Sequence[int], result: Sequence[int]) -> tuple[tuple[Expr, ...], bool]:
    """Coordinates of an operand of ``shape`` broadcast to ``result`` (right-aligned);
    and whether it is stretched (read more than once)."""
    lead = len(result) - len(shape)
    coords: list[Expr] = []
    stretched = False
    for dim, size in enumerate(shape):
        if size == 1:
            coords.append(Const(0.0))
            stretched = stretched or result[lead + dim] > 1
        else:
            coords.append(Coord(lead + dim))
    stretched = stretched or any(result[d] > 1 for d in range(lead))
    return tuple(coords), stretched
