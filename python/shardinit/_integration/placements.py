"""The global region a DTensor's local shard holds, derived from its placements.

A DTensor's local shard is described per tensor dim by the list of GLOBAL indices it
holds, in local order. Each mesh dim's placement refines that list, left to right, as
``torch.distributed.tensor._utils.compute_local_shape_and_global_offset`` does:

* ``Replicate()`` keeps the list;
* ``Shard(d)`` keeps chunk ``c`` of ``torch.chunk(list, n)`` (``c`` the mesh coordinate,
  ``n`` the mesh dim's size; trailing chunks may be short or empty);
* ``_StridedShard(d, split_factor=s)`` (what FSDP2 on top of tensor parallelism
  produces) splits the list into ``s`` pieces with ``torch.chunk``, takes chunk ``c`` of
  ``n`` of each piece, and concatenates those.

The index list is kept as runs (``(start, stop)`` ranges of global indices), so the local
shard is the Cartesian product of per-dim runs: a list of boxes of the global tensor,
each landing in a known slice of the local tensor. A plain ``Shard`` layout is one box; a
``_StridedShard`` layout with uneven pieces can be several.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

import torch

from .._torch_compat import is_strided_shard, split_factor
from ..errors import ShardInitError

if TYPE_CHECKING:
    # Imported lazily at run time: torch.distributed.tensor adds seconds to
    # ``import shardinit`` and is only needed for DTensor models.
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Placement

#: A half-open range ``[start, stop)`` of global indices along one dim.
Run = tuple[int, int]


@dataclass(frozen=True)
class LocalBox:
    """One box of the global tensor held by the local shard.

    Attributes:
        global_box: one ``(start, stop)`` per dim, in GLOBAL indices.
        local_start: where the box starts in the local tensor, per dim (its extent is
            the global box's).
    """

    global_box: tuple[Run, ...]
    local_start: tuple[int, ...]


def _total(runs: Sequence[Run]) -> int:
    return sum(stop - start for start, stop in runs)


def _slice_runs(runs: Sequence[Run], begin: int, end: int) -> list[Run]:
    """Positions ``[begin, end)`` of the index list that ``runs`` spell out."""
    sliced: list[Run] = []
    position = 0
    for start, stop in runs:
        length = stop - start
        low = max(begin, position)
        high = min(end, position + length)
        if low < high:
            sliced.append((start + low - position, start + high - position))
        position += length
        if position >= end:
            break
    return sliced


def _chunk(runs: Sequence[Run], num_chunks: int, index: int) -> list[Run]:
    """Chunk ``index`` of ``torch.chunk(list, num_chunks)``, empty past the last chunk."""
    size = _total(runs)
    chunk_size = -(-size // num_chunks)  # ceil, as torch.chunk
    begin = min(index * chunk_size, size)
    end = min(begin + chunk_size, size)
    return _slice_runs(runs, begin, end)


def _merge(runs: Sequence[Run]) -> list[Run]:
    """Joins runs that continue one another (fewer, larger boxes to generate)."""
    merged: list[Run] = []
    for start, stop in runs:
        if start == stop:
            continue
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def full_runs(shape: Sequence[int]) -> list[list[Run]]:
    """The runs of a whole tensor of ``shape`` (one run per dim, none for a 0-size dim)."""
    return [[(0, size)] if size > 0 else [] for size in shape]


def local_runs(
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
    coordinate: Sequence[int],
    placements: Sequence[Placement],
    *,
    name: str = "parameter",
) -> list[list[Run]]:
    """Per tensor dim, the runs of global indices the shard at ``coordinate`` holds, in
    local order.

    Args:
        global_shape: the DTensor's global shape.
        mesh_shape: the device mesh's shape (one size per mesh dim).
        coordinate: this rank's coordinate in the mesh.
        placements: one placement per mesh dim.
        name: the parameter's name, for error messages.

    Returns:
        One list of ``(start, stop)`` runs per tensor dim; their lengths sum to the local
        shard's size along that dim.

    Raises:
        ShardInitError: a ``Partial`` or unknown placement, a shard dim out of range, or
            mismatched mesh/placement/coordinate lengths.

    Example:
        >>> from torch.distributed.tensor.placement_types import Shard, _StridedShard
        >>> local_runs((10, 4), (2, 2), (1, 0), [_StridedShard(0, split_factor=2), Shard(0)])
        [[(3, 5)], [(0, 4)]]
    """
    if not len(mesh_shape) == len(coordinate) == len(placements):
        raise ShardInitError(
            f"{name}: mesh shape {tuple(mesh_shape)}, coordinate {tuple(coordinate)} and "
            f"placements {tuple(placements)} must have one entry per mesh dim"
        )
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    runs: list[list[Run]] = [[(0, size)] if size > 0 else [] for size in global_shape]
    for mesh_dim, placement in enumerate(placements):
        num_chunks = int(mesh_shape[mesh_dim])
        index = int(coordinate[mesh_dim])
        # _StridedShard first: in some torch versions it is a subclass of Shard.
        if is_strided_shard(placement):
            dim = _check_dim(placement.dim, global_shape, placement, name)
            pieces_count = split_factor(placement)
            pieces = [_chunk(runs[dim], pieces_count, j) for j in range(pieces_count)]
            runs[dim] = _merge(
                [run for piece in pieces for run in _chunk(piece, num_chunks, index)]
            )
        elif isinstance(placement, Shard):
            dim = _check_dim(placement.dim, global_shape, placement, name)
            runs[dim] = _merge(_chunk(runs[dim], num_chunks, index))
        elif isinstance(placement, Replicate):
            continue
        elif isinstance(placement, Partial):
            raise ShardInitError(
                f"{name}: placement {placement} on mesh dim {mesh_dim} holds partial sums, "
                "not a region of the parameter; redistribute it to Shard or Replicate "
                "before materialize"
            )
        else:
            raise ShardInitError(
                f"{name}: unknown placement {placement!r} ({type(placement).__name__}) on "
                f"mesh dim {mesh_dim}; materialize supports Shard, _StridedShard and "
                "Replicate"
            )
    return runs


def _check_dim(dim: int, global_shape: Sequence[int], placement: Placement, name: str) -> int:
    ndim = len(global_shape)
    if not -ndim <= dim < ndim:
        raise ShardInitError(
            f"{name}: placement {placement} shards dim {dim} but the parameter has shape "
            f"{tuple(global_shape)}"
        )
    return dim % ndim


def local_runs_of(tensor: DTensor, *, name: str = "parameter") -> list[list[Run]]:
    """:func:`local_runs` for this rank's shard of ``tensor``.

    Raises:
        ShardInitError: this rank is not in the DTensor's mesh, the placements are not
            supported, or the computed local shape differs from the local tensor's.
    """
    mesh = tensor.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ShardInitError(f"{name}: this rank is not part of the parameter's device mesh")
    runs = local_runs(
        tuple(tensor.shape), tuple(mesh.shape), tuple(coordinate), tensor.placements, name=name
    )
    expected = tuple(_total(dim_runs) for dim_runs in runs)
    actual = tuple(tensor.to_local().shape)
    if expected != actual:
        raise ShardInitError(
            f"{name}: placements {tensor.placements} on mesh {tuple(mesh.shape)} at coordinate "
            f"{tuple(coordinate)} give a local shape {expected}, but the local tensor has "
            f"shape {actual}; this layout is not supported"
        )
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
    boxes = []
    for combo in itertools.product(*per_dim):
        boxes.append(
            LocalBox(
                global_box=tuple(run for run, _ in combo),
                local_start=tuple(position for _, position in combo),
            )
        )
    return boxes


def is_dtensor(tensor: object) -> TypeGuard[DTensor]:
    """Whether ``tensor`` is a DTensor, without importing torch.distributed.tensor."""
    # No tensor is a DTensor unless torch.distributed.tensor was imported: checking
    # sys.modules keeps that import (seconds) off the plain-model path.
    module = sys.modules.get("torch.distributed.tensor")
    dtensor_type = getattr(module, "DTensor", None)
    return dtensor_type is not None and isinstance(tensor, dtensor_type)


def local_of(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor holding this rank's elements: a DTensor's local shard, else itself."""
    if is_dtensor(tensor):
        local = tensor.to_local()
        assert isinstance(local, torch.Tensor)
        return local
    return tensor
