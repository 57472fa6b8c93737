"""CPU offload on CPU ranks of 1-3 (gloo): FSDP2 ``CPUOffloadPolicy(pin_memory=False)``
and FSDP1 ``CPUOffload(offload_params=True)``. ``materialize`` with init code that calls
``trunc_normal_`` gives the bits of the run without offload, which are those of the model
materialized whole (so the same at every world size), and no rank's shard copies
another's (torchtitan#4511's "same seed" weights). A pinned policy without an accelerator
is refused by shardinit, naming the policy and the remedy, before torch's "Found no
NVIDIA driver". What torch 2.15 allows only with an accelerator (FSDP1's forward with
offload, pinned FSDP2 shards) is checked by tools/gpu_check.py."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from materialize_workers import (
    Block,
    Checks,
    TinyLM,
    assert_check_passed,
    check,
    expect_equal,
    gloo_scenario,
    run_group,
)
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffload, CPUOffloadPolicy, fully_shard
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import shardinit
from shardinit import _torch_compat

pytestmark = pytest.mark.distributed

SEED = 4511
WORLDS = [1, 2, 3]


def _init_weights(model: TinyLM) -> Callable[[], None]:
    """Init code as torchtitan writes it: truncated normals, the output layer's (tied to
    the embedding here) with a std from the width and a cutoff of 3 std."""

    def init_weights() -> None:
        for block in model.layers:
            for linear in (block.attention.wq, block.attention.wo, block.w1, block.w2):
                nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02, a=-0.04, b=0.04)
        std = model.norm.normalized_shape[0] ** -0.5
        nn.init.trunc_normal_(model.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    return init_weights


def _whole() -> dict[str, torch.Tensor]:
    """The model materialized whole on one process: what every layout must gather to."""
    with torch.device("meta"):
        model = TinyLM()
    shardinit.materialize(model, seed=SEED, init_fn=_init_weights(model))
    return {name: param.detach() for name, param in model.named_parameters()}


def _fsdp2(world: int, policy: CPUOffloadPolicy | None) -> TinyLM:
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = TinyLM()
    offload = {} if policy is None else {"offload_policy": policy}
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, **offload)
    fully_shard(model, mesh=mesh, **offload)
    return model


def _no_rank_copies_another(name: str, local: torch.Tensor, world: int) -> None:
    """All ranks' shards of a randomly initialized parameter differ (equal-shaped,
    non-empty ones: torch's CPU-mesh path makes them equal)."""
    shards: list[object] = [None] * world
    dist.all_gather_object(shards, local.detach().clone())
    comparable = [s for s in shards if isinstance(s, torch.Tensor) and s.shape == local.shape]
    if local.numel() and len(comparable) > 1:
        first = comparable[0]
        assert not all(torch.equal(first, other) for other in comparable[1:]), (
            f"{name}: rank shards are copies"
        )


def _check_fsdp2_offload(world: int) -> None:
    model = _fsdp2(world, CPUOffloadPolicy(pin_memory=False))
    offloaded = _torch_compat.fsdp2_offloaded_params(model)
    assert len(offloaded) == len(list(model.parameters())) and not any(offloaded.values())
    shardinit.materialize(model, seed=SEED, init_fn=_init_weights(model))
    plain = _fsdp2(world, None)
    shardinit.materialize(plain, seed=SEED, init_fn=_init_weights(plain))
    whole, unoffloaded = _whole(), dict(plain.named_parameters())
    for name, param in model.named_parameters():
        local = param.to_local()
        assert local.device.type == "cpu", f"{name} on {local.device}"
        gathered = param.full_tensor()
        expect_equal(name, gathered, unoffloaded[name].full_tensor())
        expect_equal(name, gathered, whole[name])
        if not name.endswith(("norm.weight", "norm.bias")):
            _no_rank_copies_another(name, local, world)


def _check_fsdp2_offload_train_step(world: int) -> None:
    model = _fsdp2(world, CPUOffloadPolicy(pin_memory=False))
    shardinit.materialize(model, seed=SEED, init_fn=_init_weights(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.arange(8).reshape(2, 4) + dist.get_rank()).logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    assert all(p.to_local().device.type == "cpu" for p in model.parameters())


def _check_fsdp2_pinned_refused(world: int) -> None:
    model = _fsdp2(world, CPUOffloadPolicy())  # pin_memory=True, torch's default
    try:
        shardinit.materialize(model, seed=SEED, init_fn=_init_weights(model))
    except shardinit.ShardInitError as error:
        text = str(error)
        assert "CPUOffloadPolicy(pin_memory=True)" in text, text
        assert "CPUOffloadPolicy(pin_memory=False)" in text, text
        assert "tok_embeddings.weight" in text, text
    else:
        raise AssertionError("materialize accepted pinned offload without an accelerator")
    assert all(p.to_local().is_meta for p in model.parameters()), "allocated before refusing"


def _fsdp1(offload: bool) -> FSDP:
    with torch.device("meta"):
        model = TinyLM()
    captured = shardinit.capture_init(model, _init_weights(model))  # before wrapping
    wrapped = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_id=torch.device("cpu"),  # with none, FSDP1 wants an accelerator
        param_init_fn=functools.partial(shardinit.fsdp1_param_init_fn, device="cpu"),
        cpu_offload=CPUOffload(offload_params=offload),
    )
    shardinit.materialize(wrapped, seed=SEED, init_fn=captured)
    return wrapped


def _local_flat_shards(model: FSDP) -> list[torch.Tensor]:
    return [unit._flat_param.detach().clone() for unit in FSDP.fsdp_modules(model)]


def _check_fsdp1_offload(world: int) -> None:
    model, plain = _fsdp1(True), _fsdp1(False)
    assert all(unit.cpu_offload.offload_params for unit in FSDP.fsdp_modules(model))
    for i, (ours, theirs) in enumerate(
        zip(_local_flat_shards(model), _local_flat_shards(plain), strict=True)
    ):
        assert ours.device.type == "cpu"
        expect_equal(f"flat shard {i}", ours, theirs)
        _no_rank_copies_another(f"flat shard {i}", ours, world)
    # The same flat shards as the run without offload, whose full parameters are the
    # whole model's (summon_full_params with offload needs an accelerator: below).
    whole, seen = _whole(), []
    with FSDP.summon_full_params(plain):
        for raw, param in plain.named_parameters():
            name = shardinit.canonical_name(raw)
            expect_equal(name, param.detach().clone(), whole[name])
            seen.append(name)
    assert sorted(seen) == sorted(whole), seen


def _check_fsdp1_offload_forward_needs_accelerator() -> None:
    """What torch 2.15 allows on a CPU-only machine: wrapping and filling (above); the
    forward and ``summon_full_params`` go through pinned memory
    (docs/how-fsdp-initializes.md). If these start to run, torch allows them here: move
    them from tools/gpu_check.py into the checks above and update the docs."""
    uses: dict[str, Callable[[FSDP], object]] = {
        "forward": lambda model: model(torch.arange(8).reshape(2, 4)),
        "summon_full_params": lambda model: FSDP.summon_full_params(model).__enter__(),
    }
    for use, run in uses.items():
        try:
            run(_fsdp1(True))  # a fresh model each: a failed use leaves FSDP1's state half-set
        except RuntimeError as error:
            assert "NVIDIA driver" in str(error), f"{use}: {error}"
        else:
            raise AssertionError(f"FSDP1's offloaded {use} ran without an accelerator")


@gloo_scenario(*WORLDS)
def offload_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    no_accelerator = not torch.accelerator.is_available()
    check(checks, "fsdp2_offload", lambda: _check_fsdp2_offload(world))
    check(checks, "fsdp2_offload_train_step", lambda: _check_fsdp2_offload_train_step(world))
    if no_accelerator:
        check(checks, "fsdp2_pinned_refused", lambda: _check_fsdp2_pinned_refused(world))
    check(checks, "fsdp1_offload", lambda: _check_fsdp1_offload(world))
    if no_accelerator and world == 2:
        check(checks, "fsdp1_forward", _check_fsdp1_offload_forward_needs_accelerator)
    return checks


@functools.cache
def results(world: int) -> dict[str, list[str]]:
    return run_group(world, offload_scenario)


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_cpu_offload_bits_equal_the_run_without(world: int) -> None:
    assert_check_passed(results(world), "fsdp2_offload")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_cpu_offload_trains_after_materialize(world: int) -> None:
    assert_check_passed(results(world), "fsdp2_offload_train_step")


@pytest.mark.skipif(
    torch.accelerator.is_available(),
    reason="an accelerator is present: pinned memory can be had, so the refusal this "
    "test asserts does not apply (tools/gpu_check.py runs the pinned path on a GPU)",
)
@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_pinned_offload_refused_without_an_accelerator(world: int) -> None:
    assert_check_passed(results(world), "fsdp2_pinned_refused")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp1_cpu_offload_bits_equal_the_run_without(world: int) -> None:
    assert_check_passed(results(world), "fsdp1_offload")


@pytest.mark.skipif(
    torch.accelerator.is_available(),
    reason="an accelerator is present: torch 2.15 runs FSDP1's offloaded forward, whose "
    "refusal without one this test asserts (tools/gpu_check.py runs it on a GPU)",
)
def test_fsdp1_offloaded_forward_needs_an_accelerator_in_torch_2_15() -> None:
    assert_check_passed(results(2), "fsdp1_forward")
