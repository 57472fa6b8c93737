"""Writing a recorded program (:mod:`.program`) on one box of a parameter: a bare source
as the stream-v1 fill, any other as the core's deterministic binary64 evaluator
(``_core.Program``, docs/stream-format.md "Init programs"), both through the one fill
dispatch (:func:`shardinit._fill.fill`). Only the box is computed: no temporary of the
whole parameter exists, except tables of values init code computed itself on the CPU
(and the matrix of an orthogonal source, which the core computes whole)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import _core, shard
from ..._fill import CoreProgram, DeferredFills, fill, on_one_thread, values_elementwise
from ...init import core_init
from ...spec import SUPPORTED_DTYPES, ParamSpec
from .program import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Round,
    Source,
    Table,
    Unary,
    Where,
    as_lin,
    bare_source,
    walk_nodes,
)
from .regions import Box

__all__ = ["is_elementwise", "write_fill", "write_program"]

CONTIGUOUS = torch.contiguous_format


class _Emitter:
    """Turns an expression DAG into registers of one ``_core.Program``."""

    def __init__(self, shape: Sequence[int]) -> None:
        self.program = _core.Program()
        self.shape = tuple(int(size) for size in shape)
        self.registers: dict[int, int] = {}

    def emit(self, expr: Expr) -> int:
        for node in walk_nodes(expr):
            self.registers[id(node)] = self.node(node)
        return self.registers[id(expr)]

    def node(self, node: Expr) -> Any:
        program, reg = self.program, self.registers
        if isinstance(node, Const):
            return program.constant(float(node.value))
        if isinstance(node, Coord):
            return program.coord(node.dim)
        if isinstance(node, Source):
            return program.source(core_init(node.init), SUPPORTED_DTYPES[node.dtype])
        if isinstance(node, Table):
            return self.table(node)
        if isinstance(node, Unary):
            return program.unary(node.op, reg[id(node.x)])
        if isinstance(node, Binary):
            return program.binary(node.op, reg[id(node.a)], reg[id(node.b)])
        if isinstance(node, Where):
            return program.where(reg[id(node.cond)], reg[id(node.a)], reg[id(node.b)])
        if isinstance(node, Round):
            return program.round(reg[id(node.x)], SUPPORTED_DTYPES[node.dtype])
        assert not isinstance(node, Bad), node.why
        raise TypeError(f"not an init program node: {node!r}")

    def table(self, node: Table) -> Any:
        """A table read at an affine index. The core checks the index over the whole
        global shape; a table read only inside a sub-box (a copy into part of the
        parameter) is padded with NaN to that range (never read there)."""
        lin = as_lin(node.index)
        assert lin is not None, "table indices are affine (checked at capture)"
        strides = [0] * len(self.shape)
        for dim, coef in lin.coefs:
            strides[dim] = coef
        low, high = lin.span([(0, size) for size in self.shape])
        values = node.data.values
        if low < 0 or high >= values.numel():
            before, after = max(0, -low), max(0, high + 1 - values.numel())
            values = torch.nn.functional.pad(values, (before, after), value=math.nan)
            return self.program.table(values.numpy(), strides, lin.offset + before)
        return self.program.table(values.numpy(), strides, lin.offset)


def is_elementwise(expr: Expr) -> bool:
    """Whether each element's value of ``expr`` is computed on its own (no source of it
    is orthogonal, whose values are the whole matrix's)."""
    return all(node.init.elementwise for node in walk_nodes(expr) if isinstance(node, Source))


def write_program(expr: Expr, spec: ParamSpec, box: Box, target: torch.Tensor) -> None:
    """Writes the values of ``expr`` on ``box`` (global coordinates) of the parameter
    ``spec`` (its name, seed, global shape and dtype) into ``target`` (the box's shape,
    any device and strides), through the one fill dispatch (:func:`shardinit._fill.fill`):
    a program that is one source is the stream-v1 fill of that initializer (the Triton
    kernel on CUDA), any other the core's registers (on the host; a CUDA ``target``
    through the bounded pinned staging). The core runs a source with further steps on
    its fused fill first (docs/stream-format.md §7)."""
    if math.prod(stop - start for start, stop in box) == 0:
        return
    init = bare_source(expr)
    if init is not None:
        write_fill(spec.with_init(init), box, target)
        return
    emitter = _Emitter(spec.shape)
    emitter.emit(expr)
    _write(spec, box, target, CoreProgram(emitter.program, is_elementwise(expr)))


def write_fill(
    spec: ParamSpec, box: Box, target: torch.Tensor, deferred: DeferredFills | None = None
) -> None:
    """Writes ``box`` of ``spec``'s own stream-v1 fill (its initializer) into ``target``,
    as :func:`write_program` writes a program that is that one source; ``deferred``:
    where a fill straight into a contiguous CPU ``target`` may be left (see
    :class:`shardinit._fill.DeferredFills`)."""
    if math.prod(stop - start for start, stop in box) == 0:
        return
    _write(spec, box, target, None, deferred)


def _threads(spec: ParamSpec, program: CoreProgram | None, out: torch.Tensor) -> int:
    """The core's worker threads for writing ``out``: the setting, but one where the
    core runs the fill on the calling thread anyway (elementwise values of at most one
    chunk), without asking for the setting (it reads the CPU affinity: a system call per
    parameter of a model of many small ones)."""
    return 1 if on_one_thread(values_elementwise(spec, program), out) else shard.get_num_threads()


def _write(
    spec: ParamSpec,
    box: Box,
    target: torch.Tensor,
    program: CoreProgram | None,
    deferred: DeferredFills | None = None,
) -> None:
    direct = target.is_contiguous()
    out = target if direct else torch.empty_like(target, memory_format=CONTIGUOUS)
    fill(
        spec,
        box,
        out,
        threads=_threads(spec, program, out),
        chunk_bytes=shard.CUDA_CHUNK_BYTES,
        program=program,
        # A temporary is copied out at once: its values are needed now.
        deferred=deferred if direct else None,
    )
    if not direct:
        target.copy_(out)
