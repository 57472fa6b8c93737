"""A translated fill's action (:func:`fill_action`): the initializer it builds
(:func:`.translations.build`), ``eye_`` / ``dirac_`` as programs of the element's global
coordinates, and the whole-parameter rule of ``orthogonal_``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...._program.actions import Computed, Fill, TrackAction
from ...._program.cannot import Cannot
from ...._program.nodes import Const, Coord, Expr
from ...._program.regions import Box
from ...._program.rewrite import combine
from ...._torch_compat import stored_contiguous
from ....errors import ShardInitError
from ....init import Constant
from ..ops import build
from .tracks import EAGER_LAYOUT, Track

__all__ = ["fill_action"]

Region = tuple[Box, Sequence[int | None] | None] | None
_ZERO = Constant(0.0)


def fill_action(
    track: Track, view: torch.Tensor, kind: str, values: Sequence[Any], op: str, region: Region
) -> TrackAction:
    """The action of a fill of ``kind`` with ``values`` on ``view`` of ``track`` (whose
    region is ``region``, needed by ``eye``/``dirac`` only).

    Raises:
        Cannot: there is none (why).
        ValueError: ``eye_`` / ``dirac_`` on a tensor of a rank torch refuses (torch's
            own error, as eager torch raises it).
    """
    if kind in ("eye", "dirac"):
        return _aligned(view, kind, values, region)
    if kind == "orthogonal":
        _check_whole(track, view)
    try:
        return build(kind, values, op, view)
    except ShardInitError as why:  # build validates the arguments: it refuses nothing
        raise Cannot(str(why)) from None


def _aligned(view: torch.Tensor, kind: str, values: Sequence[Any], region: Region) -> TrackAction:
    if kind == "eye" and view.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    groups = int(values[0]) if kind == "dirac" else 1
    if kind == "dirac" and (view.dim() not in (3, 4, 5) or view.size(0) % groups):
        raise ValueError("dirac_ needs a 3-5-D tensor whose dim 0 divides into groups")
    if region is None:
        return Fill(_ZERO)
    box, axes = region
    if axes is None or any(s > 1 and a is None for s, a in zip(view.shape, axes, strict=True)):
        raise Cannot(f"{kind}_ on a view that merges dims")
    program = _structured(box, axes, tuple(view.shape), groups if kind == "dirac" else 0)
    return Computed(program)


def _check_whole(track: Track, view: torch.Tensor) -> None:
    """``orthogonal_``'s matrix is that of the tensor it is given: replayable only when
    that is a parameter or temporary itself, whole and in its own order (flattened the
    same way; a temporary's values may then land only at their own positions in a tensor
    of its shape: :class:`.claims.RandomPlaces`); else :class:`Cannot`."""
    whole = (
        view.dim() == track.base.dim()
        and tuple(view.shape) == track.shape
        and stored_contiguous(view)
        and view.storage_offset() == track.base.storage_offset()
    )
    if not whole:
        kind = "parameter" if track.kind == "param" else "temporary"
        raise Cannot(
            f"orthogonal_ on a view of shape {tuple(view.shape)} that is not the whole "
            f"{kind} of shape {track.shape} in its own order: its matrix would be the "
            "view's; call it on the tensor itself"
        )
    _check_eager_matrix_view(view)


def _check_eager_matrix_view(view: torch.Tensor) -> None:
    """torch's ``orthogonal_`` ends with ``tensor.view_as(q)`` of its (rows, cols)
    matrix ``q``, which raises in eager torch where the parameter's layout cannot be
    viewed so (``channels_last`` with a kernel wider than 1): :class:`Cannot` there, as
    eager refuses it (the stand-in notes eager's layout: :mod:`.threads`)."""
    eager = view.__dict__.get(EAGER_LAYOUT)
    if eager is None or view.dim() < 2:
        return
    rows = view.size(0)
    try:
        eager.view(rows, view.numel() // rows if rows else 0)
    except RuntimeError:
        raise Cannot(
            f"in eager torch the parameter has strides {tuple(eager.stride())} (a memory "
            "format such as channels_last), where orthogonal_'s view_as of its "
            f"({rows}, {view.numel() // max(rows, 1)}) matrix raises; run orthogonal_ "
            "before setting the memory format, as eager torch needs too"
        ) from None


def _structured(
    box: Box, axes: Sequence[int | None], view_shape: Sequence[int], groups: int
) -> Expr:
    """``eye_`` (``groups == 0``) or ``dirac_(view, groups)`` on the view of ``box`` whose
    dims run along ``axes`` (None: a size-1 view dim): a table of the element's global
    coordinates, 1.0 on the identity's (each group's) diagonal, else 0.0."""
    ranges = list(box)

    def op(name: str, a: Expr, b: Expr | float) -> Expr:
        return combine(name, a, Const(float(b)) if isinstance(b, (int, float)) else b, ranges)

    def rel(view_dim: int) -> Expr:  # the view's own coordinate
        axis = axes[view_dim]
        return Const(0.0) if axis is None else op("sub", Coord(axis), box[axis][0])

    if groups == 0:
        return op("eq", rel(0), rel(1))
    out_per_group = view_shape[0] // groups
    diagonal = op("mod", rel(0), out_per_group)
    mask = op("mul", op("lt", diagonal, min(out_per_group, view_shape[1])),
              op("eq", rel(1), diagonal))  # fmt: skip
    for view_dim in range(2, len(view_shape)):
        mask = op("mul", mask, op("eq", rel(view_dim), view_shape[view_dim] // 2))
    return mask
