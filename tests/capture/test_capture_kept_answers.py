"""What the capture keeps to skip recomputing (a track's fold extended by new writes,
eager values by an expression's structure, integer spans per node, a view's region per
layout, the leaves of plain call arguments) gives the answers computed afresh, and
hands callers values of their own."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
from torch.utils._pytree import tree_flatten

from shardinit._integration.capture.dispatch.mode import CaptureMode
from shardinit._integration.capture.ops import torchvalues
from shardinit._integration.capture.trace.engine import op_value
from shardinit._integration.capture.trace.folds import Folds
from shardinit._program import expr as ex
from shardinit._program.cannot import Cannot
from shardinit._program.regions import view_region
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
            assert mode.engine.fold(track) == kept  # the one kept, every write since
            assert ex.simplify(afresh, ((0, 6), (0, 8))) == ex.simplify(kept, ((0, 6), (0, 8)))
        values = torchvalues.eager_values(kept, (6, 8), torch.int64)
    eager = torch.zeros(6, 8, dtype=torch.int64)
    for step in range(5):
        eager[step : step + 2, 1:5] += step + 1
        eager.mul_(2)
    assert values is not None and torch.equal(values, eager)


def test_eager_values_kept_by_structure_are_the_callers_own_and_tell_signed_zeros() -> None:
    index = ex.Binary("add", ex.Binary("mul", ex.Coord(0), ex.Const(3.0)), ex.Coord(1))
    first = torchvalues.eager_values(index, (2, 3), torch.int64)
    assert first is not None and first.tolist() == [[0, 1, 2], [3, 4, 5]]
    first.add_(100)  # the caller's: an in-place op run on it writes it
    again = torchvalues.eager_values(index, (2, 3), torch.int64)
    assert again is not None and again.tolist() == [[0, 1, 2], [3, 4, 5]]

    def reciprocal(zero: float) -> torch.Tensor:
        values = torchvalues.eager_values(
            ex.Binary("div", ex.Binary("add", ex.Coord(0), ex.Const(1.0)), ex.Const(zero)),
            (1,),
            torch.float64,
        )
        assert values is not None
        return values

    assert reciprocal(0.0).item() == float("inf")
    assert reciprocal(-0.0).item() == float("-inf")  # -0.0 == 0.0, but not its bits


def test_integer_spans_kept_per_ranges_equal_the_spans_afresh() -> None:
    node: ex.Expr = ex.Binary("sub", ex.Coord(0), ex.Const(3.0))
    for _ in range(12):  # each level reads the one before twice (a DAG)
        node = ex.Binary("add", node, ex.Binary("mul", node, ex.Const(1.0)))
    small, large = [(0, 4)], [(0, 10)]
    assert ex.integer_span(node, small) == (-3.0 * 2**12, 0.0)
    assert ex.integer_span(node, large) == (-3.0 * 2**12, 6.0 * 2**12)
    assert ex.integer_span(node, small) == (-3.0 * 2**12, 0.0)  # kept for both
    exact = ex.Round(ex.Binary("mul", node, ex.Const(2.0**20)), torch.int64)
    ex.check_exact_integers(exact, large)  # within 2**53: passes, kept
    ex.check_exact_integers(exact, large)
    beyond = ex.Round(ex.Binary("mul", node, ex.Const(2.0**45)), torch.int64)
    for _ in range(2):  # refused each time, with the reach of the first such step
        with pytest.raises(Cannot, match=r"int64 values in \[-\d+, \d+\]: .*beyond 2\*\*53"):
            ex.check_exact_integers(ex.Binary("add", beyond, exact), large)


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


def _relative_positions() -> ex.Expr:
    """A new expression of a coordinate table's nodes (as each Swin attention builds
    one): where(i < 3, 2*i - j, i + j), with the clamp's where over a shared step."""
    step = ex.Binary("sub", ex.Binary("mul", ex.Coord(0), ex.Const(2.0)), ex.Coord(1))
    cond = ex.Binary("lt", ex.Coord(0), ex.Const(3.0))
    sum_ = ex.Binary("add", ex.Coord(0), ex.Coord(1))
    return ex.Where(cond, ex.Binary("mul", step, step), sum_)


def test_a_rewrite_kept_by_structure_is_the_rewrite_afresh() -> None:
    ex._REWRITES._entries.clear()
    shifted = [ex.Binary("add", ex.Coord(0), ex.Const(1.0)), ex.Coord(1)]
    for ranges in ([(0, 2), (0, 5)], [(3, 6), (0, 5)], [(0, 6), (0, 5)]):
        afresh = ex._reindexed(_relative_positions(), shifted, ranges, None)
        first = ex.reindex(_relative_positions(), shifted, ranges)
        kept = ex.reindex(_relative_positions(), shifted, ranges)  # another expression
        assert kept is first and kept == afresh
        assert ex.simplify(_relative_positions(), ranges) == ex._reindexed(
            _relative_positions(), [ex.Coord(0), ex.Coord(1)], ranges, None
        )
    # Below 3 the where folds to its first branch, from 3 to its second, else it stays.
    assert isinstance(ex.simplify(_relative_positions(), [(0, 2), (0, 5)]), ex.Binary)
    assert isinstance(ex.simplify(_relative_positions(), [(0, 6), (0, 5)]), ex.Where)
    # Nothing is rewritten: the caller's own expression comes back, not the one kept.
    plain = ex.Unary("exp", ex.Const(2.0))
    assert ex._reindexed(plain, [ex.Coord(0)], [(0, 4)], None) is plain
    assert ex.reindex(plain, [ex.Coord(0)], [(0, 4)], keep=False) is plain
    again = ex.Unary("exp", ex.Const(2.0))
    assert ex.reindex(again, [ex.Coord(0)], [(0, 4)], keep=False) is again


def test_a_rewrite_is_kept_only_for_the_same_computation() -> None:
    def scaled(by: float) -> ex.Expr:
        return ex.Binary("div", ex.Const(1.0), ex.Binary("mul", ex.Coord(0), ex.Const(by)))

    at = [ex.Binary("sub", ex.Coord(0), ex.Const(1.0))]
    assert ex.reindex(scaled(0.0), at, [(1, 3)]) == ex._reindexed(scaled(0.0), at, [(1, 3)], None)
    negative = ex.reindex(scaled(-0.0), at, [(1, 3)])  # -0.0 == 0.0: not the same key
    assert negative == ex._reindexed(scaled(-0.0), at, [(1, 3)], None)
    assert ex.structure(scaled(0.0)) != ex.structure(scaled(-0.0))
    # Shared and unshared copies of a step are different computations (different keys).
    step = ex.Binary("add", ex.Coord(0), ex.Const(1.0))
    shared = ex.Binary("mul", step, step)
    unshared = ex.Binary("mul", step, ex.Binary("add", ex.Coord(0), ex.Const(1.0)))
    assert shared == unshared and ex.structure(shared) != ex.structure(unshared)
    # Random values are each a parameter's own, tables hold values no field holds: never kept.
    source = ex.Source(Normal(0.0, 1.0), torch.float32, 7, (ex.Coord(0),))
    assert ex._rewrite_key(ex.Binary("mul", source, ex.Const(2.0)), at, [(1, 3)], None) is None
    table = ex.Table(ex.TableData(torch.arange(4.0, dtype=torch.float64)), ex.Coord(0))
    assert ex._rewrite_key(table, at, [(1, 3)], None) is None
    big = ex.Coord(0)
    for _ in range(ex._KEPT_NODES):
        big = ex.Binary("add", big, ex.Const(1.0))
    assert ex._rewrite_key(big, at, [(1, 3)], None) is None


def test_the_structure_reads_every_field_that_holds_no_children() -> None:
    samples = [
        ex.Const(1.5),
        ex.Coord(2),
        ex.Source(Normal(0.0, 1.0), torch.float32, 3, (ex.Coord(0), ex.Coord(1))),
        ex.Table(ex.TableData(torch.zeros(2, dtype=torch.float64)), ex.Coord(0)),
        ex.Unary("exp", ex.Coord(0)),
        ex.Binary("add", ex.Coord(0), ex.Const(1.0)),
        ex.Where(ex.Coord(0), ex.Const(1.0), ex.Const(2.0)),
        ex.Round(ex.Coord(0), torch.int64),
        ex.Prior(),
        ex.Bad("why"),
    ]
    assert {type(node) for node in samples} == set(ex.Expr.__subclasses__())
    for node in samples:  # the fields not read are exactly the children, in order
        plain = ex._plain_fields(type(node))
        rest = [getattr(node, f.name) for f in dataclasses.fields(node) if f.name not in plain]
        flat = [
            item for value in rest for item in (value if isinstance(value, tuple) else (value,))
        ]
        assert tuple(flat) == node.children()
