"""Copies into followed tensors (``copy_``, ``out=``, ``.data =``, ``__setitem__``): a
temporary written by fills and scales is copied op by op, so each element keeps the
initializer of the element it comes from (and a random value its one place); anything
else is copied by its computed values, as a program. A component the dispatch
(:mod:`.mode`) calls, holding the record store and the expression engine
(:mod:`.engine`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...._caches import cached
from ...._program.actions import CapturedOp, Computed, Fill, Opaque, Selected
from ...._program.cannot import Cannot
from ...._program.regions import (
    Box,
    FlatRun,
    box_runs,
    flat_range_boxes,
    map_runs_from,
    view_runs,
)
from ..ops import cast
from .engine import BUFFER_WRITE, Engine, narrower
from .store import RecordStore
from .tracks import Track, same_view

__all__ = ["Copies"]


class Copies:
    """Copies recorded through ``engine`` (module docstring)."""

    def __init__(self, store: RecordStore, engine: Engine) -> None:
        self.store = store
        self.engine = engine

    def copy_into(self, target: Track, dst: torch.Tensor, value: Any, op: str) -> None:
        """``dst`` of ``target`` takes ``value``: a temporary of the same shape written by
        fills and scales op by op (:meth:`translate`: each element keeps its source's
        initializer), anything else by its computed values (broadcast), the one route of
        every program."""
        source = self.store.lookup(value)
        self.engine.carry_read(target, value, op)
        if target.kind == "buffer":
            self.engine.record(target, dst, Fill(BUFFER_WRITE), op)
            return
        if source is not None and source.kind == "param":
            if source is target and same_view(dst, value):
                return
            if target.kind == "param":
                raise self.store.fail(target, op, f"it copies the values of {source.label}")
        if source is target and same_view(dst, value):
            return
        by_ops = (
            source is not None
            and source.kind == "temp"
            and value.shape == dst.shape
            and not any(isinstance(o.action, (Computed, Selected)) for o in source.ops)
            and not narrower(source.base.dtype, target.base.dtype)  # keeps its rounding
        )
        if by_ops and self.translate(source, value, target, dst, op):  # type: ignore[arg-type]
            return
        expr = self.engine.operand(value, tuple(dst.shape), op)
        if isinstance(value, torch.Tensor) and value.dtype != dst.dtype:  # converted
            expr = cast(expr, value.dtype, dst.dtype, [(0, int(size)) for size in dst.shape])
        self.engine.write_expr(target, dst, expr, op)

    def translate(
        self, source: Track, src: torch.Tensor, target: Track, dst: torch.Tensor, op: str
    ) -> bool:
        """``dst`` (of ``target``) takes the values of ``src`` (of ``source``, a
        temporary of the same shape), op by op: a fill gives each element the
        initializer of the element it comes from, a program is read at the element's
        source position. Returns False, writing nothing, when a view's order is not
        row-major (then the copy goes by values).

        Raises:
            UnsupportedInitOpError: a parameter takes elements never written, or values
                no op describes (a temporary takes them as opaque).
        """
        try:
            runs = view_runs(src, source.base), view_runs(dst, target.base)
        except Cannot:  # a view not in row-major order: the caller copies by values
            return False
        try:
            _check_copyable(source, runs)
        except Cannot as cannot:
            self.engine.cannot(target, dst, cannot, op)
            return True
        where_ = self.store.where()
        self.engine.places.new_write()
        shapes = (source.shape, target.shape)  # (each a read of the tensor's layout)
        for entry in source.ops:  # no Computed one (copy_into): fills, scales, masks
            copied = f"{entry.op} (copied by {op} at {where_})"
            if not isinstance(entry.action, Opaque):  # opaque parts: not copied (checked)
                self.engine.places.check_whole_copy(source, entry, target, runs, op)
                self.copy_op(source, entry, target, runs, (op, copied, where_), shapes)
        return True

    def copy_op(
        self,
        source: Track,
        entry: CapturedOp,
        target: Track,
        runs: tuple[list[FlatRun], list[FlatRun]],
        names: tuple[str, str, str],
        shapes: tuple[tuple[int, ...], tuple[int, ...]],
    ) -> None:
        """``entry`` (a fill or scale of ``source``) copied through ``runs`` (``shapes``:
        the source's and the target's)."""
        op, copied, where_ = names
        for moved, boxes in _pieces(entry.region, shapes[0], runs, shapes[1]):
            self.engine.places.copied(source, entry, target, moved, op, f"{op} at {where_}")
            for box in boxes:
                copy = CapturedOp(box, entry.action, copied, entry.where)
                self.engine.places.copied_from(copy, entry)
                self.store.add(target, copy)


#: Views of at most this many runs have their pieces kept (:func:`_kept_pieces`).
_KEPT_RUNS = 64


def _pieces(
    region: Box,
    source_shape: tuple[int, ...],
    runs: tuple[list[FlatRun], list[FlatRun]],
    target_shape: tuple[int, ...],
) -> tuple[tuple[FlatRun, tuple[Box, ...]], ...]:
    """Where the elements ``region`` of a source of ``source_shape`` land, copied from
    its view's ``runs[0]`` to a target's ``runs[1]``: each flat run of the target, as
    the boxes of ``target_shape`` it covers."""
    if len(runs[0]) <= _KEPT_RUNS and len(runs[1]) <= _KEPT_RUNS:
        return _kept_pieces(region, source_shape, tuple(runs[0]), tuple(runs[1]), target_shape)
    return _pieces_of(region, source_shape, runs[0], runs[1], target_shape)


@cached  # a table copied whole, again and again: its writes' regions, one layout
def _kept_pieces(
    region: Box,
    source_shape: tuple[int, ...],
    source_runs: tuple[FlatRun, ...],
    target_runs: tuple[FlatRun, ...],
    target_shape: tuple[int, ...],
) -> tuple[tuple[FlatRun, tuple[Box, ...]], ...]:
    return _pieces_of(region, source_shape, source_runs, target_runs, target_shape)


def _pieces_of(
    region: Box,
    source_shape: tuple[int, ...],
    source_runs: Sequence[FlatRun],
    target_runs: Sequence[FlatRun],
    target_shape: tuple[int, ...],
) -> tuple[tuple[FlatRun, tuple[Box, ...]], ...]:
    pieces = []
    for run in box_runs(region, source_shape):
        for at, mapped in map_runs_from(source_runs, run, target_runs):
            boxes = tuple(box for _, box in flat_range_boxes(target_shape, *mapped))
            pieces.append(((at, at + mapped[1] - mapped[0]), boxes))
    return tuple(pieces)


def _check_copyable(source: Track, runs: tuple[list[FlatRun], list[FlatRun]]) -> None:
    """Raises :class:`Cannot` when the elements ``runs[0]`` of the temporary ``source``
    cannot be copied op by op (never written, or written by an op no program describes)."""
    for start, stop in runs[0]:
        for _, box in flat_range_boxes(source.shape, start, stop):
            if not source.written(box):
                raise Cannot(f"it copies elements of {source.label} that were never written")
    for entry in source.ops:
        if isinstance(entry.action, Opaque) and any(
            next(map_runs_from(runs[0], run, runs[1]), None) is not None
            for run in box_runs(entry.region, source.shape)
        ):
            raise Cannot(f"it copies values of {source.label}: {entry.action.why}")
