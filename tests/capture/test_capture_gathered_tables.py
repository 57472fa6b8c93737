"""A table read at positions that are not affine is gathered at capture into a table of
the positions read (``program.gathered``). A ``cat`` reshaped (diffusers' 3-D sin-cos
positional table: ``concat`` of a temporal and a spatial table, then ``flatten``) reads
each part at positions past its end where the other part's branch is taken; the whole
buffer used to be refused for them (issue 37, "Refused, but ordinary"). A position
past the table only in a branch not taken is no read; one in a branch taken still
refuses."""

from __future__ import annotations

import torch
from torch import nn

import shardinit
from shardinit._program.index import contiguous_index
from shardinit._program.nodes import Binary, Const, Coord, Table, TableData, bad_reasons
from shardinit._program.rewrite import reindex, where


class _Tables(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        if kind == "cat_flattened":
            a, b = torch.arange(6.0).sin().view(2, 3), torch.arange(4.0).cos().view(2, 2)
            table = torch.cat([a, b], dim=1).reshape(-1) * 3
        else:
            from diffusers.models.embeddings import get_3d_sincos_pos_embed

            table = get_3d_sincos_pos_embed(16, (4, 6), 3).flatten(0, 1)
        self.register_buffer("table", table, persistent=False)


def _constructed(kind: str) -> tuple[nn.Module, nn.Module]:
    eager = _Tables(kind)
    with shardinit.record_constructors(), torch.device("meta"):
        model = _Tables(kind)
    shardinit.materialize(model, seed=0)
    return model, eager


def test_a_cat_flattened_is_eagers() -> None:
    model, eager = _constructed("cat_flattened")
    assert torch.equal(model.table, eager.table)


def test_diffusers_3d_sincos_table_is_eagers() -> None:
    model, eager = _constructed("3d_sincos")
    assert model.table.shape == (72, 16)
    assert torch.equal(model.table, eager.table)


# The seam of a cat along dim 1 of (2, 3) and (2, 2) parts, read flat: k -> (k // 5, k % 5).
_FLAT = [Binary("floordiv", Coord(0), Const(5.0)), Binary("mod", Coord(0), Const(5.0))]
_RANGES = [(0, 10)]


def _part_a() -> Table:
    return Table(TableData(torch.arange(6.0, dtype=torch.float64)), contiguous_index((2, 3)))


def test_a_read_past_the_table_in_the_branch_not_taken_is_no_read() -> None:
    # Part A (columns 0..2) read at (r, c) is A[3 r + c]: past A's 6 values at k = 9.
    cond = Binary("lt", Coord(1), Const(3.0))
    cat = where(cond, _part_a(), Const(-1.0))
    flat = reindex(cat, _FLAT, _RANGES)
    assert bad_reasons(flat) == []


def test_a_read_past_the_table_in_the_branch_taken_still_refuses() -> None:
    cond = Binary("ne", Coord(1), Const(3.0))  # A's branch at column 4 too: k = 9
    flat = reindex(where(cond, _part_a(), Const(-1.0)), _FLAT, _RANGES)
    assert bad_reasons(flat) == ["a table of computed values read at positions that are not affine"]
    plain = reindex(
        _part_a(),
        [Binary("floordiv", Coord(0), Const(2.0)), Binary("mod", Coord(0), Const(2.0))],
        [(0, 8)],
    )
    assert bad_reasons(plain)  # no where at all: row 3 of a 2-row table
