"""The structure key of an expression: equal for two expressions exactly when they are
the same computation, with the same sharing (the key under which a rewrite or an eager
evaluation is kept). Its random key is kept on each node at construction
(:func:`.nodes.random_key`)."""

from __future__ import annotations

import dataclasses
from typing import cast

from .._caches import cached
from .nodes import Expr, Table, walk_nodes

__all__ = ["structure"]


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
