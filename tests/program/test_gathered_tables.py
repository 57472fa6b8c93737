"""A table of values known at capture read at positions that are not affine is gathered
into a new table of the values read (``_program.tables.gathered``), on the program
nodes themselves (no torch capture): the values are torch's indexing of the same table
at the same positions, computed by hand, and a read past the table is guarded, never a
value."""

from __future__ import annotations

import pytest
import torch

from shardinit._program import tables
from shardinit._program.index import as_lin
from shardinit._program.nodes import Bad, Binary, Const, Coord, Expr, Table, TableData, Where
from shardinit._program.tables import gathered, index_values, unread
from shardinit._program.writer import evaluate_whole

VALUES = torch.linspace(-2.0, 3.0, 10, dtype=torch.float64).pow(3)


def _index(rows: int) -> Expr:
    """``(3 i + j) // 2 + i % 3`` over (i, j): integer, not affine."""
    flat = Binary("add", Binary("mul", Coord(0), Const(3.0)), Coord(1))
    return Binary("add", Binary("floordiv", flat, Const(2.0)), Binary("mod", Coord(0), Const(3.0)))


def _by_hand(ranges: list[tuple[int, int]]) -> torch.Tensor:
    i = torch.arange(*ranges[0]).view(-1, 1)
    j = torch.arange(*ranges[1]).view(1, -1)
    return (3 * i + j) // 2 + i % 3


def test_index_values_are_the_integers_torch_computes() -> None:
    ranges = [(0, 4), (0, 3)]
    assert torch.equal(index_values(_index(4), ranges), _by_hand(ranges))
    shifted = [(2, 5), (1, 3)]
    assert torch.equal(index_values(_index(4), shifted), _by_hand(shifted))
    assert index_values(Binary("add", Coord(0), Const(0.5)), ranges) is None  # no integer
    assert index_values(Binary("mod", Coord(0), Coord(1)), ranges) is None  # a zero divisor


def test_a_gathered_table_holds_the_values_read_over_its_box() -> None:
    ranges = [(0, 4), (0, 3)]
    table = gathered(TableData(VALUES), _index(4), ranges)
    assert isinstance(table, Table) and as_lin(table.index) is not None
    read = VALUES[_by_hand(ranges)]
    assert torch.equal(table.data.values, read.reshape(-1))
    assert torch.equal(evaluate_whole(table, (4, 3)), read)


def test_a_gathered_table_over_a_box_not_at_the_origin_reads_the_box() -> None:
    ranges = [(1, 3), (2, 5)]  # rows 1..2, columns 2..4: index up to (6 + 4) // 2 + 2 = 7
    table = gathered(TableData(VALUES), _index(3), ranges)
    assert isinstance(table, Table)
    assert torch.equal(table.data.values, VALUES[_by_hand(ranges)].reshape(-1))
    # Its index counts the box's elements from the box's corner.
    assert torch.equal(index_values(table.index, ranges), torch.arange(6).view(2, 3))


def test_a_read_past_the_table_is_guarded_where_it_runs_past() -> None:
    ranges = [(0, 6), (0, 3)]  # positions up to (15 + 2) // 2 + 2 = 10: past 10 values
    guarded = gathered(TableData(VALUES), _index(6), ranges)
    assert isinstance(guarded, Where) and unread(guarded)
    positions = _by_hand(ranges)
    inside = positions < VALUES.numel()
    assert not bool(inside.all())
    assert isinstance(guarded.cond, Table)
    assert torch.equal(guarded.cond.data.values, inside.reshape(-1).to(torch.float64))
    assert isinstance(guarded.a, Table)
    read = guarded.a.data.values.view(6, 3)
    assert torch.equal(read[inside], VALUES[positions[inside]])
    assert bool(read[~inside].isnan().all())  # never a value: the guard's Bad refuses it
    assert guarded.b == Bad("a table of computed values read at positions that are not affine")


def test_an_index_that_is_not_integer_arithmetic_is_bad() -> None:
    index = Binary("add", Coord(0), Const(0.5))
    assert isinstance(gathered(TableData(VALUES), index, [(0, 4)]), Bad)


def test_a_gathered_table_beyond_the_cap_is_bad_naming_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tables, "TABLE_CAP", 11)
    over = gathered(TableData(VALUES), _index(4), [(0, 4), (0, 3)])
    assert isinstance(over, Bad) and "beyond the cap of 11 elements" in over.why
    assert "shardinit._program.tables.TABLE_CAP" in over.why
    assert isinstance(gathered(TableData(VALUES), _index(3), [(0, 3), (0, 3)]), Table)
