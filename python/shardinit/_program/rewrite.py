"""Rewrites of an expression: steps built with what is exact folded (:func:`combine`,
:func:`where`), an expression moved to other coordinates (:func:`reindex`, kept by the
structure of the rewrite), folded over a box (:func:`simplify`), and the values before
an in-place operation substituted (:func:`substitute_prior`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from .._caches import BoundedMap
from .index import as_lin, index_op
from .keys import structure
from .nodes import (
    COMPARE,
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Prior,
    Source,
    Table,
    Where,
    contains,
    kept,
    random_key,
    walk_nodes,
)
from .tables import gathered, index_values, unread

__all__ = ["combine", "reindex", "simplify", "substitute_prior", "where", "without_branch"]


def combine(op: str, a: Expr, b: Expr, ranges: Sequence[tuple[int, int]] | None = None) -> Expr:
    """``a <op> b``; :class:`Bad` when two random values would meet in one element."""
    if isinstance(a, Bad):
        return a
    if isinstance(b, Bad):
        return b
    if op in ("add", "sub", "mul", "floordiv", "mod") or op in COMPARE:
        folded = index_op(op, a, b, ranges)
        if not isinstance(folded, Binary):
            return folded
    node = Binary(op, a, b)
    if random_key(node) is None:
        return Bad("two random values (or one read at two places) meet in one element")
    return node


def where(cond: Expr, a: Expr, b: Expr) -> Expr:
    """``a`` where ``cond`` holds, else ``b``; :class:`Bad` when two random values would
    meet in one element (a random condition choosing another random value: both are
    drawn at the element's own index, so they would be one value, torch's two)."""
    if isinstance(cond, Const):
        return a if cond.value else b
    if a == b:
        return a
    node = Where(cond, a, b)
    if random_key(node) is None:
        return Bad("two random values (or one read at two places) meet in one element")
    return node


def reindex(
    expr: Expr,
    coords: Sequence[Expr],
    ranges: Sequence[tuple[int, int]],
    repeats: str | None = None,
    keep: bool = True,
) -> Expr:
    """``expr`` (over coordinates ``Coord(0..)``) read at ``coords``, expressions of new
    coordinates that run over ``ranges``. ``repeats`` (a reason) marks a map that reads
    some elements more than once: random sources become :class:`Bad` with it. The
    identity map returns ``expr`` itself unless ``keep`` is False."""
    if keep and repeats is None and _identity(coords):
        return expr  # the identity: the same expression
    key = _rewrite_key(expr, coords, ranges, repeats)
    if key is None:
        return _reindexed(expr, coords, ranges, repeats)
    return _kept_rewrite(expr, coords, ranges, repeats, key)


def _kept_rewrite(
    expr: Expr,
    coords: Sequence[Expr],
    ranges: Sequence[tuple[int, int]],
    repeats: str | None,
    key: tuple[object, ...],
) -> Expr:
    """:func:`reindex`'s rewrite kept under ``key`` (:func:`_rewrite_key`)."""
    kept = _REWRITES.get(key)
    if kept is None:
        result = _reindexed(expr, coords, ranges, repeats)
        kept = (result, result is expr)
        _REWRITES.put(key, kept)
    return expr if kept[1] else kept[0]


def _identity(coords: Sequence[Expr]) -> bool:
    """Whether ``coords`` read each coordinate at itself (``Coord(d)`` at position
    ``d``): asked by field, without building the coordinates to compare with."""
    return all(type(c) is Coord and c.dim == d for d, c in enumerate(coords))


def _reindexed(
    expr: Expr, coords: Sequence[Expr], ranges: Sequence[tuple[int, int]], repeats: str | None
) -> Expr:
    guards: list[Expr] = []  # tables gathered with positions past them (:func:`_excused`)
    return _Memoized(lambda node, walk: _rebuild(node, walk, coords, ranges, repeats, guards))(expr)


#: :func:`reindex`'s results by the structure of the rewrite (:func:`_rewrite_key`): the
#: result, and whether it was the expression itself (then the caller's own is returned).
_REWRITES: BoundedMap[tuple[object, ...], tuple[Expr, bool]] = BoundedMap()
#: The most nodes of an expression whose rewrite is kept (a coordinate table's are tens).
_KEPT_NODES = 256


def _rewrite_key(
    expr: Expr, coords: Sequence[Expr], ranges: Sequence[tuple[int, int]], repeats: str | None
) -> tuple[object, ...] | None:
    """The key under which :func:`reindex` keeps a rewrite: the structures of the
    expression and the coordinates, the ranges and the reason. A model computes the
    same coordinate table in each of its layers (Swin's relative positions, one per
    attention), each a new expression of the same nodes, rewritten at the same places.
    None (not kept) for random expressions, each a parameter's own (no other has the
    same sources), and for tables (their values are no field)."""
    if contains(expr, (Source, Table)):
        return None
    shape = _kept_structure(expr)
    at = tuple(_kept_structure(coord) for coord in coords)
    if shape is None or any(c is None for c in at):
        return None
    return (shape, at, tuple((int(a), int(b)) for a, b in ranges), repeats)


def _kept_structure(expr: Expr) -> tuple[object, ...] | None:
    """:func:`structure` up to :data:`_KEPT_NODES` nodes, kept on the node (a view's
    coordinates and a track's fold are rewritten many times)."""
    found = kept(expr, "_structure", lambda node: structure(node, _KEPT_NODES))
    return cast("tuple[object, ...] | None", found)


class _Memoized:
    """A rewrite of an expression, each node rewritten once (a shared subexpression
    stays shared): ``rewrite(node, walk)`` rebuilds one node, walking its children with
    ``walk``. An object, not a closure that calls itself: that would be a reference
    cycle, left for the garbage collector at every rewrite."""

    def __init__(self, rewrite: Callable[[Expr, Callable[[Expr], Expr]], Expr]) -> None:
        self.rewrite = rewrite
        self.memo: dict[int, Expr] = {}

    def __call__(self, node: Expr) -> Expr:
        done = self.memo.get(id(node))
        if done is None:
            done = self.memo[id(node)] = self.rewrite(node, self)
        return done


def _rebuild(
    node: Expr,
    walk: Callable[[Expr], Expr],
    coords: Sequence[Expr],
    ranges: Sequence[tuple[int, int]],
    repeats: str | None,
    guards: list[Expr],
) -> Expr:
    if isinstance(node, Coord):
        moved = coords[node.dim]
        # An equal coordinate is the node itself: the nodes above it are then kept, not
        # built again (a view's own dims, a pinned box's long dims, simplify's identity).
        return node if moved == node else moved
    if isinstance(node, Source) and repeats is not None:
        return Bad(repeats)
    if not node.children():
        return node  # Const, Prior, Bad
    children = [walk(child) for child in node.children()]
    # The nodes whose rebuilding folds: a table read at positions no longer affine is
    # gathered into a new table; arithmetic and conditions fold over ``ranges``.
    if isinstance(node, Table) and as_lin(children[0]) is None:
        table = gathered(node.data, children[0], ranges)
        if unread(table):
            guards.append(table)
        return table
    if isinstance(node, Binary):
        if _unchanged_step(node, children):
            return node  # what combine would build again: keeps what was asked of it
        step = combine(node.op, children[0], children[1], ranges)
        # Index arithmetic folded to itself (``c % 2`` over a range that decides nothing)
        # is the node: the nodes above it are then kept too (simplify's identity).
        return node if _own_children(node, children) and step == node else step
    if isinstance(node, Where) and guards:  # else nothing to excuse: no walk of branches
        cond, a, b = children
        made = {id(guard) for guard in guards}
        a, b = (_excused(x, cond, ranges, taken, made) for x, taken in ((a, True), (b, False)))
        return where(cond, a, b)
    own = all(x is y for x, y in zip(children, node.children(), strict=True))
    if isinstance(node, Where):
        chosen = where(*children)
        return node if own and chosen == node else chosen  # (as a step above)
    if own:
        return node  # (a unary step, a rounding, a source, a table read where it was)
    return node.with_children(children)


def _own_children(node: Binary, children: Sequence[Expr]) -> bool:
    return children[0] is node.a and children[1] is node.b


def _unchanged_step(node: Binary, children: Sequence[Expr]) -> bool:
    """Whether :func:`combine` of ``node``'s op on ``children`` is ``node`` itself: the
    children are its own, no index arithmetic folds (an operand not affine) and no two
    random values meet (its random key, kept, is one)."""
    a, b = children
    if a is not node.a or b is not node.b or isinstance(a, Bad) or isinstance(b, Bad):
        return False
    affine = as_lin(a) is not None and as_lin(b) is not None
    return not affine and random_key(node) is not None


def _excused(
    branch: Expr, cond: Expr, ranges: Sequence[tuple[int, int]], taken_when: bool, made: set[int]
) -> Expr:
    """``branch`` of a ``where(cond, ...)`` (taken where ``cond`` is ``taken_when``), with
    each table gathered over ``ranges`` (``made``: the guards of this reindex, whose
    validity is over these coordinates) whose index ran past the table only where the
    branch is not taken unguarded (a ``cat`` reshaped: the part before the seam, read
    past its end on the positions after it, which the other branch gives). A guard at a
    position the branch is taken stays: there the read is past the table, refused."""
    if not any(id(node) in made for node in walk_nodes(branch)):
        return branch
    values = index_values(cond, ranges)
    if values is None:
        return branch
    shape = [max(stop - start, 0) for start, stop in ranges]
    taken = (values != 0).expand(shape) == taken_when

    def rewrite(node: Expr, walk: Callable[[Expr], Expr]) -> Expr:
        if id(node) in made:
            assert isinstance(node, Where) and isinstance(node.cond, Table)
            valid = node.cond.data.values.view(shape) != 0
            return node.a if not bool((taken & ~valid).any()) else node
        if isinstance(node, Table) or not node.children():
            return node  # a table's index is coordinates: no guard in it
        rebuilt = [walk(child) for child in node.children()]
        return node if all(x is y for x, y in zip(rebuilt, node.children(), strict=True)) else (
            node.with_children(rebuilt)
        )  # fmt: skip

    return _Memoized(rewrite)(branch)


def simplify(expr: Expr, box: Sequence[tuple[int, int]]) -> Expr:
    """``expr`` with what is decided over the coordinates of ``box`` folded away."""
    coords = [Coord(d) for d in range(len(box))]
    ranges = [(int(a), int(b)) for a, b in box]
    key = _rewrite_key(expr, coords, ranges, None)
    if key is not None:  # no source, no table: kept whole by structure, as reindex keeps it
        return _kept_rewrite(expr, coords, ranges, None, key)
    guards: list[Expr] = []
    return _Memoized(lambda node, walk: _simplified(node, walk, coords, ranges, guards))(expr)


def _simplified(
    node: Expr,
    walk: Callable[[Expr], Expr],
    coords: Sequence[Expr],
    ranges: Sequence[tuple[int, int]],
    guards: list[Expr],
) -> Expr:
    """:func:`simplify`'s rebuild of ``node``. A part of coordinates and constants alone
    (no source, no table: a strided view's condition, index arithmetic) folds by the
    ranges of the coordinates it reads alone, so its result is kept on the part's top
    node per those ranges: a loop of writes through strided rows shares one condition,
    simplified over each row's box, that would be folded again per row (the rest of
    each program is the row's own)."""
    if not node.children() or isinstance(node, Coord) or contains(node, _NOT_COORDINATES):
        return _rebuild(node, walk, coords, ranges, None, guards)
    at = tuple(ranges[dim] for dim in _dims_read(node))
    done: dict[tuple[tuple[int, int], ...], Expr] | None = node.__dict__.get("_simplified")
    if done is None:
        done = {}
        object.__setattr__(node, "_simplified", done)  # not a field (see nodes.kept)
    found = done.get(at)
    if found is None:
        # The part as reindex rebuilds it (no table under it: no guard of this walk is
        # its business), its own nodes not kept one by one.
        found = _reindexed(node, coords, ranges, None)
        if len(done) < _KEPT_RANGES:
            done[at] = found
    return found


#: What makes a node's simplification depend on more than its coordinates' ranges (a
#: table is gathered over the whole box), or what is each program's own (a source).
_NOT_COORDINATES = (Source, Table)
#: The most ranges a node keeps its simplification for (one per row of a loop at worst).
_KEPT_RANGES = 64


def _dims_read(node: Expr) -> tuple[int, ...]:
    """The coordinates ``node`` reads, kept on the node (asked of a part's top node)."""
    found = kept(
        node, "_dims_read",
        lambda n: tuple(sorted({x.dim for x in walk_nodes(n) if isinstance(x, Coord)})),
    )  # fmt: skip
    return cast("tuple[int, ...]", found)


def without_branch(expr: Expr, never: Expr) -> Expr:
    """``expr`` with each ``where`` branch that reaches the node ``never`` dropped,
    wherever it lies. Sound only where no element's value is ``never`` (the fold of a
    tensor every element of which was written, ``never`` the value of unwritten ones): a
    node computed from ``never`` is never selected, and neither is a branch holding it;
    what is left is the branch each element takes."""
    return _Memoized(lambda node, walk: _without(node, walk, never))(expr)


def _without(node: Expr, walk: Callable[[Expr], Expr], never: Expr) -> Expr:
    if node is never or not node.children():
        return node
    children = [walk(child) for child in node.children()]
    if isinstance(node, Where) and children[0] is not never:
        _, a, b = children
        if a is never or b is never:
            return b if a is never else a
    elif any(child is never for child in children):
        return never  # computed from it: never selected either
    if all(x is y for x, y in zip(children, node.children(), strict=True)):
        return node
    return node.with_children(children)


def substitute_prior(expr: Expr, prior: Expr) -> Expr:
    """``expr`` with :class:`Prior` replaced by ``prior``."""
    return _Memoized(lambda node, walk: _substituted(node, walk, prior))(expr)


def _substituted(node: Expr, walk: Callable[[Expr], Expr], prior: Expr) -> Expr:
    if isinstance(node, Prior):
        return prior
    if isinstance(node, Source | Table) or not node.children():
        return node  # a source's place and a table's index are coordinates: no Prior
    children = [walk(child) for child in node.children()]
    if isinstance(node, Binary):
        return combine(node.op, children[0], children[1])
    if isinstance(node, Where):
        return where(*children)
    return node.with_children(children)
