"""Accuracy of init programs' functions (stream-format.md §7) against mpmath at 200 bits.

Every value goes through the real path: a ``table`` of inputs in a ``_core.RegisterProgram``
evaluated by ``_core.fill_program`` into a float64 destination. Inputs cover each
function's domain on a log scale plus hard cases (subnormals, values near 0 and 1,
huge and negative arguments, multiples of pi/2 for sin and cos); special values (NaN,
infinities, signed zeros) are checked against C99, as numpy implements it.

Measured maxima (these inputs, and sweeps of ~10x more): exp 0.70, expm1 0.65,
log 0.79, log1p 0.59, sin 0.50, cos 0.55, pow 0.78 ulp; sqrt and reciprocal 0.50 ulp
(correctly rounded); tanh, sigmoid, softplus and rsqrt 0.50 ulp (0.5002 at most over
400k inputs: double-double intermediates, one rounding); erf 0.76 ulp; erfinv 0.50
ulp (0.59 where its residual is erfc's, 0.73 for subnormal results; 55k inputs). Each
is held to 1 ulp (0.5, correct rounding, for sqrt and reciprocal; round_half_even is
exact).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import mpmath
import numpy as np
import pytest
import torch

from shardinit import _core

mpmath.mp.prec = 200

#: 2^20 * pi/2 rounded down: the largest argument of sin and cos (stream-format.md §7).
TRIG_MAX = struct.unpack("<d", struct.pack("<Q", 0x413921FB54442D18))[0]


def evaluate(op: str, *columns: np.ndarray) -> np.ndarray:
    """``op`` applied elementwise to ``columns`` by ``fill_program`` (float64 out)."""
    program = _core.RegisterProgram()
    registers = [program.table(np.ascontiguousarray(c, np.float64), [1], 0) for c in columns]
    if len(registers) == 1:
        program.unary(op, registers[0])
    else:
        program.binary(op, registers[0], registers[1])
    out = np.zeros(len(columns[0]))
    _core.fill_program(3, [len(out)], program, "float64", _core.Region.flat(0), out)
    return out


def ulp_error(got: float, exact: mpmath.mpf) -> float:
    """``|got - exact|`` in units in the last place of binary64 at ``exact``
    (subnormal spacing below 2^-1022; an overflowing exact value must give inf)."""
    if abs(exact) >= mpmath.mpf(2) ** 1024:
        return 0.0 if math.isinf(got) and (got > 0) == (exact > 0) else math.inf
    if exact == 0:
        return 0.0 if got == 0 else math.inf
    exponent = mpmath.frexp(exact)[1] - 1  # floor(log2 |exact|), exactly (mantissa in [0.5, 1))
    spacing = mpmath.ldexp(1, max(exponent - 52, -1074))
    return float(abs(mpmath.mpf(got) - exact) / spacing)


RNG = np.random.default_rng(20261201)


def log_uniform(low: float, high: float, n: int = 1000) -> np.ndarray:
    return np.exp(RNG.uniform(math.log(low), math.log(high), n))


def both_signs(values: np.ndarray) -> np.ndarray:
    return np.concatenate([values, -values])


def bands(*ranges: tuple[float, float], n: int = 100) -> list[np.ndarray]:
    """``n`` uniform inputs in each ``(low, high)``."""
    return [RNG.uniform(low, high, n) for low, high in ranges]


SUBNORMALS = np.array([5e-324, 1e-320, 2.2250738585072e-308, 1e-310])
NEAR_ONE = 1 + RNG.uniform(-1e-6, 1e-6, 200)
PI_MULTIPLES = np.arange(1, 400) * (math.pi / 2)

# erf: both signs on a log scale, and bands around each switch of fdlibm's formulas
# (0.84375, 1.25, 1/0.35, 6).
ERF_INPUTS = np.concatenate(
    [both_signs(log_uniform(1e-300, 7.0, 3000)), SUBNORMALS, both_signs(SUBNORMALS)]
    + [both_signs(b) for b in bands((0.83, 0.86), (1.24, 1.26), (2.85, 2.86), (5.9, 6.1))]
)

CASES: dict[str, tuple[Callable[[mpmath.mpf], mpmath.mpf], np.ndarray, float]] = {
    # op: (exact function, inputs, max ulps accepted)
    "exp": (mpmath.exp, both_signs(log_uniform(1e-300, 709.0)), 1.0),
    "expm1": (
        mpmath.expm1,
        np.concatenate([both_signs(log_uniform(1e-300, 709.0)), SUBNORMALS]),
        1.0,
    ),
    "log": (mpmath.log, np.concatenate([log_uniform(1e-300, 1e300), SUBNORMALS, NEAR_ONE]), 1.0),
    "log1p": (
        mpmath.log1p,
        np.concatenate(
            [log_uniform(1e-300, 1e300), -log_uniform(1e-300, 0.999999), SUBNORMALS, NEAR_ONE - 1]
        ),
        1.0,
    ),
    "sin": (
        mpmath.sin,
        np.concatenate([both_signs(log_uniform(1e-300, TRIG_MAX)), PI_MULTIPLES, [TRIG_MAX]]),
        1.0,
    ),
    "cos": (
        mpmath.cos,
        np.concatenate([both_signs(log_uniform(1e-300, TRIG_MAX)), PI_MULTIPLES, [TRIG_MAX]]),
        1.0,
    ),
    "sqrt": (mpmath.sqrt, np.concatenate([log_uniform(1e-300, 1e300), SUBNORMALS]), 0.5),
    "reciprocal": (lambda x: 1 / x, both_signs(log_uniform(1e-300, 1e300)), 0.5),
    # Around each switch of stream-format.md §7's formulas too: tanh's 2^-28, ln2/32 (the
    # end of its Taylor-only path) and 22; sigmoid's and softplus's +-40, softplus's
    # exp(x) = 2^-5 (x = -3.4657) and 20; the subnormal results below x = -708.4.
    "tanh": (
        mpmath.tanh,
        np.concatenate(
            [both_signs(log_uniform(1e-300, 25.0)), SUBNORMALS]
            + [both_signs(b) for b in bands((3.6e-9, 3.9e-9), (0.021, 0.0223), (21.5, 22.0))]
        ),
        1.0,
    ),
    "sigmoid": (
        lambda x: 1 / (1 + mpmath.exp(-x)),
        np.concatenate(
            [both_signs(log_uniform(1e-300, 746.0)), both_signs(SUBNORMALS)]
            + [both_signs(b) for b in bands((39.5, 40.5), (708.0, 746.5))]
        ),
        1.0,
    ),
    "rsqrt": (
        lambda x: 1 / mpmath.sqrt(x),
        np.concatenate([log_uniform(1e-300, 1e300), log_uniform(1e300, 1.7e308, 100), SUBNORMALS]),
        1.0,
    ),
    "softplus": (
        lambda x: x if x > 20 else mpmath.log1p(mpmath.exp(x)),
        np.concatenate(
            [
                both_signs(log_uniform(1e-300, 700.0)),
                both_signs(SUBNORMALS),
                *bands((3.4, 3.53), (-3.53, -3.4), (-40.5, -39.5), (19.5, 20.5), (-746.5, -708.0)),
            ]
        ),
        1.0,
    ),
    "erf": (mpmath.erf, ERF_INPUTS, 1.0),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_unary_function_is_within_its_ulp_bound_of_mpmath(op: str) -> None:
    exact, inputs, bound = CASES[op]
    got = evaluate(op, inputs)
    errors = [
        ulp_error(g, exact(mpmath.mpf(x)))
        for x, g in zip(inputs.tolist(), got.tolist(), strict=True)
    ]
    worst = int(np.argmax(errors))
    assert errors[worst] <= bound, (
        f"{op}({inputs[worst]!r}) = {got[worst]!r}: {errors[worst]:.3f} ulp"
    )


def test_pow_is_within_one_ulp_of_mpmath() -> None:
    base = np.concatenate([log_uniform(1e-5, 1e5, 1500), NEAR_ONE, log_uniform(1e-300, 1e300, 300)])
    exponent = np.concatenate([RNG.uniform(-60, 60, 1700), RNG.uniform(-1, 1, 300)])
    got = evaluate("pow", base, exponent)
    errors = [
        ulp_error(g, mpmath.power(mpmath.mpf(x), mpmath.mpf(y)))
        for x, y, g in zip(base.tolist(), exponent.tolist(), got.tolist(), strict=True)
    ]
    worst = int(np.argmax(errors))
    assert errors[worst] <= 1.0, (
        f"pow({base[worst]!r}, {exponent[worst]!r}): {errors[worst]:.3f} ulp"
    )
    # Integers to integer powers are exact when representable.
    ints = np.array([2.0, 3.0, -7.0, 10.0, 5.0])
    powers = np.array([52.0, 33.0, 17.0, 22.0, -3.0])
    assert evaluate("pow", ints, powers).tolist() == [2.0**52, 3.0**33, (-7.0) ** 17, 1e22, 0.008]


def _erfinv_inputs() -> np.ndarray:
    """A dense grid of (0, 1), both signs: a log scale down to the subnormals, the tail
    ``1 - 2^-53 k`` and ``1 - d`` on a log scale, and bands around the switches of
    stream-format.md §7's erfinv (its start at 0.85, its residual at erf(2.5), its linear
    part at 2^-960)."""
    tail = 1 - np.arange(1, 400) * 2.0**-53
    near_one = 1 - log_uniform(2.0**-52, 0.1, 1500)
    switches = bands((0.845, 0.855), (0.99958, 0.99961), n=300)
    linear = np.array([2.0**-960, 2.0**-960 * (1 - 2.0**-52), 2.0**-959, 1e-290])
    dense = RNG.uniform(0, 1, 4000)
    values = [log_uniform(1e-320, 1.0, 3000), tail, near_one, *switches, linear, dense]
    return both_signs(np.concatenate(values))


def _erfinv_exact(x: mpmath.mpf, near: float) -> mpmath.mpf:
    """erfinv(x) at 200 bits: Newton on mpmath's erf from the value under test (which is
    within ulps of it: three steps are far below 2^-200; a wrong start shows as a large
    error all the same). Checked against mpmath.erfinv itself below."""
    y = mpmath.mpf(near)
    slope = 2 / mpmath.sqrt(mpmath.pi)
    for _ in range(3):
        y -= (mpmath.erf(y) - x) / (slope * mpmath.exp(-y * y))
    return y


def test_erfinv_is_within_one_ulp_of_mpmath() -> None:
    inputs = _erfinv_inputs()
    got = evaluate("erfinv", inputs)
    # erfinv is odd: one exact value (Newton from the positive input's result) serves both
    # signs, and each sign's result is measured against it (half the mpmath work).
    positive = len(inputs) // 2
    assert (inputs[positive:] == -inputs[:positive]).all()
    exact = [
        _erfinv_exact(mpmath.mpf(x), g)
        for x, g in zip(inputs[:positive].tolist(), got[:positive].tolist(), strict=True)
    ]
    errors = [
        ulp_error(g, e if i < positive else -e)
        for i, (g, e) in enumerate(zip(got.tolist(), exact + exact, strict=True))
    ]
    worst = int(np.argmax(errors))
    assert errors[worst] <= 1.0, (
        f"erfinv({inputs[worst]!r}) = {got[worst]!r}: {errors[worst]:.3f} ulp"
    )
    # The Newton reference is mpmath's erfinv (slow: a few points).
    for x, g in list(zip(inputs.tolist(), got.tolist(), strict=True))[::997]:
        exact = mpmath.erfinv(mpmath.mpf(x))
        assert abs(_erfinv_exact(mpmath.mpf(x), g) - exact) < mpmath.mpf(2) ** -150 * abs(exact)


def test_erfinv_and_round_special_values_are_torchs() -> None:
    specials = np.array(
        [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1 + 2**-52, -2.0, 0.5, -0.5,
         2.5, -2.5, 1.5, 0.49999999999999994, -0.3, 2.0**52 + 1, 2.0**53 + 2, 1e308, 5e-324]
    )  # fmt: skip
    for op, reference in (("erfinv", torch.erfinv), ("round_half_even", torch.round),
                          ("erf", torch.erf)):  # fmt: skip
        want = reference(torch.from_numpy(specials)).tolist()
        got = evaluate(op, specials).tolist()
        for x, g, w in zip(specials.tolist(), got, want, strict=True):
            if math.isnan(w):
                assert math.isnan(g), f"{op}({x}) = {g}, want NaN"
            elif math.isinf(w) or w == 0 or op == "round_half_even":
                assert (g, math.copysign(1, g)) == (w, math.copysign(1, w)), f"{op}({x}) = {g}"
    # Half to even, exact, as numpy's rint, on a log scale.
    values = both_signs(np.concatenate([log_uniform(1e-3, 1e17), np.arange(-20, 20) + 0.5]))
    assert evaluate("round_half_even", values).tolist() == np.rint(values).tolist()


SPECIALS = np.array(
    [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1e308, -1e308, 5e-324, -5e-324]
)
NUMPY = {
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "reciprocal": np.reciprocal,
    "neg": np.negative,
    "abs": np.abs,
    "floor": np.floor,
}


@pytest.mark.parametrize("op", sorted(NUMPY))
def test_special_values_are_c99s(op: str) -> None:
    with np.errstate(all="ignore"):
        want = NUMPY[op](SPECIALS)
    got = evaluate(op, SPECIALS)
    for x, g, w in zip(SPECIALS.tolist(), got.tolist(), want.tolist(), strict=True):
        if math.isnan(w):
            assert math.isnan(g), f"{op}({x}) = {g}, want NaN"
        elif w == 0 or math.isinf(w) or abs(w) == 1:
            assert (g, math.copysign(1, g)) == (w, math.copysign(1, w)), (
                f"{op}({x}) = {g}, want {w}"
            )


def test_sin_and_cos_special_values_and_the_ends_of_their_range() -> None:
    inputs = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, TRIG_MAX, -TRIG_MAX])
    sin, cos = evaluate("sin", inputs), evaluate("cos", inputs)
    assert all(math.isnan(v) for v in [*sin[:3], *cos[:3]])
    assert [math.copysign(1, v) for v in sin[3:5]] == [1, -1]
    assert sin[3] == 0 and cos[3] == cos[4] == 1.0
    # TRIG_MAX is 6.4e-11 from a multiple of pi: a deep cancellation, reduced exactly.
    assert ulp_error(sin[5], mpmath.sin(mpmath.mpf(TRIG_MAX))) <= 1.0
    assert sin[6] == -sin[5]


def test_pow_special_values_are_c99s() -> None:
    nan, inf = math.nan, math.inf
    pairs = [(nan, 0.0), (1.0, nan), (-1.0, inf), (-1.0, -inf), (0.0, -1.0), (-0.0, -1.0),
             (-0.0, 3.0), (inf, -1.0), (-inf, 3.0), (-inf, 2.0), (0.5, inf), (2.0, -inf),
             (-2.0, 0.5), (nan, 1.0), (2.0, 1024.0), (2.0, -1075.0), (-2.0, 1025.0),
             (2.0, -1074.0)]  # fmt: skip
    base, exponent = (np.array(column) for column in zip(*pairs, strict=True))
    with np.errstate(all="ignore"):
        want = np.power(base, exponent)
    got = evaluate("pow", base, exponent)
    for x, y, g, w in zip(
        base.tolist(), exponent.tolist(), got.tolist(), want.tolist(), strict=True
    ):
        if math.isnan(w):
            assert math.isnan(g), f"pow({x}, {y}) = {g}, want NaN"
        else:
            assert (g, math.copysign(1, g)) == (w, math.copysign(1, w)), (
                f"pow({x}, {y}) = {g}, want {w}"
            )
