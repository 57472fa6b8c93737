"""The global region a DTensor's local shard holds, derived from its placements: the
edge where torch placement objects become the torch-free :class:`~shardinit._layout.Split`
(:func:`split_of`, which refuses ``Partial`` and unknown placements naming the
parameter), whose region arithmetic (per-dim runs of global indices, the boxes they make)
is :mod:`shardinit._layout`'s, shared with ``shardinit plan``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard

import torch

from .._layout import LocalBox, Run, Split, full_runs, layout_runs, local_boxes, run_length
from .._torch_compat import is_strided_shard, split_factor
from ..errors import ShardInitError

if TYPE_CHECKING:
    # Imported lazily at run time: torch.distributed.tensor adds seconds to
    # ``import shardinit`` and is only needed for DTensor models.
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Placement

__all__ = [
    "LocalBox",
    "Run",
    "full_runs",
    "is_dtensor",
    "local_boxes",
    "local_of",
    "local_runs",
    "local_runs_of",
    "split_of",
]


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
    splits = [
        split_of(placement, mesh_dim, global_shape, name)
        for mesh_dim, placement in enumerate(placements)
    ]
    return layout_runs(global_shape, mesh_shape, coordinate, splits)


def split_of(placement: Placement, mesh_dim: int, global_shape: Sequence[int], name: str) -> Split:
    """The torch-free :class:`~shardinit._layout.Split` of a torch placement on
    ``mesh_dim`` (the edge where torch placements enter the region arithmetic).

    Raises:
        ShardInitError: a ``Partial`` or unknown placement, or a shard dim out of range.
    """
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    # _StridedShard first: in some torch versions it is a subclass of Shard.
    if is_strided_shard(placement):
        dim = _check_dim(placement.dim, global_shape, placement, name)
        return Split(dim, split_factor(placement))
    if isinstance(placement, Shard):
        return Split(_check_dim(placement.dim, global_shape, placement, name))
    if isinstance(placement, Replicate):
        return Split()
    if isinstance(placement, Partial):
        raise ShardInitError(
            f"{name}: placement {placement} on mesh dim {mesh_dim} holds partial sums, "
            "not a region of the parameter; redistribute it to Shard or Replicate "
            "before materialize"
        )
    raise ShardInitError(
        f"{name}: unknown placement {placement!r} ({type(placement).__name__}) on "
        f"mesh dim {mesh_dim}; materialize supports Shard, _StridedShard and "
        "Replicate"
    )


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
    expected = tuple(run_length(dim_runs) for dim_runs in runs)
    actual = tuple(tensor.to_local().shape)
    if expected != actual:
        raise ShardInitError(
            f"{name}: placements {tensor.placements} on mesh {tuple(mesh.shape)} at coordinate "
            f"{tuple(coordinate)} give a local shape {expected}, but the local tensor has "
            f"shape {actual}; this layout is not supported"
        )
    return runs


_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def is_dtensor(tensor: object) -> TypeGuard[DTensor]:
    """Whether ``tensor`` is a DTensor, without importing torch.distributed.tensor."""
    # Most calls ask about a plain tensor or Parameter (materialize asks several times per
    # parameter): neither exact type is a DTensor, nor does either override __class__.
    if type(tensor) in _PLAIN_TYPES:
        return False
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
