"""Elementwise torch operations as init-program steps: one table entry per operation,
shared by the out-of-place form (``torch.log(x)``, ``x + y``), the method
(``x.log()``) and the in-place form (``x.log_()``, ``x += y``), which differ only in
where the result goes.

Each entry says which arguments are tensors or numbers (the operands, in order) and
builds the step from their expressions (:mod:`shardinit._program.nodes`); torch's broadcasting and
argument names are followed. A cast (``.float()``, ``.to(dtype)``) is a rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...._program.exact import EXACT_INTEGERS, integer_span
from ...._program.nodes import BINARY, UNARY, Bad, Const, Expr, Round, Unary
from ...._program.rewrite import combine, where

__all__ = [
    "CAST_DTYPES",
    "INPLACE_DUNDERS",
    "POINTWISE",
    "RESULT_DTYPE",
    "Step",
    "cast_dtype",
    "inplace_name",
    "is_inplace",
    "no_formula",
    "step_of",
]

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
    assert op in UNARY, op
    return Step(("input",), (), lambda xs, _: Unary(op, xs[0]))


def _binary(op: str, swap: bool = False) -> Step:
    assert op in BINARY, op

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


def _bound(op: str, x: Expr, bound: Expr) -> Expr:
    """``clamp``'s ``max(x, bound)`` (``op`` "max") or ``min(x, bound)``. A number bound
    is torch's scalar clamp: ``bound`` where ``x`` is beyond it, else ``x`` itself (so
    ``clamp(-0.0, min=0.0)`` keeps ``-0.0``; NaN stays NaN); a tensor bound, or NaN, is
    IEEE's ``maximum``/``minimum`` (torch's tensor clamp: the sign of an equal zero may
    differ)."""
    if isinstance(bound, Const) and not math.isnan(bound.value):
        return where(combine("lt" if op == "max" else "gt", x, bound), bound, x)
    return combine(op, x, bound)


def _clamp(xs: list[Expr | None], opts: dict[str, Any]) -> Expr:
    value = xs[0]
    assert value is not None
    if len(xs) > 1 and xs[1] is not None:
        value = _bound("max", value, xs[1])
    if len(xs) > 2 and xs[2] is not None:
        value = _bound("min", value, xs[2])
    return value


def _hardtanh(low: float | None, high: float | None) -> Build:
    """``hardtanh(x, min_val, max_val)`` (``relu``, ``relu6``: fixed bounds)."""

    def build(xs: list[Expr], opts: dict[str, Any]) -> Expr:
        lo = float(opts["min_val"]) if low is None else low
        hi = float(opts["max_val"]) if high is None else high
        value = _bound("max", xs[0], Const(lo))
        return value if math.isinf(hi) else _bound("min", value, Const(hi))

    return build


def _sign(xs: list[Expr], _: dict[str, Any]) -> Expr:
    """torch's ``sign``: ``(x > 0) - (x < 0)``, so ``+0.0`` for both zeros and for NaN."""
    return combine("sub", combine("gt", xs[0], Const(0.0)), combine("lt", xs[0], Const(0.0)))


def _round(xs: list[Expr], opts: dict[str, Any]) -> Expr:
    """``round``: half to even. ``decimals != 0`` is refused: torch scales by ``10^d`` in
    the tensor's dtype, not a step of its own."""
    decimals = opts.get("decimals") or 0
    if decimals != 0:
        return Bad(f"round(decimals={decimals!r}) is not followed (only decimals=0)")
    return Unary("round_half_even", xs[0])


def _heaviside(xs: list[Expr], _: dict[str, Any]) -> Expr:
    """torch's ``heaviside``: ``values`` where ``x == 0``, else ``x > 0`` (0 for NaN)."""
    x, values = xs
    return where(combine("eq", x, Const(0.0)), values, combine("gt", x, Const(0.0)))


def _lerp(xs: list[Expr], _: dict[str, Any]) -> Expr:
    """torch's ``lerp``: ``start + weight * (end - start)`` where ``|weight| < 0.5``,
    else ``end - (end - start) * (1 - weight)`` (exact at both ends)."""
    start, end, weight = xs
    diff = combine("sub", end, start)
    small = combine("add", start, combine("mul", weight, diff))
    large = combine("sub", end, combine("mul", diff, combine("sub", Const(1.0), weight)))
    if isinstance(weight, Const):
        return small if abs(weight.value) < 0.5 else large
    return where(combine("lt", Unary("abs", weight), Const(0.5)), small, large)


def _addc(op: str) -> Step:
    """``addcmul`` / ``addcdiv``: ``input + value * tensor1 (*|/) tensor2``, in torch's
    order (``value * tensor1`` first)."""

    def build(xs: list[Expr], opts: dict[str, Any]) -> Expr:
        value = opts.get("value")
        value = 1.0 if value is None else float(value)
        scaled = xs[1] if value == 1.0 else combine("mul", Const(value), xs[1])
        return combine("add", xs[0], combine(op, scaled, xs[2]))

    return Step(("input", "tensor1", "tensor2"), (("value", 1.0),), build)


def _softplus(xs: list[Expr], opts: dict[str, Any]) -> Expr:
    beta, threshold = float(opts.get("beta", 1.0)), float(opts.get("threshold", 20.0))
    scaled = xs[0] if beta == 1.0 else combine("mul", xs[0], Const(beta))
    soft: Expr = Unary("softplus", scaled)
    if beta != 1.0:
        soft = combine("div", soft, Const(beta))
    return where(combine("gt", scaled, Const(threshold)), xs[0], soft)


def _where(xs: list[Expr], _: dict[str, Any]) -> Expr:
    return where(combine("ne", xs[0], Const(0.0)), xs[1], xs[2])


def _ceil(xs: list[Expr], _: dict[str, Any]) -> Expr:
    """``-floor(-x)`` (exact; ``ceil(-0.3) = -0.0``)."""
    return Unary("neg", Unary("floor", Unary("neg", xs[0])))


#: The key under which :func:`step_of`'s caller gives a step the dtype of its result,
#: which some defaults are (``nan_to_num``'s ``posinf``: the dtype's largest finite value).
RESULT_DTYPE = "result dtype"


def _nan_to_num(xs: list[Expr], opts: dict[str, Any]) -> Expr:
    """torch's ``nan_to_num``: ``nan`` where ``x != x``, ``posinf`` / ``neginf`` where
    ``x`` is ``+inf`` / ``-inf`` (by default the result dtype's largest and lowest
    finite values), else ``x`` itself; integers are their own values."""
    dtype = opts[RESULT_DTYPE]
    if not dtype.is_floating_point:
        return xs[0]
    finfo = torch.finfo(dtype)
    nan, posinf, neginf = (opts.get(key) for key in ("nan", "posinf", "neginf"))
    nan = Const(0.0 if nan is None else float(nan))
    posinf = Const(finfo.max if posinf is None else float(posinf))
    neginf = Const(finfo.min if neginf is None else float(neginf))
    x = xs[0]
    infinite = where(combine("eq", x, Const(-math.inf)), neginf, x)
    infinite = where(combine("eq", x, Const(math.inf)), posinf, infinite)
    return where(combine("ne", x, x), nan, infinite)


def _clamp_max(xs: list[Expr | None], opts: dict[str, Any]) -> Expr:
    return _clamp([xs[0], None, xs[1]], opts)


_CLAMP = Step(("input", "min", "max"), (), _clamp)
_UNARIES = (
    "abs", "reciprocal", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos",
    "tanh", "sigmoid", "floor", "erf", "erfinv",
)  # fmt: skip
_POINTWISE: dict[str, Step] = {name: _unary(name) for name in _UNARIES}
_ACTIVATION = (("inplace", False),)
_MORE: dict[str, Step] = {
        "special_erf": _unary("erf"), "special_erfinv": _unary("erfinv"),
        "special_expit": _unary("sigmoid"), "special_expm1": _unary("expm1"),
        "special_log1p": _unary("log1p"),
        "special_round": Step(("input",), (("decimals", 0),), _round),
        "sign": Step(("input",), (), _sign), "sgn": Step(("input",), (), _sign),
        "round": Step(("input",), (("decimals", 0),), _round),
        "ceil": Step(("input",), (), _ceil),
        "frac": Step(("input",), (), lambda xs, _: combine("sub", xs[0], _trunc(xs[0]))),
        "fix": Step(("input",), (), lambda xs, _: _trunc(xs[0])),
        "positive": Step(("input",), (), lambda xs, _: xs[0]),
        "relu": Step(("input",), _ACTIVATION, _hardtanh(0.0, math.inf)),
        "relu6": Step(("input",), _ACTIVATION, _hardtanh(0.0, 6.0)),
        "hardtanh": Step(("input",), (("min_val", -1.0), ("max_val", 1.0), *_ACTIVATION),
                         _hardtanh(None, None)),
        "heaviside": Step(("input", "values"), (), _heaviside),
        "lerp": Step(("input", "end", "weight"), (), _lerp),
        "addcmul": _addc("mul"), "addcdiv": _addc("div"),
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
        "nan_to_num": Step(("input",), (("nan", 0.0), ("posinf", None), ("neginf", None)),
                           _nan_to_num),
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

#: Elementwise torch operations that are not followed: no formula of the core's
#: operations gives their value within 1 ulp (or torch computes them in the tensor's
#: dtype in steps of its own).
_NO_FORMULA = frozenset({
    "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "arctan",
    "arcsin", "arccos", "arcsinh", "arccosh", "arctanh", "atan2", "arctan2", "hypot",
    "exp2", "log2", "log10", "logaddexp", "logaddexp2", "logit", "xlogy", "erfc", "erfcx",
    "lgamma", "digamma", "polygamma", "mvlgamma", "i0", "sinc", "copysign", "nextafter",
    "fmod", "deg2rad", "rad2deg", "gelu", "silu", "mish", "elu", "selu",
    "celu", "leaky_relu", "rrelu", "hardsigmoid", "hardswish", "logsigmoid", "softsign",
    "tanhshrink", "threshold", "special_erfc", "special_erfcx", "special_logit",
    "special_ndtr", "special_ndtri", "special_log_ndtr", "special_i0", "special_i0e",
    "special_i1", "special_i1e", "special_xlogy", "special_entr", "special_gammaln",
    "special_digamma", "special_psi", "special_polygamma", "special_multigammaln",
    "special_sinc", "special_exp2",
})  # fmt: skip


def no_formula(name: str) -> bool:
    """Whether ``name`` (or its in-place form, ``atan_``) is an elementwise torch
    operation that shardinit has no exact formula for (see ``_NO_FORMULA``)."""
    return name in _NO_FORMULA or (name.endswith("_") and name[:-1] in _NO_FORMULA)


#: torch's in-place operator dunders (and ``__setitem__``), each with the out-of-place
#: step it is (None: no elementwise step; the operator is refused or routed elsewhere).
INPLACE_DUNDERS: Mapping[str, str | None] = {
    "__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div",
    "__ipow__": "pow", "__ifloordiv__": "floor_divide", "__imod__": "remainder",
    "__iand__": None, "__ior__": None, "__ixor__": None, "__ilshift__": None,
    "__irshift__": None, "__imatmul__": None, "__setitem__": None,
}  # fmt: skip


def is_inplace(name: str) -> bool:
    """Whether ``name`` writes its first argument, by torch's naming convention (a
    trailing underscore; the in-place operators; property setters)."""
    if name.endswith("__"):
        return name in INPLACE_DUNDERS or name.endswith(".__set__")
    return name.endswith("_")


def inplace_name(name: str) -> str | None:
    """The out-of-place operation of an in-place one (``log_`` -> ``log``), or None."""
    if name in INPLACE_DUNDERS:
        return INPLACE_DUNDERS[name]
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
        if key == "inplace" and value:
            raise TypeError("inplace=True is not followed (call the in-place form, e.g. relu_)")
        values["input" if key == "self" else key] = value
    operands = [values.get(n) for n in step.operands]
    return operands, {n: values.get(n) for n, _ in step.options}


#: The casts named by their dtype (``w.float()``); ``to``, ``type`` and ``type_as`` name
#: theirs in their arguments (:func:`cast_dtype`).
CAST_DTYPES: Mapping[str, torch.dtype] = {
    "float": torch.float32, "double": torch.float64, "half": torch.float16,
    "bfloat16": torch.bfloat16, "long": torch.int64, "int": torch.int32,
}  # fmt: skip


def cast_dtype(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.dtype | None:
    """The dtype a cast (``float``, ``to``, ``type``, ``type_as``) converts to, or None
    when the call is no cast (``to(device)`` keeps the dtype: None too)."""
    if name in CAST_DTYPES:
        return CAST_DTYPES[name]
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


def cast(
    expr: Expr, source: torch.dtype, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]
) -> Expr:
    """A value of dtype ``source`` converted to ``dtype``, over the coordinate ``ranges``
    of the result (:func:`float_to_integer` bounds the values over them)."""
    if dtype.is_floating_point:
        if dtype == torch.float64 or dtype == source:
            return expr
        return Round(expr, dtype)
    if dtype == torch.bool:
        return combine("ne", expr, Const(0.0))
    if source.is_floating_point:
        return float_to_integer(expr, source, dtype, ranges)
    return expr


def float_to_integer(
    expr: Expr, source: torch.dtype, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]
) -> Expr:
    """A float value cast to the integer ``dtype``: truncated toward zero, where C++
    defines the cast (the truncated value lies in ``dtype``'s range; torch casts to
    uint8 through int64, whose wrap is defined, kept here within 2**53, where binary64
    is exact). Where some value over ``ranges`` may be NaN, infinite or out of that
    range (interval bounds), :class:`Bad`: torch's result there is the platform's
    (x86 gives the lowest integer, others saturate), not a value shardinit can give."""
    low, high = integer_span(expr, ranges)
    info = torch.iinfo(dtype)
    least, most = (
        (-EXACT_INTEGERS, EXACT_INTEGERS) if dtype == torch.uint8 else (info.min, info.max)
    )
    if least - 1 < low and high < most + 1:
        return _trunc(expr)
    reach = "not bounded" if math.isinf(low) or math.isinf(high) else f"in [{low}, {high}]"
    names = [str(d).removeprefix("torch.") for d in (source, dtype)]
    return Bad(
        f"a cast of {names[0]} values to {names[1]} where a value may be NaN, infinite or "
        f"out of {names[1]}'s range (the values are {reach}): C++ leaves that cast "
        "undefined, and torch's result differs between platforms (clamp the values into "
        "the range first, or cast values known at capture)"
    )
