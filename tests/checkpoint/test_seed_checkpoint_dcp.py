"""DCP seed checkpoints written by 2 ranks (each its chunks, a tensor larger than the
buffer in pieces) load into an FSDP2 model at W = 2 with exactly the local shards that
``materialize`` gives the same FSDP2 model."""

from __future__ import annotations

import tempfile

import pytest
import torch
import torch.distributed as dist
from checkpoint_recipes import dcp_load_sharded
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from seed_models import BUFFER, SEED, Tiny, meta_tiny
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit

pytestmark = pytest.mark.distributed


def _sharded(world: int) -> Tiny:
    mesh = init_device_mesh("cpu", (world,))
    model = meta_tiny()
    fully_shard(model.proj, mesh=mesh)  # its own unit: bfloat16
    fully_shard(model, mesh=mesh)
    return model


def _compare(loaded: Tiny, expected: Tiny) -> None:
    want = dict(expected.named_parameters())
    for name, param in loaded.named_parameters():
        got, ref = param.to_local(), want[name].to_local()  # type: ignore[operator]
        assert got.dtype == ref.dtype and torch.equal(got, ref), name
    for name, buffer in expected.named_buffers():
        assert torch.equal(loaded.get_buffer(name), buffer), name
    assert loaded.head.weight is loaded.embed.weight, "tie broken by the load"


@gloo_scenario(2)
def dcp_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    found = [tempfile.mkdtemp(prefix="seed-dcp-") if rank == 0 else None]
    dist.broadcast_object_list(found, src=0)
    path = f"{found[0]}/ckpt"
    shardinit.save_seed_checkpoint(meta_tiny(), path, seed=SEED, format="dcp", buffer_bytes=BUFFER)
    loaded = _sharded(world)
    loaded.to_empty(device="cpu")
    dcp_load_sharded(loaded, path)
    expected = shardinit.materialize(_sharded(world), seed=SEED)
    check(checks, "fsdp2", lambda: _compare(loaded, expected))  # type: ignore[arg-type]
    return checks


def test_dcp_loads_into_fsdp2_as_materialize_fills_it() -> None:
    assert_check_passed(run_group(2, dcp_scenario), "fsdp2")
