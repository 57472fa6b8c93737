"""Elementwise torch operations as init-program steps: one table entry per operation,
shared by the out-of-place form (``torch.log(x)``, ``x + y``), the method
(``x.log()``) and the in-place form (``x.log_()``, ``x += y``), which differ only in
where the result goes.

Each entry says which arguments are tensors or numbers (the operands, in order) and
builds the step from their expressions (:mod:`.program`); torch's broadcasting and
argument names are followed. A cast (``.float()``, ``.to(dtype)``) is a rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .program import Const, Expr, Round, Unary, combine, where

__all__ = ["POINTWISE", "Step", "cast_dtype", "inplace_name", "step_of"]

Build = Callable[[list[Any], dict[str, Any]], Expr]


@dataclass(frozen=True)
class Step:
    """One elementwise operation.

    Attributes:
        operands: the names of its value arguments, in positional order (tensors or
            numbers), after which come ``options`` (numbers or None, by name).
        options: the other arguments' names and defaults.
        build: makes the step from the operands' expressions and the options.
    """

    operands: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    build: Build


def _unary(op: str) -> Step:
    return Step(("input",), (), lambda xs, _: Unary(op, xs[0]))


def _binary(op: str, swap: bool = False) -> Step:
    def build(xs: list[Expr], _: dict[str, Any]) -> Expr:
        a, b = (xs[1], xs[0]) if swap else (xs[0], xs[1])
        return combine(op, a, b)

    return Step(("input", "other"), (), build)


_POWERS = {1.0: None, 2.0: "square", 0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}


def _pow(swap: bool = False) -> Step:
    """``a ** b``; a constant exponent of 1, 2, 0.5, -0.5 or -1 is the exact step torch
    takes for it (``x * x``, ``sqrt``, ...)."""

    def build(xs: list[Expr], _: dict[str, Any]) -> Expr:
        a, b = (xs[1], xs[0]) if swap else (xs[0], xs[1])
        if isinstance(b, Const) and b.value in _POWERS:
            step = _POWERS[b.value]
            if step is None:
                return a
            return combine("mul", a, a) if step == "square" else Unary(step, a)
        return combine("pow", a, b)

    return Step(("input", "exponent"), (), build)


def _add(sign: str, swap: bool = False) -> Step:
    def build(xs: list[Expr], opts: dict[str, Any]) -> Expr:
        a, b = xs
        alpha = opts.get("alpha")
        if alpha is not None and alpha != 1:
            b = combine("mul", b, Const(float(alpha)))
        return combine(sign, b, a) if swap else combine(sign, a, b)

    return Step(("input", "other"), (("alpha", None),), build)


def _div(swap: bool = False) -> Step:
    def build(xs: list[Expr], opts: dict[str, Any]) -> Expr:
        a, b = (xs[1], xs[0]) if swap else (xs[0], xs[1])
        mode = opts.get("rounding_mode")
        if mode == "floor":
            return combine("floordiv", a, b)
        quotient = combine("div", a, b)
        return _trunc(quotient) if mode == "trunc" else quotient

    return Step(("input", "other"), (("rounding_mode", None),), build)


def _trunc(x: Expr) -> Expr:
    negative = combine("lt", x, Const(0.0))
    return where(negative, Unary("neg", Unary("floor", Unary("neg", x))), Unary("floor", x))


def _clamp(xs: list[Expr | None], opts: dict[str, Any]) -> Expr:
    value = xs[0]
    assert value is not None
    if len(xs) > 1 and xs[1] is not None:
        value = combine("max", value, xs[1])
    if len(xs) > 2 and xs[2] is not None:
        value = combine("min", value, xs[2])
    return value


def _softplus(xs: list[Expr], opts: dict[str, Any]) -> Expr:
    beta, threshold = float(opts.get("beta", 1.0)), float(opts.get("threshold", 20.0))
    scaled = xs[0] if beta == 1.0 else combine("mul", xs[0], Const(beta))
    soft: Expr = Unary("softplus", scaled)
    if beta != 1.0:
        soft = combine("div", soft, Const(beta))
    return where(combine("gt", scaled, Const(threshold)), xs[0], soft)


def _where(xs: list[Expr], _: dict[str, Any]) -> Expr:
    return where(combine("ne", xs[0], Const(0.0)), xs[1], xs[2])


def _clamp_max(xs: list[Expr | None], opts: dict[str, Any]) -> Expr:
    return _clamp([xs[0], None, xs[1]], opts)


_CLAMP = Step(("input", "min", "max"), (), _clamp)
_UNARIES = (
    "abs", "reciprocal", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos",
    "tanh", "sigmoid", "floor",
)  # fmt: skip
_POINTWISE: dict[str, Step] = {name: _unary(name) for name in _UNARIES}
_MORE: dict[str, Step] = {
        "neg": _unary("neg"), "negative": _unary("neg"), "__neg__": _unary("neg"),
        "__abs__": _unary("abs"), "absolute": _unary("abs"),
        "square": Step(("input",), (), lambda xs, _: combine("mul", xs[0], xs[0])),
        "softplus": Step(("input",), (("beta", 1.0), ("threshold", 20.0)), _softplus),
        "trunc": Step(("input",), (), lambda xs, _: _trunc(xs[0])),
        "add": _add("add"), "__add__": _add("add"), "__radd__": _add("add", swap=True),
        "sub": _add("sub"), "subtract": _add("sub"), "__sub__": _add("sub"),
        "rsub": _add("sub", swap=True), "__rsub__": _add("sub", swap=True),
        "mul": _binary("mul"), "multiply": _binary("mul"), "__mul__": _binary("mul"),
        "__rmul__": _binary("mul", swap=True),
        "div": _div(), "divide": _div(), "true_divide": _div(), "__truediv__": _div(),
        "__rtruediv__": _div(swap=True), "__rdiv__": _div(swap=True),
        "floor_divide": _binary("floordiv"), "__floordiv__": _binary("floordiv"),
        "__rfloordiv__": _binary("floordiv", swap=True),
        "remainder": _binary("mod"), "__mod__": _binary("mod"),
        "pow": _pow(), "__pow__": _pow(), "__rpow__": _pow(swap=True), "float_power": _pow(),
        "minimum": _binary("min"), "fmin": _binary("min"),
        "maximum": _binary("max"), "fmax": _binary("max"),
        "clamp": _CLAMP, "clip": _CLAMP,
        "clamp_min": Step(("input", "min"), (), _clamp),
        "clamp_max": Step(("input", "max"), (), _clamp_max),
        "where": Step(("condition", "input", "other"), (), _where),
}  # fmt: skip
_POINTWISE.update(_MORE)
_COMPARES = (
    ("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge"), ("eq", "eq"), ("ne", "ne"),
    ("less", "lt"), ("greater", "gt"), ("less_equal", "le"), ("greater_equal", "ge"),
    ("not_equal", "ne"),
)  # fmt: skip
for _name, _op in _COMPARES:
    _POINTWISE[_name] = _POINTWISE[f"__{_op}__"] = _binary(_op)

#: Elementwise operations, by torch function or method name (in-place forms: see
#: :func:`inplace_name`).
POINTWISE: Mapping[str, Step] = _POINTWISE

_INPLACE_DUNDERS = {
    "__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div",
    "__ipow__": "pow", "__ifloordiv__": "floor_divide", "__imod__": "remainder",
}  # fmt: skip


def inplace_name(name: str) -> str | None:
    """The out-of-place operation of an in-place one (``log_`` -> ``log``), or None."""
    if name in _INPLACE_DUNDERS:
        return _INPLACE_DUNDERS[name]
    if name.endswith("_") and not name.startswith("_") and name[:-1] in POINTWISE:
        return name[:-1]
    return None


def step_of(
    step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The operand values (in order; None where absent) and options of a call."""
    names = [*step.operands, *(n for n, _ in step.options)]
    values: dict[str, Any] = {n: d for n, d in step.options}
    for name, value in zip(names, args, strict=False):
        values[name] = value
    for key, value in kwargs.items():
        if key == "out":
            raise TypeError("out= is not followed")
        values["input" if key == "self" else key] = value
    operands = [values.get(n) for n in step.operands]
    return operands, {n: values.get(n) for n, _ in step.options}


_CASTS: Mapping[str, torch.dtype] = {
    "float": torch.float32, "double": torch.float64, "half": torch.float16,
    "bfloat16": torch.bfloat16, "long": torch.int64, "int": torch.int32,
}  # fmt: skip


def cast_dtype(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.dtype | None:
    """The dtype a cast (``float``, ``to``, ``type``, ``type_as``) converts to, or None
    when the call is no cast (``to(device)`` keeps the dtype: None too)."""
    if name in _CASTS:
        return _CASTS[name]
    if name in ("to", "type"):
        for value in [*args[1:], *kwargs.values()]:
            if isinstance(value, torch.dtype):
                return value
            if isinstance(value, torch.Tensor):
                return value.dtype
        return None
    if name == "type_as" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return args[1].dtype
    return None


def cast(expr: Expr, source: torch.dtype, dtype: torch.dtype) -> Expr:
    """A value of dtype ``source`` converted to ``dtype``."""
    if dtype.is_floating_point:
        if dtype == torch.float64 or dtype == source:
            return expr
        return Round(expr, dtype)
    if dtype == torch.bool:
        return combine("ne", expr, Const(0.0))
    if source.is_floating_point:
        return _trunc(expr)
    return expr
