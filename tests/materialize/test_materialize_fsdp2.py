"""FSDP2 (``fully_shard``) on CPU meshes of 1-4 ranks: after ``materialize`` every
gathered parameter equals ``shardinit.full`` of its spec bit for bit, whatever the
world size; torch's own path on a CPU mesh duplicates shards instead."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.distributed as dist
from materialize_workers import (
    Checks,
    TinyLM,
    assert_check_passed,
    check,
    expect_equal,
    expected_full,
    gloo_scenario,
    run_group,
    tinylm_expected_defaults,
)
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

import shardinit
from shardinit import init

pytestmark = pytest.mark.distributed

SEED = 20250101


def _sharded_tinylm(world: int, dtype: torch.dtype = torch.float32) -> TinyLM:
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = TinyLM().to(dtype)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _check_defaults(model: TinyLM, dtype: torch.dtype) -> None:
    expected = tinylm_expected_defaults(model, dtype)
    names = []
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), f"{name} is not a DTensor"
        full = param.full_tensor()
        rows = (5,) if name == "tok_embeddings.weight" else ()
        expect_equal(
            name, full, expected_full(name, tuple(full.shape), dtype, expected[name], SEED, rows)
        )
        names.append(name)
    assert sorted(names) == sorted(expected), names
    assert model.output.weight is model.tok_embeddings.weight, "tie broken"


def _train_step(model: TinyLM) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.arange(8).reshape(2, 4) + dist.get_rank()
    loss = model(tokens).float().logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    assert model.output.weight is model.tok_embeddings.weight, "tie broken by the step"


def _check_llm_preset(world: int) -> None:
    model = _sharded_tinylm(world, torch.bfloat16)
    rules = shardinit.presets.llm(std=0.02, depth_scaled_output=2)
    shardinit.materialize(model, seed=SEED, rules=rules)
    out_std = 0.02 / math.sqrt(2 * 2)
    for name, param in model.named_parameters():
        full = param.full_tensor()
        if name.endswith((".wo.weight", ".w2.weight")):
            expected_init: init.Initializer = init.normal(0.0, out_std)
        elif name.endswith("bias"):
            expected_init = init.zeros()
        elif name.endswith("norm.weight"):
            expected_init = init.ones()
        else:
            expected_init = init.normal(0.0, 0.02)
        expected = expected_full(name, tuple(full.shape), torch.bfloat16, expected_init, SEED)
        expect_equal(name, full, expected)
        # bf16 is exactly the rounding of the float32 stream (stream-format.md §4).
        as_f32 = expected_full(name, tuple(full.shape), torch.float32, expected_init, SEED)
        expect_equal(name, full, as_f32.to(torch.bfloat16))


def _check_refuse_then_overwrite(model: TinyLM) -> None:
    try:
        shardinit.materialize(model, seed=SEED)
    except shardinit.ShardInitError as error:
        assert "already materialized" in str(error) and "overwrite=True" in str(error)
    else:
        raise AssertionError("materialize accepted a materialized model")
    before = {name: param.full_tensor() for name, param in model.named_parameters()}
    shardinit.materialize(model, seed=SEED + 1, overwrite=True)
    shardinit.materialize(model, seed=SEED, overwrite=True)
    for name, param in model.named_parameters():
        expect_equal(name, param.full_tensor(), before[name])


def _check_strided_alone(world: int) -> None:
    # _StridedShard with no Shard after it on the same dim: the local shard is several
    # boxes of the global tensor (e.g. rows 0:3 and 5:8 of 10 on rank 0 of 2).
    mesh = init_device_mesh("cpu", (world,))
    weight = distribute_tensor(
        torch.zeros(10, 3), mesh, [_StridedShard(0, split_factor=2)], src_data_rank=None
    )
    module = nn.Module()
    module.weight = nn.Parameter(weight)
    spec = shardinit.ParamSpec("weight", (10, 3), init=init.normal(0.0, 1.0), seed=SEED)
    shardinit.materialize(module, seed=SEED, rules={"weight": init.normal()}, overwrite=True)
    expect_equal("weight", module.weight.full_tensor(), shardinit.full(spec))


def _check_torch_duplicates() -> None:
    # torch's own recipe on a CPU mesh: to_empty + reset_parameters runs the ordinary CPU
    # generator on each rank, so both ranks' shards hold the same values.
    mesh = init_device_mesh("cpu", (2,))
    with torch.device("meta"):
        linear = nn.Linear(8, 6)
    fully_shard(linear, mesh=mesh)
    linear.to_empty(device="cpu")
    torch.manual_seed(0)
    linear.reset_parameters()
    local = linear.weight.to_local().contiguous()
    gathered = [torch.empty_like(local) for _ in range(2)]
    dist.all_gather(gathered, local)
    assert torch.equal(gathered[0], gathered[1]), "torch's shards differ: contrast is gone"
    # shardinit's shards of the same parameter are different rows of one tensor.
    with torch.device("meta"):
        ours = nn.Linear(8, 6)
    fully_shard(ours, mesh=mesh)
    shardinit.materialize(ours, seed=SEED)
    local = ours.weight.to_local().contiguous()
    dist.all_gather(gathered, local)
    assert not torch.equal(gathered[0], gathered[1])


class _WithEmpty(nn.Module):
    """A custom module with a zero-size parameter that its init code fills."""

    def __init__(self) -> None:
        super().__init__()
        self.empty = nn.Parameter(torch.empty(0, 4))
        self.weight = nn.Parameter(torch.empty(4, 4))

    def init_weights(self) -> None:
        nn.init.normal_(self.empty)  # nothing to fill: records nothing
        nn.init.ones_(self.weight)


def _check_zero_size(world: int) -> None:
    """A zero-size parameter that init_fn fills is accepted (it was refused as having
    no rule): it is allocated with its shape, and the rest gets init_fn's values."""
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = _WithEmpty()
    fully_shard(model, mesh=mesh)
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    assert isinstance(model.empty, DTensor) and not model.empty.to_local().is_meta
    assert tuple(model.empty.shape) == (0, 4)
    expect_equal("weight", model.weight.full_tensor(), torch.ones(4, 4))


@gloo_scenario(1, 2, 3, 4)
def fsdp2_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    model = _sharded_tinylm(world)
    shardinit.materialize(model, seed=SEED)
    check(checks, "defaults", lambda: _check_defaults(model, torch.float32))
    check(checks, "train_step", lambda: _train_step(model))
    fresh = _sharded_tinylm(world)
    shardinit.materialize(fresh, seed=SEED)
    check(checks, "refuse_then_overwrite", lambda: _check_refuse_then_overwrite(fresh))
    check(checks, "llm_preset_bf16", lambda: _check_llm_preset(world))
    if world > 1:
        check(checks, "strided_alone", lambda: _check_strided_alone(world))
    if world == 2:
        check(checks, "torch_duplicates", _check_torch_duplicates)
        check(checks, "zero_size", lambda: _check_zero_size(world))
    return checks


@functools.cache
def results(world: int) -> dict[str, list[str]]:
    return run_group(world, fsdp2_scenario)


WORLDS = [1, 2, 3, 4]


def _assert_passed(world: int, name: str) -> None:
    assert_check_passed(results(world), name)


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_defaults_bit_exact(world: int) -> None:
    _assert_passed(world, "defaults")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_train_step_after_materialize(world: int) -> None:
    _assert_passed(world, "train_step")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_refuses_materialized_unless_overwrite(world: int) -> None:
    _assert_passed(world, "refuse_then_overwrite")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_llm_preset_bf16_bit_exact(world: int) -> None:
    _assert_passed(world, "llm_preset_bf16")


@pytest.mark.parametrize("world", [2, 3, 4])
def test_fsdp2_strided_shard_multi_box(world: int) -> None:
    _assert_passed(world, "strided_alone")


def test_torch_cpu_mesh_duplicates_shards() -> None:
    _assert_passed(2, "torch_duplicates")


def test_fsdp2_zero_size_parameter_filled_by_init_fn() -> None:
    _assert_passed(2, "zero_size")
