"""Exactness of a program's values in the core's binary64 registers: integer steps
checked to stay within 2**53 (:func:`exact_integers`, over interval bounds of the
values, :func:`integer_span`), values as a tensor of a dtype stores them
(:func:`stored`), float ``//`` and ``%`` as torch's kernels compute them
(:func:`in_dtype`), and constants a dtype holds exactly (a plain stream-v1 fill:
:func:`bare_source`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch

from .._caches import cached
from ..init import BaseInit, Constant, TruncNormal, Uniform
from .cannot import Cannot
from .nodes import (
    COMPARE,
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Round,
    Source,
    Table,
    Unary,
    Where,
    kept_per_key,
    walk_nodes,
)

__all__ = [
    "EXACT_INTEGERS",
    "INTEGER_DTYPES",
    "bare_source",
    "check_exact_integers",
    "exact_integers",
    "holds_exactly",
    "in_dtype",
    "integer_span",
    "stored",
]

_ROUNDED = (torch.float32, torch.float16, torch.bfloat16)
#: Integer dtypes a program stores in: ``Round(x, dtype)`` of them wraps ``x`` (an exact
#: integer) into the dtype's range as torch's two's-complement arithmetic does.
INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
#: Integers beyond this are not all exact in binary64, the core's registers.
EXACT_INTEGERS = float(2**53)


def stored(expr: Expr, dtype: torch.dtype) -> Expr:
    """``expr`` as a tensor of ``dtype`` holds it (integers: wrapped, see
    :func:`exact_integers` for when that is exact; bool: whether it is nonzero, NaN
    included, as torch converts)."""
    if dtype == torch.bool and not isinstance(expr, Source):
        if isinstance(expr, Const):
            return Const(float(expr.value != 0.0))
        if not (isinstance(expr, Binary) and expr.op in COMPARE):
            return Binary("ne", expr, Const(0.0))
        return expr
    if (dtype in _ROUNDED or dtype in INTEGER_DTYPES) and not isinstance(expr, Source):
        if isinstance(expr, Round) and expr.dtype == dtype:
            return expr
        if isinstance(expr, Const) and dtype in INTEGER_DTYPES:
            if not math.isfinite(expr.value):  # torch refuses it (fill_, full)
                return Bad(f"{expr.value} stored in {str(dtype).removeprefix('torch.')}")
            return Const(float(_wrapped(int(expr.value), dtype)))
        return Round(expr, dtype)
    return expr


def _wrapped(value: int, dtype: torch.dtype) -> int:
    info = torch.iinfo(dtype)
    return (value - info.min) % (1 << info.bits) + info.min


def exact_integers(expr: Expr, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]) -> Expr:
    """``expr``, the value of a step whose result is of integer ``dtype``, as stored in it;
    :class:`Bad` when some value over ``ranges`` may lie beyond 2**53 (binary64 registers
    would round it, where torch's int64 is exact or wraps), or is not known to be bounded.
    Every integer temporary was checked so when made, so its operands are exact."""
    if dtype not in INTEGER_DTYPES or isinstance(expr, Bad):
        return expr
    try:
        _check_exact(expr, dtype, ranges)
    except Cannot as cannot:  # an expression: refused only where it reaches a tensor
        return Bad(str(cannot))
    return stored(expr, dtype)


def check_exact_integers(expr: Expr, ranges: Sequence[tuple[int, int]]) -> None:
    """Checks that no integer step of ``expr`` (a ``Round`` to an integer dtype, over
    ``ranges``) may pass 2**53 before its wrap (see :func:`exact_integers`).

    Raises:
        Cannot: why one may.
    """
    key = _ranges_key(ranges)
    if kept_per_key(expr, "_exact", key, lambda node: _exact_step(node, key, ranges)):
        return  # every step exact (kept per node: a fold is checked after each write)
    for node in walk_nodes(expr):
        if isinstance(node, Round) and node.dtype in INTEGER_DTYPES:
            _check_exact(node.x, node.dtype, ranges)


def _exact_step(node: Expr, key: object, ranges: Sequence[tuple[int, int]]) -> bool:
    """Whether no integer step of ``node`` may pass 2**53, its children's answers kept."""
    if not all(child.__dict__["_exact"][key] for child in node.children()):
        return False
    if isinstance(node, Round) and node.dtype in INTEGER_DTYPES:
        low, high = integer_span(node.x, ranges)
        return low >= -EXACT_INTEGERS and high <= EXACT_INTEGERS
    return True


def _ranges_key(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(start), int(stop)) for start, stop in ranges)


def _check_exact(expr: Expr, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]) -> None:
    low, high = integer_span(expr, ranges)
    if not (low >= -EXACT_INTEGERS and high <= EXACT_INTEGERS):
        reach = (
            "unbounded" if math.isinf(low) or math.isinf(high) else f"in [{low:.0f}, {high:.0f}]"
        )
        raise Cannot(
            f"{str(dtype).removeprefix('torch.')} values {reach}: integer arithmetic beyond "
            "2**53 is not exact in the program engine's binary64 (compute them on the CPU "
            "and copy the tensor, or keep them within 2**53)"
        )


def in_dtype(expr: Expr, dtype: torch.dtype) -> Expr:
    """``expr``, a step whose result is of float ``dtype``, as torch's kernel computes it
    where binary64 would differ by more than the last bits: ``%`` (``remainder``) takes a
    Python number operand rounded to ``dtype``, as torch's kernel does (then the exact
    ``fmod`` of two ``dtype`` values and one rounded addition: binary64 then ``dtype`` is
    torch's value bit for bit). ``//`` (``floor_divide``) in float32, float16 or bfloat16
    is :class:`Bad`: torch rounds ``(a - fmod(a, b)) / b`` in ``dtype`` at each step, and a
    quotient past ``dtype``'s precision then floors to another integer than binary64's."""
    if dtype not in _ROUNDED or not isinstance(expr, Binary) or expr.op not in ("mod", "floordiv"):
        return expr
    if expr.op == "floordiv":
        name = str(dtype).removeprefix("torch.")
        return Bad(
            f"floor_divide (//) of {name} values: torch rounds its steps in {name}, which "
            "the program engine's binary64 does not reproduce exactly (divide in float64, "
            "or with values known at capture)"
        )
    a, b = (
        Const(float(torch.tensor(x.value, dtype=dtype, device="cpu")))
        if isinstance(x, Const)
        else x
        for x in (expr.a, expr.b)
    )
    return Binary("mod", a, b)


def integer_span(expr: Expr, ranges: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """Bounds ``(low, high)`` of ``expr``'s values over the half-open coordinate
    ``ranges`` (interval arithmetic; ``(-inf, inf)`` where not known). Kept on each node
    per ``ranges``: a temporary's fold is checked after each write, mostly of the
    nodes checked before."""
    key = _ranges_key(ranges)

    def span(node: Expr) -> tuple[float, float]:
        spans = {id(child): child.__dict__["_spans"][key] for child in node.children()}
        return _span(node, spans, ranges)

    return cast("tuple[float, float]", kept_per_key(expr, "_spans", key, span))


_UNKNOWN = (-math.inf, math.inf)


def _span(
    node: Expr, spans: dict[int, tuple[float, float]], ranges: Sequence[tuple[int, int]]
) -> tuple[float, float]:
    if isinstance(node, Const):
        return (node.value, node.value) if not math.isnan(node.value) else _UNKNOWN
    if isinstance(node, Coord):
        start, stop = ranges[node.dim]
        return (float(start), float(max(stop - 1, start)))
    if isinstance(node, Source):
        if isinstance(node.init, (Uniform, TruncNormal)):  # within [a, b] (stream-format.md §4)
            return _rounded(float(node.init.a), float(node.init.b), node.dtype)
        return _UNKNOWN
    if isinstance(node, Table):
        values = node.data.values
        if values.numel() == 0 or bool(values.isnan().any()):
            return _UNKNOWN
        return (float(values.min()), float(values.max()))
    if isinstance(node, Round):
        low, high = spans[id(node.x)]
        if node.dtype in INTEGER_DTYPES:  # within the range: kept; else wrapped anywhere in it
            info = torch.iinfo(node.dtype)
            if not (info.min <= low and high <= info.max):
                return (float(info.min), float(info.max))
            return (low, high)
        return _rounded(low, high, node.dtype)
    if isinstance(node, Where):
        (a0, a1), (b0, b1) = spans[id(node.a)], spans[id(node.b)]
        return (min(a0, b0), max(a1, b1))
    if isinstance(node, Unary):
        return _unary_span(node.op, spans[id(node.x)])
    if isinstance(node, Binary):
        return _binary_span(node.op, spans[id(node.a)], spans[id(node.b)])
    return _UNKNOWN


def _rounded(low: float, high: float, dtype: torch.dtype) -> tuple[float, float]:
    """The bounds of the values in ``[low, high]`` rounded to ``dtype``: the bounds
    rounded (rounding is monotone; a bound between two values of a float dtype may round
    past itself, and so may a value next to it)."""
    if not dtype.is_floating_point:
        return (low, high)
    rounded = torch.tensor([low, high], dtype=torch.float64, device="cpu").to(dtype).tolist()
    return (float(rounded[0]), float(rounded[1]))


def _unary_span(op: str, x: tuple[float, float]) -> tuple[float, float]:
    low, high = x
    if op == "neg":
        return (-high, -low)
    if op == "abs":
        return (0.0 if low <= 0 <= high else min(abs(low), abs(high)), max(abs(low), abs(high)))
    if op in ("floor", "round_half_even"):
        return (
            math.floor(low) if math.isfinite(low) else low,
            math.ceil(high) if math.isfinite(high) else high,
        )
    return _UNKNOWN


def _binary_span(op: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if op in COMPARE:
        return (0.0, 1.0)
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op in ("min", "max"):
        pick = min if op == "min" else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    if any(math.isinf(v) for v in (*a, *b)):
        return _UNKNOWN
    if op == "mul":
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if op == "mod":
        reach = max(abs(b[0]), abs(b[1]))
        return (-reach, reach)
    if op == "floordiv" and (b[0] >= 1 or b[1] <= -1):
        reach = max(abs(a[0]), abs(a[1])) + 1
        return (-reach, reach)
    return _UNKNOWN


def bare_source(expr: Expr) -> BaseInit | None:
    """The initializer when ``expr`` is nothing but a random source or a constant (then
    the op is a plain fill: stream v1 values, whatever dtype the temporary had). NaN and
    +-inf are no initializer's constant: a program's (the core's evaluator writes them)."""
    while isinstance(expr, Round) and isinstance(expr.x, Source | Const):
        if isinstance(expr.x, Const) and not holds_exactly(expr.x.value, expr.dtype):
            return None
        expr = expr.x
    if isinstance(expr, Source):
        return expr.init
    if isinstance(expr, Const) and math.isfinite(expr.value):
        return Constant(float(expr.value))
    return None


@cached
def holds_exactly(value: float, dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` holds ``value`` exactly (then a fill by it is the
    stream-v1 constant fill). Cached: the writer asks at every constant fill it writes,
    mostly of the same few."""
    return float(torch.tensor(value, dtype=torch.float64, device="cpu").to(dtype)) == value
