"""Where a view of a parameter that is no box lies, as a condition of the parameter's
GLOBAL coordinates over a box around it: a write through such a view (``w[::2] = 0``,
``w[:, 1::3].normal_()``, ``w.diagonal().mul_(2)``) is its action where the condition
holds and the value before elsewhere (:class:`.actions.Selected`), one operation on that
box, whatever the write is (the capture's one rule for it, :mod:`..._integration.capture.
trace.store`).

Two kinds of views hold elements that such a condition names exactly, each element once:

* a 1-D view of flat step ``k`` (a diagonal, ``w.view(-1)[::k]``): flat indices
  ``offset + i * k``;
* a strided slice, each view dim of size above 1 stepping along its own base dim
  (``w[::2]``, ``w[1:, ::3]``, and transposed, ``w.t()[::2]``): a grid of each dim's step.

Any other (an expanded view, overlapping windows, a dim that steps across rows) raises
:class:`.cannot.Cannot`: a write there is refused, never approximated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .._caches import BoundedMap
from .._torch_compat import stored_contiguous, stored_strides
from .cannot import Cannot
from .index import contiguous_index
from .nodes import Const, Coord, Expr
from .regions import (
    Box,
    contiguous_strides,
    flat_range_boxes,
    intersect,
    moved_rows,
    row_shift,
    view_span,
    whole,
)
from .rewrite import combine
from .tables import index_values

__all__ = ["first_unwritten", "grid_coords", "positions"]


def positions(view: torch.Tensor, base: torch.Tensor) -> tuple[Box, Expr]:
    """The box of ``base`` (contiguous) around the elements of ``view`` (a non-empty
    view that is no box of it) and the condition (nonzero: one of them) over the base's
    global coordinates, which runs over that box.

    Raises:
        Cannot: ``view``'s elements are none of the two kinds above.
    """
    if not stored_contiguous(base) or any(s <= 0 for s in stored_strides(view)):
        raise Cannot("the view holds some element more than once (an expanded view)")
    shape = tuple(int(n) for n in base.shape)
    rel = int(view.storage_offset() - base.storage_offset())
    dims = [(int(n), int(s)) for n, s in zip(view.shape, stored_strides(view), strict=True)]
    dims = [(n, s) for n, s in dims if n != 1]
    # A strided slice some rows further is the same one moved along dim 0 (a row loop
    # through ``w[i, ::2]``): its box moves, and its condition, of the other dims, stays.
    span = view_span(tuple(view.shape), stored_strides(view))
    rows, rest = row_shift(shape, tuple(contiguous_strides(shape)), rel, span)
    key = (shape, tuple(dims), rest)
    kept = _POSITIONS.get(key)
    if kept is not None:
        return moved_rows(kept[0], rows), kept[1]
    stepped = _steps(shape, rel, dims)
    if stepped is not None:
        box, cond = _grid_positions(shape, rel, stepped)
        if stepped[0][0] == 1:  # no condition of dim 0: the same a row further
            _POSITIONS.put(key, (moved_rows(box, -rows), cond))
        return box, cond
    if len(dims) == 1:
        return _flat_positions(shape, rel, *dims[0])
    raise Cannot(
        "its elements are no box and no strided slice of the tensor (a view dim "
        "steps across rows, or two view dims step along one dim)"
    )


#: :func:`positions` of strided slices that step along no dim 0, by the base's shape,
#: the view's dims and where it starts in its row (:func:`~.regions.row_shift`).
_POSITIONS: BoundedMap[tuple[object, ...], tuple[Box, Expr]] = BoundedMap()


def _starts(shape: tuple[int, ...], rel: int) -> list[int]:
    """The coordinates of flat element ``rel`` of a row-major tensor of ``shape``."""
    return [rel // c % max(n, 1) for c, n in zip(contiguous_strides(shape), shape, strict=True)]


def _steps(
    shape: tuple[int, ...], rel: int, dims: list[tuple[int, int]]
) -> dict[int, tuple[int, int]] | None:
    """Per base dim, the (step, count) of a strided slice at flat offset ``rel`` whose
    view dims are ``dims`` ((size, stride), sizes above 1); None when some view dim
    steps along no base dim of its own within it."""
    along = _dims_along(shape, rel, dims)
    return None if along is None else _steps_of(shape, along)


def _steps_of(
    shape: tuple[int, ...], along: list[tuple[int, int, int]]
) -> dict[int, tuple[int, int]]:
    steps = {dim: (step, size) for dim, step, size in along}
    return {d: steps.get(d, (1, 1)) for d in range(len(shape))}


def _dims_along(
    shape: tuple[int, ...], rel: int, dims: list[tuple[int, int]]
) -> list[tuple[int, int, int]] | None:
    """For each of ``dims`` (a view's (size, stride), in its order), the base dim it
    steps along, its step there and its size; None as :func:`_steps`."""
    cstride = contiguous_strides(shape)
    start = _starts(shape, rel)
    found: list[tuple[int, int, int]] = []
    for size, stride in dims:
        along = [
            d for d in range(len(shape))
            if cstride[d] <= stride < cstride[d] * shape[d] and stride % cstride[d] == 0
        ]  # fmt: skip
        if not along or any(along[0] == dim for dim, _, _ in found):
            return None
        dim = along[0]
        step = stride // cstride[dim]
        if start[dim] + step * (size - 1) >= shape[dim]:
            return None  # runs past its dim into the next: no grid of this dim
        found.append((dim, step, size))
    return found


def grid_coords(
    view: torch.Tensor, base: torch.Tensor
) -> tuple[Box, Expr, tuple[Expr, ...]] | None:
    """For a strided slice ``view`` of the contiguous ``base`` (``t[:, ::2]``, ``t[1::3]``):
    the box around its elements, the condition over the base's coordinates that names
    them (:func:`positions`), and each view coordinate as an expression of the base's
    (``(c - start) // step``, exact where the condition holds, and inside the view's
    range all over the box). None for any other view (the caller writes it by runs).
    A value written through the view is then one write on one box, not one write per
    element (the sinusoidal table's ``pe[:, 0::2] = sin(...)``)."""
    if not stored_contiguous(base) or any(s <= 0 for s in stored_strides(view)):
        return None
    shape = tuple(int(n) for n in base.shape)
    rel = int(view.storage_offset() - base.storage_offset())
    sized = [(int(n), int(s)) for n, s in zip(view.shape, stored_strides(view), strict=True)]
    along = _dims_along(shape, rel, [(n, s) for n, s in sized if n != 1])
    if along is None:
        return None
    box, cond = positions(view, base)  # a grid's: kept, and moved a row further
    coords: list[Expr] = []
    stepping = iter(along)
    for size, _ in sized:
        if size == 1:
            coords.append(Const(0.0))
            continue
        dim, step, _ = next(stepping)
        coord: Expr = combine("sub", Coord(dim), Const(float(box[dim][0])), box)
        if step > 1:
            coord = combine("floordiv", coord, Const(float(step)), box)
        coords.append(coord)
    return box, cond, tuple(coords)


def _grid_positions(
    shape: tuple[int, ...], rel: int, steps: dict[int, tuple[int, int]]
) -> tuple[Box, Expr]:
    """A strided slice's box and its grid: ``(c - start) % step == 0`` along each dim
    that steps (the box bounds the rest)."""
    start = _starts(shape, rel)
    box = tuple(
        (start[d], start[d] + steps[d][0] * (steps[d][1] - 1) + 1) for d in range(len(shape))
    )
    cond: Expr = Const(1.0)
    for dim in range(len(shape)):
        step = steps[dim][0]
        if step > 1:
            delta = combine("sub", Coord(dim), Const(float(start[dim])), box)
            on_step = combine("eq", combine("mod", delta, Const(float(step)), box), Const(0.0), box)
            cond = combine("mul", cond, on_step, box)
    return box, cond


def _flat_positions(shape: tuple[int, ...], rel: int, size: int, stride: int) -> tuple[Box, Expr]:
    """A 1-D view of flat step ``stride`` (a diagonal): the box around its flat range
    and ``(flat - rel) % stride == 0`` within that range."""
    last = rel + stride * (size - 1)
    pieces = [piece for _, piece in flat_range_boxes(shape, rel, last + 1)]
    box = tuple(
        (min(p[d][0] for p in pieces), max(p[d][1] for p in pieces)) for d in range(len(shape))
    )
    delta = combine("sub", contiguous_index(shape), Const(float(rel)), box)
    inside = combine(
        "mul", combine("ge", delta, Const(0.0), box),
        combine("le", delta, Const(float(last - rel)), box), box,
    )  # fmt: skip
    on_step = combine("eq", combine("mod", delta, Const(float(stride)), box), Const(0.0), box)
    return box, combine("mul", inside, on_step, box)


#: The most elements of one slab of rows :func:`first_unwritten` holds at once.
_SLAB_ELEMENTS = 1 << 22


def first_unwritten(
    writes: Sequence[tuple[Box, Expr | None]], shape: Sequence[int], within: Box | None = None
) -> tuple[int, ...] | None:
    """The first element (row-major) of a tensor of ``shape`` (of its box ``within``,
    when given) that none of ``writes`` holds, or None when they hold every one: each
    write is a box and the condition over it where its elements lie
    (:func:`positions`; None: all of the box). Exact: the conditions are evaluated
    element by element, a slab of rows at a time.

    Raises:
        Cannot: a condition is no integer expression of the coordinates.
    """
    shape = tuple(int(n) for n in shape)
    if not shape or 0 in shape:
        return None  # a 0-dim tensor's one element is a box; an empty one has none
    area = whole(shape) if within is None else within
    slab = max(_SLAB_ELEMENTS // max(math.prod(b - a for a, b in area[1:]), 1), 1)
    for first in range(area[0][0], area[0][1], slab):
        rows: Box = ((first, min(first + slab, area[0][1])), *area[1:])
        held = torch.zeros([stop - start for start, stop in rows], dtype=torch.bool)
        for box, cond in writes:
            part = intersect(box, rows)
            if part is None:
                continue
            index = tuple(slice(a - r, b - r) for (a, b), (r, _) in zip(part, rows, strict=True))
            if cond is None:
                held[index] = True
                continue
            values = index_values(cond, part)
            if values is None:
                raise Cannot(f"where a strided write lies ({cond}) is no integer condition")
            held[index] |= (values != 0).expand([b - a for a, b in part])
        missing = (~held).nonzero()
        if len(missing):
            return tuple(int(i) + r for i, (r, _) in zip(missing[0], rows, strict=True))
    return None
