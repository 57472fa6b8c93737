"""The region a shard holds, from a torch-free description of its layout: the one home
of the region arithmetic (no torch import, so ``shardinit plan`` can use it).

A layout gives one :class:`Split` per mesh dim: ``Replicate()``, ``Shard(dim)`` or FSDP2's
``_StridedShard(dim, split_factor)`` (torch placement objects are converted to these at
the edge, :func:`shardinit._integration.placements.local_runs`). A shard is described per
tensor dim by the list of GLOBAL indices it holds, in local order, kept as runs
(``(start, stop)`` ranges). Each mesh dim's split refines that list, left to right, as
``torch.distributed.tensor._utils.compute_local_shape_and_global_offset`` does:

* ``Replicate()`` keeps the list;
* ``Shard(d)`` keeps chunk ``c`` of ``torch.chunk(list, n)`` (``c`` the mesh coordinate,
  ``n`` the mesh dim's size; trailing chunks may be short or empty);
* ``_StridedShard(d, split_factor=s)`` splits the list into ``s`` pieces with
  ``torch.chunk``, takes chunk ``c`` of ``n`` of each piece, and concatenates those.

The local shard is then the Cartesian product of per-dim runs: a list of boxes of the
global tensor (:func:`local_boxes`), each landing in a known slice of the local tensor.
A plain ``Shard`` layout is one box; a ``_StridedShard`` layout with uneven pieces can be
several. ``torch.chunk``'s arithmetic itself is the core's (``_core.chunk_range``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import _core

__all__ = [
    "MAX_NDIM",
    "Box",
    "LocalBox",
    "Run",
    "Split",
    "chunk_bounds",
    "full_runs",
    "layout_runs",
    "local_boxes",
    "merge_runs",
    "run_length",
    "split_length",
]

#: A half-open range ``[start, stop)`` of global indices along one dim.
Run = tuple[int, int]
#: A box of the global tensor: one ``(start, stop)`` pair per dim.
Box = tuple[Run, ...]

#: The most dims a parameter's shape may have: a shard reaches the core through the
#: buffer protocol (``Tensor.numpy()``, then a Python buffer), and numpy and CPython's
#: buffers take at most 64 dims (``NPY_MAXDIMS``, ``PyBUF_MAX_NDIM``).
MAX_NDIM = 64


@dataclass(frozen=True)
class Split:
    """The placement on one mesh dim: ``Replicate()`` (``dim`` None), ``Shard(dim)``, or
    with ``split_factor`` > 1 FSDP2's ``_StridedShard(dim, split_factor)``. ``dim`` is
    in ``[0, ndim)`` (the edge that builds a split normalizes negative dims)."""

    dim: int | None = None
    split_factor: int = 1

    def __str__(self) -> str:
        if self.dim is None:
            return "Replicate()"
        if self.split_factor > 1:
            return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"
        return f"Shard(dim={self.dim})"


@dataclass(frozen=True)
class LocalBox:
    """One box of the global tensor held by the local shard.

    Attributes:
        global_box: one ``(start, stop)`` per dim, in GLOBAL indices.
        local_start: where the box starts in the local tensor, per dim (its extent is
            the global box's).
    """

    global_box: Box
    local_start: tuple[int, ...]


def chunk_bounds(length: int, chunks: int, index: int) -> Run:
    """Positions ``[begin, end)`` of chunk ``index`` of ``torch.chunk`` over ``length``
    items into ``chunks`` (size ``ceil(length / chunks)``; trailing chunks short or
    empty)."""
    begin, end = _core.chunk_range(length, index, chunks)
    return int(begin), int(end)


def run_length(runs: Sequence[Run]) -> int:
    """How many indices ``runs`` spell out."""
    return sum(stop - start for start, stop in runs)


def _chunk_runs(runs: Sequence[Run], chunks: int, index: int) -> list[Run]:
    """Chunk ``index`` of ``torch.chunk`` applied to the index list ``runs`` spells out."""
    begin, end = chunk_bounds(run_length(runs), chunks, index)
    taken: list[Run] = []
    position = 0
    for start, stop in runs:
        low, high = max(begin, position), min(end, position + stop - start)
        if low < high:
            taken.append((start + low - position, start + high - position))
        position += stop - start
    return taken


def merge_runs(runs: Iterable[Run]) -> list[Run]:
    """Joins runs that continue one another and drops empty ones (fewer, larger boxes)."""
    merged: list[Run] = []
    for start, stop in runs:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        elif start < stop:
            merged.append((start, stop))
    return merged


def _split_runs(runs: Sequence[Run], split: Split, size: int, index: int) -> list[Run]:
    """The index list ``runs`` after ``split`` at coordinate ``index`` of a mesh dim of
    ``size``."""
    pieces = [_chunk_runs(runs, split.split_factor, j) for j in range(split.split_factor)]
    return merge_runs(run for piece in pieces for run in _chunk_runs(piece, size, index))


def split_length(length: int, split: Split, size: int, index: int) -> int:
    """The length ``split`` at coordinate ``index`` of ``size`` leaves of ``length``
    indices (the length of :func:`layout_runs`' runs along ``split.dim``, by arithmetic
    alone)."""
    total = 0
    for j in range(split.split_factor):
        begin, end = chunk_bounds(length, split.split_factor, j)
        low, high = chunk_bounds(end - begin, size, index)
        total += high - low
    return total


def full_runs(shape: Sequence[int]) -> list[list[Run]]:
    """The runs of a whole tensor of ``shape`` (one run per dim, none for a 0-size dim)."""
    return [[(0, size)] if size > 0 else [] for size in shape]


def layout_runs(
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
    coordinate: Sequence[int],
    splits: Sequence[Split],
) -> list[list[Run]]:
    """Per tensor dim, the runs of global indices the shard at ``coordinate`` of a mesh of
    ``mesh_shape`` holds under ``splits`` (one per mesh dim), in local order."""
    runs = full_runs(global_shape)
    for split, size, index in zip(splits, mesh_shape, coordinate, strict=True):
        if split.dim is not None:
            runs[split.dim] = _split_runs(runs[split.dim], split, int(size), int(index))
    return runs


def local_boxes(runs: Sequence[Sequence[Run]]) -> list[LocalBox]:
    """The boxes of the global tensor that make up a local shard, from its per-dim runs.

    Returns:
        One :class:`LocalBox` per combination of per-dim runs (none if the shard is
        empty); together they tile the local tensor.

    Example:
        >>> local_boxes([[(0, 2), (5, 6)], [(0, 4)]])[1]
        LocalBox(global_box=((5, 6), (0, 4)), local_start=(2, 0))
    """
    per_dim: list[list[tuple[Run, int]]] = []
    for dim_runs in runs:
        placed: list[tuple[Run, int]] = []
        position = 0
        for start, stop in dim_runs:
            placed.append(((start, stop), position))
            position += stop - start
        per_dim.append(placed)
    return [
        LocalBox(
            global_box=tuple(run for run, _ in combo),
            local_start=tuple(position for _, position in combo),
        )
        for combo in itertools.product(*per_dim)
    ]
