"""Init programs: the elementwise computation init code performs for one element, as an
expression over the element's coordinates (docs/stream-format.md, "Init programs").

An expression describes the values of one tensor (a temporary, or a box of a parameter)
as a function of its own coordinates ``Coord(d)``. Its leaves are constants,
coordinates, random sources (the value of an initializer at the DESTINATION parameter's
own global index: layout-independent by construction), tables of values known at capture
(CPU tensors init code computed) and ``Prior`` (the element's value before an in-place
operation). Views, broadcasts and copies move an expression from one tensor's
coordinates to another's (:func:`reindex`); index arithmetic that stays affine is
simplified so tables stay tables and ``where`` of coordinate conditions folds away.

Nothing here computes a float: values are computed only by the core's deterministic
binary64 evaluator (the core's registers), when written. Only exact integer index arithmetic
is folded here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from .. import _core
from .._caches import BoundedMap, cached
from ..init import BaseInit, Constant
from .cannot import Cannot

__all__ = [
    "BINARY",
    "EXACT_INTEGERS",
    "INTEGER_DTYPES",
    "TABLE_CAP",
    "UNARY",
    "Bad",
    "Binary",
    "Const",
    "Coord",
    "Expr",
    "Prior",
    "Round",
    "Source",
    "Table",
    "TableData",
    "Unary",
    "Where",
    "bad_reasons",
    "bare_source",
    "beyond_table_cap",
    "check_exact_integers",
    "contains",
    "exact_integers",
    "gathered",
    "holds_exactly",
    "in_box",
    "in_dtype",
    "integer_span",
    "random_key",
    "reindex",
    "simplify",
    "stored",
    "structure",
    "substitute_prior",
]

#: Unary operations of the core's evaluator (their one home is the core: ``UnaryOp``).
UNARY = frozenset(_core.UNARY_OPS)
#: Binary operations of the core's evaluator (comparisons give 1.0 or 0.0).
BINARY = frozenset(_core.BINARY_OPS)
_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


class Expr:
    """A node of an init program (immutable; structural equality)."""

    __slots__ = ()

    def children(self) -> tuple[Expr, ...]:
        """The expressions this node is computed from, in order (none: a leaf)."""
        return ()

    def with_children(self, children: Sequence[Expr]) -> Expr:
        """This node computed from ``children`` instead (as many as :meth:`children`),
        built as it is (no folding: :func:`combine` and :func:`where` fold)."""
        return self


@dataclass(frozen=True)
class Const(Expr):
    value: float


@dataclass(frozen=True)
class Coord(Expr):
    """The element's coordinate along ``dim`` of the tensor the expression describes."""

    dim: int


@dataclass(frozen=True)
class Source(Expr):
    """A random value: ``init`` at the destination element's own global index of the
    parameter's stream, rounded to ``dtype``.

    Attributes:
        origin: which fill made it (two different ones never meet in one element).
        at: the filled temporary's coordinates as expressions of the current ones (the
            same fill read at two different places never meets in one element either).
    """

    init: BaseInit
    dtype: torch.dtype
    origin: int
    at: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.at

    def with_children(self, children: Sequence[Expr]) -> Expr:
        return Source(self.init, self.dtype, self.origin, tuple(children))


@dataclass(eq=False)
class TableData:
    """Values known at capture (a CPU tensor init code computed), flat, binary64."""

    values: torch.Tensor


@dataclass(frozen=True)
class Table(Expr):
    """``data.values[index]``; ``index`` must be affine in the coordinates when written."""

    data: TableData
    index: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.index,)

    def with_children(self, children: Sequence[Expr]) -> Expr:
        (index,) = children
        return Table(self.data, index)


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    x: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def with_children(self, children: Sequence[Expr]) -> Expr:
        (x,) = children
        return Unary(self.op, x)


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def with_children(self, children: Sequence[Expr]) -> Expr:
        a, b = children
        return Binary(self.op, a, b)


@dataclass(frozen=True)
class Where(Expr):
    cond: Expr
    a: Expr
    b: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.a, self.b)

    def with_children(self, children: Sequence[Expr]) -> Expr:
        cond, a, b = children
        return Where(cond, a, b)


@dataclass(frozen=True)
class Round(Expr):
    """Rounded to ``dtype`` (a cast; round-to-nearest-even); for an integer ``dtype``, an
    exact integer wrapped into its range (:func:`exact_integers`; the compiler lowers it
    to exact binary64 steps)."""

    x: Expr
    dtype: torch.dtype

    def children(self) -> tuple[Expr, ...]:
        return (self.x,)

    def with_children(self, children: Sequence[Expr]) -> Expr:
        (x,) = children
        return Round(x, self.dtype)


@dataclass(frozen=True)
class Prior(Expr):
    """The element's value before the operation (in the tensor's dtype)."""


@dataclass(frozen=True)
class Bad(Expr):
    """Values that cannot be written shard-locally, and why (refused if they reach a parameter)."""

    why: str


# --------------------------------------------------------------------------- affine index


@dataclass(frozen=True)
class Lin:
    """``offset + sum(coefs[d] * Coord(d))`` with integer coefficients."""

    offset: int
    coefs: tuple[tuple[int, int], ...]  # (dim, coef), coef != 0, sorted by dim

    def span(self, ranges: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """Smallest and largest value over the half-open coordinate ``ranges``."""
        low = high = self.offset
        for dim, coef in self.coefs:
            start, stop = ranges[dim]
            if stop <= start:
                return (0, -1)
            low += min(coef * start, coef * (stop - 1))
            high += max(coef * start, coef * (stop - 1))
        return low, high


def _lin(offset: int, terms: dict[int, int]) -> Lin:
    return Lin(offset, tuple(sorted((d, c) for d, c in terms.items() if c)))


def as_lin(expr: Expr) -> Lin | None:
    """``expr`` as an affine integer form, or None (kept on the node, as
    :func:`random_key`: index arithmetic asks it of each operand it combines)."""
    return cast("Lin | None", _kept(expr, "_as_lin", _as_lin))


def _as_lin(expr: Expr) -> Lin | None:
    if isinstance(expr, Const) and float(expr.value).is_integer():
        return Lin(int(expr.value), ())
    if isinstance(expr, Coord):
        return Lin(0, ((expr.dim, 1),))
    if isinstance(expr, Binary) and expr.op in ("add", "sub", "mul"):
        a, b = as_lin(expr.a), as_lin(expr.b)
        if a is None or b is None:
            return None
        if expr.op == "mul":
            if a.coefs and b.coefs:
                return None
            scale, form = (a.offset, b) if not a.coefs else (b.offset, a)
            return _lin(scale * form.offset, {d: scale * c for d, c in form.coefs})
        sign = 1 if expr.op == "add" else -1
        terms = dict(a.coefs)
        for d, c in b.coefs:
            terms[d] = terms.get(d, 0) + sign * c
        return _lin(a.offset + sign * b.offset, terms)
    return None


def lin_expr(lin: Lin) -> Expr:
    """The expression of an affine form (integer constants and coordinates)."""
    expr: Expr | None = None
    for dim, coef in lin.coefs:
        term: Expr = Coord(dim) if coef == 1 else Binary("mul", Coord(dim), Const(float(coef)))
        expr = term if expr is None else Binary("add", expr, term)
    if expr is None:
        return Const(float(lin.offset))
    return expr if lin.offset == 0 else Binary("add", expr, Const(float(lin.offset)))


def _divmod(op: str, lin: Lin, q: int, ranges: Sequence[tuple[int, int]]) -> Lin | None:
    """``lin // q`` or ``lin % q`` as an affine form over ``ranges``, where exact."""
    if q <= 0:
        return None
    whole, rest = divmod(lin.offset, q)
    keep: dict[int, int] = {}
    low: dict[int, int] = {}
    for dim, coef in lin.coefs:
        (keep if coef % q == 0 else low)[dim] = coef
    remainder = _lin(rest, low)
    span = remainder.span(ranges)
    if not (span[0] >= 0 and span[1] < q):
        return None
    if op == "floordiv":
        return _lin(whole, {d: c // q for d, c in keep.items()})
    return remainder


def index_op(op: str, a: Expr, b: Expr, ranges: Sequence[tuple[int, int]] | None) -> Expr:
    """``a <op> b``, folded where exact: integer affine arithmetic, ``//`` and ``%`` by a
    constant that stay affine over ``ranges``, comparisons decided over ``ranges``."""
    la, lb = as_lin(a), as_lin(b)
    if la is not None and lb is not None:
        if op in ("add", "sub") or (op == "mul" and not (la.coefs and lb.coefs)):
            folded = as_lin(Binary(op, lin_expr(la), lin_expr(lb)))
            if folded is not None:
                return lin_expr(folded)
        if op in ("floordiv", "mod") and not lb.coefs and ranges is not None:
            exact = _divmod(op, la, lb.offset, ranges)
            if exact is not None:
                return lin_expr(exact)
        if op in _COMPARE and ranges is not None:
            diff = as_lin(Binary("sub", lin_expr(la), lin_expr(lb)))
            assert diff is not None
            low, high = diff.span(ranges)
            decided = _decide(op, low, high)
            if decided is not None:
                return Const(float(decided))
    return Binary(op, a, b)


def _decide(op: str, low: int, high: int) -> bool | None:
    """Whether ``x <op> 0`` holds for every (True) or no (False) x in [low, high]."""
    if low > high:
        return True
    tests: dict[str, Callable[[int], bool]] = {
        "lt": lambda x: x < 0, "le": lambda x: x <= 0, "gt": lambda x: x > 0,
        "ge": lambda x: x >= 0, "eq": lambda x: x == 0, "ne": lambda x: x != 0,
    }  # fmt: skip
    test = tests[op]
    if low == high:
        return test(low)
    if op in ("eq", "ne"):
        return None if low <= 0 <= high else op == "ne"
    at_low, at_high = test(low), test(high)
    return at_low if at_low == at_high else None


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


def in_box(box: Sequence[tuple[int, int]], shape: Sequence[int]) -> Expr:
    """1.0 inside ``box`` (of a tensor of ``shape``), else 0.0."""
    cond: Expr = Const(1.0)
    for dim, ((start, stop), size) in enumerate(zip(box, shape, strict=True)):
        for op, bound, trivial in (("ge", start, start <= 0), ("lt", stop, stop >= size)):
            if trivial:
                continue
            test = Binary(op, Coord(dim), Const(float(bound)))
            cond = test if cond == Const(1.0) else Binary("mul", cond, test)
    return cond


# --------------------------------------------------------------------------- rewriting


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
    if keep and repeats is None and all(c == Coord(d) for d, c in enumerate(coords)):
        return expr  # the identity: the same expression
    key = _rewrite_key(expr, coords, ranges, repeats)
    if key is None:
        return _reindexed(expr, coords, ranges, repeats)
    kept = _REWRITES.get(key)
    if kept is None:
        result = _reindexed(expr, coords, ranges, repeats)
        kept = (result, result is expr)
        _REWRITES.put(key, kept)
    return expr if kept[1] else kept[0]


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
    found = _kept(expr, "_structure", lambda node: structure(node, _KEPT_NODES))
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
        return coords[node.dim]
    if isinstance(node, Source) and repeats is not None:
        return Bad(repeats)
    if not node.children():
        return node  # Const, Prior, Bad
    children = [walk(child) for child in node.children()]
    # The nodes whose rebuilding folds: a table read at positions no longer affine is
    # gathered into a new table; arithmetic and conditions fold over ``ranges``.
    if isinstance(node, Table) and as_lin(children[0]) is None:
        table = gathered(node.data, children[0], ranges)
        if _unread(table):
            guards.append(table)
        return table
    if isinstance(node, Binary):
        if _unchanged_step(node, children):
            return node  # what combine would build again: keeps what was asked of it
        return combine(node.op, children[0], children[1], ranges)
    if isinstance(node, Where) and guards:  # else nothing to excuse: no walk of branches
        cond, a, b = children
        made = {id(guard) for guard in guards}
        a, b = (_excused(x, cond, ranges, taken, made) for x, taken in ((a, True), (b, False)))
        return where(cond, a, b)
    if isinstance(node, Where):
        return where(*children)
    if all(x is y for x, y in zip(children, node.children(), strict=True)):
        return node  # (a unary step, a rounding, a source, a table read where it was)
    return node.with_children(children)


def _unchanged_step(node: Binary, children: Sequence[Expr]) -> bool:
    """Whether :func:`combine` of ``node``'s op on ``children`` is ``node`` itself: the
    children are its own, no index arithmetic folds (an operand not affine) and no two
    random values meet (its random key, kept, is one)."""
    a, b = children
    if a is not node.a or b is not node.b or isinstance(a, Bad) or isinstance(b, Bad):
        return False
    affine = as_lin(a) is not None and as_lin(b) is not None
    return not affine and random_key(node) is not None


#: Why a gathered table holds no value at some positions (:func:`gathered`).
_PAST_THE_TABLE = "a table of computed values read at positions that are not affine"


def _unread(expr: Expr) -> bool:
    """Whether ``expr`` is a gathered table guarded where its index ran past the table."""
    return isinstance(expr, Where) and expr.b == Bad(_PAST_THE_TABLE)


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
    values = _index_values(cond, ranges)
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


#: The most elements a table gathered at capture may hold (binary64: 128 MiB at the cap);
#: :mod:`.concrete` holds the tables it computes to it too.
TABLE_CAP = 1 << 24


def beyond_table_cap(count: int, what: str) -> str:
    """Why ``what`` of ``count`` elements (beyond :data:`TABLE_CAP`) is no table."""
    return (
        f"{what} of {count} elements is beyond the cap of {TABLE_CAP} elements a table "
        "computed at capture may hold (shardinit._program.expr.TABLE_CAP)"
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
    flat = _index_values(index, ranges)
    if flat is None:
        return Bad(_PAST_THE_TABLE)
    flat = flat.expand(shape).reshape(-1)
    size = data.values.numel()
    valid = (flat >= 0) & (flat < size)
    values = torch.full((count,), math.nan, dtype=torch.float64, device="cpu")
    if size:  # past the table: NaN, never read (guarded below)
        values = torch.where(valid, data.values[flat.clamp(0, size - 1)], values)
    shifted = [combine("sub", Coord(d), Const(float(start))) for d, (start, _) in enumerate(ranges)]
    local = reindex(contiguous_index(shape), shifted, ranges)
    table = Table(TableData(values), local)
    if bool(valid.all()):
        return table
    # Positions past the table: a branch not taken there is excused (:func:`_excused`);
    # else the guard's Bad refuses the read.
    return Where(Table(TableData(valid.to(torch.float64)), local), table, Bad(_PAST_THE_TABLE))


def _index_values(index: Expr, ranges: Sequence[tuple[int, int]]) -> torch.Tensor | None:
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
    a, b = _index_values(index.a, ranges), _index_values(index.b, ranges)
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


def simplify(expr: Expr, box: Sequence[tuple[int, int]]) -> Expr:
    """``expr`` with what is decided over the coordinates of ``box`` folded away."""
    coords = [Coord(d) for d in range(len(box))]
    return reindex(expr, coords, [(int(a), int(b)) for a, b in box], repeats=None, keep=False)


#: A random key: the ``(origin, at)`` of each random source, as alternatives.
RandomKey = frozenset[tuple[int, tuple[Expr, ...]]]


def random_key(expr: Expr) -> RandomKey | None:
    """The random sources an element's value may depend on, as alternatives (the
    branches of a ``where``); None when two of them would meet in one element.

    Kept on the node (a function of the immutable node alone): capture asks it of each
    node it builds, whose children it asked before, and an expression is a DAG whose
    shared parts (a coordinate table's) a walk of its tree would visit many times."""
    return cast("RandomKey | None", _kept(expr, "_random_key", _random_key))


#: Nothing kept on the node yet (None is an answer).
_NOT_KEPT = object()


def _kept(expr: Expr, attr: str, compute: Callable[[Expr], object]) -> object:
    """``compute(expr)``, kept on the node as ``attr``: the answer is a function of the
    immutable node alone, and the attribute is not a field (eq, hash, repr ignore it)."""
    known = expr.__dict__.get(attr, _NOT_KEPT)
    if known is _NOT_KEPT:
        known = compute(expr)
        object.__setattr__(expr, attr, known)
    return known


def _random_key(expr: Expr) -> RandomKey | None:
    """:func:`random_key`, computed from the children's."""
    if isinstance(expr, Source):
        return frozenset({(expr.origin, expr.at)})
    if isinstance(expr, Where):
        parts = [random_key(expr.a), random_key(expr.b), random_key(expr.cond)]
        if any(p is None for p in parts):
            return None
        cond = parts[2]
        if cond:
            # A random condition (``where(x < 0, 0, x)``: relu, clamp by a number) meets
            # either branch: both must read that one value, or none.
            if len(cond) > 1 or any(p and p != cond for p in parts[:2]):
                return None
            return cond
        return frozenset().union(*(p for p in parts[:2] if p))
    found: RandomKey = frozenset()
    for child in expr.children():
        key = random_key(child)
        if key is None:
            return None
        if key and found and (key != found or len(key) > 1):
            return None
        found = found or key
    return found


def combine(op: str, a: Expr, b: Expr, ranges: Sequence[tuple[int, int]] | None = None) -> Expr:
    """``a <op> b``; :class:`Bad` when two random values would meet in one element."""
    if isinstance(a, Bad):
        return a
    if isinstance(b, Bad):
        return b
    if op in ("add", "sub", "mul", "floordiv", "mod") or op in _COMPARE:
        folded = index_op(op, a, b, ranges)
        if not isinstance(folded, Binary):
            return folded
    node = Binary(op, a, b)
    if random_key(node) is None:
        return Bad("two random values (or one read at two places) meet in one element")
    return node


def walk_nodes(expr: Expr) -> list[Expr]:
    """Every distinct node, children before parents."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.children()))
    return order


def structure(expr: Expr, most: int | None = None) -> tuple[object, ...] | None:
    """A key equal for two expressions exactly when they are the same computation, with
    the same sharing: each node's class and fields, children by their place in
    :func:`walk_nodes`' order, a float by its bits (``-0.0`` is not ``0.0``, a NaN is
    itself); None when a table lies under it (its values are no field) or it has more
    than ``most`` nodes."""
    places: dict[int, int] = {}
    nodes: list[object] = []
    for node in walk_nodes(expr):
        if isinstance(node, Table) or (most is not None and len(nodes) >= most):
            return None
        kind = type(node)
        values = [getattr(node, name) for name in _plain_fields(cast(type, kind))]
        fields = tuple([v.hex() if isinstance(v, float) else v for v in values])
        children = tuple([places[id(child)] for child in node.children()])
        places[id(node)] = len(nodes)
        nodes.append((kind, fields, children))
    return tuple(nodes)


@cached  # dataclasses.fields filters the class's attributes at every call
def _plain_fields(cls: type) -> tuple[str, ...]:
    """The names of a node class's fields that hold no children (an ``Expr``, or a
    tuple of them: :meth:`Expr.children`). Every node class is a dataclass."""
    return tuple(field.name for field in dataclasses.fields(cls) if "Expr" not in str(field.type))


def contains(expr: Expr, kind: type[Expr] | tuple[type[Expr], ...]) -> bool:
    """Whether ``expr`` or a node under it is a ``kind`` (:class:`Source`, :class:`Bad`).

    Asked of the classes under each node, kept on it, as :func:`random_key` is: capture
    asks it of every value it folds, each built from values it asked before, so each
    node is visited once, whatever kinds are asked."""
    return any(issubclass(found, kind) for found in _classes(expr))


def _classes(expr: Expr) -> frozenset[type[Expr]]:
    """The classes of ``expr`` and of every node under it (kept on each node: not a
    field, eq and hash ignore it). Children before parents, iteratively (a chain of
    steps may be deep); a node already known is not entered."""
    known: frozenset[type[Expr]] | None = expr.__dict__.get("_classes")
    if known is not None:
        return known
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if "_classes" in node.__dict__:
            continue
        if ready:
            found = {type(node)}
            for child in node.children():
                found |= child.__dict__["_classes"]
            object.__setattr__(node, "_classes", frozenset(found))
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in node.children() if "_classes" not in c.__dict__)
    return cast("frozenset[type[Expr]]", expr.__dict__["_classes"])


def bad_reasons(expr: Expr) -> list[str]:
    if not contains(expr, Bad):
        return []
    return [node.why for node in walk_nodes(expr) if isinstance(node, Bad)]


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


_ROUNDED = (torch.float32, torch.float16, torch.bfloat16)
#: Integer dtypes a program stores in: ``Round(x, dtype)`` of them wraps ``x`` (an exact
#: integer) into the dtype's range as torch's two's-complement arithmetic does.
INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
#: Integers beyond this are not all exact in binary64, the core's registers.
EXACT_INTEGERS = float(2**53)


def stored(expr: Expr, dtype: torch.dtype) -> Expr:
    """``expr`` as a tensor of ``dtype`` holds it (integers: wrapped, see
    :func:`exact_integers` for when that is exact)."""
    if (dtype in _ROUNDED or dtype in INTEGER_DTYPES) and not isinstance(expr, Source):
        if isinstance(expr, Round) and expr.dtype == dtype:
            return expr
        if isinstance(expr, Const) and dtype in INTEGER_DTYPES:
            return Const(float(_wrapped(int(expr.value), dtype)))
        return Round(expr, dtype)
    return expr


def _wrapped(value: int, dtype: torch.dtype) -> int:
    info = torch.iinfo(dtype)
    return (value - info.min) % (1 << info.bits) + info.min


def exact_integers(expr: Expr, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]) -> Expr:
    """``expr``, the value of a step whose result is of integer ``dtype``, as stored in it;
    :class:`Bad` when some value over ``ranges`` may lie beyond 2**53 (binary64 registers
    would round it, where torch's int64 is exact or wraps), or is not known to be bounded.
    Every integer temporary was checked so when made, so its operands are exact."""
    if dtype not in INTEGER_DTYPES or isinstance(expr, Bad):
        return expr
    try:
        _check_exact(expr, dtype, ranges)
    except Cannot as cannot:  # an expression: refused only where it reaches a tensor
        return Bad(str(cannot))
    return stored(expr, dtype)


def check_exact_integers(expr: Expr, ranges: Sequence[tuple[int, int]]) -> None:
    """Checks that no integer step of ``expr`` (a ``Round`` to an integer dtype, over
    ``ranges``) may pass 2**53 before its wrap (see :func:`exact_integers`).

    Raises:
        Cannot: why one may.
    """
    key = _ranges_key(ranges)
    if _kept_over(expr, "_exact", key, lambda node: _exact_step(node, key, ranges)):
        return  # every step exact (kept per node: a fold is checked after each write)
    for node in walk_nodes(expr):
        if isinstance(node, Round) and node.dtype in INTEGER_DTYPES:
            _check_exact(node.x, node.dtype, ranges)


def _exact_step(node: Expr, key: object, ranges: Sequence[tuple[int, int]]) -> bool:
    """Whether no integer step of ``node`` may pass 2**53, its children's answers kept."""
    if not all(child.__dict__["_exact"][key] for child in node.children()):
        return False
    if isinstance(node, Round) and node.dtype in INTEGER_DTYPES:
        low, high = integer_span(node.x, ranges)
        return low >= -EXACT_INTEGERS and high <= EXACT_INTEGERS
    return True


def _ranges_key(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(start), int(stop)) for start, stop in ranges)


def _kept_over(expr: Expr, attr: str, key: object, compute: Callable[[Expr], object]) -> Any:
    """``compute(node)`` of ``expr``, kept on each node per ``key`` (in a dict held as
    ``attr``, not a field: eq, hash and repr ignore it), computed children first for
    the nodes not known yet. ``compute`` reads its children's answers from ``attr``."""
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        kept = node.__dict__.get(attr)
        if kept is not None and key in kept:
            continue
        if ready:
            if kept is None:
                kept = {}
                object.__setattr__(node, attr, kept)
            kept[key] = compute(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.children()))
    return expr.__dict__[attr][key]


def _check_exact(expr: Expr, dtype: torch.dtype, ranges: Sequence[tuple[int, int]]) -> None:
    low, high = integer_span(expr, ranges)
    if not (low >= -EXACT_INTEGERS and high <= EXACT_INTEGERS):
        reach = (
            "unbounded" if math.isinf(low) or math.isinf(high) else f"in [{low:.0f}, {high:.0f}]"
        )
        raise Cannot(
            f"{str(dtype).removeprefix('torch.')} values {reach}: integer arithmetic beyond "
            "2**53 is not exact in the program engine's binary64 (compute them on the CPU "
            "and copy the tensor, or keep them within 2**53)"
        )


def in_dtype(expr: Expr, dtype: torch.dtype) -> Expr:
    """``expr``, a step whose result is of float ``dtype``, as torch's kernel computes it
    where binary64 would differ by more than the last bits: ``%`` (``remainder``) takes a
    Python number operand rounded to ``dtype``, as torch's kernel does (then the exact
    ``fmod`` of two ``dtype`` values and one rounded addition: binary64 then ``dtype`` is
    torch's value bit for bit). ``//`` (``floor_divide``) in float32, float16 or bfloat16
    is :class:`Bad`: torch rounds ``(a - fmod(a, b)) / b`` in ``dtype`` at each step, and a
    quotient past ``dtype``'s precision then floors to another integer than binary64's."""
    if dtype not in _ROUNDED or not isinstance(expr, Binary) or expr.op not in ("mod", "floordiv"):
        return expr
    if expr.op == "floordiv":
        name = str(dtype).removeprefix("torch.")
        return Bad(
            f"floor_divide (//) of {name} values: torch rounds its steps in {name}, which "
            "the program engine's binary64 does not reproduce exactly (divide in float64, "
            "or with values known at capture)"
        )
    a, b = (
        Const(float(torch.tensor(x.value, dtype=dtype, device="cpu")))
        if isinstance(x, Const)
        else x
        for x in (expr.a, expr.b)
    )
    return Binary("mod", a, b)


def integer_span(expr: Expr, ranges: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """Bounds ``(low, high)`` of ``expr``'s values over the half-open coordinate
    ``ranges`` (interval arithmetic; ``(-inf, inf)`` where not known). Kept on each node
    per ``ranges``: a temporary's fold is checked after each write, mostly of the
    nodes checked before."""
    key = _ranges_key(ranges)

    def span(node: Expr) -> tuple[float, float]:
        spans = {id(child): child.__dict__["_spans"][key] for child in node.children()}
        return _span(node, spans, ranges)

    return cast("tuple[float, float]", _kept_over(expr, "_spans", key, span))


_UNKNOWN = (-math.inf, math.inf)


def _span(
    node: Expr, spans: dict[int, tuple[float, float]], ranges: Sequence[tuple[int, int]]
) -> tuple[float, float]:
    if isinstance(node, Const):
        return (node.value, node.value) if not math.isnan(node.value) else _UNKNOWN
    if isinstance(node, Coord):
        start, stop = ranges[node.dim]
        return (float(start), float(max(stop - 1, start)))
    if isinstance(node, Source):
        a, b = getattr(node.init, "a", None), getattr(node.init, "b", None)
        bounded = type(node.init).__name__ == "Uniform" and a is not None and b is not None
        return (float(a), float(b)) if bounded else _UNKNOWN  # type: ignore[arg-type]
    if isinstance(node, Table):
        values = node.data.values
        if values.numel() == 0 or bool(values.isnan().any()):
            return _UNKNOWN
        return (float(values.min()), float(values.max()))
    if isinstance(node, Round):
        low, high = spans[id(node.x)]
        if node.dtype in INTEGER_DTYPES:  # within the range: kept; else wrapped anywhere in it
            info = torch.iinfo(node.dtype)
            if not (info.min <= low and high <= info.max):
                return (float(info.min), float(info.max))
        return (low, high)
    if isinstance(node, Where):
        (a0, a1), (b0, b1) = spans[id(node.a)], spans[id(node.b)]
        return (min(a0, b0), max(a1, b1))
    if isinstance(node, Unary):
        return _unary_span(node.op, spans[id(node.x)])
    if isinstance(node, Binary):
        return _binary_span(node.op, spans[id(node.a)], spans[id(node.b)])
    return _UNKNOWN


def _unary_span(op: str, x: tuple[float, float]) -> tuple[float, float]:
    low, high = x
    if op == "neg":
        return (-high, -low)
    if op == "abs":
        return (0.0 if low <= 0 <= high else min(abs(low), abs(high)), max(abs(low), abs(high)))
    if op in ("floor", "round_half_even"):
        return (
            math.floor(low) if math.isfinite(low) else low,
            math.ceil(high) if math.isfinite(high) else high,
        )
    return _UNKNOWN


def _binary_span(op: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if op in _COMPARE:
        return (0.0, 1.0)
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op in ("min", "max"):
        pick = min if op == "min" else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    if any(math.isinf(v) for v in (*a, *b)):
        return _UNKNOWN
    if op == "mul":
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if op == "mod":
        reach = max(abs(b[0]), abs(b[1]))
        return (-reach, reach)
    if op == "floordiv" and (b[0] >= 1 or b[1] <= -1):
        reach = max(abs(a[0]), abs(a[1])) + 1
        return (-reach, reach)
    return _UNKNOWN


def bare_source(expr: Expr) -> BaseInit | None:
    """The initializer when ``expr`` is nothing but a random source or a constant (then
    the op is a plain fill: stream v1 values, whatever dtype the temporary had)."""
    while isinstance(expr, Round) and isinstance(expr.x, Source | Const):
        if isinstance(expr.x, Const) and not holds_exactly(expr.x.value, expr.dtype):
            return None
        expr = expr.x
    if isinstance(expr, Source):
        return expr.init
    if isinstance(expr, Const):
        return Constant(float(expr.value))
    return None


@cached
def holds_exactly(value: float, dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` holds ``value`` exactly (then a fill by it is the
    stream-v1 constant fill). Cached: the writer asks at every constant fill it writes,
    mostly of the same few."""
    return float(torch.tensor(value, dtype=torch.float64, device="cpu").to(dtype)) == value


def contiguous_index(shape: Sequence[int]) -> Expr:
    """The row-major flat index of an element of a tensor of ``shape``."""
    stride, terms = 1, {}
    for dim in range(len(shape) - 1, -1, -1):
        terms[dim] = stride
        stride *= max(int(shape[dim]), 1)
    return lin_expr(_lin(0, {d: c for d, c in terms.items() if shape[d] != 1}))


def unravel(
    flat: Expr, shape: Sequence[int], ranges: Sequence[tuple[int, int]]
) -> tuple[Expr, ...]:
    """The coordinates in a row-major tensor of ``shape`` of flat index ``flat``."""
    coords: list[Expr] = []
    stride = 1
    strides = []
    for size in reversed(shape):
        strides.append(stride)
        stride *= max(int(size), 1)
    for size, step in zip(shape, reversed(strides), strict=True):
        if size == 1:
            coords.append(Const(0.0))
            continue
        quotient = index_op("floordiv", flat, Const(float(step)), ranges)
        coords.append(index_op("mod", quotient, Const(float(size)), ranges))
    return tuple(coords)


@cached  # every read of a followed tensor asks it, of a model's few layouts
def strided_coords(
    shape: Sequence[int], stride: Sequence[int], offset: int, base_shape: Sequence[int]
) -> tuple[tuple[Expr, ...], str | None]:
    """The coordinates in a contiguous ``base_shape`` tensor of the element of a view
    (``shape``, ``stride``, ``offset`` in elements) at ``Coord(0..)``; and, when the view
    may read some base element more than once (``expand``, ``unfold``), a reason.
    Cached: the answer is immutable expressions of its hashable arguments."""
    ranges = [(0, int(size)) for size in shape]
    flat: Expr = Const(float(offset))
    for dim, (size, step) in enumerate(zip(shape, stride, strict=True)):
        if size == 1:
            continue
        flat = index_op("add", flat, index_op("mul", Coord(dim), Const(float(step)), None), None)
    return unravel(flat, base_shape, ranges), None if _injective(shape, stride) else "repeats"


def _injective(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether a view never reads one element twice (sufficient: each dim's stride,
    smallest first, steps over everything the smaller ones span; no zero strides)."""
    span = 0
    dims = [(abs(int(t)), int(s)) for s, t in zip(shape, stride, strict=True) if s > 1]
    for step, size in sorted(dims):
        if step <= span:
            return False
        span += step * (size - 1)
    return True


def flat_of_box(shape: Sequence[int], delta: int) -> Expr:
    """``delta`` plus the row-major flat index of a tensor of ``shape`` at ``Coord(0..)``."""
    return index_op("add", contiguous_index(shape), Const(float(delta)), None)


def broadcast_coords(shape: Sequence[int], result: Sequence[int]) -> tuple[tuple[Expr, ...], bool]:
    """Coordinates of an operand of ``shape`` broadcast to ``result`` (right-aligned);
    and whether it is stretched (read more than once)."""
    lead = len(result) - len(shape)
    coords: list[Expr] = []
    stretched = False
    for dim, size in enumerate(shape):
        if size == 1:
            coords.append(Const(0.0))
            stretched = stretched or result[lead + dim] > 1
        else:
            coords.append(Coord(lead + dim))
    stretched = stretched or any(result[d] > 1 for d in range(lead))
    return tuple(coords), stretched
