"""A mask built from a parameter's shape and written through by indexing (issue 51):
``w[torch.ones_like(w, dtype=torch.bool).triu()] = 0``, a ``tril`` of ``torch.ones``
with ``-inf``, on the torch.nn default and on init code's own values. Each against the
same code run eagerly on a CPU model, and under FSDP2 at worlds 1, 2 and 3 (gathered);
a mask of random values stays refused, naming the parameter and the line."""

from __future__ import annotations

import functools

import pytest
import torch
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

SEED = 51


def _model(device: str) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 6))


def _masked(model: nn.Sequential) -> None:
    w0, w1 = model[0].weight, model[1].weight
    with torch.no_grad():
        w0.copy_(torch.arange(24.0).view(6, 4) - 10)
        w0[torch.ones_like(w0, dtype=torch.bool).triu()] = 0
        w1.fill_(0.5)
        w1[torch.ones(6, 6, dtype=torch.bool, device=w1.device).tril(-1)] = float("-inf")
        model[0].bias.fill_(1.0)
        model[1].bias.zero_()


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: (t.full_tensor() if isinstance(t, DTensor) else t).detach()
        for name, t in model.state_dict().items()
    }


def assert_equal_states(got: nn.Module, want: nn.Module) -> None:
    have, expected = _state(got), _state(want)
    assert have.keys() == expected.keys()
    for name, value in expected.items():
        assert have[name].dtype == value.dtype and torch.equal(have[name], value), name


def test_a_shape_mask_written_through_as_in_eager() -> None:
    eager = _model("cpu")
    _masked(eager)
    meta = _model("meta")
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: _masked(meta))
    assert_equal_states(meta, eager)
    assert meta[0].weight[0].tolist() == [0.0] * 4 and meta[0].weight[5, 0] == 10.0


def test_a_shape_mask_on_the_default_keeps_the_default_elsewhere() -> None:
    def init(model: nn.Sequential) -> None:
        w = model[0].weight
        with torch.no_grad():
            w[torch.ones_like(w, dtype=torch.bool).triu()] = 0

    plain, masked = _model("meta"), _model("meta")
    shardinit.materialize(plain, seed=SEED)
    shardinit.materialize(masked, seed=SEED, init_fn=lambda: init(masked))
    upper = torch.ones(6, 4, dtype=torch.bool).triu()
    want = plain[0].weight.detach().masked_fill(upper, 0.0)
    assert torch.equal(masked[0].weight.detach(), want)
    assert torch.equal(masked[1].weight, plain[1].weight)


def test_a_random_mask_is_refused() -> None:
    meta = _model("meta")

    def init() -> None:
        w = meta[0].weight
        with torch.no_grad():
            w[torch.rand_like(w) > 0.5] = 0

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"'0.weight'.*test_capture_shape"):
        shardinit.materialize(meta, seed=SEED, init_fn=init)


def _check_sharded(world: int) -> None:
    sharded = _model("meta")
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(sharded[0], mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: _masked(sharded))
    eager = _model("cpu")
    _masked(eager)
    assert_equal_states(sharded, eager)


@gloo_scenario(1, 2, 3)
def shape_mask_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    check(checks, "masks", functools.partial(_check_sharded, world))
    return checks


@functools.cache
def _results(world: int) -> dict[str, list[str]]:
    return run_group(world, shape_mask_scenario)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 3])
def test_shape_masks_under_fsdp2_as_in_eager(world: int) -> None:
    assert_check_passed(_results(world), "masks")
