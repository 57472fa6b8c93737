"""The values a parameter held before ``init_fn``, where ``init_fn`` has not written it
yet: what ``materialize`` puts in front of a record that does not cover the parameter
(its rule's, constructor's or torch.nn default's fill). eager torch's in-place steps on
the default (``w.data.clamp_(-0.1, 0.1)``, ``w.add_(t)``, ``p.data = p.float() * 2``)
read those values; capture folds them as :class:`Before`, and a write back into the
parameter turns each into :class:`~shardinit._program.nodes.Prior` (the element's own
value before the operation), so the record is a program of that fill, replayed
shard-locally as :class:`~shardinit._program.actions.Scale` already was.

A :class:`Before` is a :class:`~shardinit._program.nodes.Source` to everything that
follows random values: the default is, in general, a random fill drawn at each element's
own index, so it may not meet another random value in one element, be repeated by a
broadcast, nor land at another position of the parameter than its own (a write of it
elsewhere is refused: :func:`resolve_before`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...._program.actions import Opaque
from ...._program.cannot import Cannot
from ...._program.index import as_lin
from ...._program.nodes import Coord, Expr, Prior, Source, contains, walk_nodes
from ...._program.regions import Box, intersect
from ....init import Constant
from .store import RecordStore
from .tracks import Track

__all__ = ["Before", "before", "on_before", "resolve_before"]

#: Never evaluated: a :class:`Before` is resolved to ``Prior`` before it is recorded.
_NEVER_DRAWN = Constant(0.0)


@dataclass(frozen=True)
class Before(Source):
    """The parameter's value before ``init_fn`` at coordinates ``at`` (of the parameter)."""

    def with_children(self, children: Sequence[Expr]) -> Expr:
        return Before(self.init, self.dtype, self.origin, tuple(children))


def before(track_id: int, dtype: torch.dtype, ndim: int) -> Before:
    """Every element's own value before ``init_fn``, over the parameter's coordinates."""
    return Before(_NEVER_DRAWN, dtype, track_id, tuple(Coord(d) for d in range(ndim)))


def resolve_before(expr: Expr, box: Sequence[tuple[int, int]]) -> Expr:
    """``expr``, written on ``box`` of the parameter (over the parameter's coordinates),
    with each :class:`Before` read at the element's own position made ``Prior``.

    Raises:
        Cannot: a :class:`Before` read at another position (``p[:3].copy_(p[3:6] * 2)``
            where ``init_fn`` did not write ``p[3:6]``).
    """
    if not contains(expr, Before):
        return expr
    nodes = walk_nodes(expr)
    made: dict[int, Expr] = {}
    for node in nodes:  # children before parents
        if isinstance(node, Before):
            if not all(_own(at, d, box) for d, at in enumerate(node.at)):
                raise Cannot(
                    "it moves values that init_fn did not set (the parameter's values "
                    "before init_fn: its rule's, constructor's or torch.nn default's, "
                    "drawn at each element's own index) to other positions"
                )
            made[id(node)] = Prior()
        elif node.children():
            children = [made.get(id(child), child) for child in node.children()]
            changed = any(c is not o for c, o in zip(children, node.children(), strict=True))
            made[id(node)] = node.with_children(children) if changed else node
    return made.get(id(expr), expr)


def _own(at: Expr, dim: int, box: Sequence[tuple[int, int]]) -> bool:
    """Whether the coordinate ``at`` is the element's own along ``dim`` everywhere on
    ``box`` (an affine form equal to ``Coord(dim)`` there)."""
    lin = as_lin(at)
    if lin is None:
        return False
    offset, terms = lin.offset, dict(lin.coefs)
    terms[dim] = terms.get(dim, 0) - 1
    for d, coef in list(terms.items()):
        start, stop = box[d]
        if stop - start == 1:  # one position along d: the coordinate is its start there
            offset += coef * start
            terms[d] = 0
    return offset == 0 and not any(terms.values())


def on_before(
    store: RecordStore, track: Track, part: Box, step: Expr, value: Expr, op: str
) -> tuple[Expr, Expr]:
    """``value`` (``step`` with the values before it, on ``part`` of the parameter
    ``track``) where it reads values ``init_fn`` did not set: made a program of
    ``Prior``, with what to record. ``Prior`` is the value before this operation when
    ``materialize`` replays it, so it is the value before ``init_fn`` only where no
    earlier step of ``init_fn`` (``mul_``, a masked fill) covers the part; there the
    step itself is recorded, on its own ``Prior``.

    Raises:
        UnsupportedInitOpError: values before ``init_fn`` moved to other positions, or
            read past an earlier step by another operand than the step's own.
    """
    try:
        resolved = resolve_before(value, part)
    except Cannot as cannot:
        raise store.fail(track, op, cannot.reason) from None
    if resolved is value:  # it reads no value before init_fn: no earlier step matters
        return resolved, resolved
    if not track.stepped(part):  # no earlier step on it (asked of the kept union: a
        return resolved, resolved  # step per row asks no walk of the rows before it)
    nodes = walk_nodes(step)
    if any(isinstance(n, Prior) for n in nodes) and not any(isinstance(n, Before) for n in nodes):
        return resolved, step
    earlier = [
        recorded
        for recorded in track.ops
        if not isinstance(recorded.action, Opaque)
        and recorded.action.reads_prior
        and intersect(recorded.region, part) is not None
    ]
    why = (
        "it reads values init_fn did not set through another operand than the in-place "
        f"step's own, after an earlier step on them ({earlier[-1].op} at "
        f"{earlier[-1].where}); set the parameter before stepping it"
    )
    raise store.fail(track, op, why)
