"""The tensors a capture follows, each with what has been written to it so far: a
parameter's stand-in, a temporary that init code made (``new_empty``, ``torch.zeros``,
``cat``, ...), or a buffer's real stand-in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ...._program.actions import CapturedOp, selects_values, sets_all_of, sets_values
from ...._program.cannot import Cannot
from ...._program.coverage import BoxMap, Coverage
from ...._program.regions import Box, whole_region
from ...._program.regions import contains as region_contains
from ...._torch_compat import (
    stored_contiguous,
    stored_strides,
    torch_function_disabled,
    tree_leaves,
    tree_map,
)

__all__ = [
    "EAGER_LAYOUT",
    "Track",
    "Written",
    "give_eager_layout",
    "give_memory_format",
    "memory_format_now",
    "memory_format_of",
    "run_op",
    "same_view",
    "storage_id",
]

TrackKind = Literal["param", "temp", "buffer"]

#: The operations that reach a piece of a track, newest first: ``(op, earlier)``, with
#: ``earlier`` None past the one that set all of the piece (:meth:`Track.pieces`).
Written = tuple[CapturedOp, "Written | None"] | None


_LAYOUT_PARTS = ("class", "shape", "strides", "storage offset", "dtype", "storage")


def _layout(tensor: torch.Tensor) -> tuple[object, ...]:
    with torch_function_disabled():  # the tensor's own layout (see torch_function_disabled)
        try:
            storage: int | None = id(tensor.untyped_storage())  # storage_id, inline
        except (RuntimeError, NotImplementedError):
            storage = None
        return (
            type(tensor).__name__,
            tuple(tensor.shape),
            stored_strides(tensor),
            tensor.storage_offset(),
            tensor.dtype,
            storage,
        )


def storage_id(tensor: torch.Tensor) -> int | None:
    """The identity of ``tensor``'s storage (stable while the storage object lives: a
    :class:`Track` keeps it alive), or None for tensors without one."""
    try:
        with torch_function_disabled():  # its own storage, not an outer mode's answer
            return id(tensor.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


@dataclass(eq=False)
class Track:
    """One followed tensor.

    Attributes:
        kind: ``"param"`` (a parameter's meta stand-in), ``"temp"`` (a temporary) or
            ``"buffer"`` (a meta buffer's real CPU stand-in).
        base: the contiguous tensor whose storage is followed; regions are its boxes.
        label: how messages name it, e.g. ``parameter 'lm_head.weight'``.
        name: the parameter's or buffer's canonical name ("" for temporaries).
        holder: for a parameter stand-in, the dotted path of the holder it was made for.
        ops: what was written, first to last (for buffers: only the regions matter).
        from_random: a temporary computed (by operations shardinit does not follow) from
            random values: its CPU values are torch's, never a table.
        reads: for a temporary computed from parameters' values: each parameter and its
            read (``"mul at file:line"``). Its shape and dtype may be used
            (``ones_like``); its values may go back into that parameter only (by
            elementwise steps); reaching another parameter, a buffer or Python, they are
            refused, naming them.
        emptied: for a buffer's stand-in, ``to_empty`` emptied it (:mod:`.modulecalls`):
            unless init code computes it again, the capture refuses it.
        memory_format: the memory format init code gave the parameter or buffer
            (``module.to(memory_format=...)``, :mod:`.modulecalls`); the stand-in itself
            stays contiguous (its boxes are row-major), the meta tensor takes it after.
        strides: the strides init code gave a parameter or buffer by ``tensor.data =
            value`` of a dense ``value`` that is not row-major (eager's tensor takes
            them); as with ``memory_format``, the meta tensor takes them after.
        unknown: for a buffer's stand-in whose values before init_fn no constructor
            value gives, why they are unknown: elements init code did not write read as
            a refusal saying so (:func:`.folds.never_written`); "" when they are known.
    """

    kind: TrackKind
    base: torch.Tensor
    label: str
    name: str = ""
    holder: str = ""
    ops: list[CapturedOp] = field(default_factory=list)
    from_random: bool = False
    reads: list[tuple[Track, str]] = field(default_factory=list)
    emptied: bool = False
    memory_format: torch.memory_format | None = None
    strides: tuple[int, ...] | None = None
    unknown: str = ""

    def __post_init__(self) -> None:
        # Holding the storage object keeps its id() from being reused during the capture.
        with torch_function_disabled():
            self.storage = self.base.untyped_storage()
        # What check_unchanged compares against: asked of the parameters' and buffers'
        # stand-ins only (a temporary made per operation need not pay for it).
        self.layout = None if self.kind == "temp" else _layout(self.base)
        self._kept_unions: _Unions | None = None  # made at the first question
        self._kept_pieces: tuple[int, CapturedOp | None, BoxMap] | None = None

    def check_unchanged(self) -> None:
        """Raises :class:`~shardinit._program.cannot.Cannot` saying what became different
        about the tensor since it was followed (its class, shape, strides, dtype or
        storage: init code made it another tensor)."""
        now = _layout(self.base)
        if self.layout is None or now == self.layout:  # (a temporary: nothing to compare)
            return
        if now[-1] != self.layout[-1]:  # a swap changes all: the storage says it best
            raise Cannot("its storage was replaced by another tensor's")
        for what, before, after in zip(_LAYOUT_PARTS, self.layout, now, strict=True):
            if before != after:
                raise Cannot(f"its {what} changed from {before} to {after}")

    @property
    def shape(self) -> tuple[int, ...]:
        with torch_function_disabled():  # asked at every write and read
            return tuple(self.base.shape)

    def whole(self) -> tuple[Box, tuple[int | None, ...]] | None:
        """The region of all of ``base`` (:func:`shardinit._program.regions.view_region`
        of it), kept by shape (:func:`~shardinit._program.regions.whole_region`): read
        at each write, and init code that resizes a temporary changes it."""
        with torch_function_disabled():  # its own shape, not a mode's answer
            return whole_region(tuple(self.base.shape))

    def written(self, region: Box) -> bool:
        """Whether recorded writes (anything but a scale) cover all of ``region``. The
        last operation alone answers when it set all of it (a temporary a source or a
        step made whole, asked at each fold): no union built for it."""
        last = self.ops[-1] if self.ops else None
        if (
            last is not None
            and sets_values(last.action)
            and len(last.region) == len(region)
            and region_contains(last.region, region)
        ):
            return True
        unions = self._unions()
        if unions.written.covers(region):
            return True  # (strided writes, counted exactly, only where some were made)
        return unions.selecting and sets_all_of(self.ops, self.shape, region)

    def touched(self, region: Box) -> bool:
        """Whether some recorded operation (a scale too) covers an element of ``region``."""
        return self._unions().touched.meets(region)

    def stepped(self, region: Box) -> bool:
        """Whether some recorded operation that reads the values before it (a step, a
        scale) covers an element of ``region``: kept as the other unions, so a step
        on each of thousands of rows asks no walk of the rows before it."""
        return self._unions().stepped.meets(region)

    def pieces(self, box: Box) -> list[tuple[Box, Written]]:
        """The pieces of the tensor that meet ``box`` (clipped to it), each with the
        operations that reach it: the last one that set all of the piece first, then
        the later ones (steps, scales), as a chain newest first (:data:`Written`); None
        where nothing was written. Kept as :attr:`_unions` is: a bisection per piece,
        however many pieces were written."""
        ops, shape = self.ops, self.shape
        kept = self._kept_pieces
        if (
            kept is None
            or kept[0] > len(ops)
            or kept[2].shape != shape
            or (kept[0] and ops[kept[0] - 1] is not kept[1])
        ):
            kept = (0, None, BoxMap(shape, None))
        pieces = kept[2]
        for op in ops[kept[0] :]:
            pieces.update(op.region, _written_by(op))
        self._kept_pieces = (len(ops), ops[-1] if ops else None, pieces)
        return pieces.pieces(box)  # type: ignore[return-value]

    def _unions(self) -> _Unions:
        """The unions of the boxes of the recorded operations, kept merged and extended
        by the operations appended since (the store only appends, or drops all: then
        they are built again), so a tensor written row by row answers at once however
        many rows were written."""
        kept, ops, ndim = self._kept_unions, self.ops, len(self.shape)
        if kept is None or not kept.prefix_of(ops, ndim):
            kept = _Unions.empty(ndim)
        elif kept.count == len(ops):
            return kept  # nothing appended since
        selecting = kept.selecting
        for op in ops[kept.count :]:
            selecting = selecting or selects_values(op.action)
            same = kept.written.same_as(kept.touched)  # (all ops so far set values)
            kept.touched.add(op.region)
            if sets_values(op.action):
                if same:  # one union to grow, not two
                    kept.written.take(kept.touched)
                else:
                    kept.written.add(op.region)
            else:
                kept.stepped.add(op.region)
        self._kept_unions = _Unions(
            len(ops), ops[-1] if ops else None, kept.written, kept.touched, kept.stepped,
            selecting,
        )  # fmt: skip
        return self._kept_unions


def _written_by(op: CapturedOp) -> Callable[[object], object]:
    """How ``op`` changes the chain of a piece it covers (:data:`Written`)."""
    if sets_values(op.action):
        return lambda before: (op, None)
    return lambda before: (op, before)


@dataclass(frozen=True)
class _Unions:
    """The unions of the boxes the first ``count`` operations of a track cover: those
    that set values (``written``), all (``touched``) and those that read the values
    before them (``stepped``); ``last`` the final operation (the list holds it alive,
    so its identity witnesses the prefix); ``selecting``: whether one of them sets the
    elements of a strided view (:class:`~shardinit._program.actions.Selected`), whose
    box the unions hold but not which of its elements it set."""

    count: int
    last: CapturedOp | None
    written: Coverage
    touched: Coverage
    stepped: Coverage
    selecting: bool = False

    def prefix_of(self, ops: list[CapturedOp], ndim: int) -> bool:
        """Whether these are the unions of a prefix of ``ops``, of a tensor of ``ndim``."""
        if self.written.ndim != ndim or self.count > len(ops):
            return False
        return self.count == 0 or ops[self.count - 1] is self.last

    @staticmethod
    def empty(ndim: int) -> _Unions:
        return _Unions(0, None, Coverage(ndim), Coverage(ndim), Coverage(ndim))


def same_view(view: torch.Tensor, value: object) -> bool:
    """Whether ``value`` is a tensor viewing exactly the elements of ``view``, in the same
    layout (``w[idx] *= 2`` stores the scaled view back into itself)."""
    return bool(
        isinstance(value, torch.Tensor)
        and storage_id(value) == storage_id(view)
        and value.storage_offset() == view.storage_offset()
        and value.shape == view.shape
        and stored_strides(value) == stored_strides(view)
    )


def run_op(func: object, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``func(*args, **kwargs)`` for the capture, where a parameter's stand-in is a meta
    tensor that reports its run-time device: init code mixes it with tensors it made on
    that device (``torch.tensor(..., device=p.device)``), which torch refuses to combine
    with a meta tensor. Then the op runs with those on meta too: the capture follows its
    values from the originals, so only the result's shape and dtype are needed."""
    leaves = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
    if not any(leaf.is_meta for leaf in leaves):
        return func(*args, **kwargs)  # type: ignore[operator]
    if any(_real_operand(leaf) for leaf in leaves):
        args, kwargs = _on_meta(args, kwargs, _real_operand)
    try:
        return func(*args, **kwargs)  # type: ignore[operator]
    except (RuntimeError, NotImplementedError):
        # Some meta kernels take no 0-d CPU operand either (index_copy's source): all
        # on meta, or torch's error as it was.
        if not any(_zero_dim_cpu(leaf) for leaf in tree_leaves((args, kwargs))):
            raise
    args, kwargs = _on_meta(args, kwargs, _zero_dim_cpu)
    return func(*args, **kwargs)  # type: ignore[operator]


def _on_meta(
    args: Sequence[Any], kwargs: Mapping[str, Any], which: Any
) -> tuple[Sequence[Any], Mapping[str, Any]]:
    moved: tuple[Sequence[Any], Mapping[str, Any]] = tree_map(
        lambda v: v.to("meta") if isinstance(v, torch.Tensor) and which(v) else v,
        (tuple(args), dict(kwargs)),
    )
    return moved


def _zero_dim_cpu(value: object) -> bool:
    return isinstance(value, torch.Tensor) and not value.is_meta and value.dim() == 0


def _real_operand(tensor: torch.Tensor) -> bool:
    # A 0-d CPU tensor combines with any device (torch treats it as a number).
    return not tensor.is_meta and (tensor.dim() > 0 or tensor.device.type != "cpu")


#: The attribute of a stand-in (or its view) that holds a meta tensor of eager's layout
#: where that is not row-major; shardinit's own: never given to a user's tensor.
EAGER_LAYOUT = "_eager_layout"


def give_eager_layout(standin: torch.Tensor, layout: torch.Tensor) -> None:
    """Notes on ``standin`` (row-major) the layout its parameter has in eager torch
    (``layout``'s strides), where that is not row-major (:mod:`..session.threads`)."""
    with torch_function_disabled():  # the capture's own tensors, inside its mode too
        if stored_contiguous(layout):
            standin.__dict__.pop(EAGER_LAYOUT, None)
            return
        eager = torch.empty_like(layout, device="meta")  # dense layouts keep their strides
        if eager.stride() == stored_strides(layout):
            standin.__dict__[EAGER_LAYOUT] = eager


def give_memory_format(track: Track, memory_format: torch.memory_format) -> None:
    """Gives a parameter or buffer the memory format init code gave it
    (``module.to(memory_format=...)``, ``p.data = p.data.contiguous(memory_format=...)``):
    kept on the track, which the meta tensor takes after the capture; the stand-in stays
    row-major (its boxes are) and notes eager's layout (:func:`give_eager_layout`)."""
    track.memory_format = memory_format
    with torch_function_disabled():  # a plain meta tensor of the layout, not a temporary
        base = track.base
        layout = torch.empty(
            tuple(base.shape), dtype=base.dtype, device="meta", memory_format=memory_format
        )
    give_eager_layout(base, layout)


#: The dense layouts a tensor may have: row-major first.
_FORMATS = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)
_DIMS = {torch.contiguous_format: None, torch.channels_last: 4, torch.channels_last_3d: 5}


def memory_format_of(tensor: torch.Tensor) -> torch.memory_format | None:
    """The memory format whose strides ``tensor`` has exactly (those of its size-1
    dims too, which torch keeps): the layout a parameter takes from it by ``.data =`` or
    a replacement; else ``torch.contiguous_format`` where it is row-major, else None
    (a strided view)."""
    with torch_function_disabled():  # the tensor's own layout
        strides, shape = tuple(stored_strides(tensor)), tuple(tensor.shape)
        for memory_format in _FORMATS:
            if _DIMS[memory_format] not in (None, len(shape)):
                continue
            made = torch.empty(shape, device="meta", memory_format=memory_format)
            if made.stride() == strides:
                return memory_format
        return torch.contiguous_format if stored_contiguous(tensor) else None


def memory_format_now(track: Track) -> torch.memory_format | None:
    """The memory format a parameter or buffer has so far: the one init code gave it,
    else its meta tensor's (noted on the stand-in: :func:`give_eager_layout`), else
    row-major."""
    if track.memory_format is not None:
        return track.memory_format
    eager = track.base.__dict__.get(EAGER_LAYOUT)
    return torch.contiguous_format if eager is None else memory_format_of(eager)
