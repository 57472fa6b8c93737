"""FSDP2's CPU offload (``fully_shard(offload_policy=CPUOffloadPolicy(...))``) in
``materialize``: offloaded shards are allocated on the CPU whatever the mesh's device
(FSDP2 copies them to the mesh's device for each forward, and would otherwise leave them
on it), and a pinned policy is refused, before anything is allocated, where pinned memory
cannot be had (docs/how-fsdp-initializes.md, "CPU offload").
"""

from __future__ import annotations

import torch
from torch import nn

from .._names import listing
from .._torch_compat import fsdp2_offloaded_params
from ..errors import ShardInitError

__all__ = ["offloaded_devices"]

_CPU = torch.device("cpu")


def offloaded_devices(root: nn.Module, device: torch.device | None) -> dict[int, torch.device]:
    """``id(parameter) -> the CPU`` for every FSDP2 parameter of ``root`` that is
    offloaded to the CPU.

    Raises:
        ShardInitError: a ``CPUOffloadPolicy(pin_memory=True)`` (the default) with no
            accelerator (torch's pinning would fail with "Found no NVIDIA driver" while
            the shards are allocated), or a ``device`` other than the CPU for offloaded
            shards.
    """
    offloaded = fsdp2_offloaded_params(root)
    if not offloaded:
        return {}
    pinned = [name for name, p in root.named_parameters() if offloaded.get(id(p))]
    if pinned and not torch.accelerator.is_available():
        raise ShardInitError(
            f"materialize: {len(pinned)} parameter(s) are sharded by fully_shard with "
            f"offload_policy=CPUOffloadPolicy(pin_memory=True) (CPUOffloadPolicy's default): "
            f"{listing(pinned)}. Pinned host memory needs an accelerator, and this machine "
            "has none (torch.accelerator.is_available() is False; torch would fail with "
            "'Found no NVIDIA driver' while allocating the shards). On a CPU-only machine "
            "pass offload_policy=CPUOffloadPolicy(pin_memory=False) to fully_shard"
        )
    if device is not None and device.type != "cpu":
        names = [name for name, p in root.named_parameters() if id(p) in offloaded]
        raise ShardInitError(
            f"materialize: device={device}, but FSDP2 offloads {len(names)} parameter(s) "
            f"to the CPU (CPUOffloadPolicy): {listing(names)}. Their shards live on the "
            "CPU; leave device unset (or pass device='cpu')"
        )
    return dict.fromkeys(offloaded, _CPU)
