"""The structure key of an expression: equal for two expressions exactly when they are
the same computation, with the same sharing (the key under which a rewrite is kept);
and its tree key, equal exactly when they are the same computation written out as a
tree (the key under which an eager evaluation is kept), kept on each node once asked.
Its random key is kept on each node at construction (:func:`.nodes.random_key`)."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import cast

from .._caches import cached
from .nodes import Expr, Table, walk_nodes

__all__ = ["structure", "tree_key"]


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


def tree_key(expr: Expr) -> TreeKey | None:
    """A key equal for two expressions exactly when they compute the same values by the
    same steps: each node's class and fields (a float by its bits), its children by
    their own tree keys; None when a table lies under it (its values are no field).
    Unlike :func:`structure` it does not tell a shared child from two equal ones, which
    compute the same values (every node is a function of its fields and children).

    Kept on each node once asked, so a model's every layer computing the same table (a
    new expression of the same nodes each time) costs one dictionary look-up per new
    node, and an expression built on asked ones only its new nodes."""
    if "_tree_key" not in expr.__dict__:
        for node in _unkeyed(expr):
            node.__dict__["_tree_key"] = _tree_key_of(node)
    return cast("TreeKey | None", expr.__dict__["_tree_key"])


def _unkeyed(expr: Expr) -> list[Expr]:
    """The nodes under ``expr`` (itself included) with no tree key yet, children before
    parents, each once; the walk stops at keyed nodes."""
    return walk_nodes(expr, lambda node: "_tree_key" not in node.__dict__)


def _tree_key_of(node: Expr) -> TreeKey | None:
    """A node's tree key, from its children's (keyed already)."""
    children = tuple([child.__dict__["_tree_key"] for child in node.children()])
    if isinstance(node, Table) or None in children:
        return None
    kind = type(node)
    values = [getattr(node, name) for name in _plain_fields(cast(type, kind))]
    shape = (kind, tuple([v.hex() if isinstance(v, float) else v for v in values]), children)
    key = _TREE_KEYS.get(shape)
    if key is None:
        if len(_TREE_KEYS) >= _TREE_KEYS_MAX:  # new keys from then on: never a reused one
            _TREE_KEYS.clear()
        key = _TREE_KEYS[shape] = (_PROCESS, next(_NEXT_TREE_KEY))
    return key


#: A tree key: this process's token and a number of its counter, which never repeats one,
#: so clearing the table (past its size) only makes later equal trees miss, and a node
#: pickled in from another process (its key kept on it) meets none of this one's.
TreeKey = tuple[bytes, int]
_PROCESS = os.urandom(8)
#: Tree keys by a node's class, fields and children's keys.
_TREE_KEYS: dict[tuple[object, ...], TreeKey] = {}
_TREE_KEYS_MAX = 1 << 16
_NEXT_TREE_KEY = itertools.count()
