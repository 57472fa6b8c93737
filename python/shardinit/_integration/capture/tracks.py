"""The tensors a capture follows, each with what has been written to it so far: a
parameter's stand-in, a temporary that init code made (``new_empty``, ``torch.zeros``,
``cat``, ...), or a buffer's real stand-in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from .records import CapturedOp, sets_values
from .regions import Box, box_union_covers, intersect

__all__ = ["Track", "storage_id"]

TrackKind = Literal["param", "temp", "buffer"]


def storage_id(tensor: torch.Tensor) -> int | None:
    """The identity of ``tensor``'s storage (stable while the storage object lives: a
    :class:`Track` keeps it alive), or None for tensors without one."""
    try:
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

    def __post_init__(self) -> None:
        # Holding the storage object keeps its id() from being reused during the capture.
        self.storage = self.base.untyped_storage()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.base.shape)

    def written(self, region: Box) -> bool:
        """Whether recorded writes (anything but a scale) cover all of ``region``."""
        if math.prod(stop - start for start, stop in region) == 0:
            return True
        pieces = []
        for op in self.ops:
            if not sets_values(op.action):
                continue
            common = intersect(op.region, region)
            if common is not None:
                pieces.append(
                    tuple((a - r0, b - r0) for (a, b), (r0, _) in zip(common, region, strict=True))
                )
        return box_union_covers(pieces, [stop - start for start, stop in region])
