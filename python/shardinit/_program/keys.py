"""Keys of an expression: its random key (which random sources an element's value may
depend on, and whether two would meet in one element) and its structure key (equal for
two expressions exactly when they are the same computation, with the same sharing)."""

from __future__ import annotations

import dataclasses
from typing import cast

from .._caches import cached
from .nodes import Expr, Source, Table, Where, kept, walk_nodes

__all__ = ["RandomKey", "random_key", "structure"]

#: A random key: the ``(origin, at)`` of each random source, as alternatives.
RandomKey = frozenset[tuple[int, tuple[Expr, ...]]]


def random_key(expr: Expr) -> RandomKey | None:
    """The random sources an element's value may depend on, as alternatives (the
    branches of a ``where``); None when two of them would meet in one element.

    Kept on the node (a function of the immutable node alone): capture asks it of each
    node it builds, whose children it asked before, and an expression is a DAG whose
    shared parts (a coordinate table's) a walk of its tree would visit many times."""
    return cast("RandomKey | None", kept(expr, "_random_key", _random_key))


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
