"""The one fill dispatch: a validated region of a parameter into a validated ``out``,
by ``out``'s device. The path is one-way: the spec-level API (:mod:`.shard`) calls
:func:`fill`, which calls one backend: the core on the CPU (:mod:`._host`), the Triton
kernel on the CUDA device (:mod:`._cuda`), or the core through pinned host buffers
(:mod:`._host`). No backend calls back up.
"""

from __future__ import annotations

import torch

from . import _core, _cuda
from ._host import fill_cpu, fill_via_pinned, fill_whole_on_host
from .init import Orthogonal
from .spec import ParamSpec

__all__ = ["Box", "Region", "fill"]

#: A box of the global tensor: one ``(start, stop)`` pair per dim.
Box = tuple[tuple[int, int], ...]
#: What ``out`` holds: a box (in C order), or the flat elements from an ``int`` start.
Region = Box | int


def _core_region(region: Region, offset: int | None = None) -> _core.Region:
    """``region`` as the core's region; ``offset``: only its elements from there on."""
    if isinstance(region, int):
        return _core.Region.flat(region + (offset or 0))
    return _core.Region.box(list(region), offset)


def fill(
    spec: ParamSpec, region: Region, out: torch.Tensor, *, threads: int, chunk_bytes: int
) -> None:
    """Writes ``region`` of ``spec`` into ``out`` (checked by the caller: contiguous, of
    the region's shape and the spec's dtype, on the CPU or a CUDA device). ``threads``:
    the core's worker threads; ``chunk_bytes``: the size of each pinned buffer of the
    host path to a CUDA ``out``."""
    if out.device.type == "cuda" and isinstance(spec.base_init, Orthogonal):
        # Not elementwise: the whole matrix is computed once on the host, then copied.
        fill_whole_on_host(out, lambda host: fill_cpu(spec, _core_region(region), host, threads))
    elif out.device.type == "cuda" and _cuda.use_device_kernel(out.device):
        if isinstance(region, int):
            _cuda.fill_flat(spec, region, out)
        else:
            _cuda.fill_box(spec, region, out)
    elif out.device.type == "cuda":
        fill_via_pinned(
            out,
            lambda offset, host: fill_cpu(spec, _core_region(region, offset), host, threads),
            chunk_bytes,
        )
    else:
        fill_cpu(spec, _core_region(region), out, threads)
    # The backends write out's memory behind autograd's back (the core's pointer, the
    # kernel): bump its version as torch's own in-place ops do, even under no_grad, so a
    # graph that saved out refuses to backward. A no-op for inference tensors.
    torch.autograd.graph.increment_version(out)
