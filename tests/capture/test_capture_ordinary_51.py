"""Ordinary init code of issue 51 ("Refused, but ordinary") that shardinit now replays
as eager torch runs it: ``torch.as_tensor(p)`` (the parameter itself, or its cast), a
zero-size buffer, and index tables (``triu_indices`` / ``tril_indices``, peft's OFT)
held as buffers. Each against the same code run eagerly on a CPU model (values, dtype,
strides, device, flags), ``as_tensor`` also under FSDP2 at worlds 1, 2 and 3 (gathered:
the unsharded bytes); the refusals next to them stay clear."""

from __future__ import annotations

import functools

import pytest
import torch
from materialize_workers import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

SEED = 51


def _as_tensor_init(model: nn.Sequential) -> None:
    with torch.no_grad():
        torch.as_tensor(model[0].weight).fill_(0.5)  # the parameter itself
        torch.as_tensor(model[0].bias, dtype=torch.float32, device="cpu").zero_()
        doubled = torch.as_tensor(model[1].weight, dtype=torch.float64).fill_(0.25) * 3
        model[1].weight.copy_(doubled)  # a float64 cast of it, filled, copied back
        model[1].bias.copy_(torch.as_tensor(model[1].bias, dtype=torch.float64) * 0 + 1.5)


def _sequential(device: str) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
        for name, t in model.state_dict().items()
    }


def assert_like_eager(got: nn.Module, eager: nn.Module) -> None:
    """Every parameter and buffer as eager leaves it: values, dtype, shape, strides,
    device and ``requires_grad``."""
    want_tensors = dict(eager.named_parameters()) | dict(eager.named_buffers())
    got_tensors = dict(got.named_parameters()) | dict(got.named_buffers())
    assert want_tensors.keys() == got_tensors.keys()
    for name, want in want_tensors.items():
        have = got_tensors[name]
        assert have.device == want.device and have.dtype == want.dtype, name
        assert have.shape == want.shape and have.stride() == want.stride(), name
        assert have.requires_grad == want.requires_grad, name
        assert torch.equal(have.detach(), want.detach()), name


def test_as_tensor_of_a_parameter_is_the_parameter_as_in_eager() -> None:
    eager = _sequential("cpu")
    _as_tensor_init(eager)
    meta = _sequential("meta")
    seen: list[bool] = []

    def init_fn() -> None:
        seen.append(torch.as_tensor(meta[0].weight) is meta[0].weight)
        _as_tensor_init(meta)

    shardinit.materialize(meta, seed=SEED, init_fn=init_fn)
    assert seen == [True]
    assert_like_eager(meta, eager)
    assert float(meta[1].weight.detach()[0, 0]) == 0.75


def test_as_tensor_to_another_device_is_still_refused() -> None:
    meta = _sequential("meta")
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"'0.weight'.*cuda.*do not exist"):
        shardinit.materialize(
            meta, seed=SEED, init_fn=lambda: torch.as_tensor(meta[0].weight, device="cuda")
        )
    assert meta[0].weight.is_meta  # refused before anything was allocated


class _Tables(nn.Module):
    """peft OFT-like: index tables and a zero-size buffer beside a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.register_buffer("upper", torch.triu_indices(6, 6, 1))
        self.register_buffer("lower", torch.tril_indices(5, 3, offset=-1, dtype=torch.int32))
        self.register_buffer("empty", torch.empty(0))
        self.register_buffer("empty_rows", torch.zeros(0, 4, dtype=torch.int64))


def test_index_tables_and_zero_size_buffers_as_in_eager() -> None:
    torch.manual_seed(0)
    eager = _Tables()
    with torch.device("meta"), shardinit.record_constructors():
        meta = _Tables()

    def init_fn(model: _Tables) -> None:
        nn.init.constant_(model.proj.weight, 0.125)
        nn.init.zeros_(model.proj.bias)

    init_fn(eager)
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: init_fn(meta))
    assert_like_eager(meta, eager)
    assert meta.upper.tolist()[0][:3] == [0, 0, 0] and meta.lower.dtype == torch.int32


def test_a_zero_size_buffer_needs_no_default() -> None:
    with torch.device("meta"):
        meta = _Tables()  # built without record_constructors: the tables are unknown
    with pytest.raises(shardinit.ShardInitError, match=r"upper") as raised:
        shardinit.materialize(meta, seed=SEED)
    assert "empty" not in str(raised.value)  # a zero-size buffer is never asked for


def _check_as_tensor_sharded(world: int) -> None:
    plain = _sequential("meta")
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: _as_tensor_init(plain))
    sharded = _sequential("meta")
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(sharded[0], mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: _as_tensor_init(sharded))
    want, got = _state(plain), _state(sharded)
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key
    eager = _sequential("cpu")
    _as_tensor_init(eager)
    for key, value in _state(eager).items():
        assert torch.equal(value, got[key]), key


@gloo_scenario(1, 2, 3)
def ordinary_51_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    check(checks, "as_tensor", functools.partial(_check_as_tensor_sharded, world))
    return checks


@functools.cache
def _results(world: int) -> dict[str, list[str]]:
    return run_group(world, ordinary_51_scenario)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 3])
def test_as_tensor_under_fsdp2_gives_eager_values(world: int) -> None:
    assert_check_passed(_results(world), "as_tensor")


def _rounded_divisions(model: nn.Sequential) -> None:
    numerators = torch.arange(-16, 16, dtype=torch.float32) * 0.7
    with torch.no_grad():
        model[0].bias.copy_(torch.div(numerators, 0.3, rounding_mode="floor"))
        model[1].bias.copy_(torch.div(numerators[:8], numerators[8:16], rounding_mode="trunc"))
        model[0].weight.fill_(0.0)
        model[1].weight.fill_(1.0)


def test_div_with_a_rounding_mode_on_known_values_is_eagers() -> None:
    eager = _sequential("cpu")
    _rounded_divisions(eager)
    meta = _sequential("meta")
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: _rounded_divisions(meta))
    assert_like_eager(meta, eager)
    assert float(meta[0].bias.detach()[0]) == float(torch.floor(torch.tensor(-11.2) / 0.3))


def test_div_with_a_rounding_mode_of_random_float32_values_is_still_refused() -> None:
    meta = _sequential("meta")

    def init_fn() -> None:
        with torch.no_grad():
            meta[0].bias.copy_(torch.div(torch.randn(32), 0.3, rounding_mode="floor"))

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"'0.bias'.*float32"):
        shardinit.materialize(meta, seed=SEED, init_fn=init_fn)
