"""Host side of the device kernel: a flat range or an N-d box of a parameter becomes
one launch (or a few, for grids beyond CUDA's limit) of :mod:`.kernel`.

The caller has validated everything (spec, region, ``out``) exactly as the host path
does; this module only turns the region into kernel arguments. It depends on the spec
layer (``ParamSpec``, ``init.core_init``) and the core (:mod:`.._host` for a constant's
bits and the self-check's reference), never on the fill API above it. Imports triton
(through ``.kernel``), so it is imported only when a CUDA fill runs on the device.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .. import _core
from .._host import fill_cpu
from ..errors import InternalError
from ..init import core_init
from ..spec import ParamSpec
from . import kernel

__all__ = [
    "COMPILE_OPTIONS",
    "FLAT_BLOCKS",
    "ROW_BLOCKS",
    "SAMPLER_ARGS",
    "fill_box",
    "fill_flat",
    "sampler_constants",
    "self_check",
    "warps_for",
]

#: Philox blocks per program of the flat kernel (1024 one-word or 512 float64 elements).
#: Fixed per variant: no autotuning, and the bits never depend on it (tested).
FLAT_BLOCKS = 256
#: The same for the rows kernel, whose rows may be short.
ROW_BLOCKS = 64
#: Compile options of every launch (rule 7 of :mod:`.kernel`); the static PTX check
#: compiles with the same.
COMPILE_OPTIONS: dict[str, Any] = {"enable_fp_fusion": False}
#: CUDA's limit on the x dimension of a grid.
MAX_PROGRAMS = 2**31 - 1

KIND_CODES = {
    "uniform": kernel.UNIFORM.value,
    "normal": kernel.NORMAL.value,
    "trunc_normal": kernel.TRUNC_NORMAL.value,
}
DTYPE_CODES = {
    torch.float32: kernel.FLOAT32.value,
    torch.float64: kernel.FLOAT64.value,
    torch.bfloat16: kernel.BFLOAT16.value,
    torch.float16: kernel.FLOAT16.value,
}
#: The kernels' float64 arguments: the core's sampler constants, by the names
#: ``_core.sampler_constants`` gives them (rust/core/src/init.rs ``Sampler::constants``)
#: and passed by name, so no order of them is written here.
#: They are the flat kernel's parameters annotated ``tl.float64`` (read from its source
#: function, which the compiled and the interpreted kernel share).
SAMPLER_ARGS = tuple(
    param.name
    for param in inspect.signature(kernel.fill_flat_kernel.fn).parameters.values()
    if param.annotation == "tl.float64"
)
_INT_VIEWS = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
}


def sampler_constants(spec: ParamSpec) -> dict[str, float]:
    """The kernel's float64 arguments for ``spec``'s initializer by name: the core's own
    sampler constants (never recomputed here), 0.0 for those its kind does not read."""
    constants = _core.sampler_constants(core_init(spec.base_init))
    unknown = constants.keys() - set(SAMPLER_ARGS)
    if unknown:
        raise InternalError(f"the kernels take no argument named {sorted(unknown)}")
    return {**dict.fromkeys(SAMPLER_ARGS, 0.0), **constants}


def warps_for(blocks: int) -> int:
    """Warps per program: one Philox block per thread (a thread with no block of its own
    would recompute a neighbour's), at most 8."""
    return max(1, min(8, blocks // 32))


def _elements_per_tile(dtype: torch.dtype, blocks: int) -> tuple[int, int]:
    """(elements per tile, alignment of a tile's first element) for ``blocks`` blocks."""
    return (2 * blocks, 2) if dtype == torch.float64 else (4 * blocks, 4)


@contextlib.contextmanager
def _on_device(out: torch.Tensor) -> Iterator[None]:
    """Launch on ``out``'s device (and so on its current stream); CPU tensors are the
    interpreter's (tests)."""
    if out.is_cuda:
        with torch.cuda.device(out.device):
            yield
    else:
        yield


def _as_kernel_out(out: torch.Tensor) -> torch.Tensor:
    """16-bit values are stored as bits through an int16 view (rounded in the kernel)."""
    if out.dtype in (torch.bfloat16, torch.float16):
        return out.view(torch.int16)
    return out


def _fill_constant(spec: ParamSpec, out: torch.Tensor) -> None:
    """Every element has the bits the host path gives one element; ``fill_`` of those
    bits through an integer view (never ``fill_``'s own rounding of the float)."""
    one = torch.empty(1, dtype=spec.dtype, device="cpu")
    fill_cpu(spec, _core.Region.flat(0), one, threads=1)
    bits = int(one.view(_INT_VIEWS[spec.dtype])[0])
    out.view(_INT_VIEWS[spec.dtype]).fill_(bits)


def fill_flat(spec: ParamSpec, start: int, out: torch.Tensor, blocks: int = FLAT_BLOCKS) -> None:
    """Global elements ``[start, start + out.numel())`` of ``spec`` into the contiguous
    ``out``, on ``out``'s device (``blocks``: Philox blocks per program; tests vary it)."""
    count = out.numel()
    if count == 0:
        return
    if spec.base_init.kind == "constant":
        _fill_constant(spec, out)
        return
    constants = sampler_constants(spec)
    tile, align = _elements_per_tile(spec.dtype, blocks)
    flat = _as_kernel_out(out).view(-1)
    # Launches of at most MAX_PROGRAMS whole tiles, each starting tile-aligned.
    per_launch = MAX_PROGRAMS * tile
    with _on_device(out):
        done = 0
        while done < count:
            part = min(count - done, per_launch - align)
            grid = (math.ceil(((start + done) % align + part) / tile),)
            kernel.fill_flat_kernel[grid](
                flat[done : done + part],
                spec.key64,
                start + done,
                part,
                **constants,
                KIND=KIND_CODES[spec.base_init.kind],
                DTYPE=DTYPE_CODES[spec.dtype],
                BLOCKS=blocks,
                num_warps=warps_for(blocks),
                **COMPILE_OPTIONS,
            )
            done += part


def rows_of_box(
    shape: Sequence[int], box: Sequence[tuple[int, int]]
) -> tuple[int, list[tuple[int, int]], int]:
    """The box as rows x columns of contiguous global runs: ``(first_start, row_dims,
    columns)``. The trailing dims the box covers whole merge into one run with the last
    partial dim; ``row_dims`` are ``(extent, global stride)`` pairs of the dims before."""
    ndim = len(shape)
    merged = ndim  # dims merged into the run: merged..ndim-1
    columns = 1
    while merged > 0:
        start, stop = box[merged - 1]
        columns *= stop - start
        merged -= 1
        if (start, stop) != (0, shape[merged]):
            break
    strides = [math.prod(shape[d + 1 :]) for d in range(ndim)]
    first = sum(start * stride for (start, _), stride in zip(box, strides, strict=True))
    row_dims = [(box[d][1] - box[d][0], strides[d]) for d in range(merged)]
    return first, row_dims, columns


def _signed64(value: int) -> int:
    """The int64 with the same bits as the uint64 ``value`` (mod 2^64)."""
    value %= 2**64
    return value - 2**64 if value >= 2**63 else value


def _row_starts(first: int, row_dims: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """The uint64 global start of every row, as int64 bits, built on ``device`` (int64
    arithmetic wraps mod 2^64, so the bits are right even for starts >= 2^63)."""
    starts = torch.tensor([_signed64(first)], dtype=torch.int64, device=device)
    for extent, stride in row_dims:
        steps = torch.arange(extent, dtype=torch.int64, device=device) * _signed64(stride)
        starts = (starts[:, None] + steps[None, :]).reshape(-1)
    return starts


def fill_box(
    spec: ParamSpec, box: Sequence[tuple[int, int]], out: torch.Tensor, blocks: int = ROW_BLOCKS
) -> None:
    """The box ``box`` of ``spec`` into the contiguous ``out`` of the box's shape, on
    ``out``'s device. A box that is one run goes through :func:`fill_flat`."""
    if out.numel() == 0:
        return
    first, row_dims, columns = rows_of_box(spec.shape, box)
    if not row_dims or spec.base_init.kind == "constant":
        fill_flat(spec, first, out.view(-1))
        return
    constants = sampler_constants(spec)
    tile, align = _elements_per_tile(spec.dtype, blocks)
    tiles_per_row = math.ceil((columns + align - 1) / tile)
    starts = _row_starts(first, row_dims, out.device)
    flat = _as_kernel_out(out).view(-1)
    rows_per_launch = max(1, MAX_PROGRAMS // tiles_per_row)
    with _on_device(out):
        for row in range(0, starts.numel(), rows_per_launch):
            rows = min(rows_per_launch, starts.numel() - row)
            kernel.fill_rows_kernel[(rows * tiles_per_row,)](
                flat[row * columns :],
                starts[row : row + rows],
                spec.key64,
                columns,
                columns,
                tiles_per_row,
                **constants,
                KIND=KIND_CODES[spec.base_init.kind],
                DTYPE=DTYPE_CODES[spec.dtype],
                BLOCKS=blocks,
                num_warps=warps_for(blocks),
                **COMPILE_OPTIONS,
            )


def self_check(device: torch.device) -> bool:
    """Starts Triton's runtime on ``device`` and fills a short, unaligned range of a
    normal float32 parameter there: True when its bits equal the host path's."""
    from ..init import normal

    spec = ParamSpec("shardinit.self_check", (4096,), torch.float32, normal(0.0, 1.0), seed=0)
    out = torch.empty(1031, dtype=torch.float32, device=device)
    fill_flat(spec, 3, out)
    host = torch.empty(1031, dtype=torch.float32, device="cpu")
    fill_cpu(spec, _core.Region.flat(3), host, threads=1)
    return torch.equal(out.cpu(), host)
