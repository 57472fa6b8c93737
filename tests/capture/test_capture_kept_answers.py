"""What the capture keeps to skip recomputing (a track's fold extended by new writes,
eager values by an expression's structure, integer spans per node, a view's region per
layout, the leaves of plain call arguments) gives the answers computed afresh, and
hands callers values of their own."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

import shardinit
from shardinit._integration.capture.dispatch.mode import CaptureMode
from shardinit._integration.capture.ops import torchvalues
from shardinit._integration.capture.session import constructors
from shardinit._integration.capture.session.constructors import constructor_buffer
from shardinit._integration.capture.trace import engine
from shardinit._integration.capture.trace.engine import op_value
from shardinit._integration.capture.trace.folds import Folds
from shardinit._program import keys, rewrite
from shardinit._program.cannot import Cannot
from shardinit._program.exact import check_exact_integers, integer_span
from shardinit._program.keys import structure
from shardinit._program.nodes import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Prior,
    Round,
    Source,
    Table,
    TableData,
    Unary,
    Where,
)
from shardinit._program.regions import view_region
from shardinit._program.rewrite import reindex, simplify
from shardinit._torch_compat import tree_leaves
from shardinit.init import Normal


def test_a_fold_extended_write_by_write_is_the_fold_afresh() -> None:
    mode = CaptureMode([], {})
    with mode:
        t = torch.zeros(6, 8, device="meta", dtype=torch.int64)
        track = mode.store.lookup(t)
        assert track is not None
        for step in range(5):
            t[step : step + 2, 1:5] += step + 1  # partial writes: where-chains of boxes
            t.mul_(2)
            kept = mode.engine.folded(track)
            afresh, _, random = Folds(op_value).fold(track)
            assert not random
            assert mode.engine.fold(track) == (kept, False)  # the one kept, every write since
            assert simplify(afresh, ((0, 6), (0, 8))) == simplify(kept, ((0, 6), (0, 8)))
        values = torchvalues.eager_values(kept, (6, 8), torch.int64)
    eager = torch.zeros(6, 8, dtype=torch.int64)
    for step in range(5):
        eager[step : step + 2, 1:5] += step + 1
        eager.mul_(2)
    assert values is not None and torch.equal(values, eager)


def test_eager_values_kept_by_structure_are_the_callers_own_and_tell_signed_zeros() -> None:
    index = Binary("add", Binary("mul", Coord(0), Const(3.0)), Coord(1))
    first = torchvalues.eager_values(index, (2, 3), torch.int64)
    assert first is not None and first.tolist() == [[0, 1, 2], [3, 4, 5]]
    first.add_(100)  # the caller's: an in-place op run on it writes it
    again = torchvalues.eager_values(index, (2, 3), torch.int64)
    assert again is not None and again.tolist() == [[0, 1, 2], [3, 4, 5]]

    def reciprocal(zero: float) -> torch.Tensor:
        values = torchvalues.eager_values(
            Binary("div", Binary("add", Coord(0), Const(1.0)), Const(zero)),
            (1,),
            torch.float64,
        )
        assert values is not None
        return values

    assert reciprocal(0.0).item() == float("inf")
    assert reciprocal(-0.0).item() == float("-inf")  # -0.0 == 0.0, but not its bits


def test_integer_spans_kept_per_ranges_equal_the_spans_afresh() -> None:
    node: Expr = Binary("sub", Coord(0), Const(3.0))
    for _ in range(12):  # each level reads the one before twice (a DAG)
        node = Binary("add", node, Binary("mul", node, Const(1.0)))
    small, large = [(0, 4)], [(0, 10)]
    assert integer_span(node, small) == (-3.0 * 2**12, 0.0)
    assert integer_span(node, large) == (-3.0 * 2**12, 6.0 * 2**12)
    assert integer_span(node, small) == (-3.0 * 2**12, 0.0)  # kept for both
    exact = Round(Binary("mul", node, Const(2.0**20)), torch.int64)
    check_exact_integers(exact, large)  # within 2**53: passes, kept
    check_exact_integers(exact, large)
    beyond = Round(Binary("mul", node, Const(2.0**45)), torch.int64)
    for _ in range(2):  # refused each time, with the reach of the first such step
        with pytest.raises(Cannot, match=r"int64 values in \[-\d+, \d+\]: .*beyond 2\*\*53"):
            check_exact_integers(Binary("add", beyond, exact), large)


def test_a_views_region_kept_per_layout_is_its_own_and_refusals_stay_refusals() -> None:
    base = torch.zeros(4, 6)
    other = torch.zeros(4, 6)  # the same layout: the same answer, another tensor
    for tensor in (base, other, base):
        assert view_region(tensor[1:3, 2:5], tensor) == (((1, 3), (2, 5)), (0, 1))
        assert view_region(tensor.view(-1), tensor) == (((0, 4), (0, 6)), (None,))
        for _ in range(2):
            with pytest.raises(Cannot, match="stride 2"):
                view_region(tensor[:, ::2], tensor)
    assert view_region(base[1:3, 2:5], torch.zeros(5, 6)) is not None


def test_leaves_of_call_arguments_are_torchs_leaves() -> None:
    pair = collections.namedtuple("pair", "a b")
    t = torch.zeros(2)
    trees = [
        (t, 2, None),
        [t, (t, [1.5, "x"]), {"k": t, "j": (3,)}],
        {"b": t, "a": [t, torch.float32]},
        (torch.Size([2, 3]), t),
        [pair(t, 1), collections.OrderedDict(z=t, y=2)],
        t,
        (),
    ]
    for tree in trees:
        leaves = tree_leaves(tree)
        expected = tree_flatten(tree)[0]
        assert len(leaves) == len(expected)
        assert all(a is b for a, b in zip(leaves, expected, strict=True))


def _relative_positions() -> Expr:
    """A new expression of a coordinate table's nodes (as each Swin attention builds
    one): where(i < 3, 2*i - j, i + j), with the clamp's where over a shared step."""
    step = Binary("sub", Binary("mul", Coord(0), Const(2.0)), Coord(1))
    cond = Binary("lt", Coord(0), Const(3.0))
    sum_ = Binary("add", Coord(0), Coord(1))
    return Where(cond, Binary("mul", step, step), sum_)


def test_a_rewrite_kept_by_structure_is_the_rewrite_afresh() -> None:
    rewrite._REWRITES._entries.clear()
    shifted = [Binary("add", Coord(0), Const(1.0)), Coord(1)]
    for ranges in ([(0, 2), (0, 5)], [(3, 6), (0, 5)], [(0, 6), (0, 5)]):
        afresh = rewrite._reindexed(_relative_positions(), shifted, ranges, None)
        first = reindex(_relative_positions(), shifted, ranges)
        kept = reindex(_relative_positions(), shifted, ranges)  # another expression
        assert kept is first and kept == afresh
        assert simplify(_relative_positions(), ranges) == rewrite._reindexed(
            _relative_positions(), [Coord(0), Coord(1)], ranges, None
        )
    # Below 3 the where folds to its first branch, from 3 to its second, else it stays.
    assert isinstance(simplify(_relative_positions(), [(0, 2), (0, 5)]), Binary)
    assert isinstance(simplify(_relative_positions(), [(0, 6), (0, 5)]), Where)
    # Nothing is rewritten: the caller's own expression comes back, not the one kept.
    plain = Unary("exp", Const(2.0))
    assert rewrite._reindexed(plain, [Coord(0)], [(0, 4)], None) is plain
    assert reindex(plain, [Coord(0)], [(0, 4)], keep=False) is plain
    again = Unary("exp", Const(2.0))
    assert reindex(again, [Coord(0)], [(0, 4)], keep=False) is again


def test_a_rewrite_is_kept_only_for_the_same_computation() -> None:
    def scaled(by: float) -> Expr:
        return Binary("div", Const(1.0), Binary("mul", Coord(0), Const(by)))

    at = [Binary("sub", Coord(0), Const(1.0))]
    assert reindex(scaled(0.0), at, [(1, 3)]) == rewrite._reindexed(scaled(0.0), at, [(1, 3)], None)
    negative = reindex(scaled(-0.0), at, [(1, 3)])  # -0.0 == 0.0: not the same key
    assert negative == rewrite._reindexed(scaled(-0.0), at, [(1, 3)], None)
    assert structure(scaled(0.0)) != structure(scaled(-0.0))
    # Shared and unshared copies of a step are different computations (different keys).
    step = Binary("add", Coord(0), Const(1.0))
    shared = Binary("mul", step, step)
    unshared = Binary("mul", step, Binary("add", Coord(0), Const(1.0)))
    assert shared == unshared and structure(shared) != structure(unshared)
    # Random values are each a parameter's own, tables hold values no field holds: never kept.
    source = Source(Normal(0.0, 1.0), torch.float32, 7, (Coord(0),))
    assert rewrite._rewrite_key(Binary("mul", source, Const(2.0)), at, [(1, 3)], None) is None
    table = Table(TableData(torch.arange(4.0, dtype=torch.float64)), Coord(0))
    assert rewrite._rewrite_key(table, at, [(1, 3)], None) is None
    big = Coord(0)
    for _ in range(rewrite._KEPT_NODES):
        big = Binary("add", big, Const(1.0))
    assert rewrite._rewrite_key(big, at, [(1, 3)], None) is None


def test_the_structure_reads_every_field_that_holds_no_children() -> None:
    samples = [
        Const(1.5),
        Coord(2),
        Source(Normal(0.0, 1.0), torch.float32, 3, (Coord(0), Coord(1))),
        Table(TableData(torch.zeros(2, dtype=torch.float64)), Coord(0)),
        Unary("exp", Coord(0)),
        Binary("add", Coord(0), Const(1.0)),
        Where(Coord(0), Const(1.0), Const(2.0)),
        Round(Coord(0), torch.int64),
        Prior(),
        Bad("why"),
    ]
    assert {type(node) for node in samples} == set(Expr.__subclasses__())
    for node in samples:  # the fields not read are exactly the children, in order
        plain = keys._plain_fields(type(node))
        rest = [getattr(node, f.name) for f in dataclasses.fields(node) if f.name not in plain]
        flat = [
            item for value in rest for item in (value if isinstance(value, tuple) else (value,))
        ]
        assert tuple(flat) == node.children()


def test_tree_keys_tell_computations_apart_by_every_field_and_child() -> None:
    def table(shift: float) -> Expr:  # a new expression of the same nodes each call
        row = Binary("mul", Coord(0), Const(3.0))
        return Binary("add", Binary("add", row, Coord(1)), Const(shift))

    first = keys.tree_key(table(1.0))
    assert first is not None and keys.tree_key(table(1.0)) == first  # equal trees, new nodes
    assert keys.tree_key(table(-1.0)) != first
    assert keys.tree_key(table(0.0)) != keys.tree_key(table(-0.0))  # equal, not the same bits
    shared = Binary("mul", Coord(0), Const(2.0))
    apart = Binary("add", Binary("mul", Coord(0), Const(2.0)), Binary("mul", Coord(0), Const(2.0)))
    assert keys.tree_key(Binary("add", shared, shared)) == keys.tree_key(apart)  # same values
    assert keys.tree_key(Binary("sub", shared, shared)) != keys.tree_key(apart)  # the op
    assert keys.tree_key(Binary("add", Coord(1), Coord(0))) != keys.tree_key(
        Binary("add", Coord(0), Coord(1))
    )  # the children's order
    assert keys.tree_key(Round(Coord(0), torch.int64)) != keys.tree_key(
        Round(Coord(0), torch.int32)
    )  # a field that is no float
    read = Table(TableData(torch.zeros(2, dtype=torch.float64)), Coord(0))
    assert keys.tree_key(Binary("add", read, Const(1.0))) is None  # a table's values: no field
    values = torchvalues.eager_values(Binary("add", shared, shared), (3, 1), torch.int64)
    assert values is not None and values.flatten().tolist() == [0, 4, 8]
    again = torchvalues.eager_values(apart, (3, 1), torch.int64)  # kept under the same key
    assert again is not None and torch.equal(again, values)


def test_a_rewrite_that_maps_a_coordinate_to_an_equal_one_keeps_the_nodes_above_it() -> None:
    source = Source(Normal(0.0, 1.0), torch.float32, 7, (Coord(1),))
    row = Round(Binary("mul", source, Const(0.5)), torch.float32)
    pinned = [Const(3.0), Coord(1)]  # a row's box pins dim 0, which the value never reads
    assert reindex(row, pinned, [(3, 4), (0, 8)], keep=False) is row
    assert simplify(row, [(3, 4), (0, 8)]) is row
    # A coordinate mapped elsewhere is rebuilt, and equals the rewrite by hand.
    moved = reindex(row, [Coord(0), Coord(0)], [(0, 8), (0, 1)])
    assert moved is not row
    assert moved == Round(
        Binary("mul", Source(Normal(0.0, 1.0), torch.float32, 7, (Coord(0),)), Const(0.5)),
        torch.float32,
    )


def test_the_random_places_read_from_the_kept_key_are_the_places_a_walk_finds() -> None:
    from shardinit._integration.capture.trace import claims
    from shardinit._integration.capture.trace.before import before
    from shardinit._program.nodes import walk_nodes

    def walked(expr: Expr) -> dict[int, set[tuple[Expr, ...]]]:
        found: dict[int, set[tuple[Expr, ...]]] = {}
        for node in walk_nodes(expr):
            if isinstance(node, Source):
                found.setdefault(node.origin, set()).add(node.at)
        return found

    first = Source(Normal(0.0, 1.0), torch.float32, 1, (Coord(0), Coord(1)))
    second = Source(Normal(0.0, 2.0), torch.float32, 2, (Coord(1), Coord(0)))
    prior = before(99, torch.float32, 2)
    below = Binary("lt", Coord(0), Const(2.0))
    cases = [
        Binary("mul", first, Const(2.0)),
        Where(below, first, second),
        Where(Binary("lt", first, Const(0.0)), Const(0.0), first),  # relu of a draw
        Where(below, Binary("add", first, Const(1.0)), prior),
        Where(below, Const(1.0), Const(2.0)),
    ]
    for expr in cases:
        assert claims._random_ats(expr, lambda origin: origin) == walked(expr), expr
    # A root maps copies to the op they copy, on either path.
    assert claims._random_ats(cases[1], lambda origin: 5) == {5: {first.at, second.at}}


def test_the_pinned_places_from_the_kept_key_are_the_places_of_the_pinned_value() -> None:
    # A row's write asks the places of its random values over its box with the box's
    # one-element dims pinned: read from the key kept on the value, they are the places
    # of the value rebuilt pinned (where a condition folds, the rebuild answers).
    from shardinit._integration.capture.trace import claims

    first = Source(Normal(0.0, 1.0), torch.float32, 1, (Coord(0), Coord(1)))
    shifted = Source(
        Normal(0.0, 1.0), torch.float32, 3, (Binary("add", Coord(0), Const(4.0)), Coord(1))
    )
    second = Source(Normal(0.0, 2.0), torch.float32, 2, (Coord(1), Coord(0)))
    below = Binary("lt", Coord(0), Const(2.0))
    cases = [
        Round(Binary("mul", first, Const(2.0)), torch.bfloat16),
        Binary("mul", shifted, Coord(0)),
        Unary("exp", second),
        Where(below, first, second),  # the row pins the condition: one branch is left
        Binary("add", Const(1.0), Const(2.0)),
        # A condition by a random value (clamp_, relu): no pin decides it, both branches'
        # places stay (read from the kept key); one of the coordinates under it is decided.
        Where(Binary("gt", first, Const(0.5)), Const(0.5), first),
        Where(Binary("mul", below, Binary("lt", second, Const(0.0))), first, Const(0.0)),
        Where(Binary("gt", first, Const(0.0)), Where(below, first, Const(1.0)), first),
        Unary("exp", Where(below, first, second)),  # a condition of coordinates under it
        # Branches of no random value that a pin makes one: the condition's value is
        # dropped with them (the rebuild answers).
        Where(Binary("gt", first, Const(0.0)), Binary("add", Coord(0), Const(0.0)), Const(3.0)),
    ]
    boxes = [((3, 4), (0, 8)), ((0, 2), (5, 6)), ((1, 2), (2, 3)), ((0, 4), (0, 8))]
    for expr in cases:
        for box in boxes:
            pinned = claims._random_ats(claims._pinned(expr, box), lambda origin: origin)
            assert claims._pinned_ats(expr, box, lambda origin: origin) == pinned, (expr, box)
    row = claims._pinned_ats(cases[3], ((3, 4), (0, 8)), lambda origin: origin)
    assert row == {2: {(Coord(1), Const(3.0))}}  # row 3 is not below 2: the second's
    assert claims._pinned_ats(cases[1], ((2, 3), (0, 8)), lambda origin: 7) == {
        7: {(Const(6.0), Coord(1))}
    }


class _Block(nn.Module):
    """A module a model builds many times: a lookup table written element by element,
    ones and zeros, and a random parameter."""

    def __init__(self) -> None:
        super().__init__()
        table = torch.zeros(3, 3)
        for i in range(3):
            table[i, (i + 1) % 3] = 1.0
        self.register_buffer("table", table)
        self.scale = nn.Parameter(torch.ones(3))
        self.noise = nn.Parameter(torch.empty(3).normal_(0.0, 0.02))


def test_constructor_values_kept_by_what_made_them_are_the_values_afresh() -> None:
    """The values a build folds once for the same writes on the same layout
    (:class:`...constructors._Values`) are the programs folded per tensor, and
    materialize gives eager's values; a random value is folded per tensor (its source
    names its own operation)."""
    with torch.device("meta"), shardinit.record_constructors():
        blocks = nn.Sequential(_Block(), _Block())
    first, second = blocks[0], blocks[1]
    table = constructor_buffer(first, "table")
    assert table is not None and constructor_buffer(second, "table") is not None
    assert constructor_buffer(second, "table").expr is table.expr  # folded once
    records = constructors._RECORDS
    # A constant filled whole: each its own expression, equal (no fold: _filled_whole).
    assert records[second]["scale"].expr == records[first]["scale"].expr
    noise = (records[first]["noise"].expr, records[second]["noise"].expr)
    assert noise[0] != noise[1]  # each its own operation's source
    shardinit.materialize(blocks, seed=0)
    expected = torch.zeros(3, 3)
    expected[[0, 1, 2], [1, 2, 0]] = 1.0
    for block in blocks:
        assert torch.equal(block.table, expected) and torch.equal(block.scale, torch.ones(3))


def test_a_row_loops_view_coordinates_kept_once_are_each_rows_own() -> None:
    """``engine.box_coords`` keeps a view's box and coordinates once for the same view
    some rows further (a row loop's ``w[i]``, ``w[i, 2:5].t()``), the box moved; a view
    whose coordinates read dim 0's start (a block of rows, ``w[i:i + 2]``) keeps each
    start's own. Each row's answer is the one computed afresh."""
    base = torch.zeros(6, 4, 5)
    for row in range(4):
        for view in (
            base[row],
            base[row, 1:3],
            base[row, :, 2:5].t(),
            base[row : row + 2],
            base[row : row + 2, 1].t(),
            base[row, ::2],  # no box: None, kept as such
        ):
            assert engine.box_coords(view, base) == engine._box_coords(view, base), (
                row,
                view.shape,
            )


def test_a_simplify_whose_index_arithmetic_folds_to_itself_is_the_expression() -> None:
    """Over a box that decides nothing of it, ``c % 2 == 0`` folds to itself: the
    expression simplified is the same object (what was kept on it stays), not a copy
    built node by node (the writer simplifies each row's program before compiling it)."""
    source = Source(Normal(0.0, 1.0), torch.float32, 7, (Coord(0), Coord(1)))
    on_step = Binary("eq", Binary("mod", Coord(1), Const(2.0)), Const(0.0))
    program = Round(Where(on_step, Binary("mul", source, Const(0.5)), source), torch.float32)
    assert simplify(program, [(3, 4), (0, 63)]) is program
    # A condition the box decides (rows below 5) folds: the scaled branch alone.
    below = Binary("lt", Coord(0), Const(5.0))
    decided = Round(Where(below, Binary("mul", source, Const(0.5)), source), torch.float32)
    assert simplify(decided, [(3, 4), (0, 63)]) == Round(
        Binary("mul", source, Const(0.5)), torch.float32
    )
