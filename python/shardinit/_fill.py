"""The one fill dispatch: a validated region of a parameter's values (its stream, or an
init program keyed by it) into a validated ``out``, by ``out``'s device and whether the
values are elementwise. The path is one-way: the spec-level API (:mod:`.shard`) and the
program writer (:mod:`._integration.capture.evaluate`) call :func:`fill`, which calls
one backend: the core on the CPU (:mod:`._host`), the Triton kernel on the CUDA device
(:mod:`._cuda`, a bare stream only), or the core through bounded pinned host buffers
(:mod:`._host`). Values that are not elementwise (orthogonal) are computed once per call
(:func:`fill_not_elementwise`). No backend calls back up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import _core, _cuda
from ._host import fill_cpu, fill_program_cpu, fill_via_pinned, fill_whole_on_host
from ._layout import Box
from .spec import ParamSpec

__all__ = ["CoreProgram", "Region", "fill", "fill_not_elementwise"]

#: What ``out`` holds: a box (in C order), or the flat elements from an ``int`` start.
Region = Box | int
#: Writes the region's elements from ``offset`` on (None: all of them) into the CPU tensor.
_HostWrite = Callable[[torch.Tensor, int | None], None]


@dataclass(frozen=True)
class CoreProgram:
    """An init program as the core's registers, and whether its values are elementwise
    (no source of it is orthogonal)."""

    registers: _core.Program
    elementwise: bool


def _core_region(region: Region, offset: int | None = None) -> _core.Region:
    """``region`` as the core's region; ``offset``: only its elements from there on."""
    if isinstance(region, int):
        return _core.Region.flat(region + (offset or 0))
    return _core.Region.box(list(region), offset)


def fill(
    spec: ParamSpec,
    region: Region,
    out: torch.Tensor,
    *,
    threads: int,
    chunk_bytes: int,
    program: CoreProgram | None = None,
) -> None:
    """Writes ``region`` of ``spec``'s stream (or of ``program``'s values, keyed by
    ``spec``: its name, seed, global shape and dtype) into ``out`` (checked by the
    caller: contiguous, of the region's shape and the spec's dtype, on the CPU or a CUDA
    device). ``threads``: the core's worker threads; ``chunk_bytes``: the size of each
    pinned buffer of the host path to a CUDA ``out``."""

    def write(host: torch.Tensor, offset: int | None) -> None:
        core_region = _core_region(region, offset)
        if program is None:
            fill_cpu(spec, core_region, host, threads)
        else:
            fill_program_cpu(spec, program.registers, core_region, host, threads)

    elementwise = spec.base_init.elementwise if program is None else program.elementwise
    if not elementwise:
        fill_not_elementwise(out, write)
    elif out.device.type != "cuda":
        write(out, None)
    elif program is None and _cuda.use_device_kernel(out.device):
        if isinstance(region, int):
            _cuda.fill_flat(spec, region, out)
        else:
            _cuda.fill_box(spec, region, out)
    else:
        fill_via_pinned(out, lambda offset, host: write(host, offset), chunk_bytes)
    # The backends write out's memory behind autograd's back (the core's pointer, the
    # kernel): bump its version as torch's own in-place ops do, even under no_grad, so a
    # graph that saved out refuses to backward. A no-op for inference tensors.
    torch.autograd.graph.increment_version(out)


def fill_not_elementwise(out: torch.Tensor, write: _HostWrite) -> None:
    """The one call that computes values that are not elementwise (orthogonal's Q, in
    the core: the whole matrix per call, whatever part of it ``out`` holds). On the host
    into ``out``, or for a CUDA ``out`` into one host tensor of its size, then copied:
    never by the device kernel, never per staging chunk."""
    if out.device.type == "cuda":
        fill_whole_on_host(out, lambda host: write(host, None))
    else:
        write(out, None)
