"""What a program expression keeps on its nodes (``random_key``, ``contains``) and the
cached runs of a view are the answers computed afresh: on a DAG whose parts are shared,
before and after the nodes are reused in larger expressions, false answers included."""

from __future__ import annotations

import torch

from shardinit._program.index import Lin, as_lin
from shardinit._program.nodes import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Source,
    Unary,
    bad_reasons,
    contains,
    random_key,
    walk_nodes,
)
from shardinit._program.regions import view_runs
from shardinit._program.rewrite import combine, where
from shardinit.init import Uniform


def _source(origin: int) -> Source:
    return Source(Uniform(-1.0, 1.0), torch.float32, origin, (Coord(0), Coord(1)))


def _shared_dag(depth: int) -> Expr:
    """A chain where each level reads the one before twice (a walk of the tree would
    visit 2**depth nodes)."""
    node: Expr = Binary("mul", Coord(0), Const(3.0))
    for _ in range(depth):
        node = Binary("add", node, Unary("exp", node))
    return node


def _contains_afresh(expr: Expr, kind: type[Expr]) -> bool:
    return any(isinstance(node, kind) for node in walk_nodes(expr))


def test_contains_and_random_key_kept_on_nodes_equal_the_answers_afresh() -> None:
    table = _shared_dag(60)  # 2**60 tree paths: only a memo per node finishes
    assert not contains(table, Source) and not contains(table, Bad)
    assert random_key(table) == frozenset()
    noisy = combine("mul", table, _source(1))
    assert isinstance(noisy, Binary)
    assert contains(noisy, Source) and not contains(table, Source)
    assert random_key(noisy) == {(1, (Coord(0), Coord(1)))}
    assert contains(noisy, (Bad, Source)) and not contains(noisy, Bad)
    # Two fills meet in one element: refused, though each side's key was kept before.
    other = combine("add", table, _source(2))
    assert isinstance(combine("add", noisy, other), Bad)
    assert isinstance(where(Binary("lt", noisy, Const(0.0)), other, noisy), Bad)
    # The same fill at the same place meets itself: one value.
    assert random_key(combine("add", noisy, _source(1))) == random_key(noisy)
    small = combine("add", _source(1), Unary("exp", _source(3)))
    assert isinstance(small, Bad) and bad_reasons(small) == [small.why]
    wrapped = Unary("neg", Binary("add", Const(1.0), small))
    for node in (table, noisy, other, wrapped):
        for kind in (Source, Bad):
            assert contains(node, kind) == _contains_afresh(node, kind)
    assert bad_reasons(wrapped) == [small.why] and bad_reasons(noisy) == []


def test_nodes_equal_and_hash_by_their_fields_alone() -> None:
    asked, fresh = _source(4), _source(4)
    random_key(asked), contains(asked, Bad)
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
    node: Expr = Binary("sub", Coord(1), Const(5.0))
    for _ in range(20):  # each level doubles the one before, read twice
        node = Binary("add", node, node)
    assert as_lin(node) == Lin(-5 * 2**20, ((1, 2**20),))
    scaled = Binary("mul", node, Const(3.0))
    assert as_lin(scaled) == Lin(-15 * 2**20, ((1, 3 * 2**20),))
    assert as_lin(Binary("mul", node, node)) is None  # not affine
    assert as_lin(Binary("add", node, Const(0.5))) is None
    assert as_lin(node) == Lin(-5 * 2**20, ((1, 2**20),))
