"""One rank of ``shardinit demo`` / ``shardinit fingerprint --world N`` (run by
:func:`shardinit.cli._launch.launch`; not a public API).

Builds a built-in model on the meta device, applies FSDP2 ``fully_shard`` (optionally on
top of tensor parallelism, :data:`~shardinit.cli.models.TP_PLAN`, and with CPU offload)
on a CPU mesh with gloo, materializes the local shards with shardinit, fingerprints every
parameter, and optionally then runs torch's own path on a second copy of the same meta
model, as users run it (``to_empty`` + ``torch.manual_seed`` + ``reset_parameters`` on
the DTensor shards). Both timings start from the same point: the sharded model on meta.
Writes ``rank<r>.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import canonical_name, fingerprint_model, get_num_threads, materialize
from ._args import rss_bytes
from ._launch import exit_worker, join_worker_group
from .models import TP_PLAN
from .transformer import build_model


def build_sharded(
    model_name: str, world: int, tp: int, *, offload: bool = False
) -> tuple[nn.Module, Any]:
    """The built-in model on meta, with TP (if ``tp > 1``) and FSDP2 applied (with
    ``CPUOffloadPolicy`` if ``offload``: pinned only where an accelerator can pin); its
    mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    model = build_model(model_name)
    if tp > 1:
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        plan = {path: styles[style]() for path, style in TP_PLAN.items()}
        for block in model.layers:
            parallelize_module(block, mesh["tp"], plan)
        dp_mesh = mesh["dp"]
    else:
        mesh = init_device_mesh("cpu", (world,))
        dp_mesh = mesh
    pinned = torch.accelerator.is_available()
    policy = CPUOffloadPolicy(pin_memory=pinned) if offload else OffloadPolicy()  # none
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh, offload_policy=policy)
    fully_shard(model, mesh=dp_mesh, offload_policy=policy)
    return model, mesh


def _local_digests(model: nn.Module) -> dict[str, list[Any]]:
    """Per parameter: [local shape, SHA-256 of the local shard's bytes], to tell whether
    ranks hold copies of each other."""
    from torch.distributed.tensor import DTensor

    result: dict[str, list[Any]] = {}
    for name, param in model.named_parameters():
        local = param.to_local() if isinstance(param, DTensor) else param.detach()
        raw = local.detach().contiguous().view(-1).view(torch.uint8).numpy()
        result[canonical_name(name)] = [list(local.shape), hashlib.sha256(raw.data).hexdigest()]
    return result


def _local_bytes(model: nn.Module) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for param in model.parameters():
        local = param.to_local() if isinstance(param, DTensor) else param
        total += local.numel() * local.element_size()
    return total


def _say(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def _shardinit_path(model: nn.Module, seed: int, rank: int) -> dict[str, Any]:
    """Materializes ``model`` with shardinit; time, memory, bytes and fingerprints."""
    _say(rank, "built on meta + fully_shard; materializing with shardinit.materialize")
    rss_before = rss_bytes()
    dist.barrier()  # all ranks start the clock together
    start = time.perf_counter()
    materialize(model, seed=seed)
    seconds = time.perf_counter() - start
    peak = rss_bytes("VmHWM")
    _say(rank, f"materialized in {seconds:.2f} s; fingerprinting")
    start = time.perf_counter()
    fingerprints = fingerprint_model(model)
    _say(rank, f"fingerprinted in {time.perf_counter() - start:.2f} s")
    return {
        "seconds": seconds,
        "rss_before": rss_before,
        "peak_rss": peak,
        "bytes": _local_bytes(model),
        "threads": get_num_threads(),
        "shapes": {canonical_name(n): list(p.shape) for n, p in model.named_parameters()},
        "fingerprints": fingerprints,
    }


def _torch_path(model: nn.Module, seed: int, rank: int) -> dict[str, Any]:
    """Initializes ``model`` (sharded, on meta) the way torch users do; time,
    fingerprints, and local digests (to tell whether ranks hold copies of each other)."""
    _say(rank, "running torch's path: to_empty + manual_seed + reset_parameters on the shards")
    dist.barrier()  # all ranks start the clock together, as for shardinit
    start = time.perf_counter()
    model.to_empty(device="cpu")  # the local shards: on the CPU mesh's device
    torch.manual_seed(seed)
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    return {
        "torch_seconds": time.perf_counter() - start,
        "torch_fingerprints": fingerprint_model(model),
        "torch_local": _local_digests(model),
    }


def _warm_up(world: int, tp: int, seed: int, offload: bool) -> None:
    """Runs both paths once on the tiny model, untimed."""
    warm, _ = build_sharded("tiny", world, tp, offload=offload)
    materialize(warm, seed=seed)
    warm, _ = build_sharded("tiny", world, tp, offload=offload)
    warm.to_empty(device="cpu")
    for module in warm.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    """Runs one rank; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m shardinit.cli._worker")
    parser.add_argument("--model", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--torch-path", action="store_true")
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    rank, world = join_worker_group()
    try:
        if args.torch_path:  # neither timing pays for first calls (imports, thread starts)
            _warm_up(world, args.tp, args.seed, args.offload)
        model, _ = build_sharded(args.model, world, args.tp, offload=args.offload)
        result: dict[str, Any] = {"rank": rank, "world": world}
        result.update(_shardinit_path(model, args.seed, rank))
        if args.torch_path:
            del model  # the same starting point: a fresh sharded model on meta
            fresh, _ = build_sharded(args.model, world, args.tp, offload=args.offload)
            result.update(_torch_path(fresh, args.seed, rank))
        Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_worker(main())
