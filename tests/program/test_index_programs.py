"""Index arithmetic of init programs (``_program.expr``: a row-major flat index, a box's
flat positions) run by the core's register machine: the values are the indices torch
gives, for every dim size (1, whose coordinate is always 0, and 2 among them)."""

from __future__ import annotations

import math

import pytest
import torch

from shardinit import _fill, init
from shardinit._program.compile import compile_program
from shardinit._program.expr import contiguous_index, flat_of_box
from shardinit.spec import ParamSpec

SHAPES = [(2, 3, 2), (1, 2, 1, 3), (2, 2), (5,), (3, 1)]


def _values(expr: object, shape: tuple[int, ...]) -> torch.Tensor:
    compiled = compile_program(expr, shape)  # type: ignore[arg-type]
    assert isinstance(compiled, _fill.Registers)
    spec = ParamSpec("i", shape, torch.float32, init.zeros(), seed=0)
    out = torch.full(shape, float("nan"))
    whole = tuple((0, size) for size in shape)
    _fill.fill(spec, whole, out, threads=1, chunk_bytes=1 << 20, registers=compiled)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_contiguous_index_is_the_row_major_flat_index(shape: tuple[int, ...]) -> None:
    expected = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    assert torch.equal(_values(contiguous_index(shape), shape), expected)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_flat_positions_of_a_box_start_at_its_offset(shape: tuple[int, ...]) -> None:
    expected = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) + 7
    assert torch.equal(_values(flat_of_box(shape, 7), shape), expected)
