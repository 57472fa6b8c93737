"""``arange`` with a fractional start or step, and ``linspace``, give eager torch's values
bit for bit (issue 52): torch computes ``start + step * i`` fused, with one rounding
(linspace's step in the dtype's own arithmetic), which a program of a binary64 product
and sum does not give (up to half of the elements differed by an ulp); they are torch's
own values, as a table. An integer ``arange`` stays a program of the coordinate."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit._program.nodes import Table, walk_nodes

SOURCES: dict[str, Callable[[torch.dtype], torch.Tensor]] = {
    "arange_fractional_step": lambda dtype: torch.arange(0.01, 16.0, 0.0137, dtype=dtype),
    "arange_fractional_start": lambda dtype: torch.arange(-3.1, 7.5, 1.0, dtype=dtype),
    "arange_by_name": lambda dtype: torch.arange(start=-3.0, end=7.5, step=0.001, dtype=dtype),
    "linspace": lambda dtype: torch.linspace(0.01, 16.0, 1000, dtype=dtype),
    "linspace_symmetric": lambda dtype: torch.linspace(-1.0, 1.0, 512, dtype=dtype),
    "arange_integer": lambda dtype: torch.arange(1000, dtype=dtype) * 0.5,
}


class _Holder(nn.Module):
    def __init__(self, size: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(size, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("source", list(SOURCES))
def test_sources_give_eagers_values(source: str, dtype: torch.dtype) -> None:
    want = SOURCES[source](dtype)
    with torch.device("meta"):
        holder = _Holder(want.numel(), dtype)
    code = lambda: holder.w.data.copy_(SOURCES[source](dtype))  # noqa: E731
    shardinit.materialize(holder, seed=52, init_fn=code)
    assert torch.equal(holder.w.detach(), want)


def test_an_integer_arange_stays_a_program() -> None:
    with torch.device("meta"):
        holder = _Holder(1000, torch.float32)
    captured = shardinit.capture_init(holder, lambda: holder.w.data.copy_(torch.arange(1000.0)))
    (op,) = captured["w"].ops
    expr = op.action.program(torch.float32, 1, 0)
    assert not any(isinstance(node, Table) for node in walk_nodes(expr)), expr


def test_a_source_table_after_a_draw_of_torchs_generator_is_still_known() -> None:
    # A real draw of torch's generator (a CPU tensor init code keeps) does not make a
    # table of constants unknown.
    def code(holder: _Holder) -> None:
        torch.randperm(5)  # a draw no route follows: torch's generator moves
        holder.w.data.copy_(torch.linspace(0.01, 16.0, 1000))

    with torch.device("meta"):
        holder = _Holder(1000, torch.float32)
    shardinit.materialize(holder, seed=52, init_fn=lambda: code(holder))
    assert torch.equal(holder.w.detach(), torch.linspace(0.01, 16.0, 1000))
