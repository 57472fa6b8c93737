"""``_core.sampler_constants``: the constants the CPU kernels use, for other kernels.

They must be the core's own values (a fill recomputed from them alone is bit for bit
the core's fill) and accurate (trunc_normal's CDF values against mpmath).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

import shardinit
from shardinit import _core, init
from shardinit.init import core_init

mpmath.mp.dps = 60

#: stream-format.md §4 measures Phi within 2.9 ulp of mpmath; 6 ulp tolerated, as in
#: tests/core/test_accuracy.py.
MAX_ULPS = 6

#: Intervals (a, b) of a standard normal: straddling, both in the upper tail, both in
#: the lower tail, far in the upper tail, touching zero.
INTERVALS = [(-2.0, 2.0), (-0.5, 3.0), (5.0, 5.5), (-30.0, -29.0), (8.0, 40.0), (0.0, 1e-3)]


def phi_exact(x: float) -> mpmath.mpf:
    return mpmath.erfc(-mpmath.mpf(x) / mpmath.sqrt(2)) / 2


def ulps(got: float, exact: mpmath.mpf) -> float:
    return float(abs(mpmath.mpf(got) - exact) / math.ulp(float(exact)))


@pytest.mark.parametrize(("a", "b"), INTERVALS)
def test_trunc_normal_constants_match_mpmath(a: float, b: float) -> None:
    mean, std = 0.25, 2.0
    lo, hi = mean + std * a, mean + std * b
    constants = _core.sampler_constants(_core.Init.trunc_normal(mean, std, lo, hi))
    assert list(constants) == ["mean", "std", "a", "b", "lower_cdf", "upper_tail", "mass"]
    assert (constants["mean"], constants["std"], constants["a"], constants["b"]) == (
        mean,
        std,
        lo,
        hi,
    )
    alpha, beta = (lo - mean) / std, (hi - mean) / std
    assert ulps(constants["lower_cdf"], phi_exact(alpha)) <= MAX_ULPS
    assert ulps(constants["upper_tail"], phi_exact(-beta)) <= MAX_ULPS
    # alpha and beta are exact here (std is a power of two); mpmath's floats keep 60
    # significant digits of each Phi, so their difference is exact in every tail.
    mass = phi_exact(beta) - phi_exact(alpha)
    # The stated accuracy of `mass`: inside one tail it is the difference of two tail
    # probabilities (stream-format.md §4), each within MAX_ULPS, plus one rounding;
    # straddling the mean it is a sum of two erf halves, within MAX_ULPS of itself.
    if alpha >= 0:
        terms = [phi_exact(-alpha), phi_exact(-beta)]
    elif beta <= 0:
        terms = [phi_exact(beta), phi_exact(alpha)]
    else:
        terms = [mass]
    bound = sum(MAX_ULPS * math.ulp(float(term)) for term in terms) + math.ulp(float(mass))
    assert abs(mpmath.mpf(constants["mass"]) - mass) <= bound


def test_the_other_samplers_publish_their_parameters() -> None:
    assert _core.sampler_constants(_core.Init.constant(-0.0)) == {"value": -0.0}
    assert math.copysign(1.0, _core.sampler_constants(_core.Init.constant(-0.0))["value"]) < 0
    assert _core.sampler_constants(_core.Init.uniform(-3.0, 5.0)) == {"a": -3.0, "width": 8.0}
    assert _core.sampler_constants(_core.Init.normal(1.0, 0.25)) == {"mean": 1.0, "std": 0.25}


def u32_open(words: np.ndarray) -> np.ndarray:
    return (words.astype(np.float64) + 0.5) * 2.0**-32


def u52_open(words: np.ndarray) -> np.ndarray:
    m = ((words[0::2] >> 6).astype(np.uint64) << 26) | (words[1::2] >> 6).astype(np.uint64)
    return (2 * m + 1).astype(np.float64) * 2.0**-53


def trunc_normal_from_constants(constants: dict[str, float], u: np.ndarray) -> np.ndarray:
    """The sample of stream-format.md §4, from the published constants and the core's
    PhiInv only (scalar, one element at a time)."""
    values = []
    for ui in u.tolist():
        t = constants["lower_cdf"] + ui * constants["mass"]
        if t <= 0.5:
            x = _core.phi_inv(t, 1.0 - t)
        else:
            q = constants["upper_tail"] + (1.0 - ui) * constants["mass"]
            x = -_core.phi_inv(q, 1.0 - q)
        value = constants["mean"] + constants["std"] * x
        values.append(min(max(value, constants["a"]), constants["b"]))
    return np.array(values, dtype=np.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("a", "b"), [(-2.0, 2.0), (5.0, 5.5), (-0.1, 3.0)])
def test_constants_reproduce_the_core_fill(dtype: torch.dtype, a: float, b: float) -> None:
    spec = shardinit.ParamSpec(
        "blocks.0.w", (3, 401), dtype=dtype, init=init.trunc_normal(0.1, 0.7, a, b), seed=9
    )
    constants = _core.sampler_constants(core_init(spec.base_init))
    words_per_element = 2 if dtype == torch.float64 else 1
    words = shardinit.stream_words(9, "blocks.0.w", 0, words_per_element * spec.numel)
    u = u52_open(words) if dtype == torch.float64 else u32_open(words)
    expected = torch.from_numpy(trunc_normal_from_constants(constants, u)).to(dtype)
    assert torch.equal(shardinit.full(spec).view(-1), expected)
