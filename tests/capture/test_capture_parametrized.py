"""Modules with ``torch.nn.utils.parametrize`` parametrizations (issue 37, "Refused, but
ordinary"): a parametrized ``Linear`` becomes a ``ParametrizedLinear`` whose weight sits
in ``parametrizations.weight.original`` (weight_norm: ``original0`` = g,
``original1`` = v), so its bias found no weight shape for its bound and got "no rule
and no torch.nn default". Eager torch built the Linear first, then moved the weight
through the parametrization's ``right_inverse``: the bias takes the Linear's default,
an ``original`` whose ``right_inverse`` keeps the values takes the weight's, and
weight_norm's g (a norm of each row of the weight) is left to a rule, named."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize

import shardinit


class _Doubled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _doubled(linear: nn.Linear) -> nn.Linear:
    parametrize.register_parametrization(linear, "weight", _Doubled())
    return linear


def _plain() -> nn.Linear:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(model, seed=0)
    return model


def _linear_weight(name: str) -> torch.Tensor:
    """The Linear's default weight under the canonical name ``name`` (values are keyed
    by the parameter's own name)."""
    init = shardinit.init.kaiming_uniform(a=math.sqrt(5))
    spec = shardinit.ParamSpec(name, (32, 16), torch.float32, init, seed=0)
    return shardinit.full(spec)


def _materialized(make: Callable[[nn.Linear], nn.Module], **kwargs: object) -> nn.Module:
    with torch.device("meta"):
        model = make(nn.Linear(16, 32))
    shardinit.materialize(model, seed=0, **kwargs)  # type: ignore[arg-type]
    return model


def test_a_parametrized_linear_gets_the_linears_defaults() -> None:
    model, plain = _materialized(_doubled), _plain()
    assert type(model).__name__ == "ParametrizedLinear"
    original = model.parametrizations.weight.original  # type: ignore[union-attr]
    weight = _linear_weight("parametrizations.weight.original")
    assert torch.equal(original, weight)
    assert torch.equal(model.bias, plain.bias)
    with torch.no_grad():
        assert torch.equal(model.weight, weight * 2)  # type: ignore[operator]
        x = torch.randn(3, 16)
        assert torch.equal(model(x), nn.functional.linear(x, weight * 2, plain.bias))


def test_init_code_on_a_parametrized_module_runs_as_eager() -> None:
    with torch.device("meta"):
        model = _doubled(nn.Linear(16, 32))
    original = model.parametrizations.weight.original  # type: ignore[union-attr]
    shardinit.materialize(model, seed=0, init_fn=lambda: nn.init.ones_(original))
    assert torch.equal(model.parametrizations.weight.original, torch.ones(32, 16))  # type: ignore[union-attr]
    assert torch.equal(model.bias, _plain().bias)


def test_weight_norm_takes_v_and_the_bias_and_leaves_g_to_a_rule() -> None:
    with pytest.raises(shardinit.ShardInitError) as raised:
        _materialized(parametrizations.weight_norm)
    message = str(raised.value)
    assert "for 1 parameter(s): parametrizations.weight.original0 (ParametrizationList)." in message
    model = _materialized(
        parametrizations.weight_norm,
        rules={"parametrizations.weight.original0": shardinit.init.ones()},
    )
    plain = _plain()
    weights = model.parametrizations.weight  # type: ignore[union-attr]
    assert torch.equal(weights.original1, _linear_weight("parametrizations.weight.original1"))
    assert torch.equal(weights.original0, torch.ones(32, 1))
    assert torch.equal(model.bias, plain.bias)


def test_spectral_norm_takes_the_weight_and_names_its_random_buffers() -> None:
    with pytest.raises(shardinit.ShardInitError) as raised:
        _materialized(parametrizations.spectral_norm)
    message = str(raised.value)
    assert "parametrizations.weight.0._u" in message and "_v" in message
    assert "no rule" not in message  # the parameters all have their defaults
