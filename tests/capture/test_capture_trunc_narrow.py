"""``trunc_normal_`` with an interval far narrower than ``std`` (issue 37, item 12):
``trunc_normal_(w, std=1e30, a=-1, b=1)`` gave all zeros where eager torch gives nearly
uniform values in [a, b]: the interval's probability (about 8e-31) vanished when the
sampler added it to Phi(a / std) = 0.5 in binary64. Such an interval is refused, naming
the parameter, the operation, the line and the way out (``uniform_``); intervals the
sampler resolves keep their stream values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init


@pytest.mark.parametrize(
    ("std", "a", "b"), [(1e30, -1.0, 1.0), (1e10, -1.0, 1.0), (1.0, 0.5, 0.5 + 1e-15)]
)
def test_an_interval_the_sampler_cannot_resolve_is_refused_in_capture(
    std: float, a: float, b: float
) -> None:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(
            model, seed=0, init_fn=lambda: nn.init.trunc_normal_(model.weight, std=std, a=a, b=b)
        )
    message = str(raised.value)
    assert "'weight'" in message and "trunc_normal_" in message and "too narrow" in message
    assert "test_capture_trunc_narrow.py" in message and "uniform" in message


def test_the_initializer_refuses_it_naming_the_arguments() -> None:
    with pytest.raises(
        shardinit.ShardInitError, match=r"\[a, b\] = \[-1.0, 1.0\] is too narrow for std=1e\+30"
    ):
        init.trunc_normal(0.0, 1e30, -1.0, 1.0)


@pytest.mark.parametrize(
    ("std", "a", "b"),
    [(1.0, -1e-8, 1e-8), (1.0, 30.0, 31.0), (1.0, -1e300, 0.5), (0.02, -2.0, 2.0)],
)
def test_narrow_or_far_intervals_it_resolves_stay_inside(std: float, a: float, b: float) -> None:
    spec = shardinit.ParamSpec(
        "w", (64, 64), torch.float64, init.trunc_normal(0.0, std, a, b), seed=3
    )
    values = shardinit.full(spec)
    assert bool((values >= a).all() and (values <= b).all())
    assert values.unique().numel() > 4000  # resolved, not collapsed onto a few values
