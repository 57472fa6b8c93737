"""A followed tensor's value as the fold of what was written to it, kept per track and
extended by the operations appended since (:meth:`.engine.Engine.folded`).

The fold is a left fold: ``value = where(in_box(op.region), op_value(op, value), value)``
over the track's operations, first to last. The store only appends operations (or
drops them all, :meth:`.store.RecordStore.forget`), so the fold of ``ops[:n]`` is a
prefix of the fold of ``ops``: kept with ``ops[n - 1]`` (the list holds it alive, so
its identity is a true witness that the prefix is unchanged), a new write folds in one
operation where the fold afresh redid every one. The prefix also keeps its nodes: a
new write's value is built on the very expression objects of the values before it,
whose :func:`~shardinit._program.nodes.random_key` and the like were asked already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...._program.actions import CapturedOp, sets_values
from ...._program.index import in_box
from ...._program.nodes import Bad, Const, Expr, Source, contains
from ...._program.regions import whole
from ...._program.rewrite import where
from .before import before
from .tracks import Track

__all__ = ["BUFFER_KNOWN", "Folds", "never_written", "unknown_values"]

#: What an operation leaves in the elements it covers, given their value before
#: (:func:`.engine.op_value`).
OpValue = Callable[[CapturedOp, Track, Expr], Expr]


@dataclass(frozen=True)
class _Prefix:
    """The fold of a track's first ``count`` operations (``last`` the final one), for
    its shape, dtype and whether emptied then; ``never`` the value of elements no operation wrote;
    ``random``: some operation wrote random values."""

    count: int
    last: CapturedOp | None
    layout: tuple[tuple[int, ...], torch.dtype, bool]
    never: Expr
    value: Expr
    random: bool


#: The elements of a buffer's stand-in that hold its values before init_fn, known (its
#: constructor's, or a real buffer's own): a buffer's fold marks where its real values
#: are known, not the values (they are read from the stand-in, as a write's are).
BUFFER_KNOWN = Const(0.0)


def never_written(track: Track) -> Expr:
    """The value of ``track``'s elements nothing wrote: a parameter's values before
    ``init_fn`` (:mod:`.before`); a buffer's known ones (:data:`BUFFER_KNOWN`), unless
    unknown (the refusal says why, :func:`unknown_values`); else the refusal of reading
    them."""
    if track.kind == "param":  # the values before init_fn (rule, default): .before
        return before(id(track), track.base.dtype, len(track.shape))
    unknown = unknown_values(track)
    if unknown:
        return Bad(unknown)
    if track.kind == "buffer":
        return BUFFER_KNOWN
    return Bad(f"it copies elements of {track.label} that were never written")


def unknown_values(track: Track) -> str:
    """Why the values of a buffer's elements init code did not write are unknown (no
    constructor value gives them, :attr:`.tracks.Track.unknown`; or ``to_empty``
    emptied it), or "" where they are known or ``track`` is no buffer."""
    if track.unknown:
        return track.unknown
    if track.kind == "buffer" and track.emptied:
        return (
            f"the values of {track.label} are unknown (to_empty emptied it, and init code "
            "did not write them since), so an operation on them cannot be followed"
        )
    return ""


class Folds:
    """The fold of each track's operations so far, extended as operations are appended
    (module docstring)."""

    def __init__(self, op_value: OpValue) -> None:
        self.op_value = op_value
        self.prefixes: dict[int, _Prefix] = {}

    def fold(self, track: Track) -> tuple[Expr, Expr, bool]:
        """``(value, never, random)``: the fold of all of ``track``'s operations, the
        value of elements none wrote, and whether some wrote random values."""
        ops = track.ops
        layout = (track.shape, track.base.dtype, track.emptied)  # emptied: never_written
        kept = self.prefixes.get(id(track))
        if kept is None or not _extends(kept, ops, layout):
            never = never_written(track)
            kept = _Prefix(0, None, layout, never, never, False)
        value, random = kept.value, kept.random
        start = kept.count
        if track.base.is_meta:  # (random: asked of a CPU temporary's fold only)
            start = _last_whole_write(ops, start, track.shape)
        for op in ops[start:]:
            written = self.op_value(op, track, value)
            random = random or contains(written, Source)
            value = where(in_box(op.region, track.shape), written, value)
        last = ops[-1] if ops else None
        self.prefixes[id(track)] = _Prefix(len(ops), last, layout, kept.never, value, random)
        return value, kept.never, random


def _last_whole_write(ops: list[CapturedOp], start: int, shape: tuple[int, ...]) -> int:
    """The index of the last of ``ops[start:]`` that sets every element without reading
    them (a constructor's fill that init code's fill replaces), else ``start``: the
    fold of what came before it is discarded whole (``where`` of all the tensor is its
    value), so it is not folded at all."""
    everything = whole(shape)
    for index in range(len(ops) - 1, start, -1):
        op = ops[index]
        if op.region == everything and sets_values(op.action):
            return index
    return start


def _extends(kept: _Prefix, ops: list[CapturedOp], layout: object) -> bool:
    """Whether ``ops`` are the kept prefix's operations and more, on the same layout."""
    if kept.layout != layout or len(ops) < kept.count:
        return False
    return kept.count == 0 or ops[kept.count - 1] is kept.last
