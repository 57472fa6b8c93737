"""The host backends of a fill: the Rust core writing a CPU tensor (GIL released), and
the pinned host copy that brings the core's values to a CUDA tensor.

Bottom of the fill path (``shard`` -> ``_fill`` -> this module or ``_cuda``): it calls
nothing above it. Settings (threads, chunk size) arrive as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from . import _core
from ._caches import BoundedMap
from .init import BaseInit, core_init
from .spec import ParamSpec

__all__ = [
    "fill_cpu",
    "fill_program_cpu",
    "fill_via_pinned",
    "fill_whole_on_host",
    "host_fill_args",
    "pinned_empty",
    "start_fills_cpu",
    "writable_view",
]


def writable_view(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A numpy array aliasing ``tensor``'s memory (CPU, contiguous), for the core."""
    if tensor.dtype in _HALF_DTYPES:
        # numpy has no bfloat16: hand over the raw 16-bit patterns.
        tensor = tensor.detach().view(torch.int16)
    if not tensor.is_cpu or tensor.is_neg() or tensor.is_conj():
        # numpy(force=True) would make a copy (on the CPU, the bit resolved), which the
        # core would write instead of the tensor: numpy() raises for these, naming why.
        array = tensor.detach().numpy()
    else:
        # force: without a detach of its own (a parameter requires grad); a CPU tensor
        # with neither bit set is aliased as numpy() aliases it.
        array = tensor.numpy(force=True)
    # A 0-d array's buffer has no shape, which the core's buffer access rejects: 1-D.
    # (numpy's reshape of the contiguous array is a view, made faster than torch's.)
    return array.reshape(-1) if array.ndim == 0 else array


#: The dtypes whose items the core gets as raw 16-bit patterns.
_HALF_DTYPES = (torch.bfloat16, torch.float16)

#: The arguments of one ``_core.fill`` but ``threads``.
HostFill = tuple[int, list[int], _core.Init, str, _core.Region, np.ndarray[Any, Any]]
#: The arguments of one ``_core.fill_program`` but ``threads``.
HostProgramFill = tuple[
    int, list[int], _core.RegisterProgram, str, _core.Region, np.ndarray[Any, Any]
]


def host_fill_args(spec: ParamSpec, region: _core.Region, out: torch.Tensor) -> HostFill:
    """The core's arguments for writing ``region`` of ``spec`` into the CPU tensor
    ``out``."""
    return (
        spec.key64,
        list(spec.shape),
        _core_init(spec.base_init),
        spec.dtype_name,
        region,
        writable_view(out),
    )


def _core_init(base: BaseInit) -> _core.Init:
    """``core_init(base)``, made once per initializer object (a model's many layers of
    one shape and default share it: the specs the writer renames keep it)."""
    held = _CORE_INITS.get(id(base))
    if held is not None and held[0] is base:
        return held[1]
    made = core_init(base)
    _CORE_INITS.put(id(base), (base, made))  # ``base`` held: its id is not reused
    return made


#: :func:`_core_init`'s initializers, by the id of the Python one (held beside it).
_CORE_INITS: BoundedMap[int, tuple[BaseInit, _core.Init]] = BoundedMap()


def host_program_args(
    spec: ParamSpec, program: _core.RegisterProgram, region: _core.Region, out: torch.Tensor
) -> HostProgramFill:
    """The core's arguments for writing ``region`` of ``program``'s values (keyed by
    ``spec``) into the CPU tensor ``out``."""
    return spec.key64, list(spec.shape), program, spec.dtype_name, region, writable_view(out)


def fill_cpu(spec: ParamSpec, region: _core.Region, out: torch.Tensor, threads: int) -> None:
    """Writes ``region`` of ``spec`` into the CPU tensor ``out`` with ``threads`` worker
    threads (GIL released). A second call on overlapping memory while this one runs
    raises ``ShardInitError``."""
    _core.fill(*host_fill_args(spec, region, out), threads)


def start_fills_cpu(fills: list[HostFill | HostProgramFill], threads: int) -> _core.StartedFills:
    """Starts every fill of ``fills`` (:func:`host_fill_args`, :func:`host_program_args`)
    on a thread of the core's, side by side on ``threads``, and returns at once
    (``_core.start_fills``): the caller reads none of the tensors before ``wait()`` on
    the result."""
    return _core.start_fills(fills, threads)


def fill_program_cpu(
    spec: ParamSpec,
    program: _core.RegisterProgram,
    region: _core.Region,
    out: torch.Tensor,
    threads: int,
) -> None:
    """Writes ``region`` of ``program``'s values (keyed by ``spec``: name, seed, global
    shape, dtype; its initializer is not read) into the CPU tensor ``out``, as
    :func:`fill_cpu` does."""
    _core.fill_program(*host_program_args(spec, program, region, out), threads)


def pinned_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A pinned host buffer of ``numel`` elements: every host tensor the CUDA paths stage
    through is made here (tests/program/test_writer.py counts their bytes)."""
    return torch.empty(numel, dtype=dtype, device="cpu", pin_memory=True)


def fill_via_pinned(
    dest: torch.Tensor, fill_part: Callable[[int, torch.Tensor], None], chunk_bytes: int
) -> None:
    """Fills the contiguous CUDA tensor ``dest`` chunk by chunk: ``fill_part(offset,
    host_buffer)`` writes elements [offset, offset + len) into a pinned buffer of at most
    ``chunk_bytes``, which is then copied asynchronously while the next chunk is
    generated into the other buffer.
    """
    flat = dest.view(-1)
    total = flat.numel()
    if total == 0:
        return
    chunk = max(1, chunk_bytes // dest.element_size())
    size = min(chunk, total)
    staging = [pinned_empty(size, dest.dtype) for _ in range(2)]
    copied: list[torch.cuda.Event | None] = [None, None]
    with torch.cuda.device(dest.device):
        stream = torch.cuda.current_stream()
        for index, offset in enumerate(range(0, total, chunk)):
            slot = index % 2
            pending = copied[slot]
            if pending is not None:
                # The copy out of this buffer must finish before it is overwritten.
                pending.synchronize()
            count = min(chunk, total - offset)
            host = staging[slot][:count]
            fill_part(offset, host)
            flat[offset : offset + count].copy_(host, non_blocking=True)
            copy_done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copy_done.record(stream)
            copied[slot] = copy_done
        for last_copy in copied:
            if last_copy is not None:
                # Keep the pinned buffers alive until their last copies are done.
                last_copy.synchronize()


def fill_whole_on_host(dest: torch.Tensor, fill: Callable[[torch.Tensor], None]) -> None:
    """Fills the CUDA tensor ``dest`` by ``fill(host)`` into one host tensor of its shape,
    then one copy: for values that are not elementwise (orthogonal), whose fill computes
    the whole matrix (once, not once per staging chunk) and which the device kernel does
    not implement. The core holds that matrix in binary64 meanwhile anyway."""
    host = pinned_empty(dest.numel(), dest.dtype).view(tuple(dest.shape))
    fill(host)
    dest.copy_(host)
