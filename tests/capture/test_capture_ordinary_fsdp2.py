"""The ordinary init code of issue 37 ("Refused, but ordinary") under FSDP2 at worlds 1
and 2: writes through split views of the whole parameter, aten overloads and
``_foreach_*``, casts and clones of a parameter, ``vector_to_parameters`` of random
values, masks of coordinates, a parametrized module and a parameter a legacy
``torch.Tensor(n)`` made on the CPU each give, gathered, the bytes of the same code on
the unsharded meta model."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.utils import parametrize

import shardinit

SEED = 37
Init = Callable[[nn.Sequential], object]


class _Doubled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _model(parametrized: bool) -> nn.Sequential:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    if parametrized:
        parametrize.register_parametrization(model[1], "weight", _Doubled())
    return model


def _cast_back(w: torch.Tensor) -> None:
    nn.init.normal_(w)
    w.data = (w.double() * 3).float()


INITS: dict[str, Init] = {
    "kaiming_through_view": lambda m: nn.init.kaiming_uniform_(m[0].weight.view(4, 8, 16)),
    "normal_through_reshape": lambda m: m[1].weight.data.reshape(2, 128).normal_(0.0, 0.02),
    "aten_and_foreach": lambda m: (
        torch.ops.aten.uniform_.default(m[0].weight, -0.5, 0.5),
        torch._foreach_mul_([m[0].weight, m[0].bias], [2.0, 0.5]),
    ),
    "cast_and_clone": lambda m: (
        _cast_back(m[0].weight),
        m[0].bias.copy_(m[0].bias.clone().fill_(0.25) * torch.arange(32.0)),
    ),
    "vector_to_parameters": lambda m: torch.nn.utils.vector_to_parameters(
        torch.randn(sum(p.numel() for p in m.parameters())) * 0.02, m.parameters()
    ),
    "coordinate_masks": lambda m: (
        nn.init.normal_(m[0].weight),
        m[0].weight.data.__setitem__(torch.arange(32) % 3 == 0, 0.0),
        m[0].weight.data.__setitem__((slice(None), torch.arange(16) > 12), 1.0),
    ),
}


def _values(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for name, p in model.named_parameters()
    }


def _check_equal_to_unsharded(world: int, name: str, parametrized: bool = False) -> None:
    init = INITS[name]
    plain = _model(parametrized)
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: init(plain))
    sharded = _model(parametrized)
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(sharded[0], mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: init(sharded))
    want, got = _values(plain), _values(sharded)
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key
    assert not math.isclose(float(got["0.weight"].std()), 0.0)


class _Legacy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.gamma = nn.Parameter(torch.Tensor(32))  # on the CPU under torch.device("meta")

    def init_weights(self) -> None:
        nn.init.normal_(self.gamma, 0.0, 0.02)


def _check_legacy_parameter(world: int) -> None:
    with torch.device("meta"):
        plain, sharded = _Legacy(), _Legacy()
    shardinit.materialize(plain, seed=SEED, init_fn=plain.init_weights)
    fully_shard(sharded, mesh=init_device_mesh("cpu", (world,)))
    assert isinstance(sharded.gamma, DTensor) and not sharded.gamma.to_local().is_meta
    shardinit.materialize(sharded, seed=SEED, init_fn=sharded.init_weights)
    want, got = _values(plain), _values(sharded)
    for key in want:
        assert torch.equal(want[key], got[key]), key
    assert got["gamma"].unique().numel() == 32


@gloo_scenario(1, 2)
def ordinary_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in INITS:
        check(checks, name, functools.partial(_check_equal_to_unsharded, world, name))
    check(
        checks,
        "parametrized",
        functools.partial(_check_equal_to_unsharded, world, "kaiming_through_view", True),
    )
    check(checks, "legacy_parameter", functools.partial(_check_legacy_parameter, world))
    return checks


test_ordinary_init_code_is_layout_invariant_under_fsdp2 = scenario_tests(
    ordinary_scenario, [*sorted(INITS), "parametrized", "legacy_parameter"], [1, 2]
)
