"""The device kernel on a real CUDA device (skipped without one): the public API with
the backend forced to "triton" equals the CPU result bit for bit, fills in place on the
destination's device and current stream, and a refused call writes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import shardinit
from shardinit import init

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INITS = [
    init.uniform(-1.0, 1.0),
    init.normal(0.0, 0.02),
    init.trunc_normal(std=0.02),
    init.trunc_normal(0.0, 1.0, 30.0, 31.0),
    init.constant(0.1),
]


@pytest.fixture(autouse=True)
def kernel_backend() -> Iterator[None]:
    shardinit.set_cuda_backend("triton")
    yield
    shardinit.set_cuda_backend(None)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.cpu().view(view), b.cpu().view(view)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("initializer", INITS, ids=repr)
def test_kernel_shards_boxes_and_ranges_equal_cpu(
    dtype: torch.dtype, initializer: init.Initializer
) -> None:
    spec = shardinit.ParamSpec("w", (1001, 37), dtype, initializer, seed=1)
    for world, dim in ((1, 0), (3, 0), (8, 1)):
        for rank in range(world):
            gpu = shardinit.init_shard(spec, rank, world, dim=dim, device="cuda")
            assert gpu.device.type == "cuda"
            assert same_bits(gpu, shardinit.init_shard(spec, rank, world, dim=dim))
    box = [(17, 590), (3, 36)]
    assert same_bits(shardinit.init_box(spec, box, device="cuda"), shardinit.init_box(spec, box))
    assert same_bits(
        shardinit.init_flat(spec, 13, 20011, device="cuda"), shardinit.init_flat(spec, 13, 20011)
    )


def test_kernel_fills_out_on_its_device_and_current_stream() -> None:
    spec = shardinit.ParamSpec("emb", (300, 64), torch.bfloat16, init.normal(std=0.02), seed=2)
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    out = torch.empty(100, 64, dtype=torch.bfloat16, device=device)
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        assert shardinit.init_box(spec, [(100, 200), (0, 64)], out=out) is out
    stream.synchronize()
    assert same_bits(out, shardinit.full(spec)[100:200])


def test_refused_fill_writes_nothing() -> None:
    spec = shardinit.ParamSpec("w", (4, 4), seed=0)
    out = torch.full((3, 4), 7.0, device="cuda")
    with pytest.raises(shardinit.ShardInitError, match="shape"):
        shardinit.init_box(spec, [(0, 4), (0, 4)], out=out)
    assert bool((out == 7.0).all())
