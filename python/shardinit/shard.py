"""Filling regions of a parameter: ``init_shard``, ``init_box``, ``full``.

CPU outputs are written by the Rust core straight into the tensor's memory with the GIL
released; meanwhile no other thread may touch that memory (a second shardinit fill of it
is refused). CUDA outputs are generated on the device by the Triton kernel of
``shardinit._cuda`` (docs/gpu.md) where it is available and selected
(:func:`shardinit.set_cuda_backend`); otherwise (the host path) into two pinned host
buffers of bounded size (``CUDA_CHUNK_BYTES`` each) and copied asynchronously, so
generating chunk k+1 overlaps the host-to-device copy of chunk k and host memory stays
bounded. Both give the same bits.

This is the spec-level API: it checks the arguments and hands each fill to the one
writer (:func:`writer`: the settings, threads and chunk size, read once per call).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import torch

from ._fill import DeferredFills, Region
from ._layout import Box, chunk_bounds
from ._program import Writer
from ._validate import U64_MAX, DeviceLike, check_int, resolve_device
from .errors import ShardInitError
from .spec import ParamSpec

__all__ = [
    "CUDA_CHUNK_BYTES",
    "box_of_shard",
    "full",
    "get_num_threads",
    "init_box",
    "init_flat",
    "init_shard",
    "set_num_threads",
    "writer",
]

#: Bytes per pinned staging buffer on the CUDA path (two are used).
CUDA_CHUNK_BYTES = 16 * 1024 * 1024

_thread_setting: int | None = None
_thread_lock = threading.Lock()
# fork() copies only the calling thread. The core notices a forked child (a new process
# id) and builds its own worker threads there; this lock may have been held by a thread
# that does not exist in the child.


def _after_fork_in_child() -> None:
    global _thread_lock
    _thread_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def set_num_threads(threads: int | None) -> None:
    """Sets how many threads shardinit's core uses; ``None`` restores the default.

    The default is every core, or ``torch.get_num_threads()`` if that is lower (so
    shardinit never oversubscribes a process that limited torch's intra-op pool). The
    values produced never depend on this setting.
    """
    global _thread_setting
    if threads is not None:
        threads = check_int("threads", threads, low=1, high=4096)
    with _thread_lock:
        _thread_setting = threads


def get_num_threads() -> int:
    """The number of threads the core will use for the next call."""
    if _thread_setting is not None:
        return _thread_setting
    # The CPUs this process may run on (a container or taskset can allow fewer than the
    # machine has); never more threads than torch's intra-op pool either, so a caller
    # that limited torch (or runs one process per core) limits shardinit too.
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, torch.get_num_threads()))


def writer(deferred: DeferredFills | None = None) -> Writer:
    """The writer of one call, with the settings now: :func:`get_num_threads` and
    ``CUDA_CHUNK_BYTES``; ``deferred``: see :class:`shardinit._program.Writer`."""
    return Writer(get_num_threads(), CUDA_CHUNK_BYTES, deferred)


def _check_out(out: Any, spec: ParamSpec, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.layout != torch.strided:
        raise ShardInitError(f"out must have layout torch.strided, got {out.layout}")
    if out.is_nested:
        raise ShardInitError("out must be a plain strided tensor, got a nested tensor")
    if out.is_meta:
        raise ShardInitError("out is a meta tensor; it has no memory to fill")
    if out.is_neg() or out.is_conj():
        # A lazy negated/conjugated view: writing through it would not mean what it says.
        raise ShardInitError("out has its negative or conjugate bit set; resolve it first")
    if out.device.type not in ("cpu", "cuda"):
        raise ShardInitError(f"out must be on a cpu or cuda device, got {out.device}")
    if tuple(out.shape) != shape:
        raise ShardInitError(f"out has shape {tuple(out.shape)} but the region has shape {shape}")
    if out.dtype != spec.dtype:
        raise ShardInitError(f"out has dtype {out.dtype} but the spec has dtype {spec.dtype}")
    if not out.is_contiguous():
        raise ShardInitError("out must be contiguous (C order)")
    return out


def _check_box(spec: ParamSpec, box: Any) -> Box:
    if isinstance(box, (str, bytes)) or not isinstance(box, Sequence):
        raise TypeError(f"box must be a sequence of (start, stop) pairs, got {box!r}")
    if len(box) != len(spec.shape):
        raise ShardInitError(
            f"box has {len(box)} (start, stop) pairs but shape {spec.shape} has "
            f"{len(spec.shape)} dims"
        )
    checked = []
    for dim, pair in enumerate(box):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(f"box[{dim}] must be a (start, stop) pair, got {pair!r}")
        size = spec.shape[dim]
        start = check_int(f"box[{dim}] start", pair[0], low=0, high=size)
        stop = check_int(f"box[{dim}] stop", pair[1], low=start, high=size)
        checked.append((start, stop))
    return tuple(checked)


def _fill(
    spec: ParamSpec,
    region: Region,
    shape: tuple[int, ...],
    device: DeviceLike,
    out: torch.Tensor | None,
) -> torch.Tensor:
    """``region`` of ``spec``'s stream into ``out`` (checked) or a new tensor of
    ``shape`` on ``device``."""
    if out is None:
        out = torch.empty(shape, dtype=spec.dtype, device=resolve_device(device))
    else:
        out = _check_out(out, spec, shape)
        if device is not None and resolve_device(device) != out.device:
            raise ShardInitError(f"device is {device} but out is on {out.device}")
    writer().write_stream(spec, region, out)
    return out


def _fill_box(
    spec: ParamSpec, box: Box, device: DeviceLike, out: torch.Tensor | None
) -> torch.Tensor:
    return _fill(spec, box, tuple(stop - start for start, stop in box), device, out)


def box_of_shard(spec: ParamSpec, rank: int, world: int, dim: int = 0) -> Box:
    """The global box held by ``rank`` of ``world`` when sharding along ``dim`` with
    ``torch.chunk`` / FSDP2 / DTensor ``Shard(dim)`` semantics."""
    world = check_int("world", world, low=1, high=U64_MAX)
    rank = check_int("rank", rank, low=0, high=world - 1)
    ndim = len(spec.shape)
    if ndim == 0:
        raise ShardInitError("dim: a 0-d parameter cannot be sharded; use full()")
    dim = check_int("dim", dim, low=-ndim, high=ndim - 1) % ndim
    start, stop = chunk_bounds(spec.shape[dim], world, rank)
    return tuple((start, stop) if d == dim else (0, size) for d, size in enumerate(spec.shape))


def init_shard(
    spec: ParamSpec,
    rank: int,
    world: int,
    *,
    dim: int = 0,
    device: DeviceLike = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Generates ``rank``'s chunk of the parameter along ``dim``.

    Chunks follow ``torch.chunk`` / FSDP2 / DTensor ``Shard(dim)``: size
    ``ceil(n / world)``, trailing ranks possibly smaller or empty. The values are exactly
    the matching slice of :func:`full`, for every world size.

    Args:
        spec: the parameter.
        rank: this rank, in [0, world).
        world: number of shards, >= 1.
        dim: dimension to shard, in [-ndim, ndim).
        device: None or "cpu" for a CPU tensor; a CUDA device to generate there (by the
            device kernel, or through pinned memory: see :func:`shardinit.set_cuda_backend`).
        out: an existing contiguous tensor of the chunk's shape and the spec's dtype to
            fill in place (its device is used). Concurrent writes to the same tensor are
            not allowed: the GIL is released while shardinit writes ``out``, so no other
            thread may read or write its memory until this call returns. Another
            shardinit call on overlapping memory meanwhile raises ``ShardInitError``.

    Returns:
        The chunk (``out`` if given).

    Raises:
        TypeError: arguments of the wrong type.
        ShardInitError: rank, world or dim out of range; ``out`` of the wrong shape,
            dtype, layout or device, or still being written by another shardinit call; a
            CUDA destination while the backend is ``"triton"`` and the kernel is
            unavailable (docs/gpu.md).

    Example:
        >>> import torch, shardinit
        >>> spec = shardinit.ParamSpec("w", (7, 4), seed=0)
        >>> [shardinit.init_shard(spec, r, 3).shape[0] for r in range(3)]
        [3, 3, 1]
    """
    if not isinstance(spec, ParamSpec):
        raise TypeError(f"spec must be a ParamSpec, got {type(spec).__name__}")
    return _fill_box(spec, box_of_shard(spec, rank, world, dim), device, out)


def init_box(
    spec: ParamSpec,
    box: Sequence[tuple[int, int]],
    *,
    device: DeviceLike = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Generates the box ``box`` (one ``(start, stop)`` pair per dim, 0 <= start <= stop
    <= size) of the parameter, in C order. See :func:`init_shard` for ``device`` and
    ``out`` (concurrent writes to the same tensor are not allowed).

    Example:
        >>> import torch, shardinit
        >>> spec = shardinit.ParamSpec("w", (8, 8), seed=0)
        >>> box = shardinit.init_box(spec, [(2, 4), (0, 3)])
        >>> torch.equal(box, shardinit.full(spec)[2:4, 0:3])
        True
    """
    if not isinstance(spec, ParamSpec):
        raise TypeError(f"spec must be a ParamSpec, got {type(spec).__name__}")
    return _fill_box(spec, _check_box(spec, box), device, out)


def full(spec: ParamSpec, *, device: DeviceLike = None) -> torch.Tensor:
    """The whole parameter (world 1)."""
    if not isinstance(spec, ParamSpec):
        raise TypeError(f"spec must be a ParamSpec, got {type(spec).__name__}")
    return _fill_box(spec, tuple((0, size) for size in spec.shape), device, None)


def init_flat(
    spec: ParamSpec,
    start: int,
    stop: int,
    *,
    device: DeviceLike = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Generates flat elements ``[start, stop)`` of the row-major flattened parameter as a
    1-D tensor (FSDP1 flat-parameter shards). See :func:`init_shard` for ``device`` and
    ``out`` (concurrent writes to the same tensor are not allowed)."""
    if not isinstance(spec, ParamSpec):
        raise TypeError(f"spec must be a ParamSpec, got {type(spec).__name__}")
    start = check_int("start", start, low=0, high=spec.numel)
    stop = check_int("stop", stop, low=start, high=spec.numel)
    return _fill(spec, start, (stop - start,), device, out)
