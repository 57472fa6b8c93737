"""The most dims a shape may have is 64, the buffer protocol's limit through which every
shard is filled (issue 37): at 64 dims every entry point fills, slice == full; at 65
``ParamSpec`` refuses, naming ``shape`` (tests/core/test_bad_input.py)."""

from __future__ import annotations

import torch

import shardinit
from shardinit import init

SHAPE = (1,) * 30 + (3,) + (1,) * 32 + (4,)  # 64 dims, 12 elements


def test_64_dims_fill_and_agree_with_two_dims() -> None:
    spec = shardinit.ParamSpec("w", SHAPE, torch.float32, init.normal(), seed=7)
    flat = shardinit.ParamSpec("w", (3, 4), torch.float32, init.normal(), seed=7)
    full = shardinit.full(spec)
    assert full.dim() == 64
    # Values depend on the flat index only (stream-format.md): the same as (3, 4).
    assert torch.equal(full.reshape(3, 4), shardinit.full(flat))
    box = [(0, 1)] * 30 + [(1, 3)] + [(0, 1)] * 32 + [(0, 4)]
    assert torch.equal(shardinit.init_box(spec, box).reshape(2, 4), full.reshape(3, 4)[1:3])
    shard = shardinit.init_shard(spec, 1, 3, dim=30)
    assert torch.equal(shard.reshape(1, 4), full.reshape(3, 4)[1:2])
