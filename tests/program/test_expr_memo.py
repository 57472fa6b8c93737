"""What a program expression keeps on its nodes (``random_key``, ``contains``) and the
cached runs of a view are the answers computed afresh: on a DAG whose parts are shared,
before and after the nodes are reused in larger expressions, false answers included."""

from __future__ import annotations

import torch

from shardinit._program import expr as ex
from shardinit._program.regions import view_runs
from shardinit.init import Uniform


def _source(origin: int) -> ex.Source:
    return ex.Source(Uniform(-1.0, 1.0), torch.float32, origin, (ex.Coord(0), ex.Coord(1)))


def _shared_dag(depth: int) -> ex.Expr:
    """A chain where each level reads the one before twice (a walk of the tree would
    visit 2**depth nodes)."""
    node: ex.Expr = ex.Binary("mul", ex.Coord(0), ex.Const(3.0))
    for _ in range(depth):
        node = ex.Binary("add", node, ex.Unary("exp", node))
    return node


def _contains_afresh(expr: ex.Expr, kind: type[ex.Expr]) -> bool:
    return any(isinstance(node, kind) for node in ex.walk_nodes(expr))


def test_contains_and_random_key_kept_on_nodes_equal_the_answers_afresh() -> None:
    table = _shared_dag(60)  # 2**60 tree paths: only a memo per node finishes
    assert not ex.contains(table, ex.Source) and not ex.contains(table, ex.Bad)
    assert ex.random_key(table) == frozenset()
    noisy = ex.combine("mul", table, _source(1))
    assert isinstance(noisy, ex.Binary)
    assert ex.contains(noisy, ex.Source) and not ex.contains(table, ex.Source)
    assert ex.random_key(noisy) == {(1, (ex.Coord(0), ex.Coord(1)))}
    assert ex.contains(noisy, (ex.Bad, ex.Source)) and not ex.contains(noisy, ex.Bad)
    # Two fills meet in one element: refused, though each side's key was kept before.
    other = ex.combine("add", table, _source(2))
    assert isinstance(ex.combine("add", noisy, other), ex.Bad)
    assert isinstance(ex.where(ex.Binary("lt", noisy, ex.Const(0.0)), other, noisy), ex.Bad)
    # The same fill at the same place meets itself: one value.
    assert ex.random_key(ex.combine("add", noisy, _source(1))) == ex.random_key(noisy)
    small = ex.combine("add", _source(1), ex.Unary("exp", _source(3)))
    assert isinstance(small, ex.Bad) and ex.bad_reasons(small) == [small.why]
    wrapped = ex.Unary("neg", ex.Binary("add", ex.Const(1.0), small))
    for node in (table, noisy, other, wrapped):
        for kind in (ex.Source, ex.Bad):
            assert ex.contains(node, kind) == _contains_afresh(node, kind)
    assert ex.bad_reasons(wrapped) == [small.why] and ex.bad_reasons(noisy) == []


def test_nodes_equal_and_hash_by_their_fields_alone() -> None:
    asked, fresh = _source(4), _source(4)
    ex.random_key(asked), ex.contains(asked, ex.Bad)
    assert asked == fresh and hash(asked) == hash(fresh) and repr(asked) == repr(fresh)


def test_cached_view_runs_are_the_views_own_and_a_fresh_list_each_call() -> None:
    base = torch.zeros(4, 6)
    first = view_runs(base[1:3, 2:5], base)
    first.append((99, 100))
    assert view_runs(base[1:3, 2:5], base) == [(8, 11), (14, 17)]
    other = torch.zeros(5, 6)  # same view offsets and strides, another base
    assert view_runs(other[1:3, 2:5], other) == [(8, 11), (14, 17)]
    assert view_runs(base[:, 2:5], base) == [(2, 5), (8, 11), (14, 17), (20, 23)]
    assert view_runs(base.view(-1)[::8], base) == [(0, 1), (8, 9), (16, 17)]


def test_affine_forms_kept_on_nodes_equal_the_forms_afresh() -> None:
    node: ex.Expr = ex.Binary("sub", ex.Coord(1), ex.Const(5.0))
    for _ in range(20):  # each level doubles the one before, read twice
        node = ex.Binary("add", node, node)
    assert ex.as_lin(node) == ex.Lin(-5 * 2**20, ((1, 2**20),))
    scaled = ex.Binary("mul", node, ex.Const(3.0))
    assert ex.as_lin(scaled) == ex.Lin(-15 * 2**20, ((1, 3 * 2**20),))
    assert ex.as_lin(ex.Binary("mul", node, node)) is None  # not affine
    assert ex.as_lin(ex.Binary("add", node, ex.Const(0.5))) is None
    assert ex.as_lin(node) == ex.Lin(-5 * 2**20, ((1, 2**20),))
