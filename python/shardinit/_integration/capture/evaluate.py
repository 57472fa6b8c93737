"""Evaluating a recorded :class:`~.records.Program` on one box of a parameter with the
core's deterministic binary64 evaluator (``_core.Program`` / ``_core.fill_program``,
docs/stream-format.md "Init programs"). Only the box is computed: no temporary of the
whole parameter exists, except tables of values init code computed itself on the CPU.
CUDA destinations are computed on the host and copied."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import _core
from ..._host import writable_view
from ...init import core_init
from ...shard import get_num_threads, init_box
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

__all__ = ["fill_program_box"]


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


def fill_program_box(expr: Expr, spec: ParamSpec, box: Box, target: torch.Tensor) -> None:
    """Writes the values of ``expr`` on ``box`` (global coordinates) of the parameter
    ``spec`` into ``target`` (the box's shape, any device and strides). A program that
    is one source is the stream-v1 fill of ``spec`` with that initializer, written by
    :func:`shardinit.init_box` (the Triton kernel on CUDA); the core dispatches a source
    with further steps to its fused fill too (docs/stream-format.md §7)."""
    if math.prod(stop - start for start, stop in box) == 0:
        return
    init = bare_source(expr)
    if init is not None:
        one = ParamSpec(spec.name, spec.shape, spec.dtype, init, seed=spec.seed)
        if target.is_contiguous():
            init_box(one, box, out=target)
        else:
            target.copy_(init_box(one, box, device=target.device))
        return
    emitter = _Emitter(spec.shape)
    emitter.emit(expr)
    direct = target.device.type == "cpu" and target.is_contiguous()
    host = target if direct else torch.empty(tuple(target.shape), dtype=target.dtype, device="cpu")
    _core.fill_program(
        spec.key64,
        list(spec.shape),
        emitter.program,
        spec.dtype_name,
        _core.Region.box([(int(a), int(b)) for a, b in box]),
        writable_view(host),
        get_num_threads(),
    )
    if not direct:
        target.copy_(host)
