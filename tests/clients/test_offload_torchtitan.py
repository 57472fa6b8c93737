"""torchtitan's CPU-offload flow with shardinit (torchtitan#4511: "weights from the same
seed", ``trunc_normal_`` on the output layer), worlds 1-3 on gloo.

torchtitan 0.3.0 with ``training.enable_cpu_offload`` builds the model on meta, calls
``apply_fsdp_to_decoder(..., cpu_offload=True)`` (``fully_shard`` with
``offload_policy=CPUOffloadPolicy()``, pinned), then ``model.to_empty(device="cpu")`` and
``model.init_weights(buffer_device=...)`` (trainer.py). Here the last two steps are
``shardinit.materialize(model, seed=..., init_fn=lambda: model.init_weights(...))``.
On this CPU-only machine the pinned policy is refused by shardinit; with the one change
``CPUOffloadPolicy(pin_memory=False)`` the gathered weights equal, bit for bit, the run
without offload and the model materialized whole (so every world size), and no rank's
shard copies another's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.distributed as dist
from materialize_workers import (
    Checks,
    assert_check_passed,
    check,
    expect_equal,
    gloo_scenario,
    run_group,
)
from tiny_configs import titan_llama3_config
from torch import nn

import shardinit

pytestmark = [pytest.mark.clients, pytest.mark.distributed]

SEED = 4511
WORLDS = [1, 2, 3]


@contextmanager
def _unpinned_offload() -> Iterator[None]:
    """torchtitan's ``CPUOffloadPolicy()`` with ``pin_memory=False``: the one change a
    CPU-only machine needs."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from torchtitan.distributed import fsdp as titan_fsdp

    titan_fsdp.CPUOffloadPolicy = functools.partial(CPUOffloadPolicy, pin_memory=False)  # type: ignore[misc]
    try:
        yield
    finally:
        titan_fsdp.CPUOffloadPolicy = CPUOffloadPolicy  # type: ignore[misc]


def _titan_model(world: int | None, cpu_offload: bool) -> nn.Module:
    """torchtitan's Llama3 (untied: its output layer is ``trunc_normal_`` with a
    3-std cutoff), on meta, through torchtitan's own FSDP2 wrapping (``world`` None:
    plain, to be materialized whole)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    with torch.device("meta"):
        model = titan_llama3_config(fuse_qkv=False, tied=False).build()
    if world is not None:
        apply_fsdp_to_decoder(
            model,  # type: ignore[arg-type]
            init_device_mesh("cpu", (world,)),
            param_dtype=torch.float32,
            reduce_dtype=torch.float32,
            pp_enabled=False,
            cpu_offload=cpu_offload,
        )
    return model


def _materialize(model: nn.Module) -> nn.Module:
    return shardinit.materialize(
        model,
        seed=SEED,
        init_fn=lambda: model.init_weights(buffer_device=None),  # type: ignore[operator]
    )


def _check_offload_equals_without(world: int) -> None:
    with _unpinned_offload():
        offloaded = _materialize(_titan_model(world, cpu_offload=True))
    without = dict(_materialize(_titan_model(world, cpu_offload=False)).named_parameters())
    whole = dict(_materialize(_titan_model(None, cpu_offload=False)).named_parameters())
    assert "lm_head.weight" in whole, sorted(whole)
    for name, param in offloaded.named_parameters():
        local = param.to_local()
        assert local.device.type == "cpu", f"{name} on {local.device}"
        gathered = param.full_tensor()
        expect_equal(name, gathered, without[name].full_tensor())
        expect_equal(name, gathered, whole[name].detach())
        shards: list[object] = [None] * world
        dist.all_gather_object(shards, local.detach().clone())
        if world > 1 and "norm" not in name and local.numel():
            alike = [s for s in shards if isinstance(s, torch.Tensor) and s.shape == local.shape]
            assert len(alike) < 2 or not all(torch.equal(alike[0], s) for s in alike[1:]), (
                f"{name}: rank shards are copies"
            )


def _check_pinned_refused(world: int) -> None:
    model = _titan_model(world, cpu_offload=True)
    try:
        _materialize(model)
    except shardinit.ShardInitError as error:
        assert "CPUOffloadPolicy(pin_memory=False)" in str(error), str(error)
    else:
        raise AssertionError("materialize accepted torchtitan's pinned offload without CUDA")


@gloo_scenario(*WORLDS)
def titan_offload_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "offload", lambda: _check_offload_equals_without(world))
    if not torch.accelerator.is_available():
        check(checks, "pinned_refused", lambda: _check_pinned_refused(world))
    return checks


@functools.cache
def results(world: int) -> dict[str, list[str]]:
    return run_group(world, titan_offload_scenario)


@pytest.mark.parametrize("world", WORLDS)
def test_torchtitan_cpu_offload_flow_bits_equal_the_run_without(world: int) -> None:
    assert_check_passed(results(world), "offload")


@pytest.mark.skipif(
    torch.accelerator.is_available(),
    reason="an accelerator is present: pinned memory can be had, so the refusal this "
    "test asserts does not apply (tools/gpu_check.py runs the pinned path on a GPU)",
)
@pytest.mark.parametrize("world", WORLDS)
def test_torchtitan_pinned_offload_refused_without_an_accelerator(world: int) -> None:
    assert_check_passed(results(world), "pinned_refused")
