"""The one writer of parameters' values: a record's operations (:mod:`.actions`) on the
region a rank holds, from stream format v1.

A :class:`~.actions.ParamRecord` lists, in order, the operations applied to a parameter
(a rule's or default's fill, the constructor's value, ``init_fn``'s captured operations)
and the box of the GLOBAL tensor each one covers; each leaves an init program
(:mod:`.nodes`). Writing it on a local region (a box of the global tensor) gives every
element the value of the LAST operation that covered it: each program is compiled for
the intersection of its box with the local box only (:func:`.compile.compile_program`),
and not at all where a later one covers it. A program that reads the values before it
(a scale) reads them as the program of the operations before it over its box
(:func:`op_programs`), so the values never depend on the order pieces are written in,
and random values always come from the element's own position in the parameter's stream
(same name and seed for every op): disjoint regions never share values and the result
does not depend on the layout.

Example:
    >>> import torch, shardinit
    >>> from torch import nn
    >>> from shardinit.shard import writer
    >>> with torch.device("meta"):
    ...     emb = nn.Embedding(6, 4)
    >>> def init_fn():
    ...     emb.weight.data.normal_(mean=0.0, std=0.02)
    ...     emb.weight.data[2].zero_()
    >>> record = shardinit.capture_init(emb, init_fn)["weight"]
    >>> full = writer().full(record, seed=0)
    >>> torch.equal(writer().box(record, 0, ((2, 6), (0, 4))), full[2:6]), bool(full[2].any())
    (True, False)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._caches import BoundedMap
from .._fill import DeferredFills, Region, Registers, fill
from .._layout import Run, local_boxes
from .._validate import DeviceLike, resolve_device
from ..errors import ShardInitError, UnsupportedInitOpError
from ..init import Constant, Initializer
from ..spec import ParamSpec
from .actions import Action, CapturedOp, ParamRecord, check_all_set, program_of
from .cannot import Cannot, too_deep
from .compile import Compiled, compile_program, is_elementwise
from .coverage import Coverage
from .index import in_box
from .nodes import Const, Expr
from .regions import Box, contains, flat_range_boxes, intersect, whole
from .rewrite import simplify, where

__all__ = ["Piece", "Writer", "evaluate_whole", "op_programs"]

CONTIGUOUS = torch.contiguous_format

#: A box of the global tensor and the tensor (its shape, any strides) that holds it.
Piece = tuple[Box, torch.Tensor]


@dataclass(frozen=True)
class Writer:
    """Writes parameters' values through the one fill dispatch (:func:`shardinit._fill.
    fill`), with the settings of the call that built it: one per ``materialize`` (the
    plan's fill) and per ``init_*`` call (:func:`shardinit.shard.writer` reads the
    settings).

    Attributes:
        threads: the core's worker threads (the core runs a fill of elementwise values
            of at most one chunk on one thread whatever this is).
        chunk_bytes: the size of each pinned buffer of the host path to a CUDA tensor.
        deferred: where a fill of elementwise values straight into a CPU tensor (a
            stream's or a program's, of any size) may be left until the caller leaves its
            ``with`` block (:class:`shardinit._fill.DeferredFills`); None: every fill is
            written at once.
    """

    threads: int
    chunk_bytes: int
    deferred: DeferredFills | None = None

    def at_once(self) -> Writer:
        """This writer, writing every fill at once (none deferred)."""
        return self if self.deferred is None else Writer(self.threads, self.chunk_bytes)

    # ------------------------------------------------------------------ one region

    def write_stream(self, spec: ParamSpec, region: Region, out: torch.Tensor) -> None:
        """Writes ``region`` (a box, or flat elements from an ``int`` start) of
        ``spec``'s stream into ``out`` (checked: contiguous, the region's shape, the
        spec's dtype), at once."""
        fill(spec, region, out, threads=self.threads, chunk_bytes=self.chunk_bytes)

    def write_compiled(
        self, spec: ParamSpec, box: Box, target: torch.Tensor, compiled: Compiled
    ) -> None:
        """Writes ``compiled`` (keyed by ``spec``: its name, seed, global shape and
        dtype) on ``box`` (global coordinates) into ``target`` (the box's shape, any
        device and strides). Only a fill straight into a contiguous ``target`` may be
        deferred: a temporary is copied out at once."""
        if not target.numel():  # the box's shape: an empty box
            return
        direct = target.is_contiguous()
        out = target if direct else torch.empty_like(target, memory_format=CONTIGUOUS)
        registers = compiled if isinstance(compiled, Registers) else None
        if registers is None and spec.init is not compiled:
            # (spec.init is compiled: most fills, without an ABC's isinstance per fill)
            assert isinstance(compiled, Initializer)
            spec = spec.with_init(compiled)
        fill(
            spec,
            box,
            out,
            threads=self.threads,
            chunk_bytes=self.chunk_bytes,
            registers=registers,
            deferred=self.deferred if direct else None,
        )
        if not direct:
            target.copy_(out)

    # ------------------------------------------------------------------ records

    def write_pieces(
        self,
        record: ParamRecord,
        seed: int,
        pieces: Sequence[Piece],
        *,
        prior: Sequence[CapturedOp] = (),
    ) -> None:
        """Writes ``record``'s values (after ``prior``, the operations before it: see
        :func:`~.actions.base_ops`) into each of ``pieces`` (disjoint boxes of the
        region this rank holds, with the tensors they go to): each element gets the
        value of the LAST operation covering it. Operation by operation, its program is
        compiled for each piece's part it is the last to cover and written there; a
        program that is not elementwise (orthogonal) is computed once over the hull of
        those parts and copied out, so the matrix is computed once per operation and
        region, not per piece. An operation that is one stream-v1 fill (most init code:
        ``normal_``, ``zeros_``) is that fill, without building its program; the
        programs are built only when one is more. The fills may be deferred only when
        one operation writes every piece; where several do, a later one overwrites part
        of an earlier one's, in order, at once."""
        ops = _check_ops(record, prior)
        if ops and len(pieces) == 1 and self._write_last_plain(record, seed, ops[-1], *pieces[0]):
            return
        visible = _visible_parts(ops, pieces)
        # The fills of several operations are written at once: their order matters.
        at_once = self.at_once()
        fills = self if sum(1 for parts in visible if parts) == 1 else at_once
        # The parameter's specs, per initializer (made and checked once each).
        specs: dict[int, tuple[Initializer, ParamSpec]] = {}
        programs: list[Expr] | None = None
        # Materialize writes every parameter under one no_grad already: no switch per call.
        grad = torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext()
        with grad, _refused_if_too_deep(record):
            for index, (op, parts) in enumerate(zip(ops, visible, strict=True)):
                if not parts:
                    continue
                assert isinstance(op.action, Action), op.action  # Opaque is never in a record
                init = op.action.plain_init(record.dtype)
                if init is not None and (init.elementwise or len(parts) == 1):
                    spec = _spec_of(record, seed, init, specs)
                    for part, target in parts:
                        fills.write_compiled(spec, part, target, init)
                    continue
                spec = _spec_of(record, seed, _PROGRAMS_INIT, specs)
                if programs is None:
                    programs = op_programs(record, ops)
                fills._write_program(programs[index], spec, parts)

    def _write_last_plain(
        self, record: ParamRecord, seed: int, last: CapturedOp, box: Box, target: torch.Tensor
    ) -> bool:
        """The common case of :meth:`write_pieces` (most parameters: one whole-tensor
        ``normal_``, ``zeros_``, default or rule, last): one piece that the last operation
        covers all of with one stream-v1 fill. Writes it and answers True; else writes
        nothing and answers False. (The general sweep gives the same: every earlier
        operation is overwritten there.)"""
        assert isinstance(last.action, Action), last.action  # Opaque is never in a record
        # ``target`` holds ``box``: an empty one has no element (the sweep skips it).
        if not target.numel() or (last.region != box and not contains(last.region, box)):
            return False
        init = last.action.plain_init(record.dtype)
        if init is None:
            return False
        spec = _spec(record, seed, init, None)
        if torch.is_grad_enabled():
            with torch.no_grad():
                self.write_compiled(spec, box, target, init)
        else:  # materialize writes every parameter under one no_grad: no switch per call
            self.write_compiled(spec, box, target, init)
        return True

    def _write_program(self, program: Expr, spec: ParamSpec, parts: Sequence[Piece]) -> None:
        """Writes ``program`` on each of ``parts``: per part when it is elementwise, else
        once over their hull, copied out."""
        shape = spec.shape
        if len(parts) == 1 or is_elementwise(program):  # (one part: no walk asked)
            for part, target in parts:
                self.write_compiled(
                    spec, part, target, compile_program(simplify(program, part), shape)
                )
            return
        hull = tuple(
            (min(part[d][0] for part, _ in parts), max(part[d][1] for part, _ in parts))
            for d in range(len(shape))
        )
        held = parts[0][1].new_empty([stop - start for start, stop in hull])
        # At once: the copies below read what it wrote.
        self.at_once().write_compiled(
            spec, hull, held, compile_program(simplify(program, hull), shape)
        )
        for part, target in parts:
            target.copy_(held[_local_index(part, hull)])

    def box(
        self,
        record: ParamRecord,
        seed: int,
        box: Sequence[tuple[int, int]],
        out: torch.Tensor | None = None,
        *,
        device: DeviceLike = None,
        prior: Sequence[CapturedOp] = (),
    ) -> torch.Tensor:
        """The values of ``box`` (global coordinates) of the parameter after its
        operations, in ``out`` (the box's shape and the parameter's dtype, any strides)
        or a new tensor on ``device`` (default the CPU); ``prior`` as
        :meth:`write_pieces` takes it.

        Raises:
            ShardInitError: the operations do not cover every element, or ``out`` has
                the wrong shape or dtype.
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
        self.write_pieces(record, seed, [(local_box, out)], prior=prior)
        return out

    def full(
        self,
        record: ParamRecord,
        seed: int,
        *,
        device: DeviceLike = None,
        prior: Sequence[CapturedOp] = (),
    ) -> torch.Tensor:
        """The whole parameter after its operations (world 1)."""
        return self.box(record, seed, whole(record.shape), device=device, prior=prior)

    def write_runs(
        self,
        record: ParamRecord,
        seed: int,
        runs: Sequence[Sequence[Run]],
        local: torch.Tensor,
        *,
        prior: Sequence[CapturedOp] = (),
    ) -> None:
        """Fills ``local``, the tensor holding the region ``runs`` (per dim, the runs of
        global indices it holds, as :func:`shardinit._layout.layout_runs` gives them)."""
        box = _one_box(runs, local.shape)
        if box is not None:  # one box, all of ``local`` (a plain parameter, most shards)
            # write_pieces' common case without its sweep's setup: the record's own
            # operations cover all of it (its check), the last one all of ``local``.
            if (
                not prior
                and record.covers_all()
                and record.ops
                and self._write_last_plain(record, seed, record.ops[-1], box, local)
            ):
                return
            self.write_pieces(record, seed, [(box, local)], prior=prior)
            return
        pieces = []
        for piece in local_boxes(runs):
            index = tuple(
                slice(begin, begin + stop - start)
                for begin, (start, stop) in zip(piece.local_start, piece.global_box, strict=True)
            )
            pieces.append((piece.global_box, local[index]))
        self.write_pieces(record, seed, pieces, prior=prior)

    def write_flat(
        self,
        record: ParamRecord,
        seed: int,
        start: int,
        stop: int,
        out: torch.Tensor,
        *,
        prior: Sequence[CapturedOp] = (),
    ) -> None:
        """Fills the 1-D ``out`` with flat elements ``[start, stop)`` of the row-major
        parameter (FSDP1 flat-shard ranges, ZeRO-3 partitions)."""
        pieces = []
        for offset, piece in flat_range_boxes(record.shape, start, stop):
            count = math.prod(high - low for low, high in piece)
            shape = tuple(high - low for low, high in piece)
            pieces.append((piece, out[offset : offset + count].view(shape)))
        self.write_pieces(record, seed, pieces, prior=prior)


def _one_box(runs: Sequence[Sequence[Run]], shape: Sequence[int]) -> Box | None:
    """The box ``runs`` hold when it is one run per dim that together fill a tensor of
    ``shape`` (all of it, in order), else None."""
    if len(runs) != len(shape):
        return None
    box = []
    for dim_runs, size in zip(runs, shape, strict=True):
        if len(dim_runs) != 1:
            return None
        start, stop = dim_runs[0]
        if stop - start != size:
            return None
        box.append((start, stop))
    return tuple(box)


@contextlib.contextmanager
def _refused_if_too_deep(record: ParamRecord) -> Iterator[None]:
    """A program compiled here that nests past Python's recursion limit is refused,
    naming the parameter: a limit of shardinit's, never a crash in torch's name."""
    try:
        yield
    except RecursionError:
        raise UnsupportedInitOpError(f"parameter {record.name!r}: {too_deep()}") from None


def _check_ops(record: ParamRecord, extra: Sequence[CapturedOp]) -> list[CapturedOp]:
    ops = [*extra, *record.ops]
    if not extra and record.covers_all():  # the record's own: what planning asked already
        return ops
    try:
        check_all_set(ops, record.shape)
    except Cannot as why:
        raise ShardInitError(
            f"parameter {record.name}: init_fn sets only part of it ({why}) and nothing "
            "sets the rest (no rule or torch.nn default to start from); give it a rule or "
            "make init_fn fill all of it"
        ) from None
    return ops


def _spec(record: ParamRecord, seed: int, init: Initializer, made: ParamSpec | None) -> ParamSpec:
    """``record``'s spec with ``init``: ``made`` (checked already) with it, or a new one:
    renamed from one checked for another parameter of the same shape, dtype, initializer
    and seed (a model's many layers of one shape), else made and checked."""
    if made is not None:
        return made if made.init is init else made.with_init(init)
    # By the initializer object (a record's action holds one, shared by a model's many
    # layers of one default): no hash of its fields per parameter. The spec kept holds
    # it, so its id is not reused while the entry lives.
    key = (record.shape, record.dtype, id(init), seed)
    like = _SPECS.get(key)
    if like is not None and like.init is init:
        return like._renamed(record.name, init)
    try:
        spec = ParamSpec(record.name, record.shape, record.dtype, init, seed=seed)
    except ShardInitError as error:  # (a constructor's complex parameter, ...): name it
        raise type(error)(f"parameter {record.name}: {error}") from None
    _SPECS.put(key, spec)
    return spec


def _spec_of(
    record: ParamRecord,
    seed: int,
    init: Initializer,
    specs: dict[int, tuple[Initializer, ParamSpec]],
) -> ParamSpec:
    """:func:`_spec` of one :meth:`Writer.write_pieces` call, which keeps ``specs`` by
    the initializer object (held beside its spec, so its id is not reused): operations
    that alternate a fill and a program (a loop of ``normal_`` and a strided step, each
    row) check each initializer once, not once per operation."""
    kept = specs.get(id(init))
    if kept is None:
        made = next(iter(specs.values()), (None, None))[1]
        kept = specs[id(init)] = (init, _spec(record, seed, init, made))
    return kept[1]


#: The initializer of a spec that keys a program (its values are the program's: the
#: fill reads only the spec's name, seed, shape and dtype): one object, so a record's
#: programs share one spec.
_PROGRAMS_INIT = Constant(0.0)

#: A checked spec per shape, dtype, initializer object and seed, that :func:`_spec`
#: renames.
_SPECS: BoundedMap[tuple[object, ...], ParamSpec] = BoundedMap()


def _visible_parts(ops: Sequence[CapturedOp], pieces: Sequence[Piece]) -> list[list[Piece]]:
    """Per operation, the parts of ``pieces`` it is the last to cover in part (with the
    views of the pieces' tensors that hold them): a part that later operations cover
    all of is overwritten, so nothing is generated there. Swept from the last operation
    back, with what the later ones cover kept merged (:class:`~.coverage.Coverage`):
    a parameter written row by row costs one pass, not one per row."""
    visible: list[list[Piece]] = [[] for _ in ops]
    last = ops[-1].region if ops else None
    for box, tensor in pieces:
        if last is not None and contains(last, box) and all(a < b for a, b in box):
            # The common case (one operation on all of it): the last operation overwrites
            # every earlier one on this piece, so the piece is all its part.
            visible[-1].append((box, tensor))
            continue
        later = Coverage(len(box))
        for index in range(len(ops) - 1, -1, -1):
            part = intersect(ops[index].region, box)
            if part is None or later.covers(part):
                continue  # later operations overwrite all of it: generate nothing
            later.add(part)
            held = tensor if part == box else tensor[_local_index(part, box)]
            visible[index].append((part, held))
    return visible


def _local_index(part: Box, box: Box) -> tuple[slice, ...]:
    """Where ``part`` lies in a tensor holding ``box``."""
    return tuple(slice(p0 - b0, p1 - b0) for (p0, p1), (b0, _) in zip(part, box, strict=True))


def evaluate_whole(expr: Expr, shape: tuple[int, ...]) -> torch.Tensor:
    """A deterministic program (no random source) over a tensor of ``shape``, whole, in
    binary64 on the CPU: values the capture needs at once (the positions an index tensor
    names). Written on the calling thread: such a table is small, and the values never
    depend on the threads (a user's settings, :func:`shardinit.shard.writer`, are for
    the parameters' fills)."""
    op = CapturedOp(whole(shape), program_of(expr), "value", "<capture>")
    record = ParamRecord("value", shape, torch.float64, (op,))
    return Writer(threads=1, chunk_bytes=_CAPTURE_CHUNK_BYTES).full(record, seed=0)


#: :func:`evaluate_whole`'s chunk of a copy to a CUDA tensor: none (it writes on the CPU).
_CAPTURE_CHUNK_BYTES = 1 << 20


def op_programs(record: ParamRecord, ops: Sequence[CapturedOp]) -> list[Expr]:
    """Per operation of ``ops`` (a record's, after what came before it), the program of
    the value it leaves, over the parameter's global coordinates. One that reads the
    values before it reads the programs of the operations before it that reach its box
    (the last one covering each element wins, as a ``where`` of their boxes)."""
    ndim = len(record.shape)
    programs: list[Expr] = []
    reach = _Reach(ops)
    for index, op in enumerate(ops):
        assert isinstance(op.action, Action), op.action  # Opaque is never in a record
        prior: Expr = _UNREAD
        if op.action.reads_prior:
            meeting = reach.before(index, op.region)
            prior = _prior_over(record, ops, programs, op.region, meeting)
        programs.append(op.action.after(record.dtype, ndim, id(op), prior))
    return programs


#: The value before an operation that does not read it.
_UNREAD = Const(math.nan)


class _Reach:
    """Which operations of a record before a given one meet a box, last first, found
    lazily: the reader stops at the last one that set all of the box (a step on a row
    just written reads that write alone), so the last few are asked one by one; past
    them (a loop of steps through strided rows, ``w[i, ::2].mul_(2)``, whose row was
    last set by the default before the loop) the rest are compared as arrays of their
    bounds, one comparison of all per question, not one Python test per pair."""

    #: How many of the operations just before are asked one by one.
    ONE_BY_ONE = 32

    def __init__(self, ops: Sequence[CapturedOp]) -> None:
        self.ops = ops
        self.bounds: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None

    def before(self, index: int, box: Box) -> Iterator[int]:
        """The operations before ``index`` that meet ``box``, last first."""
        ops = self.ops
        near = max(index - self.ONE_BY_ONE, 0)
        for i in range(index - 1, near - 1, -1):
            if intersect(ops[i].region, box) is not None:
                yield i
        if near == 0:
            return
        if self.bounds is None:  # the arrays, made once per record at the first need
            regions = np.array([op.region for op in ops], dtype=np.int64).reshape(
                len(ops), len(box), 2
            )
            self.bounds = regions[:, :, 0], regions[:, :, 1]
        starts, stops = self.bounds
        low = np.array([start for start, _ in box], dtype=np.int64)
        high = np.array([stop for _, stop in box], dtype=np.int64)
        meets = np.all((starts[:near] < high) & (stops[:near] > low), axis=1)
        yield from (int(i) for i in np.flatnonzero(meets)[::-1])


def _prior_over(
    record: ParamRecord,
    ops: Sequence[CapturedOp],
    programs: Sequence[Expr],
    box: Box,
    meeting: Iterable[int],
) -> Expr:
    """The value of the elements of ``box`` after the operations whose programs are
    ``programs`` (the first of ``ops``), simplified over it, given the operations that
    meet it, last first (:class:`_Reach`). Each element reads the program of the last
    operation whose region holds it: that program is the value after it over all its
    region (one that reads the values before it read them there already), so nothing
    before it is read again there. A step on a row just written reads that row's write
    alone, and a loop of steps through strided rows, whose boxes overlap, reads each
    earlier step once, not nested in every later one (that was exponential)."""
    # Elements no operation set yet. A step may cover some (``w[:2].normal_();
    # w.mul_(2); w[2:].zero_()``), but :func:`_check_ops` has checked that operations
    # setting values cover every element, so a later one sets each of these again: this
    # value never reaches the result.
    value: Expr = Const(math.nan)
    reaching: list[int] = []
    later = Coverage(len(box))
    for index in meeting:
        part = intersect(ops[index].region, box)
        if part is None or later.covers(part):
            continue  # every element of it reads a later program
        if part == box:
            value = programs[index]
            break
        reaching.append(index)
        later.add(part)
        if later.covers(box):
            break
    for index in reversed(reaching):
        value = where(in_box(ops[index].region, record.shape), programs[index], value)
    return simplify(value, box)
