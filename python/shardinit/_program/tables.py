"""Tables of values known at capture, read at positions that are not affine: gathered
into a new table of the values read (exactly: integer indexing, no float computed),
guarded where the positions run past the table."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .index import box_index
from .nodes import Bad, Binary, Const, Coord, Expr, Table, TableData, Where

__all__ = ["TABLE_CAP", "beyond_table_cap", "gathered", "index_values", "unread"]

#: The most elements a table gathered at capture may hold (binary64: 128 MiB at the cap);
#: :mod:`.concrete` holds the tables it computes to it too.
TABLE_CAP = 1 << 24

#: Why a gathered table holds no value at some positions (:func:`gathered`).
_PAST_THE_TABLE = "a table of computed values read at positions that are not affine"


def beyond_table_cap(count: int, what: str) -> str:
    """Why ``what`` of ``count`` elements (beyond :data:`TABLE_CAP`) is no table."""
    return (
        f"{what} of {count} elements is beyond the cap of {TABLE_CAP} elements a table "
        "computed at capture may hold (shardinit._program.tables.TABLE_CAP)"
    )


def gathered(data: TableData, index: Expr, ranges: Sequence[tuple[int, int]]) -> Expr:
    """``data`` read at ``index``, an integer expression of coordinates that is not affine
    (a reshape of a table: ``i // n``, ``i % n``), as a new table of the values read over
    ``ranges`` (gathered exactly: integer indexing, no float computed)."""
    shape = tuple(max(stop - start, 0) for start, stop in ranges)
    count = math.prod(shape)
    if count > TABLE_CAP:
        what = "a table read at positions that are not affine, gathered,"
        return Bad(beyond_table_cap(count, what))
    flat = index_values(index, ranges)
    if flat is None:
        return Bad(_PAST_THE_TABLE)
    flat = flat.expand(shape).reshape(-1)
    size = data.values.numel()
    valid = (flat >= 0) & (flat < size)
    values = torch.full((count,), math.nan, dtype=torch.float64, device="cpu")
    if size:  # past the table: NaN, never read (guarded below)
        values = torch.where(valid, data.values[flat.clamp(0, size - 1)], values)
    local = box_index(shape, ranges)
    table = Table(TableData(values), local)
    if bool(valid.all()):
        return table
    # Positions past the table: a branch not taken there is excused (:func:`.rewrite.reindex`);
    # else the guard's Bad refuses the read.
    return Where(Table(TableData(valid.to(torch.float64)), local), table, Bad(_PAST_THE_TABLE))


def index_values(index: Expr, ranges: Sequence[tuple[int, int]]) -> torch.Tensor | None:
    """The integer values of ``index`` over ``ranges`` (row-major), or None when it is no
    integer expression of coordinates (sums, products, ``//`` and ``%`` of them)."""
    if isinstance(index, Const):
        return (
            None
            if not float(index.value).is_integer()
            else torch.tensor(int(index.value), device="cpu")
        )
    if isinstance(index, Coord):
        start, stop = ranges[index.dim]
        sizes = [1] * len(ranges)
        sizes[index.dim] = max(stop - start, 0)
        return torch.arange(start, max(stop, start), dtype=torch.int64, device="cpu").view(sizes)
    if not isinstance(index, Binary) or index.op not in _INTEGER_OPS:
        return None
    a, b = index_values(index.a, ranges), index_values(index.b, ranges)
    if a is None or b is None:
        return None
    if index.op in ("floordiv", "mod") and bool((b == 0).any()):
        return None
    shape = [max(stop - start, 0) for start, stop in ranges]
    return _INTEGER_OPS[index.op](a, b).expand(shape)


_INTEGER_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "floordiv": torch.floor_divide,
    "mod": torch.remainder,
    # Comparisons as 0 / 1 (the conditions of a where: in_box of a cat's parts).
    "lt": lambda a, b: torch.lt(a, b).long(), "le": lambda a, b: torch.le(a, b).long(),
    "gt": lambda a, b: torch.gt(a, b).long(), "ge": lambda a, b: torch.ge(a, b).long(),
    "eq": lambda a, b: torch.eq(a, b).long(), "ne": lambda a, b: torch.ne(a, b).long(),
}  # fmt: skip


def unread(expr: Expr) -> bool:
    """Whether ``expr`` is a gathered table guarded where its index ran past the table."""
    return isinstance(expr, Where) and expr.b == Bad(_PAST_THE_TABLE)
