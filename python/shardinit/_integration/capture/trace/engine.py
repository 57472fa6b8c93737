"""The expression engine of a capture: reading values and writing records, over a
:class:`.store.RecordStore`, as init programs (:mod:`shardinit._program.nodes`). The
components the dispatch calls build on it: :mod:`.steps` (sources and elementwise
steps), :mod:`.copies`, :mod:`.coordinates`, :mod:`.concrete`.

* **Values of tensors.** A followed temporary's value is the fold of what was written
  to it (its ops, last one wins, as ``where`` of their boxes); a view of it reads that
  fold at the view's positions; a CPU tensor init code computed otherwise is a table
  of its values (refused when torch's random generator was used: those values would
  not be the stream's); a parameter's values are unknown: steps of them are computed
  as far as their shape goes (``ones_like(p * 2)``), and the read is refused, naming
  the parameter and the read, where their values reach a parameter, a buffer or any
  operation but an elementwise step (:attr:`.tracks.Track.reads`).
* **Writes**: a fill (:mod:`.translations`) lands on the box its view covers; an
  expression over a view's coordinates lands on the boxes of its base the view covers,
  read back at each element's own coordinates; random values land in one place only
  (:mod:`.claims`).

A write the engine cannot describe refuses (``store.fail``) when its target is a
parameter and makes a temporary opaque otherwise: no refusal is caught to choose a route.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ...._caches import BoundedMap, cached
from ...._program.actions import (
    Action,
    CapturedOp,
    Computed,
    ComputedOnPrior,
    Fill,
    Opaque,
    Selected,
    TrackAction,
    program_of,
    sets_values,
)
from ...._program.cannot import Cannot
from ...._program.index import (
    as_lin,
    broadcast_coords,
    contiguous_index,
    flat_of_box,
    in_box,
    index_op,
    strided_coords,
    unravel,
)
from ...._program.nodes import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Prior,
    Round,
    Source,
    Table,
    TableData,
    Where,
    bad_reasons,
    contains,
    random_key,
)
from ...._program.regions import (
    Box,
    FlatRun,
    cut_by,
    flat_range_boxes,
    intersect,
    map_runs_from,
    moved_rows,
    row_shift,
    view_region,
    view_runs,
    view_span,
    whole,
)
from ...._program.regions import contains as region_contains
from ...._program.rewrite import (
    combine,
    reindex,
    simplify,
    substitute_prior,
    where,
    without_branch,
)
from ...._program.selection import grid_coords
from ...._torch_compat import kernels_only, stored_strides, torch_function_disabled, tree_leaves
from ....errors import ShardInitError
from ....init import Constant
from ....spec import ParamSpec
from ..ops import Translation
from .before import Before, on_before
from .claims import RandomPlaces
from .folds import Folds, never_written, unknown_values
from .frames import user_frame
from .store import RecordStore
from .structured import fill_action
from .tracks import Track, Written

__all__ = ["Engine", "narrower", "read_reason", "repeat_reason"]

#: The pieces of a parameter past which a step over them is recorded piece by piece
#: (:meth:`Engine.on_prior`): below, one value with a ``where`` per write reaching it.
PIECEWISE_PAST = 64

# A write into a buffer's real stand-in: only its region matters (the values are real).
BUFFER_WRITE = Constant(0.0)


def _constants_only(track: Track) -> bool:
    """Whether every write to ``track`` fills a constant (its value holds no random
    source)."""
    actions = (op.action for op in track.ops)
    return all(isinstance(a, Fill) and isinstance(a.init, Constant) for a in actions)


def op_value(op: CapturedOp, track: Track, prior: Expr) -> Expr:
    """What ``op`` leaves in the elements it covers, given their value before."""
    if isinstance(op.action, Opaque):
        return Bad(op.action.why)
    return op.action.after(track.base.dtype, len(track.shape), id(op), prior)


class Engine:
    """Values and writes, over a :class:`.store.RecordStore` (module docstring)."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self.rng_start = torch.default_generator.get_state()
        self.folds: dict[int, tuple[tuple[int, bool], CapturedOp | None, Expr]] = {}
        self.left_folds = Folds(op_value)
        self.places = RandomPlaces(store)

    # ----------------------------------------------------------------- values

    def rng_untouched(self) -> bool:
        return bool(torch.equal(torch.default_generator.get_state(), self.rng_start))

    def table_of(self, value: torch.Tensor) -> Expr:
        """The values of a tensor shardinit did not follow (a CPU tensor init code
        computed), over its own coordinates."""
        unknown = self.store.unknown_of(value)
        if unknown is not None:
            return Bad(unknown.why)
        if value.device.type != "cpu":
            return Bad(
                f"the values of a {value.device.type} tensor computed by operations "
                "shardinit does not follow (not elementwise, or not recorded)"
            )
        with kernels_only():  # the capture's own reads of a CPU tensor: no mode sees them
            return self._cpu_table(value)

    def _cpu_table(self, value: torch.Tensor) -> Expr:
        if value.is_complex():
            return Bad("complex values")
        if _inexact_integers(value):
            return Bad("integer values beyond 2**53, which binary64 tables do not hold exactly")
        if not self.rng_untouched():
            return Bad(
                "values computed after init code drew from torch's random generator "
                "(only the stream gives random values; use torch.rand/randn or fills)"
            )
        return constants_table(value)

    def folded(self, track: Track) -> Expr:
        """The value of every element of ``track``'s base, over its coordinates (the same
        expression object while nothing is written to it)."""
        last = track.ops[-1] if track.ops else None
        key = (len(track.ops), track.emptied)  # emptied: unwritten elements unknown
        cached = self.folds.get(id(track))
        if cached is not None and cached[0] == key and cached[1] is last:
            return cached[2]
        with torch_function_disabled():  # a fold reads layouts only (no device mode call)
            value, of_memory = self.fold(track)
        if not of_memory:  # a table of the tensor's memory is read afresh: a write may
            self.folds[id(track)] = (key, last, value)  # be recorded, then run
        return value

    def folded_over(self, track: Track, box: Box) -> Expr:
        """The value of ``track`` over ``box``: what :meth:`folded` gives, simplified
        over the box. For a parameter it is folded from the operations that reach the
        box alone, from the last one that set all of it on: a step on a row just
        written (``w[i].normal_(); w[i].mul_(s)`` in a loop) reads that row's write,
        not a fold of every row before it (one node per row: quadratic, and deeper
        than Python's recursion limit past a few hundred rows): :func:`_reaching`."""
        if track.kind != "param":
            return simplify(self.folded(track), box)
        never = never_written(track)
        if not track.touched(box):  # a part nothing wrote yet (the next row of a loop)
            return simplify(never, box)
        hits = _reaching(track, box)
        value = never
        if hits and sets_values(hits[0].action) and region_contains(hits[0].region, box):
            value = op_value(hits[0], track, never)  # it reads nothing before it
            hits = hits[1:]
        for op in hits:
            written = op_value(op, track, value)
            value = where(in_box(op.region, track.shape), written, value)
        if track.written(whole(track.shape)):  # as fold: never selected, dropped
            value = _drop_branch(value, never)
        return simplify(value, box)

    def fold(self, track: Track) -> tuple[Expr, bool]:
        """The fold of ``track``'s writes, and whether it is instead the table of its
        CPU memory (a temporary of values torch computed, no program describes)."""
        value, never, random = self.left_folds.fold(track)
        if track.written(whole(track.shape)):
            value = _drop_branch(value, never)  # every element written: never selected
        computed_on_cpu = track.base.device.type == "cpu" and track.kind == "temp"
        if (
            computed_on_cpu
            and not (random or track.from_random or self.store.marked(track))
            and bad_reasons(value)
        ):
            return self.table_of(track.base), True
        return value, False

    def value_of(self, value: Any, op: str) -> Expr:
        """The value of an operand at each of its own coordinates. (A view of) a
        parameter has the values ``init_fn`` wrote to it so far (they may go back into
        the same parameter only, :meth:`carry_read`); where it wrote none, a
        :class:`Bad` naming the parameter and the read (refused where it reaches a
        parameter; its shape alone may be used, as ``ones_like(p * 0.5)`` does)."""
        if isinstance(value, (bool, int, float)):
            return Const(float(value))
        if not isinstance(value, torch.Tensor):
            return Bad(f"an operand of type {type(value).__name__}")
        track = self.store.lookup(value)
        if track is None or track.kind == "buffer":  # a buffer's where known: _unknown_read
            return _unknown_read(self, value, track) or self.table_of(value)
        with torch_function_disabled():  # its own layout (see torch_function_disabled)
            if value.dtype != track.base.dtype:
                return Bad(f"a view of {track.label} as another dtype")
            offset = int(value.storage_offset() - track.base.storage_offset())
            shape, stride = value.shape, stored_strides(value)
        coords, repeats = strided_coords(shape, stride, offset, track.shape)
        repeat = None if repeats is None else repeat_reason(op)
        read = reindex(self.folded(track), coords, whole(shape), repeat)
        if track.kind == "param" and (
            bad_reasons(read) or (not _box_read(coords) and _reads_before(read))
        ):  # values before init_fn are read at their own positions only: .before
            return Bad(read_reason((track, f"{op} at {user_frame()}")))
        return read

    def read_in(self, tree: Any, op: str) -> list[tuple[Track, str]]:
        """The parameters whose values the tensors in ``tree`` carry, read by ``op`` now
        or into a temporary before (:attr:`.tracks.Track.reads`), each with its read."""
        reads: list[tuple[Track, str]] = []
        for leaf in tree_leaves(tree):
            track = self.store.lookup(leaf)
            if track is not None and track.kind == "param":
                _merge_reads(reads, [(track, f"{op} at {self.store.where()}")])
            elif track is not None:
                _merge_reads(reads, track.reads)
        return reads

    def carry_read(self, target: Track, tree: Any, op: str) -> None:
        """``target`` takes values from the tensors in ``tree``: a temporary carries the
        parameter reads they carry; a parameter takes only its own values (random ones
        are drawn from the destination's own stream, so another parameter's would not
        be the values read); a buffer (a real tensor) takes none.

        Raises:
            UnsupportedInitOpError: a buffer, or another parameter, takes values read
                from a parameter.
        """
        reads = self.read_in(tree, op)
        if target.kind == "temp":
            _merge_reads(target.reads, reads)
            if any(self.random(track) for track in self.store.followed(tree)):
                # Its CPU values (if any) were computed from torch's draws, which the
                # capture does not keep apart: never a table (random values that met
                # in one element stay refused however many steps follow).
                target.from_random = True
            return
        for read in reads:
            if read[0] is not target:
                raise self.store.fail(target, op, read_reason(read))

    def known(self, track: Track) -> bool:
        """Whether the values of followed ``track`` are all known at capture (a buffer's
        real ones; a temporary free of random sources, opaque writes and parameter
        reads), so that torch's result of an operation on them is eager's."""
        if track.kind == "buffer":
            return True
        if track.kind != "temp" or track.from_random or track.reads:
            return False
        return not contains(self.folded(track), (Source, Bad, Prior))

    def random(self, track: Track) -> bool:
        """Whether a followed temporary's values depend on random values (known without
        its fold where it holds constants' fills only: a table copied whole)."""
        if track.kind != "temp" or (not track.from_random and _constants_only(track)):
            return False
        return track.from_random or contains(self.folded(track), Source)

    def operand(self, value: Any, shape: Sequence[int], op: str) -> Expr:
        """An operand's value broadcast to ``shape``."""
        if isinstance(value, torch.Tensor) and not _broadcasts_to(tuple(value.shape), shape):
            # torch's own error, as eager raises it (the net refuses it, naming the op)
            torch.broadcast_to(torch.empty(value.shape, device="meta"), tuple(shape))
            followed = self.store.followed(value)
            raise self.store.fail(
                followed[0] if followed else "an operand", op,
                f"an operand of shape {tuple(value.shape)} does not broadcast to {tuple(shape)}",
            )  # fmt: skip
        expr = self.value_of(value, op)
        if not isinstance(value, torch.Tensor) or (value.dim() == 0 and not random_key(expr)):
            return expr  # a number, or a 0-d value with nothing random: the same everywhere
        coords, stretched = broadcast_coords(tuple(value.shape), tuple(shape))
        why = repeat_reason(op) if stretched else None
        return reindex(expr, coords, whole(shape), why)

    # ----------------------------------------------------------------- writes

    def action_of(self, track: Track, expr: Expr, op: str) -> TrackAction:
        """The action of writing ``expr``; :class:`Bad` values are refused for a
        parameter and make a temporary opaque."""
        reasons = bad_reasons(expr)
        if reasons:
            if track.kind == "param":
                raise self.store.fail(track, op, reasons[0])
            return Opaque(reasons[0])
        if contains(expr, Prior):
            return ComputedOnPrior(expr)  # reads the values before init_fn: .before
        if track.kind == "temp" and track.reads and contains(expr, Source):
            # A parameter's random values (a clone of it) are those values at their
            # places (Source.at), not a fill drawn where the temporary lands: kept so.
            return Computed(expr)
        if _narrower(expr, track):
            return Computed(_kept_rounding(expr))
        if _nonfinite_constant(expr):  # a program's (stream v1 fills finite constants)
            return Computed(Binary("mul", expr, Const(1.0)))
        if contains(expr, Before):
            # A parameter's values before init_fn, carried by a temporary: a program of
            # them, never the plain fill of Before's stand-in initializer (no value).
            return Computed(expr)
        return program_of(expr)

    def record(self, track: Track, view: torch.Tensor, action: TrackAction, op: str) -> None:
        """Records ``action`` on the box ``view`` covers (:meth:`.store.RecordStore.append`);
        a fill of a parameter must make a valid stream-v1 parameter.

        Raises:
            UnsupportedInitOpError: a parameter's region is no box, or its fill is invalid
                for it (a constant that overflows its dtype, ...).
        """
        if track.kind == "param" and isinstance(action, Fill):
            try:  # the capture's edge (store.refusing, without its context manager)
                _check_fill(track, action)
            except Cannot as cannot:
                raise self.store.fail(track, op, cannot.reason) from None
        recorded = self.store.append(track, view, action, op)
        if recorded is not None:  # (an Opaque the store made of it draws nothing)
            self.places.recorded(track, recorded, op)
            if isinstance(action, Fill) and _covers_all(track, view, recorded.region):
                track.reads.clear()  # a fill of all of it: no value read before is left

    def cannot(self, track: Track, view: torch.Tensor, cannot: Cannot, op: str) -> None:
        """What ``op`` cannot give on ``view`` of ``track``: refused on a parameter (the
        capture's edge), on a temporary its values there become opaque."""
        if track.kind == "param":
            raise self.store.fail(track, op, cannot.reason)
        self.record(track, view, Opaque(cannot.reason), op)

    def write(
        self, track: Track, view: torch.Tensor, entry: Translation, values: list[Any], op: str
    ) -> None:
        """Records one translated fill (``entry`` with argument ``values``); an invalid
        one is refused on a parameter and opaque on a temporary."""
        if track.kind == "buffer":
            self.record(track, view, Fill(BUFFER_WRITE), op)
            return
        aligned = entry.kind in ("eye", "dirac")
        region = self.store.region(track, view, op) if aligned else None
        try:
            made = fill_action(track, view, entry.kind, values, op, region)
        except Cannot as cannot:
            if track.kind == "param":
                raise self.store.fail(track, op, cannot.reason) from None
            self.record(track, view, Opaque(f"{op}: {cannot}"), op)
            return
        self.record(track, view, made, op)

    def append(self, track: Track, box: Box, expr: Expr, op: str, where_: str) -> None:
        """Appends the write of ``expr`` on ``box``. An in-place step reads the values
        before it as the fold of what was written (so a recorded program never reads
        memory: it is one computation from sources, rounded once at the end)."""
        parts = [(box, expr)]
        folded: Callable[[Track, Box], Expr] = self.folded_over
        if contains(expr, Prior):
            if track.kind == "param" and track.written(whole(track.shape)):
                folded = _PerBox(self.folded_over)  # (asked again by land: _PerBox)
            parts = self.on_prior(track, box, expr, folded)
        where_at = f"{op} at {self.store.where()}" if track.kind == "param" else ""
        for part, value in parts:
            if track.kind == "param":
                value, kept = on_before(self.store, track, part, expr, value, op)
                self.places.land(track, part, value, op, where_at, folded)
                value = kept
            self.store.add(track, CapturedOp(part, self.action_of(track, value, op), op, where_))

    def on_prior(
        self, track: Track, box: Box, expr: Expr, folded: Callable[[Track, Box], Expr]
    ) -> list[tuple[Box, Expr]]:
        """``expr`` on ``box`` with the values before it. Where that meets two random
        values in one element (a step over parts that two fills wrote, ``normal_(w)``,
        ``normal_(w[0])``, then ``clamp_(w)``), the step on each part the earlier writes
        cut ``box`` into: each part reads the one fill that wrote it last. A step
        over more than :data:`PIECEWISE_PAST` pieces of a parameter (``clamp_(w)`` after
        a loop over its rows) is recorded on each piece, each reading its own writes: a
        value over all of them would nest a ``where`` per piece."""
        if track.kind == "param":
            pieces = track.pieces(box)
            if len(pieces) > PIECEWISE_PAST:
                return [(part, substitute_prior(expr, folded(track, part))) for part, _ in pieces]
        value = substitute_prior(expr, folded(track, box))
        if not bad_reasons(value):
            return [(box, value)]
        cuts = cut_by(box, [op.region for op in track.ops])
        if cuts is None:
            return [(box, value)]
        parts = [(part, substitute_prior(expr, folded(track, part))) for part in cuts]
        return [(box, value)] if any(bad_reasons(v) for _, v in parts) else parts

    def write_expr(self, target: Track, view: torch.Tensor, expr: Expr, op: str) -> None:
        """Writes ``expr`` (over ``view``'s coordinates) into ``view`` of ``target``."""
        self.places.new_write()
        if target.kind == "buffer":
            self.record(target, view, Fill(Constant(0.0)), op)
            return
        boxed = box_coords(view, target.base)
        if boxed is not None:  # one op on the box, read through the view's axes (in
            box, coords = boxed  # any order: a transposed or unfolded view too)
            self.append(target, box, reindex(expr, coords, list(box)), op, self.store.where())
            return
        if self.write_grid(target, view, expr, op):
            return
        try:
            runs = view_runs(view, target.base)
        except Cannot as cannot:
            if target.kind == "param":
                why = f"the view written is not a box ({cannot})"
                raise self.store.fail(target, op, why) from None
            self.record(target, view, Opaque(f"{op} wrote a view that is not a box"), op)
            return
        where_ = self.store.where()
        pieces = map_runs_from([(0, view.numel())], (0, view.numel()), runs)
        for box, value in spread(expr, tuple(view.shape), pieces, target.shape):
            self.append(target, box, value, op, where_)

    def write_grid(self, target: Track, view: torch.Tensor, expr: Expr, op: str) -> bool:
        """Writes ``expr`` through ``view`` where it is a strided slice of ``target``
        (:func:`grid_values`), as one write on the box around it; returns False, writing
        nothing, otherwise. A parameter records the values' action where the slice lies
        (:class:`~shardinit._program.actions.Selected`, as any write through such a view:
        its coverage is exact), and so does a temporary (the store makes a temporary's
        write through such a view of a fill opaque: a fill's draws are the temporary's,
        copied op by op; these are values)."""
        grid = grid_values(view, target.base, expr)
        if grid is None:
            return False
        box, cond, values = grid
        action = self.action_of(target, values, op)
        if target.kind == "param" or not isinstance(action, Action):
            self.record(target, view, action, op)  # (the store selects a parameter's)
        else:
            selected = CapturedOp(box, Selected(cond, action), op, self.store.where())
            self.store.add(target, selected)
            self.places.recorded(target, selected, op)
        return True


def grid_values(
    view: torch.Tensor, base: torch.Tensor, expr: Expr
) -> tuple[Box, Expr, Expr] | None:
    """``expr`` (over ``view``'s coordinates) written through ``view``, a strided slice
    of ``base`` (``t[:, 0::2] = sin(...)``, a sinusoidal table): the box around the
    slice, the condition naming its elements and the values read at the base's
    coordinates (:func:`~shardinit._program.selection.grid_coords`). None for any other
    view, or for values holding random sources or values before init_fn: the grid's
    coordinates are exact only where its condition holds, so a value drawn at an
    element's own index, read through them, would be claimed at positions the claims
    cannot see as its own; written by runs instead, each element at its exact position."""
    if contains(expr, (Source, Before)):
        return None
    with torch_function_disabled():  # their own layouts
        grid = grid_coords(view, base)
    if grid is None:
        return None
    box, cond, coords = grid
    return box, cond, reindex(expr, coords, list(box))


def spread(
    expr: Expr,
    source_shape: Sequence[int],
    pieces: Iterator[tuple[int, FlatRun]],
    target_shape: tuple[int, ...],
) -> Iterator[tuple[Box, Expr]]:
    """``expr`` (over a row-major tensor of ``source_shape``) on the boxes of a tensor of
    ``target_shape`` that ``pieces`` (source flat start, target flat run) cover, each
    read at the box's own coordinates: a write through a view that is no box and no
    strided slice, run by run (a function of the layouts alone, no engine state)."""
    for source_start, (start, stop) in pieces:
        for _, box in flat_range_boxes(target_shape, start, stop):
            ranges = [(a, b) for a, b in box]
            flat = flat_of_box(target_shape, source_start - start)
            coords = unravel(flat, tuple(source_shape), ranges)
            yield box, reindex(expr, coords, ranges)


def repeat_reason(op: str) -> str:
    """Why random values read through a broadcast or an expand are refused."""
    return (
        f"a broadcast or expand ({op} at {user_frame()}) repeats random values, which "
        "are drawn at each destination element's own index and cannot repeat"
    )


class _PerBox:
    """:meth:`Engine.folded_over` of a parameter kept per box for one write's parts,
    which :meth:`Engine.on_prior` and then the claim of each part's random values ask
    (a step over each of thousands of rows: the fold of each asked twice). The parts
    are disjoint, so the ops appended for earlier ones reach no later one; and the
    parameter was all written before (its never-written branch dropped already), so
    no append changes the fold of a part that it does not reach."""

    def __init__(self, folded_over: Callable[[Track, Box], Expr]) -> None:
        self.folded_over = folded_over
        self.kept: dict[Box, Expr] = {}

    def __call__(self, track: Track, box: Box) -> Expr:
        value = self.kept.get(box)
        if value is None:
            value = self.kept[box] = self.folded_over(track, box)
        return value


def _narrower(expr: Expr, track: Track) -> bool:
    """Whether ``expr`` rounds its value to a float dtype narrower than ``track``'s
    (a bfloat16 ``randn`` copied into a float32 parameter holds bfloat16's values)."""
    while isinstance(expr, Round):
        if narrower(expr.dtype, track.base.dtype):
            return True
        expr = expr.x
    return isinstance(expr, Source) and narrower(expr.dtype, track.base.dtype)


def _kept_rounding(expr: Expr) -> Expr:
    """A bare source rounded to a narrower dtype (:func:`_narrower`) as a program that
    rounds it there: a source times one (exact for every value), so that it is no bare
    source, which the writer would fill as stream v1 in the parameter's dtype."""
    dtypes = []
    while isinstance(expr, Round):
        dtypes.append(expr.dtype)
        expr = expr.x
    if isinstance(expr, Source):
        dtypes.append(expr.dtype)
    value: Expr = Binary("mul", expr, Const(1.0))
    for dtype in reversed(dtypes):
        value = Round(value, dtype)
    return value


@cached  # asked at each write of a value and copy: a few dtypes (finfo is made per call)
def narrower(dtype: torch.dtype, than: torch.dtype) -> bool:
    """Whether the float ``dtype`` holds fewer values than the float ``than``."""
    if not (dtype.is_floating_point and than.is_floating_point):
        return False
    return bool(torch.finfo(dtype).eps > torch.finfo(than).eps)


def _nonfinite_constant(expr: Expr) -> bool:
    """Whether ``expr`` is a constant (rounded or not) that is infinite or NaN."""
    while isinstance(expr, Round):
        expr = expr.x
    return isinstance(expr, Const) and not math.isfinite(expr.value)


def _inexact_integers(value: torch.Tensor) -> bool:
    """Whether an integer tensor holds a value binary64 does not hold exactly."""
    if value.dtype.is_floating_point or value.dtype == torch.bool or value.numel() == 0:
        return False
    if torch.iinfo(value.dtype).bits < 53:
        return False
    return bool(value.detach().abs().max() > 2**53)


def _covers_all(track: Track, view: torch.Tensor, region: Box) -> bool:
    """Whether ``region``, written through ``view``, is all of ``track``: a view of all
    of it is (most fills: no region asked again), else the region of its whole tensor
    (kept by shape) says."""
    if view is track.base:
        return True
    kept = track.whole()
    return kept is not None and region == kept[0]


def _check_fill(track: Track, action: Fill) -> None:
    """Raises :class:`Cannot` when ``action`` cannot fill the parameter ``track``
    (ParamSpec's checks). Fills found valid are remembered by what decides it (shape,
    dtype, initializer): a capture checks every fill it records, mostly the same few."""
    key = (track.shape, track.base.dtype, action.init)
    if _VALID_FILLS.get(key):
        return
    try:
        ParamSpec(track.name, track.shape, track.base.dtype, action.init, seed=0)
    except ShardInitError as why:  # ParamSpec validates its arguments: it refuses nothing
        raise Cannot(str(why)) from None
    if getattr(action.init, "elementwise", False):  # orthogonal's cap reads the environment
        _VALID_FILLS.put(key, True)


#: The fills :func:`_check_fill` found valid (the answer for a key never changes).
_VALID_FILLS: BoundedMap[tuple[object, ...], bool] = BoundedMap()


def _merge_reads(reads: list[tuple[Track, str]], more: Sequence[tuple[Track, str]]) -> None:
    """Adds to ``reads`` the parameter reads of ``more`` of parameters not in it yet."""
    for read in more:
        if all(read[0] is not seen for seen, _ in reads):
            reads.append(read)


def read_reason(read: tuple[Track, str]) -> str:
    """Why values read from a parameter (``read``: it and the read) are refused."""
    track, where_ = read
    return (
        f"it reads the values of {track.label} ({where_}), which do not exist on meta "
        "(only their shape and dtype may be used, e.g. by ones_like)"
    )


def _unknown_read(engine: Engine, view: torch.Tensor, track: Track | None) -> Bad | None:
    """The refusal of reading ``view`` of a buffer where it meets elements whose values
    are unknown (:func:`.folds.unknown_values`: no constructor value, or emptied, and
    not written since), which its stand-in holds no value of; else None (its values)."""
    why = "" if track is None else unknown_values(track)
    if track is None or not why or why not in bad_reasons(folded := engine.folded(track)):
        return None
    with torch_function_disabled():  # its own layout (see torch_function_disabled)
        if view.dtype != track.base.dtype:
            return Bad(why)  # another dtype's elements: any unknown one may be read
        offset = int(view.storage_offset() - track.base.storage_offset())
        shape, stride = view.shape, stored_strides(view)
    coords, _ = strided_coords(shape, stride, offset, track.shape)
    read = simplify(reindex(folded, coords, whole(shape)), whole(shape))
    return Bad(why) if why in bad_reasons(read) else None


def _box_read(coords: Sequence[Expr]) -> bool:
    """Whether a view reads its base at ``coords`` as a box: each base coordinate a
    constant or one view coordinate plus a constant, the view's dims in the base's order
    (no transpose, stride or repeat)."""
    dims = []
    for coord in coords:
        lin = as_lin(coord)
        if lin is None or len(lin.coefs) > 1 or any(c != 1 for _, c in lin.coefs):
            return False
        dims += [d for d, _ in lin.coefs]
    return dims == sorted(set(dims))


def _reads_before(expr: Expr) -> bool:
    return contains(expr, Before)


def _reaching(track: Track, box: Box) -> list[CapturedOp]:
    """The operations of ``track`` that reach ``box``, oldest first, from the last one
    that set all of it on (:meth:`Engine.folded_over`): a box inside one piece the
    writes cut the track into, by its chain (:meth:`.tracks.Track.pieces`), a box over
    several by a walk of the operations back."""
    pieces = track.pieces(box)
    ops: list[CapturedOp] = []
    if len(pieces) == 1:
        chain: Written = pieces[0][1]
        while chain is not None:
            op, chain = chain
            ops.append(op)
    else:
        for op in reversed(track.ops):
            if intersect(op.region, box) is None:
                continue
            ops.append(op)
            if sets_values(op.action) and region_contains(op.region, box):
                break
    ops.reverse()
    return ops


def _drop_branch(expr: Expr, never: Expr) -> Expr:
    """``expr``, the fold of a tensor every element of which was written, with the
    branches that select ``never`` (its unwritten elements' value) dropped: along the
    chain of writes' ``where(c, a, never)``; and for a temporary's refusal (a
    :class:`Bad`), anywhere (strided writes' boxes and conditions nest it inside other
    branches, :func:`~shardinit._program.rewrite.without_branch`)."""
    dropped = _drop_chain(expr, never)
    if isinstance(never, Bad) and contains(dropped, Bad):
        return without_branch(dropped, never)
    return dropped


def _drop_chain(expr: Expr, never: Expr) -> Expr:
    """``expr`` with each ``where(c, a, never)`` along its chain of ``b`` branches (the
    fold's one ``where`` per write) replaced by ``a``, through the rounding of a strided
    write's stored value (:class:`~shardinit._program.actions.Selected`)."""
    if isinstance(expr, Round):
        inner = _drop_chain(expr.x, never)
        return expr if inner is expr.x else Round(inner, expr.dtype)
    if isinstance(expr, Where):
        if expr.b is never:
            return _drop_chain(expr.a, never)
        return Where(expr.cond, expr.a, _drop_chain(expr.b, never))
    return expr


def box_coords(view: torch.Tensor, base: torch.Tensor) -> tuple[Box, tuple[Expr, ...]] | None:
    """The box ``view`` covers and its coordinates as expressions of the base's, when
    each of its dims runs along one base dim; else None. Kept per layout (the answer is
    a function of the two layouts alone: a model writes views of a few), and for a view
    some rows further (a row loop's, :func:`~shardinit._program.regions.row_shift`) as
    the same box moved, where its coordinates do not read dim 0's start."""
    with torch_function_disabled():  # their own layouts (see torch_function_disabled)
        shape, strides = tuple(view.shape), stored_strides(view)
        base_shape, base_strides = tuple(base.shape), stored_strides(base)
        offset = int(view.storage_offset() - base.storage_offset())
    rows, rest = row_shift(base_shape, base_strides, offset, view_span(shape, strides))
    key = (shape, strides, rest, base_shape, base_strides)
    kept = _BOX_COORDS.get(key)
    if kept is not None and kept[1]:
        found = kept[0]
        return None if found is None else (moved_rows(found[0], rows), found[1])
    key_here = (shape, strides, offset, base_shape, base_strides)
    kept = _BOX_COORDS.get(key_here)
    if kept is None:
        found = _box_coords(view, base)
        movable = found is None or _reads_no_row_start(found[1])
        if movable:
            moved = None if found is None else (moved_rows(found[0], -rows), found[1])
            _BOX_COORDS.put(key, (moved, True))
            return found
        kept = (found, False)
        _BOX_COORDS.put(key_here, kept)
    return kept[0]


def _reads_no_row_start(coords: Sequence[Expr]) -> bool:
    """Whether a view's coordinates (:func:`_box_coords`) are the same for the view
    moved along dim 0: none reads base dim 0 (a constant, or another dim's coordinate)."""
    return all(
        isinstance(coord, Const) or (isinstance(coord, Coord) and coord.dim != 0)
        for coord in coords
    )


#: :func:`box_coords` by the layouts of the view and the base: the answer and whether
#: it holds for the view moved along dim 0 (kept by its start in its row, and the box
#: kept as for a start in row 0), else by its own start.
_BOX_COORDS: BoundedMap[tuple[object, ...], tuple[tuple[Box, tuple[Expr, ...]] | None, bool]] = (
    BoundedMap()
)


def _box_coords(view: torch.Tensor, base: torch.Tensor) -> tuple[Box, tuple[Expr, ...]] | None:
    try:
        region = view_region(view, base)
    except Cannot:  # a view that is no box: the caller writes it by runs
        return None
    if region is None:
        return None
    box, axes = region
    coords: list[Expr] = []
    for dim, (size, axis) in enumerate(zip(view.shape, axes, strict=True)):
        if axis is None:
            if size > 1:
                digit = _digit_coord(view, base, dim, box)
                if digit is None:
                    return None
                coords.append(digit)
                continue
            coords.append(Const(0.0))
        elif box[axis][0] == 0:  # x - 0 is x: no fold asked (a row's columns, each row)
            coords.append(Coord(axis))
        else:
            coords.append(combine("sub", Coord(axis), Const(float(box[axis][0]))))
    return box, tuple(coords)


def _digit_coord(view: torch.Tensor, base: torch.Tensor, dim: int, box: Box) -> Expr | None:
    """The coordinate of view dim ``dim``, which splits a base dim (``w.unfold(0, k, k)``,
    a permuted ``view``), over the base's coordinates: the digit ``(flat - offset) //
    stride % size`` of the element's flat position past the view's start. Exact where
    every larger stride of the view is a multiple of ``stride * size`` (the digits above
    drop out of ``% size``) and the dims below span less than ``stride`` (the view holds
    each element once: :func:`~shardinit._program.regions.view_region`); else None."""
    strides = stored_strides(view)
    size, stride = int(view.shape[dim]), int(strides[dim])
    if any(
        int(n) > 1 and int(s) > stride and int(s) % (stride * size)
        for n, s in zip(view.shape, strides, strict=True)
    ):
        return None
    ranges = list(box)
    offset = int(view.storage_offset() - base.storage_offset())
    rel = index_op("sub", contiguous_index(tuple(base.shape)), Const(float(offset)), ranges)
    quotient = index_op("floordiv", rel, Const(float(stride)), ranges)
    return index_op("mod", quotient, Const(float(size)), ranges)


def _broadcasts_to(shape: tuple[int, ...], result: Sequence[int]) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``result`` (right-aligned, each dim
    1 or equal), as torch requires of an elementwise operation's operands."""
    if len(shape) > len(result):
        return False
    return all(s in (1, r) for s, r in zip(reversed(shape), reversed(tuple(result)), strict=False))


def constants_table(value: torch.Tensor) -> Expr:
    """The table of a CPU tensor's values, over its own coordinates: for values known to
    come from constants (:meth:`Engine.table_of` checks where others came from)."""
    flat = value.detach().to(torch.float64).contiguous().view(-1).clone()
    if value.dim() == 0:
        return Const(float(flat[0]))
    return Table(TableData(flat), contiguous_index(tuple(value.shape)))
