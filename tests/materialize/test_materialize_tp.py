"""FSDP2 + tensor parallelism on a 2x2 CPU mesh: ColwiseParallel weights end up as
``(_StridedShard(0, sf=2), Shard(0))`` and RowwiseParallel ones as ``(Shard(0),
Shard(1))``; after ``materialize`` every gathered parameter equals ``shardinit.full``.
The same group also checks HSDP (``fully_shard`` on a 2-D mesh: ``(Replicate(),
Shard(0))``), where both replicas must hold the same values, and ``init_fn`` capture
replayed on the TP layouts (multi-box local shards), against its world-1 replay."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
from materialize_workers import (
    Block,
    Checks,
    assert_check_passed,
    bias_default,
    block_expected_defaults,
    check,
    expect_equal,
    expected_full,
    gloo_scenario,
    kaiming_a5,
    run_group,
)
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

import shardinit
from shardinit import init
from shardinit.shard import writer

pytestmark = pytest.mark.distributed

SEED = 7
# 7 rows over tp=2 then dp=2: uneven at both levels. (torch's TP forward itself rejects
# this uneven Colwise->Rowwise pair, so this file checks values, not a training step.)
DIM, HIDDEN = 12, 7


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(DIM, HIDDEN) for _ in range(2))
        self.head = nn.Linear(DIM, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


PLAN = {
    "attention.wq": ColwiseParallel(),
    "attention.wo": RowwiseParallel(),
    "w1": ColwiseParallel(),
    "w2": RowwiseParallel(),
}


def _expected() -> dict[str, init.Initializer]:
    expected: dict[str, init.Initializer] = {}
    for i in range(2):
        expected.update(block_expected_defaults(f"layers.{i}.", DIM, HIDDEN))
    expected["head.weight"] = kaiming_a5((5, DIM))
    expected["head.bias"] = bias_default(DIM)
    return expected


def _build(dtype: torch.dtype) -> tuple[Stack, dict[str, init.Initializer]]:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        model = Stack().to(dtype)
    for layer in model.layers:
        parallelize_module(layer, mesh["tp"], PLAN)
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model, _expected()


def _build_hsdp() -> Stack:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    with torch.device("meta"):
        model = Stack()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _check_hsdp(model: Stack) -> None:
    _check_all(model, _expected(), torch.float32)
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), name
        assert tuple(param.placements) == (Replicate(), Shard(0)), (name, param.placements)
        # Both replicas hold the same rows: gather the local shards across "replicate".
        local = param.to_local().detach().contiguous()
        group = param.device_mesh.get_group("replicate")
        copies = [torch.empty_like(local) for _ in range(2)]
        torch.distributed.all_gather(copies, local, group=group)
        expect_equal(name + " (replica)", copies[1], copies[0])


def _init_fn(model: Stack) -> Callable[[], None]:
    """Init code whose writes cut through the TP and FSDP shard boundaries."""

    def init_weights() -> None:
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(param)
            elif name.endswith("bias"):
                nn.init.zeros_(param)
            else:
                nn.init.trunc_normal_(param, 0.0, 0.02, -0.04, 0.04)
        model.layers[0].w1.weight.data[3:].mul_(0.5)  # Colwise: (_StridedShard, Shard)
        model.layers[1].w2.weight.data[:, 2:5].normal_(0.0, 1.0)  # Rowwise: dims 0 and 1
        nn.init.kaiming_uniform_(model.head.weight, a=1.0)

    return init_weights


def _check_capture_tp(model: Stack) -> None:
    with torch.device("meta"):
        plain = Stack()
    captured = shardinit.capture_init(plain, _init_fn(plain))
    reference = {name: writer().full(record, SEED) for name, record in captured.params.items()}
    names = []
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), name
        expect_equal(name, param.full_tensor(), reference[name])
        names.append(name)
    assert sorted(names) == sorted(reference), names
    # Not the layout-free default values: the captured ops were applied.
    assert not torch.equal(
        reference["layers.1.w2.weight"][:, 2:5], reference["layers.1.w2.weight"][:, 5:8]
    )


def _check_all(model: Stack, expected: dict[str, init.Initializer], dtype: torch.dtype) -> None:
    names = []
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), name
        full = param.full_tensor()
        expect_equal(
            name, full, expected_full(name, tuple(full.shape), dtype, expected[name], SEED)
        )
        names.append(name)
    assert sorted(names) == sorted(expected)


def _check_layouts(model: Stack) -> None:
    w1 = model.layers[0].w1.weight
    assert isinstance(w1.placements[0], _StridedShard), w1.placements
    w2 = model.layers[0].w2.weight
    assert [p.dim for p in w2.placements] == [0, 1], w2.placements


ORTHOGONAL_RULES = {
    "layers.*.w1.weight": init.orthogonal(1.5),  # Colwise: (_StridedShard(0), Shard(0))
    "layers.*.w2.weight": init.orthogonal(0.5),  # Rowwise: (Shard(0), Shard(1))
    "head.weight": init.orthogonal(),  # FSDP2 only
}


def _check_orthogonal(model: Stack) -> None:
    """orthogonal rules under TP x FSDP2: every rank computes the whole matrix and keeps
    its box (rows and/or columns); gathered, the same bits as ``full``."""
    expected = _expected()
    for i in range(2):
        expected[f"layers.{i}.w1.weight"] = init.orthogonal(1.5)
        expected[f"layers.{i}.w2.weight"] = init.orthogonal(0.5)
    expected["head.weight"] = init.orthogonal()
    _check_all(model, expected, torch.float32)


@gloo_scenario(4)
def tp_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    model, expected = _build(torch.float32)
    shardinit.materialize(model, seed=SEED)
    check(checks, "layouts", lambda: _check_layouts(model))
    check(checks, "defaults", lambda: _check_all(model, expected, torch.float32))
    bf16, expected_bf16 = _build(torch.bfloat16)
    shardinit.materialize(bf16, seed=SEED)
    check(checks, "defaults_bf16", lambda: _check_all(bf16, expected_bf16, torch.bfloat16))
    captured, _ = _build(torch.float32)
    shardinit.materialize(captured, seed=SEED, init_fn=_init_fn(captured))
    check(checks, "capture", lambda: _check_capture_tp(captured))
    ortho, _ = _build(torch.float32)
    shardinit.materialize(ortho, seed=SEED, rules=ORTHOGONAL_RULES)
    check(checks, "orthogonal", lambda: _check_orthogonal(ortho))
    hsdp = _build_hsdp()
    shardinit.materialize(hsdp, seed=SEED)
    check(checks, "hsdp", lambda: _check_hsdp(hsdp))
    return checks


@functools.cache
def results() -> dict[str, list[str]]:
    return run_group(4, tp_scenario)


@pytest.mark.parametrize(
    "name", ["layouts", "defaults", "defaults_bf16", "capture", "orthogonal", "hsdp"]
)
def test_fsdp2_tp_2x2(name: str) -> None:
    assert_check_passed(results(), name)
