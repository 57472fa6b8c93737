"""Compiling an init program (:mod:`.nodes`) for the one fill dispatch
(:func:`shardinit._fill.fill`), once per program and region: a program that is one
source is that initializer (the stream-v1 fill, the Triton kernel on CUDA), any other the
core's registers (``_core.RegisterProgram``, its deterministic binary64 evaluator:
docs/stream-format.md "Init programs"), with whether its values are elementwise. Only the
region is computed: no temporary of the whole parameter exists, except tables of values
init code computed itself on the CPU (and the matrix of an orthogonal source, which the
core computes whole)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .. import _core
from .._fill import Registers
from ..init import BaseInit, core_init
from ..spec import SUPPORTED_DTYPES
from .exact import INTEGER_DTYPES, bare_source
from .index import as_lin
from .nodes import (
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
    contains,
    kept,
    walk_nodes,
)

__all__ = ["Compiled", "compile_program", "is_elementwise"]

#: A program as the fill dispatch takes it: one stream-v1 source, or the core's registers.
Compiled = BaseInit | Registers


class _Emitter:
    """Turns an expression DAG into registers of one ``_core.RegisterProgram``."""

    def __init__(self, shape: Sequence[int]) -> None:
        self.program = _core.RegisterProgram()
        self.shape = tuple(int(size) for size in shape)
        self.registers: dict[int, int] = {}
        #: Whether every source emitted is elementwise (:func:`is_elementwise`, read off
        #: the one walk that emits the nodes).
        self.elementwise = True

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
            self.elementwise = self.elementwise and node.init.elementwise
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
            if node.dtype in INTEGER_DTYPES:
                return self.wrap(reg[id(node.x)], node.dtype)
            return program.round(reg[id(node.x)], SUPPORTED_DTYPES[node.dtype])
        assert not isinstance(node, Bad), node.why
        raise TypeError(f"not an init program node: {node!r}")

    def wrap(self, x: Any, dtype: torch.dtype) -> Any:
        """An exact integer ``x`` (capture checked it is within 2**53:
        :func:`.exact.exact_integers`) as ``dtype`` holds it: two's complement wraps it
        into ``[min, min + 2**bits)``, as ``x - 2**bits * floor((x - min) / 2**bits)``,
        every step exact in binary64. int64 holds every such integer as it is."""
        if dtype == torch.int64:
            return x
        info = torch.iinfo(dtype)
        program = self.program
        modulus = program.constant(float(1 << info.bits))
        shifted = program.binary("sub", x, program.constant(float(info.min)))
        turns = program.unary("floor", program.binary("div", shifted, modulus))
        return program.binary("sub", x, program.binary("mul", turns, modulus))

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
    is orthogonal, whose values are the whole matrix's). Kept on the node: the writer
    asks it of a program it then compiles, which asks again."""
    return bool(kept(expr, "_elementwise", _elementwise))


def _elementwise(expr: Expr) -> bool:
    if not contains(expr, Source):
        return True  # no source at all (asked of the classes kept on the node)
    return all(node.init.elementwise for node in walk_nodes(expr) if isinstance(node, Source))


def compile_program(expr: Expr, shape: Sequence[int]) -> Compiled:
    """``expr`` (simplified to the region it is written on) for a parameter of GLOBAL
    ``shape``: the initializer when it is one source, else its registers. The core runs
    registers that start with a source on its fused fill (docs/stream-format.md §7)."""
    init = bare_source(expr)
    if init is not None:
        return init
    emitter = _Emitter(shape)
    emitter.emit(expr)
    return Registers(emitter.program, emitter.elementwise)
