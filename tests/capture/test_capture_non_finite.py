"""NaN and +-inf constants in init code (issue 51): a NaN sentinel fill that a later
write overwrites (whole or in part), ``nn.init.constant_(w, -inf)``, ``copy_`` of a
``torch.full(..., nan)`` table, and transformers' Gemma 4 clipped linears, whose
``_init_weights`` sets +-inf bounds. Each against the same code run eagerly on a CPU
model, bit for bit (a NaN where eager has one: its sign and payload are not the
same even between eager's own CPU kernels, bfloat16's vectorized cast gives 0xFFFF),
and under FSDP2 at worlds 1, 2 and 3 (gathered)."""

from __future__ import annotations

import functools
import math
import types

import pytest
import torch
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

SEED = 51
NAN, INF = float("nan"), float("inf")


def _model(device: str, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 6)).to(dtype)


def _sentinels(model: nn.Sequential) -> None:
    """Sentinels first, then the values that overwrite some of them."""
    with torch.no_grad():
        model[0].weight.fill_(NAN)  # "not initialized yet": every element overwritten below
        model[0].weight.copy_(torch.arange(24.0).view(6, 4) / 7)
        model[0].bias.fill_(NAN)
        model[0].bias[:3].fill_(0.5)  # the rest stays NaN, as in eager
        nn.init.constant_(model[1].weight, -math.inf)
        model[1].weight[2].fill_(INF)
        model[1].bias.copy_(torch.full((6,), NAN))
        model[1].bias[3:].mul_(2.0)  # NaN times 2: NaN


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bits of every value, with one bit pattern (-1) for every NaN."""
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    bits = tensor.detach().contiguous().view(signed[tensor.element_size()])
    return bits.masked_fill(tensor.isnan(), -1)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: (t.full_tensor() if isinstance(t, DTensor) else t).detach()
        for name, t in model.state_dict().items()
    }


def assert_bits_equal(got: nn.Module, want: nn.Module) -> None:
    """Every value as eager's, bit for bit (a NaN where eager has one), dtype and shape
    too."""
    have, expected = _state(got), _state(want)
    assert have.keys() == expected.keys()
    for name, value in expected.items():
        assert have[name].dtype == value.dtype and have[name].shape == value.shape, name
        assert torch.equal(_bits(have[name]), _bits(value)), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_non_finite_constants_are_eagers(dtype: torch.dtype) -> None:
    eager = _model("cpu", dtype)
    _sentinels(eager)
    meta = _model("meta", dtype)
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: _sentinels(meta))
    assert_bits_equal(meta, eager)
    assert meta[0].bias.isnan().tolist() == [False] * 3 + [True] * 3
    assert meta[1].weight[2].tolist() == [INF] * 6 and meta[1].weight[0, 0] == -INF


def test_a_nan_sentinel_overwritten_by_a_random_fill_leaves_the_fills_values() -> None:
    def sentinel_then_normal(model: nn.Sequential) -> None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(NAN)
            for p in model.parameters():
                nn.init.normal_(p, std=0.02)

    def normal(model: nn.Sequential) -> None:
        for p in model.parameters():
            nn.init.normal_(p, std=0.02)

    plain, sentinel = _model("meta"), _model("meta")
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: normal(plain))
    shardinit.materialize(sentinel, seed=SEED, init_fn=lambda: sentinel_then_normal(sentinel))
    assert_bits_equal(sentinel, plain)
    assert not any(p.isnan().any() for p in sentinel.parameters())


def test_gemma4_clipped_linear_bounds_as_in_eager() -> None:
    from transformers import initialization as init
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ClippableLinear

    config = types.SimpleNamespace(use_clipped_linears=True)

    def init_weights(module: Gemma4ClippableLinear) -> None:
        # Gemma4PreTrainedModel._init_weights's branch for it, with the weight's constant.
        init.constant_(module.linear.weight, 0.25)
        init.constant_(module.input_min, -float("inf"))
        init.constant_(module.input_max, float("inf"))
        init.constant_(module.output_min, -float("inf"))
        init.constant_(module.output_max, float("inf"))

    eager = Gemma4ClippableLinear(config, 4, 6)
    init_weights(eager)
    with torch.device("meta"):
        meta = Gemma4ClippableLinear(config, 4, 6)
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: init_weights(meta))
    assert_bits_equal(meta, eager)


def _check_sharded(world: int) -> None:
    sharded = _model("meta")
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(sharded[0], mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: _sentinels(sharded))
    eager = _model("cpu")
    _sentinels(eager)
    assert_bits_equal(sharded, eager)


@gloo_scenario(1, 2, 3)
def non_finite_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    check(checks, "sentinels", functools.partial(_check_sharded, world))
    return checks


@functools.cache
def _results(world: int) -> dict[str, list[str]]:
    return run_group(world, non_finite_scenario)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 3])
def test_non_finite_constants_under_fsdp2_are_eagers(world: int) -> None:
    assert_check_passed(_results(world), "sentinels")
