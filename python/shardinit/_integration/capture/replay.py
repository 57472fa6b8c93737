"""Replay captured init code shard-locally from stream format v1.

A :class:`~.records.ParamRecord` lists, in order, the operations ``init_fn``
applied to a parameter and the box of the GLOBAL tensor each one covers; each
operation is an init program (:class:`~.records.Program`). Replaying it on a local
region (a box of the global tensor) gives every element the value of the LAST operation
that covered it: each program is evaluated on the intersection of its box with the
local box only (:func:`.evaluate.write_program`), and not at all where a later one
covers it. A program that reads the values before it (a scale) reads them as the
program of the operations before it over its box (:func:`op_programs`), so the values
never depend on the order pieces are written in, and random values always come from
the element's own position in the parameter's stream (same name and seed for every
op): disjoint regions never share values and the result does not depend on the layout.

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

import contextlib
import math
from collections.abc import Sequence

import torch
from torch import nn

from ..._fill import DeferredFills
from ..._names import buffer_holders
from ..._validate import DeviceLike, resolve_device
from ...errors import ShardInitError
from ...init import Constant, Initializer
from ...spec import ParamSpec
from ..placements import Run, local_boxes
from .evaluate import is_elementwise, write_fill, write_program
from .program import Const, Expr, in_box, simplify, where
from .records import (
    CapturedInit,
    CapturedOp,
    Fill,
    ParamRecord,
    Program,
    sets_values,
)
from .regions import Box, box_union_covers, contains, flat_range_boxes, intersect

__all__ = [
    "base_ops",
    "flat_range_boxes",
    "op_programs",
    "replay_box",
    "replay_flat",
    "replay_full",
    "replay_runs",
    "write_buffers",
    "write_pieces",
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


def _check_ops(record: ParamRecord, extra: Sequence[CapturedOp]) -> list[CapturedOp]:
    ops = [*extra, *record.ops]
    if extra:
        fills = [op.region for op in ops if sets_values(op.action)]
        covered = box_union_covers(fills, record.shape)
    else:  # the record's own operations: what planning asked already
        covered = record.covers_all()
    if not covered:
        raise ShardInitError(
            f"parameter {record.name}: init_fn sets only part of it and nothing sets the "
            "rest (no rule or torch.nn default to start from); give it a rule or make "
            "init_fn fill all of it"
        )
    return ops


def replay_box(
    record: ParamRecord,
    seed: int,
    box: Sequence[tuple[int, int]],
    out: torch.Tensor | None = None,
    *,
    device: DeviceLike = None,
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
        out = torch.empty(shape, dtype=record.dtype, device=resolve_device(device))
    elif tuple(out.shape) != shape or out.dtype != record.dtype:
        raise ShardInitError(
            f"parameter {record.name}: out has shape {tuple(out.shape)} and dtype "
            f"{out.dtype}, the box needs {shape} and {record.dtype}"
        )
    write_pieces(record, seed, [(local_box, out)], prior=prior)
    return out


#: A box of the global tensor and the tensor (its shape, any strides) that holds it.
Piece = tuple[Box, torch.Tensor]


def write_pieces(
    record: ParamRecord,
    seed: int,
    pieces: Sequence[Piece],
    *,
    prior: Sequence[CapturedOp] = (),
    deferred: DeferredFills | None = None,
) -> None:
    """The one writer of a parameter's values: each of ``pieces`` (disjoint boxes of the
    region this rank holds, with the tensors they go to) gets the value of the LAST
    operation covering each element. Operation by operation, its program is trimmed to
    each piece's part it is the last to cover and written there
    (:func:`.evaluate.write_program`); a program that is not elementwise (orthogonal) is
    computed once over the hull of those parts and copied out, so the matrix is computed
    once per operation and region, not per piece. An operation that is one stream-v1
    fill (most init code: ``normal_``, ``zeros_``) is that fill, written without
    building its program; the programs are built only when one is more. ``deferred``:
    where the fills may be left when one operation writes every piece (see
    :class:`shardinit._fill.DeferredFills`); where several do, a later one overwrites
    part of an earlier one's, in order, at once."""
    ops = _check_ops(record, prior)
    visible = _visible_parts(ops, pieces)
    if deferred is not None and sum(1 for parts in visible if parts) > 1:
        deferred = None
    spec: ParamSpec | None = None  # the parameter's, made (and checked) once
    programs: list[Expr] | None = None
    # Materialize writes every parameter under one no_grad already: no switch per call.
    with torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext():
        for index, (op, parts) in enumerate(zip(ops, visible, strict=True)):
            if not parts:
                continue
            assert isinstance(op.action, Program), op.action  # Opaque is never in a record
            init = op.action.plain_init(record.dtype)
            if init is not None and (init.elementwise or len(parts) == 1):
                spec = _spec(record, seed, init, spec)
                for part, target in parts:
                    write_fill(spec, part, target, deferred)
                continue
            spec = _spec(record, seed, Constant(0.0), spec)
            if programs is None:
                programs = op_programs(record, ops)
            _write_program(programs[index], spec, parts)


def _spec(record: ParamRecord, seed: int, init: Initializer, made: ParamSpec | None) -> ParamSpec:
    """``record``'s spec with ``init``: ``made`` (checked already) with it, or a new one."""
    if made is None:
        return ParamSpec(record.name, record.shape, record.dtype, init, seed=seed)
    return made if made.init is init else made.with_init(init)


def _visible_parts(ops: Sequence[CapturedOp], pieces: Sequence[Piece]) -> list[list[Piece]]:
    """Per operation, the parts of ``pieces`` it is the last to cover (with the views of
    the pieces' tensors that hold them)."""
    visible: list[list[Piece]] = [[] for _ in ops]
    last = ops[-1].region if ops else None
    for box, tensor in pieces:
        if last is not None and contains(last, box) and all(a < b for a, b in box):
            # The common case (one operation on all of it): the last operation overwrites
            # every earlier one on this piece, so the piece is all its part.
            visible[-1].append((box, tensor))
            continue
        covered = [intersect(op.region, box) for op in ops]
        for index, part in enumerate(covered):
            if part is None or any(
                later is not None and contains(later, part) for later in covered[index + 1 :]
            ):
                continue  # a later operation overwrites all of it: generate nothing
            held = tensor if part == box else tensor[_local_index(part, box)]
            visible[index].append((part, held))
    return visible


def _write_program(program: Expr, spec: ParamSpec, parts: Sequence[Piece]) -> None:
    """Writes ``program`` on each of ``parts``: per part when it is elementwise, else
    once over their hull, copied out."""
    if is_elementwise(program) or len(parts) == 1:
        for part, target in parts:
            write_program(simplify(program, part), spec, part, target)
        return
    ndim = len(spec.shape)
    hull = tuple(
        (min(part[d][0] for part, _ in parts), max(part[d][1] for part, _ in parts))
        for d in range(ndim)
    )
    shape = tuple(stop - start for start, stop in hull)
    whole = parts[0][1].new_empty(shape)  # the parameter's dtype, the pieces' device
    write_program(simplify(program, hull), spec, hull, whole)
    for part, target in parts:
        target.copy_(whole[_local_index(part, hull)])


def _local_index(part: Box, box: Box) -> tuple[slice, ...]:
    """Where ``part`` lies in a tensor holding ``box``."""
    return tuple(slice(p0 - b0, p1 - b0) for (p0, p1), (b0, _) in zip(part, box, strict=True))


def op_programs(record: ParamRecord, ops: Sequence[CapturedOp]) -> list[Expr]:
    """Per operation of ``ops`` (a record's, after what came before it), the program of
    the value it leaves, over the parameter's global coordinates. One that reads the
    values before it reads the program of the operations before it over its box (the
    last one covering each element wins, as a ``where`` of their boxes)."""
    ndim = len(record.shape)
    # Elements no operation set yet. A step may cover some (``w[:2].normal_();
    # w.mul_(2); w[2:].zero_()``), but :func:`_check_ops` has checked that operations
    # setting values cover every element, so a later one sets each of these again: this
    # value never reaches the result.
    before: Expr = Const(math.nan)
    # The fold is built only as far as a step reads it.
    last_step = max((k for k, op in enumerate(ops) if not sets_values(op.action)), default=-1)
    programs = []
    for index, op in enumerate(ops):
        assert isinstance(op.action, Program), op.action  # Opaque is never in a record
        prior = simplify(before, op.region) if op.action.reads_prior else before
        value = op.action.after(record.dtype, ndim, id(op), prior)
        programs.append(value)
        if index < last_step:
            before = where(in_box(op.region, record.shape), value, before)
    return programs


def replay_full(
    record: ParamRecord, seed: int, *, device: DeviceLike = None, prior: Sequence[CapturedOp] = ()
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
    deferred: DeferredFills | None = None,
) -> None:
    """Fills ``local``, the tensor holding the region ``runs`` (per dim, the runs of
    global indices it holds, as :func:`shardinit.placements.local_runs` gives them);
    ``deferred`` as :func:`write_pieces` takes it.
    """
    if all(len(dim_runs) == 1 for dim_runs in runs):  # one box, all of ``local``
        box = tuple((start, stop) for ((start, stop),) in runs)
        if [stop - start for start, stop in box] == list(local.shape):
            write_pieces(record, seed, [(box, local)], prior=prior, deferred=deferred)
            return
    pieces = []
    for piece in local_boxes(runs):
        index = tuple(
            slice(begin, begin + stop - start)
            for begin, (start, stop) in zip(piece.local_start, piece.global_box, strict=True)
        )
        pieces.append((piece.global_box, local[index]))
    write_pieces(record, seed, pieces, prior=prior, deferred=deferred)


def replay_flat(
    record: ParamRecord,
    seed: int,
    start: int,
    stop: int,
    out: torch.Tensor,
    *,
    prior: Sequence[CapturedOp] = (),
    deferred: DeferredFills | None = None,
) -> None:
    """Fills the 1-D ``out`` with flat elements ``[start, stop)`` of the row-major
    parameter (FSDP1 flat-shard ranges, ZeRO-3 partitions); ``deferred`` as
    :func:`write_pieces` takes it."""
    pieces = []
    for offset, piece in flat_range_boxes(record.shape, start, stop):
        count = math.prod(high - low for low, high in piece)
        shape = tuple(high - low for low, high in piece)
        pieces.append((piece, out[offset : offset + count].view(shape)))
    write_pieces(record, seed, pieces, prior=prior, deferred=deferred)


def write_buffers(module: nn.Module, captured: CapturedInit) -> list[str]:
    """Writes the buffer values ``captured.init_fn`` computed during the capture into
    ``module``'s buffers (allocate them first: this is called after ``materialize``
    allocated the module). A value of another shape or dtype than the buffer it goes to
    (init code assigned a new tensor) replaces it, on the buffer's device.

    Returns:
        The canonical names of the written buffers.

    Raises:
        ShardInitError: a computed buffer is missing from ``module`` (another model).
    """
    written = []
    for holder in buffer_holders(module):
        value = captured.buffer_values.get(holder.name)
        if value is None:
            continue
        old = holder.tensor
        with torch.no_grad():
            if old.shape == value.shape and old.dtype == value.dtype and not old.is_meta:
                old.copy_(value)
            else:
                holder.module._buffers[holder.attr] = value.to(device=old.device).clone()
        written.append(holder.name)
    missing = sorted(set(captured.buffers) - set(written))
    if missing:
        raise ShardInitError(f"buffers {missing} computed by init_fn are not in this model")
    return sorted(set(written))
