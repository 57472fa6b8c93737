"""Distributions: each initializer's samples against its law (KS test, moments) with
stated tolerances, and fan-based bounds equal to torch.nn.init's for the same shape."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

import shardinit
from shardinit import init

#: Significance level of every KS test below: with a correct generator each test fails
#: with probability 1e-4, and the seeds are fixed, so a failure means a real defect.
ALPHA = 1e-4


def sample(
    initializer: init.Initializer,
    n: int,
    dtype: torch.dtype = torch.float64,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray[Any, Any]:
    spec = shardinit.ParamSpec("dist.w", shape or (n,), dtype, initializer, seed=2024)
    return shardinit.full(spec).to(torch.float64).reshape(-1).numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1_000, 100_000])
def test_uniform_ks(dtype: torch.dtype, n: int) -> None:
    values = sample(init.uniform(-3.0, 5.0), n, dtype)
    assert values.min() >= -3.0 and values.max() < 5.0
    assert stats.kstest(values, stats.uniform(loc=-3.0, scale=8.0).cdf).pvalue > ALPHA


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1_000, 200_000])
def test_normal_ks_and_moments(dtype: torch.dtype, n: int) -> None:
    values = sample(init.normal(1.5, 0.25), n, dtype)
    assert stats.kstest(values, stats.norm(loc=1.5, scale=0.25).cdf).pvalue > ALPHA
    # Mean within 5 standard errors; std within 5 standard errors of the std estimator.
    assert abs(values.mean() - 1.5) < 5 * 0.25 / math.sqrt(n)
    assert abs(values.std() - 0.25) < 5 * 0.25 / math.sqrt(2 * n)


def test_normal_tails_are_populated_like_a_gaussian() -> None:
    n = 1_000_000
    values = sample(init.normal(), n, torch.float32)
    beyond_4 = int((np.abs(values) > 4).sum())
    expected = n * 2 * stats.norm.sf(4)  # ~63
    # Poisson count: within 5 sigma of the expectation.
    assert abs(beyond_4 - expected) < 5 * math.sqrt(expected), beyond_4


@pytest.mark.parametrize(
    ("mean", "std", "a", "b"),
    [(0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04), (1.0, 2.0, 0.5, 9.0), (0.0, 1.0, 3.0, 4.0)],
)
def test_trunc_normal_ks(mean: float, std: float, a: float, b: float) -> None:
    values = sample(init.trunc_normal(mean, std, a, b), 100_000)
    assert values.min() >= a and values.max() <= b
    law = stats.truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    assert stats.kstest(values, law.cdf).pvalue > ALPHA


def test_float32_trunc_normal_never_leaves_the_interval() -> None:
    values = sample(init.trunc_normal(0.0, 0.02, -0.04, 0.04), 500_000, torch.float32)
    assert values.min() >= np.float32(-0.04) and values.max() <= np.float32(0.04)


def torch_fill_args(fn: Any, shape: tuple[int, ...], **kwargs: Any) -> tuple[str, tuple[Any, ...]]:
    """The (method, arguments) torch's own init function passes to uniform_/normal_."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    originals = {name: getattr(torch.Tensor, name) for name in ("uniform_", "normal_")}

    def recorder(name: str) -> Any:
        def record(self: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
            calls.append((name, args))
            return originals[name](self, *args, **kw)

        return record

    with pytest.MonkeyPatch.context() as patch:
        for name in originals:
            patch.setattr(torch.Tensor, name, recorder(name))
        fn(torch.empty(shape), **kwargs)
    assert len(calls) == 1, calls
    return calls[0]


SHAPES = [(256, 128), (64, 32, 3, 3), (10, 7, 5), (3, 1000)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [
        (init.kaiming_uniform, torch.nn.init.kaiming_uniform_, {"a": math.sqrt(5)}),
        (
            init.kaiming_uniform,
            torch.nn.init.kaiming_uniform_,
            {"mode": "fan_out", "nonlinearity": "relu"},
        ),
        (init.kaiming_normal, torch.nn.init.kaiming_normal_, {}),
        (init.kaiming_normal, torch.nn.init.kaiming_normal_, {"a": 0.1, "mode": "fan_out"}),
        (init.xavier_uniform, torch.nn.init.xavier_uniform_, {"gain": 2.0}),
        (init.xavier_normal, torch.nn.init.xavier_normal_, {}),
    ],
)
def test_fan_based_bounds_equal_torch_exactly(
    shape: tuple[int, ...], ours: Any, theirs: Any, kwargs: dict[str, Any]
) -> None:
    name, args = torch_fill_args(theirs, shape, **kwargs)
    resolved = ours(**kwargs).resolve(shape)
    if name == "uniform_":
        assert isinstance(resolved, init.Uniform)
        assert (resolved.a, resolved.b) == (float(args[0]), float(args[1]))
    else:
        assert isinstance(resolved, init.Normal)
        assert (resolved.mean, resolved.std) == (float(args[0]), float(args[1]))


def test_fan_based_inits_refuse_1d_shapes_like_torch() -> None:
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        torch.nn.init.kaiming_uniform_(torch.empty(5))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        shardinit.ParamSpec("bias", (5,), init=init.kaiming_uniform(), seed=0)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        shardinit.ParamSpec("bias", (5,), init=init.xavier_normal(), seed=0)


def test_kaiming_uniform_samples_fill_the_bound() -> None:
    shape = (512, 256)
    resolved = init.kaiming_uniform(a=math.sqrt(5)).resolve(shape)
    assert isinstance(resolved, init.Uniform)
    values = sample(init.kaiming_uniform(a=math.sqrt(5)), 0, torch.float64, shape)
    assert values.min() >= resolved.a and values.max() < resolved.b
    law = stats.uniform(loc=resolved.a, scale=resolved.b - resolved.a)
    assert stats.kstest(values, law.cdf).pvalue > ALPHA


def test_neighbouring_names_give_uncorrelated_streams() -> None:
    a = sample(init.normal(), 0, shape=(100_000,))
    other = shardinit.ParamSpec("dist.w2", (100_000,), torch.float64, init.normal(), seed=2024)
    b = shardinit.full(other).numpy()
    # |Pearson r| of independent samples has std 1/sqrt(n) ~ 0.0032: 5 sigma bound.
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(100_000)
