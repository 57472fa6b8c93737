"""The host path to a CUDA tensor (``_host.fill_via_pinned``: the core writes one chunk
at a time into two bounded pinned buffers, each copied asynchronously to the device) on a
machine without a GPU: the CUDA destination and its pinned buffers are CPU tensors
standing in (tests/helpers/cuda_standin.py), whose asynchronous copies run late, as a
stream may run them. ZeRO-3 and ``init_flat(..., device="cuda")`` take this path for
flat ranges, FSDP2 for boxes, and every init program to CUDA takes it.

The values equal the CPU fill bit for bit: for streams and programs, boxes and flat
ranges, at chunk boundaries (a chunk of one element, chunks that do not divide the region
and end in a partial one, a region of one chunk) and at regions that do not start at the
parameter's first element, where a chunk's offset into the region must be added to the
region's own start (``_fill._core_region``)."""

from __future__ import annotations

import pytest
import torch
from cuda_standin import on_cpu, on_cuda, stand_in

import shardinit
from shardinit import _fill, _host, init, shard
from shardinit._layout import Box
from shardinit._program import CapturedOp, ParamRecord, Scale, base_ops, op_programs
from shardinit._program.compile import compile_program

SHAPE = (37, 29)  # 1073 elements: no chunk size below divides it but 29 and 37
SEED = 5
#: (bytes per pinned buffer, its elements for float32): one element, 7 (1073 = 153 * 7
#: + 2: a last partial chunk), 64 with bytes left over, and the whole region at once.
CHUNK_BYTES = [4, 28, 4 * 64 + 3, 1 << 20]
FLAT = [(0, 1073), (37, 1000), (1, 1073), (500, 501), (1072, 1073)]
BOXES: list[Box] = [((3, 20), (5, 29)), ((0, 37), (0, 29)), ((36, 37), (28, 29))]
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CUDA runtime stood in; the byte sizes of the pinned buffers allocated."""
    return stand_in(monkeypatch)


def _spec(dtype: torch.dtype) -> shardinit.ParamSpec:
    return shardinit.ParamSpec("w", SHAPE, dtype, init.normal(0.0, 0.02), seed=SEED)


def _registers(dtype: torch.dtype) -> _fill.Registers:
    """``normal_(std=0.02)`` then ``mul_(3.0)``: an init program, not a bare stream."""
    whole = tuple((0, size) for size in SHAPE)
    ops = (
        *base_ops(init.normal(0.0, 0.02), SHAPE),
        CapturedOp(whole, Scale(3.0), "mul_(3.0)", "<test>"),
    )
    program = op_programs(ParamRecord("w", SHAPE, dtype, ops), ops)[-1]
    compiled = compile_program(program, SHAPE)
    assert isinstance(compiled, _fill.Registers) and compiled.elementwise
    return compiled


def _cpu_whole(dtype: torch.dtype, registers: _fill.Registers | None) -> torch.Tensor:
    """The whole parameter filled on the CPU (one call, no chunk, no offset)."""
    out = torch.empty(SHAPE, dtype=dtype)
    whole = tuple((0, size) for size in SHAPE)
    _fill.fill(_spec(dtype), whole, out, threads=1, chunk_bytes=1, registers=registers)
    return out


def _region_of(whole: torch.Tensor, region: _fill.Region, stop: int | None) -> torch.Tensor:
    if isinstance(region, int):
        assert stop is not None
        return whole.reshape(-1)[region:stop]
    return whole[tuple(slice(start, end) for start, end in region)]


def _fill_on_cuda(
    dtype: torch.dtype,
    region: _fill.Region,
    shape: tuple[int, ...],
    chunk_bytes: int,
    registers: _fill.Registers | None,
) -> torch.Tensor:
    out = on_cuda(torch.full(shape, float("nan"), dtype=dtype))
    _fill.fill(_spec(dtype), region, out, threads=2, chunk_bytes=chunk_bytes, registers=registers)
    return on_cpu(out)


def _expected_buffers(numel: int, chunk_bytes: int, dtype: torch.dtype) -> list[int]:
    size = torch.empty(0, dtype=dtype).element_size()
    return [min(max(1, chunk_bytes // size), numel) * size] * 2


@pytest.mark.parametrize("program", [False, True], ids=["stream", "program"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("chunk_bytes", CHUNK_BYTES)
@pytest.mark.parametrize("flat", FLAT, ids=str)
def test_a_flat_range_to_cuda_equals_the_cpu_fill(
    staged: list[int], flat: tuple[int, int], chunk_bytes: int, dtype: torch.dtype, program: bool
) -> None:
    registers = _registers(dtype) if program else None
    start, stop = flat
    got = _fill_on_cuda(dtype, start, (stop - start,), chunk_bytes, registers)
    expected = _region_of(_cpu_whole(dtype, registers), start, stop)
    assert torch.equal(got, expected)
    assert staged == _expected_buffers(stop - start, chunk_bytes, dtype)


@pytest.mark.parametrize("program", [False, True], ids=["stream", "program"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("chunk_bytes", CHUNK_BYTES)
@pytest.mark.parametrize("box", BOXES, ids=str)
def test_a_box_to_cuda_equals_the_cpu_fill(
    staged: list[int], box: Box, chunk_bytes: int, dtype: torch.dtype, program: bool
) -> None:
    registers = _registers(dtype) if program else None
    shape = tuple(stop - start for start, stop in box)
    got = _fill_on_cuda(dtype, box, shape, chunk_bytes, registers)
    expected = _region_of(_cpu_whole(dtype, registers), box, None)
    assert torch.equal(got, expected)
    assert staged == _expected_buffers(got.numel(), chunk_bytes, dtype)


def test_the_cpu_references_are_the_parameters_values() -> None:
    """The references above are the stream's values, and the program's its values
    times 3 (so an error common to both paths would not go unseen)."""
    for dtype in DTYPES:
        stream = shardinit.full(_spec(dtype))
        assert torch.equal(_cpu_whole(dtype, None), stream)
    float32 = shardinit.full(_spec(torch.float32))
    assert torch.equal(_cpu_whole(torch.float32, _registers(torch.float32)), float32 * 3.0)


@pytest.mark.parametrize("chunk_bytes", [4, 28, 4096])
def test_the_public_calls_to_cuda_take_the_host_path_with_the_same_values(
    staged: list[int], monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    """``init_flat`` / ``init_box`` / ``init_shard`` with a CUDA ``out``: the chunk size is
    ``shard.CUDA_CHUNK_BYTES``."""
    monkeypatch.setattr(shard, "CUDA_CHUNK_BYTES", chunk_bytes)
    spec = _spec(torch.float32)
    whole = shardinit.full(spec)
    flat = shardinit.init_flat(spec, 41, 977, out=on_cuda(torch.empty(936)))
    assert torch.equal(on_cpu(flat), whole.reshape(-1)[41:977])
    box = shardinit.init_box(spec, [(2, 30), (7, 28)], out=on_cuda(torch.empty(28, 21)))
    assert torch.equal(on_cpu(box), whole[2:30, 7:28])
    rank = shardinit.init_shard(spec, 1, 3, out=on_cuda(torch.empty(13, 29)))
    assert torch.equal(on_cpu(rank), whole[13:26])
    assert staged and max(staged) <= max(chunk_bytes, 4)


@pytest.mark.parametrize(
    ("total", "chunk_bytes", "dtype"),
    [
        (1073, 28, torch.float32),  # 7 elements a chunk, the last one of 2
        (1073, 29, torch.float32),  # bytes that are not whole elements: still 7
        (200, 2, torch.bfloat16),  # one element a chunk (integers exact in bfloat16)
        (1073, 3, torch.float32),  # less than an element: one element a chunk
        (10, 4096, torch.float64),  # the region in one chunk, buffers of its size
        (12, 32, torch.float64),  # chunks that divide the region exactly
        (0, 28, torch.float32),  # nothing to copy: no buffer
    ],
)
def test_the_chunks_cover_the_destination_once_in_order(
    staged: list[int], total: int, chunk_bytes: int, dtype: torch.dtype
) -> None:
    """``fill_via_pinned`` itself: chunk k of c elements asks for [k c, k c + c) (the
    last one shorter) into a buffer of its length, and lands at that offset."""
    dest = on_cuda(torch.full((total,), -1.0, dtype=dtype))
    asked: list[tuple[int, int]] = []

    def fill_part(offset: int, host: torch.Tensor) -> None:
        asked.append((offset, host.numel()))
        host.copy_(torch.arange(offset, offset + host.numel(), dtype=dtype))

    _host.fill_via_pinned(dest, fill_part, chunk_bytes)
    size = dest.element_size()
    chunk = max(1, chunk_bytes // size)
    assert asked == [(start, min(chunk, total - start)) for start in range(0, total, chunk)]
    assert torch.equal(on_cpu(dest), torch.arange(total, dtype=dtype))
    assert staged == ([] if total == 0 else [min(chunk, total) * size] * 2)
