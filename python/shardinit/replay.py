"""Replay captured init code shard-locally from stream format v1.

A :class:`~shardinit.capture.ParamRecord` lists, in order, the operations ``init_fn``
applied to a parameter and the box of the GLOBAL tensor each one covers. Replaying it
on a local region (a box of the global tensor) gives every element the value of the
LAST operation that covered it:

* a fill writes the intersection of its box with the local box; random values come from
  the element's own position in the parameter's stream (``init_box`` of the whole
  parameter's spec: same name and seed for every op), so disjoint regions never share
  values and the result does not depend on the layout;
* a scale multiplies (divides) the covered elements' current values in the parameter's
  dtype, as torch's ``mul_`` / ``div_`` do after the fill;
* ``eye_`` / ``dirac_`` compute each element from its global index.

Example:
    >>> import torch, shardinit
    >>> from torch import nn
    >>> with torch.device("meta"):
    ...     emb = nn.Embedding(6, 4)
    >>> def init_fn():
    ...     emb.weight.data.normal_(mean=0.0, std=0.02)
    ...     emb.weight.data[2].zero_()
    >>> record = shardinit.capture_init(emb, init_fn)["weight"]
    >>> full = replay_full(record, seed=0)
    >>> torch.equal(replay_box(record, 0, ((2, 6), (0, 4))), full[2:6]), bool(full[2].any())
    (True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ._integration.placements import Run, local_boxes
from .capture import (
    Box,
    CapturedInit,
    CapturedOp,
    Dirac,
    Eye,
    Fill,
    ParamRecord,
    Scale,
    box_union_covers,
    swapped_parameters,
)
from .errors import ShardInitError
from .init import Constant, Initializer
from .shard import _resolve_device, init_box
from .spec import ParamSpec

__all__ = [
    "base_ops",
    "flat_range_boxes",
    "recompute_buffers",
    "replay_box",
    "replay_flat",
    "replay_full",
    "replay_runs",
]


def base_ops(
    initializer: Initializer, shape: Sequence[int], zero_rows: Sequence[int] = ()
) -> tuple[CapturedOp, ...]:
    """Operations that set a whole parameter with ``initializer`` (resolved from the
    GLOBAL ``shape``) and then zero rows ``zero_rows`` along dim 0: what a parameter held
    before ``init_fn`` ran (its module's default), to put in front of a record that
    covers only part of it.
    """
    shape = tuple(shape)
    whole = tuple((0, size) for size in shape)
    ops = [CapturedOp(whole, Fill(initializer.resolve(shape)), "default", "<default>")]
    for row in zero_rows:
        region = ((row, row + 1), *whole[1:])
        ops.append(CapturedOp(region, Fill(Constant(0.0)), "zero row", "<default>"))
    return tuple(ops)


def _intersect(a: Box, b: Box) -> Box | None:
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))
    if any(start >= stop for start, stop in box):
        return None
    return box


def _contains(outer: Box, inner: Box) -> bool:
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner, strict=True))


def _check_ops(record: ParamRecord, extra: Sequence[CapturedOp]) -> list[CapturedOp]:
    ops = [*extra, *record.ops]
    fills = [op.region for op in ops if not isinstance(op.action, Scale)]
    if not box_union_covers(fills, record.shape):
        raise ShardInitError(
            f"parameter {record.name}: init_fn sets only part of it and nothing sets the "
            "rest (no rule or torch.nn default to start from); give it a rule or make "
            "init_fn fill all of it"
        )
    return ops


def _pattern(op: CapturedOp, box: Box, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The 0/1 values of an ``eye_`` / ``dirac_`` op on ``box`` (global coordinates)."""
    action = op.action
    assert isinstance(action, (Eye, Dirac))
    ndim = len(box)
    coords = []
    for dim, (start, stop) in enumerate(box):
        view_shape = [1] * ndim
        view_shape[dim] = stop - start
        coords.append(torch.arange(start, stop, device=device).reshape(view_shape))

    def rel(view_dim: int) -> torch.Tensor:
        axis = action.axes[view_dim]
        if axis is None:
            return torch.zeros((1,) * ndim, dtype=torch.long, device=device)
        return coords[axis] - action.origin[axis]

    if isinstance(action, Eye):
        mask = rel(0) == rel(1)
    else:
        out_per_group = action.view_shape[0] // action.groups
        min_dim = min(out_per_group, action.view_shape[1])
        diagonal = rel(0) % out_per_group
        mask = (diagonal < min_dim) & (rel(1) == diagonal)
        for view_dim in range(2, len(action.view_shape)):
            mask = mask & (rel(view_dim) == action.view_shape[view_dim] // 2)
    shape = tuple(stop - start for start, stop in box)
    return torch.broadcast_to(mask, shape).to(dtype)


def replay_box(
    record: ParamRecord,
    seed: int,
    box: Sequence[tuple[int, int]],
    out: torch.Tensor | None = None,
    *,
    device: Any = None,
    prior: Sequence[CapturedOp] = (),
) -> torch.Tensor:
    """The values of ``box`` (global coordinates) of the parameter after its captured
    operations.

    Args:
        record: the parameter's captured operations.
        seed: the run's seed.
        box: one ``(start, stop)`` per dim of the GLOBAL shape.
        out: a tensor of the box's shape and the parameter's dtype to write into (any
            strides); allocated on ``device`` if None.
        device: where to allocate when ``out`` is None (default the CPU).
        prior: operations before ``init_fn`` (see :func:`base_ops`), needed when the
            record does not cover the whole parameter.

    Returns:
        ``out`` (or the new tensor), filled.

    Raises:
        ShardInitError: the operations do not cover every element, or ``out`` has the
            wrong shape or dtype.
    """
    local_box: Box = tuple((int(start), int(stop)) for start, stop in box)
    shape = tuple(stop - start for start, stop in local_box)
    if out is None:
        out = torch.empty(shape, dtype=record.dtype, device=_resolve_device(device))
    elif tuple(out.shape) != shape or out.dtype != record.dtype:
        raise ShardInitError(
            f"parameter {record.name}: out has shape {tuple(out.shape)} and dtype "
            f"{out.dtype}, the box needs {shape} and {record.dtype}"
        )
    ops = _check_ops(record, prior)
    pieces = [_intersect(op.region, local_box) for op in ops]
    with torch.no_grad():
        for index, (op, piece) in enumerate(zip(ops, pieces, strict=True)):
            if piece is None:
                continue
            if not isinstance(op.action, Scale) and any(
                later is not None
                and not isinstance(ops[k].action, Scale)
                and _contains(later, piece)
                for k, later in enumerate(pieces[index + 1 :], start=index + 1)
            ):
                continue  # a later fill overwrites all of it: generate nothing
            target = out[
                tuple(
                    slice(p0 - b0, p1 - b0)
                    for (p0, p1), (b0, _) in zip(piece, local_box, strict=True)
                )
            ]
            action = op.action
            if isinstance(action, Fill):
                spec = ParamSpec(record.name, record.shape, record.dtype, action.init, seed=seed)
                if target.is_contiguous():
                    init_box(spec, piece, out=target)
                else:
                    target.copy_(init_box(spec, piece, device=out.device))
            elif isinstance(action, Scale):
                if action.divide:
                    target.div_(action.factor)
                else:
                    target.mul_(action.factor)
            else:
                target.copy_(_pattern(op, piece, record.dtype, out.device))
    return out


def replay_full(
    record: ParamRecord, seed: int, *, device: Any = None, prior: Sequence[CapturedOp] = ()
) -> torch.Tensor:
    """The whole parameter after its captured operations (world 1)."""
    return replay_box(
        record, seed, tuple((0, size) for size in record.shape), device=device, prior=prior
    )


def replay_runs(
    record: ParamRecord,
    seed: int,
    runs: Sequence[Sequence[Run]],
    local: torch.Tensor,
    *,
    prior: Sequence[CapturedOp] = (),
) -> None:
    """Fills ``local``, the tensor holding the region ``runs`` (per dim, the runs of
    global indices it holds, as :func:`shardinit.placements.local_runs` gives them).
    """
    for piece in local_boxes(runs):
        index = tuple(
            slice(begin, begin + stop - start)
            for begin, (start, stop) in zip(piece.local_start, piece.global_box, strict=True)
        )
        replay_box(record, seed, piece.global_box, local[index], prior=prior)


def flat_range_boxes(shape: Sequence[int], start: int, stop: int) -> list[tuple[int, Box]]:
    """Splits flat elements ``[start, stop)`` of a row-major tensor of ``shape`` into
    boxes, in order; each with its offset from ``start``.

    Example:
        >>> flat_range_boxes((3, 4), 2, 9)
        [(0, ((0, 1), (2, 4))), (2, ((1, 2), (0, 4))), (6, ((2, 3), (0, 1)))]
    """
    shape = tuple(shape)
    if start >= stop:
        return []
    if not shape:
        return [(0, ())]
    inner = 1
    for size in shape[1:]:
        inner *= size
    if len(shape) == 1:
        return [(0, ((start, stop),))]
    pieces: list[tuple[int, Box]] = []
    row, offset = divmod(start, inner)
    position = start
    if offset:  # a partial first row
        end = min(stop, (row + 1) * inner)
        for sub_offset, sub in flat_range_boxes(shape[1:], offset, end - row * inner):
            pieces.append((position - start + sub_offset, ((row, row + 1), *sub)))
        position = end
        row += 1
    full_rows = (stop - position) // inner
    if full_rows:
        pieces.append((position - start, ((row, row + full_rows), *((0, s) for s in shape[1:]))))
        position += full_rows * inner
        row += full_rows
    if position < stop:  # a partial last row
        for sub_offset, sub in flat_range_boxes(shape[1:], 0, stop - position):
            pieces.append((position - start + sub_offset, ((row, row + 1), *sub)))
    return pieces


def replay_flat(
    record: ParamRecord,
    seed: int,
    start: int,
    stop: int,
    out: torch.Tensor,
    *,
    prior: Sequence[CapturedOp] = (),
) -> None:
    """Fills the 1-D ``out`` with flat elements ``[start, stop)`` of the row-major
    parameter (FSDP1 flat-shard ranges)."""
    for offset, piece in flat_range_boxes(record.shape, start, stop):
        count = 1
        for low, high in piece:
            count *= high - low
        target = out[offset : offset + count].view(tuple(hi - lo for lo, hi in piece))
        replay_box(record, seed, piece, target, prior=prior)


def recompute_buffers(module: nn.Module, captured: CapturedInit) -> list[str]:
    """Runs ``captured.init_fn`` again, for real, for the buffers it computes.

    Parameters are swapped for meta stand-ins again (operations on them do nothing), so
    only the buffers are computed, on the devices their code chooses: allocate them
    first (this is called after ``materialize`` allocated the module). A buffer the code
    assigns anew is moved to the device and dtype of the buffer it replaces when they
    differ.

    Returns:
        The canonical names of the recomputed buffers.

    Raises:
        ShardInitError: a recomputed buffer is still on the meta device (the code
            computed it from meta tensors) or ``init_fn`` failed.
    """
    if not captured.buffers:
        return []
    before = {
        (id(owner), attr): buffer
        for owner in module.modules()
        for attr, buffer in owner._buffers.items()
    }
    try:
        with swapped_parameters(module), torch.no_grad():
            captured.init_fn()
    except ShardInitError:
        raise
    except Exception as error:
        raise ShardInitError(
            f"recomputing buffers {list(captured.buffers)} by running init_fn for real "
            f"failed: {type(error).__name__}: {error}"
        ) from error
    still_meta = []
    for path, owner in module.named_modules():
        for attr, buffer in list(owner._buffers.items()):
            if buffer is None:
                continue
            old = before.get((id(owner), attr))
            if (
                old is not None
                and buffer is not old
                and not old.is_meta
                and (buffer.device != old.device or buffer.dtype != old.dtype)
            ):
                buffer = buffer.to(device=old.device, dtype=old.dtype)
                owner._buffers[attr] = buffer
            if buffer.is_meta:
                still_meta.append(f"{path}.{attr}" if path else attr)
    if still_meta:
        raise ShardInitError(
            f"buffers {still_meta} are still on the meta device after running init_fn "
            "for real: compute them on the buffer's device (e.g. `with "
            "torch.device(buffer.device)`) or pass buffer_init"
        )
    return list(captured.buffers)
