"""The host path of CUDA fills (backend "host"): generated through bounded pinned
buffers and copied asynchronously; must equal the CPU result bit for bit. Skipped
cleanly where CUDA is absent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import shardinit
from shardinit import _cuda, init, shard

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def host_backend() -> Iterator[None]:
    """These tests are of the host path; tests/cuda/test_device_cuda.py has the kernel's."""
    shardinit.set_cuda_backend("host")
    yield
    shardinit.set_cuda_backend(None)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_shards_equal_cpu(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny staging buffers force many chunks, both buffers reused several times.
    monkeypatch.setattr(shard, "CUDA_CHUNK_BYTES", 4096)
    spec = shardinit.ParamSpec("w", (1001, 37), dtype, init.trunc_normal(std=0.02), seed=1)
    for world in (1, 3, 8):
        for rank in range(world):
            gpu = shardinit.init_shard(spec, rank, world, device="cuda")
            assert gpu.device.type == "cuda"
            assert torch.equal(gpu.cpu(), shardinit.init_shard(spec, rank, world))


def test_cuda_out_and_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard, "CUDA_CHUNK_BYTES", 1000)
    spec = shardinit.ParamSpec("emb", (300, 64), torch.bfloat16, init.normal(std=0.02), seed=2)
    out = torch.empty(100, 64, dtype=torch.bfloat16, device="cuda")
    assert shardinit.init_box(spec, [(100, 200), (0, 64)], out=out) is out
    assert torch.equal(out.cpu(), shardinit.full(spec)[100:200])
    flat = shardinit.init_flat(spec, 17, 9000, device="cuda")
    assert torch.equal(flat.cpu(), shardinit.full(spec).reshape(-1)[17:9000])


def test_cuda_default_chunking_large_shard() -> None:
    spec = shardinit.ParamSpec("big", (8192, 4096), torch.float32, init.uniform(), seed=3)
    gpu = shardinit.init_shard(spec, 1, 2, device=torch.device("cuda", 0))
    assert torch.equal(gpu.cpu(), shardinit.init_shard(spec, 1, 2))


def test_cuda_device_mismatch_with_out_is_refused() -> None:
    spec = shardinit.ParamSpec("w", (4, 4), seed=0)
    with pytest.raises(shardinit.ShardInitError, match="device"):
        shardinit.init_box(
            spec, [(0, 4), (0, 4)], device="cpu", out=torch.empty(4, 4, device="cuda")
        )


def test_cuda_orthogonal_is_computed_on_the_host_never_by_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An orthogonal fill computes the whole matrix once on the host and copies its
    region, whatever the backend: the device kernel has no orthogonal (it would be
    asked for a wrong formula), so it must never be called."""

    def kernel(*args: object) -> None:
        raise AssertionError("the device kernel was asked for an orthogonal fill")

    monkeypatch.setattr(_cuda, "use_device_kernel", lambda device: True)
    monkeypatch.setattr(_cuda, "fill_box", kernel)
    monkeypatch.setattr(_cuda, "fill_flat", kernel)
    for dtype in (torch.float32, torch.bfloat16):
        spec = shardinit.ParamSpec("q", (70, 30), dtype, init.orthogonal(0.5), seed=4)
        for rank in range(3):
            gpu = shardinit.init_shard(spec, rank, 3, device="cuda")
            assert torch.equal(gpu.cpu(), shardinit.init_shard(spec, rank, 3))
        flat = shardinit.init_flat(spec, 17, 2000, device="cuda")
        assert torch.equal(flat.cpu(), shardinit.full(spec).reshape(-1)[17:2000])
