"""DTensor local-region geometry (shardinit.placements) against torch's own splitting.

torch's placements split a tensor with ``_split_tensor`` (what ``distribute_tensor``
does); applying them left to right to an index tensor gives the exact global indices a
mesh coordinate holds. shardinit's runs must spell out the same indices in the same
order, for even and uneven sizes, empty shards and ``_StridedShard``.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from shardinit import ShardInitError
from shardinit._integration.placements import local_boxes, local_runs


def torch_indices(size: int, mesh_shape, coordinate, placements) -> list[int]:
    """The global indices along dim 0 held at ``coordinate``, by torch's own split."""
    local = torch.arange(size)
    for mesh_dim, placement in enumerate(placements):
        if isinstance(placement, Replicate):
            continue
        shards, _ = placement._split_tensor(
            local, mesh_shape[mesh_dim], with_padding=False, contiguous=True
        )
        local = shards[coordinate[mesh_dim]]
    return local.tolist()


def runs_indices(runs: list[tuple[int, int]]) -> list[int]:
    return [index for start, stop in runs for index in range(start, stop)]


PLACEMENT_SETS = [(2,), (3,), (4,), (2, 2), (2, 3), (3, 2)]


def placements_for(mesh_shape: tuple[int, ...]):
    options = [Replicate(), Shard(0)] + [_StridedShard(0, split_factor=s) for s in (2, 3)]
    return itertools.product(options, repeat=len(mesh_shape))


@pytest.mark.parametrize("mesh_shape", PLACEMENT_SETS)
def test_runs_equal_torch_split(mesh_shape: tuple[int, ...]) -> None:
    checked = 0
    multi_box = 0
    for placements in placements_for(mesh_shape):
        for size in (0, 1, 2, 3, 5, 7, 10, 13):
            for coordinate in itertools.product(*(range(n) for n in mesh_shape)):
                expected = torch_indices(size, mesh_shape, coordinate, placements)
                runs = local_runs((size, 3), mesh_shape, coordinate, placements)
                assert runs_indices(runs[0]) == expected, (placements, size, coordinate)
                assert runs[1] == [(0, 3)]
                multi_box += len(runs[0]) > 1
                checked += 1
    assert checked > 0
    if any(n > 1 for n in mesh_shape):
        # _StridedShard without a following Shard on the same dim is not one box.
        assert multi_box > 0


def test_fsdp2_tp_layout_matches_torch_notes() -> None:
    # FSDP2 on a TP Colwise weight: (_StridedShard(0, sf=2), Shard(0)) on a 2x2 mesh;
    # a 10-row weight is held as rows 0:3, 5:8, 3:5, 8:10 by ranks 0..3.
    placements = (_StridedShard(0, split_factor=2), Shard(0))
    rows = [
        local_runs((10, 4), (2, 2), coord, placements)[0]
        for coord in [(0, 0), (0, 1), (1, 0), (1, 1)]
    ]
    assert rows == [[(0, 3)], [(5, 8)], [(3, 5)], [(8, 10)]]


def test_local_boxes_tile_the_local_tensor() -> None:
    runs = [[(0, 2), (5, 7)], [(1, 3), (4, 5)]]
    boxes = local_boxes(runs)
    assert [(b.global_box, b.local_start) for b in boxes] == [
        (((0, 2), (1, 3)), (0, 0)),
        (((0, 2), (4, 5)), (0, 2)),
        (((5, 7), (1, 3)), (2, 0)),
        (((5, 7), (4, 5)), (2, 2)),
    ]
    assert local_boxes([[], [(0, 3)]]) == []
    assert len(local_boxes([])) == 1  # a 0-d tensor is one (empty) box


def test_partial_and_unknown_placements_are_refused() -> None:
    with pytest.raises(ShardInitError, match=r"w: placement .*partial sums"):
        local_runs((4,), (2,), (0,), [Partial()], name="w")

    class Odd:
        pass

    with pytest.raises(ShardInitError, match=r"w: unknown placement .*Odd"):
        local_runs((4,), (2,), (0,), [Odd()], name="w")  # type: ignore[list-item]
    with pytest.raises(ShardInitError, match="shards dim 2"):
        local_runs((4, 4), (2,), (0,), [Shard(2)], name="w")
