"""Init programs: the elementwise computation init code performs for one element, as an
expression over the element's coordinates (docs/stream-format.md, "Init programs"); the
nodes of the expression IR and the walks every other module of the floor builds on.

An expression describes the values of one tensor (a temporary, or a box of a parameter)
as a function of its own coordinates ``Coord(d)``. Its leaves are constants,
coordinates, random sources (the value of an initializer at the DESTINATION parameter's
own global index: layout-independent by construction), tables of values known at capture
(CPU tensors init code computed) and ``Prior`` (the element's value before an in-place
operation). Views, broadcasts and copies move an expression from one tensor's
coordinates to another's (:func:`.rewrite.reindex`); index arithmetic that stays affine
(:mod:`.index`) is simplified so tables stay tables (:mod:`.tables`) and ``where`` of
coordinate conditions folds away. Random keys and structure keys (:mod:`.keys`) say when
two random values would meet and when two expressions are one computation; integer
steps are checked exact (:mod:`.exact`).

Nothing here computes a float: values are computed only by the core's deterministic
binary64 evaluator (the core's registers), when written. Only exact integer index arithmetic
is folded here.

What a node's value needs (its classes, random key, affine form, spans) is kept on the
node itself (:func:`kept`, :func:`kept_per_key`): an attribute that is no field, so eq,
hash and repr ignore it, computed from the children's answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from .. import _core
from ..init import BaseInit

__all__ = [
    "BINARY",
    "COMPARE",
    "UNARY",
    "Bad",
    "Binary",
    "Const",
    "Coord",
    "Expr",
    "Prior",
    "RandomKey",
    "Round",
    "Source",
    "Table",
    "TableData",
    "Unary",
    "Where",
    "bad_reasons",
    "contains",
    "kept",
    "kept_per_key",
    "random_key",
    "walk_nodes",
]

#: Unary operations of the core's evaluator (their one home is the core: ``UnaryOp``).
UNARY = frozenset(_core.UNARY_OPS)
#: Binary operations of the core's evaluator (comparisons give 1.0 or 0.0).
BINARY = frozenset(_core.BINARY_OPS)
COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


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

    def __post_init__(self) -> None:
        """Keeps on the node what every node is asked (:func:`contains`,
        :func:`random_key`), computed once, at construction, from its children's (kept
        at theirs): no answer ever walks the nodes under it. Not fields (eq, hash and
        repr ignore them), written past the frozen ``__setattr__``, as dataclasses'
        own ``__init__`` writes its fields."""
        kept = self.__dict__
        children = self.children()
        count = len(children)  # (spelled per count: a list built per node costs more)
        key: tuple[object, ...]
        if count == 2:  # (a Binary: most nodes)
            key = (type(self), children[0].__dict__["_classes"], children[1].__dict__["_classes"])
        elif count == 1:
            key = (type(self), children[0].__dict__["_classes"])
        elif count == 0:
            key = (type(self),)
        else:
            key = (type(self), *[child.__dict__["_classes"] for child in children])
        classes = _CLASS_SETS.get(key)
        if classes is None:
            classes = _class_set(key)
        kept["_classes"] = classes
        # No source under it (most nodes): no random value, so none meets another.
        sourced = _SOURCED.get(classes)
        if sourced is None:  # (a subclass counts: capture's Before is a Source)
            sourced = _SOURCED[classes] = any(issubclass(kind, Source) for kind in classes)
        kept["_random_key"] = _random_key_of(self, children) if sourced else _NO_SOURCE


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


def walk_nodes(expr: Expr, enter: Callable[[Expr], bool] | None = None) -> list[Expr]:
    """Every distinct node, children before parents; with ``enter``, only the nodes it
    lets in (the walk does not go under a node it refuses)."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    push, pop = stack.append, stack.pop  # (asked of every program written: no lookups)
    while stack:
        node, ready = pop()
        if ready:
            order.append(node)
            continue
        key = id(node)
        if key in seen or (enter is not None and not enter(node)):
            continue
        seen.add(key)
        push((node, True))
        for child in reversed(node.children()):
            if id(child) not in seen:  # (a shared child walked already: not pushed)
                push((child, False))
    return order


def contains(expr: Expr, kind: type[Expr] | tuple[type[Expr], ...]) -> bool:
    """Whether ``expr`` or a node under it is a ``kind`` (:class:`Source`, :class:`Bad`):
    asked of the classes under the node, kept on it at construction."""
    classes: frozenset[type[Expr]] = expr.__dict__["_classes"]
    key = (classes, kind)
    found = _CONTAINS.get(key)
    if found is None:  # (few class sets, few kinds asked: a dict lookup after the first)
        found = _CONTAINS[key] = any(issubclass(held, kind) for held in classes)
    return found


#: :func:`contains`' answers by class set (one object per set: :data:`_CLASS_SETS`) and
#: the kind asked: asked of most nodes capture builds, several kinds each.
_CONTAINS: dict[tuple[frozenset[type[Expr]], object], bool] = {}


#: The classes under a node by its class and its children's class sets (few distinct
#: ones; one object per set, and frozensets cache their hash: a lookup is a few pointer
#: compares).
_CLASS_SETS: dict[tuple[object, ...], frozenset[type[Expr]]] = {}


#: Whether a class set (of :data:`_CLASS_SETS`) holds :class:`Source` or a subclass.
_SOURCED: dict[frozenset[type[Expr]], bool] = {}


def _class_set(key: tuple[object, ...]) -> frozenset[type[Expr]]:
    """The classes of a node of class ``key[0]`` whose children have the class sets
    ``key[1:]``, kept in :data:`_CLASS_SETS` (one object per set)."""
    kind = cast("type[Expr]", key[0])
    found = frozenset({kind}).union(*cast("tuple[frozenset[type[Expr]], ...]", key[1:]))
    found = _CLASS_SETS.setdefault((found,), found)
    _CLASS_SETS[key] = found
    return found


#: A random key: the ``(origin, at)`` of each random source, as alternatives.
RandomKey = frozenset[tuple[int, tuple[Expr, ...]]]
#: The random key of a node under which no random source lies (most nodes).
_NO_SOURCE: RandomKey = frozenset()


def random_key(expr: Expr) -> RandomKey | None:
    """The random sources an element's value may depend on, as alternatives (the
    branches of a ``where``); None when two of them would meet in one element.

    Kept on the node at construction, from its children's (:meth:`Expr.__post_init__`):
    capture asks it of each node it builds, and an expression is a DAG whose shared
    parts (a coordinate table's) a walk of its tree would visit many times."""
    key: RandomKey | None = expr.__dict__["_random_key"]
    return key


def _random_key_of(node: Expr, children: tuple[Expr, ...]) -> RandomKey | None:
    """:func:`random_key` of ``node``, from its ``children``'s."""
    if isinstance(node, Source):
        return frozenset({(node.origin, node.at)})
    keys: list[RandomKey | None] = []
    sourced = False
    for child in children:  # (loops, not generators: asked of each node built)
        key = child.__dict__["_random_key"]
        keys.append(key)
        sourced = sourced or key is not _NO_SOURCE
    if not sourced:
        return _NO_SOURCE  # (no source under it: most nodes, decided at once)
    if isinstance(node, Where):
        cond, a, b = keys
        if cond is None or a is None or b is None:
            return None
        if cond:
            # A random condition (``where(x < 0, 0, x)``: relu, clamp by a number) meets
            # either branch: both must read that one value, or none.
            if len(cond) > 1 or (a and a != cond) or (b and b != cond):
                return None
            return cond
        return frozenset().union(*(p for p in (a, b) if p))
    found: RandomKey = _NO_SOURCE
    for key in keys:
        if key is None:
            return None
        if key and found and (key != found or len(key) > 1):
            return None
        found = found or key
    return found


def bad_reasons(expr: Expr) -> list[str]:
    if not contains(expr, Bad):
        return []
    return [node.why for node in walk_nodes(expr) if isinstance(node, Bad)]


#: Nothing kept on the node yet (None is an answer).
_NOT_KEPT = object()


def kept(expr: Expr, attr: str, compute: Callable[[Expr], object]) -> object:
    """``compute(expr)``, kept on the node as ``attr``: the answer is a function of the
    immutable node alone, and the attribute is not a field (eq, hash, repr ignore it)."""
    known = expr.__dict__.get(attr, _NOT_KEPT)
    if known is _NOT_KEPT:
        known = compute(expr)
        object.__setattr__(expr, attr, known)
    return known


def kept_per_key(expr: Expr, attr: str, key: object, compute: Callable[[Expr], object]) -> Any:
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
