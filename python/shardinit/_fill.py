"""The one fill dispatch: a validated region of a parameter's values (its stream, or an
init program keyed by it, compiled to the core's registers) into a validated ``out``, by
``out``'s device and whether the values are elementwise. The path is one-way: the one
writer (:class:`._program.Writer`, built by the spec-level API :mod:`.shard` and by
materialize) calls :func:`fill`, which calls
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
from ._caches import BoundedMap
from ._host import (
    HostFill,
    HostProgramFill,
    fill_cpu,
    fill_program_cpu,
    fill_via_pinned,
    fill_whole_on_host,
    host_fill_args,
    host_program_args,
    start_fills_cpu,
)
from ._layout import Box
from .spec import ParamSpec

__all__ = [
    "DeferredFills",
    "Region",
    "Registers",
    "fill",
    "fill_not_elementwise",
    "values_elementwise",
]

#: What ``out`` holds: a box (in C order), or the flat elements from an ``int`` start.
Region = Box | int
#: Writes the region's elements from ``offset`` on (None: all of them) into the CPU tensor.
_HostWrite = Callable[[torch.Tensor, int | None], None]


@dataclass(frozen=True)
class Registers:
    """An init program compiled to the core's register machine (``code``), and whether
    its values are elementwise (no source of it is orthogonal)."""

    code: _core.RegisterProgram
    elementwise: bool


def _core_region(region: Region, offset: int | None = None) -> _core.Region:
    """``region`` as the core's region; ``offset``: only its elements from there on."""
    if isinstance(region, int):
        return _core.Region.flat(region + (offset or 0))
    if offset is None:
        # A frozen value, made once per box: a model's many layers of one shape share it.
        made = _BOXES.get(region)
        if made is None:
            made = _core.Region.box(list(region), None)
            _BOXES.put(region, made)
        return made
    return _core.Region.box(list(region), offset)


#: The core's region of each box :func:`_core_region` made (no offset).
_BOXES: BoundedMap[Box, _core.Region] = BoundedMap()


def values_elementwise(spec: ParamSpec, registers: Registers | None) -> bool:
    """Whether the values are elementwise: the spec's initializer's, or ``registers``'."""
    return spec.base_init.elementwise if registers is None else registers.elementwise


class DeferredFills:
    """Fills into CPU tensors that :func:`fill` is handed and leaves to the core: every
    elementwise one, a stream's or a program's, of any size. They are written in
    batches (:func:`._host.start_fills_cpu`), each on a thread of the core's while the
    caller goes on, its fills side by side on the threads the fills ask for (the core's
    ``fill_many``: each fill's chunks on the same pool, so a batch of one large fill
    and many small ones keeps every thread busy to its end):

    * a model of many small parameters spends about as long in Python per parameter as
      the core spends generating it: the two overlap, on two cores;
    * a model of large parameters (EfficientNet's convolutions, a classifier) has them
      generated on every thread while Python plans the next ones, where a fill written
      at once held the caller for its whole length;
    * a model of many computed parameters (timm's ``trunc_normal_`` on every weight)
      keeps every thread busy: the programs of a batch run side by side.

    A batch starts as soon as it holds :data:`BATCH` fills or :data:`ELEMENTS`
    elements, whether or not the ones before it have ended: the core's pool takes the
    work of every batch under way as it comes, so the core writes from a model's first
    parameters on and never idles while the caller plans (the caller cannot see a batch
    end before it waits for it; a batch that waited for the one before it started only
    when the caller next handed one over, and the first only after hundreds of small
    parameters). At most :data:`RUNNING` run at once: the caller waits for the oldest
    before it starts one more. A batch closed by its count of fills (many small ones,
    whose Python is the slower side) runs on one thread fewer, leaving the caller's
    Python a core.

    The values are there when the ``with`` block ends (:meth:`__exit__` writes the last
    batch, waits for every one and bumps the tensors' versions as :func:`fill` does), so
    only a writer that reads none of the tensors meanwhile passes one
    (:meth:`shardinit._integration.plan.Plan.allocate_and_fill`, which writes a whole
    model). The first error of a batch, in the order they were started, is raised there;
    leaving on an error, the batches under way are waited for and nothing more is
    started.
    """

    #: Fills per batch: few, so that the core starts on a model's first small
    #: parameters at once (a batch's thread costs ~15 us, against ~20 us of the caller's
    #: Python per fill), and the core's check that no two buffers overlap (pairwise)
    #: stays cheap.
    BATCH = 32
    #: Elements per batch (a program's count :data:`PROGRAM_COST` times): a few
    #: milliseconds of work, so the caller's Python for the next parameters overlaps the
    #: core's, and the last batch is short.
    ELEMENTS = 1 << 20
    #: What an element of a program costs against one of a stream: timm's
    #: ``trunc_normal_`` (uniform, erfinv, scale, clamp) takes about four times a normal's.
    PROGRAM_COST = 4
    #: Batches under way at most (each a thread of the core's, holding its buffers).
    RUNNING = 4

    def __init__(self) -> None:
        self.fills: list[HostFill | HostProgramFill] = []
        self.outs: list[torch.Tensor] = []
        #: The most threads a fill taken asks for, and the elements taken (weighted).
        self.threads = 1
        self.elements = 0
        #: The batches under way, oldest first, with their tensors.
        self._running: list[tuple[_core.StartedFills, list[torch.Tensor]]] = []

    def takes(self, elementwise: bool, out: torch.Tensor) -> bool:
        """Whether this fill of ``out`` may be left here: elementwise values (a matrix
        that is not, orthogonal, is computed whole and at once) into a tensor off CUDA
        (a CUDA one has its own paths)."""
        return elementwise and not out.is_cuda

    def add(
        self,
        spec: ParamSpec,
        region: Region,
        out: torch.Tensor,
        registers: Registers | None = None,
        threads: int = 1,
    ) -> None:
        """Takes the fill of ``region`` of ``spec``'s stream, or of ``registers``'
        values, into ``out`` (one that :meth:`takes`), its chunks on ``threads``."""
        if registers is None:
            self.fills.append(host_fill_args(spec, _core_region(region), out))
            self.elements += out.numel()
        else:
            self.fills.append(host_program_args(spec, registers.code, _core_region(region), out))
            self.elements += out.numel() * self.PROGRAM_COST
        self.threads = max(self.threads, threads)
        self.outs.append(out)
        if self.elements >= self.ELEMENTS:
            self._start(self.threads)
        elif len(self.fills) >= self.BATCH:
            # Many small fills: the caller's Python took longer to hand them over than
            # one thread takes to write them (a few microseconds per fill against tens),
            # so the batch leaves the caller a core of its own instead of taking it.
            self._start(max(1, self.threads - 1))

    def _start(self, threads: int) -> None:
        """Starts the batch taken on ``threads``, once fewer than :data:`RUNNING` run."""
        while len(self._running) >= self.RUNNING:
            self._wait_oldest()
        fills, outs = self.fills, self.outs
        self.fills, self.outs = [], []
        self.threads, self.elements = 1, 0
        self._running.append((start_fills_cpu(fills, threads), outs))

    def _wait_oldest(self) -> None:
        """Waits for the oldest batch under way (raising its error) and bumps the
        versions of its tensors."""
        started, outs = self._running.pop(0)
        started.wait()
        torch.autograd.graph.increment_version(outs)

    def _wait_all(self, *, raising: bool) -> None:
        """Waits for every batch under way, then raises the first error among them
        (``raising``; else the caller's error on its way out stands: one the caller met
        waiting for a batch came from the oldest, so it is the first)."""
        running, self._running = self._running, []
        errors: list[Exception] = []
        for started, outs in running:
            try:
                started.wait()
            except Exception as error:  # raised once none runs on
                errors.append(error)
            else:
                torch.autograd.graph.increment_version(outs)
        if errors and raising:
            raise errors[0]

    def __enter__(self) -> DeferredFills:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:  # an error on its way out: finish what runs, start nothing
            self.fills, self.outs = [], []
            self._wait_all(raising=False)
            return
        try:
            if self.fills:
                self._start(self.threads)  # the caller waits for it: every thread
        except BaseException:  # a batch the core refused to start: none runs on
            self._wait_all(raising=False)
            raise
        self._wait_all(raising=True)


def fill(
    spec: ParamSpec,
    region: Region,
    out: torch.Tensor,
    *,
    threads: int,
    chunk_bytes: int,
    registers: Registers | None = None,
    deferred: DeferredFills | None = None,
) -> None:
    """Writes ``region`` of ``spec``'s stream (or of ``registers``' values, keyed by
    ``spec``: its name, seed, global shape and dtype) into ``out`` (checked by the
    caller: contiguous, of the region's shape and the spec's dtype, on the CPU or a CUDA
    device). ``threads``: the core's worker threads; ``chunk_bytes``: the size of each
    pinned buffer of the host path to a CUDA ``out``; ``deferred``: where the fill of a
    CPU ``out`` may be left, written when it is flushed."""
    elementwise = values_elementwise(spec, registers)
    if deferred is not None and deferred.takes(elementwise, out):
        deferred.add(spec, region, out, registers, threads)
        return

    def write(host: torch.Tensor, offset: int | None) -> None:
        core_region = _core_region(region, offset)
        if registers is None:
            fill_cpu(spec, core_region, host, threads)
        else:
            fill_program_cpu(spec, registers.code, core_region, host, threads)

    if not elementwise:
        fill_not_elementwise(out, write)
    elif out.device.type != "cuda":
        write(out, None)
    elif registers is None and _cuda.use_device_kernel(out.device):
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
