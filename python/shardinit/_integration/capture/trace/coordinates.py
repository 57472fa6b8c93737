"""Writes at positions computable from an element's coordinates, as init programs:
``triu`` / ``tril`` (in place too), ``fill_diagonal_``, ``masked_fill`` with a mask
computed from coordinates (``arange`` / ``eye`` / ``tril`` comparisons) or a CPU table,
``index_fill`` and ``w[[1, 5]] = v`` with a constant index list, and ``outer``.

On a parameter, a constant written where a condition of the coordinates holds is a
:class:`Masked` record: the value where the condition holds, and the value before
(its rule, default or what ``init_fn`` wrote earlier, read at replay) elsewhere, so it
needs no earlier write (``w.fill_diagonal_(0)`` alone keeps the default elsewhere). A
condition with random values (``rand(n) < p``) is an elementwise ``where`` of the values
before (:mod:`.engine`); one computed from another parameter's values is refused. On a
temporary or buffer stand-in the write is the same ``where``, folded as any step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...._program.actions import Masked
from ...._program.cannot import Cannot
from ...._program.nodes import (
    Bad,
    Const,
    Coord,
    Expr,
    Prior,
    Source,
    Table,
    TableData,
    bad_reasons,
    contains,
)
from ...._program.regions import whole
from ...._program.rewrite import combine, reindex, where
from ...._program.writer import evaluate_whole
from .engine import Engine, box_coords, repeat_reason
from .store import RecordStore
from .tracks import Track, run_op

__all__ = ["Coordinates"]

_CONSTANTS = {"constant": 0.0, "zeros": 0.0, "ones": 1.0}


def _random(expr: Expr) -> bool:
    return contains(expr, Source)


def _triangle(name: str, shape: Sequence[int], diagonal: Any) -> Expr:
    """Where ``triu`` / ``tril`` (``diagonal``) zeroes an element of a tensor of ``shape``."""
    if len(shape) < 2 or not isinstance(diagonal, int):
        return Bad(f"{name} needs a tensor of at least 2 dims and an int diagonal")
    rows, cols = Coord(len(shape) - 2), Coord(len(shape) - 1)
    offset = combine("sub", cols, rows, whole(shape))
    op = "lt" if name.startswith("triu") else "gt"
    return combine(op, offset, Const(float(diagonal)), whole(shape))


def _diagonal(shape: Sequence[int], wrap: bool) -> Expr:
    """Where ``fill_diagonal_(v, wrap)`` writes in a tensor of ``shape`` (torch's rule: a
    2-D tensor's diagonal wraps every ``cols + 1`` rows when ``wrap``; more dims must all
    be equal)."""
    if len(shape) < 2 or (len(shape) > 2 and len(set(shape)) != 1):
        return Bad("fill_diagonal_ needs 2 dims, or more dims of equal length")
    ranges = whole(shape)
    rows: Expr = Coord(0)
    if len(shape) == 2 and wrap and shape[0] > shape[1] + 1:
        rows = combine("mod", rows, Const(float(shape[1] + 1)), ranges)
    cond = combine("eq", rows, Coord(1), ranges)
    for dim in range(2, len(shape)):
        cond = combine("mul", cond, combine("eq", Coord(0), Coord(dim), ranges), ranges)
    return cond


def _index_table(positions: Sequence[int], size: int) -> torch.Tensor:
    """1 at ``positions`` (negative ones from the end) of ``size`` elements, else 0
    (Cannot: a position is out of bounds)."""
    values = torch.zeros(size, dtype=torch.float64, device="cpu")
    for position in positions:
        if not -size <= position < size:
            raise Cannot(f"index {position} is out of bounds for size {size}")
        values[position % size] = 1.0
    return values


class Coordinates:
    """The routes of :data:`COORDINATE_OPS`, constant advanced-index writes and constant
    fills of a 1-D strided view of a parameter (``w.diagonal().fill_(v)``), over the
    capture's record store and expression engine (the dispatch calls them; it runs the
    operations themselves)."""

    def __init__(self, store: RecordStore, engine: Engine) -> None:
        self.store = store
        self.engine = engine

    def write_at(self, name: str, target: Track, args: Sequence[Any], kwargs: Any) -> None:
        """Records the in-place one of :data:`COORDINATE_OPS` on ``target`` (its first
        operand); the dispatch runs it."""
        bound = _bind(name, args, kwargs)
        source = args[0]
        cond, value = self.condition(name, source, bound)
        self.engine.carry_read(target, [bound.get("mask"), bound.get("value")], name)
        self.masked_write(target, source, cond, value, name)

    def new_value(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """The out-of-place one of :data:`COORDINATE_OPS` with a followed first operand:
        its result, a new temporary."""
        if name in ("outer", "ger"):
            return self.outer(name, func, args, kwargs)
        bound = _bind(name, args, kwargs)
        source = args[0]
        cond, value = self.condition(name, source, bound)
        result = run_op(func, args, kwargs)
        shape = tuple(result.shape)
        temp = self.store.new_temp(name, result)
        self.engine.carry_read(temp, [source, bound.get("mask")], name)
        expr = where(cond, value, self.engine.operand(source, shape, name))
        action = self.engine.action_of(temp, expr, name)
        self.store.hold(temp, action, name)
        return result

    def condition(
        self, name: str, view: torch.Tensor, bound: Mapping[str, Any]
    ) -> tuple[Expr, Expr]:
        """Where ``name`` writes (over ``view``'s coordinates) and what; a :class:`Bad`
        condition says why that cannot be followed."""
        shape = tuple(view.shape)
        base = name.rstrip("_")
        if base in ("triu", "tril"):
            return _triangle(base, shape, bound.get("diagonal", 0)), Const(0.0)
        value = self.engine.value_of(bound.get("value", bound.get("fill_value")), name)
        if base == "fill_diagonal":
            return _diagonal(shape, bool(bound.get("wrap", False))), value
        if base == "masked_fill":
            if not isinstance(bound.get("mask"), torch.Tensor):
                return Bad(f"{name}: the mask is not a tensor"), value
            mask = self.engine.operand(bound["mask"], shape, name)
            return combine("ne", mask, Const(0.0), whole(shape)), value
        dim = bound.get("dim")
        if not isinstance(dim, int) or not shape:
            return Bad(f"{name}: dim {dim!r} is not a dim of a {len(shape)}-dim tensor"), value
        try:
            positions = self.known_ints(bound.get("index"), name)
        except Cannot as cannot:  # a value, refused only where it is written
            return Bad(f"{name}: {cannot}"), value
        return self.index_condition(shape, dim % len(shape), positions), value

    def index_condition(self, shape: Sequence[int], dim: int, positions: list[int]) -> Expr:
        try:
            table = _index_table(positions, int(shape[dim]))
        except Cannot as cannot:  # a value, refused only where it is written
            return Bad(cannot.reason)
        return combine("ne", Table(TableData(table), Coord(dim)), Const(0.0), whole(shape))

    def known_ints(self, index: Any, op: str) -> list[int]:
        """The values of an index (a list or a tensor of integers known at capture)
        (Cannot: they are not known)."""
        if isinstance(index, (list, tuple)) and all(isinstance(i, int) for i in index):
            return [int(i) for i in index]
        if not isinstance(index, torch.Tensor) or index.is_floating_point() or index.dim() > 1:
            raise Cannot("the index is not a 1-D integer tensor or list")
        expr = self.engine.value_of(index, op)
        if bad_reasons(expr) or _random(expr):
            raise Cannot("the index's values are not known at capture")
        values = evaluate_whole(expr, tuple(index.shape))
        return [int(v) for v in values.reshape(-1).tolist()]

    def masked_write(
        self, target: Track, view: torch.Tensor, cond: Expr, value: Expr, op: str
    ) -> None:
        """``value`` written to ``view`` of ``target`` where ``cond`` holds (both over the
        view's coordinates)."""
        reasons = bad_reasons(cond) + bad_reasons(value)
        if reasons and target.kind == "param":
            raise self.store.fail(target, op, reasons[0])
        if target.kind == "param" and isinstance(value, Const) and not _random(cond):
            mapped = _to_base(view, target.base, cond)
            if mapped is not None:
                self.engine.record(target, view, Masked(mapped, float(value.value)), op)
                return
        self.engine.write_expr(target, view, where(cond, value, Prior()), op)

    def indexed_constant(
        self, target: Track, tensor: torch.Tensor, index: Any, value: Any, op: str
    ) -> bool:
        """``tensor[index] = value`` with a constant at a list of positions along one dim
        (``w[[1, 5]] = 0``, ``w[:, [0, 3]] = 0``) or a mask of ``tensor``'s shape
        (``w[mask] = 0``), recorded; False for any other advanced index (nothing
        recorded)."""
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return False
        entries = list(index) if isinstance(index, tuple) else [index]
        picked = [k for k, e in enumerate(entries) if not _full_slice(e)]
        if len(picked) != 1 or len(entries) > tensor.dim():
            return False
        entry = entries[picked[0]]
        shape = tuple(tensor.shape)
        if isinstance(entry, torch.Tensor) and entry.dtype == torch.bool:
            cond = self.mask_condition(entry, picked[0], shape, op)
            if cond is None:
                return False
        else:
            try:
                positions = self.known_ints(entry, op)
            except Cannot:  # not a constant index: the caller's other routes
                return False
            cond = self.index_condition(shape, picked[0], positions)
        self.masked_write(target, tensor, cond, self.engine.value_of(value, op), op)
        return True

    def mask_condition(
        self, mask: torch.Tensor, first: int, shape: tuple[int, ...], op: str
    ) -> Expr | None:
        """Where a boolean ``mask`` indexing dims ``first, first + 1, ...`` of a tensor of
        ``shape`` (the others whole: ``w[rows] = v``, ``w[:, cols] = v``) holds, over the
        tensor's coordinates; None when its shape is not those dims'."""
        dims = range(first, first + mask.dim())
        if tuple(mask.shape) != shape[first : first + mask.dim()]:
            return None
        stretched = any(size > 1 for d, size in enumerate(shape) if d not in dims)
        repeats = repeat_reason(op) if stretched else None
        ranges = whole(shape)
        value = reindex(self.engine.value_of(mask, op), [Coord(d) for d in dims], ranges, repeats)
        return combine("ne", value, Const(0.0), ranges)

    def outer(self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """``outer(a, b)``: ``a`` along rows times ``b`` along columns."""
        a, b = args[0], args[1] if len(args) > 1 else kwargs.get("vec2")
        result = run_op(func, args, kwargs)
        shape = tuple(result.shape)
        ranges = whole(shape)
        parts = []
        for dim, (vector, other) in enumerate(((a, b), (b, a))):
            repeats = repeat_reason(name) if other.numel() > 1 else None
            value = self.engine.value_of(vector, name)
            parts.append(reindex(value, [Coord(dim)], ranges, repeats))
        temp = self.store.new_temp(name, result)
        self.engine.carry_read(temp, [a, b], name)
        expr = combine("mul", parts[0], parts[1], ranges)
        action = self.engine.action_of(temp, expr, name)
        self.store.hold(temp, action, name)
        return result


def _bind(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a coordinate op by name (after the tensor itself)."""
    names = {
        "triu": ("diagonal",), "tril": ("diagonal",), "fill_diagonal": ("fill_value", "wrap"),
        "masked_fill": ("mask", "value"), "index_fill": ("dim", "index", "value"),
        "outer": ("vec2",), "ger": ("vec2",),
    }[name.rstrip("_")]  # fmt: skip
    bound = dict(zip(names, args[1:], strict=False))
    bound.update({k: v for k, v in kwargs.items() if k != "input"})
    return bound


def _full_slice(entry: Any) -> bool:
    return isinstance(entry, slice) and entry == slice(None)


def _to_base(view: torch.Tensor, base: torch.Tensor, cond: Expr) -> Expr | None:
    """``cond`` (over ``view``'s coordinates) over the base's global coordinates, when
    the view is a box whose dims run along base dims; else None."""
    boxed = box_coords(view, base)
    if boxed is None:
        return None
    box, coords = boxed
    return reindex(cond, coords, list(box), keep=False)
